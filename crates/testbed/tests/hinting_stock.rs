//! Free page hinting on the stock kernel: while a migration runs, the balloon driver holds
//! the guest's free memory and no /proc/meminfo field counts it, so the guest looks full.
//! The agent reads what hinting holds as what meminfo's total (free and every kind of used
//! memory, plus the balloon's pages) lost since the migration started
//! (core's `accounted_with_balloon` and `HintHold`); this checks that premise on a real
//! guest, QEMU 10, and that the total is back once the migration is done.
mod common;

use autoballoon_core::policy::accounted_with_balloon;
use autoballoon_core::procfs::{parse_meminfo, parse_vmstat};
use autoballoon_core::Kib;
use autoballoon_testbed::{start_migration, wait_for, wait_migration, GuestAgent, Qemu, VmSpec};
use autoballoon_qmp::Qmp;
use std::time::{Duration, Instant};

const TEST: &str = "hinting_stock";

/// (meminfo's total with the balloon, MemFree) of the guest now.
fn total_and_free(q: &Qemu) -> (Kib, Kib) {
    let cat = |f: &str| q.console.run(&format!("cat {f}"), Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}")).text;
    let m = parse_meminfo(&cat("/proc/meminfo")).unwrap_or_else(|e| panic!("meminfo: {e}"));
    let v = parse_vmstat(&cat("/proc/vmstat")).unwrap_or_else(|e| panic!("vmstat: {e}"));
    let balloon = v.balloon_pages().expect("the guest counts its balloon's pages (balloon_inflate, balloon_deflate)");
    (accounted_with_balloon(&m, balloon).expect("a complete meminfo"), m.kib("MemFree").unwrap())
}

#[test]
fn what_hinting_holds_on_a_stock_kernel_is_what_meminfo_lost() {
    let qemu = match common::qemu10() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED what_hinting_holds_on_a_stock_kernel_is_what_meminfo_lost: {why}");
            return;
        }
    };
    let image = common::image();
    let vm = |name: &str| VmSpec { qemu: qemu.clone(), free_page_hint: true, agent: GuestAgent::None, ..VmSpec::new(name, Kib::from_mib_saturating(1024)) };
    let q = Qemu::start(&image, vm("src"), &common::vm_dir(TEST, "src")).unwrap_or_else(|e| panic!("{e}"));
    q.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let (before, free_before) = total_and_free(&q);
    let (dst, _) = Qemu::start_incoming(&image, vm("dst"), &common::vm_dir(TEST, "dst")).unwrap_or_else(|e| panic!("{e}"));
    let qmp = Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)).expect("QMP");
    // 8 MiB/s, so that the migration lasts while the guest is read.
    let start = start_migration(&qmp, &dst, 8 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut during = (before, free_before);
    let hinted = wait_for(Duration::from_secs(60), Duration::from_millis(300), || {
        during = total_and_free(&q);
        free_before.saturating_sub(during.1) > Kib::from_mib_saturating(256)
    });
    let m = wait_migration(&qmp, &dst, start, Duration::from_secs(900));
    let held = before.saturating_sub(during.0);
    let lost = free_before.saturating_sub(during.1);
    eprintln!("total {before:?} -> {:?}, MemFree {free_before:?} -> {:?}: held {held:?}, lost {lost:?}", during.0, during.1);
    assert!(hinted.is_some(), "MemFree never fell by 256 MiB during the migration ({free_before:?} -> {:?}): hinting did not hold the free memory", during.1);
    assert!(held.abs_diff(lost) <= Kib::from_mib_saturating(16), "the total lost {held:?} while MemFree lost {lost:?}: hinting's memory is counted elsewhere too");
    m.unwrap_or_else(|e| panic!("the migration failed: {e}"));
    // Hinting gives its blocks back once the migration is done.
    let mut after = Kib::ZERO;
    let back = wait_for(Duration::from_secs(60), Duration::from_millis(500), || {
        after = total_and_free(&dst).0;
        after.abs_diff(before) <= Kib::from_mib_saturating(16)
    });
    assert!(back.is_some(), "the destination's total {after:?} a minute after the migration, {before:?} before it");
}
