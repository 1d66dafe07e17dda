//! `autoballoon-densitybench`: how much host memory several guests take over a job
//! sequence whose memory comes and goes, each configuration in turn on the same host,
//! against QEMU's free page reporting (the bar: it gives free memory back too) and no
//! balloon (the job's runtime without any balloon).
//!
//! Per configuration: `--guests` guests booted together, each with its own disk; once they
//! settled, each runs [`JOBS`] (one after another, in the guest's shell), guest *i* starting
//! `i × --stagger-s` after the first, so their peaks overlap only in part. Every 0.5 s the
//! resident memory of all the guests' QEMU processes is summed: the mean and the peak of
//! that sum from the first job's start to the last job's end are the configuration's
//! footprint; per guest, the wall time of its sequence and its OOM kills. Writes
//! `density.jsonl` (a record per configuration) and, with `--results`, `DENSITY.md` and
//! `density.json` there.

use crate::bench::fleet::{policy_from_toml, spec, Images};
use crate::bench::model::Config;
use crate::bench::stats::median;
use crate::{rss_of, sparse_disk, step, wait_settled, Qemu, RssSample, RssSampler};
use autoballoon::config::{Config as CtlConfig, ControllerConfig, LogFormat, VmConfig};
use autoballoon::controller::Controller;
use autoballoon::log::Logger;
use autoballoon_core::Kib;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The job sequence, run in each guest's shell: (name, command). Memory that comes and
/// goes: arrays allocated and freed in phases, an in-memory sort, a file set (the guest's
/// disk, held open so its page cache outlives each reader) read three times, a large
/// buffer dirtied and freed, and idle gaps between them.
pub const JOBS: [(&str, &str); 7] = [
    ("arrays: 2 × 300 MiB, held 5 s", "spike 2 300 5 0 1"),
    ("idle", "sleep 10"),
    ("sort of 1 M lines", "seq 1 1000000 | sort -r | tail -1"),
    ("read a 256 MiB file set 3 times", "for i in 1 2 3; do dd if=/dev/vda of=/dev/null bs=1M count=256 2>/dev/null; done"),
    ("idle", "sleep 10"),
    ("dirty 800 MiB and free it", "fill 800"),
    ("idle", "sleep 10"),
];

/// Run in each guest once its jobs ended: its memory, its reclaim and balloon counters and
/// the end of its agent's log.
const END_STATE: &str = "cat /proc/meminfo /proc/buddyinfo /proc/pagetypeinfo; grep -E '^(workingset_refault_file|pgscan|pgsteal|balloon)' /proc/vmstat; tail -n 300 /run/autoballoon-guest.log 2>/dev/null; true";

/// Loads the disk's driver and holds the device open (its last close drops its cache).
const SETUP: &str = "[ -e /sys/block/vda ] || insmod /lib/modules/autoballoon/extra/virtio_blk.ko; [ -e /sys/block/vda ]";

#[derive(clap::Args, Debug)]
pub struct DensityArgs {
    /// The project's guest image (stock kernel); default: $AUTOBALLOON_IMAGE.
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// The patched kernel's guest image (`kernel/scripts/images.sh`, line 1); without it
    /// the patched configurations are left out.
    #[arg(long)]
    pub patched_image: Option<PathBuf>,
    /// The QEMU binary or wrapper [default: $AUTOBALLOON_QEMU, else qemu-system-x86_64].
    #[arg(long)]
    pub qemu: Option<PathBuf>,
    /// Configurations, one after another, comma-separated [default: none,fpr,fpr+hint,
    /// ab-stock, and with --patched-image none-patched,fpr-patched,ab-patched+fpr]. Each
    /// row's memory is compared with FPR on its own kernel, its runtime with no balloon on
    /// its own kernel.
    #[arg(long, value_delimiter = ',')]
    pub configs: Vec<Config>,
    /// Guests per configuration.
    #[arg(long, default_value_t = 4)]
    pub guests: u32,
    #[arg(long, default_value_t = 2048)]
    pub memory_mib: u64,
    /// Seconds between one guest's start of the job sequence and the next's.
    #[arg(long, default_value_t = 20)]
    pub stagger_s: u64,
    /// Sockets, logs and `density.jsonl`.
    #[arg(long, default_value = "run/density")]
    pub out: PathBuf,
    /// Where DENSITY.md and density.json go; none: only the table on stdout.
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Policy keys for the controlled configurations instead of the defaults, as TOML of
    /// the `[defaults]` table (e.g. `'spike_hold_s = 600'`); for experiments.
    #[arg(long)]
    pub policy: Option<String>,
    /// Arguments added to the guest agent's command line in every configuration with an
    /// agent (the kernel command line's `autoballoon.agent_extra`), comma-separated (e.g.
    /// `--cache-trim-percent,0`); for experiments.
    #[arg(long, allow_hyphen_values = true)]
    pub agent_extra: Option<String>,
}

/// One configuration's run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DensityRecord {
    pub qemu_version: String,
    pub config: Config,
    pub guests: u32,
    /// The sum of the guests' QEMU RSS from the first job's start to the last one's end.
    pub mean_mib: f64,
    pub peak_mib: f64,
    /// The same sum just before the jobs started (the guests settled).
    pub settled_mib: f64,
    /// Each guest's wall time for the whole sequence, s (`None`: it did not complete).
    pub runtimes_s: Vec<Option<f64>>,
    pub oom_kills: usize,
    /// The same over the guests' RAM blocks alone (without QEMU's own memory and TCG's
    /// code buffer, which a guest re-reading its binaries grows and KVM does not have).
    #[serde(default)]
    pub ram_mean_mib: Option<f64>,
    #[serde(default)]
    pub ram_peak_mib: Option<f64>,
    /// The policy keys set instead of the defaults (`--policy`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// What `--agent-extra` added to the agent's arguments, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_extra: Option<String>,
}

impl DensityRecord {
    fn median_runtime(&self) -> Option<f64> {
        let v: Vec<f64> = self.runtimes_s.iter().flatten().copied().collect();
        (v.len() == self.runtimes_s.len() && !v.is_empty()).then(|| median(&v))
    }
}

fn mib(k: Kib) -> f64 {
    k.mib_f64()
}

/// One configuration: boot, settle, run the staggered jobs, measure.
fn one(a: &DensityArgs, images: &Images, qemu: &std::path::Path, c: Config) -> Result<DensityRecord, String> {
    let image = images.of(c.kernel())?;
    let memory = Kib::from_mib_saturating(a.memory_mib);
    let out = a.out.join(c.key());
    // `--agent-extra` reaches only the configurations that run an agent.
    let agent_extra = a.agent_extra.clone().filter(|_| c.ballooning());
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut guests = Vec::new();
    for i in 0..a.guests {
        let name = format!("{}-{i}", c.key());
        let disk = sparse_disk(&out.join(format!("{name}.raw")), Kib::from_mib_saturating(256))?;
        let mut vm = crate::VmSpec { disk: Some(disk), ..spec(c, &name, memory, qemu) };
        if let Some(extra) = &agent_extra {
            vm.append = format!("{} autoballoon.agent_extra={extra}", vm.append).trim().to_string();
        }
        guests.push(step(&format!("starting {name}"), Qemu::start(image, vm, &out))?);
    }
    for q in &guests {
        step("booting", q.wait_booted(Duration::from_secs(300)))?;
        let o = step("disk", q.console.run(SETUP, Duration::from_secs(60)))?;
        if o.status != 0 {
            return Err(format!("{}: no /dev/vda: {}", c.key(), o.text));
        }
        step("disk", q.console.spawn("sleep 100000 </dev/vda >/dev/null 2>&1"))?;
    }
    let version = step("QMP", autoballoon_qmp::Qmp::connect_with_retry(&guests[0].qmp_ctl, Instant::now() + Duration::from_secs(10)))?.version().to_string();
    let ctl = if c.controlled() {
        let vms = guests.iter().enumerate().map(|(i, q)| VmConfig { agent: Some(q.agent.clone()), ..VmConfig::new(&format!("{}-{i}", c.key()), q.qmp.clone()) }).collect();
        let defaults = a.policy.as_deref().map(policy_from_toml).transpose()?.unwrap_or_default();
        let config = CtlConfig { controller: ControllerConfig::default(), defaults, vms, ..Default::default() };
        config.validate().map_err(|e| e.to_string())?;
        let logger = Logger::new(LogFormat::Text, false).to_file(&out.join("controller.log")).map_err(|e| e.to_string())?;
        Some(Controller::start(&config, logger))
    } else {
        None
    };
    // Settled: the host's view of the guests stopped moving (the balloon shrank, FPR drained).
    let pids: Vec<u32> = guests.iter().map(Qemu::pid).collect();
    let total = || Kib(pids.iter().filter_map(|&p| rss_of(p)).map(|k| k.0).sum::<u64>() / 8192 * 8192);
    let settled = wait_settled(Duration::from_secs(120), total).unwrap_or_else(total);
    println!("[density]   {}: {} guests settled at {:.0} MiB of host memory; jobs start", c.key(), a.guests, mib(settled));

    // Started as the jobs start and finished as the last one ends: its samples are the window.
    let sampler = RssSampler::start_with_ram(pids, Some(memory));
    let stagger = Duration::from_secs(a.stagger_s);
    let out_dir = &out;
    let runtimes: Vec<Option<f64>> = std::thread::scope(|sc| {
        let hs: Vec<_> = guests
            .iter()
            .enumerate()
            .map(|(i, q)| {
                sc.spawn(move || {
                    std::thread::sleep(stagger * i as u32);
                    let began = Instant::now();
                    for (name, cmd) in JOBS {
                        match q.console.run(cmd, Duration::from_secs(900)) {
                            Ok(o) if o.status == 0 => {}
                            Ok(o) => {
                                println!("[density]   guest {i}: {name}: exit {}: {}", o.status, o.text.lines().last().unwrap_or(""));
                                return None;
                            }
                            Err(e) => {
                                println!("[density]   guest {i}: {name}: {e}");
                                return None;
                            }
                        }
                    }
                    let took = began.elapsed().as_secs_f64();
                    // What the guest holds once its jobs ended, and what its agent did: for
                    // reading a run afterwards (`<config>/<guest>.end.txt`).
                    let end = q.console.run(END_STATE, Duration::from_secs(60)).map(|o| o.text).unwrap_or_else(|e| e.to_string());
                    let _ = std::fs::write(out_dir.join(format!("{}-{i}.end.txt", c.key())), end);
                    Some(took)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(None)).collect()
    });
    let samples = sampler.finish_each();
    write_rss_csv(&out.join("rss.csv"), &samples)?;
    let window: Vec<f64> = samples.iter().map(RssSample::total_mib).collect();
    let ram: Vec<f64> = samples.iter().map(RssSample::ram_total_mib).collect();
    let ram_mean_mib = (!ram.is_empty()).then(|| ram.iter().sum::<f64>() / ram.len() as f64);
    let ram_peak_mib = (!ram.is_empty()).then(|| ram.iter().copied().fold(f64::NAN, f64::max));
    let mean_mib = if window.is_empty() { f64::NAN } else { window.iter().sum::<f64>() / window.len() as f64 };
    let peak_mib = window.iter().copied().fold(f64::NAN, f64::max);
    let oom_kills = guests.iter().map(crate::guest::oom_kills).sum();
    if let Some(ctl) = ctl {
        ctl.stop();
    }
    drop(guests);
    let policy = if c.controlled() { a.policy.clone() } else { None };
    Ok(DensityRecord { qemu_version: version, config: c, guests: a.guests, mean_mib, peak_mib, settled_mib: mib(settled), runtimes_s: runtimes, oom_kills, ram_mean_mib, ram_peak_mib, policy, agent_extra })
}

/// Each guest's QEMU RSS over the window, a row per 0.5 s sample: `t_s,guest0,…,total`,
/// then each guest's RAM RSS `ram0,…,ram_total`.
fn write_rss_csv(path: &std::path::Path, samples: &[RssSample]) -> Result<(), String> {
    let n = samples.first().map_or(0, |s| s.each_mib.len());
    let mut csv = String::from("t_s");
    for i in 0..n {
        let _ = write!(csv, ",guest{i}");
    }
    csv.push_str(",total");
    for i in 0..n {
        let _ = write!(csv, ",ram{i}");
    }
    csv.push_str(",ram_total\n");
    let cell = |v: &Option<f64>| v.map_or(String::new(), |m| format!("{m:.0}"));
    for s in samples {
        let _ = write!(csv, "{:.1}", s.t_s);
        for v in &s.each_mib {
            let _ = write!(csv, ",{}", cell(v));
        }
        let _ = write!(csv, ",{:.0}", s.total_mib());
        for v in &s.ram_mib {
            let _ = write!(csv, ",{}", cell(v));
        }
        let _ = writeln!(csv, ",{:.0}", s.ram_total_mib());
    }
    std::fs::write(path, csv).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(a: DensityArgs) -> Result<(), String> {
    let images = Images::load(a.image.as_deref(), a.patched_image.as_deref())?;
    let configs = if a.configs.is_empty() {
        let mut v = vec![Config::NoBalloon, Config::Fpr, Config::FprHint, Config::AbStock];
        if images.patched.is_some() {
            v.extend([Config::NoBalloonPatched, Config::FprPatched, Config::AbPatchedFpr]);
        }
        v
    } else {
        a.configs.clone()
    };
    let qemu = a.qemu.clone().unwrap_or_else(crate::qemu_binary);
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let jsonl = a.out.join("density.jsonl");
    let mut records = Vec::new();
    let began = Instant::now();
    for (n, &c) in configs.iter().enumerate() {
        println!("[density] {}/{} ({:.0} s): {} guests of {}, jobs {} s apart", n + 1, configs.len(), began.elapsed().as_secs_f64(), a.guests, c.key(), a.stagger_s);
        let r = one(&a, &images, &qemu, c)?;
        println!(
            "[density]   {}: mean {:.0} MiB, peak {:.0} MiB, job runtime (median) {}, OOM kills {}",
            c.key(),
            r.mean_mib,
            r.peak_mib,
            r.median_runtime().map_or("– (a guest did not complete)".into(), |t| format!("{t:.1} s")),
            r.oom_kills
        );
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&jsonl).map_err(|e| format!("{}: {e}", jsonl.display()))?;
        writeln!(f, "{}", serde_json::to_string(&r).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        records.push(r);
    }
    let md = report(&a, &records);
    println!("\n{md}");
    if let Some(dir) = &a.results {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join("DENSITY.md"), &md).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("density.json"), serde_json::to_string_pretty(&records).map_err(|e| e.to_string())? + "\n").map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The table: each configuration's mean and peak host memory against FPR's, its job
/// runtime against no balloon's, its OOM kills. Pure.
pub fn report(a: &DensityArgs, records: &[DensityRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Density: host memory of {} guests over a job sequence\n", a.guests);
    let jobs: Vec<String> = JOBS.iter().map(|(n, _)| n.to_string()).collect();
    let _ = writeln!(
        s,
        "Written by `autoballoon-densitybench`: {} guests of {} MiB (1 vCPU, TCG single-threaded) per configuration, one configuration after another; each guest runs the sequence {} once, guest i starting {} s after guest 0. Host memory: the sum of the guests' QEMU RSS sampled every 0.5 s from the first start to the last end; guest RAM: the same over the guests' RAM blocks alone (without QEMU's own memory and TCG's code buffer, which KVM does not have). Runtime: each guest's wall time for the whole sequence (median over the guests). Ratios are to free page reporting alone (memory) and to no balloon (runtime) of the same run, on the row's own kernel where the run has that kernel's bar (FPR and no balloon on the patched kernel for the patched rows). The guest image has no xz; the sort is busybox's.\n",
        a.guests, a.memory_mib, jobs.join(" → "), a.stagger_s
    );
    let get = |c: Config| records.iter().find(|r| r.config == c);
    // Each row against the bars of its own kernel, where this run has them.
    let bar = |r: &DensityRecord, stock: Config, patched: Config| r.config.bar_of(stock, patched, get);
    let ratio = |x: f64, bar: Option<f64>| match bar {
        Some(b) if b > 0.0 && !x.is_nan() => format!("{:.2}×", x / b),
        _ => "–".into(),
    };
    if let Some(v) = records.first().map(|r| r.qemu_version.as_str()) {
        let _ = writeln!(s, "QEMU {v}.\n");
    }
    let _ = writeln!(s, "| configuration | settled MiB | mean MiB | × FPR | peak MiB | × FPR | runtime s (median) | × no balloon | completed | OOM kills | guest RAM mean MiB | × FPR | guest RAM peak MiB | × FPR |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mib_or_dash = |v: Option<f64>| v.map_or("–".into(), |m| format!("{m:.0}"));
    let ratio_of = |v: Option<f64>, bar: Option<f64>| v.map_or("–".into(), |x| ratio(x, bar));
    for r in records {
        let (fpr, none) = (bar(r, Config::Fpr, Config::FprPatched), bar(r, Config::NoBalloon, Config::NoBalloonPatched));
        let rt = r.median_runtime();
        let done = r.runtimes_s.iter().filter(|t| t.is_some()).count();
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | {} | {:.0} | {} | {} | {} | {done}/{} | {} | {} | {} | {} | {} |",
            r.policy.iter().chain(&r.agent_extra).fold(r.config.label().to_string(), |l, x| format!("{l} (`{x}`)")),
            r.settled_mib,
            r.mean_mib,
            ratio(r.mean_mib, fpr.map(|f| f.mean_mib)),
            r.peak_mib,
            ratio(r.peak_mib, fpr.map(|f| f.peak_mib)),
            rt.map_or("–".into(), |t| format!("{t:.1}")),
            rt.map_or("–".into(), |t| ratio(t, none.and_then(DensityRecord::median_runtime))),
            r.runtimes_s.len(),
            r.oom_kills,
            mib_or_dash(r.ram_mean_mib),
            ratio_of(r.ram_mean_mib, fpr.and_then(|f| f.ram_mean_mib)),
            mib_or_dash(r.ram_peak_mib),
            ratio_of(r.ram_peak_mib, fpr.and_then(|f| f.ram_peak_mib)),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(c: Config, mean: f64, peak: f64, rt: Option<f64>) -> DensityRecord {
        DensityRecord { qemu_version: "10.0.2".into(), config: c, guests: 2, mean_mib: mean, peak_mib: peak, settled_mib: 500.0, runtimes_s: vec![rt, Some(100.0)], oom_kills: 0, ram_mean_mib: Some(mean / 2.0), ram_peak_mib: None, policy: None, agent_extra: None }
    }

    #[test]
    fn the_table_has_ratios_to_fpr_and_to_no_balloon() {
        let a = DensityArgs { image: None, patched_image: None, qemu: None, configs: vec![], guests: 2, memory_mib: 2048, stagger_s: 20, out: "x".into(), results: None, policy: None, agent_extra: None };
        let rs = [rec(Config::NoBalloon, 4000.0, 4100.0, Some(100.0)), rec(Config::Fpr, 2000.0, 3000.0, Some(110.0)), rec(Config::AbStock, 1400.0, 2400.0, None)];
        let md = report(&a, &rs);
        assert!(md.contains("| 4000 | 2.00× | 4100 | 1.37× | 100.0 | 1.00× | 2/2 | 0 | 2000 | 2.00× | – | – |"), "{md}");
        assert!(md.contains("| 1400 | 0.70× | 2400 | 0.80× | – | – | 1/2 | 0 |"), "a guest that did not complete has no runtime: {md}");
        assert!(md.contains("arrays: 2 × 300 MiB, held 5 s → idle → sort"), "{md}");
    }

    #[test]
    fn patched_rows_are_compared_with_fpr_on_the_patched_kernel() {
        let a = DensityArgs { image: None, patched_image: None, qemu: None, configs: vec![], guests: 2, memory_mib: 2048, stagger_s: 20, out: "x".into(), results: None, policy: None, agent_extra: None };
        let rs = [rec(Config::Fpr, 2000.0, 3000.0, Some(110.0)), rec(Config::FprPatched, 1000.0, 2000.0, Some(100.0)), rec(Config::AbPatchedFpr, 700.0, 1000.0, Some(100.0))];
        let md = report(&a, &rs);
        assert!(md.contains("| 700 | 0.70× | 1000 | 0.50× |"), "against fpr-patched, not fpr: {md}");
        // Without the patched kernel's bar, the stock one.
        let md = report(&a, &[rs[0].clone(), rs[2].clone()]);
        assert!(md.contains("| 700 | 0.35× | 1000 | 0.33× |"), "{md}");
    }
}
