use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The guest's serial console: a reader thread keeps everything the guest printed (and
/// appends it to a log file); [`Console::run`] executes one shell command and returns
/// its output, delimited by markers the echoed command line cannot contain.
pub struct Console {
    writer: Mutex<UnixStream>,
    text: Arc<(Mutex<String>, Condvar)>,
    log: PathBuf,
    next: AtomicU64,
}

/// A console command failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// cannot connect to the serial socket {0}: {1}
    #[error("cannot connect to the serial socket {0}: {1}")]
    Connect(PathBuf, std::io::Error),
    /// cannot write to the console: {0}
    #[error("cannot write to the console: {0}")]
    Write(std::io::Error),
    /// `{command}` printed {output:?}, not what was expected
    #[error("`{command}` printed {output:?}, not what was expected")]
    Unexpected { command: String, output: String },
    /// `{command}` did not finish within {after:?}; the console's last lines: {tail}
    #[error("`{command}` did not finish within {after:?}; the console's last lines:\n{tail}")]
    Timeout { command: String, after: Duration, tail: String },
}

/// Lines of the console a [`ConsoleError::Timeout`] carries.
const TIMEOUT_TAIL_LINES: usize = 30;

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> &str {
    let start = text.trim_end_matches('\n').rmatch_indices('\n').nth(n.saturating_sub(1)).map_or(0, |(i, _)| i + 1);
    &text[start..]
}

/// Output of one command and its exit status.
#[derive(Debug, Clone)]
pub struct Output {
    pub text: String,
    pub status: i32,
}

impl Console {
    pub fn connect(socket: &Path, log: &Path) -> Result<Console, ConsoleError> {
        let stream = UnixStream::connect(socket).map_err(|e| ConsoleError::Connect(socket.into(), e))?;
        let mut reader = stream.try_clone().map_err(|e| ConsoleError::Connect(socket.into(), e))?;
        let text = Arc::new((Mutex::new(String::new()), Condvar::new()));
        let shared = text.clone();
        let mut logf = std::fs::File::create(log).ok();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Some(f) = &mut logf {
                    let _ = f.write_all(&buf[..n]);
                }
                let (lock, cv) = &*shared;
                lock.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]).replace('\r', ""));
                cv.notify_all();
            }
        });
        Ok(Console { writer: Mutex::new(stream), text, log: log.to_path_buf(), next: AtomicU64::new(1) })
    }

    pub fn log_path(&self) -> PathBuf {
        self.log.clone()
    }

    /// Everything the guest printed so far.
    pub fn transcript(&self) -> String {
        self.text.0.lock().unwrap().clone()
    }

    /// The last `lines` lines the guest printed at or after byte `from`.
    fn tail_from(&self, from: usize, lines: usize) -> String {
        let text = self.text.0.lock().unwrap();
        last_lines(text.get(from..).unwrap_or(""), lines).to_string()
    }

    /// Waits until the transcript contains `needle`; returns how long it took.
    pub fn wait_for_text(&self, needle: &str, timeout: Duration) -> Option<Duration> {
        self.wait_from(0, needle, timeout).map(|(t, _)| t)
    }

    /// Waits until `needle` appears at or after byte `from`; returns the time and its position.
    fn wait_from(&self, from: usize, needle: &str, timeout: Duration) -> Option<(Duration, usize)> {
        let start = Instant::now();
        let (lock, cv) = &*self.text;
        let mut text = lock.lock().unwrap();
        loop {
            if let Some(pos) = text.get(from..).and_then(|t| t.find(needle)) {
                return Some((start.elapsed(), from + pos));
            }
            let left = timeout.checked_sub(start.elapsed())?;
            text = cv.wait_timeout(text, left).unwrap().0;
        }
    }

    /// Runs `command` in the guest shell and waits for it to finish.
    pub fn run(&self, command: &str, timeout: Duration) -> Result<Output, ConsoleError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let from = self.text.0.lock().unwrap().len();
        self.send_line(&format!("printf '@@%s@@\\n' B{n}; {command}; printf '@@%s:%s@@\\n' E{n} $?"))?;
        // What the guest printed since the command was sent (a hung task, a stall), for the
        // error: the test's folder, and with it the console log, is gone after a CI run.
        let timeout_err = || ConsoleError::Timeout { command: command.into(), after: timeout, tail: self.tail_from(from, TIMEOUT_TAIL_LINES) };
        let deadline = Instant::now() + timeout;
        let (_, b) = self.wait_from(from, &format!("@@B{n}@@\n"), timeout).ok_or_else(timeout_err)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let (_, e) = self.wait_from(b, &format!("@@E{n}:"), left).ok_or_else(timeout_err)?;
        let (_, end) = self.wait_from(e, "@@\n", Duration::from_secs(5)).ok_or_else(timeout_err)?;
        let text = self.text.0.lock().unwrap();
        let body = text[b + format!("@@B{n}@@\n").len()..e].to_string();
        let status = text[e + format!("@@E{n}:").len()..end].trim().parse().unwrap_or(-1);
        Ok(Output { text: body, status })
    }

    /// Starts `command` in the background of the guest shell; its output goes to the console.
    pub fn spawn(&self, command: &str) -> Result<(), ConsoleError> {
        self.send_line(&format!("( {command} ) &"))
    }

    fn send_line(&self, line: &str) -> Result<(), ConsoleError> {
        let mut w = self.writer.lock().unwrap();
        w.write_all(line.as_bytes()).and_then(|_| w.write_all(b"\n")).map_err(ConsoleError::Write)
    }

    /// Counts OOM-killer kills the guest has printed so far.
    pub fn oom_kills(&self) -> usize {
        count_oom_kills(&self.transcript())
    }
}

/// OOM kills in a console transcript or dmesg text ("Out of memory: Killed process" on 6.x,
/// "Killed process" via oom_reaper, or "invoked oom-killer").
pub fn count_oom_kills(text: &str) -> usize {
    text.lines().filter(|l| l.contains("Out of memory: Killed process") || l.contains("Memory cgroup out of memory")).count()
}

#[cfg(test)]
mod tests {
    use super::{count_oom_kills, last_lines};

    #[test]
    fn counts_kills_not_invocations() {
        let t = "[  5.1] spike invoked oom-killer: gfp_mask=0x140dca\n[  5.2] Out of memory: Killed process 93 (spike) total-vm:1228800kB\n[  5.3] oom_reaper: reaped process 93 (spike)\n";
        assert_eq!(count_oom_kills(t), 1);
        assert_eq!(count_oom_kills("all fine\n"), 0);
    }

    #[test]
    fn a_timeout_carries_the_last_lines() {
        let t = "@@B3@@\n[ 250.1] INFO: task dd:93 blocked for more than 122 seconds.\n[ 250.2] Not tainted\n";
        assert_eq!(last_lines(t, 2), "[ 250.1] INFO: task dd:93 blocked for more than 122 seconds.\n[ 250.2] Not tainted\n");
        assert_eq!(last_lines(t, 30), t);
        assert_eq!(last_lines("", 30), "");
    }
}
