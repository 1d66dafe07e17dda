//! A live migration's QEMU killed half-way, on real QEMU: the destination killed, the
//! source's migration fails and the source is controlled as before (growth and shrinking
//! applied); the source killed during a migration the controller started, it is
//! unreachable until a QEMU at its socket is controlled again, and the request is over.
//! The other VM stays under control throughout, and no worker panics.
mod common;

use autoballoon::controller::{VmCommand, VmHandle, VmState};
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use autoballoon_testbed::{start_migration, wait_for, wait_vm_settled, Qemu, VmSpec};
use std::path::Path;
use std::time::{Duration, Instant};

/// Slow enough that the migration of a shrunk guest runs for a minute.
const SLOW: u64 = 1 << 20;

/// Boots `a` (768 MiB) and `b` (512 MiB) under one controller logging to `log`, waits
/// until both are shrunk, and starts a slow migration of `a` to a new destination QEMU:
/// asked of the controller (`autoballoon migrate`) if `ours`, else over QMP (another
/// tool); returns once the controller sees it. Also returns `a`'s settled size before it.
fn migrating(test: &str, log: &Path, ours: bool) -> (Qemu, Qemu, Qemu, Qmp, autoballoon::controller::Controller, Kib) {
    let mut vms = common::boot_all(test, &[("a", 768), ("b", 512)]);
    let (b, a) = (vms.pop().unwrap(), vms.pop().unwrap());
    let ctl = common::controller_logging(vec![common::vm_config("a", &a), common::vm_config("b", &b)], log);
    let (va, vb) = (ctl.vm("a").unwrap(), ctl.vm("b").unwrap());
    for (v, max) in [(&va, 400), (&vb, 320)] {
        assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(v) <= Kib::from_mib_saturating(max)).is_some(), "{} shrinks: {}", v.name, common::size(v));
    }
    let settled = wait_vm_settled(&va, Duration::from_secs(60)).unwrap();
    let (dst, _) = Qemu::start_incoming(&common::image(), VmSpec::new("a-dst", Kib::from_mib_saturating(768)), &common::vm_dir(test, "a-dst")).unwrap();
    let qa = Qmp::connect_with_retry(&a.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    if ours {
        let uri = format!("tcp:127.0.0.1:{}", dst.spec.incoming_port.unwrap());
        assert!(va.command(VmCommand::Migrate { uri, max_bandwidth: Some(SLOW) }));
    } else {
        start_migration(&qa, &dst, SLOW).unwrap();
    }
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(100), || va.snapshot().state == VmState::Migrating).is_some(), "a migrating: {:?}", va.snapshot().state);
    assert!(qa.query_migrate().unwrap().status.is_active(), "the migration runs");
    (a, b, dst, qa, ctl, settled)
}

fn no_panics(log: &Path) {
    let p = common::log_events(log, "worker_panicked");
    assert!(p.is_empty(), "a worker panicked: {p:?}");
}

fn b_controlled(vb: &VmHandle) {
    assert!(common::keeps_ticking(vb, 3, Duration::from_secs(30)), "b: {:?}", vb.snapshot().state);
    assert!(common::size(vb) <= Kib::from_mib_saturating(320), "b stays shrunk: {}", common::size(vb));
}

#[test]
fn destination_killed_mid_migration_the_source_is_controlled_as_before() {
    let log = common::vm_dir("faults_mig_dst", "log").join("controller.log");
    let (a, _b, mut dst, qa, ctl, settled) = migrating("faults_mig_dst", &log, false);
    let (va, vb) = (ctl.vm("a").unwrap(), ctl.vm("b").unwrap());
    dst.kill();

    // The source's migration fails; its phase ends and the VM runs under control again.
    assert!(wait_for(Duration::from_secs(30), Duration::from_millis(100), || va.snapshot().state == VmState::Running).is_some(), "a: {:?}", va.snapshot().state);
    assert_eq!(qa.query_migrate().unwrap().status.as_str(), "failed");
    let report = va.snapshot().last_migration.expect("the migration reported");
    assert_eq!(report.status, "failed", "{report:?}");
    b_controlled(&vb);

    // Nothing frozen: a spike grows the guest (the controller's own target), and it is
    // shrunk back afterwards.
    let actions = va.snapshot().actions;
    let out = a.console.run("spike 1 300 3 0 1", Duration::from_secs(180)).expect("spike finishes");
    assert_eq!(out.status, 0, "{}", out.text);
    let grown = va.snapshot().target.expect("a target");
    assert!(grown >= settled.saturating_add(Kib::from_mib_saturating(150)), "the controller grew a from {settled} only to {grown}");
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(&va) <= settled.saturating_add(Kib::from_mib_saturating(96))).is_some(), "a shrinks back to about {settled}: {}", common::size(&va));
    assert!(va.snapshot().actions >= actions + 2, "{:?}", va.snapshot());
    assert_eq!(va.snapshot().state, VmState::Running);
    b_controlled(&vb);
    no_panics(&log);
    ctl.stop();
}

#[test]
fn source_killed_mid_migration_is_unreachable_then_controlled_again() {
    let log = common::vm_dir("faults_mig_src", "log").join("controller.log");
    let (mut a, _b, _dst, qa, ctl, _) = migrating("faults_mig_src", &log, true);
    let (va, vb) = (ctl.vm("a").unwrap(), ctl.vm("b").unwrap());
    drop(qa);
    a.kill();

    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(100), || va.snapshot().state == VmState::Unreachable).is_some(), "a: {:?}", va.snapshot().state);
    assert!(va.snapshot().errors >= 1);
    b_controlled(&vb);

    // A QEMU started again at the source's socket: a new VM with no migration, controlled
    // from its first sample (shrunk), not left as migrating.
    let dir = a.qmp.parent().unwrap().to_path_buf();
    drop(a);
    let again = Qemu::start(&common::image(), VmSpec::new("a", Kib::from_mib_saturating(768)), &dir).unwrap();
    again.wait_booted(Duration::from_secs(180)).unwrap();
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || va.snapshot().state == VmState::Running).is_some(), "a reconnects: {:?}", va.snapshot().state);
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(&va) <= Kib::from_mib_saturating(400)).is_some(), "the new a is shrunk: {}", common::size(&va));
    // The request whose migration died with the source is over, reported failed: the
    // controller takes a new one (whose migration fails at once: nobody listens there).
    assert!(wait_for(Duration::from_secs(10), Duration::from_millis(100), || va.snapshot().last_migration.is_some_and(|r| r.status.starts_with("failed"))).is_some(), "{:?}", va.snapshot().last_migration);
    let uri = format!("tcp:127.0.0.1:{}", autoballoon_testbed::free_port().unwrap());
    assert!(va.command(VmCommand::Migrate { uri: uri.clone(), max_bandwidth: None }));
    assert!(wait_for(Duration::from_secs(30), Duration::from_millis(100), || va.snapshot().last_migration.is_some_and(|r| r.uri.as_deref() == Some(&uri) && r.status.starts_with("failed"))).is_some(), "the new request: {:?}", va.snapshot().last_migration);
    assert!(wait_for(Duration::from_secs(10), Duration::from_millis(100), || va.snapshot().state == VmState::Running).is_some(), "{:?}", va.snapshot().state);
    b_controlled(&vb);
    no_panics(&log);
    ctl.stop();
}
