//! One VM's broken QEMU never stalls another's control: the healthy VM keeps one sample
//! per interval and its balloon follows its agent.
mod common;

use autoballoon::controller::VmState;
use autoballoon_fakes::Fault;
use common::*;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
const INTERVAL_MS: u64 = 200;

fn healthy_beside(fault: Fault) {
    let bad = Guest::start(Fakes::start(), 1000);
    let good = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![bad.fakes.vm("bad", Some(quick_policy())), good.fakes.vm("good", Some(quick_policy()))], INTERVAL_MS);
    wait_for(T, "both controlled", || bad.fakes.last_request() == Some(expected_target(1000)) && good.fakes.last_request() == Some(expected_target(1000)));
    bad.q().set_fault(fault.clone());
    bad.set_used(2000); // the bad VM's worker has work to do: a target to apply

    // Over 4 s the healthy VM takes about one sample per interval.
    let (s0, t) = (d.status("good").samples, Instant::now());
    let mut used = 1000;
    while t.elapsed() < Duration::from_secs(4) {
        used = if used == 1000 { 1400 } else { 1000 };
        good.set_used(used);
        let asked = Instant::now();
        wait_for(Duration::from_secs(3), &format!("{fault:?}: the healthy VM follows its agent to {used} MiB"), || good.fakes.last_request() == Some(expected_target(used)));
        assert!(asked.elapsed() < Duration::from_secs(2), "{fault:?}: the healthy VM took {:?}", asked.elapsed());
    }
    let (n, secs) = (d.status("good").samples - s0, t.elapsed().as_secs_f64());
    let expected = secs * 1000.0 / INTERVAL_MS as f64;
    eprintln!("{fault:?}: {n} samples in {secs:.1} s (about {expected:.0} expected); bad: {:?}", d.status("bad").state);
    assert!(n as f64 >= expected * 0.75, "{fault:?}: only {n} samples of the healthy VM in {secs:.1} s");
    assert_eq!(d.status("good").state, VmState::Running);
    assert_eq!(d.status("good").errors, 0);
}

#[test]
fn a_qemu_that_never_replies_does_not_stall_the_other_vm() {
    healthy_beside(Fault::NeverReply);
}

#[test]
fn a_qemu_that_stops_reading_does_not_stall_the_other_vm() {
    healthy_beside(Fault::StopReading);
}

#[test]
fn a_qemu_that_sends_garbage_does_not_stall_the_other_vm() {
    healthy_beside(Fault::Garbage);
}

#[test]
fn a_slow_qemu_does_not_stall_the_other_vm() {
    healthy_beside(Fault::Delay(Duration::from_secs(2)));
}
