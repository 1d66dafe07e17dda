//! The status socket `autoballoon status` reads: a unix socket the daemon serves from one
//! thread. A client connects and reads one JSON document, `{"version": "...", "vms":
//! [VmStatus, ...]}`, then the daemon closes the connection. A client that sends nothing
//! gets the document at once if it shuts its writing half, else after [`REQUEST_WAIT`].
//!
//! Commands are taken too: a client that sends one line and shuts its writing half gets
//! `{"ok": true}` once the VM's worker has the command, or `{"error": "..."}`:
//! - `{"migrate": {"vm": NAME, "uri": URI, "max_bandwidth": BYTES_PER_S or null}}`
//!   (`autoballoon migrate`), followed in the status document (`last_migration`);
//! - `{"pause": {"vm": NAME}}` (`autoballoon pause`): the VM's balloon is left alone (the
//!   VM keeps its size; a shrink under way stops where the balloon is, a growth
//!   completes) until
//! - `{"resume": {"vm": NAME}}` (`autoballoon resume`): control again from the next sample.
//!
//! The socket is created mode 0600 (root-only when the daemon runs as root), replaces a
//! stale socket a dead daemon left behind, refuses to start if another daemon answers on
//! it, and is removed when the server stops.

use crate::controller::VmCommand;
use crate::log::Logger;
use crate::server_thread::{Bounded, Limits, ServerThread};
use crate::metrics::{HostSnapshot, Snapshots};
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one client may take in all, request and answer (a slow client cannot hold the
/// server, nor the daemon's shutdown, past it: crate::server_thread).
pub const DEADLINE: Duration = Duration::from_secs(5);
/// How long the server waits for a request line from a client that neither sends one nor
/// shuts its writing half, before it answers with the status document.
pub const REQUEST_WAIT: Duration = Duration::from_millis(200);
/// Longest request line.
const MAX_REQUEST: u64 = 4096;

/// Hands a command to a VM by name: the daemon's VMs' workers.
pub type Commands = Arc<dyn Fn(&str, VmCommand) -> Result<(), String> + Send + Sync>;

/// The commands of a running controller's VMs.
pub fn commands_of(ctl: &crate::controller::Controller) -> Commands {
    use crate::controller::VmState;
    // The VMs managed at each request (discovery and reloads change them).
    let registry = ctl.registry();
    Arc::new(move |name: &str, c: VmCommand| {
        let vm = crate::controller::lock(&registry).iter().find(|v| v.name == name).cloned().ok_or_else(|| format!("no VM named {name:?}"))?;
        let st = vm.snapshot();
        if let VmCommand::Migrate { .. } = c {
            if st.state != VmState::Running {
                return Err(format!("{name} is {}: it can be migrated only while running under autoballoon", st.state));
            }
            if st.last_migration.as_ref().is_some_and(|m| m.running()) {
                return Err(format!("a migration of {name} is already being prepared or runs"));
            }
        }
        if vm.command(c) {
            Ok(())
        } else {
            Err(format!("the worker of {name:?} is busy or gone; try again"))
        }
    })
}
/// Largest answer a client reads (a thousand VMs are well under it).
const MAX_ANSWER: u64 = 64 << 20;

/// The running server; removes its socket when dropped or `stop`ped.
pub struct StatusServer {
    path: PathBuf,
    thread: ServerThread,
}

impl StatusServer {
    /// Creates the socket at `path` (its directory must exist) and serves from a thread.
    pub fn start(path: &Path, snapshots: Snapshots, log: Logger) -> Result<StatusServer, String> {
        StatusServer::start_with(path, snapshots, None, None, log)
    }

    /// As [`StatusServer::start`], with the host's figures in the document (`"host"`) when
    /// `host` is given, and taking commands when `commands` is.
    pub fn start_with(path: &Path, snapshots: Snapshots, host: Option<HostSnapshot>, commands: Option<Commands>, log: Logger) -> Result<StatusServer, String> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
                Ok(_) => return Err(format!("another daemon is listening on {}", path.display())),
                // A dead daemon's socket: nobody accepts on it any more.
                Err(_) => std::fs::remove_file(path).map_err(|e| format!("cannot remove the stale socket {}: {e}", path.display()))?,
            },
            Ok(_) => return Err(format!("{} exists and is not a socket; not replacing it", path.display())),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
        let listener = UnixListener::bind(path).map_err(|e| format!("cannot create the status socket {}: {e}", path.display()))?;
        // Before the first accept: nobody but the owner can connect.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| format!("chmod 0600 {}: {e}", path.display()))?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let limits = Limits { deadline: DEADLINE, idle: REQUEST_WAIT };
        let thread = ServerThread::spawn("status", "status socket", log, limits, move || listener.accept().map(|(c, _)| c), move |c| serve(c, &snapshots, host.as_ref(), commands.as_ref()))
            .map_err(|e| e.to_string())?;
        Ok(StatusServer { path: path.into(), thread })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if self.thread.halt() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.halt();
    }
}

fn serve(mut conn: Bounded<UnixStream>, snapshots: &Snapshots, host: Option<&HostSnapshot>, commands: Option<&Commands>) -> std::io::Result<()> {
    let mut req = Vec::new();
    // A timeout or an error reading means no request: the status document. (Nothing for
    // REQUEST_WAIT ends the request; the whole of it ends at DEADLINE.)
    let _ = (&mut conn).take(MAX_REQUEST).read_to_end(&mut req);
    conn.set_idle(IO_TIMEOUT);
    let doc = if req.iter().all(u8::is_ascii_whitespace) {
        let mut doc = json!({ "version": env!("CARGO_PKG_VERSION"), "vms": snapshots() });
        if let Some(h) = host {
            doc["host"] = json!(h());
        }
        doc
    } else {
        match command(&req, commands) {
            Ok(()) => json!({ "ok": true }),
            Err(e) => json!({ "error": e }),
        }
    };
    conn.write_all(doc.to_string().as_bytes())?;
    conn.write_all(b"\n")?;
    conn.get_ref().shutdown(std::net::Shutdown::Write)
}

/// A request line, checked and handed to its VM.
fn command(req: &[u8], commands: Option<&Commands>) -> Result<(), String> {
    let commands = commands.ok_or("this daemon takes no commands on its status socket")?;
    let v: Value = serde_json::from_slice(req).map_err(|e| format!("not a request: {e}"))?;
    for (key, c) in [("pause", VmCommand::Pause), ("resume", VmCommand::Resume)] {
        if let Some(m) = v.get(key) {
            let vm = m["vm"].as_str().ok_or_else(|| format!("{key}: `vm` must be a string"))?;
            return commands(vm, c);
        }
    }
    let m = v.get("migrate").ok_or("unknown request (known: migrate, pause, resume)")?;
    let vm = m["vm"].as_str().ok_or("migrate: `vm` must be a string")?;
    let uri = m["uri"].as_str().filter(|u| !u.is_empty() && u.len() <= 1024).ok_or("migrate: `uri` must be a non-empty string")?;
    let max_bandwidth = match &m["max_bandwidth"] {
        Value::Null => None,
        b => Some(b.as_u64().filter(|&b| b > 0).ok_or("migrate: `max_bandwidth` must be a positive number of bytes/s")?),
    };
    commands(vm, VmCommand::Migrate { uri: uri.to_string(), max_bandwidth })
}

/// Sends one request line and reads the daemon's answer (`{"ok": true}` or `{"error": ...}`).
pub fn request(path: &Path, req: &Value) -> Result<(), String> {
    let mut conn = connect(path)?;
    conn.write_all(format!("{req}\n").as_bytes()).map_err(|e| format!("writing to {}: {e}", path.display()))?;
    let answer = read_answer(&mut conn, path)?;
    match answer.get("error").and_then(Value::as_str) {
        Some(e) => Err(e.to_string()),
        None if answer["ok"] == Value::Bool(true) => Ok(()),
        None => Err(format!("{}: not an answer to a request (an older daemon?)", path.display())),
    }
}

/// Reads the daemon's status document from `path`, with errors an operator can act on.
pub fn query(path: &Path) -> Result<Value, String> {
    let mut conn = connect(path)?;
    let doc = read_answer(&mut conn, path)?;
    if !doc["vms"].is_array() {
        return Err(format!("{}: not a status document (no `vms` list)", path.display()));
    }
    Ok(doc)
}

fn read_answer(conn: &mut UnixStream, path: &Path) -> Result<Value, String> {
    // No (more) request: the daemon answers at once.
    let _ = conn.shutdown(std::net::Shutdown::Write);
    conn.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    let mut text = String::new();
    conn.take(MAX_ANSWER).read_to_string(&mut text).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not a status document ({e})", path.display()))
}

fn connect(path: &Path) -> Result<UnixStream, String> {
    UnixStream::connect(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => {
            format!("no daemon listening on {} (is `autoballoon host` running?)", path.display())
        }
        ErrorKind::PermissionDenied => {
            format!("permission denied on {}: the status socket is readable by its owner only (run as root)", path.display())
        }
        _ => format!("cannot connect to {}: {e}", path.display()),
    })
}

/// The `autoballoon status` table of a status document's VMs (sizes in MiB).
/// One line on the host under the table: the reclaim mode and what it did at the last
/// step, the host's memory, and the VMs' capacity, wants and shortfall (`-` where not
/// known). `None` when the document has no host (an older daemon).
pub fn host_line(host: &Value) -> Option<String> {
    let mode = host["reclaim_mode"].as_str().filter(|m| !m.is_empty())?;
    let mib = |k: &str| host[k].as_u64().map_or("-".to_string(), |k| format!("{} MiB", k / 1024));
    let reclaim = match (host["reclaim_target_pct"].as_u64(), host["reclaiming"].as_bool()) {
        (Some(t), Some(true)) => format!("{mode} (target {t} %): reclaiming, {} above the target", mib("reclaim_excess")),
        (Some(t), Some(false)) => format!("{mode} (target {t} %): below the target, guests keep their memory"),
        (Some(t), None) => format!("{mode} (target {t} %)"),
        (None, _) => mode.to_string(),
    };
    Some(format!(
        "host: reclaim {reclaim}; MemAvailable {} of {}; capacity {}, wanted {}, shortfall {}",
        mib("mem_available"),
        mib("mem_total"),
        mib("capacity"),
        mib("wanted"),
        mib("shortfall")
    ))
}

pub fn table(vms: &[Value]) -> String {
    let kib = |v: &Value| v.as_u64();
    let mib = |k: Option<u64>| k.map(|k| format!("{}", k / 1024)).unwrap_or_else(|| "-".into());
    let mut rows = vec![["VM", "STATE", "SIZE", "TARGET", "USED", "BALLOON", "SOURCE", "CLASS", "ACTIONS", "LAST REASON"].map(String::from).to_vec()];
    for v in vms {
        let sampled = v["samples"].as_u64().unwrap_or(0) > 0;
        let size = kib(&v["size"]).filter(|_| sampled);
        let configured = kib(&v["configured"]).filter(|&c| c > 0);
        let balloon = size.zip(configured).map(|(s, c)| c.saturating_sub(s));
        let s = |k: &str| v[k].as_str().filter(|s| !s.is_empty()).unwrap_or("-").to_string();
        // The balancers' class, once the status carries one.
        let class = v["class"].as_str().or(v["policy_class"].as_str()).unwrap_or("-").to_string();
        let actions = v["actions"].as_u64().unwrap_or(0);
        let grows = v["metrics"]["grows"].as_u64().unwrap_or(0);
        let shrinks = v["metrics"]["shrinks"].as_u64().unwrap_or(0);
        rows.push(vec![
            s("name"),
            s("state"),
            mib(size),
            mib(kib(&v["target"])),
            mib(kib(&v["used"])),
            mib(balloon),
            s("source"),
            class,
            format!("{actions} (+{grows}/-{shrinks})"),
            s("last_reason"),
        ]);
    }
    let cols = rows[0].len();
    let width: Vec<usize> = (0..cols).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            // Names and words left, numbers right; the last column unpadded.
            let numeric = (2..=5).contains(&c);
            if c + 1 == cols {
                line.push_str(cell);
            } else if numeric {
                line.push_str(&format!("{cell:>w$}  ", w = width[c]));
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = width[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str("(sizes in MiB; BALLOON = configured - size; ACTIONS = targets set (+grows/-shrinks))\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{VmState, VmStatus};
    use autoballoon_core::Kib;

    #[test]
    fn a_client_dripping_its_request_delays_neither_shutdown_nor_others_past_the_deadline() {
        use crate::config::LogFormat;
        let path = std::env::temp_dir().join(format!("ab-status-drip-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let snapshots: Snapshots = Arc::new(Vec::new);
        let server = StatusServer::start(&path, snapshots, Logger::new(LogFormat::Json, false)).unwrap();
        let drip = |path: PathBuf| {
            std::thread::spawn(move || {
                let mut c = UnixStream::connect(path).unwrap();
                // A byte every 0.15 s (within REQUEST_WAIT), for longer than the deadline.
                for _ in 0..60 {
                    if c.write_all(b" ").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(150));
                }
            })
        };
        // Another client behind a dripping one is answered once the deadline ends it.
        let started = std::time::Instant::now();
        let _slow = drip(path.clone());
        std::thread::sleep(Duration::from_millis(1000));
        let doc = query(&path).unwrap();
        assert!(doc["vms"].is_array());
        assert!(started.elapsed() < DEADLINE + Duration::from_secs(2), "answered after {:?}", started.elapsed());
        // And a dripping client delays shutdown by less than a second.
        let _slow = drip(path.clone());
        std::thread::sleep(Duration::from_millis(1000));
        let asked = std::time::Instant::now();
        server.stop();
        assert!(asked.elapsed() < Duration::from_secs(1), "shutdown took {:?}", asked.elapsed());
        assert!(!path.exists());
    }

    #[test]
    fn pause_and_resume_requests_reach_the_named_vm() {
        let seen: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
        let rec = seen.clone();
        let commands: Commands = Arc::new(move |vm: &str, c: VmCommand| {
            if vm != "web1" {
                return Err(format!("no VM named {vm:?}"));
            }
            rec.lock().unwrap().push((vm.to_string(), format!("{c:?}")));
            Ok(())
        });
        assert_eq!(command(br#"{"pause": {"vm": "web1"}}"#, Some(&commands)), Ok(()));
        assert_eq!(command(b"{\"resume\": {\"vm\": \"web1\"}}\n", Some(&commands)), Ok(()));
        assert_eq!(*seen.lock().unwrap(), [("web1".to_string(), "Pause".to_string()), ("web1".to_string(), "Resume".to_string())]);
        assert_eq!(command(br#"{"pause": {"vm": "db9"}}"#, Some(&commands)), Err("no VM named \"db9\"".to_string()));
        assert!(command(br#"{"pause": {"vm": 3}}"#, Some(&commands)).unwrap_err().contains("`vm` must be a string"));
        assert!(command(br#"{"stop": {}}"#, Some(&commands)).unwrap_err().contains("known: migrate, pause, resume"));
        assert!(command(br#"{"pause": {"vm": "web1"}}"#, None).unwrap_err().contains("takes no commands"));
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[test]
    fn table_shows_sizes_in_mib_and_dashes_for_unknowns() {
        let mut a = VmStatus { name: "web1".into(), state: VmState::Running, configured: Kib(4 << 20), size: Kib(1 << 20), samples: 2, ..Default::default() };
        a.target = Some(Kib(1 << 20));
        a.used = Some(Kib(900 * 1024));
        a.actions = 3;
        a.metrics.grows = 1;
        a.metrics.shrinks = 2;
        a.last_reason = "estimate".into();
        let b = VmStatus { name: "db1".into(), state: VmState::Unreachable, ..Default::default() };
        let vms = serde_json::to_value(vec![a, b]).unwrap();
        let t = table(vms.as_array().unwrap());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("VM "), "{t}");
        let a: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(&a[..9], ["web1", "running", "1024", "1024", "900", "3072", "none", "-", "3"], "{t}");
        assert!(lines[1].ends_with("(+1/-2)  estimate"), "{t}");
        let b: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(&b[..8], ["db1", "unreachable", "-", "-", "-", "-", "none", "-"], "{t}");
    }

    #[test]
    fn the_host_line_says_the_mode_and_what_it_did() {
        use crate::controller::HostStatus;
        let line = |h: HostStatus| host_line(&serde_json::to_value(h).unwrap());
        let lean = HostStatus { reclaim_mode: "lean", mem_total: Some(Kib(24 << 20)), mem_available: Some(Kib(20 << 20)), ..Default::default() };
        assert_eq!(line(lean).unwrap(), "host: reclaim lean; MemAvailable 20480 MiB of 24576 MiB; capacity -, wanted -, shortfall -");
        let need = HostStatus { reclaim_mode: "host-need", reclaim_target_pct: Some(80), reclaiming: Some(true), reclaim_excess: Some(Kib(1096 * 1024)), ..Default::default() };
        assert!(line(need.clone()).unwrap().starts_with("host: reclaim host-need (target 80 %): reclaiming, 1096 MiB above the target;"));
        let keep = HostStatus { reclaiming: Some(false), reclaim_excess: Some(Kib::ZERO), ..need };
        assert!(line(keep).unwrap().contains("below the target, guests keep their memory"));
        assert_eq!(host_line(&Value::Null), None, "an older daemon's document");
    }
}
