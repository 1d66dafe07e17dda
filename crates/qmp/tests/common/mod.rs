//! A fake QMP server for tests: a thread with a `UnixListener` in a private
//! temporary directory that replays a script, usually parsed from a QEMU
//! transcript (`->` sent by the client, `<-` received from QEMU).
//!
//! For each step it reads one command from the client, checks its `execute`
//! name (and `arguments`, if the step has them), then performs the step's
//! action. Reply frames (`return`/`error`) get the `id` the client sent;
//! events and other frames are sent verbatim. When the script ends the
//! server closes the connection, as QEMU does after `quit`.

#![allow(dead_code)] // each test binary uses a different subset

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

/// What the server does after receiving a step's command.
#[derive(Debug, Clone)]
pub enum Action {
    /// Send these frames (raw JSON text, one per line).
    Reply(Vec<String>),
    /// Send nothing now; send these frames (with this command's id) right
    /// before the *next* step's frames, i.e. a late reply.
    ReplyLate(Vec<String>),
    /// Never answer; go on with the next step.
    Silent,
    /// Close the connection immediately (the rest of the script is skipped).
    Close,
    /// Send these frames without injecting the id.
    ReplyWithoutId(Vec<String>),
    /// Send `count` frames made from `template` (its first `{n}` replaced
    /// by 0, 1, 2, ...), streamed without building them all in memory, then
    /// `then` with this command's id: a flood of events before a reply.
    Flood {
        template: String,
        count: usize,
        then: Vec<String>,
    },
    /// Send these frames (with this command's id), then stop reading, as a
    /// hung QEMU would: the connection stays open, unread, until
    /// [`FakeServer::finish`] (the rest of the script is skipped).
    Stall(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct Step {
    pub command: String,
    pub arguments: Option<Value>,
    pub action: Action,
}

impl Step {
    pub fn new(command: &str, action: Action) -> Step {
        Step {
            command: command.to_owned(),
            arguments: None,
            action,
        }
    }

    pub fn reply(command: &str, frames: &[&str]) -> Step {
        Step::new(
            command,
            Action::Reply(frames.iter().map(|s| s.to_string()).collect()),
        )
    }
}

#[derive(Debug, Clone)]
pub struct Script {
    /// Frames sent on connect (the greeting).
    pub greeting: Vec<String>,
    pub steps: Vec<Step>,
    /// After the last step, keep the connection open until the client closes
    /// it (instead of closing it like QEMU after `quit`).
    pub linger: bool,
}

pub const GREETING_7_2: &str = r#"{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18+b3"}, "capabilities": ["oob"]}}"#;

impl Script {
    /// Greeting + `qmp_capabilities` followed by `steps`.
    pub fn with_handshake(steps: Vec<Step>) -> Script {
        let mut all = vec![Step::reply("qmp_capabilities", &[r#"{"return": {}}"#])];
        all.extend(steps);
        Script {
            greeting: vec![GREETING_7_2.to_owned()],
            steps: all,
            linger: false,
        }
    }

    /// Parses a transcript: `<-` lines before the first `->` are the
    /// greeting; every `->` line starts a step whose action replies with the
    /// `<-` lines that follow it. Other lines are ignored.
    pub fn from_transcript(text: &str) -> Script {
        let mut script = Script {
            greeting: Vec::new(),
            steps: Vec::new(),
            linger: false,
        };
        for line in text.lines() {
            if let Some(sent) = line.strip_prefix("-> ") {
                let v: Value = serde_json::from_str(sent).expect("-> line is JSON");
                script.steps.push(Step {
                    command: v["execute"].as_str().expect("execute").to_owned(),
                    arguments: v.get("arguments").cloned(),
                    action: Action::Reply(Vec::new()),
                });
            } else if let Some(recv) = line.strip_prefix("<- ") {
                match script.steps.last_mut() {
                    None => script.greeting.push(recv.to_owned()),
                    Some(Step {
                        action: Action::Reply(frames),
                        ..
                    }) => frames.push(recv.to_owned()),
                    Some(_) => unreachable!(),
                }
            }
        }
        script
    }

    pub fn from_fixture(name: &str) -> Script {
        Script::from_transcript(&fixture(name))
    }

    /// Greeting and `qmp_capabilities`, after which the server never reads
    /// again ([`Action::Stall`]).
    pub fn stalling_after_handshake() -> Script {
        Script {
            greeting: vec![GREETING_7_2.to_owned()],
            steps: vec![Step::new(
                "qmp_capabilities",
                Action::Stall(vec![r#"{"return": {}}"#.to_owned()]),
            )],
            linger: false,
        }
    }

    pub fn lingering(mut self) -> Script {
        self.linger = true;
        self
    }
}

pub fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A private temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("abqmp-{}-{n}-{nanos}", std::process::id()));
        fs::create_dir(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub struct FakeServer {
    dir: TempDir,
    socket: PathBuf,
    thread: Option<JoinHandle<Vec<String>>>,
    /// Set by `finish` to end an [`Action::Stall`].
    release: Arc<AtomicBool>,
}

/// How long the server waits for the client's next command before giving up.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);

impl FakeServer {
    /// Binds the socket and serves one connection with `script`.
    pub fn start(script: Script) -> FakeServer {
        let dir = TempDir::new();
        let socket = dir.path().join("qmp.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        let release = Arc::new(AtomicBool::new(false));
        let released = Arc::clone(&release);
        let thread = thread::spawn(move || {
            let (stream, _) = match listener.accept() {
                Ok(c) => c,
                Err(e) => return vec![format!("accept: {e}")],
            };
            serve(stream, script, &released)
        });
        FakeServer {
            dir,
            socket,
            thread: Some(thread),
            release,
        }
    }

    pub fn path(&self) -> &Path {
        &self.socket
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Waits for the server thread and returns the problems it saw (commands
    /// that did not match the script, missing commands, I/O errors).
    pub fn finish(mut self) -> Vec<String> {
        self.release.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("not finished twice")
            .join()
            .unwrap_or_else(|_| vec!["server thread panicked".into()])
    }
}

/// Injects `id` into reply frames; returns other frames unchanged.
fn with_id(frame: &str, id: Option<&Value>) -> String {
    let Ok(Value::Object(mut obj)) = serde_json::from_str::<Value>(frame) else {
        return frame.to_owned(); // deliberately malformed test input
    };
    if let Some(id) = id {
        if obj.contains_key("return") || obj.contains_key("error") {
            obj.insert("id".into(), id.clone());
        }
    }
    Value::Object(obj).to_string()
}

fn send(stream: &mut UnixStream, frames: &[String], problems: &mut Vec<String>) -> bool {
    for f in frames {
        if let Err(e) = stream
            .write_all(f.as_bytes())
            .and_then(|()| stream.write_all(b"\n"))
        {
            problems.push(format!("write: {e}"));
            return false;
        }
    }
    true
}

fn flood(
    stream: &mut UnixStream,
    template: &str,
    count: usize,
    problems: &mut Vec<String>,
) -> bool {
    let (head, tail) = template.split_once("{n}").unwrap_or((template, ""));
    for n in 0..count {
        if let Err(e) = stream
            .write_all(head.as_bytes())
            .and_then(|()| write!(stream, "{n}"))
            .and_then(|()| stream.write_all(tail.as_bytes()))
            .and_then(|()| stream.write_all(b"\n"))
        {
            problems.push(format!("flood frame {n}: write: {e}"));
            return false;
        }
    }
    true
}

fn serve(mut stream: UnixStream, script: Script, release: &AtomicBool) -> Vec<String> {
    let mut problems = Vec::new();
    stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    if !send(&mut stream, &script.greeting, &mut problems) {
        return problems;
    }
    let mut late: Vec<String> = Vec::new();
    for (i, step) in script.steps.iter().enumerate() {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => {
                problems.push(format!("client closed before step {i} ({})", step.command));
                return problems;
            }
            Ok(_) => {}
            Err(e) => {
                problems.push(format!("step {i} ({}): read: {e}", step.command));
                return problems;
            }
        }
        let cmd: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("step {i}: client sent bad JSON {line:?}: {e}"));
                return problems;
            }
        };
        let id = cmd.get("id").cloned();
        if id.is_none() {
            problems.push(format!("step {i}: command without id: {line}"));
        }
        let got = cmd["execute"].as_str().unwrap_or("");
        if got != step.command {
            problems.push(format!("step {i}: expected {}, got {line}", step.command));
        }
        if let Some(want) = &step.arguments {
            if cmd.get("arguments") != Some(want) {
                problems.push(format!(
                    "step {i} ({}): expected arguments {want}, got {:?}",
                    step.command,
                    cmd.get("arguments")
                ));
            }
        }
        let mut out = std::mem::take(&mut late);
        match &step.action {
            Action::Reply(frames) => {
                out.extend(frames.iter().map(|f| with_id(f, id.as_ref())));
            }
            Action::ReplyWithoutId(frames) => out.extend(frames.iter().cloned()),
            Action::ReplyLate(frames) => {
                late = frames.iter().map(|f| with_id(f, id.as_ref())).collect();
            }
            Action::Flood {
                template,
                count,
                then,
            } => {
                if !send(&mut stream, &std::mem::take(&mut out), &mut problems)
                    || !flood(&mut stream, template, *count, &mut problems)
                {
                    return problems;
                }
                out.extend(then.iter().map(|f| with_id(f, id.as_ref())));
            }
            Action::Stall(frames) => {
                out.extend(frames.iter().map(|f| with_id(f, id.as_ref())));
                if send(&mut stream, &out, &mut problems) {
                    let give_up = Instant::now() + CLIENT_TIMEOUT;
                    while !release.load(Ordering::Relaxed) && Instant::now() < give_up {
                        thread::sleep(Duration::from_millis(10));
                    }
                }
                return problems;
            }
            Action::Silent => {}
            Action::Close => {
                let _ = send(&mut stream, &out, &mut problems);
                return problems;
            }
        }
        if !send(&mut stream, &out, &mut problems) {
            return problems;
        }
    }
    if script.linger {
        let mut rest = String::new();
        match reader.read_line(&mut rest) {
            Ok(0) => {}
            Ok(_) => problems.push(format!("unexpected command after the script: {rest}")),
            Err(e) => problems.push(format!("waiting for the client to close: {e}")),
        }
    }
    problems
}

/// Connects the client to a fake server (5 s handshake timeout).
pub fn connect(server: &FakeServer) -> autoballoon_qmp::Qmp {
    autoballoon_qmp::Qmp::connect(server.path(), std::time::Duration::from_secs(5)).expect("connect to fake server")
}

/// Fails the test with whatever the fake server saw that its script did not expect.
pub fn assert_clean(server: FakeServer) {
    let problems = server.finish();
    assert!(problems.is_empty(), "fake server saw: {problems:#?}");
}

/// The events' names, in order.
pub fn names(events: &[autoballoon_qmp::Event]) -> Vec<&str> {
    events.iter().map(|e| e.name.as_str()).collect()
}

pub const GIB: u64 = 1 << 30;
