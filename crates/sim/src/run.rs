//! Runs a scenario under a policy: core's host loop over the simulated world, one host step
//! a second of virtual time, the model one tick at a time; then the summary (against a
//! static run of the same scenario and seed) and the optional time series.

use crate::error::SimError;
use crate::migration::MigrationRecord;
use crate::policies::PolicyName;
use crate::scenario::Scenario;
use crate::world::SimWorld;
use autoballoon_core::host::host_step;
use serde::Serialize;
use std::fmt::Write as _;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// What a run reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub experiment: String,
    pub policy: String,
    pub seed: u64,
    pub duration_s: f64,
    pub oom_kills: u64,
    /// Allocations that failed: refused mallocs and writes the OOM killer answered.
    pub failed_allocations: u64,
    pub swap_out_bytes: u64,
    pub swap_in_bytes: u64,
    /// The host memory behind the VMs, averaged over time (Xen: the domains' sizes; QEMU:
    /// the pages that hold data).
    pub avg_mem_bytes: u64,
    pub peak_mem_bytes: u64,
    /// The guests' logical sizes, averaged over time.
    pub avg_guest_bytes: u64,
    /// The programs' own memory (what they wrote and hold), averaged over time, and its peak.
    pub avg_app_bytes: u64,
    pub peak_app_bytes: u64,
    /// The programs' memory averaged over the time they ran (from the first start to the
    /// last end), as the seed's R1 averages its jobs.
    pub avg_app_running_bytes: u64,
    /// The smallest size any guest reached.
    pub min_guest_bytes: u64,
    /// Seconds the programs spent in steps that are not sleeps.
    pub app_runtime_s: f64,
    /// What those steps take at full speed with memory at hand.
    pub app_work_s: f64,
    pub app_passes: u64,
    pub programs_killed: u64,
    /// (runtime / work) against the static run's, in percent; none for static itself.
    pub overhead_pct: Option<f64>,
    /// Memory the hook served from the balloon.
    pub hook_bytes: u64,
    pub reported_bytes: u64,
    pub doo_rounds: u64,
    /// CPU seconds of the agent and the hook.
    pub cpu_s: f64,
    /// Seconds writes waited for memory (summed over VMs).
    pub stalled_s: f64,
    pub host_swap_out_bytes: u64,
    pub host_swap_in_bytes: u64,
    pub migrations: Vec<MigrationRecord>,
    /// Each VM on its own.
    pub vms: Vec<VmSummary>,
    pub avg_migration_s: Option<f64>,
    pub fastest_migration_s: Option<f64>,
    pub static_avg_migration_s: Option<f64>,
    pub static_fastest_migration_s: Option<f64>,
    /// 1 − avg / static avg, percent.
    pub migration_speedup_pct: Option<f64>,
    pub fastest_speedup_pct: Option<f64>,
}

/// One VM's part of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmSummary {
    pub name: String,
    pub oom_kills: u64,
    pub failed_allocations: u64,
    pub swap_out_bytes: u64,
    pub avg_guest_bytes: u64,
    pub min_guest_bytes: u64,
    pub app_runtime_s: f64,
    pub app_work_s: f64,
    pub hook_bytes: u64,
    pub avg_migration_s: Option<f64>,
    /// Its programs' `files` steps (warm-ups left out): bytes read, of which page-cache hits,
    /// and the seconds the reads took.
    pub file_read_bytes: u64,
    pub file_hit_bytes: u64,
    pub file_read_s: f64,
}

impl VmSummary {
    /// The file readers' throughput, bytes per second (none: no `files` step was measured).
    pub fn file_bytes_per_s(&self) -> Option<f64> {
        (self.file_read_s > 0.0).then(|| self.file_read_bytes as f64 / self.file_read_s)
    }
    /// The share of file reads served from the page cache.
    pub fn file_hit_rate(&self) -> Option<f64> {
        (self.file_read_bytes > 0).then(|| self.file_hit_bytes as f64 / self.file_read_bytes as f64)
    }
}

/// One row of the time series: one VM at one time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesRow {
    pub t_s: f64,
    pub vm: String,
    pub size_gib: f64,
    pub target_gib: f64,
    pub footprint_gib: f64,
    pub anon_gib: f64,
    pub cache_gib: f64,
    pub free_gib: f64,
    /// MemAvailable as the guest's /proc/meminfo would show it.
    pub available_gib: f64,
    pub swapped_gib: f64,
    pub migrating: bool,
}

/// A run's results.
#[derive(Debug, Clone)]
pub struct Run {
    pub summary: Summary,
    pub series: Vec<SeriesRow>,
}

impl Run {
    /// VM `vm`'s last row of the series (recorded with `series` on), if any.
    pub fn last_row(&self, vm: &str) -> Option<&SeriesRow> {
        self.series.iter().rev().find(|r| r.vm == vm)
    }
}

/// How to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// The scenario's seed if none.
    pub seed: Option<u64>,
    pub series: bool,
    /// A progress line on stderr.
    pub progress: bool,
    /// Leave out the static run (no overhead or speedup figures).
    pub no_baseline: bool,
}

/// Runs `s` under `policy`, and (unless told not to) under `static` for the comparisons.
pub fn run(s: &Scenario, policy: PolicyName, o: Options) -> Result<Run, SimError> {
    let seed = o.seed.unwrap_or(0);
    let mut r = simulate(s, policy, seed, o.series, o.progress)?;
    if policy != PolicyName::Static && !o.no_baseline {
        let base = simulate(s, PolicyName::Static, seed, false, o.progress)?.summary;
        compare(&mut r.summary, &base);
    }
    Ok(r)
}

/// Fills the figures of `s` that compare it with the static run `base`.
pub fn compare(s: &mut Summary, base: &Summary) {
    let ratio = |x: &Summary| {
        if x.app_work_s > 0.0 {
            Some(x.app_runtime_s / x.app_work_s)
        } else {
            None
        }
    };
    if let (Some(a), Some(b)) = (ratio(s), ratio(base)) {
        s.overhead_pct = Some(100.0 * (a / b - 1.0));
    }
    s.static_avg_migration_s = base.avg_migration_s;
    s.static_fastest_migration_s = base.fastest_migration_s;
    if let (Some(a), Some(b)) = (s.avg_migration_s, base.avg_migration_s) {
        s.migration_speedup_pct = Some(100.0 * (1.0 - a / b));
    }
    if let (Some(a), Some(b)) = (s.fastest_migration_s, base.fastest_migration_s) {
        s.fastest_speedup_pct = Some(100.0 * (1.0 - a / b));
    }
}

/// One run of `s` under `policy` with `seed`; no comparisons.
pub fn simulate(
    s: &Scenario,
    policy: PolicyName,
    seed: u64,
    series: bool,
    progress: bool,
) -> Result<Run, SimError> {
    let calib = s.calibration()?;
    let cfg = s.policy.clone().unwrap_or_default();
    let mut side = policy.guest();
    side.hinting |= s.free_page_hint;
    let mut world = SimWorld::new(s, calib, side, seed);
    let mut hl = policy.host_loop(&cfg, s.vm.len());
    let ticks = (s.duration_s / s.tick_s).round() as u64;
    let mut next_sample = 0.0;
    let mut next_row = 0.0;
    let mut rows = Vec::new();
    let report_every = (ticks / 20).max(1);
    // Per VM: a migration ran since the last row (one shorter than a row's interval shows).
    let mut migrated = vec![false; world.vms.len()];
    for k in 0..ticks {
        if world.now + 1e-9 >= next_sample {
            host_step(&mut hl, &mut world);
            next_sample += 1.0;
        }
        world.advance();
        for (m, v) in migrated.iter_mut().zip(&world.vms) {
            *m |= v.migration.is_some();
        }
        if s.stop_when_done
            && world
                .vms
                .iter()
                .all(|v| v.migration.is_none() && v.programs.iter().all(|p| p.done || p.killed))
        {
            break;
        }
        if series && world.now + 1e-9 >= next_row {
            next_row += s.series_every_s.max(s.tick_s);
            rows.extend(world.vms.iter().zip(&mut migrated).map(|(v, migrated)| {
                let g = &v.guest;
                let gb = |k: autoballoon_core::units::Kib| k.0 as f64 / (1024.0 * 1024.0);
                SeriesRow {
                    t_s: world.now,
                    vm: v.name.clone(),
                    size_gib: gb(g.size()),
                    target_gib: gb(g.cfg.max.saturating_sub(g.balloon_target)),
                    footprint_gib: gb(
                        g.footprint(world.calib.migration == crate::calib::MigrationKind::Xen)
                    ),
                    anon_gib: gb(g.ram_anon()),
                    cache_gib: gb(g.cache),
                    free_gib: gb(g.free()),
                    available_gib: gb(g.mem_view().available),
                    swapped_gib: gb(g.swapped),
                    migrating: std::mem::take(migrated),
                }
            }));
        }
        if progress && k % report_every == 0 {
            eprint!(
                "\r{} / {}: {:>3.0} % of {:.0} s simulated",
                s.name,
                policy.as_str(),
                100.0 * k as f64 / ticks as f64,
                s.duration_s
            );
        }
    }
    if progress {
        eprintln!("\r{} / {}: done{:30}", s.name, policy.as_str(), "");
    }
    Ok(Run {
        summary: summarize(s, policy, seed, &world),
        series: rows,
    })
}

fn summarize(s: &Scenario, policy: PolicyName, seed: u64, w: &SimWorld) -> Summary {
    let dur = w.now.max(1e-9);
    let bytes = |k: autoballoon_core::units::Kib| k.to_bytes_saturating().0;
    let sum_k = |f: &dyn Fn(&crate::world::VmState) -> autoballoon_core::units::Kib| {
        w.vms
            .iter()
            .fold(autoballoon_core::units::Kib::ZERO, |a, v| {
                a.saturating_add(f(v))
            })
    };
    let progs = || w.vms.iter().flat_map(|v| v.programs.iter());
    let times: Vec<f64> = w.records.iter().map(|r| r.duration_s).collect();
    Summary {
        scenario: s.name.clone(),
        experiment: s.experiment.clone(),
        policy: policy.as_str().to_string(),
        seed,
        duration_s: w.now,
        oom_kills: w.vms.iter().map(|v| v.oom_kills).sum(),
        failed_allocations: w.vms.iter().map(|v| v.failed_allocations).sum(),
        swap_out_bytes: bytes(sum_k(&|v| v.guest.stats.swap_out)),
        swap_in_bytes: bytes(sum_k(&|v| v.guest.stats.swap_in)),
        avg_mem_bytes: (w.totals.footprint_kib_s / dur * 1024.0) as u64,
        peak_mem_bytes: bytes(w.totals.peak_footprint),
        avg_guest_bytes: (w.totals.size_kib_s / dur * 1024.0) as u64,
        avg_app_bytes: (w.totals.app_kib_s / dur * 1024.0) as u64,
        peak_app_bytes: bytes(w.totals.peak_app),
        avg_app_running_bytes: (w.totals.app_running_kib_s / w.totals.app_running_s.max(1e-9)
            * 1024.0) as u64,
        min_guest_bytes: w.vms.iter().map(|v| bytes(v.min_size)).min().unwrap_or(0),
        app_runtime_s: progs().fold(0.0, |a, p| a + p.busy_s),
        app_work_s: progs().fold(0.0, |a, p| a + p.work_s),
        app_passes: progs().map(|p| p.passes).sum(),
        programs_killed: progs().filter(|p| p.killed).count() as u64,
        overhead_pct: None,
        hook_bytes: bytes(sum_k(&|v| v.guest.stats.hook)),
        reported_bytes: bytes(sum_k(&|v| v.guest.stats.reported)),
        doo_rounds: w.vms.iter().map(|v| v.guest.stats.doo_rounds).sum(),
        cpu_s: w.vms.iter().fold(0.0, |a, v| a + v.cpu_s),
        stalled_s: w.vms.iter().fold(0.0, |a, v| a + v.stalled_s),
        host_swap_out_bytes: bytes(w.totals.host_swap_out),
        host_swap_in_bytes: bytes(w.totals.host_swap_in),
        avg_migration_s: (!times.is_empty())
            .then(|| times.iter().sum::<f64>() / times.len() as f64),
        fastest_migration_s: times.iter().copied().reduce(f64::min),
        migrations: w.records.clone(),
        vms: w
            .vms
            .iter()
            .map(|v| {
                let t: Vec<f64> = w
                    .records
                    .iter()
                    .filter(|r| r.vm == v.name)
                    .map(|r| r.duration_s)
                    .collect();
                VmSummary {
                    name: v.name.clone(),
                    oom_kills: v.oom_kills,
                    failed_allocations: v.failed_allocations,
                    swap_out_bytes: bytes(v.guest.stats.swap_out),
                    avg_guest_bytes: (v.size_kib_s / dur * 1024.0) as u64,
                    min_guest_bytes: bytes(v.min_size),
                    app_runtime_s: v.programs.iter().fold(0.0, |a, p| a + p.busy_s),
                    app_work_s: v.programs.iter().fold(0.0, |a, p| a + p.work_s),
                    hook_bytes: bytes(v.guest.stats.hook),
                    avg_migration_s: (!t.is_empty())
                        .then(|| t.iter().sum::<f64>() / t.len() as f64),
                    file_read_bytes: (v.programs.iter().fold(0.0, |a, p| a + p.file_read_kib)
                        * 1024.0) as u64,
                    file_hit_bytes: (v.programs.iter().fold(0.0, |a, p| a + p.file_hit_kib)
                        * 1024.0) as u64,
                    file_read_s: v.programs.iter().fold(0.0, |a, p| a + p.file_read_s),
                }
            })
            .collect(),
        static_avg_migration_s: None,
        static_fastest_migration_s: None,
        migration_speedup_pct: None,
        fastest_speedup_pct: None,
    }
}

/// The summary for a person.
pub fn text(s: &Summary) -> String {
    let mut o = String::new();
    let gb = |b: u64| b as f64 / GIB;
    let _ = writeln!(
        o,
        "{} ({}) under {}, seed {}, {:.0} s simulated",
        s.scenario, s.experiment, s.policy, s.seed, s.duration_s
    );
    let _ = writeln!(
        o,
        "  OOM kills {}, failed allocations {}, swap out {:.2} GiB",
        s.oom_kills,
        s.failed_allocations,
        gb(s.swap_out_bytes)
    );
    let _ = writeln!(
        o,
        "  memory: avg {:.1} GiB, peak {:.1} GiB (host); guest avg {:.1} GiB, min {:.2} GiB",
        gb(s.avg_mem_bytes),
        gb(s.peak_mem_bytes),
        gb(s.avg_guest_bytes),
        gb(s.min_guest_bytes)
    );
    let _ = writeln!(
        o,
        "  programs: {:.0} s busy for {:.0} s of work, {} passes, {} killed",
        s.app_runtime_s, s.app_work_s, s.app_passes, s.programs_killed
    );
    if let Some(p) = s.overhead_pct {
        let _ = writeln!(o, "  overhead vs static: {p:+.1} %");
    }
    let _ = writeln!(
        o,
        "  hook served {:.1} GiB, reported {:.1} GiB, CPU {:.1} s, writes waited {:.0} s",
        gb(s.hook_bytes),
        gb(s.reported_bytes),
        s.cpu_s,
        s.stalled_s
    );
    if let Some(a) = s.avg_migration_s {
        let _ = write!(
            o,
            "  {} migrations: avg {:.1} s, fastest {:.1} s",
            s.migrations.len(),
            a,
            s.fastest_migration_s.unwrap_or(0.0)
        );
        if let (Some(b), Some(sp)) = (s.static_avg_migration_s, s.migration_speedup_pct) {
            let _ = write!(o, " (static avg {b:.1} s: {sp:.1} % faster");
            if let Some(f) = s.fastest_speedup_pct {
                let _ = write!(o, ", fastest {f:.1} % faster");
            }
            o.push(')');
        }
        o.push('\n');
    }
    o
}

/// The series as CSV.
pub fn csv(rows: &[SeriesRow]) -> String {
    let mut o = String::from("t_s,vm,size_gib,target_gib,footprint_gib,anon_gib,cache_gib,free_gib,swapped_gib,migrating,available_gib\n");
    for r in rows {
        let _ = writeln!(
            o,
            "{:.1},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{:.3}",
            r.t_s,
            r.vm,
            r.size_gib,
            r.target_gib,
            r.footprint_gib,
            r.anon_gib,
            r.cache_gib,
            r.free_gib,
            r.swapped_gib,
            u8::from(r.migrating),
            r.available_gib
        );
    }
    o
}
