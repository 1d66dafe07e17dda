//! `autoballoon`: the host controller daemon (`autoballoon host`). The demo is
//! `autoballoon-demo`, in the `autoballoon-testbed` crate.

use autoballoon::config::{Config, ControllerConfig, LogFormat, PolicyConfig, VmConfig};
use autoballoon::controller::Controller;
use autoballoon::log::{EventKind, Level, Logger};
use autoballoon::metrics::MetricsServer;
use autoballoon::status_socket::StatusServer;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The exit status of every command, in `--help`.
const EXIT_STATUS: &str = "Exit status: 0 success; 1 a runtime failure (the daemon could not run, \
the daemon's socket could not be reached, the daemon refused the request, a migration failed); \
2 a usage or configuration error (a bad flag, an unreadable or invalid configuration file).";

/// Exit status of a runtime failure.
const EXIT_RUNTIME: u8 = 1;
/// Exit status of a usage or configuration error (clap's own for a bad command line).
const EXIT_CONFIG: u8 = 2;

/// Why a command failed; the exit status tells them apart.
#[derive(Debug)]
enum Failure {
    /// A bad flag, an unreadable or invalid configuration file: exit 2.
    Config(String),
    /// The work could not be done: exit 1.
    Runtime(String),
}

use Failure::{Config as Cfg, Runtime};

#[derive(Parser)]
#[command(name = "autoballoon", version, about = "Continuous, swap-free memory ballooning for QEMU VMs", after_help = EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Manage the balloons of QEMU VMs over QMP (or libvirt) until SIGINT/SIGTERM: the
    /// configured VMs and those [discovery] finds; SIGHUP re-reads --config and applies
    /// VMs added, removed or changed at once.
    #[command(after_help = EXIT_STATUS)]
    Host(HostArgs),
    /// Show the running daemon's VMs (read from its status socket).
    #[command(after_help = EXIT_STATUS)]
    Status(StatusArgs),
    /// Ask the running daemon to migrate a VM: shrink it at once to what it uses (the
    /// policy's migration_buffer_mib), migrate it over QMP, and report seconds, MiB sent
    /// and downtime. Exit 0 if the migration completed, 1 if it failed or could not be
    /// asked, 2 on a usage or configuration error.
    #[command(after_help = EXIT_STATUS)]
    Migrate(MigrateArgs),
    /// Ask the running daemon to leave a VM's balloon alone: the VM keeps its size (a
    /// shrink under way stops where the balloon is, a growth completes) and gets no target (its worker
    /// still samples it, for the status) until `resume`.
    #[command(after_help = EXIT_STATUS)]
    Pause(VmArgs),
    /// Ask the running daemon to control a paused VM again, from its next sample.
    #[command(after_help = EXIT_STATUS)]
    Resume(VmArgs),
}

#[derive(clap::Args)]
struct VmArgs {
    /// The VM's name in the daemon's configuration.
    vm: String,
    /// The daemon's status socket [default: as for `status`].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Read the socket's path from this host configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(clap::Args)]
struct MigrateArgs {
    /// The VM's name in the daemon's configuration.
    vm: String,
    /// QEMU's migration URI, e.g. tcp:10.0.0.2:4444 (the destination QEMU runs with -incoming); for a libvirt domain the destination's libvirt URI, e.g. qemu+ssh://10.0.0.2/system (a live peer-to-peer migration).
    #[arg(long = "to", value_name = "URI")]
    to: String,
    /// Migration bandwidth cap, MiB/s [default: QEMU's or libvirt's setting].
    #[arg(long, value_name = "N")]
    bandwidth_mib: Option<u64>,
    /// The daemon's status socket [default: as for `status`].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Read the socket's path from this host configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Give up waiting for the end after this many seconds (the migration goes on).
    #[arg(long, default_value_t = 3600)]
    timeout_s: u64,
}

#[derive(clap::Args)]
struct StatusArgs {
    /// The daemon's status socket [default: the --config file's controller.status_socket,
    /// else /run/autoballoon/status.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Read the socket's path from this host configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the VMs' status snapshots as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct HostArgs {
    /// A TOML configuration file (see docs/configuration.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A VM to manage, as NAME=QMP_SOCKET[,agent=AGENT_SOCKET] or NAME=libvirt:DOMAIN[,agent=AGENT_SOCKET] (on qemu:///system); repeatable. Used when no --config is given.
    #[arg(long = "vm", value_name = "NAME=QMP[,agent=PATH]")]
    vms: Vec<String>,
    /// Log one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Write log lines of this level and below: error, warn, info (one line per action and
    /// state change), debug (also every tick that changes nothing); overrides
    /// controller.log_level [default: the file's, else info].
    #[arg(long, value_enum, value_name = "LEVEL")]
    log_level: Option<Level>,
    /// Also log ticks that change nothing: --log-level debug.
    #[arg(short, long, conflicts_with = "log_level")]
    verbose: bool,
    /// Print a status table every this many seconds (0 = never).
    #[arg(long, default_value_t = 0)]
    status_every: u64,
    /// Validate the configuration, print one line per configured VM (and one for
    /// [discovery] and [[match]], if any, and a "warning:" line per socket path under /tmp,
    /// /var/tmp or /dev/shm, which anyone may write, or under /home, /root or /run/user,
    /// which autoballoon.service hides) and exit (0 if valid, 2 if not; a file with no VM
    /// is valid).
    #[arg(long)]
    check_config: bool,
    /// Serve Prometheus metrics on IP:PORT ("" = off); overrides controller.metrics_listen.
    #[arg(long, value_name = "IP:PORT")]
    metrics_listen: Option<String>,
    /// Serve `autoballoon status` on this unix socket ("" = off); overrides controller.status_socket.
    #[arg(long, value_name = "PATH")]
    status_socket: Option<PathBuf>,
}

fn parse_vm_flag(s: &str) -> Result<VmConfig, String> {
    let (name, rest) = s.split_once('=').ok_or_else(|| format!("--vm {s:?}: expected NAME=QMP_SOCKET|libvirt:DOMAIN[,agent=PATH]"))?;
    let mut parts = rest.split(',');
    let first = parts.next().unwrap_or_default();
    let (qmp, domain) = match first.strip_prefix("libvirt:") {
        Some(d) => (PathBuf::new(), Some(d.to_string())),
        None => (PathBuf::from(first), None),
    };
    let mut agent = None;
    for p in parts {
        match p.split_once('=') {
            Some(("agent", path)) => agent = Some(PathBuf::from(path)),
            _ => return Err(format!("--vm {s:?}: unknown option {p:?} (expected agent=PATH)")),
        }
    }
    Ok(VmConfig { agent, libvirt_domain: domain, ..VmConfig::new(name, qmp) })
}

/// The configuration as the command line gives it: the file, or the --vm flags, with the
/// flags that override file keys applied (not --json / -v: those are kept apart for reloads).
fn load(a: &HostArgs) -> Result<Config, String> {
    let mut config = match &a.config {
        Some(p) => Config::load(p).map_err(|e| e.to_string())?,
        None => {
            if a.vms.is_empty() {
                return Err("nothing to manage: give --config FILE (a file with no [[vm]] runs with none) or --vm NAME=QMP_SOCKET".into());
            }
            let vms = a.vms.iter().map(|s| parse_vm_flag(s)).collect::<Result<Vec<_>, _>>()?;
            let c = Config { controller: ControllerConfig::default(), defaults: PolicyConfig::default(), vms, ..Default::default() };
            c.validate().map_err(|e| format!("{e} (give --config FILE or --vm NAME=QMP_SOCKET)"))?;
            c
        }
    };
    if let Some(m) = &a.metrics_listen {
        config.controller.metrics_listen = m.clone();
    }
    if let Some(s) = &a.status_socket {
        config.controller.status_socket = s.clone();
    }
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

impl HostArgs {
    /// The log level the command line asks for, if any (`-v` is `debug`).
    fn level(&self) -> Option<Level> {
        if self.verbose {
            Some(Level::Debug)
        } else {
            self.log_level
        }
    }
}

fn host(a: HostArgs) -> Result<(), Failure> {
    let mut running = load(&a).map_err(Cfg)?;
    if a.check_config {
        println!("{}", autoballoon::ops::summary_controller(&running));
        if let Some(d) = autoballoon::ops::summary_discovery(&running) {
            println!("{d}");
        }
        for line in autoballoon::ops::summary(&running) {
            println!("{line}");
        }
        for w in running.path_warnings() {
            println!("warning: {w}");
        }
        println!("configuration OK: {} VM(s)", running.vms.len());
        return Ok(());
    }
    let format = if a.json { LogFormat::Json } else { running.controller.log_format };
    // Whatever the daemon creates (its status socket, the socket's directory) is its
    // owner's alone, from the moment it exists.
    // SAFETY: umask has no memory-safety preconditions.
    unsafe { libc::umask(0o077) };
    autoballoon::signals::install().map_err(|e| Runtime(format!("cannot install the signal handlers: {e}")))?;
    let logger = Logger::with_level(format, a.level().unwrap_or(running.controller.level()));
    let mut notify = autoballoon::notify::Notifier::from_env();
    for w in running.path_warnings() {
        logger.event_at(Level::Warn, "-", EventKind::Reload, &w, &[]);
    }
    let ctl = Controller::start(&running, logger.clone());
    let (metrics, status) = start_endpoints(&running, &ctl, &logger);
    // systemd (Type=notify): up once the configuration is loaded and every VM's worker runs.
    let _ = notify.ready(&format!("managing {} VM(s)", ctl.vm_count()));
    if let Some(every) = notify.watchdog_every() {
        logger.debug("-", &format!("systemd watchdog: a ping every {} ms", every.as_millis()));
    }
    let mut since_status = Duration::ZERO;
    // systemd's status line (`systemctl status`) follows the VMs discovery adds and removes.
    let mut shown = ctl.vm_count();
    while !autoballoon::signals::stop_requested() {
        notify.watchdog(std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(200));
        let managed = ctl.vm_count();
        if managed != shown {
            shown = managed;
            let _ = notify.send(&format!("STATUS=managing {managed} VM(s)"));
        }
        if autoballoon::signals::take_reload() {
            let _ = notify.send("RELOADING=1");
            reload(&a, &mut running, &ctl, &logger);
            shown = ctl.vm_count();
            let _ = notify.ready(&format!("managing {shown} VM(s)"));
        }
        since_status += Duration::from_millis(200);
        if a.status_every > 0 && since_status >= Duration::from_secs(a.status_every) {
            since_status = Duration::ZERO;
            let rows: Vec<_> = ctl.vms().iter().map(|v| v.snapshot()).collect();
            // Not `eprint!`, which panics when stderr cannot be written (a full disk).
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), autoballoon::status_table(&rows).as_bytes());
        }
    }
    let _ = notify.send("STOPPING=1");
    drop((metrics, status));
    ctl.shutdown_flag().store(true, Ordering::SeqCst);
    ctl.stop();
    Ok(())
}

/// Starts the metrics endpoint and the status socket, as configured. Either failing is
/// logged and the daemon goes on without it: ballooning matters more than observing it.
fn start_endpoints(config: &Config, ctl: &Controller, log: &Logger) -> (Option<MetricsServer>, Option<StatusServer>) {
    let snapshots = autoballoon::metrics::snapshots_of(ctl);
    let c = &config.controller;
    let metrics = (!c.metrics_listen.is_empty())
        .then(|| match MetricsServer::start(&c.metrics_listen, snapshots.clone(), autoballoon::metrics::host_of(ctl), log.clone()) {
            Ok(m) => {
                log.event("-", EventKind::Endpoint, &format!("metrics on http://{}/metrics", m.local_addr()), &[("metrics_listen", m.local_addr().to_string().into())]);
                if !m.local_addr().ip().is_loopback() {
                    log.event_at(Level::Warn, "-", EventKind::Endpoint, &format!("the metrics endpoint listens on {}, not on loopback: it has no authentication, and whoever reaches it reads every VM's name, sizes and state (docs/security.md)", m.local_addr()), &[]);
                }
                Some(m)
            }
            Err(e) => {
                log.event_at(Level::Error, "-", EventKind::Endpoint, &format!("no metrics endpoint: cannot listen on {}: {e}", c.metrics_listen), &[]);
                None
            }
        })
        .flatten();
    let status = (!c.status_socket.as_os_str().is_empty())
        .then(|| {
            if let Some(dir) = c.status_socket.parent() {
                // Owner-only, like the socket (an existing directory is left as it is).
                use std::os::unix::fs::DirBuilderExt;
                let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
            }
            match StatusServer::start_with(&c.status_socket, snapshots, Some(autoballoon::metrics::host_of(ctl)), Some(autoballoon::status_socket::commands_of(ctl)), log.clone()) {
                Ok(s) => {
                    log.event("-", EventKind::Endpoint, &format!("status socket {}", s.path().display()), &[("status_socket", s.path().display().to_string().into())]);
                    Some(s)
                }
                Err(e) => {
                    log.event_at(Level::Error, "-", EventKind::Endpoint, &format!("no status socket: {e}"), &[]);
                    None
                }
            }
        })
        .flatten();
    (metrics, status)
}

/// SIGHUP: re-reads the configuration; applies the log settings and every VM change
/// (VMs added, removed or changed, policies, matches, discovery), and names every other
/// changed key as needing a restart. An invalid file changes nothing.
fn reload(a: &HostArgs, running: &mut Config, ctl: &Controller, log: &Logger) {
    let Some(path) = &a.config else {
        log.event("-", EventKind::Reload, "SIGHUP: no --config file to re-read; nothing changed", &[]);
        return;
    };
    let new = match load(a) {
        Ok(c) => c,
        Err(e) => {
            log.event_at(Level::Warn, "-", EventKind::Reload, &format!("reload failed, keeping the running configuration: {e}"), &[("ok", false.into())]);
            return;
        }
    };
    for w in new.path_warnings() {
        log.event_at(Level::Warn, "-", EventKind::Reload, &w, &[]);
    }
    let plan = autoballoon::ops::plan_reload(running, &new, a.json, a.level());
    let mut applied = Vec::new();
    if plan.log.is_some() {
        running.controller.log_format = new.controller.log_format;
        running.controller.verbose = new.controller.verbose;
        running.controller.log_level = new.controller.log_level;
        applied.push("log settings".to_string());
    }
    applied.extend(autoballoon::ops::apply_reload(&plan, &new, ctl, log));
    running.defaults = new.defaults.clone();
    running.vms = new.vms.clone();
    running.matches = new.matches.clone();
    running.discovery = new.discovery.clone();
    let mut msg = format!("reloaded {}: ", path.display());
    msg.push_str(&if applied.is_empty() { "nothing to apply".into() } else { format!("applied {}", applied.join(", ")) });
    if !plan.restart_needed.is_empty() {
        msg.push_str(&format!("; RESTART NEEDED for: {} (still running with the old values)", plan.restart_needed.join(", ")));
    }
    log.event("-", EventKind::Reload, &msg, &[
        ("ok", true.into()),
        ("applied", applied.into()),
        ("restart_needed", plan.restart_needed.clone().into()),
    ]);
}

/// The daemon's status socket, from --socket, --config or the default.
fn socket_path(socket: &Option<PathBuf>, config: &Option<PathBuf>) -> Result<PathBuf, String> {
    Ok(match (socket, config) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => {
            let c = Config::load(f).map_err(|e| e.to_string())?;
            if c.controller.status_socket.as_os_str().is_empty() {
                return Err(format!("{}: controller.status_socket is \"\" (off): the daemon serves no status", f.display()));
            }
            c.controller.status_socket
        }
        (None, None) => PathBuf::from(autoballoon::config::DEFAULT_STATUS_SOCKET),
    })
}

fn status(a: StatusArgs) -> Result<(), Failure> {
    let path = socket_path(&a.socket, &a.config).map_err(Cfg)?;
    let doc = autoballoon::status_socket::query(&path).map_err(Runtime)?;
    let vms = doc["vms"].as_array().cloned().unwrap_or_default();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&vms).map_err(|e| Runtime(e.to_string()))?);
    } else {
        print!("{}", autoballoon::status_socket::table(&vms));
        if let Some(line) = autoballoon::status_socket::host_line(&doc["host"]) {
            println!("{line}");
        }
    }
    Ok(())
}

/// `autoballoon pause` / `resume`: the request, then the VM's state once the daemon shows it.
fn pause(a: VmArgs, pause: bool) -> Result<(), Failure> {
    let path = socket_path(&a.socket, &a.config).map_err(Cfg)?;
    let key = if pause { "pause" } else { "resume" };
    autoballoon::status_socket::request(&path, &serde_json::json!({ key: { "vm": a.vm } })).map_err(Runtime)?;
    // The worker takes the command within a tick; show what the status then says.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut vm = serde_json::Value::Null;
    while std::time::Instant::now() < deadline {
        let doc = autoballoon::status_socket::query(&path).map_err(Runtime)?;
        vm = doc["vms"].as_array().and_then(|v| v.iter().find(|v| v["name"] == a.vm.as_str()).cloned()).unwrap_or_default();
        if (vm["state"] == "paused") == pause {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let state = vm["state"].as_str().unwrap_or("?");
    let size = vm["size"].as_u64().filter(|_| vm["samples"].as_u64().unwrap_or(0) > 0).map_or("-".to_string(), |k| format!("{} MiB", k / 1024));
    if pause {
        println!("{}: paused (state {state}, size {size}): its balloon is left alone until `autoballoon resume {}`", a.vm, a.vm);
    } else {
        println!("{}: resumed (state {state}, size {size}): controlled again from its next sample", a.vm);
    }
    Ok(())
}

/// The VM's `last_migration` in a status document.
fn last_migration(doc: &serde_json::Value, vm: &str) -> Option<serde_json::Value> {
    doc["vms"].as_array()?.iter().find(|v| v["name"] == vm).map(|v| v["last_migration"].clone()).filter(|m| !m.is_null())
}

/// `autoballoon migrate`: Ok(true) if the migration completed.
fn migrate(a: MigrateArgs) -> Result<bool, Failure> {
    let path = socket_path(&a.socket, &a.config).map_err(Cfg)?;
    migrate_on(&a, &path).map_err(Runtime)
}

fn migrate_on(a: &MigrateArgs, path: &std::path::Path) -> Result<bool, String> {
    let path = path.to_path_buf();
    let before = autoballoon::status_socket::query(&path)?;
    if !before["vms"].as_array().is_some_and(|vms| vms.iter().any(|v| v["name"] == a.vm.as_str())) {
        return Err(format!("the daemon manages no VM named {:?}", a.vm));
    }
    let old = last_migration(&before, &a.vm);
    let bw = a.bandwidth_mib.map(|m| m.saturating_mul(1 << 20));
    autoballoon::status_socket::request(&path, &serde_json::json!({"migrate": {"vm": a.vm, "uri": a.to, "max_bandwidth": bw}}))?;
    println!("{}: migration to {} requested", a.vm, a.to);
    let deadline = std::time::Instant::now() + Duration::from_secs(a.timeout_s);
    let mut shown = String::new();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let doc = autoballoon::status_socket::query(&path)?;
        let Some(m) = last_migration(&doc, &a.vm).filter(|m| Some(m) != old.as_ref() && m["uri"] == a.to.as_str()) else {
            if std::time::Instant::now() > deadline {
                return Err("the daemon did not start the migration in time".into());
            }
            continue;
        };
        let status = m["status"].as_str().unwrap_or("?").to_string();
        if status != shown {
            println!("{}: {status}", a.vm);
            shown = status.clone();
        }
        let ended = ["completed", "cancelled", "none"].contains(&status.as_str()) || status.starts_with("failed") || status.starts_with("refused");
        if ended {
            let f = |k: &str| m[k].as_f64().map_or("-".to_string(), |v| format!("{v:.2}"));
            let mib = |k: &str| m[k].as_u64().map_or("-".to_string(), |v| format!("{}", v / 1024));
            let sent = m["sent_bytes"].as_u64().map_or("-".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0));
            println!("{}: migration to {} {status}: {} s (after {} s of preparation, {} -> {} MiB), {sent} MiB sent, downtime {} ms",
                a.vm, a.to, f("seconds"), f("prepare_s"), mib("size_asked"), mib("size_at_start"), m["downtime_ms"].as_u64().map_or("-".into(), |d| d.to_string()));
            return Ok(status == "completed");
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("still {status} after {} s; it goes on", a.timeout_s));
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Cmd::Host(a) => host(a),
        Cmd::Status(a) => status(a),
        Cmd::Pause(a) => pause(a, true),
        Cmd::Resume(a) => pause(a, false),
        Cmd::Migrate(a) => match migrate(a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(EXIT_RUNTIME),
            Err(e) => Err(e),
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Cfg(e)) => {
            eprintln!("autoballoon: error: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(Runtime(e)) => {
            eprintln!("autoballoon: error: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}
