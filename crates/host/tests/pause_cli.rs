//! `autoballoon pause VM` / `autoballoon resume VM` through the daemon's status socket, on
//! a fake QEMU and agent: a paused VM keeps its size and gets no target, whatever its
//! guest does, until it is resumed; an unknown VM is refused (exit 1).
mod common;

use autoballoon::config::LogFormat;
use autoballoon::controller::VmState;
use autoballoon::log::Logger;
use autoballoon::metrics::snapshots_of;
use autoballoon::status_socket::{commands_of, StatusServer};
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

fn autoballoon(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn pause_keeps_the_size_until_resume_through_the_cli() {
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    wait_for(T, "size 1064 MiB sampled", || d.status("a").size == expected_target(1000));
    let dir = autoballoon_fakes::TempDir::new().unwrap();
    let sock = dir.path().join("status.sock");
    let server = StatusServer::start_with(&sock, snapshots_of(d.ctl()), Some(autoballoon::metrics::host_of(d.ctl())), Some(commands_of(d.ctl())), Logger::new(LogFormat::Json, false)).unwrap();
    let s = sock.to_str().unwrap();

    let (code, out, err) = autoballoon(&["pause", "a", "--socket", s]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("a: paused (state paused, size 1064 MiB)"), "{out}");
    assert_eq!(d.status("a").state, VmState::Paused);
    let (_, table, _) = autoballoon(&["status", "--socket", s]);
    assert!(table.lines().any(|l| l.starts_with("a ") && l.contains(" paused ")), "{table}");

    // The guest needs more, then less: nothing is asked of QEMU while paused.
    let n = g.fakes.requests().len();
    g.set_used(2000);
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(1500) {
        assert_eq!(g.fakes.requests().len(), n, "a request while paused: {:?}", g.fakes.requests());
        std::thread::sleep(Duration::from_millis(50));
    }
    g.set_used(500);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(g.fakes.requests().len(), n, "a request while paused: {:?}", g.fakes.requests());
    assert_eq!(g.fakes.last_request(), Some(expected_target(1000)), "the size it had when paused");

    let (code, out, err) = autoballoon(&["resume", "a", "--socket", s]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("a: resumed"), "{out}");
    wait_for(T, "target 564 MiB after resume", || g.fakes.last_request() == Some(expected_target(500)));
    wait_for(T, "state running", || d.status("a").state == VmState::Running);

    let (code, _, err) = autoballoon(&["pause", "nope", "--socket", s]);
    assert_eq!(code, 1, "refused by the daemon: {err}");
    assert!(err.contains("no VM named \"nope\""), "{err}");
    assert_eq!(d.log.count("pause"), 1);
    assert_eq!(d.log.count("resume"), 1);
    server.stop();
}
