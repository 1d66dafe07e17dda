//! Shared by the guest-kernel scenarios (`tests/kernel.rs`, `tests/kernel_mm.rs`): the
//! 2 GiB, 2-vCPU guest on the patched or the stock kernel, booting it, talking to it,
//! and checking that its kernel stayed clean.

use super::vm_dir;
pub use autoballoon_testbed::guest::BALLOON_DIR;
use autoballoon_testbed::guest::{balloon_to, cpu_with_dead_timer, dmesg_errors, hook_pages_served, hook_stats, kernel_errors, meminfo_kib, named_value, read_number, run_spike, tainted, SpikeRun};
use autoballoon_testbed::{GuestAgent, GuestImage, Qemu, VmSpec};
use autoballoon_core::{Kib, Pages};
use autoballoon_qmp::Qmp;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

pub const GUEST: Kib = Kib::from_mib_saturating(2048);
/// The spike's threads; each touches [`spike_mib`].
pub const SPIKE_THREADS: u32 = 4;

/// A whole number of MiB from the environment variable `var`, else `default`; a value
/// that is not one fails the test rather than running another size than asked.
fn mib_from_env(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{var}={v:?} is not a whole number of MiB")),
        Err(_) => default,
    }
}

/// The size the host balloons the guest to before a spike: 256 MiB, or
/// `$AUTOBALLOON_KERNEL_SHRUNK_MIB` (`make kernel-test-kasan` sets 512: KASAN's shadow
/// takes an eighth of the guest's memory at boot, which 256 MiB leaves no room for).
pub fn shrunk() -> Kib {
    Kib::from_mib_saturating(mib_from_env("AUTOBALLOON_KERNEL_SHRUNK_MIB", 256))
}

/// The size the CMA scenario's 5 GiB guest is ballooned to before its burst: 512 MiB, or
/// `$AUTOBALLOON_KERNEL_CMA_SHRUNK_MIB` (`make kernel-test-kasan` sets 1152: 512 MiB beside
/// the 640 MiB KASAN's shadow takes of 5 GiB).
pub fn cma_shrunk() -> Kib {
    Kib::from_mib_saturating(mib_from_env("AUTOBALLOON_KERNEL_CMA_SHRUNK_MIB", 512))
}

/// What the balloon of the contiguous-allocation scenario's 5 GiB guest keeps when the
/// gigantic pages are asked for: 512 MiB, or `$AUTOBALLOON_KERNEL_CONTIG_BALLOON_MIB`
/// (`make kernel-test-kasan` sets 1536: with 512, KASAN's shadow moved the free memory so
/// that both gigantic pages found ranges without units and nothing was released).
pub fn contig_balloon() -> Kib {
    Kib::from_mib_saturating(mib_from_env("AUTOBALLOON_KERNEL_CONTIG_BALLOON_MIB", 512))
}

/// MiB each of the spike's [`SPIKE_THREADS`] touches: 384 (1.5 GiB in all, six times what
/// the shrunk guest has), or `$AUTOBALLOON_KERNEL_SPIKE_MIB` (256 under KASAN).
pub fn spike_mib() -> u64 {
    mib_from_env("AUTOBALLOON_KERNEL_SPIKE_MIB", 384)
}

/// The 4 KiB pages the scenarios' spike touches, over all its threads.
pub fn spike_pages() -> u64 {
    u64::from(SPIKE_THREADS) * spike_mib() * 256
}

pub fn spike(q: &Qemu) -> SpikeRun {
    run_spike(q, SPIKE_THREADS, spike_mib(), Duration::from_secs(300))
}

/// Balloons the guest to [`shrunk`] over QMP and waits until QEMU reports it there.
pub fn shrink(qmp: &Qmp) {
    let size = shrunk();
    balloon_to(qmp, size, Duration::from_secs(120)).expect("QMP").unwrap_or_else(|| panic!("the balloon did not reach {} MiB in 2 min", size.0 / 1024));
}

pub fn image(var: &str) -> GuestImage {
    let dir = std::env::var_os(var).unwrap_or_else(|| panic!("{var} is not set: run `make kernel-test`"));
    GuestImage::at(Path::new(&dir)).unwrap_or_else(|e| panic!("{e}"))
}

pub fn patched() -> GuestImage {
    image("AUTOBALLOON_PATCHED_IMAGE")
}

pub fn stock() -> GuestImage {
    image("AUTOBALLOON_STOCK_IMAGE")
}

/// Appends one record to the results file (and prints it).
pub fn record(variant: &str, scenario: &str, mut fields: Value) {
    fields["variant"] = json!(variant);
    fields["scenario"] = json!(scenario);
    let line = fields.to_string();
    println!("{line}");
    if let Some(path) = std::env::var_os("AUTOBALLOON_KERNEL_RESULTS") {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("results file");
        writeln!(f, "{line}").expect("write results");
    }
}

pub fn spec(name: &str, agent: GuestAgent, deflate_on_oom: bool) -> VmSpec {
    // AUTOBALLOON_KERNEL_CPUS: vCPUs per guest (2).
    let cpus = std::env::var("AUTOBALLOON_KERNEL_CPUS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    VmSpec { cpus, agent, deflate_on_oom, ..VmSpec::new(name, GUEST) }
}

/// Boots the guest; one whose CPU came up with a dead timer under TCG
/// ([`cpu_with_dead_timer`]) is booted again, up to three times, each time said.
pub fn boot(test: &str, image: &GuestImage, spec: VmSpec) -> Qemu {
    let name = spec.name.clone();
    for attempt in 1.. {
        let q = Qemu::start(image, spec.clone(), &vm_dir(test, &name)).unwrap_or_else(|e| panic!("{e}"));
        q.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
        let softirqs = sh(&q, "cat /proc/softirqs");
        match cpu_with_dead_timer(&softirqs) {
            Some((cpu, n)) if attempt < 3 => {
                eprintln!("{name}: CPU {cpu} ran its timer {n} times since boot (dead under TCG; its RCU would stall): booting it again");
            }
            Some((cpu, n)) => panic!("{name}: CPU {cpu} ran its timer {n} times since boot, in 3 boots:\n{softirqs}"),
            None => return q,
        }
    }
    unreachable!("the loop returns or panics")
}

/// Fails the test if the guest kernel reported an oops, a BUG, a warning, a bad page, a
/// general protection fault, a stall or a panic, on the console or in its own log (the
/// console runs with `quiet`, which drops warnings), or tainted itself (running KUnit
/// aside).
pub fn assert_clean(q: &Qemu) {
    assert_console_clean(q);
    let errors = dmesg_errors(q).unwrap_or_else(|e| vec![format!("dmesg: {e}")]);
    // TAINT_TEST (bit 18): KUnit ran, which the KUnit scenario does on purpose.
    let taint = tainted(q).unwrap_or(u64::MAX) & !(1 << 18);
    assert!(errors.is_empty() && taint == 0, "{} reported kernel errors (taint {taint}; console log {}):\n{}", q.spec.name, q.console.log_path().display(), errors.join("\n"));
}

/// [`assert_clean`] for a guest that cannot answer any more (a migration's source, paused
/// after the switchover): only what its console printed.
pub fn assert_console_clean(q: &Qemu) {
    let text = q.console.transcript();
    let errors = kernel_errors(&text);
    assert!(errors.is_empty(), "{} reported kernel errors (console log {}):\n{}", q.spec.name, q.console.log_path().display(), errors.join("\n"));
}

pub fn ctl(q: &Qemu) -> Qmp {
    Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)).expect("QMP")
}

/// Runs a command that must succeed within a minute and returns its output.
pub fn sh(q: &Qemu, cmd: &str) -> String {
    sh_within(q, cmd, Duration::from_secs(60))
}

/// [`sh`] for a command that may take longer than a minute.
pub fn sh_within(q: &Qemu, cmd: &str, timeout: Duration) -> String {
    let out = q.console.run(cmd, timeout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status, 0, "`{cmd}`: {}", out.text);
    out.text
}

/// A `/proc/meminfo` field in kB.
pub fn meminfo(q: &Qemu, field: &str) -> u64 {
    meminfo_kib(q, field).unwrap_or_else(|e| panic!("{e}"))
}

pub fn read_u64(q: &Qemu, path: &str) -> u64 {
    read_number(q, path).unwrap_or_else(|e| panic!("{e}"))
}

/// Pages in the guest's balloon, as the patched guest counts them: `max_pages - current_pages`.
pub fn guest_balloon(q: &Qemu) -> Option<Pages> {
    let read = |f: &str| read_number(q, &format!("{BALLOON_DIR}/{f}")).ok();
    Some(Pages(read("max_pages")?.saturating_sub(read("current_pages")?)))
}

pub fn mib(p: Pages) -> f64 {
    p.to_kib_saturating().0 as f64 / 1024.0
}

/// Pages the hook has served since boot. An unreadable `hook_stats` fails the test: as 0
/// it would make "no pages served" pass without anything measured.
pub fn hook_pages_since_boot(q: &Qemu) -> u64 {
    let stats = hook_stats(q).unwrap_or_else(|e| panic!("hook_stats: {e}"));
    hook_pages_served(&stats).unwrap_or_else(|| panic!("no pages column in hook_stats:\n{stats}"))
}

/// The slow-path stages of a request the hook counts its pages by (`hook_stats`' `pages_<stage>`).
pub const HOOK_STAGES: [&str; 3] = ["no_reclaim", "before_reclaim", "after_clean_reclaim"];

/// Pages the hook has served since boot, in all and by [`HOOK_STAGES`], from one read of
/// `hook_stats`.
pub fn hook_counts_since_boot(q: &Qemu) -> (u64, [u64; 3]) {
    let stats = hook_stats(q).unwrap_or_else(|e| panic!("hook_stats: {e}"));
    let pages = hook_pages_served(&stats).unwrap_or_else(|| panic!("no pages column in hook_stats:\n{stats}"));
    (pages, HOOK_STAGES.map(|stage| named_value(&stats, &format!("pages_{stage}")).unwrap_or_else(|| panic!("no pages_{stage} in hook_stats:\n{stats}"))))
}
