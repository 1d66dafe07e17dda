//! The series' balloon beside virtio-mem: a guest on the patched kernel built with the
//! virtio-mem driver (`kernel/build.sh patched-vmem`), a 1 GiB boot memory and a 1 GiB
//! virtio-mem device whose memory comes online movable. The balloon's units are movable
//! allocations, so they land in the device's memory too; unplugging the device must then
//! get them back from the balloon (through the offlining notifier or the contiguous
//! allocation's release, whichever path virtio-mem takes), `max_pages` must follow the
//! plug and the unplug, and a spike after it must still be served by the hook.
//!
//! Run by `make kernel-test-vmem`, which builds the kernel and its image and sets
//! `AUTOBALLOON_PATCHED_VMEM_IMAGE`; a plain `cargo test` lists the test as ignored.
mod common;

use autoballoon_core::{Kib, Pages};
use autoballoon_testbed::guest::{hook_pages_served, hook_stats, named_value, oom_kills, run_spike, virtio_mem_resize, virtio_mem_size};
use autoballoon_qmp::Qmp;
use autoballoon_testbed::{wait_for, GuestAgent, Qemu, VmSpec};
use common::kernel::*;
use serde_json::json;
use std::time::Duration;

/// The guest's boot memory and its virtio-mem device.
const BOOT: Kib = Kib::from_mib_saturating(1024);
const DEVICE: Kib = Kib::from_mib_saturating(1024);
/// What the guest's own target leaves it, and the spike after the unplug (4 threads).
const TARGET: Kib = Kib::from_mib_saturating(256);
const SPIKE_MIB: u64 = 128;

/// Boots the guest of `image_var` (an image directory's variable) with its virtio-mem
/// device, nothing plugged yet, and connects to QMP.
fn boot_with_device(name: &str, image_var: &str) -> (Qemu, Qmp) {
    let vm = VmSpec { memory: BOOT, virtio_mem: Some(DEVICE), append: "memhp_default_state=online_movable".into(), ..spec(name, GuestAgent::None, true) };
    let q = boot("kernel_vmem", &image(image_var), vm);
    let qmp = ctl(&q);
    (q, qmp)
}

/// Plugs the whole device and waits until the guest has it.
fn plug(qmp: &Qmp) {
    virtio_mem_resize(qmp, DEVICE, Duration::from_secs(120)).expect("QMP").expect("the guest plugs the whole device in 2 min");
}

/// The stock kernel with virtio-mem (`kernel/build.sh vmem`), no balloon moved: the same
/// plug, unplug and spike, the baseline for the scenario below.
#[test]
#[ignore = "needs the stock kernel with virtio-mem: make kernel-test-vmem"]
fn stock_virtio_mem_plug_and_unplug() {
    let (q, qmp) = boot_with_device("stock-vmem", "AUTOBALLOON_VMEM_IMAGE");
    plug(&qmp);
    let plugged = meminfo(&q, "MemTotal");
    let unplugged = virtio_mem_resize(&qmp, Kib(0), Duration::from_secs(300)).expect("QMP");
    let after = meminfo(&q, "MemTotal");
    let s = run_spike(&q, 4, SPIKE_MIB, Duration::from_secs(300));
    let kills = oom_kills(&q);
    eprintln!("MemTotal {plugged} -> {after} kB; unplug {unplugged:?}; {s:?}");
    record("stock", "virtio_mem", json!({ "unplug_s": unplugged.map(|d| d.as_secs_f64()), "spike_completed": s.completed, "oom_kills": kills }));
    assert!(unplugged.is_some(), "virtio-mem did not unplug in 5 min");
    assert!(s.completed, "the spike failed: {s:?}");
    assert_clean(&q);
}

#[test]
#[ignore = "needs the patched kernel with virtio-mem: make kernel-test-vmem"]
fn patched_balloon_beside_virtio_mem() {
    let (q, qmp) = boot_with_device("patched-vmem", "AUTOBALLOON_PATCHED_VMEM_IMAGE");
    let pages = |f: &str| read_u64(&q, &format!("{BALLOON_DIR}/{f}"));
    let boot_max = pages("max_pages");
    plug(&qmp);
    let plugged_max = pages("max_pages");
    assert_eq!(plugged_max, boot_max + DEVICE.to_pages_floor().0, "max_pages follows the plugged memory (boot {boot_max})");
    // The guest's own target: the balloon takes all but 256 MiB, from the device's
    // movable memory too.
    let target = TARGET.to_pages_floor().0;
    sh(&q, &format!("echo {target} > {BALLOON_DIR}/target_pages"));
    let shrunk = wait_for(Duration::from_secs(180), Duration::from_millis(200), || pages("current_pages") <= target + 512);
    assert!(shrunk.is_some(), "the balloon left {} pages of the target {target}", pages("current_pages"));
    let movable_before = sh(&q, "grep -A3 'zone  Movable' /proc/zoneinfo | grep 'pages free' ; true");
    let store_before = named_value(&hook_stats(&q).unwrap_or_default(), "store_pages");
    // Unplug the whole device: its memory holds ballooned units, which the balloon must
    // give up so that the memory can go.
    let unplugged = virtio_mem_resize(&qmp, Kib(0), Duration::from_secs(300)).expect("QMP");
    let left = virtio_mem_size(&qmp).expect("QMP");
    // virtio-mem reports its size once the subblocks are unplugged; the memory blocks they
    // emptied go offline after that, and `max_pages` with them.
    let _ = wait_for(Duration::from_secs(60), Duration::from_millis(200), || pages("max_pages") == boot_max);
    let after_max = pages("max_pages");
    let stats = hook_stats(&q).unwrap_or_default();
    eprintln!("max_pages {boot_max} -> {plugged_max} -> {after_max}; store {store_before:?} -> {:?} pages; unplug {unplugged:?}, {} MiB left plugged; Movable before the unplug: {movable_before}", named_value(&stats, "store_pages"), left.0 / 1024);
    assert!(unplugged.is_some(), "virtio-mem unplugged all but {} MiB in 5 min: memory holding ballooned units did not go", left.0 / 1024);
    assert_eq!(after_max, boot_max, "max_pages back at the boot memory");
    // A spike in the 256 MiB left: the hook gives the balloon back.
    let served_before = hook_pages_served(&stats).unwrap_or(0);
    let s = run_spike(&q, 4, SPIKE_MIB, Duration::from_secs(300));
    let served = hook_pages_served(&hook_stats(&q).unwrap_or_default()).unwrap_or(0).saturating_sub(served_before);
    let kills = oom_kills(&q);
    record("patched", "virtio_mem", json!({ "max_pages_boot": boot_max, "max_pages_plugged": plugged_max, "max_pages_unplugged": after_max, "unplug_s": unplugged.map(|d| d.as_secs_f64()),
        "store_pages_before_unplug": store_before, "spike_completed": s.completed, "spike_alloc_s": s.alloc_s, "hook_pages_served": served, "oom_kills": kills }));
    assert!(s.completed, "the spike failed: {s:?}");
    assert_eq!(kills, 0, "OOM kills");
    assert!(served > 0, "the hook served nothing: {}", mib(Pages(served)));
    assert_clean(&q);
}
