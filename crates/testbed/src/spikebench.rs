//! `autoballoon-spikebench`: how fast a spike gets its memory, each configuration side by
//! side in one run, against QEMU's free page reporting alone (the bar: it gives memory back
//! too, so the spike refaults it from the host) and no balloon (memory already backed: the
//! physical best).
//!
//! Each configuration has its own guest, booted together; the spikes run one guest at a
//! time (rotating the order per round), so the guests do not share the two cores while one
//! is measured. A round is `--cycles` spikes of one shape, `--gap-s` apart: the first is
//! the cold one (the guest settled, shrunk or drained), the others the steady state the
//! issue's table asks for. Per spike: `spike`'s own allocation time, the reaction time (from
//! the spike's start until QMP `actual` rose by 32 MiB; configurations that never move the
//! balloon have none) and whether every allocation succeeded; OOM kills are counted per
//! guest from its log. Writes `spikes.jsonl` (a record per spike) and, with `--results`,
//! `SPIKES.md` and `spikes.json` there.

use crate::bench::fleet::{Fleet, Images};
use crate::bench::model::{Config, QemuLine};
use crate::bench::stats::median;
use crate::guest::{balloon_to, SpikeRun};
use crate::{step, wait_vm_settled, GuestImage};
use autoballoon::config::ShrinkSetting;
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct SpikeArgs {
    /// The project's guest image (stock kernel); default: $AUTOBALLOON_IMAGE.
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// The patched kernel's guest image; without it the patched configurations are left out.
    #[arg(long)]
    pub patched_image: Option<PathBuf>,
    /// QEMU binary or wrapper [default: $AUTOBALLOON_QEMU, else qemu-system-x86_64].
    #[arg(long)]
    pub qemu: Option<PathBuf>,
    /// Configurations, comma-separated [default: none,fpr,ab-stock, and ab-patched,
    /// ab-patched+fpr with --patched-image].
    #[arg(long, value_delimiter = ',')]
    pub configs: Vec<Config>,
    /// Spike shapes, THREADSxMIB (MiB per thread), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "3x400,12x100", value_parser = Shape::parse)]
    pub shapes: Vec<Shape>,
    /// Spikes per round; the first is the cold one.
    #[arg(long, default_value_t = 4)]
    pub cycles: u32,
    /// Seconds between the end of one spike and the start of the next.
    #[arg(long, default_value_t = 8)]
    pub gap_s: u64,
    /// Seconds each spike holds its memory before freeing it.
    #[arg(long, default_value_t = 1)]
    pub hold_s: u64,
    /// Rounds per shape (the configurations' order rotates per round).
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Guest vCPUs.
    #[arg(long, default_value_t = 1)]
    pub cpus: u32,
    #[arg(long, default_value_t = 2048)]
    pub memory_mib: u64,
    /// Diagnostic: before each spike, configurations without an agent are ballooned to
    /// this many MiB and back to their full size over QMP (waiting for both), so the spike
    /// touches memory the balloon gave back and QEMU discarded page by page; 0: off.
    #[arg(long, default_value_t = 0)]
    pub balloon_first_mib: u64,
    /// Sockets, logs and `spikes.jsonl`.
    #[arg(long, default_value = "run/bench/spikes")]
    pub out: PathBuf,
    /// Where SPIKES.md and spikes.json go; none: only the table on stdout.
    #[arg(long)]
    pub results: Option<PathBuf>,
}

/// A spike's shape: threads, each mapping and touching `mib` MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub threads: u32,
    pub mib: u64,
}

impl Shape {
    pub fn parse(s: &str) -> Result<Shape, String> {
        let (t, m) = s.split_once('x').ok_or_else(|| format!("{s:?}: want THREADSxMIB, e.g. 3x400"))?;
        let threads = t.parse().map_err(|_| format!("{s:?}: bad thread count"))?;
        let mib = m.parse().map_err(|_| format!("{s:?}: bad MiB per thread"))?;
        if threads == 0 || mib == 0 {
            return Err(format!("{s:?}: threads and MiB must be at least 1"));
        }
        Ok(Shape { threads, mib })
    }

    pub fn key(&self) -> String {
        format!("{}x{}", self.threads, self.mib)
    }
}

/// One spike of one configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpikeRecord {
    pub config: Config,
    pub shape: Shape,
    pub round: u32,
    /// 0: the cold spike of the round.
    pub cycle: u32,
    pub cpus: u32,
    /// `spike`'s allocation time (all threads mapped and touched), seconds.
    pub alloc_s: Option<f64>,
    /// From the spike's start until QMP `actual` rose by [`REACTED`], seconds.
    pub reaction_s: Option<f64>,
    pub completed: bool,
    /// QMP `actual` when the spike started and at its largest, MiB.
    pub start_mib: f64,
    pub peak_mib: f64,
    /// From the spike's start until `actual` had made 90 % of its way to the peak, seconds.
    #[serde(default)]
    pub grown_s: Option<f64>,
}

/// The growth that counts as a reaction.
const REACTED: Kib = Kib::from_mib_saturating(32);

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// One spike's run and what `actual` did meanwhile.
struct Watched {
    run: SpikeRun,
    reaction_s: Option<f64>,
    grown_s: Option<f64>,
    start_mib: f64,
    peak_mib: f64,
}

/// Runs one spike on `q`, sampling `actual` every 20 ms meanwhile.
fn one_spike(q: &crate::Qemu, ctl: &Qmp, shape: Shape, hold_s: u64) -> Result<Watched, String> {
    let stop = AtomicBool::new(false);
    let start = ctl.query_balloon().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let (run, sizes) = std::thread::scope(|sc| {
        let sampler = sc.spawn(|| {
            let mut v = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(b) = ctl.query_balloon() {
                    v.push((t0.elapsed().as_secs_f64(), b));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            v
        });
        let cmd = format!("spike {} {} {hold_s} 0 1", shape.threads, shape.mib);
        let run = q.console.run(&cmd, Duration::from_secs(300)).map(|o| SpikeRun::parse(&o.text, o.status));
        stop.store(true, Ordering::Relaxed);
        (run, sampler.join().unwrap_or_default())
    });
    let run = run.map_err(|e| format!("spike: {e}"))?;
    let reacted = sizes.iter().find(|(_, b)| *b >= start.saturating_add(REACTED.to_bytes_saturating().0)).map(|(t, _)| *t);
    let peak = sizes.iter().map(|(_, b)| *b).max().unwrap_or(start).max(start);
    let nine_tenths = start + (peak - start) / 10 * 9;
    let grown_s = (peak >= start.saturating_add(REACTED.to_bytes_saturating().0)).then(|| sizes.iter().find(|(_, b)| *b >= nine_tenths).map(|(t, _)| *t)).flatten();
    Ok(Watched { run, reaction_s: reacted, grown_s, start_mib: mib(start), peak_mib: mib(peak) })
}

/// Brings `c`'s guest to its cold state before a round: the controller's guests settled,
/// the others at their full size (deflate-on-oom's and FPR's guests are never ballooned).
fn settle(fleet: &Fleet, c: Config, ctl: &Qmp, memory: Kib) -> Result<(), String> {
    if let Some(vm) = fleet.vm(c) {
        if let Err(e) = wait_vm_settled(vm, Duration::from_secs(90)) {
            println!("[spikes]   note: {}: {e}; measuring anyway", c.key());
        }
    } else if !c.ballooning() {
        step("balloon", balloon_to(ctl, memory, Duration::from_secs(60)))?;
    } else if crate::wait_settled(Duration::from_secs(90), || Kib(ctl.query_balloon().unwrap_or(0) / 1024)).is_none() {
        println!("[spikes]   note: {}: did not settle in 90 s; measuring anyway", c.key());
    }
    Ok(())
}

pub fn run(a: SpikeArgs) -> Result<(), String> {
    let stock = match &a.image {
        Some(p) => GuestImage::at(p),
        None => GuestImage::from_env(),
    }
    .map_err(|e| e.to_string())?;
    let patched = a.patched_image.as_deref().map(GuestImage::at).transpose().map_err(|e| e.to_string())?;
    let images = Images { stock, patched };
    let configs = if a.configs.is_empty() {
        let mut v = vec![Config::NoBalloon, Config::Fpr, Config::AbStock];
        if images.patched.is_some() {
            v.extend([Config::AbPatched, Config::AbPatchedFpr]);
        }
        v
    } else {
        a.configs.clone()
    };
    if !configs.contains(&Config::Fpr) {
        return Err("--configs must include fpr: every figure is a ratio to it".into());
    }
    let qemu = a.qemu.clone().unwrap_or_else(crate::qemu_binary);
    let memory = Kib::from_mib_saturating(a.memory_mib);
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let jsonl = a.out.join("spikes.jsonl");
    let mut sink = std::fs::File::create(&jsonl).map_err(|e| format!("{}: {e}", jsonl.display()))?;
    println!("[spikes] booting {} guests ({} MiB, {} vCPU) on {}", configs.len(), a.memory_mib, a.cpus, qemu.display());
    let mut fleet = Fleet::boot_cpus(QemuLine::System, &qemu, &configs, &images, memory, &a.out, ShrinkSetting::Auto, a.cpus)?;
    let version = fleet.version.clone();
    let result = measure(&a, &mut fleet, &configs, memory, &mut sink);
    fleet.shutdown();
    let records = result?;
    let report = report(&a, &version, &records);
    println!("{report}");
    if let Some(dir) = &a.results {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join("SPIKES.md"), &report).map_err(|e| e.to_string())?;
        let json = serde_json::to_string_pretty(&records).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("spikes.json"), json + "\n").map_err(|e| e.to_string())?;
        println!("[spikes] wrote {}/SPIKES.md and spikes.json", dir.display());
    }
    Ok(())
}

fn measure(a: &SpikeArgs, fleet: &mut Fleet, configs: &[Config], memory: Kib, sink: &mut std::fs::File) -> Result<Vec<SpikeRecord>, String> {
    let mut records = Vec::new();
    let total = a.shapes.len() as u32 * a.rounds * configs.len() as u32;
    let mut done = 0;
    let began = Instant::now();
    for &shape in &a.shapes {
        for round in 0..a.rounds {
            for i in 0..configs.len() {
                let c = configs[(i + round as usize) % configs.len()];
                done += 1;
                println!("[spikes] {done}/{total} ({:.0} s): {} spikes of {} on {} (round {})", began.elapsed().as_secs_f64(), a.cycles, shape.key(), c.key(), round + 1);
                let g = fleet.guest(c);
                let ctl = step("QMP", Qmp::connect_with_retry(&g.q.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
                settle(fleet, c, &ctl, memory)?;
                let g = fleet.guest(c);
                for cycle in 0..a.cycles {
                    if cycle > 0 {
                        std::thread::sleep(Duration::from_secs(a.gap_s));
                    }
                    if a.balloon_first_mib > 0 && !c.ballooning() {
                        step("balloon", balloon_to(&ctl, Kib::from_mib_saturating(a.balloon_first_mib), Duration::from_secs(60)))?;
                        step("balloon", balloon_to(&ctl, memory, Duration::from_secs(60)))?;
                    }
                    let w = one_spike(&g.q, &ctl, shape, a.hold_s)?;
                    let r = SpikeRecord { config: c, shape, round, cycle, cpus: a.cpus, alloc_s: w.run.alloc_s, reaction_s: w.reaction_s, completed: w.run.completed, start_mib: w.start_mib, peak_mib: w.peak_mib, grown_s: w.grown_s };
                    let (start_mib, peak_mib) = (r.start_mib, r.peak_mib);
                    println!(
                        "[spikes]   spike {}: {} s, reaction {}, grown {}, {:.0} -> {:.0} MiB{}",
                        cycle + 1,
                        r.alloc_s.map_or("-".into(), |s| format!("{s:.2}")),
                        r.reaction_s.map_or("-".into(), |s| format!("{s:.2} s")),
                        r.grown_s.map_or("-".into(), |s| format!("{s:.2} s")),
                        start_mib,
                        peak_mib,
                        if r.completed { "" } else { ", FAILED" }
                    );
                    writeln!(sink, "{}", serde_json::to_string(&r).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
                    records.push(r);
                }
            }
        }
    }
    // OOM kills over the whole run, per guest (its console and dmesg).
    for g in &fleet.guests {
        let kills = crate::guest::oom_kills(&g.q);
        if kills > 0 {
            println!("[spikes] {}: {kills} OOM kill(s)", g.config.key());
        }
    }
    Ok(records)
}

fn med(v: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = v.collect();
    if v.is_empty() {
        None
    } else {
        Some(median(&v))
    }
}

/// The report: per shape, each configuration's cold and steady-state spike time as a ratio
/// to FPR alone and to no balloon, and its median reaction time. Pure.
pub fn report(a: &SpikeArgs, version: &str, records: &[SpikeRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Spikes: how fast a spike gets its memory\n");
    let _ = writeln!(
        s,
        "Written by `autoballoon-spikebench` (QEMU {version}, TCG single-threaded, {} MiB guests, {} vCPU): per shape and round {} spikes {} s apart, each holding its memory {} s; the first spike is the cold one (the guest settled), the others the steady state. `spike` s: its own allocation time (every thread mapped and touched its memory). Reaction: from the spike's start until QMP `actual` rose by 32 MiB. Ratios are of medians, to FPR alone and to no balloon of the same run.\n",
        a.memory_mib, a.cpus, a.cycles, a.gap_s, a.hold_s
    );
    let mut shapes: Vec<Shape> = Vec::new();
    let mut configs: Vec<Config> = Vec::new();
    for r in records {
        if !shapes.contains(&r.shape) {
            shapes.push(r.shape);
        }
        if !configs.contains(&r.config) {
            configs.push(r.config);
        }
    }
    configs.sort();
    for shape in shapes {
        let pick = |c: Config, steady: bool| records.iter().filter(move |r| r.config == c && r.shape == shape && (r.cycle > 0) == steady);
        let steady = |c: Config| med(pick(c, true).filter_map(|r| r.alloc_s));
        let (fpr, none) = (steady(Config::Fpr), steady(Config::NoBalloon));
        let ratio = |x: Option<f64>, bar: Option<f64>| match (x, bar) {
            (Some(x), Some(b)) if b > 0.0 => format!("{:.2}×", x / b),
            _ => "–".into(),
        };
        let _ = writeln!(s, "## {} threads × {} MiB\n", shape.threads, shape.mib);
        let _ = writeln!(s, "| configuration | cold spike s | steady s (median) | × FPR | × no balloon | reaction s (median, steady) | failed |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for &c in &configs {
            let cold = med(pick(c, false).filter_map(|r| r.alloc_s));
            let st = steady(c);
            let react = med(pick(c, true).filter_map(|r| r.reaction_s));
            let failed = records.iter().filter(|r| r.config == c && r.shape == shape && !r.completed).count();
            let f = |x: Option<f64>| x.map_or("–".into(), |v| format!("{v:.2}"));
            let _ = writeln!(s, "| {} | {} | {} | {} | {} | {} | {failed} |", c.label(), f(cold), f(st), ratio(st, fpr), ratio(st, none), f(react));
        }
        let _ = writeln!(s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse() {
        assert_eq!(Shape::parse("3x400"), Ok(Shape { threads: 3, mib: 400 }));
        assert!(Shape::parse("3").is_err());
        assert!(Shape::parse("0x400").is_err());
        assert!(Shape::parse("3xlots").is_err());
    }
}
