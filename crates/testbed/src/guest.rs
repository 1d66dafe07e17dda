//! What tests and benchmarks ask of a running guest: the `spike` workload, the patched
//! kernel's balloon files and counters, OOM kills, and ballooning to a size over QMP.

use super::{count_oom_kills, wait_for, ConsoleError, Qemu};
use autoballoon_core::{Bytes, Kib, Pages};
use autoballoon_qmp::{Qmp, QmpError};
use std::time::Duration;

/// The patched kernel's guest interface (kernel/README.md): the balloon device's sysfs
/// directory, as a shell word that expands to it in the guest's shell (the device's
/// number depends on the other virtio devices); use it in commands run there.
pub const BALLOON_DIR: &str = "$(echo /sys/bus/virtio/drivers/virtio_balloon/virtio*/balloon)";

/// One run of the guest's `spike` workload (guest/workloads/spike.c).
#[derive(Debug, Clone, PartialEq)]
pub struct SpikeRun {
    /// Exit status 0 and every thread's allocation succeeded.
    pub completed: bool,
    /// The first cycle's allocation time as `spike` measured it (`alloc_s=`).
    pub alloc_s: Option<f64>,
    /// `None` when the shell did not answer (the OOM killer may take it along).
    pub exit: Option<i32>,
}

impl SpikeRun {
    /// Reads `spike`'s output: `SPIKE cycle=1 ... alloc_s=X ok=K` lines and `SPIKE done cycles=N failed=F`.
    pub fn parse(text: &str, exit: i32) -> SpikeRun {
        let alloc_s = text
            .lines()
            .find(|l| l.starts_with("SPIKE cycle="))
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("alloc_s=")))
            .and_then(|v| v.parse().ok());
        let done_ok = text.lines().any(|l| l.starts_with("SPIKE done ") && l.split_whitespace().any(|w| w == "failed=0"));
        SpikeRun { completed: exit == 0 && done_ok, alloc_s, exit: Some(exit) }
    }
}

/// What `spike ... verify` reported besides [`SpikeRun`]: failed allocations and the
/// pages that read back wrong (guest/workloads/spike.c).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpikeCheck {
    /// The `SPIKE done` line's `failed=`: thread allocations that failed; `None` without a
    /// done line (the program was killed, or its output is lost).
    pub failed: Option<u64>,
    /// Pages with at least one wrong word: the done line's `bad=`, or the sum of the
    /// `SPIKE verified ... bad=` lines if that is more (a run that died before its end).
    pub bad_pages: u64,
    /// Pages read back (the `SPIKE verified ... pages=` lines).
    pub verified_pages: u64,
    /// The `SPIKE bad ...` lines: each thread's first wrong word, with what it held.
    pub bad_lines: Vec<String>,
}

impl SpikeCheck {
    pub fn parse(text: &str) -> SpikeCheck {
        let field = |l: &str, k: &str| l.split_whitespace().find_map(|w| w.strip_prefix(k)).and_then(|v| v.parse::<u64>().ok());
        let done = text.lines().find(|l| l.starts_with("SPIKE done "));
        let verified: Vec<&str> = text.lines().filter(|l| l.starts_with("SPIKE verified ")).collect();
        let summed = verified.iter().filter_map(|l| field(l, "bad=")).sum::<u64>();
        SpikeCheck {
            failed: done.and_then(|l| field(l, "failed=")),
            bad_pages: done.and_then(|l| field(l, "bad=")).unwrap_or(0).max(summed),
            verified_pages: verified.iter().filter_map(|l| field(l, "pages=")).sum(),
            bad_lines: text.lines().filter(|l| l.starts_with("SPIKE bad ")).map(str::to_string).collect(),
        }
    }
}

/// Runs `spike THREADS MIB 0 0 1` (one cycle, no hold) and waits up to `timeout`.
pub fn run_spike(q: &Qemu, threads: u32, mib_per_thread: u64, timeout: Duration) -> SpikeRun {
    run_spike_checked(q, threads, mib_per_thread, timeout).0
}

/// [`run_spike`], with what its done line says besides (failed allocations among them).
pub fn run_spike_checked(q: &Qemu, threads: u32, mib_per_thread: u64, timeout: Duration) -> (SpikeRun, SpikeCheck) {
    match q.console.run(&format!("spike {threads} {mib_per_thread} 0 0 1"), timeout) {
        Ok(out) => (SpikeRun::parse(&out.text, out.status), SpikeCheck::parse(&out.text)),
        Err(_) => (SpikeRun { completed: false, alloc_s: None, exit: None }, SpikeCheck::default()),
    }
}

/// OOM kills: the larger of what the console showed and what the guest's dmesg holds
/// (dmesg travels with the guest across migrations; the console starts with this QEMU).
pub fn oom_kills(q: &Qemu) -> usize {
    let dmesg = q.console.run("dmesg", Duration::from_secs(30)).map(|o| count_oom_kills(&o.text)).unwrap_or(0);
    dmesg.max(q.console.oom_kills())
}

/// Kernel error reports in what the guest printed: oopses, BUGs, warnings (lockdep, list
/// debugging and might_sleep report through these), bad page states and panics.
pub fn kernel_errors(text: &str) -> Vec<&str> {
    const MARKS: [&str; 7] = ["Oops:", "BUG:", "WARNING:", "Kernel panic", "Bad page state", "list_del corruption", "list_add corruption"];
    text.lines().filter(|l| MARKS.iter().any(|m| l.contains(m))).collect()
}

/// What the guest kernel logged that a healthy guest never logs, read from its own log
/// (`dmesg`) rather than the console: the console runs with `quiet`, which drops
/// warnings, and a destination's console starts at the switchover while the guest's log
/// travels with it. Beyond [`kernel_errors`]: general protection faults, RCU stalls, hung
/// tasks, stack overflows and page poison found overwritten.
pub fn dmesg_errors(q: &Qemu) -> Result<Vec<String>, ConsoleError> {
    let out = q.console.run("dmesg", Duration::from_secs(60))?;
    Ok(dmesg_error_lines(&out.text).into_iter().map(str::to_string).collect())
}

/// The lines of a guest's `dmesg` that [`dmesg_errors`] reports.
pub fn dmesg_error_lines(dmesg: &str) -> Vec<&str> {
    const MORE: [&str; 6] = ["general protection fault", "detected stall", "stall on CPU", "blocked for more than", "stack guard page", "pagealloc: memory corruption"];
    dmesg.lines().filter(|l| !kernel_errors(l).is_empty() || MORE.iter().any(|m| l.contains(m))).collect()
}

/// A guest's health as a benchmark records it (e.g. a migration's destination): whether
/// its shell answers, what its kernel log holds that a healthy guest never logs
/// ([`dmesg_error_lines`]), its taint flags and its OOM kills so far. One `dmesg` read.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    pub shell: bool,
    pub kernel_errors: Vec<String>,
    /// `None` if it could not be read.
    pub tainted: Option<u64>,
    /// OOM kills in the guest's log since it booted (the log travels with migrations).
    pub oom_kills: usize,
}

impl Health {
    /// Shell answers, no kernel error, not tainted.
    pub fn clean(&self) -> bool {
        self.shell && self.kernel_errors.is_empty() && self.tainted == Some(0)
    }
}

/// Reads [`Health`]: a shell command within `timeout`, then `dmesg` and the taint flags.
/// A guest whose shell does not answer gets no further questions.
pub fn health(q: &Qemu, timeout: Duration) -> Health {
    let shell = q.console.run("true", timeout).is_ok_and(|o| o.status == 0);
    if !shell {
        let text = q.console.transcript();
        return Health { shell, kernel_errors: kernel_errors(&text).into_iter().map(String::from).collect(), tainted: None, oom_kills: count_oom_kills(&text) };
    }
    let dmesg = q.console.run("dmesg", Duration::from_secs(60)).map(|o| o.text);
    let (kernel_errors, oom_kills) = match &dmesg {
        Ok(t) => (dmesg_error_lines(t).into_iter().map(String::from).collect(), count_oom_kills(t)),
        Err(e) => (vec![format!("dmesg: {e}")], q.console.oom_kills()),
    };
    Health { shell, kernel_errors, tainted: tainted(q).ok(), oom_kills }
}

/// The kernel's taint flags (`/proc/sys/kernel/tainted`): 0 for a kernel that never
/// warned, oopsed or hit a bad page.
pub fn tainted(q: &Qemu) -> Result<u64, ConsoleError> {
    read_number(q, "/proc/sys/kernel/tainted")
}

/// A number read from a guest file (e.g. `current_pages` under [`BALLOON_DIR`]).
pub fn read_number(q: &Qemu, path: &str) -> Result<u64, ConsoleError> {
    let out = q.console.run(&format!("cat {path}"), Duration::from_secs(60))?;
    out.text.trim().parse().map_err(|_| ConsoleError::Unexpected { command: format!("cat {path}"), output: out.text })
}

/// The patched kernel's page allocator hook counters (debugfs `virtio_balloon/hook_stats`).
pub fn hook_stats(q: &Qemu) -> Result<String, ConsoleError> {
    let cmd = "grep -q ' /sys/kernel/debug ' /proc/mounts || mount -t debugfs none /sys/kernel/debug; cat /sys/kernel/debug/virtio_balloon/hook_stats";
    Ok(q.console.run(cmd, Duration::from_secs(60))?.text)
}

/// Pages the hook handed out, summed over orders: `hook_stats` has a header
/// `order calls pages misses`, one row per order, then two-word totals.
pub fn hook_pages_served(stats: &str) -> Option<u64> {
    let mut lines = stats.lines();
    let header: Vec<&str> = lines.find(|l| l.starts_with("order "))?.split_whitespace().collect();
    let col = header.iter().position(|h| *h == "pages")?;
    Some(lines.map(|l| l.split_whitespace().collect::<Vec<_>>()).filter(|f| f.len() == header.len()).filter_map(|f| f[col].parse::<u64>().ok()).sum())
}

/// One row of `hook_stats` (`order calls pages misses`): (calls, pages, misses).
pub fn hook_stats_row(stats: &str, order: u32) -> Option<(u64, u64, u64)> {
    stats.lines().map(|l| l.split_whitespace().map(|w| w.parse::<u64>().ok()).collect::<Option<Vec<u64>>>()).find_map(|f| match f?.as_slice() {
        [o, calls, pages, misses] if *o == u64::from(order) => Some((*calls, *pages, *misses)),
        _ => None,
    })
}

/// The value of a `name value` line: the format of `/proc/vmstat` and of `hook_stats`'
/// totals (`deflated`, `store_pages`, `deflating`).
pub fn named_value(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        if w.next()? != name {
            return None;
        }
        w.next()?.parse().ok()
    })
}

/// Each CPU's count of timer softirqs: the `TIMER:` row of the guest's `/proc/softirqs`.
pub fn parse_timer_softirqs(text: &str) -> Option<Vec<u64>> {
    let row = text.lines().find_map(|l| l.trim_start().strip_prefix("TIMER:"))?;
    row.split_whitespace().map(|n| n.parse().ok()).collect()
}

/// A CPU whose timer has not run since boot while another's has (`/proc/softirqs`, read
/// right after boot): fewer than 5 timer softirqs against 20 or more. Seen under TCG in
/// CI: the guest's RCU then stalls from boot on (`rcu_sched kthread timer wakeup didn't
/// happen ... Possible timer handling issue on cpu=1 timer-softirq=1`) and the test waits
/// on a guest that never gets anywhere. A healthy 2-vCPU guest, 1.2 s after boot, counted
/// 33 to 78 on each CPU.
pub fn cpu_with_dead_timer(softirqs: &str) -> Option<(usize, u64)> {
    let counts = parse_timer_softirqs(softirqs)?;
    let busiest = counts.iter().copied().max()?;
    if busiest < 20 {
        return None;
    }
    counts.iter().copied().enumerate().find(|&(_, n)| n < 5)
}

/// A counter of the guest's `/proc/vmstat` (e.g. `thp_fault_alloc`).
pub fn vmstat(q: &Qemu, key: &str) -> Result<u64, ConsoleError> {
    let out = q.console.run("cat /proc/vmstat", Duration::from_secs(60))?;
    named_value(&out.text, key).ok_or_else(|| ConsoleError::Unexpected { command: format!("cat /proc/vmstat (no {key})"), output: out.text })
}

/// A field of the guest's `/proc/meminfo`, in kB (e.g. `MemFree`).
pub fn meminfo_kib(q: &Qemu, field: &str) -> Result<u64, ConsoleError> {
    let out = q.console.run("cat /proc/meminfo", Duration::from_secs(60))?;
    out.text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| ConsoleError::Unexpected { command: format!("cat /proc/meminfo (no {field})"), output: out.text })
}

/// Pageblocks per migratetype, summed over every zone (`/proc/pagetypeinfo`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pageblocks {
    pub unmovable: u64,
    pub movable: u64,
    pub cma: u64,
}

/// Reads `/proc/pagetypeinfo`'s "Number of blocks type" table: a header row naming the
/// migratetypes, then one row per zone ("Node    0, zone    DMA32     3    761 ...").
pub fn parse_pageblocks(text: &str) -> Option<Pageblocks> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("Number of blocks type"));
    let header: Vec<&str> = lines.next()?.split_whitespace().skip(4).collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (u, m, c) = (col("Unmovable")?, col("Movable")?, col("CMA"));
    let mut blocks = Pageblocks::default();
    for l in lines.take_while(|l| l.starts_with("Node")) {
        let n: Vec<u64> = l.split_whitespace().skip(4).map(|w| w.parse().ok()).collect::<Option<_>>()?;
        let at = |i: usize| n.get(i).copied();
        blocks.unmovable += at(u)?;
        blocks.movable += at(m)?;
        blocks.cma += c.and_then(at).unwrap_or(0);
    }
    Some(blocks)
}

/// The guest's pageblocks per migratetype (see [`parse_pageblocks`]).
pub fn pageblocks(q: &Qemu) -> Result<Pageblocks, ConsoleError> {
    let out = q.console.run("cat /proc/pagetypeinfo", Duration::from_secs(60))?;
    parse_pageblocks(&out.text).ok_or_else(|| ConsoleError::Unexpected { command: "cat /proc/pagetypeinfo (no pageblock table)".into(), output: out.text })
}

/// Pages in the balloon as the guest counts them: the patched kernel's `max_pages −
/// current_pages` (`/proc/sys/vm/balloon`), else the stock driver's `balloon_inflate −
/// balloon_deflate` (`/proc/vmstat`). One console command.
pub fn guest_balloon_pages(q: &Qemu) -> Result<Pages, ConsoleError> {
    let cmd = format!("if [ -e {BALLOON_DIR}/max_pages ]; then echo patched $(cat {BALLOON_DIR}/max_pages) $(cat {BALLOON_DIR}/current_pages); else cat /proc/vmstat; fi");
    let out = q.console.run(&cmd, Duration::from_secs(60))?;
    parse_guest_balloon(&out.text).ok_or(ConsoleError::Unexpected { command: cmd, output: out.text })
}

/// Reads [`guest_balloon_pages`]' output: `patched MAX CURRENT`, or `/proc/vmstat`.
pub fn parse_guest_balloon(text: &str) -> Option<Pages> {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("patched ") {
        let n: Vec<u64> = rest.split_whitespace().map(|w| w.parse().ok()).collect::<Option<_>>()?;
        return match n.as_slice() {
            [max, current] => Some(Pages(max.saturating_sub(*current))),
            _ => None,
        };
    }
    autoballoon_core::procfs::parse_vmstat(t).ok()?.balloon_pages()
}

/// Pages in the balloon as QEMU counts them: `memory` minus the guest size `query-balloon` reports.
pub fn qemu_balloon(qmp: &Qmp, memory: Kib) -> Result<Pages, QmpError> {
    Ok(Pages(memory.to_bytes_saturating().0.saturating_sub(qmp.query_balloon()?) / 4096))
}

/// Sets the guest's size over QMP and waits (polling every 10 ms) until QEMU reports it
/// there: at or below `size` when shrinking, at or above when growing. Returns the time
/// it took, or `None` if it did not get there within `timeout`.
pub fn balloon_to(qmp: &Qmp, size: Kib, timeout: Duration) -> Result<Option<Duration>, QmpError> {
    let target = size.to_bytes_saturating().0;
    let start = qmp.query_balloon()?;
    qmp.set_balloon_guest_size(target)?;
    poll_qmp(timeout, || qmp.query_balloon().map(|now| if start >= target { now <= target } else { now >= target }))
}

/// Polls `reached` every 10 ms until it says so (the time it took) or `timeout` passes
/// (`None`); a QMP error ends the wait and is returned.
fn poll_qmp(timeout: Duration, mut reached: impl FnMut() -> Result<bool, QmpError>) -> Result<Option<Duration>, QmpError> {
    let mut err = None;
    let took = wait_for(timeout, Duration::from_millis(10), || {
        reached().unwrap_or_else(|e| {
            err = Some(e);
            true
        })
    });
    match err {
        Some(e) => Err(e),
        None => Ok(took),
    }
}

/// The QOM path of [`crate::VmSpec::virtio_mem`]'s device.
pub const VIRTIO_MEM_PATH: &str = "/machine/peripheral/vmem0";

/// The memory the guest has plugged into its virtio-mem device (QOM `size`).
pub fn virtio_mem_size(qmp: &Qmp) -> Result<Kib, QmpError> {
    let v = qmp.qom_get(VIRTIO_MEM_PATH, "size")?;
    let bytes = v.as_u64().ok_or_else(|| QmpError::Protocol(format!("virtio-mem size is not a number: {v}")))?;
    Ok(Bytes(bytes).to_kib_floor())
}

/// Asks the guest to plug or unplug memory of its virtio-mem device until `size` is
/// plugged (QOM `requested-size`), without waiting.
pub fn virtio_mem_request(qmp: &Qmp, size: Kib) -> Result<(), QmpError> {
    qmp.qom_set(VIRTIO_MEM_PATH, "requested-size", serde_json::json!(size.to_bytes_saturating().0))
}

/// Asks the guest to plug or unplug memory of its virtio-mem device until `size` is
/// plugged (QOM `requested-size`) and waits (polling every 10 ms) until the device reports
/// it. Returns the time it took, or `None` if the guest did not get there within
/// `timeout` (it may refuse to unplug memory it cannot offline).
pub fn virtio_mem_resize(qmp: &Qmp, size: Kib, timeout: Duration) -> Result<Option<Duration>, QmpError> {
    virtio_mem_request(qmp, size)?;
    poll_qmp(timeout, || virtio_mem_size(qmp).map(|now| now == size))
}

/// Runs `f` (a workload on the guest's console) while sampling the guest's size (QMP
/// `actual`, bytes) every `every`: its result and the samples, (seconds since the start,
/// bytes).
pub fn watch_balloon<T>(ctl: &Qmp, every: Duration, f: impl FnOnce() -> T) -> (T, Vec<(f64, u64)>) {
    watch(every, || ctl.query_balloon().ok(), f)
}

/// Runs `f` while taking `sample` every `every` on another thread: `f`'s result and the
/// samples that were there, (seconds since the start, sample).
pub fn watch<T, S: Send>(every: Duration, sample: impl Fn() -> Option<S> + Sync, f: impl FnOnce() -> T) -> (T, Vec<(f64, S)>) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let t0 = std::time::Instant::now();
    std::thread::scope(|sc| {
        let sampler = sc.spawn(|| {
            let mut v = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(s) = sample() {
                    v.push((t0.elapsed().as_secs_f64(), s));
                }
                std::thread::sleep(every);
            }
            v
        });
        let out = f();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (out, sampler.join().unwrap_or_default())
    })
}

/// Runs the guest workload `fill`, which dirties `mib` MiB and frees them on exit.
pub fn fill(q: &Qemu, mib: u64) -> Result<(), String> {
    let out = q.console.run(&format!("fill {mib}"), Duration::from_secs(180)).map_err(|e| format!("fill: {e}"))?;
    if out.status != 0 || !out.text.contains("FILL mib=") {
        return Err(format!("fill {mib} failed (exit {}): {}", out.status, out.text.trim()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_whose_timer_never_ran_is_told_apart() {
        let healthy = include_str!("../fixtures/guest-softirqs-2cpu.txt");
        assert_eq!(parse_timer_softirqs(healthy), Some(vec![78, 33]));
        assert_eq!(cpu_with_dead_timer(healthy), None);
        let dead = healthy.replace("78         33", "81          1");
        assert_eq!(cpu_with_dead_timer(&dead), Some((1, 1)));
        // Too early to tell: no CPU has ticked much yet.
        assert_eq!(cpu_with_dead_timer(&healthy.replace("78         33", "12          1")), None);
        assert_eq!(parse_timer_softirqs("garbage"), None);
    }

    #[test]
    fn spike_output_is_read() {
        let out = "SPIKE cycle=1 threads=4 mib=384 alloc_s=3.41 ok=4\nSPIKE done cycles=1 failed=0\n";
        assert_eq!(SpikeRun::parse(out, 0), SpikeRun { completed: true, alloc_s: Some(3.41), exit: Some(0) });
        let failed = "SPIKE cycle=1 threads=4 mib=384 alloc_s=0.20 ok=3\nSPIKE done cycles=1 failed=1\n";
        assert!(!SpikeRun::parse(failed, 1).completed);
        assert!(!SpikeRun::parse("Killed\n", 137).completed);
    }

    #[test]
    fn verify_output_is_read() {
        let ok = "SPIKE cycle=1 threads=2 mib=64 alloc_s=0.50 ok=2\nSPIKE verified cycle=1 pages=32768 bad=0\nSPIKE done cycles=1 failed=0 bad=0\n";
        assert_eq!(SpikeCheck::parse(ok), SpikeCheck { failed: Some(0), bad_pages: 0, verified_pages: 32768, bad_lines: vec![] });
        let bad = "SPIKE cycle=1 threads=2 mib=64 alloc_s=0.50 ok=1\nSPIKE bad cycle=1 thread=0 page=7 word=3 got=0 want=0xa5a5\nSPIKE verified cycle=1 pages=16384 bad=2\nSPIKE done cycles=1 failed=1 bad=2\n";
        let c = SpikeCheck::parse(bad);
        assert_eq!((c.failed, c.bad_pages, c.verified_pages, c.bad_lines.len()), (Some(1), 2, 16384, 1));
        // Killed before its end: no done line, the verified lines still count.
        let killed = "SPIKE verified cycle=1 pages=100 bad=3\nKilled\n";
        assert_eq!(SpikeCheck::parse(killed), SpikeCheck { failed: None, bad_pages: 3, verified_pages: 100, bad_lines: vec![] });
    }

    #[test]
    fn the_guest_balloon_is_read_either_way() {
        assert_eq!(parse_guest_balloon("patched 524288 65536\n"), Some(Pages(458752)));
        assert_eq!(parse_guest_balloon("nr_free_pages 5\nballoon_inflate 190464\nballoon_deflate 14080\n"), Some(Pages(176384)));
        assert_eq!(parse_guest_balloon("patched 1\n"), None);
        assert_eq!(parse_guest_balloon("nr_free_pages 5\n"), None);
    }

    #[test]
    fn kernel_errors_are_found() {
        let t = "[ 1.0] ok\n[29.3] Oops: general protection fault, probably for non-canonical address 0xdead000000000108\n[ 2.0] WARNING: CPU: 0 PID: 1 at mm/page_alloc.c:1 x\n";
        assert_eq!(kernel_errors(t).len(), 2);
        assert!(kernel_errors("[ 1.0] all fine\n").is_empty());
        let dmesg = "[ 1.0] ok\n[ 9.1] general protection fault, probably for non-canonical address\n[ 9.2] rcu: INFO: rcu_sched detected stalls on CPUs\n[ 9.3] BUG: unable to handle page fault\n";
        assert_eq!(dmesg_error_lines(dmesg).len(), 3);
        assert!(dmesg_error_lines("[ 1.0] virtio_balloon: ok\n").is_empty());
    }

    #[test]
    fn hook_pages_are_summed_over_orders() {
        let stats = "order calls pages misses\n0 1199 1199 0\n1 0 0 0\n9 684 350208 2\ndeflated 690\nstore_pages 10\ncache_pages 3\n";
        assert_eq!(hook_pages_served(stats), Some(1199 + 350208));
        assert_eq!(hook_pages_served("nothing"), None);
    }

    #[test]
    fn pageblocks_are_summed_over_zones() {
        let text = include_str!("../tests/fixtures/pagetypeinfo-patched.txt");
        let b = parse_pageblocks(text).expect("the table");
        assert!(b.unmovable > 0 && b.movable > b.unmovable, "{b:?}");
        let two = "Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic          CMA      Isolate \nNode 0, zone      DMA            1            7            0            0            0            0 \nNode 0, zone    DMA32           20          700            3            0           64            0 \n";
        assert_eq!(parse_pageblocks(two), Some(Pageblocks { unmovable: 21, movable: 707, cma: 64 }));
        assert_eq!(parse_pageblocks("Page block order: 9\n"), None);
    }

    #[test]
    fn hook_stats_rows_and_totals_are_read() {
        let stats = "order calls pages misses\n0 1199 1199 0\n9 684 350208 2\ndeflated 690\nstore_pages 10\ndeflating 0\n";
        assert_eq!(hook_stats_row(stats, 9), Some((684, 350208, 2)));
        assert_eq!(hook_stats_row(stats, 3), None);
        assert_eq!((named_value(stats, "store_pages"), named_value(stats, "deflating")), (Some(10), Some(0)));
        assert_eq!(named_value("thp_fault_alloc 12\nthp_fault_fallback 3\n", "thp_fault_fallback"), Some(3));
        assert_eq!(named_value(stats, "cache_pages"), None);
    }
}

