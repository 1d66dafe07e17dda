//! `make bench`: the swap-free kernel against the stock one, side by side in one run, on the
//! same 2 GiB guest (2 vCPUs, no swap, no agent, deflate-on-oom on, QEMU TCG).
//!
//! * Spike: 4 threads touch 1.5 GiB. With no balloon (reference), through the page
//!   allocator hook from a balloon of 1.75 GiB (the patched kernel shrunk to 256 MiB), and
//!   through stock deflate-on-oom from the same balloon.
//! * Balloon speed: inflate 2048 → 256 MiB and deflate back, timed until QEMU's
//!   `query-balloon` reports the new size (polled every 10 ms): 2 MiB units (patched)
//!   against 4 KiB pages (stock). The guest lowers the size it reports when QEMU has
//!   acknowledged the deflation (the virtio spec's order), on both kernels.
//! * The spike with 4 vCPUs on the patched kernel (the balloon's lock under
//!   contention): through the hook against no balloon.
//! * Fragmentation after balloon churn (`AUTOBALLOON_BENCH_CHURN` cycles, 10: balloon to
//!   256 MiB, a 2 × 300 MiB spike, balloon back to 2 GiB), stock against patched:
//!   pageblocks by migratetype (`/proc/pagetypeinfo`) and the share of THP faults that
//!   got a huge page when 1 GiB is touched with `defrag=always`.
//!
//! * The slow path with an empty balloon (the hook registered, nothing to give): two
//!   readers stream `AUTOBALLOON_BENCH_SCRATCH_MIB` (6144) of a sparse virtio-blk disk
//!   through the page cache of the full guest, then 2 threads touch 2 × 700 MiB over the
//!   full cache, so that allocations miss the free lists and reclaim; seconds of each,
//!   direct-reclaim stalls (`allocstall_*`) and, on the patched kernel, the hook's calls,
//!   stock against patched.
//!
//! Prints medians and ratios; writes them to `run/bench/kernel.json`. Needs the images
//! `make bench` builds (`AUTOBALLOON_PATCHED_IMAGE`, `AUTOBALLOON_STOCK_IMAGE`);
//! `AUTOBALLOON_BENCH_REPS` sets the repetitions (3). The guests run under `$AUTOBALLOON_QEMU`
//! (default: the system's QEMU); the version is printed and recorded as `"qemu"`.

use autoballoon_testbed::guest::{balloon_to, oom_kills, run_spike, SpikeRun};
use autoballoon_testbed::{GuestAgent, GuestImage, Qemu, VmSpec};
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const GUEST: Kib = Kib::from_mib_saturating(2048);
const SHRUNK: Kib = Kib::from_mib_saturating(256);
const THREADS: u32 = 4;
const MIB_PER_THREAD: u64 = 384;

struct Bench {
    run_dir: PathBuf,
    boots: usize,
    /// The QEMU version the guests ran under ($AUTOBALLOON_QEMU, else the system's).
    qemu: String,
    /// The size of every guest's scratch disk (the slow-path figure reads it whole).
    scratch: Kib,
}

impl Bench {
    fn boot(&mut self, image: &GuestImage, name: &str) -> Result<(Qemu, Qmp), String> {
        self.boot_with(image, name, 2)
    }

    fn boot_with(&mut self, image: &GuestImage, name: &str, cpus: u32) -> Result<(Qemu, Qmp), String> {
        self.boots += 1;
        let name = format!("{name}-{}", self.boots);
        // The guest's /dev/vda: reads fill its page cache with clean, reclaimable pages.
        let disk = autoballoon_testbed::sparse_disk(&self.run_dir.join(format!("{name}.scratch.raw")), self.scratch)?;
        let spec = VmSpec { cpus, agent: GuestAgent::None, deflate_on_oom: true, disk: Some(disk), ..VmSpec::new(&name, GUEST) };
        let q = Qemu::start(image, spec, &self.run_dir).map_err(|e| e.to_string())?;
        q.wait_booted(Duration::from_secs(120)).map_err(|e| e.to_string())?;
        let qmp = Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)).map_err(|e| e.to_string())?;
        self.qemu = qmp.version().to_string();
        Ok((q, qmp))
    }
}

/// Time to move the balloon to `size`, as QEMU sees it.
fn timed_balloon(qmp: &Qmp, size: Kib) -> Result<f64, String> {
    balloon_to(qmp, size, Duration::from_secs(300)).map_err(|e| e.to_string())?.map(|d| d.as_secs_f64()).ok_or_else(|| format!("the balloon did not reach {size} in 5 min"))
}

fn spike(q: &Qemu, what: &str) -> Result<f64, String> {
    let s: SpikeRun = run_spike(q, THREADS, MIB_PER_THREAD, Duration::from_secs(600));
    let kills = oom_kills(q);
    match (s.completed, s.alloc_s) {
        (true, Some(t)) if kills == 0 => Ok(t),
        _ => Err(format!("{what}: the spike failed ({s:?}, {kills} OOM kills)")),
    }
}

/// Runs a guest command that must succeed.
fn sh(q: &Qemu, cmd: &str) -> Result<String, String> {
    let out = q.console.run(cmd, Duration::from_secs(300)).map_err(|e| e.to_string())?;
    if out.status != 0 {
        return Err(format!("`{cmd}` failed: {}", out.text));
    }
    Ok(out.text)
}

fn vmstat(q: &Qemu, key: &str) -> Result<u64, String> {
    autoballoon_testbed::guest::vmstat(q, key).map_err(|e| e.to_string())
}

/// Pageblocks per migratetype, all zones: (unmovable, movable).
fn pageblocks(q: &Qemu) -> Result<(u64, u64), String> {
    let b = autoballoon_testbed::guest::pageblocks(q).map_err(|e| e.to_string())?;
    Ok((b.unmovable, b.movable))
}

/// Fragmentation after balloon churn: `cycles` times balloon to 256 MiB, a 2 x 300 MiB
/// spike, balloon back to 2 GiB; then the pageblock table and the share of THP faults
/// that got a huge page (defrag=always) for a 1 GiB touch.
fn fragmentation(q: &Qemu, qmp: &Qmp, cycles: usize) -> Result<Fragmentation, String> {
    for _ in 0..cycles {
        timed_balloon(qmp, SHRUNK)?;
        let s = run_spike(q, 2, 300, Duration::from_secs(600));
        if !s.completed {
            return Err(format!("churn spike failed: {s:?}"));
        }
        timed_balloon(qmp, GUEST)?;
    }
    let (unmovable, movable) = pageblocks(q)?;
    sh(q, "echo always > /sys/kernel/mm/transparent_hugepage/enabled && echo always > /sys/kernel/mm/transparent_hugepage/defrag")?;
    let (a0, f0) = (vmstat(q, "thp_fault_alloc")?, vmstat(q, "thp_fault_fallback")?);
    let s = run_spike(q, 1, 1024, Duration::from_secs(600));
    if !s.completed {
        return Err(format!("THP spike failed: {s:?}"));
    }
    let (a, f) = (vmstat(q, "thp_fault_alloc")? - a0, vmstat(q, "thp_fault_fallback")? - f0);
    Ok(Fragmentation { unmovable_blocks: unmovable, movable_blocks: movable, thp_success: a as f64 / (a + f).max(1) as f64 })
}

/// Direct-reclaim stalls so far: `allocstall_*` summed over zones.
fn allocstalls(q: &Qemu) -> Result<u64, String> {
    let text = sh(q, "cat /proc/vmstat")?;
    Ok(text.lines().filter(|l| l.starts_with("allocstall_")).filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()).sum())
}

/// The hook's calls so far, summed over orders (0 on a kernel without the hook).
fn hook_calls(q: &Qemu) -> u64 {
    autoballoon_testbed::guest::hook_stats(q).ok().map(|t| (0..=10).filter_map(|o| autoballoon_testbed::guest::hook_stats_row(&t, o)).map(|r| r.0).sum()).unwrap_or(0)
}

#[derive(Debug, Clone, Copy)]
struct SlowPath {
    /// Reading the scratch disk through the page cache (it fills the guest, then evicts).
    read_s: f64,
    /// The spike's allocation time over the full page cache.
    spike_s: f64,
    /// Direct-reclaim stalls over both.
    stalls: u64,
    hook_calls: u64,
}

/// Allocations that miss the free lists of a guest whose balloon is empty: two readers stream
/// the scratch disk (`/dev/vda`, half each) through the page cache until it has filled the
/// guest many times over (timed by the guest's uptime), then 2 threads touch 2 × 700 MiB over
/// that full page cache, every page of which must be reclaimed first.
fn slow_path(q: &Qemu, scratch: Kib) -> Result<SlowPath, String> {
    let half = scratch.0 / 1024 / 2;
    sh(q, "sync; echo 3 > /proc/sys/vm/drop_caches")?;
    let (stalls0, calls0) = (allocstalls(q)?, hook_calls(q));
    let cmd = format!(
        "a=$(cut -d' ' -f1 /proc/uptime); dd if=/dev/vda of=/dev/null bs=1M count={half} 2>/dev/null & dd if=/dev/vda of=/dev/null bs=1M skip={half} count={half} 2>/dev/null & wait; b=$(cut -d' ' -f1 /proc/uptime); echo \"SLOWPATH $a $b\""
    );
    let out = sh(q, &cmd)?;
    let (a, b) = out
        .lines()
        .find_map(|l| {
            let mut w = l.strip_prefix("SLOWPATH ")?.split_whitespace();
            Some((w.next()?.parse::<f64>().ok()?, w.next()?.parse::<f64>().ok()?))
        })
        .ok_or_else(|| format!("slow path: no timing in {out:?}"))?;
    let spike = run_spike(q, 2, 700, Duration::from_secs(600));
    let spike_s = match (spike.completed, spike.alloc_s) {
        (true, Some(t)) => t,
        _ => return Err(format!("slow path: the spike over the page cache failed: {spike:?}")),
    };
    Ok(SlowPath { read_s: b - a, spike_s, stalls: allocstalls(q)? - stalls0, hook_calls: hook_calls(q) - calls0 })
}

#[derive(Debug)]
struct Fragmentation {
    unmovable_blocks: u64,
    movable_blocks: u64,
    /// THP faults that got a huge page, of all THP faults.
    thp_success: f64,
}

impl Fragmentation {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({ "unmovable_blocks": self.unmovable_blocks, "movable_blocks": self.movable_blocks, "thp_success": self.thp_success })
    }
}

#[derive(Default)]
struct Samples {
    spike_nob: Vec<f64>,
    spike_hook: Vec<f64>,
    spike_doo: Vec<f64>,
    spike_nob_4cpu: Vec<f64>,
    spike_hook_4cpu: Vec<f64>,
    inflate_2m: Vec<f64>,
    deflate_2m: Vec<f64>,
    inflate_4k: Vec<f64>,
    deflate_4k: Vec<f64>,
    slow_patched: Vec<SlowPath>,
    slow_stock: Vec<SlowPath>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// GB/s for moving the balloon by `GUEST - SHRUNK` in `seconds`.
fn rate(seconds: f64) -> f64 {
    GUEST.saturating_sub(SHRUNK).to_bytes_saturating().0 as f64 / seconds / 1e9
}

fn image(var: &str) -> Result<GuestImage, String> {
    let dir = std::env::var_os(var).ok_or_else(|| format!("{var} is not set: run `make bench`"))?;
    GuestImage::at(Path::new(&dir)).map_err(|e| e.to_string())
}

fn run() -> Result<(), String> {
    let patched = image("AUTOBALLOON_PATCHED_IMAGE")?;
    let stock = image("AUTOBALLOON_STOCK_IMAGE")?;
    let reps: usize = std::env::var("AUTOBALLOON_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    // `cargo bench` runs in the package folder; the outputs go to the workspace's run/.
    let run_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../run/bench");
    std::fs::create_dir_all(&run_dir).map_err(|e| format!("cannot create {}: {e}", run_dir.display()))?;
    let scratch_mib: u64 = std::env::var("AUTOBALLOON_BENCH_SCRATCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(6144);
    let scratch = Kib::from_mib_saturating(scratch_mib);
    let mut b = Bench { run_dir: run_dir.clone(), boots: 0, qemu: String::new(), scratch };
    let run_dir = run_dir.canonicalize().unwrap_or(run_dir);
    let mut s = Samples::default();
    // AUTOBALLOON_BENCH_ONLY=slow-path: only the empty-balloon slow-path figure, printed.
    if std::env::var("AUTOBALLOON_BENCH_ONLY").as_deref() == Ok("slow-path") {
        for rep in 1..=reps {
            for (image, name) in [(&patched, "slow-patched"), (&stock, "slow-stock")] {
                let (q, _qmp) = b.boot(image, name)?;
                let r = slow_path(&q, scratch)?;
                eprintln!("[bench] round {rep} of {reps}: {name}: {r:?}");
            }
        }
        return Ok(());
    }
    for rep in 1..=reps {
        eprintln!("[bench] round {rep} of {reps}: patched kernel (2 MiB units, hook)");
        let (q, qmp) = b.boot(&patched, "patched")?;
        s.slow_patched.push(slow_path(&q, scratch)?);
        s.inflate_2m.push(timed_balloon(&qmp, SHRUNK)?);
        s.deflate_2m.push(timed_balloon(&qmp, GUEST)?);
        s.spike_nob.push(spike(&q, "patched, no balloon")?);
        timed_balloon(&qmp, SHRUNK)?;
        s.spike_hook.push(spike(&q, "patched, hook")?);
        drop(q);

        eprintln!("[bench] round {rep} of {reps}: stock kernel (4 KiB pages, deflate-on-oom)");
        let (q, qmp) = b.boot(&stock, "stock")?;
        s.slow_stock.push(slow_path(&q, scratch)?);
        s.inflate_4k.push(timed_balloon(&qmp, SHRUNK)?);
        s.deflate_4k.push(timed_balloon(&qmp, GUEST)?);
        timed_balloon(&qmp, SHRUNK)?;
        s.spike_doo.push(spike(&q, "stock, deflate-on-oom")?);
        drop(q);

        eprintln!("[bench] round {rep} of {reps}: patched kernel, 4 vCPUs (the store lock under contention)");
        let (q, qmp) = b.boot_with(&patched, "patched4", 4)?;
        s.spike_nob_4cpu.push(spike(&q, "patched, 4 vCPUs, no balloon")?);
        timed_balloon(&qmp, SHRUNK)?;
        s.spike_hook_4cpu.push(spike(&q, "patched, 4 vCPUs, hook")?);
    }
    // AUTOBALLOON_BENCH_CHURN: balloon cycles before the fragmentation figures (10).
    let churn: usize = std::env::var("AUTOBALLOON_BENCH_CHURN").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    eprintln!("[bench] fragmentation after {churn} balloon cycles: patched");
    let (q, qmp) = b.boot(&patched, "frag-patched")?;
    let frag_patched = fragmentation(&q, &qmp, churn)?;
    drop(q);
    eprintln!("[bench] fragmentation after {churn} balloon cycles: stock");
    let (q, qmp) = b.boot(&stock, "frag-stock")?;
    let frag_stock = fragmentation(&q, &qmp, churn)?;
    drop(q);

    let (nob, hook, doo) = (median(&s.spike_nob), median(&s.spike_hook), median(&s.spike_doo));
    let (i2, d2, i4, d4) = (rate(median(&s.inflate_2m)), rate(median(&s.deflate_2m)), rate(median(&s.inflate_4k)), rate(median(&s.deflate_4k)));
    println!("autoballoon kernel benchmark: 2 GiB guest, TCG, QEMU {}, medians of {reps} round(s)", b.qemu);
    println!("spike, {THREADS} threads x {MIB_PER_THREAD} MiB (s):");
    println!("  no balloon                     {nob:8.2}");
    println!("  balloon 1.75 GiB, hook         {hook:8.2}   {:.2}x no balloon (target <= 1.5x)", hook / nob);
    println!("  balloon 1.75 GiB, stock d-o-o  {doo:8.2}   {:.2}x no balloon", doo / nob);
    println!("  hook vs stock deflate-on-oom   {:8.2}x faster", doo / hook);
    let (nob4, hook4) = (median(&s.spike_nob_4cpu), median(&s.spike_hook_4cpu));
    println!("  4 vCPUs: no balloon {nob4:.2}, hook {hook4:.2}   {:.2}x no balloon", hook4 / nob4);
    let med = |v: &[SlowPath], f: fn(&SlowPath) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let (read_p, read_s) = (med(&s.slow_patched, |x| x.read_s), med(&s.slow_stock, |x| x.read_s));
    let (spike_p, spike_s) = (med(&s.slow_patched, |x| x.spike_s), med(&s.slow_stock, |x| x.spike_s));
    let (stalls_p, stalls_s, calls_p) = (med(&s.slow_patched, |x| x.stalls as f64), med(&s.slow_stock, |x| x.stalls as f64), med(&s.slow_patched, |x| x.hook_calls as f64));
    println!("slow path, empty balloon ({stalls_p:.0} direct-reclaim stalls patched, {stalls_s:.0} stock; {calls_p:.0} hook calls):");
    println!("  {scratch_mib} MiB read through the page cache: patched {read_p:.2} s, stock {read_s:.2} s   {:.3}x", read_p / read_s);
    println!("  2 x 700 MiB touched over the full cache:  patched {spike_p:.2} s, stock {spike_s:.2} s   {:.3}x", spike_p / spike_s);
    println!("balloon speed, 1792 MiB each way (GB/s):");
    println!("  inflate  2 MiB {i2:7.3}   4 KiB {i4:7.3}   {:.2}x", i2 / i4);
    println!("  deflate  2 MiB {d2:7.3}   4 KiB {d4:7.3}   {:.2}x (target >= 4x)", d2 / d4);
    println!("after {churn} balloon cycles: pageblocks unmovable/movable, THP faults that got a huge page:");
    println!("  patched {}/{} {:.0} %   stock {}/{} {:.0} %", frag_patched.unmovable_blocks, frag_patched.movable_blocks, frag_patched.thp_success * 100.0, frag_stock.unmovable_blocks, frag_stock.movable_blocks, frag_stock.thp_success * 100.0);
    let json = serde_json::json!({
        "qemu": b.qemu,
        "reps": reps,
        "spike_no_balloon_s": nob, "spike_hook_s": hook, "spike_stock_doo_s": doo,
        "hook_over_no_balloon": hook / nob, "stock_doo_over_no_balloon": doo / nob,
        "inflate_2m_gb_s": i2, "inflate_4k_gb_s": i4, "deflate_2m_gb_s": d2, "deflate_4k_gb_s": d4,
        "inflate_ratio": i2 / i4, "deflate_ratio": d2 / d4,
        "spike_no_balloon_4cpu_s": nob4, "spike_hook_4cpu_s": hook4, "hook_over_no_balloon_4cpu": hook4 / nob4,
        "slow_path_mib": scratch_mib, "slow_path_read_patched_s": read_p, "slow_path_read_stock_s": read_s, "slow_path_read_ratio": read_p / read_s,
        "slow_path_spike_patched_s": spike_p, "slow_path_spike_stock_s": spike_s, "slow_path_spike_ratio": spike_p / spike_s,
        "slow_path_patched_stalls": stalls_p, "slow_path_stock_stalls": stalls_s, "slow_path_hook_calls": calls_p,
        "churn_cycles": churn, "fragmentation_patched": frag_patched.json(), "fragmentation_stock": frag_stock.json(),
        "samples": {
            "spike_nob": s.spike_nob, "spike_hook": s.spike_hook, "spike_doo": s.spike_doo,
            "spike_nob_4cpu": s.spike_nob_4cpu, "spike_hook_4cpu": s.spike_hook_4cpu,
            "slow_path_patched": s.slow_patched.iter().map(|x| [x.read_s, x.spike_s]).collect::<Vec<_>>(), "slow_path_stock": s.slow_stock.iter().map(|x| [x.read_s, x.spike_s]).collect::<Vec<_>>(),
            "inflate_2m": s.inflate_2m, "deflate_2m": s.deflate_2m, "inflate_4k": s.inflate_4k, "deflate_4k": s.deflate_4k,
        },
    });
    let out = run_dir.join("kernel.json");
    std::fs::write(&out, format!("{json}\n")).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    println!("{json}");
    Ok(())
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; this harness takes no options.
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
