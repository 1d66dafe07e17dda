//! `autoballoon status` end to end, without QEMU: a controller whose VMs' QMP sockets do
//! not exist (so they show `unreachable`), its status socket, and the binary's client.

use autoballoon::config::{Config, ControllerConfig, LogFormat, PolicyConfig, VmConfig};
use autoballoon::controller::{Controller, VmState};
use autoballoon::log::Logger;
use autoballoon::metrics::snapshots_of;
use autoballoon::status_socket::StatusServer;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("status-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn controller(dir: &Path, names: &[&str]) -> Controller {
    let vms = names
        .iter()
        .map(|n| VmConfig::new(n, dir.join(format!("{n}.qmp"))))
        .collect();
    let config = Config { controller: ControllerConfig { interval_ms: 100, log_format: LogFormat::Json, ..Default::default() }, defaults: PolicyConfig::default(), vms, ..Default::default() };
    let ctl = Controller::start(&config, Logger::new(LogFormat::Json, false).to_file(&dir.join("log")).unwrap());
    let t = Instant::now();
    while !ctl.vms().iter().all(|v| v.snapshot().state == VmState::Unreachable) {
        assert!(t.elapsed() < Duration::from_secs(20), "VMs never became unreachable");
        std::thread::sleep(Duration::from_millis(50));
    }
    ctl
}

/// (exit code, stdout, stderr) of `autoballoon ARGS`.
fn autoballoon(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn status_prints_the_table_and_json_of_a_running_controller() {
    let dir = tmp("table");
    let ctl = controller(&dir, &["web1", "db1"]);
    let sock = dir.join("status.sock");
    let server = StatusServer::start(&sock, snapshots_of(&ctl), Logger::new(LogFormat::Json, false)).unwrap();
    let meta = std::fs::metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "owner only");

    let (code, out, err) = autoballoon(&["status", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    eprintln!("{out}");
    let lines: Vec<&str> = out.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["VM", "STATE", "SIZE", "TARGET", "USED", "BALLOON", "SOURCE", "CLASS", "ACTIONS", "LAST", "REASON"]);
    for (line, name) in lines[1..3].iter().zip(["web1", "db1"]) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cells[..8], [name, "unreachable", "-", "-", "-", "-", "none", "-"], "{out}");
    }

    let (code, out, err) = autoballoon(&["status", "--json", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let vms: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(vms.as_array().unwrap().len(), 2);
    assert_eq!(vms[0]["name"], "web1");
    assert_eq!(vms[0]["state"], "unreachable");
    assert!(vms[1]["metrics"]["ticks"].is_u64() && vms[1]["agent"]["garbage"] == 0);

    // --config finds the socket in the file.
    let cfg = dir.join("host.toml");
    std::fs::write(&cfg, format!("[controller]\nstatus_socket = {:?}\n[[vm]]\nname = 'x'\nqmp = '/x'\n", sock.to_str().unwrap())).unwrap();
    let (code, out, err) = autoballoon(&["status", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("web1"), "{out}");

    // Stopping removes the socket; then the client says no daemon is listening.
    server.stop();
    assert!(!sock.exists(), "the socket is removed on stop");
    let (code, _, err) = autoballoon(&["status", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 1, "a runtime failure");
    assert!(err.contains(&format!("no daemon listening on {} (is `autoballoon host` running?)", sock.display())), "{err}");
    ctl.stop();
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_is_not() {
    let dir = tmp("stale");
    let ctl = controller(&dir, &["a"]);
    let sock = dir.join("status.sock");
    // A dead daemon's socket: bound, then the listener dropped without removing the file.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let (code, _, err) = autoballoon(&["status", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 1, "a runtime failure");
    assert!(err.contains("no daemon listening on"), "a stale socket reads as no daemon: {err}");
    let first = StatusServer::start(&sock, snapshots_of(&ctl), Logger::new(LogFormat::Json, false)).expect("replaces the stale socket");
    let e = StatusServer::start(&sock, snapshots_of(&ctl), Logger::new(LogFormat::Json, false)).err().expect("a live daemon's socket is kept");
    assert!(e.contains("another daemon is listening on"), "{e}");
    assert_eq!(autoballoon(&["status", "--socket", sock.to_str().unwrap()]).0, 0, "the first server still answers");
    // Not a socket: left alone.
    let file = dir.join("file");
    std::fs::write(&file, "x").unwrap();
    let e = StatusServer::start(&file, snapshots_of(&ctl), Logger::new(LogFormat::Json, false)).err().unwrap();
    assert!(e.contains("is not a socket"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    first.stop();
    ctl.stop();
}

#[test]
fn another_user_gets_permission_denied() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run the client as another user (setpriv)");
        return;
    }
    let dir = tmp("perm");
    // The client runs as nobody: it must be able to reach the directory.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ctl = controller(&dir, &["a"]);
    let sock = dir.join("status.sock");
    let server = StatusServer::start(&sock, snapshots_of(&ctl), Logger::new(LogFormat::Json, false)).unwrap();
    let exe = env!("CARGO_BIN_EXE_autoballoon");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", exe, "status", "--socket", sock.to_str().unwrap()])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("Permission denied") && !err.contains("status socket") {
        eprintln!("skipped: nobody cannot run {exe} here ({err})");
    } else {
        assert_eq!(out.status.code(), Some(1), "a runtime failure: {err}");
        assert!(err.contains(&format!("permission denied on {}", sock.display())), "{err}");
    }
    server.stop();
    ctl.stop();
}

#[test]
fn migrate_is_refused_with_reasons_and_a_read_only_socket_takes_no_commands() {
    use autoballoon::status_socket::commands_of;
    let dir = tmp("migrate");
    let ctl = controller(&dir, &["web1"]);
    let sock = dir.join("status.sock");
    let server = StatusServer::start_with(&sock, snapshots_of(&ctl), Some(autoballoon::metrics::host_of(&ctl)), Some(commands_of(&ctl)), Logger::new(LogFormat::Json, false)).unwrap();
    let s = sock.to_str().unwrap();
    let (code, _, err) = autoballoon(&["migrate", "web1", "--to", "tcp:127.0.0.1:9", "--socket", s]);
    assert_eq!(code, 1, "refused by the daemon: a runtime failure");
    assert!(err.contains("web1 is unreachable"), "{err}");
    let (code, _, err) = autoballoon(&["migrate", "nope", "--to", "tcp:127.0.0.1:9", "--socket", s]);
    assert_eq!(code, 1);
    assert!(err.contains("no VM named \"nope\""), "{err}");
    // A raw bad request gets an error answer; status still works beside it.
    let r = autoballoon::status_socket::request(&sock, &serde_json::json!({"migrate": {"vm": "web1", "uri": "", "max_bandwidth": null}}));
    assert!(r.unwrap_err().contains("`uri`"));
    let (code, out, _) = autoballoon(&["status", "--socket", s]);
    assert_eq!(code, 0);
    assert!(out.lines().last().unwrap().starts_with("host: reclaim lean;"), "{out}");
    server.stop();

    let server = StatusServer::start(&sock, snapshots_of(&ctl), Logger::new(LogFormat::Json, false)).unwrap();
    let r = autoballoon::status_socket::request(&sock, &serde_json::json!({"migrate": {"vm": "web1", "uri": "tcp:127.0.0.1:9", "max_bandwidth": null}}));
    assert!(r.unwrap_err().contains("takes no commands"));
    server.stop();
    ctl.stop();
}
