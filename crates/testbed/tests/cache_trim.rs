//! Page cache nobody reads again goes; cache in use stays (the agent's cache trim,
//! docs/guest-agent.md). A 1 GiB guest with free page reporting and the agent's defaults
//! (no controller: the guest keeps its size, so only the trim can drop its cache) reads a
//! 256 MiB disk once: the trim takes the cache down to its floor within a minute of calm,
//! and free page reporting hands the freed memory back to the host. Then the guest reads
//! the disk again every few seconds: the refaults pause the trim, double its calm, and the
//! cache stays.
mod common;

use autoballoon_core::Kib;
use autoballoon_testbed::guest::meminfo_kib;
use autoballoon_testbed::{host_memory_of, sparse_disk, wait_for, Qemu, VmSpec};
use common::kernel::sh_within;
use std::time::Duration;

const DISK_MIB: u64 = 256;
const MEMORY_MIB: u64 = 1024;

fn sh(q: &Qemu, command: &str) -> String {
    sh_within(q, command, Duration::from_secs(120))
}

/// The guest's file cache, `Active(file) + Inactive(file)`.
fn file_cache(q: &Qemu) -> Kib {
    let field = |f: &str| meminfo_kib(q, f).unwrap_or_else(|e| panic!("{e}"));
    Kib(field("Active(file)") + field("Inactive(file)"))
}

fn agent_log(q: &Qemu) -> String {
    sh(q, "cat /run/autoballoon-guest.log")
}

#[test]
fn cache_read_once_is_trimmed_and_cache_in_use_stays() {
    let dir = common::vm_dir("cache_trim", "trim");
    let disk = sparse_disk(&dir.join("disk.raw"), Kib::from_mib_saturating(DISK_MIB)).unwrap_or_else(|e| panic!("{e}"));
    let spec = VmSpec { disk: Some(disk), free_page_reporting: true, ..VmSpec::new("trim", Kib::from_mib_saturating(MEMORY_MIB)) };
    let q = Qemu::start(&common::image(), spec, &dir).unwrap_or_else(|e| panic!("{e}"));
    q.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    sh(&q, "[ -e /sys/block/vda ] || insmod /lib/modules/autoballoon/extra/virtio_blk.ko; [ -e /sys/block/vda ]");
    // Held open, so the device's page cache outlives each reader.
    q.console.spawn("sleep 100000 </dev/vda >/dev/null 2>&1").unwrap();
    let ram = Kib::from_mib_saturating(MEMORY_MIB);
    let host = || host_memory_of(q.pid(), ram).expect("QEMU is running").ram_rss;

    // Read once.
    sh(&q, &format!("dd if=/dev/vda of=/dev/null bs=1M count={DISK_MIB} 2>&1"));
    let (read, host_read) = (file_cache(&q), host());
    assert!(read >= Kib::from_mib_saturating(200), "the disk is in the page cache: {read}");

    // Trimmed: 10 s of calm (the shortest), then 10 % a second down to the 32 MiB floor.
    let floor = Kib::from_mib_saturating(64);
    let trimmed = wait_for(Duration::from_secs(150), Duration::from_secs(2), || file_cache(&q) <= floor);
    assert!(trimmed.is_some(), "the cache was not trimmed: {} (after the read {read}); agent log:\n{}", file_cache(&q), agent_log(&q));
    let log = agent_log(&q);
    assert!(log.contains("trimming the page cache"), "one line when the trim starts:\n{log}");
    // Free page reporting hands what the trim freed to the host.
    let back = Kib::from_mib_saturating(128);
    let returned = wait_for(Duration::from_secs(60), Duration::from_secs(1), || host().saturating_add(back) <= host_read);
    assert!(returned.is_some(), "the host got nothing back: guest RAM resident {} after the read, {} now", host_read, host());

    // In use: read again and again. The first re-read refaults what the trim took, which
    // pauses it; the reads after it find the disk cached.
    sh(&q, &format!("i=0; while [ $i -lt 12 ]; do dd if=/dev/vda of=/dev/null bs=1M count={DISK_MIB} 2>/dev/null; sleep 2; i=$((i+1)); done"));
    let kept = file_cache(&q);
    assert!(kept >= Kib::from_mib_saturating(200), "the cache in use stayed: {kept}; agent log:\n{}", agent_log(&q));
    let log = agent_log(&q);
    assert!(log.contains("cache trim paused"), "the refaults paused the trim:\n{log}");
    // The trim took cache that was read again: its next calm is twice the shortest.
    assert!(log.contains("again after 20 s calm"), "a refault after a trim doubles the calm (10 s to 20 s):\n{log}");
    for l in log.lines().filter(|l| l.contains("trim")) {
        eprintln!("agent: {l}");
    }
    eprintln!("file cache: {read} after the read, {kept} after the re-reads; guest RAM resident {host_read} after the read");
    assert_eq!(autoballoon_testbed::guest::oom_kills(&q), 0);
}
