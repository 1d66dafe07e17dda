//! `make bench`: the swap-free kernel against the stock one, side by side in one run, on the
//! same 2 GiB guest (2 vCPUs, no swap, no agent, deflate-on-oom on, QEMU TCG).
//!
//! * Spike: 4 threads touch 1.5 GiB. With no balloon (reference), through the page
//!   allocator hook from a balloon of 1.75 GiB (the patched kernel shrunk to 256 MiB), and
//!   through stock deflate-on-oom from the same balloon.
//! * Balloon speed: inflate 2048 → 256 MiB and deflate back, timed until QEMU's
//!   `query-balloon` reports the new size (polled every 10 ms): 2 MiB units (patched)
//!   against 4 KiB pages (stock). QEMU's figure is the balloon size the guest reports: the
//!   patched guest reports a deflation as soon as its pages are back in its allocator and
//!   tells QEMU the pfns afterwards (allowed without MUST_TELL_HOST), so its deflate time
//!   is at the polling floor; the stock guest reports after QEMU has acked every batch.
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
}

impl Bench {
    fn boot(&mut self, image: &GuestImage, name: &str) -> Result<(Qemu, Qmp), String> {
        self.boots += 1;
        let spec = VmSpec { cpus: 2, agent: GuestAgent::None, deflate_on_oom: true, ..VmSpec::new(&format!("{name}-{}", self.boots), GUEST) };
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

#[derive(Default)]
struct Samples {
    spike_nob: Vec<f64>,
    spike_hook: Vec<f64>,
    spike_doo: Vec<f64>,
    inflate_2m: Vec<f64>,
    deflate_2m: Vec<f64>,
    inflate_4k: Vec<f64>,
    deflate_4k: Vec<f64>,
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
    let mut b = Bench { run_dir: run_dir.clone(), boots: 0, qemu: String::new() };
    let run_dir = run_dir.canonicalize().unwrap_or(run_dir);
    let mut s = Samples::default();
    for rep in 1..=reps {
        eprintln!("[bench] round {rep} of {reps}: patched kernel (2 MiB units, hook)");
        let (q, qmp) = b.boot(&patched, "patched")?;
        s.inflate_2m.push(timed_balloon(&qmp, SHRUNK)?);
        s.deflate_2m.push(timed_balloon(&qmp, GUEST)?);
        s.spike_nob.push(spike(&q, "patched, no balloon")?);
        timed_balloon(&qmp, SHRUNK)?;
        s.spike_hook.push(spike(&q, "patched, hook")?);
        drop(q);

        eprintln!("[bench] round {rep} of {reps}: stock kernel (4 KiB pages, deflate-on-oom)");
        let (q, qmp) = b.boot(&stock, "stock")?;
        s.inflate_4k.push(timed_balloon(&qmp, SHRUNK)?);
        s.deflate_4k.push(timed_balloon(&qmp, GUEST)?);
        timed_balloon(&qmp, SHRUNK)?;
        s.spike_doo.push(spike(&q, "stock, deflate-on-oom")?);
    }

    let (nob, hook, doo) = (median(&s.spike_nob), median(&s.spike_hook), median(&s.spike_doo));
    let (i2, d2, i4, d4) = (rate(median(&s.inflate_2m)), rate(median(&s.deflate_2m)), rate(median(&s.inflate_4k)), rate(median(&s.deflate_4k)));
    println!("autoballoon kernel benchmark: 2 GiB guest, TCG, QEMU {}, medians of {reps} round(s)", b.qemu);
    println!("spike, {THREADS} threads x {MIB_PER_THREAD} MiB (s):");
    println!("  no balloon                     {nob:8.2}");
    println!("  balloon 1.75 GiB, hook         {hook:8.2}   {:.2}x no balloon (target <= 1.5x)", hook / nob);
    println!("  balloon 1.75 GiB, stock d-o-o  {doo:8.2}   {:.2}x no balloon", doo / nob);
    println!("  hook vs stock deflate-on-oom   {:8.2}x faster", doo / hook);
    println!("balloon speed, 1792 MiB each way (GB/s):");
    println!("  inflate  2 MiB {i2:7.3}   4 KiB {i4:7.3}   {:.2}x", i2 / i4);
    println!("  deflate  2 MiB {d2:7.3}   4 KiB {d4:7.3}   {:.2}x (target >= 4x; 2 MiB: pages back before QEMU is told)", d2 / d4);
    let json = serde_json::json!({
        "qemu": b.qemu,
        "reps": reps,
        "spike_no_balloon_s": nob, "spike_hook_s": hook, "spike_stock_doo_s": doo,
        "hook_over_no_balloon": hook / nob, "stock_doo_over_no_balloon": doo / nob,
        "inflate_2m_gb_s": i2, "inflate_4k_gb_s": i4, "deflate_2m_gb_s": d2, "deflate_4k_gb_s": d4,
        "inflate_ratio": i2 / i4, "deflate_ratio": d2 / d4,
        "samples": {
            "spike_nob": s.spike_nob, "spike_hook": s.spike_hook, "spike_doo": s.spike_doo,
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
