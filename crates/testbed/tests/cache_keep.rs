//! Page cache the guest reads again stays; cache read once goes (docs/configuration.md,
//! `refault_keep_max_mib`). Two 1 GiB guests with a 256 MiB disk, shrunk by the
//! controller to their used memory plus the buffer, re-read the whole disk round after
//! round: the guest with the default keeps room for what it read again and stops
//! refaulting; the guest with `refault_keep_max_mib = 0` goes on reading from disk.
mod common;

use autoballoon::config::{PolicyConfig, VmConfig};
use autoballoon_core::Kib;
use autoballoon_testbed::{sparse_disk, wait_for, wait_settled, Qemu, VmSpec};
use std::time::Duration;

const DISK_MIB: u64 = 256;
const ROUNDS: usize = 6;

fn boot_with_disk(name: &str) -> Qemu {
    let dir = common::vm_dir("cache_keep", name);
    let disk = sparse_disk(&dir.join("disk.raw"), Kib::from_mib_saturating(DISK_MIB)).unwrap_or_else(|e| panic!("{e}"));
    let spec = VmSpec { disk: Some(disk), ..VmSpec::new(name, Kib::from_mib_saturating(1024)) };
    let q = Qemu::start(&common::image(), spec, &dir).unwrap_or_else(|e| panic!("{e}"));
    q.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let out = q.console.run("[ -e /sys/block/vda ] || insmod /lib/modules/autoballoon/extra/virtio_blk.ko; [ -e /sys/block/vda ]", Duration::from_secs(30)).unwrap();
    assert_eq!(out.status, 0, "no /dev/vda: {}", out.text);
    // Held open, so the device's page cache (and the shadow entries of what was evicted
    // from it) outlive each reader: the last close of a block device drops its cache.
    q.console.spawn("sleep 100000 </dev/vda >/dev/null 2>&1").unwrap();
    q
}

/// File pages the guest read again after evicting them, since boot.
fn refaults(q: &Qemu) -> u64 {
    let out = q.console.run("grep '^workingset_refault_file ' /proc/vmstat", Duration::from_secs(20)).unwrap();
    out.text.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no workingset_refault_file: {}", out.text))
}

/// Reads the whole disk through the page cache; returns the MiB refaulted meanwhile.
fn read_round(q: &Qemu) -> u64 {
    let before = refaults(q);
    let out = q.console.run(&format!("dd if=/dev/vda of=/dev/null bs=1M count={DISK_MIB} 2>&1"), Duration::from_secs(120)).unwrap();
    assert_eq!(out.status, 0, "dd: {}", out.text);
    (refaults(q) - before) / 256
}

#[test]
fn cache_read_again_stays_and_cache_read_once_goes() {
    let keep = boot_with_disk("keep");
    let lean = boot_with_disk("lean");
    let off = PolicyConfig { refault_keep_max_mib: 0, ..PolicyConfig::default() };
    let ctl = common::controller(vec![common::vm_config("keep", &keep), VmConfig { policy: Some(off), ..common::vm_config("lean", &lean) }]);
    let (vk, vl) = (&ctl.vm("keep").unwrap(), &ctl.vm("lean").unwrap());
    let small = Kib::from_mib_saturating(400);
    for vm in [vk, vl] {
        assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(vm) <= small).is_some(), "not shrunk: {}", vm.snapshot().size);
    }
    let idle = common::size(vk);

    // Round after round of the same 256 MiB: more than a shrunk guest has room for.
    let (mut rk, mut rl) = (vec![], vec![]);
    for round in 0..ROUNDS {
        rk.push(read_round(&keep));
        rl.push(read_round(&lean));
        // Let the controller act on what the round showed before the next one.
        let _ = wait_settled(Duration::from_secs(20), || common::size(vk));
        eprintln!("round {round}: refaulted {} MiB (keep, size {}) and {} MiB (off, size {})", rk[round], common::size(vk), rl[round], common::size(vl));
    }
    let grown = common::size(vk);
    let (first_k, last_k, last_l) = (rk[1], rk[ROUNDS - 1], rl[ROUNDS - 1]);
    assert!(rl[1] >= 64 && last_l >= 64, "the lean guest should go on refaulting: {rl:?}");
    assert!(first_k >= 64, "the first re-read refaults in the kept guest too: {rk:?}");
    assert!(last_k * 4 <= first_k, "the kept guest stops refaulting: {rk:?} (the lean one {rl:?})");
    assert!(grown >= idle.saturating_add(Kib::from_mib_saturating(128)), "the kept guest grew for its cache: {idle} -> {grown}");
    let s = vk.snapshot();
    assert!(s.last_reason.contains("cache kept"), "the reason names the cache kept: {}", s.last_reason);
    assert!(common::size(vl) <= small, "the lean guest stays lean: {}", common::size(vl));
    for q in [&keep, &lean] {
        assert_eq!(autoballoon_testbed::guest::oom_kills(q), 0);
    }
    ctl.stop();
}
