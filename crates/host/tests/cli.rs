//! The `autoballoon` binary's behaviour on bad input: clear errors naming the key, exit 2.
use autoballoon_core::units::Kib;
use autoballoon_fakes::{FakeAgentPort, FakeQemu, FakeQemuConfig, MigrationOutcome};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn autoballoon(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn invalid_config_names_the_key() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let p = dir.join("bad.toml");
    std::fs::write(&p, "[defaults]\nmin_mib = 0\n[[vm]]\nname = 'a'\nqmp = '/nonexistent'\n").unwrap();
    let (code, err) = autoballoon(&["host", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("defaults.min_mib"), "{err}");
    std::fs::write(&p, "[controler]\n").unwrap();
    let (code, err) = autoballoon(&["host", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("controler"), "{err}");
    let (code, err) = autoballoon(&["host", "--config", "/nonexistent.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read /nonexistent.toml"), "{err}");
    let (code, err) = autoballoon(&["host"]);
    assert_eq!(code, 2);
    assert!(err.contains("--vm"), "{err}");
    let (code, err) = autoballoon(&["host", "--vm", "novalue"]);
    assert_eq!(code, 2);
    assert!(err.contains("NAME=QMP_SOCKET"), "{err}");
}

#[test]
fn example_config_is_accepted_by_the_binary_parser() {
    // The docs' example parses (the controller would then start; we only check parsing here).
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/example-host.toml")).unwrap();
    assert!(autoballoon::config::Config::parse(&text).is_ok());
}

/// The daemon as shipped: managing a fake QEMU whose agent never reads while hundreds of
/// migrations come and go, it exits 0 within a few seconds of SIGTERM.
#[test]
fn sigterm_stops_the_daemon_promptly_with_an_agent_that_never_reads() {
    let qemu = FakeQemu::start(FakeQemuConfig::new(Kib::from_gib_saturating(4)));
    let port = FakeAgentPort::start();
    let log = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sigterm.log");
    let vm = format!("a={},agent={}", qemu.qmp_path().display(), port.path().display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_autoballoon"))
        .args(["host", "--vm", &vm, "--json"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    assert!(port.wait_connected(Duration::from_secs(10)), "the daemon connects to the agent port");
    assert!(autoballoon_fakes::wait_until(Duration::from_secs(10), || qemu.migration_events_enabled()));
    port.set_reading(false);
    for i in 0..600 {
        qemu.start_migration();
        qemu.finish_migration(MigrationOutcome::Failed);
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    std::thread::sleep(Duration::from_millis(1500)); // let the daemon's 1 s tick see them
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("the daemon did not exit within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(t.elapsed() < Duration::from_secs(3), "exit took {:?}", t.elapsed());
    assert!(text.contains("\"event\":\"migration_started\""), "{text}");
}

/// A configuration with no VM (the packaged default): `--check-config` accepts it, and the
/// daemon runs with none, serving an empty status, until SIGTERM (exit 0).
#[test]
fn a_config_with_no_vms_is_valid_and_the_daemon_runs_with_none() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("novms-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("status.sock");
    let conf = dir.join("host.toml");
    std::fs::write(&conf, format!("[controller]\nmetrics_listen = \"\"\nstatus_socket = \"{}\"\n", sock.display())).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon")).args(["host", "--check-config", "--config", conf.to_str().unwrap()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("configuration OK: 0 VM(s)"), "{stdout}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_autoballoon")).args(["host", "--config", conf.to_str().unwrap()]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    assert!(autoballoon_fakes::wait_until(Duration::from_secs(10), || autoballoon::status_socket::query(&sock).is_ok()), "the status socket answers");
    let doc = autoballoon::status_socket::query(&sock).unwrap();
    assert_eq!(doc["vms"].as_array().map(Vec::len), Some(0), "{doc}");
    assert!(child.try_wait().unwrap().is_none(), "the daemon keeps running with no VM");
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Exit 1 for a runtime failure, 2 for a usage or configuration error, as `--help` says.
#[test]
fn exit_status_tells_runtime_failures_from_configuration_errors() {
    let (code, err) = autoballoon(&["status", "--socket", "/nonexistent/status.sock"]);
    assert_eq!(code, 1, "no daemon: a runtime failure: {err}");
    assert!(err.contains("no daemon listening"), "{err}");
    let (code, err) = autoballoon(&["status", "--config", "/nonexistent.toml"]);
    assert_eq!(code, 2, "an unreadable configuration: {err}");
    let (code, err) = autoballoon(&["host", "--vm", "a=/x.qmp", "--log-level", "loud"]);
    assert_eq!(code, 2, "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon")).args(["host", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit status: 0 success; 1 a runtime failure") && help.contains("2 a usage or configuration error"), "{help}");
    assert!(help.contains("--log-level <LEVEL>") && help.contains("error, warn, info"), "{help}");
}

/// Under systemd (Type=notify, WatchdogSec): READY=1 once the configuration is loaded,
/// WATCHDOG=1 from the main loop, STOPPING=1 on SIGTERM; the status socket is owner-only in
/// an owner-only directory the daemon creates.
#[test]
fn the_daemon_notifies_systemd_and_keeps_its_socket_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixDatagram;
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let notify = dir.join("notify.sock");
    let systemd = UnixDatagram::bind(&notify).unwrap();
    systemd.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let sock = dir.join("run/status.sock");
    let conf = dir.join("host.toml");
    std::fs::write(&conf, format!("[controller]\nmetrics_listen = \"\"\nstatus_socket = \"{}\"\n", sock.display())).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_autoballoon"))
        .args(["host", "--config", conf.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &notify)
        .env("WATCHDOG_USEC", "400000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let recv = || {
        let mut buf = [0u8; 256];
        let n = systemd.recv(&mut buf).expect("a notification within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(recv(), "READY=1\nSTATUS=managing 0 VM(s)");
    // The socket exists by READY=1.
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sock), 0o600, "status socket");
    assert_eq!(mode(&dir.join("run")), 0o700, "the directory the daemon created for it");
    let t = Instant::now();
    assert_eq!(recv(), "WATCHDOG=1");
    assert_eq!(recv(), "WATCHDOG=1");
    assert!(t.elapsed() < Duration::from_secs(2), "two pings (every 0.2 s) took {:?}", t.elapsed());
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let mut last = String::new();
    while last != "STOPPING=1" {
        last = recv();
        assert!(last == "WATCHDOG=1" || last == "STOPPING=1", "{last}");
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
