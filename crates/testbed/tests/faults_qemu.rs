//! QEMU killed (SIGKILL) while the controller is shrinking its VM, a large inflation under
//! way: the VM is marked unreachable, the other VM stays under control, and a QEMU started
//! again at the same socket is controlled again.
mod common;

use autoballoon::controller::VmState;
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use autoballoon_testbed::{wait_for, Qemu, VmSpec};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[test]
fn qemu_killed_mid_inflation_is_unreachable_then_controlled_again() {
    let mut vms = common::boot_all("faults_qemu", &[("one", 768), ("two", 512)]);
    let two = vms.pop().unwrap();
    let mut one = vms.pop().unwrap();
    let dir = one.qmp.parent().unwrap().to_path_buf();
    let log = dir.join("controller.log");
    let q1 = Qmp::connect_with_retry(&one.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    let ctl = common::controller_logging(vec![common::vm_config("one", &one), common::vm_config("two", &two)], &log);
    let (v1, v2) = (&ctl.vm("one").unwrap(), &ctl.vm("two").unwrap());

    // The controller's first shrink of the idle 768 MiB guest: caught while QEMU's balloon
    // is on its way (at least 16 MiB inflated), still more than 64 MiB above the target.
    let mut seen = (0, 0);
    let mid = wait_for(Duration::from_secs(90), Duration::from_millis(10), || {
        let (Some(t), Ok(actual)) = (v1.snapshot().target, q1.query_balloon()) else { return false };
        seen = (t.to_bytes_saturating().0 / MIB, actual / MIB);
        actual <= 752 * MIB && actual > t.to_bytes_saturating().0 + 64 * MIB
    });
    assert!(mid.is_some(), "no inflation under way seen (last target, actual: {seen:?} MiB)");
    drop(q1);
    one.kill();
    eprintln!("killed QEMU one with the balloon at {} MiB, shrinking to {} MiB", seen.1, seen.0);

    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(100), || v1.snapshot().state == VmState::Unreachable).is_some(), "state {:?}", v1.snapshot().state);
    assert!(v1.snapshot().errors >= 1);
    // The other VM goes on: sampled, running, shrunk from its 512 MiB.
    assert!(common::keeps_ticking(v2, 3, Duration::from_secs(30)), "worker two: {:?}", v2.snapshot().state);
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(v2) <= Kib::from_mib_saturating(384)).is_some(), "two shrinks: {}", common::size(v2));

    // A new QEMU at the same socket is controlled again: sampled and shrunk.
    drop(one);
    let again = Qemu::start(&common::image(), VmSpec::new("one", Kib::from_mib_saturating(768)), &dir).unwrap();
    again.wait_booted(Duration::from_secs(180)).unwrap();
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || v1.snapshot().state == VmState::Running).is_some(), "one reconnects: {:?}", v1.snapshot().state);
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(v1) <= Kib::from_mib_saturating(400)).is_some(), "the new QEMU's guest is shrunk: {}", common::size(v1));
    assert!(common::keeps_ticking(v2, 2, Duration::from_secs(20)));
    assert!(common::log_events(&log, "worker_panicked").is_empty(), "a worker panicked: {:?}", common::log_events(&log, "worker_panicked"));
    ctl.stop();
}
