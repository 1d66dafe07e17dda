//! A memory spike in a shrunk guest is followed by growth, and completes with no OOM kill
//! (deflate-on-oom on; the guest's dmesg is checked).
mod common;

use autoballoon_testbed::{wait_for, wait_settled, VmSpec};
use autoballoon_core::Kib;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn spike_grows_the_guest_without_oom() {
    let q = common::boot("spike_growth", "spike", 1536);
    let ctl = common::controller(vec![common::vm_config("spike", &q)]);
    let vm = &ctl.vm("spike").unwrap();
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(vm) <= Kib::from_mib_saturating(384)).is_some(), "shrinks first: {}", common::size(vm));
    let before = wait_settled(Duration::from_secs(30), || common::size(vm)).expect("settles");

    let peak = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (p, st, s2) = (peak.clone(), vm.status_view(), stop.clone());
    let watcher = std::thread::spawn(move || {
        while !s2.load(Ordering::SeqCst) {
            p.fetch_max(st.snapshot().size.0, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    // 3 threads x 300 MiB: far more than the shrunk guest has.
    let out = q.console.run("spike 3 300 3 0 1", Duration::from_secs(240)).expect("spike finishes");
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    let peak = Kib(peak.load(Ordering::SeqCst));
    eprintln!("{}", out.text);
    assert_eq!(out.status, 0, "spike exit status");
    assert!(out.text.contains("SPIKE done cycles=1 failed=0"), "spike output: {}", out.text);
    assert!(peak >= before.saturating_add(Kib::from_mib_saturating(700)), "the guest grew from {before} only to {peak}");
    assert_eq!(autoballoon_testbed::guest::oom_kills(&q), 0, "OOM kills (dmesg and console)");
    // The guest ran short (its PSI trigger fired) and said so: the host decided off its tick.
    let link = vm.snapshot().agent;
    assert!(link.short > 0, "no report said the guest ran short: {link:?}");
    // And it shrinks back afterwards.
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(vm) <= before.saturating_add(Kib::from_mib_saturating(128))).is_some(),
        "shrinks back after the spike: {} vs {before}", common::size(vm));
    ctl.stop();
}

/// A program that maps its memory and touches it slowly stalls late, if at all: with the
/// pressure trigger off, the agent's commitment watch alone sees the mapping, says the
/// guest runs short, and the host grows it ahead of the touches; no OOM kill. The agent's
/// regular samples are 2 s apart here: one that falls within the watch's 100 ms of the
/// mapping sees it first, and the watch then has nothing to say (CI saw that once at 1 s).
#[test]
fn a_slow_ramp_is_seen_by_the_commitment_watch() {
    let spec = VmSpec { append: "autoballoon.agent_extra=--no-pressure-trigger,--interval-ms,2000".into(), ..VmSpec::new("ramp", Kib::from_mib_saturating(1536)) };
    let q = common::kernel::boot("spike_growth_ramp", &common::image(), spec);
    let ctl = common::controller(vec![common::vm_config("ramp", &q)]);
    let vm = &ctl.vm("ramp").unwrap();
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(vm) <= Kib::from_mib_saturating(384)).is_some(), "shrinks first: {}", common::size(vm));
    let before = wait_settled(Duration::from_secs(30), || common::size(vm)).expect("settles");
    let short_before = vm.snapshot().agent.short;
    // 1 thread x 600 MiB, touched at 100 MiB/s.
    let out = q.console.run("spike 1 600 1 0 1 ramp=100", Duration::from_secs(240)).expect("the ramp finishes");
    assert_eq!(out.status, 0, "{}", out.text);
    assert!(out.text.contains("SPIKE done cycles=1 failed=0"), "spike output: {}", out.text);
    let link = vm.snapshot().agent;
    assert!(link.short > short_before, "no report said the guest ran short (the pressure trigger is off: only the watch can): {link:?}");
    assert_eq!(autoballoon_testbed::guest::oom_kills(&q), 0, "OOM kills");
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(vm) <= before.saturating_add(Kib::from_mib_saturating(128))).is_some(), "shrinks back: {} vs {before}", common::size(vm));
    ctl.stop();
}
