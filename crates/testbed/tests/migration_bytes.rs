//! From the same guest state, a live migration with autoballoon sends at least 70 % fewer
//! bytes than one without; the controller holds shrinking during each migration.
mod common;

use autoballoon::controller::{VmCommand, VmState};
use autoballoon_testbed::{migrate, wait_for, wait_settled, Qemu, VmSpec};
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use std::time::{Duration, Instant};

const BANDWIDTH: u64 = 1 << 30;

fn destination(name: &str) -> Qemu {
    Qemu::start_incoming(&common::image(), VmSpec::new(name, Kib::from_mib_saturating(1024)), &common::vm_dir("migration_bytes", name)).unwrap().0
}

#[test]
fn migration_with_autoballoon_sends_70_percent_fewer_bytes() {
    let mut a = common::boot("migration_bytes", "src", 1024);
    let ctl = common::controller(vec![common::vm_config("m", &a)]);
    let vm = &ctl.vm("m").unwrap();
    let full = Kib::from_mib_saturating(1024);

    // The same state for both runs: the guest at full size with 700 MiB of dirty free memory.
    assert!(wait_for(Duration::from_secs(30), Duration::from_millis(100), || vm.snapshot().source == autoballoon_core::sample::SampleSource::Agent).is_some(), "agent reports");
    vm.command(VmCommand::Pause);
    assert!(wait_for(Duration::from_secs(10), Duration::from_millis(50), || vm.snapshot().state == VmState::Paused).is_some(), "pause takes effect");
    let qa = Qmp::connect_with_retry(&a.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    qa.set_balloon_guest_size(full.to_bytes_saturating().0).unwrap();
    assert!(wait_for(Duration::from_secs(30), Duration::from_millis(100), || qa.query_balloon().unwrap() == full.to_bytes_saturating().0).is_some());
    let fill = a.console.run("fill 700", Duration::from_secs(120)).unwrap();
    assert_eq!(fill.status, 0, "{}", fill.text);

    let b = destination("dst1");
    let without = migrate(&qa, &b, BANDWIDTH, Duration::from_secs(240)).expect("migration without autoballoon");
    drop(qa);
    a.kill();

    vm.command(VmCommand::Retarget { qmp: b.qmp.clone(), agent: Some(b.agent.clone()) });
    vm.command(VmCommand::Resume);
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(vm) <= Kib::from_mib_saturating(320)).is_some(), "shrinks on the destination: {}", common::size(vm));
    wait_settled(Duration::from_secs(30), || common::size(vm)).expect("settles");

    let c = destination("dst2");
    let qb = Qmp::connect_with_retry(&b.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    let with = migrate(&qb, &c, BANDWIDTH, Duration::from_secs(240)).expect("migration with autoballoon");
    let (wb, ab) = (without.bytes_sent(), with.bytes_sent());
    eprintln!("without: {wb} bytes in {:.2} s; with: {ab} bytes in {:.2} s", without.seconds(), with.seconds());
    assert!(wb > 700 << 20, "the unballooned migration sent the dirty memory: {wb}");
    assert!((ab as f64) <= 0.3 * wb as f64, "with autoballoon {ab} bytes, without {wb}: less than 70 % saved");
    // The guest is fine on the final destination.
    assert_eq!(c.console.run("echo alive", Duration::from_secs(30)).unwrap().text.trim(), "alive");
    assert_eq!(autoballoon_testbed::guest::oom_kills(&c), 0);
    drop(qb);
    ctl.stop();
}
