//! Killing the agent or QEMU does not crash the controller; other VMs go on.
mod common;

use autoballoon::controller::VmState;
use autoballoon_testbed::{wait_for, Qemu, VmSpec};
use autoballoon_core::Kib;
use std::time::Duration;

#[test]
fn controller_survives_agent_and_qemu_deaths() {
    let mut one = common::boot("resilience", "one", 768);
    let two = common::boot("resilience", "two", 768);
    let ctl = common::controller(vec![common::vm_config("one", &one), common::vm_config("two", &two)]);
    let (v1, v2) = (&ctl.vm("one").unwrap(), &ctl.vm("two").unwrap());
    let agent_seen = |v: &autoballoon::controller::VmHandle| wait_for(Duration::from_secs(30), Duration::from_millis(200), || v.snapshot().source == autoballoon_core::sample::SampleSource::Agent);
    assert!(agent_seen(v1).is_some() && agent_seen(v2).is_some(), "agents report");

    // Kill the agent in guest one: the controller falls back to guest-stats and goes on.
    one.console.run("kill -9 $(pidof autoballoon-guest)", Duration::from_secs(20)).unwrap();
    assert!(common::keeps_ticking(v1, 3, Duration::from_secs(20)), "worker one still ticks and runs: {:?}", v1.snapshot().state);

    // Kill QEMU one: its worker says unreachable; worker two keeps managing its VM.
    one.kill();
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(200), || v1.snapshot().state == VmState::Unreachable).is_some(), "state {:?}", v1.snapshot().state);
    assert!(common::keeps_ticking(v2, 3, Duration::from_secs(20)), "worker two still ticks and runs: {:?}", v2.snapshot().state);
    assert!(v1.snapshot().errors >= 1);

    // A new QEMU at the same socket is picked up again (retry with back-off).
    let dir = one.qmp.parent().unwrap().to_path_buf();
    drop(one);
    let again = Qemu::start(&common::image(), VmSpec::new("one", Kib::from_mib_saturating(768)), &dir).unwrap();
    again.wait_booted(Duration::from_secs(120)).unwrap();
    assert!(wait_for(Duration::from_secs(30), Duration::from_millis(200), || v1.snapshot().state == VmState::Running).is_some(),
        "worker one reconnects: {:?}", v1.snapshot().state);
    ctl.stop();
}
