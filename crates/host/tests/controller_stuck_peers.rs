//! Peers that stop reading or never answer: the worker keeps sampling what it can,
//! reports the VM unreachable, and `stop()` still returns promptly.
mod common;

use autoballoon::controller::VmState;
use autoballoon_fakes::{Fault, MigrationOutcome};
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

#[test]
fn an_agent_that_never_reads_through_hundreds_of_migrations() {
    let g = Guest::start(Fakes::start(), 1000);
    let mut d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 100);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    g.p().set_reading(false);
    let samples0 = d.status("a").samples;
    for i in 0..2000 {
        g.q().start_migration();
        g.q().finish_migration(MigrationOutcome::Failed);
        if i % 20 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        if d.status("a").agent.notices_dropped > 0 && i >= 300 {
            break;
        }
    }
    wait_for(T, "notices dropped", || d.status("a").agent.notices_dropped > 0);
    // The worker keeps its one sample per interval.
    d.wait_samples("a", 10, Duration::from_secs(3));
    assert!(d.status("a").samples > samples0 + 10);
    g.set_used(1500);
    wait_for(T, "control goes on: target 1564 MiB", || g.fakes.last_request() == Some(expected_target(1500)));
    assert!(d.log.count("notice_dropped") <= 6, "{}", d.log.text());
    let took = d.stop();
    assert!(took < Duration::from_secs(3), "stop took {took:?}");
}

#[test]
fn a_notice_dropped_while_the_agent_did_not_read_reaches_it_once_it_reads() {
    use autoballoon_core::protocol::{HostMessage, MigrationOutcome as Outcome};
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 100);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    g.p().set_reading(false);
    for i in 0..5000 {
        g.q().start_migration();
        g.q().finish_migration(MigrationOutcome::Failed);
        if i % 20 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        if d.status("a").agent.notices_dropped > 0 {
            break;
        }
    }
    wait_for(T, "notices dropped", || d.status("a").agent.notices_dropped > 0);
    // A migration cancelled while the port is full: its notices are dropped too.
    g.q().start_migration();
    g.q().finish_migration(MigrationOutcome::Cancelled);
    wait_for(T, "the cancellation seen", || d.status("a").last_migration.is_some_and(|r| r.status == "cancelled"));
    assert!(!g.p().received().contains(&HostMessage::MigrationEnded { outcome: Outcome::Cancelled }));
    // The agent reads again: the last notice reaches it, so it does not think a migration runs.
    g.p().set_reading(true);
    wait_for(T, "the dropped end notice delivered", || g.p().received().last() == Some(&HostMessage::MigrationEnded { outcome: Outcome::Cancelled }));
}

fn qemu_stuck(fault: Fault) {
    let g = Guest::start(Fakes::start(), 1000);
    let mut d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 100);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    g.q().set_fault(fault.clone());
    // The QMP command timeout is 5 s.
    wait_for(Duration::from_secs(15), "the VM reported unreachable", || {
        let s = d.status("a");
        s.state == VmState::Unreachable && s.errors > 0
    });
    // Its samples stopped: the decider says once that it balances without it.
    wait_for(T, "the VM left out of the balancer, logged", || d.log.count("sample_stale") > 0);
    assert_eq!(d.log.count("sample_stale"), 1, "{}", d.log.text());
    let took = d.stop();
    eprintln!("{fault:?}: stop took {took:?}");
    assert!(took < Duration::from_secs(6), "{fault:?}: stop took {took:?}");
}

#[test]
fn qemu_that_stops_reading_is_reported_and_stop_returns() {
    qemu_stuck(Fault::StopReading);
}

#[test]
fn qemu_that_never_replies_is_reported_and_stop_returns() {
    qemu_stuck(Fault::NeverReply);
}

#[test]
fn stop_while_a_qmp_command_hangs_cuts_it_short() {
    let g = Guest::start(Fakes::start(), 1000);
    let mut d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 100);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    g.q().set_fault(Fault::NeverReply);
    // The worker is now inside a command QEMU will never answer.
    let n = g.q().command_count("query-balloon");
    wait_for(T, "a command sent to the silent QEMU", || g.q().command_count("query-balloon") > n);
    let took = d.stop();
    eprintln!("stop inside a hung command took {took:?}");
    // It used to wait out the 5 s QMP command timeout.
    assert!(took < Duration::from_secs(1), "stop took {took:?}");
    assert_eq!(d.log.count("disconnected"), 0, "a session cut by stop is not a lost one: {}", d.log.text());
}
