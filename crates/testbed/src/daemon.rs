//! The daemon as shipped, for end-to-end tests: `autoballoon host --config FILE` as a child
//! process (stopped on drop), its status socket read like `autoballoon status` reads it,
//! and its Prometheus endpoint scraped over TCP.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `autoballoon` binary: `$AUTOBALLOON_BIN`, else the one cargo builds beside the
/// running test (`target/debug/autoballoon`). Under `cargo test --workspace` (`make test`)
/// cargo has built it for the host crate's own tests; a test run of this crate alone
/// builds it first with `$CARGO build -p autoballoon` (cargo releases its lock before
/// tests run).
pub fn daemon_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("AUTOBALLOON_BIN").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // target/debug/deps/TEST-HASH -> target/debug/autoballoon
    let dir = exe.parent().and_then(Path::parent).ok_or("no target directory above the test binary")?;
    if let Ok(cargo) = std::env::var("CARGO") {
        let out = Command::new(cargo).args(["build", "--quiet", "-p", "autoballoon", "--bin", "autoballoon"]).env("CARGO_TARGET_DIR", dir.parent().unwrap_or(dir)).output().map_err(|e| format!("cargo build: {e}"))?;
        if !out.status.success() {
            return Err(format!("cargo build -p autoballoon failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    let bin = dir.join("autoballoon");
    bin.is_file().then_some(bin.clone()).ok_or_else(|| format!("{} is missing: build it with `cargo build -p autoballoon` or set AUTOBALLOON_BIN", bin.display()))
}

/// A running `autoballoon host`.
pub struct Daemon {
    child: Child,
    bin: PathBuf,
    pub status_socket: PathBuf,
    pub metrics: SocketAddr,
    pub log: PathBuf,
}

impl Daemon {
    /// Writes `config` (TOML, without `metrics_listen` and `status_socket`, which are
    /// given as flags) to `dir/host.toml` and starts the daemon on it; waits (at most 30 s)
    /// until its status socket answers.
    pub fn start(dir: &Path, config: &str) -> Result<Daemon, String> {
        Daemon::start_with_log(dir, config, &dir.join("daemon.log"))
    }

    /// [`Daemon::start`] with the daemon's stdout and stderr going to `log` (created or
    /// truncated; e.g. a file on a full filesystem).
    pub fn start_with_log(dir: &Path, config: &str, log: &Path) -> Result<Daemon, String> {
        let bin = daemon_binary()?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let file = dir.join("host.toml");
        std::fs::write(&file, config).map_err(|e| format!("{}: {e}", file.display()))?;
        let status_socket = dir.join("status.sock");
        let port = super::free_port().map_err(|e| format!("a free port: {e}"))?;
        let metrics: SocketAddr = ([127, 0, 0, 1], port).into();
        let log = log.to_path_buf();
        let logf = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(&bin)
            .arg("host")
            .arg("--config").arg(&file)
            .arg("--status-socket").arg(&status_socket)
            .arg("--metrics-listen").arg(metrics.to_string())
            .stdin(Stdio::null())
            .stdout(logf.try_clone().map_err(|e| e.to_string())?)
            .stderr(logf)
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let mut d = Daemon { child, bin, status_socket, metrics, log };
        let up = super::wait_for(Duration::from_secs(30), Duration::from_millis(100), || d.status().is_ok());
        if up.is_none() || !matches!(d.child.try_wait(), Ok(None)) {
            return Err(format!("the daemon did not come up; its log:\n{}", d.log_text()));
        }
        Ok(d)
    }

    /// The status document's VMs (what `autoballoon status --json` prints).
    pub fn status(&self) -> Result<Vec<Value>, String> {
        let doc = autoballoon::status_socket::query(&self.status_socket)?;
        Ok(doc["vms"].as_array().cloned().unwrap_or_default())
    }

    /// One VM's status, if the daemon has it.
    pub fn vm(&self, name: &str) -> Option<Value> {
        self.status().ok()?.into_iter().find(|v| v["name"] == name)
    }

    /// A VM's size in MiB as last sampled (`None` before its first sample).
    pub fn size_mib(&self, name: &str) -> Option<u64> {
        let v = self.vm(name)?;
        (v["samples"].as_u64()? > 0).then(|| v["size"].as_u64().map(|k| k >> 10))?
    }

    /// What `autoballoon status --socket PATH` prints (the real command).
    pub fn status_table(&self) -> Result<String, String> {
        let out = Command::new(&self.bin).arg("status").arg("--socket").arg(&self.status_socket).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `GET /metrics`: the body.
    pub fn metrics_text(&self) -> Result<String, String> {
        let mut c = TcpStream::connect_timeout(&self.metrics, Duration::from_secs(5)).map_err(|e| format!("{}: {e}", self.metrics))?;
        c.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
        let mut text = String::new();
        c.read_to_string(&mut text).map_err(|e| e.to_string())?;
        let (head, body) = text.split_once("\r\n\r\n").ok_or("not an HTTP answer")?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("metrics: {}", head.lines().next().unwrap_or("")));
        }
        Ok(body.to_string())
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Log lines containing `what`.
    pub fn log_lines(&self, what: &str) -> Vec<String> {
        self.log_text().lines().filter(|l| l.contains(what)).map(str::to_string).collect()
    }

    /// The daemon's process id (its `/proc/PID` for the host benchmark's CPU and RSS).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then (after 10 s) SIGKILL.
    pub fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        if super::wait_for(Duration::from_secs(10), Duration::from_millis(50), || !self.alive()).is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}
