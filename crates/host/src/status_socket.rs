//! The status socket `autoballoon status` reads: a unix socket the daemon serves from one
//! thread. A client connects and reads one JSON document, `{"version": "...", "vms":
//! [VmStatus, ...]}`, then the daemon closes the connection; it sends nothing.
//!
//! The socket is created mode 0600 (root-only when the daemon runs as root), replaces a
//! stale socket a dead daemon left behind, refuses to start if another daemon answers on
//! it, and is removed when the server stops.

use crate::log::Logger;
use crate::server_thread::ServerThread;
use crate::metrics::Snapshots;
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

const IO_TIMEOUT: Duration = Duration::from_secs(5);
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
        let thread = ServerThread::spawn("status", "status socket", log, move || listener.accept().map(|(c, _)| c), move |c| serve(c, &snapshots))
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

fn serve(mut conn: UnixStream, snapshots: &Snapshots) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let doc = json!({ "version": env!("CARGO_PKG_VERSION"), "vms": snapshots() });
    conn.write_all(doc.to_string().as_bytes())?;
    conn.write_all(b"\n")?;
    conn.shutdown(std::net::Shutdown::Write)
}

/// Reads the daemon's status document from `path`, with errors an operator can act on.
pub fn query(path: &Path) -> Result<Value, String> {
    let mut conn = UnixStream::connect(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => {
            format!("no daemon listening on {} (is `autoballoon host` running?)", path.display())
        }
        ErrorKind::PermissionDenied => {
            format!("permission denied on {}: the status socket is readable by its owner only (run as root)", path.display())
        }
        _ => format!("cannot connect to {}: {e}", path.display()),
    })?;
    conn.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    let mut text = String::new();
    (&mut conn).take(MAX_ANSWER).read_to_string(&mut text).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not a status document ({e})", path.display()))?;
    if !doc["vms"].is_array() {
        return Err(format!("{}: not a status document (no `vms` list)", path.display()));
    }
    Ok(doc)
}

/// The `autoballoon status` table of a status document's VMs (sizes in MiB).
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
}
