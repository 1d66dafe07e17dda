//! The test bed on QEMU 10: boots a guest under QEMU 10 with the test bed's usual command
//! line, shrinks it through QMP, live-migrates it once to a second QEMU 10 and checks the
//! destination's shell answers. QEMU 10 is `$AUTOBALLOON_QEMU10`, else the wrapper
//! `scripts/install-qemu10.sh` (`make qemu10`, run by `make test`) installs under
//! `${AUTOBALLOON_CACHE:-~/.cache/autoballoon}/qemu/qemu10/`; without either the test is
//! skipped with a printed reason.
mod common;

use autoballoon_core::Kib;
use autoballoon_qmp::{Qmp, BALLOON_DEVICE_PATH};
use autoballoon_testbed::{migrate, wait_for, GuestAgent, Qemu, VmSpec};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[test]
fn qemu10_boot_shrink_migrate() {
    let qemu = match common::qemu10() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED qemu10_boot_shrink_migrate: {why}");
            return;
        }
    };
    let t0 = Instant::now();
    let spec = |name: &str| VmSpec { qemu: qemu.clone(), agent: GuestAgent::None, ..VmSpec::new(name, Kib::from_mib_saturating(512)) };
    let src = Qemu::start(&common::image(), spec("src"), &common::vm_dir("qemu10", "src")).unwrap_or_else(|e| panic!("{e}"));
    let boot = src.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let q = Qmp::connect_with_retry(&src.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    assert_eq!(q.version().major, 10, "{}", q.version());
    eprintln!("QEMU {} ({}): booted in {:.1} s", q.version(), qemu.display(), boot.as_secs_f64());

    // Shrink to 256 MiB through QMP; the guest's driver reports stats meanwhile.
    q.set_stats_polling_interval(BALLOON_DEVICE_PATH, 1).unwrap();
    q.set_balloon_guest_size(256 * MIB).unwrap();
    let took = wait_for(Duration::from_secs(60), Duration::from_millis(100), || q.query_balloon().unwrap() == 256 * MIB)
        .unwrap_or_else(|| panic!("the balloon did not reach 256 MiB: {}", q.query_balloon().unwrap()));
    eprintln!("shrunk 512 -> 256 MiB in {:.2} s", took.as_secs_f64());
    assert!(wait_for(Duration::from_secs(10), Duration::from_millis(200), || q.guest_stats(BALLOON_DEVICE_PATH).unwrap().available_memory_bytes.is_some()).is_some(), "guest stats arrive");
    let free = src.console.run("free -m", Duration::from_secs(30)).unwrap();
    assert_eq!(free.status, 0, "{}", free.text);

    // One live migration to a second QEMU 10 (QEMU's default cap, 128 MiB/s).
    let (dst, _) = Qemu::start_incoming(&common::image(), spec("dst"), &common::vm_dir("qemu10", "dst")).unwrap_or_else(|e| panic!("{e}"));
    q.enable_migration_events().unwrap();
    let m = migrate(&q, &dst, 128 * MIB, Duration::from_secs(120)).unwrap_or_else(|e| panic!("migration: {e}"));
    eprintln!("migrated in {:.2} s, {} KiB sent, downtime {:?} ms", m.seconds(), m.bytes_sent() >> 10, m.info.downtime_ms);
    assert!(m.bytes_sent() > 0);
    assert_eq!(q.query_status().unwrap(), "postmigrate");
    let statuses: Vec<String> = q.poll_events().iter().filter_map(|e| e.migration_status()).map(|s| s.to_string()).collect();
    assert_eq!(statuses.last().map(String::as_str), Some("completed"), "MIGRATION events: {statuses:?}");

    // The destination runs the same guest, still shrunk, and its shell answers.
    let qd = Qmp::connect_with_retry(&dst.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    assert!(wait_for(Duration::from_secs(30), Duration::from_millis(100), || qd.query_status().unwrap() == "running").is_some(), "destination running");
    assert_eq!(qd.query_balloon().unwrap(), 256 * MIB);
    assert_eq!(dst.console.run("echo alive", Duration::from_secs(30)).unwrap().text.trim(), "alive");
    eprintln!("qemu10_boot_shrink_migrate: {:.1} s in all", t0.elapsed().as_secs_f64());
}
