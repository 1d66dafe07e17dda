//! `make calibrate` (`autoballoon-sim --calibrate`): the calibration's fitted values, from
//! measured numbers instead of hand-set constants.
//!
//! - **qemu-tcg** from make bench's records (bench/results.json, this machine's QEMU 7.2 under
//!   TCG): the migration line (bandwidth, first burst) by least squares over the idle cells,
//!   the downtime, the patched driver's rates, the hook's rate and cost, what free page
//!   reporting leaves unreported; and from SPEC.md's measured facts (their ranges' middles):
//!   the stock balloon's rates, the touch speed, the host refault, deflate-on-oom's round,
//!   free page reporting's drain.
//! - **xen-seed** from the first seed's own numbers (SPEC.md's table, the seed's text): the
//!   migration line from F1 and R1, the hook's and the worker's rates from S1; and two values
//!   no seed measures directly, fitted by running the simulator on R1's EM_sim: the balloon's
//!   stall per page moved (to its 7.8 % overhead without migrations) and the guest's speed while it
//!   migrates (to its −3.2 % with migrations). fluid_sim A–C are left out of the fit: they
//!   are the check (experiments/REPORT.md, R1).
//!
//! - **qemu-tcg's page cache**: a hit at the facts' memory speed, a miss at the disk speed
//!   fitted on make bench-host's E1 (bench/host/results.json), the configured guests' throughput.
//!
//! `--calibrate` prints each value beside calibration.toml's; `--calibrate-write FILE` puts
//! the fitted values into the file, comments kept. tests/calibration.rs fails when the file
//! and the fit disagree.

use crate::calib::CALIBRATION_TOML;
use crate::error::SimError;
use crate::policies::PolicyName;
use crate::run::{run, Options, Summary};
use crate::scenario::Scenario;
use serde::Deserialize;
use std::fmt::Write as _;

/// GB/s (10^9) to GiB/s.
const GB: f64 = 1e9 / (1u64 << 30) as f64;

/// One fitted value.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub profile: &'static str,
    pub key: &'static str,
    pub value: f64,
    /// Decimals kept when written.
    pub decimals: usize,
    /// What it was fitted to.
    pub from: String,
}

#[derive(Debug, Deserialize)]
struct Results {
    cells: Vec<BenchCell>,
    kernel: Kernel,
}

/// One migration cell of make bench's bench/results.json, as the fit and the conformance
/// check read it.
#[derive(Debug, Deserialize)]
pub(crate) struct BenchCell {
    pub config: String,
    pub moment: serde_json::Value,
    pub qemu: String,
    pub sent_mib: f64,
    /// The cell's runs' least and most MiB sent (the median alone in older records).
    #[serde(default)]
    pub sent_min: Option<f64>,
    #[serde(default)]
    pub sent_max: Option<f64>,
    pub total_s: f64,
    pub downtime_ms: f64,
}

#[derive(Debug, Deserialize)]
struct Kernel {
    inflate_2m_gb_s: f64,
    deflate_2m_gb_s: f64,
    hook_over_no_balloon: f64,
    samples: Samples,
}

#[derive(Debug, Deserialize)]
struct Samples {
    spike_hook: Vec<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The least-squares line `y = a + b x`.
fn line(pts: &[(f64, f64)]) -> (f64, f64) {
    let n = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxy: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let b = sxy / sxx;
    (my - b * mx, b)
}

/// The size of make bench's migrated guests, MiB.
const BENCH_GUEST_MIB: f64 = 2048.0;

/// The spike make bench's kernel benchmark and the conformance cells write: 3 × 400 MiB.
const SPIKE_GIB: f64 = 1200.0 / 1024.0;

/// qemu-tcg's values from make bench's records.
pub fn qemu_tcg(results_json: &str) -> Result<Vec<Fitted>, SimError> {
    let r: Results = serde_json::from_str(results_json)
        .map_err(|e| SimError::BadCalibration(format!("bench results: {e}")))?;
    let sys = |config: &str, moment: &str| {
        r.cells
            .iter()
            .find(|c| c.qemu == "system" && c.config == config && c.moment.as_str() == Some(moment))
    };
    let idle_cells: Vec<&BenchCell> = r
        .cells
        .iter()
        .filter(|c| c.qemu == "system" && c.moment.as_str() == Some("idle"))
        .collect();
    let idle: Vec<(f64, f64)> = idle_cells.iter().map(|c| (c.sent_mib, c.total_s)).collect();
    if idle.len() < 3 {
        return Err(SimError::BadCalibration(
            "bench results: fewer than 3 idle cells on the system QEMU".into(),
        ));
    }
    let (a, b) = line(&idle);
    let mib_s = 1.0 / b;
    // The zero-page scan goes on while the sender waits for its bandwidth: the idle cell
    // that scanned the most per second of its migration bounds its speed from below.
    let (scan_gib_s, scan_cfg) = idle_cells
        .iter()
        .filter(|c| c.total_s > 0.0)
        .map(|c| (((BENCH_GUEST_MIB - c.sent_mib) / 1024.0).max(0.0) / c.total_s, c))
        .max_by(|x, y| x.0.total_cmp(&y.0))
        .map(|(v, c)| (v, format!("{}: {:.0} MiB sent in {:.2} s", c.config, c.sent_mib, c.total_s)))
        .unwrap_or((0.0, String::new()));
    let downtimes: Vec<f64> = r
        .cells
        .iter()
        .filter(|c| c.qemu == "system" && c.config == "ab-patched")
        .map(|c| c.downtime_ms)
        .collect();
    let (Some(fpr), Some(floor)) = (sys("fpr", "idle"), sys("ab-patched-fpr", "idle")) else {
        return Err(SimError::BadCalibration(
            "bench results: no idle fpr or ab-patched-fpr cell on the system QEMU".into(),
        ));
    };
    let spike_s = median(r.kernel.samples.spike_hook.clone());
    // What a settled guest's floor holds in data: its idle migration with free page hinting
    // sends just that (the free memory hinted away, the balloon's not sent).
    let floor_mib = |configs: &[&str]| {
        let sent: Vec<f64> = configs
            .iter()
            .filter_map(|c| sys(c, "idle"))
            .map(|c| c.sent_mib)
            .collect();
        let n = sent.len();
        (n > 0).then(|| (median(sent), n))
    };
    let (Some((stock_floor, stock_n)), Some((patched_floor, _))) = (
        floor_mib(&["ab-stock", "hint", "fpr-hint"]),
        floor_mib(&["ab-patched-fpr"]),
    ) else {
        return Err(SimError::BadCalibration(
            "bench results: no idle ab-stock, hint or fpr-hint cell, or no idle ab-patched-fpr cell, on the system QEMU".into(),
        ));
    };
    // What hinting alone sends beyond its idle floor 0.5-4 s after the spike's free.
    let hint_after: Vec<f64> = r
        .cells
        .iter()
        .filter(|c| c.qemu == "system" && c.config == "hint")
        .filter(|c| {
            c.moment
                .get("after-spike")
                .and_then(|v| v.as_f64())
                .is_some_and(|ms| ms <= 4000.0)
        })
        .map(|c| c.sent_mib)
        .collect();
    let Some(hint_idle) = sys("hint", "idle").map(|c| c.sent_mib) else {
        return Err(SimError::BadCalibration(
            "bench results: no idle hint cell on the system QEMU".into(),
        ));
    };
    if hint_after.is_empty() {
        return Err(SimError::BadCalibration(
            "bench results: no hint cell 0.5-4 s after the spike on the system QEMU".into(),
        ));
    }
    let hint_after_n = hint_after.len();
    let hint_after = median(hint_after);
    // The model's floor of make bench's 2 GiB guest: its kernel (struct page and the rest)
    // and daemons, from the values the file has.
    let key = |k: &str| current(CALIBRATION_TOML, "qemu-tcg", k).unwrap_or(0.0);
    let kernel_mib = BENCH_GUEST_MIB * key("struct_page_fraction")
        + (key("kernel_base_gib") + key("daemons_gib")) * 1024.0;
    let zero = |sent: f64| ((kernel_mib - sent) / 1024.0).max(0.0);
    let n = idle.len();
    Ok(vec![
        Fitted {
            profile: "qemu-tcg",
            key: "bandwidth_gib_s",
            value: mib_s / 1024.0,
            decimals: 4,
            from: format!("bench: least squares t = a + MiB/bw over the {n} idle cells: {mib_s:.1} MiB/s"),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "burst_s",
            value: (-a).max(0.0),
            decimals: 3,
            from: format!("bench: the same line's intercept ({a:.3} s)"),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "zero_scan_gib_s",
            value: scan_gib_s,
            decimals: 2,
            from: format!("bench: at least the fastest idle cell's zero pages per second ({scan_cfg}, the rest of {BENCH_GUEST_MIB:.0} MiB as zero pages)"),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "downtime_fixed_ms",
            value: median(downtimes.clone()),
            decimals: 1,
            from: format!("bench: median downtime of ab-patched over its {} cells", downtimes.len()),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "patched_inflate_gib_s",
            value: r.kernel.inflate_2m_gb_s * GB,
            decimals: 2,
            from: format!("bench kernel: inflate in 2 MiB units {:.2} GB/s", r.kernel.inflate_2m_gb_s),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "patched_deflate_gib_s",
            value: r.kernel.deflate_2m_gb_s * GB,
            decimals: 2,
            from: format!("bench kernel: deflate in 2 MiB units {:.2} GB/s", r.kernel.deflate_2m_gb_s),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "hook_gib_s",
            value: SPIKE_GIB / spike_s,
            decimals: 3,
            from: format!("bench kernel: 3 × 400 MiB through the hook in {spike_s:.2} s (median)"),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "hook_refault_factor",
            value: r.kernel.hook_over_no_balloon,
            decimals: 3,
            from: "bench kernel: the hook's spike over the same spike into backed memory".into(),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "kernel_zero_gib",
            value: zero(stock_floor),
            decimals: 3,
            from: format!(
                "bench: a settled stock guest with hinting sends {stock_floor:.0} MiB idle (median of {stock_n} cells) of a {kernel_mib:.0} MiB floor"
            ),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "patched_kernel_zero_gib",
            value: zero(patched_floor),
            decimals: 3,
            from: format!(
                "bench: the patched kernel + FPR + hinting sends {patched_floor:.0} MiB idle of a {kernel_mib:.0} MiB floor"
            ),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "hint_miss_mib",
            value: (hint_after - hint_idle).max(0.0),
            decimals: 0,
            from: format!(
                "bench: hinting alone sends {hint_after:.0} MiB 0.5-4 s after the spike (median of {hint_after_n} cells), {hint_idle:.0} idle"
            ),
        },
        Fitted {
            profile: "qemu-tcg",
            key: "fpr_keep_mib",
            value: fpr.sent_mib - floor.sent_mib,
            decimals: 0,
            from: format!(
                "bench: FPR idle sends {:.0} MiB, the patched kernel + FPR {:.0}: what reporting leaves",
                fpr.sent_mib, floor.sent_mib
            ),
        },
    ])
}

/// The seed's figures the xen-seed profile rests on (the first seed's text; its GB are Xen's
/// MB / 1024, footnote 1: 750000 MB = 732 GB, so GiB here).
pub mod seed {
    /// F1: about one extra minute per 100 GB.
    pub const SECONDS_PER_100_GB: f64 = 60.0;
    /// R1: the fastest un-ballooned EM_sim migration, 7 min 35 s, of the 732 GB VM.
    pub const FULL_MIGRATION_S: f64 = 455.0;
    pub const VM_GIB: f64 = 750_000.0 / 1024.0;
    /// S1: deflation plus the hook, 3.7 GB/s; inflation 1.4 GB/s.
    pub const HOOK_GB_S: f64 = 3.7;
    pub const INFLATE_GB_S: f64 = 1.4;
    /// R1, EM_sim: overhead without and with migrations, percent (Table 1).
    pub const EM_SIM_OVERHEAD_PCT: f64 = 7.8;
    pub const EM_SIM_OVERHEAD_MIGR_PCT: f64 = -3.2;
}

/// Overhead of swapfree on `s` against static (same seed), percent; infinite when the
/// program did not finish.
fn overhead(s: &Scenario) -> Result<f64, SimError> {
    let r: Summary = run(
        s,
        PolicyName::Swapfree,
        Options {
            seed: Some(0),
            ..Default::default()
        },
    )?
    .summary;
    // No work done: the program did not finish in the scenario's time, far too slow.
    Ok(r.overhead_pct.unwrap_or(f64::INFINITY))
}

fn with_key(s: &Scenario, key: &str, v: f64) -> Scenario {
    let mut s = s.clone();
    s.calibration
        .get_or_insert_with(toml::Table::new)
        .insert(key.into(), toml::Value::Float(v));
    s
}

/// Bisection for `f(x) = goal` on [lo, hi], `f` increasing (or decreasing with `up` false);
/// then, of the two values on the grid of `decimals` beside the answer, the one whose `f`
/// is nearer the goal (a run's figures step with whole migrations).
fn solve(
    lo: f64,
    hi: f64,
    goal: f64,
    up: bool,
    decimals: i32,
    mut f: impl FnMut(f64) -> Result<f64, SimError>,
) -> Result<f64, SimError> {
    let x = bisect(lo, hi, goal, up, &mut f)?;
    let q = 10f64.powi(decimals);
    let (a, b) = ((x * q).floor() / q, (x * q).ceil() / q);
    Ok(if (f(a)? - goal).abs() <= (f(b)? - goal).abs() {
        a
    } else {
        b
    })
}

fn bisect(
    mut lo: f64,
    mut hi: f64,
    goal: f64,
    up: bool,
    f: &mut impl FnMut(f64) -> Result<f64, SimError>,
) -> Result<f64, SimError> {
    for _ in 0..40 {
        let mid = (lo + hi) / 2.0;
        if (f(mid)? < goal) == up {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-4 * hi.abs().max(1e-3) {
            break;
        }
    }
    Ok((lo + hi) / 2.0)
}

/// xen-seed's values from the seed's figures, two of them fitted by running em-sim.
pub fn xen_seed() -> Result<Vec<Fitted>, SimError> {
    use seed::*;
    let bw = 100.0 / SECONDS_PER_100_GB;
    let fixed = FULL_MIGRATION_S - VM_GIB / bw;
    // The two runs use the values fitted above, whatever the file holds now.
    let mut em = Scenario::load("em-sim")?;
    for (k, v) in [
        ("bandwidth_gib_s", bw),
        ("migration_fixed_s", fixed),
        ("hook_gib_s", HOOK_GB_S),
        ("patched_inflate_gib_s", INFLATE_GB_S),
    ] {
        em = with_key(&em, k, v);
    }
    let mut quiet = em.clone();
    quiet.migration.clear();
    let stall = solve(0.0, 20.0, EM_SIM_OVERHEAD_PCT, true, 3, |x| {
        overhead(&with_key(&quiet, "balloon_stall_us_per_page", x))
    })?;
    let em = with_key(&em, "balloon_stall_us_per_page", stall);
    // A slower guest while migrating costs static (longer migrations) more: the overhead
    // with migrations falls as the speed falls.
    let speed = solve(0.05, 1.0, EM_SIM_OVERHEAD_MIGR_PCT, true, 3, |x| {
        overhead(&with_key(&em, "migration_app_speed", x))
    })?;
    Ok(vec![
        Fitted {
            profile: "xen-seed",
            key: "bandwidth_gib_s",
            value: bw,
            decimals: 3,
            from: "seed F1: about one extra minute per 100 GB".into(),
        },
        Fitted {
            profile: "xen-seed",
            key: "migration_fixed_s",
            value: fixed,
            decimals: 1,
            from: "seed R1: the 732 GB VM un-ballooned in 7 min 35 s, less 732 GB at F1's rate".into(),
        },
        Fitted {
            profile: "xen-seed",
            key: "hook_gib_s",
            value: HOOK_GB_S,
            decimals: 2,
            from: "seed S1: deflation plus the hook, 3.7 GB/s".into(),
        },
        Fitted {
            profile: "xen-seed",
            key: "patched_inflate_gib_s",
            value: INFLATE_GB_S,
            decimals: 2,
            from: "seed S1: shrinking at about 1.4 GB/s".into(),
        },
        Fitted {
            profile: "xen-seed",
            key: "balloon_stall_us_per_page",
            value: stall,
            decimals: 3,
            from: "fit: em-sim without migrations, swapfree against static, to the seed's 7.8 %".into(),
        },
        Fitted {
            profile: "xen-seed",
            key: "migration_app_speed",
            value: speed,
            decimals: 3,
            from: "fit: em-sim with migrations 15 min apart, to the seed's −3.2 % (with the stall above)".into(),
        },
    ])
}

/// SPEC.md's facts measured on this machine (ranges read as their middle).
pub mod facts {
    /// Stock QEMU 7.2 under TCG: inflate 0.4–0.6 GB/s, deflate 0.85–1.5 GB/s.
    pub const INFLATE_GB_S: (f64, f64) = (0.4, 0.6);
    pub const DEFLATE_GB_S: (f64, f64) = (0.85, 1.5);
    /// A 3 × 400 MiB spike into backed memory in 0.47 s (QEMU 10).
    pub const SPIKE_WARM_S: f64 = 0.47;
    /// The same into memory FPR gave back takes 4.2–4.8× as long.
    pub const REFAULT: (f64, f64) = (4.2, 4.8);
    /// Touching 1.2 GiB with deflate-on-oom: 8.2–9.0 s instead of 1.1–1.3 s, 1 MiB a round.
    pub const DOO_S: (f64, f64) = (8.2, 9.0);
    pub const DOO_PLAIN_S: (f64, f64) = (1.1, 1.3);
    pub const DOO_GIB: f64 = 1.2;
    /// Free page reporting drains 125–320 MiB/s.
    pub const FPR_MIB_S: (f64, f64) = (125.0, 320.0);
}

/// qemu-tcg's values from SPEC.md's facts.
pub fn qemu_tcg_facts() -> Vec<Fitted> {
    use facts::*;
    let mid = |(a, b): (f64, f64)| (a + b) / 2.0;
    let fact = |key: &'static str, value: f64, decimals: usize, from: &str| Fitted {
        profile: "qemu-tcg",
        key,
        value,
        decimals,
        from: format!("fact: {from}"),
    };
    vec![
        fact(
            "inflate_gib_s",
            mid(INFLATE_GB_S) * GB,
            3,
            "stock QEMU 7.2 under TCG inflates 0.4–0.6 GB/s",
        ),
        fact(
            "deflate_gib_s",
            mid(DEFLATE_GB_S) * GB,
            3,
            "and deflates 0.85–1.5 GB/s",
        ),
        fact(
            "touch_gib_s",
            SPIKE_GIB / SPIKE_WARM_S,
            2,
            "3 × 400 MiB into backed memory in 0.47 s",
        ),
        fact(
            "refault_factor",
            mid(REFAULT),
            2,
            "the same into memory FPR gave back, 4.2–4.8× as long",
        ),
        fact(
            "doo_round_ms",
            (mid(DOO_S) - mid(DOO_PLAIN_S)) / (DOO_GIB * 1024.0) * 1000.0,
            1,
            "1.2 GiB with deflate-on-oom in 8.2–9.0 s against 1.1–1.3 s, 1 MiB a round",
        ),
        fact(
            "cache_read_gib_s",
            qemu_tcg_cache_read_gib_s(),
            2,
            "a page-cache hit copies at the memory speed under TCG, 3 × 400 MiB written in 0.47 s",
        ),
        fact(
            "fpr_gib_s",
            mid(FPR_MIB_S) / 1024.0,
            3,
            "reporting drains 125–320 MiB/s",
        ),
    ]
}

#[derive(Debug, Deserialize)]
struct HostResults {
    e1_balloon_overhead: HostE1,
}

#[derive(Debug, Deserialize)]
struct HostE1 {
    setup: HostE1Setup,
    pairs: Vec<HostE1Pair>,
}

#[derive(Debug, Deserialize)]
struct HostE1Setup {
    files: u64,
    file_kib: u64,
}

#[derive(Debug, Deserialize)]
struct HostE1Pair {
    native: HostE1Guest,
}

#[derive(Debug, Deserialize)]
struct HostE1Guest {
    mem_available_mib: f64,
    mib_per_s: f64,
}

/// make bench-host's E1 workload (`work files`): 80 % of the operations on a fifth of the files.
pub const BENCH_HOST_HOT_FRACTION: f64 = 0.2;
pub const BENCH_HOST_HOT_SHARE: f64 = 0.8;

/// The least-squares `b` of `y = a·h + b·(1 − h)` over `(h, y)`, `a` given.
fn miss_cost(pts: &[(f64, f64)], a: f64) -> f64 {
    let (num, den) = pts.iter().fold((0.0, 0.0), |(n, d), &(h, y)| {
        let m = 1.0 - h;
        (n + m * (y - a * h), d + m * m)
    });
    num / den
}

/// A page-cache hit's speed on qemu-tcg: the fact's memory speed under TCG (3 × 400 MiB
/// written in 0.47 s). make bench-host's E1 cannot tell it apart from infinite: its
/// throughput is the misses' (a free fit of both speeds gives the hits a negative cost).
pub fn qemu_tcg_cache_read_gib_s() -> f64 {
    SPIKE_GIB / facts::SPIKE_WARM_S
}

/// qemu-tcg's disk speed from make bench-host's E1 (bench/host/results.json): each
/// configured (not ballooned) guest's throughput against the hit rate the model gives its
/// file set at the guest's measured MemAvailable, `1/T = h/cache + (1 − h)/disk`, the hits'
/// speed [`qemu_tcg_cache_read_gib_s`], the disk's by least squares over every run.
pub fn qemu_tcg_host(host_json: &str) -> Result<Vec<Fitted>, SimError> {
    let r: HostResults = serde_json::from_str(host_json)
        .map_err(|e| SimError::BadCalibration(format!("bench host results: {e}")))?;
    let e1 = r.e1_balloon_overhead;
    let set_mib = (e1.setup.files * e1.setup.file_kib) as f64 / 1024.0;
    let set = crate::guest::FileSet {
        set: crate::scenario::gib(set_mib / 1024.0),
        hot_fraction: BENCH_HOST_HOT_FRACTION,
        hot_share: BENCH_HOST_HOT_SHARE,
    };
    let pts: Vec<(f64, f64)> = e1
        .pairs
        .iter()
        .filter(|p| p.native.mib_per_s > 0.0)
        .map(|p| {
            let cached = crate::scenario::gib(p.native.mem_available_mib / 1024.0);
            (
                crate::guest::file_hit_rate(cached, &set),
                1.0 / p.native.mib_per_s,
            )
        })
        .collect();
    let hits: Vec<f64> = pts.iter().map(|p| p.0).collect();
    if pts.len() < 2 || hits.iter().all(|h| (h - hits[0]).abs() < 1e-9) {
        return Err(SimError::BadCalibration(
            "bench host results: E1 needs configured guests at two hit rates or more".into(),
        ));
    }
    let a = 1.0 / (qemu_tcg_cache_read_gib_s() * 1024.0);
    let b = miss_cost(&pts, a);
    if !(b.is_finite() && b > 0.0) {
        return Err(SimError::BadCalibration(format!(
            "bench host results: E1's fit gives no positive disk speed (s/MiB {b})"
        )));
    }
    Ok(vec![Fitted {
        profile: "qemu-tcg",
        key: "disk_read_gib_s",
        value: 1.0 / b / 1024.0,
        decimals: 4,
        from: format!(
            "bench-host E1: {} configured guests' MiB/s against the hit rate of their MemAvailable ({set_mib:.0} MiB of files, 80 % of reads on a fifth), hits at the fact's memory speed: misses at {:.1} MiB/s",
            pts.len(),
            1.0 / b
        ),
    }])
}

/// Every fitted value: xen-seed's, qemu-tcg's from the facts, its others when make bench's
/// records are given, and its page-cache speeds when make bench-host's are.
pub fn calibrate(
    bench_results: Option<&str>,
    host_results: Option<&str>,
) -> Result<Vec<Fitted>, SimError> {
    let mut v = xen_seed()?;
    v.extend(qemu_tcg_facts());
    if let Some(text) = bench_results {
        v.extend(qemu_tcg(text)?);
    }
    if let Some(text) = host_results {
        v.extend(qemu_tcg_host(text)?);
    }
    Ok(v)
}

/// The value `key` has in `profile` of a calibration file's text.
pub fn current(text: &str, profile: &str, key: &str) -> Option<f64> {
    let file: toml::Table = toml::from_str(text).ok()?;
    let v = file.get("profile")?.get(profile)?.get(key)?;
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

/// The fit beside the embedded calibration file, as Markdown.
pub fn markdown(fits: &[Fitted]) -> String {
    let mut o = String::from(
        "| profile | key | fitted | calibration.toml | from |\n|---|---|---|---|---|\n",
    );
    for f in fits {
        let cur =
            current(CALIBRATION_TOML, f.profile, f.key).map_or("–".into(), |c| format!("{c}"));
        let _ = writeln!(
            o,
            "| {} | `{}` | {:.*} | {cur} | {} |",
            f.profile, f.key, f.decimals, f.value, f.from
        );
    }
    o
}

/// `text` (a calibration file) with the fitted values in place; comments and order kept.
pub fn write_into(text: &str, fits: &[Fitted]) -> String {
    let mut profile = String::new();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("[profile.") {
            profile = rest.trim_end_matches(']').to_string();
        }
        let key = t.split('=').next().unwrap_or("").trim();
        match fits.iter().find(|f| f.profile == profile && f.key == key) {
            Some(f) if t.contains('=') && !t.starts_with('#') => {
                let (head, tail) = line.split_once('=').unwrap_or((line, ""));
                let old = tail.find('#').map(|i| &tail[i..]).unwrap_or("");
                // The comment says what the value was fitted to (its figures change with
                // the fit); the old comment's `[kind]` tag stays.
                let comment = if f.from.is_empty() {
                    old.to_string()
                } else {
                    let tag = old
                        .trim_start_matches('#')
                        .trim_start()
                        .strip_prefix('[')
                        .and_then(|r| r.split_once(']'))
                        .map_or("fit", |(t, _)| t);
                    // `from` names its source first ("bench: …", "bench kernel: …"): the
                    // tag says it already.
                    let from = f
                        .from
                        .strip_prefix(tag)
                        .map(|r| r.trim_start_matches(':').trim_start())
                        .unwrap_or(&f.from);
                    format!("# [{tag}] make calibrate: {from}")
                };
                let value = format!("{:.*}", f.decimals, f.value);
                let value = if value.contains('.') {
                    value
                } else {
                    format!("{value}.0")
                };
                let mut l = format!("{head}= {value}");
                if !comment.is_empty() {
                    // The comment stays in its column.
                    let width = line.find('#').unwrap_or(0).max(l.len() + 1);
                    while l.len() < width {
                        l.push(' ');
                    }
                    l.push_str(&comment);
                }
                out.push_str(&l);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_through_two_points() {
        let (a, b) = line(&[(0.0, 1.0), (2.0, 5.0), (1.0, 3.0)]);
        assert!((a - 1.0).abs() < 1e-12 && (b - 2.0).abs() < 1e-12);
    }

    #[test]
    fn miss_cost_through_exact_points() {
        // y = 2h + 10(1 − h)
        let pts: Vec<(f64, f64)> = [0.1, 0.5, 0.9]
            .iter()
            .map(|&h| (h, 2.0 * h + 10.0 * (1.0 - h)))
            .collect();
        let b = miss_cost(&pts, 2.0);
        assert!((b - 10.0).abs() < 1e-9, "{b}");
    }

    #[test]
    fn writing_keeps_comments_and_other_profiles() {
        let text = "[profile.a]\nx = 1.0   # from here\ny = 2.0\n[profile.b]\nx = 3.0 # b's\n";
        let fits = [Fitted {
            profile: "b",
            key: "x",
            value: 4.25,
            decimals: 2,
            from: String::new(),
        }];
        let out = write_into(text, &fits);
        assert!(
            out.contains("[profile.a]\nx = 1.0   # from here\n"),
            "{out}"
        );
        assert!(out.contains("x = 4.25"), "{out}");
        assert!(out.contains("# b's"), "{out}");
        assert_eq!(current(&out, "b", "x"), Some(4.25));
        // A fit that says what it came from rewrites the comment, its tag kept.
        let text = "[profile.b]\nx = 3.0   # [bench] make calibrate: 3.5 GB/s\n";
        let fits = [Fitted {
            from: "bench kernel: 2.9 GB/s".into(),
            ..fits[0].clone()
        }];
        let out = write_into(text, &fits);
        assert_eq!(
            out,
            "[profile.b]\nx = 4.25  # [bench] make calibrate: kernel: 2.9 GB/s\n"
        );
    }
}
