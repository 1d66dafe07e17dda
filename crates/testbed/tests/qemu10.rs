//! The test bed on QEMU 10: boots a guest under QEMU 10 with the test bed's usual command
//! line, shrinks it through QMP, live-migrates it once to a second QEMU 10 and checks the
//! destination's shell answers; and a daemon that manages a destination from its start (it
//! waits in `inmigrate`) controls it once a hinted migration completed, never steered by the
//! statistics the guest wrote on the source. QEMU 10 is `$AUTOBALLOON_QEMU10`, else the wrapper
//! `scripts/install-qemu10.sh` (`make qemu10`, run by `make test`) installs under
//! `${AUTOBALLOON_CACHE:-~/.cache/autoballoon}/qemu/qemu10/`; without either the test is
//! skipped with a printed reason.
mod common;

use autoballoon::config::VmConfig;
use autoballoon::controller::VmState;
use autoballoon_core::Kib;
use autoballoon_qmp::{Qmp, BALLOON_DEVICE_PATH};
use autoballoon_testbed::{migrate, wait_for, GuestAgent, Qemu, VmSpec};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[test]
fn qemu10_boot_shrink_migrate() {
    let Some(qemu) = common::qemu10_or_skip("qemu10_boot_shrink_migrate") else { return };
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

#[test]
fn a_destination_managed_from_its_start_is_controlled_after_a_hinted_migration() {
    let test = "qemu10_destination";
    let Some(qemu) = common::qemu10_or_skip(test) else { return };
    // No agent: guest-stats are the controller's only view. Free page hinting on, as the
    // product's default asks.
    let spec = |name: &str| VmSpec { qemu: qemu.clone(), agent: GuestAgent::None, free_page_reporting: true, free_page_hint: true, ..VmSpec::new(name, Kib::from_mib_saturating(1024)) };
    let src = Qemu::start(&common::image(), spec("src"), &common::vm_dir(test, "src")).unwrap_or_else(|e| panic!("{e}"));
    src.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let q = Qmp::connect_with_retry(&src.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    // The guest writes its statistics every second on the source, also while hinting holds
    // its free memory during the migration (available 0).
    q.set_stats_polling_interval(BALLOON_DEVICE_PATH, 1).unwrap();
    let shrunk = 448 * MIB;
    q.set_balloon_guest_size(shrunk).unwrap();
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(100), || q.query_balloon().unwrap() == shrunk).is_some(), "source shrunk to 448 MiB");

    let (dst, _) = Qemu::start_incoming(&common::image(), spec("dst"), &common::vm_dir(test, "dst")).unwrap_or_else(|e| panic!("{e}"));
    let log = common::vm_dir(test, "controller").with_extension("log");
    let ctl = common::controller_logging(vec![VmConfig::new("dst", dst.qmp.clone())], &log);
    let connected = wait_for(Duration::from_secs(20), Duration::from_millis(100), || !common::log_events(&log, "connected").is_empty());
    assert!(connected.is_some(), "the daemon manages the destination");
    let line = common::log_events(&log, "connected")[0]["msg"].to_string();
    assert!(line.contains("waiting for an incoming migration"), "{line}");

    let m = migrate(&q, &dst, 32 * MIB, Duration::from_secs(180)).unwrap_or_else(|e| panic!("migration: {e}"));
    eprintln!("{test}: migrated in {:.2} s, {} KiB sent", m.seconds(), m.bytes_sent() >> 10);
    let vm = ctl.vm("dst").unwrap();
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(100), || vm.snapshot().state == VmState::Running).is_some(), "state {:?}", vm.snapshot().state);
    let ended: Vec<String> = common::log_events(&log, "migration_ended").iter().map(|e| e["msg"].to_string()).collect();
    assert!(ended.iter().any(|m| m.contains("incoming migration ended (completed)")), "{ended:?}");
    assert!(common::log_events(&log, "migrated_away").is_empty(), "the destination taken for a source that left");

    // Under control: shrunk from the guest's fresh statistics, and never grown by the ones
    // it wrote on the source while hinting held its free memory (available 0 there).
    let took = wait_for(Duration::from_secs(30), Duration::from_millis(200), || common::size(&vm) < Kib::from_mib_saturating(440));
    let targets: Vec<u64> = common::log_events(&log, "set_target").iter().filter_map(|e| e["target_kib"].as_u64()).collect();
    assert!(took.is_some(), "size {} after 30 s; targets {targets:?}", vm.snapshot().size);
    assert!(targets.iter().all(|&t| t <= shrunk / 1024), "a growth on the destination: targets {targets:?} KiB");
    assert_eq!(dst.console.run("echo alive", Duration::from_secs(30)).unwrap().text.trim(), "alive");
    ctl.stop();
}
