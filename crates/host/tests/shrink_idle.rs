//! An idle 1 GiB guest is shrunk to at most 25 % of its size in under 30 s, with no OOM kill.
mod common;

use autoballoon::testbed::wait_for;
use autoballoon_core::Kib;
use std::time::Duration;

#[test]
fn idle_guest_shrinks_to_a_quarter_within_30s() {
    let q = common::boot("shrink_idle", "idle", 1024);
    let ctl = common::controller(vec![common::vm_config("idle", &q)]);
    let vm = ctl.vm("idle").unwrap();
    let quarter = Kib::from_mib(256);
    let took = wait_for(Duration::from_secs(30), Duration::from_millis(100), || common::size(vm) <= quarter);
    let s = vm.snapshot();
    assert!(took.is_some(), "size {} after 30 s, want <= {quarter}; source {}, last reason: {}", s.size, s.source, s.last_reason);
    eprintln!("shrunk 1024 MiB -> {} in {:.1} s (source {})", s.size, took.unwrap().as_secs_f64(), s.source);
    assert_eq!(s.source, "agent", "the agent's reports drive the policy");
    // Still alive and well a little later, at a steady size.
    let settled = autoballoon::testbed::wait_settled(Duration::from_secs(30), || common::size(vm)).expect("size settles");
    assert!(settled <= quarter, "settled at {settled}");
    assert_eq!(q.console.run("echo alive", Duration::from_secs(20)).unwrap().text.trim(), "alive");
    assert_eq!(common::guest_oom_kills(&q), 0, "OOM kills in dmesg");
    ctl.stop();
}
