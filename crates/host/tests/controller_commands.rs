//! Commands from outside: Pause leaves the balloon alone, Resume takes control again,
//! Retarget moves the VM's control to another QEMU (and agent port).
mod common;

use autoballoon::controller::{VmCommand, VmState};
use common::*;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

#[test]
fn pause_leaves_the_balloon_alone_and_resume_takes_control_again() {
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));

    assert!(d.ctl().vm("a").unwrap().command(VmCommand::Pause));
    wait_for(T, "state paused", || d.status("a").state == VmState::Paused);
    let n = g.fakes.requests().len();
    g.set_used(2000);
    let samples = d.status("a").samples;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        assert_eq!(g.fakes.requests().len(), n, "a request while paused: {:?}", g.fakes.requests());
        assert_eq!(d.status("a").state, VmState::Paused);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.status("a").samples > samples, "the worker still samples while paused");

    assert!(d.ctl().vm("a").unwrap().command(VmCommand::Resume));
    wait_for(T, "target 2064 MiB after resume", || g.fakes.last_request() == Some(expected_target(2000)));
    wait_for(T, "state running", || d.status("a").state == VmState::Running);
    assert_eq!(d.log.count("pause"), 1);
    assert_eq!(d.log.count("resume"), 1);
}

#[test]
fn pause_stops_a_shrink_in_flight_where_the_balloon_is() {
    let (g, d) = Guest::slow_balloon();
    let asked = g.shrink_in_flight();

    assert!(d.ctl().vm("a").unwrap().command(VmCommand::Pause));
    wait_for(T, "the balloon stopped for the pause", || g.fakes.last_request().is_some_and(|r| r > asked));
    let stopped = g.fakes.last_request().unwrap();
    // It stays there while paused: QEMU was told to stop, and nothing else is asked. (The
    // balloon moves on between the controller's read of `actual` and its request: 16 MiB is
    // 27 ms at the fake's 600 MiB/s, for a loaded test machine; the shrink asked was to
    // hundreds of MiB below.)
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(1) {
        assert!(g.q().actual() >= stopped.saturating_sub(mib(16)), "stopped at {stopped}, actual {}", g.q().actual());
        assert_eq!(g.fakes.last_request(), Some(stopped));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.log.text().contains("stopped at") && d.log.text().contains("for the pause"), "{}", d.log.text());
}

#[test]
fn retarget_moves_control_to_the_new_qemu() {
    let old = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![old.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB at the old QEMU", || old.fakes.last_request() == Some(expected_target(1000)));

    let new = Guest::start(Fakes::start(), 700);
    let (qmp, agent) = (new.q().qmp_path().to_path_buf(), Some(new.p().path().to_path_buf()));
    assert!(d.ctl().vm("a").unwrap().command(VmCommand::Retarget { qmp, agent }));
    wait_for(T, "target 764 MiB at the new QEMU", || new.fakes.last_request() == Some(expected_target(700)));
    assert!(new.p().is_connected(), "the agent link moved too");
    let n = old.fakes.requests().len();
    old.set_used(2000);
    new.set_used(1500);
    wait_for(T, "target 1564 MiB at the new QEMU", || new.fakes.last_request() == Some(expected_target(1500)));
    assert_eq!(old.fakes.requests().len(), n, "the old QEMU is left alone: {:?}", old.fakes.requests());
    assert_eq!(d.status("a").state, VmState::Running);
    assert_eq!(d.log.count("retarget"), 1);
    assert_requests_in_bounds(&new.q());
}
