//! A libvirt domain, through `virsh` (Debian's `libvirt-clients`): the daemon links no
//! libvirt library. Every call is one `virsh -c URI COMMAND DOMAIN` process with
//! `LC_ALL=C`, killed after a deadline; its output is read by the pure parsers in
//! [`parse`]. What is used: `dominfo` (state, configured and present size), `dommemstat`
//! (balloon size and guest statistics, `--period` to have them refreshed), `setmem --live`
//! (the balloon: `virDomainSetMemory`), `domjobinfo` (migrations), `domstate`, `dumpxml`
//! (the agent channel's socket), and `qemu-monitor-command` for two read-only QMP queries
//! (`query-version`, `query-kvm`: whether the balloon may shrink during migrations).

pub mod parse;

pub use parse::{DomInfo, JobInfo, MemStats};

use autoballoon_core::migration::{Accel, Hypervisor};
use autoballoon_core::Kib;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// libvirt's URI of the system QEMU driver, the default of `libvirt_uri`.
pub const DEFAULT_URI: &str = "qemu:///system";

/// The program run; `$AUTOBALLOON_VIRSH` names another (tests).
fn virsh_program() -> String {
    std::env::var("AUTOBALLOON_VIRSH").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "virsh".into())
}

/// Everything that can go wrong talking to libvirt through `virsh`.
#[derive(Debug, thiserror::Error)]
pub enum VirshError {
    /// cannot run virsh: {0} (install Debian's libvirt-clients)
    #[error("cannot run {program}: {source} (install Debian's libvirt-clients)")]
    Spawn { program: String, source: std::io::Error },
    /// virsh {command} did not answer within {after:?}
    #[error("virsh {command} did not answer within {after:?} (killed)")]
    Timeout { command: String, after: Duration },
    /// virsh {command} failed: {message}
    #[error("virsh {command} failed: {message}")]
    Failed { command: String, message: String },
    /// unexpected output of virsh {command}: {why}
    #[error("unexpected output of virsh {command}: {why}")]
    Parse { command: String, why: String },
    /// {0}
    #[error("{0}")]
    Unsupported(&'static str),
    /// the libvirt session was closed
    #[error("the libvirt session was closed")]
    Closed,
}

impl VirshError {
    /// libvirt says the domain has no balloon (or the guest no balloon driver).
    pub fn is_no_balloon(&self) -> bool {
        matches!(self, VirshError::Failed { message, .. } if message.contains("balloon"))
    }
    /// libvirt does not know the domain (not defined, or a transient one that ended).
    pub fn is_no_domain(&self) -> bool {
        matches!(self, VirshError::Failed { message, .. } if message.contains("failed to get domain") || message.contains("Domain not found"))
    }
}

/// One libvirt domain.
#[derive(Debug)]
pub struct Domain {
    pub uri: String,
    pub name: String,
    timeout: Duration,
    closed: AtomicBool,
}

impl Domain {
    /// The domain `name` on `uri`, checked with one `dominfo`: fails if libvirt cannot be
    /// reached or does not know the domain.
    pub fn open(uri: &str, name: &str, timeout: Duration) -> Result<(Domain, DomInfo), VirshError> {
        let d = Domain { uri: uri.into(), name: name.into(), timeout, closed: AtomicBool::new(false) };
        let info = d.dominfo()?;
        Ok((d, info))
    }

    /// Commands fail with [`VirshError::Closed`] from now on (one already running ends by its deadline).
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub fn dominfo(&self) -> Result<DomInfo, VirshError> {
        self.parsed("dominfo", &[], parse::parse_dominfo)
    }

    pub fn dommemstat(&self) -> Result<MemStats, VirshError> {
        self.parsed("dommemstat", &[], parse::parse_dommemstat)
    }

    /// Has the guest's balloon driver send statistics every `secs` seconds.
    pub fn set_stats_period(&self, secs: u32) -> Result<(), VirshError> {
        self.run("dommemstat", &["--period", &secs.to_string(), "--live"]).map(drop)
    }

    /// The guest's size (`virsh setmem --live`, libvirt's `virDomainSetMemory`): the
    /// balloon inflates or deflates to it.
    pub fn setmem(&self, size: Kib) -> Result<(), VirshError> {
        self.run("setmem", &[&size.0.to_string(), "--live"]).map(drop)
    }

    /// The running job; with `completed`, the last finished one.
    pub fn domjobinfo(&self, completed: bool) -> Result<JobInfo, VirshError> {
        self.parsed("domjobinfo", if completed { &["--completed"] } else { &[] }, parse::parse_domjobinfo)
    }

    pub fn domstate(&self) -> Result<String, VirshError> {
        self.parsed("domstate", &[], parse::parse_domstate)
    }

    /// QEMU's version triple and package string and whether KVM is enabled, through
    /// libvirt's QMP passthrough (`virsh qemu-monitor-command`, read-only queries).
    pub fn hypervisor(&self) -> Result<Hypervisor, VirshError> {
        let version = self.parsed("qemu-monitor-command", &[r#"{"execute":"query-version"}"#], parse::parse_query_version)?;
        let kvm = self.parsed("qemu-monitor-command", &[r#"{"execute":"query-kvm"}"#], parse::parse_query_kvm)?;
        Ok(Hypervisor::from_version(version.triple(), &version.package, if kvm { Accel::Kvm } else { Accel::Tcg }))
    }

    /// The host end of the virtio port `port` declared in the domain's XML, if any.
    pub fn agent_socket(&self, port: &str) -> Result<Option<String>, VirshError> {
        self.run("dumpxml", &[]).map(|xml| parse::agent_socket_in_xml(&xml, port))
    }

    fn parsed<T>(&self, command: &str, args: &[&str], parse: fn(&str) -> Result<T, String>) -> Result<T, VirshError> {
        let out = self.run(command, args)?;
        parse(&out).map_err(|why| VirshError::Parse { command: command.into(), why })
    }

    /// `virsh -c URI COMMAND DOMAIN ARGS...`: its stdout, or its error message.
    fn run(&self, command: &str, args: &[&str]) -> Result<String, VirshError> {
        if self.is_closed() {
            return Err(VirshError::Closed);
        }
        let mut argv = vec!["-c", self.uri.as_str(), command, self.name.as_str()];
        argv.extend_from_slice(args);
        run_virsh(&argv, self.timeout).map_err(|e| match e {
            RunError::Spawn(program, source) => VirshError::Spawn { program, source },
            RunError::Timeout => VirshError::Timeout { command: command.into(), after: self.timeout },
            RunError::Failed(message) => VirshError::Failed { command: command.into(), message },
        })
    }
}

/// The names of the active (running or paused) domains on `uri`: `virsh -c URI list --name`.
pub fn active_domains(uri: &str, timeout: Duration) -> Result<Vec<String>, VirshError> {
    let out = run_virsh(&["-c", uri, "list", "--name"], timeout).map_err(|e| match e {
        RunError::Spawn(program, source) => VirshError::Spawn { program, source },
        RunError::Timeout => VirshError::Timeout { command: "list".into(), after: timeout },
        RunError::Failed(message) => VirshError::Failed { command: "list".into(), message },
    })?;
    Ok(parse::parse_domain_names(&out))
}

enum RunError {
    Spawn(String, std::io::Error),
    Timeout,
    Failed(String),
}

/// Output past this is not read (virsh's answers here are a few KiB; dumpxml ~10 KiB).
const MAX_OUTPUT: u64 = 1 << 20;

fn run_virsh(args: &[&str], timeout: Duration) -> Result<String, RunError> {
    run_program(&virsh_program(), args, timeout)
}

fn run_program(program: &str, args: &[&str], timeout: Duration) -> Result<String, RunError> {
    let mut child = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Spawn(program.to_string(), e))?;
    // Readers on threads, so a full pipe never holds the child up while we wait.
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(r) = r {
                let _ = r.take(MAX_OUTPUT).read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = reader(child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>));
    let err = reader(child.stderr.take().map(|o| Box::new(o) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Timeout);
            }
        }
    };
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    if status.success() {
        Ok(out)
    } else {
        // virsh prints `error: ...` lines; the last ones carry the cause.
        let msg: Vec<&str> = err.lines().map(str::trim).filter(|l| !l.is_empty()).map(|l| l.strip_prefix("error: ").unwrap_or(l)).collect();
        Err(RunError::Failed(if msg.is_empty() { format!("exit status {status}") } else { msg.join(": ") }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_virsh_is_a_spawn_error() {
        let e = run_virsh_as("/nonexistent/virsh", &["version"], Duration::from_secs(1)).err().unwrap();
        assert!(matches!(e, RunError::Spawn(..)));
    }

    #[test]
    fn a_slow_virsh_is_killed_at_its_deadline() {
        let t = Instant::now();
        let e = run_virsh_as("sleep", &["5"], Duration::from_millis(200)).err().unwrap();
        assert!(matches!(e, RunError::Timeout));
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn errors_carry_virsh_messages() {
        // What virsh printed on stderr for an unknown domain, replayed by a shell.
        let f = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/virsh/dominfo-nodomain.stderr");
        let Err(RunError::Failed(m)) = run_virsh_as("sh", &["-c", &format!("cat {f} >&2; exit 1")], Duration::from_secs(5)) else { panic!("a failure") };
        assert_eq!(m, "failed to get domain 'nosuchdom'");
        let e = VirshError::Failed { command: "dominfo".into(), message: m };
        assert!(e.is_no_domain() && !e.is_no_balloon());
    }

    fn run_virsh_as(program: &str, args: &[&str], timeout: Duration) -> Result<String, RunError> {
        // The program is read from the environment each call; tests run threads in
        // parallel, so they call the runner directly instead of setting it.
        run_program(program, args, timeout)
    }
}
