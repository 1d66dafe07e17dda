//! A1, the KVM automatic-ballooning seed's test (Capitulino, KVM Forum 2013): guests that
//! together overcommit a host with swap, a throughput workload in each, without ballooning
//! (*vanilla*) and with the daemon's `balancer = "pressure"` (host PSI inflates the guests
//! in steps, the guest's own pressure deflates them; between, every guest has its swap-free
//! want). The seed, 10 runs: host pages swapped in −9.6 %, swapped out −6.5 %, SPECjbb
//! throughput +1.23 %, run time equal.
//!
//! Here: [`Setup::guests`] guests of [`Setup::guest_mib`] in one memory cgroup
//! ([`HostLimit`], cgroup v1 `memory.limit_in_bytes` on this hybrid host, a cgroup v2 group
//! beside it whose `memory.pressure` is the daemon's `pressure_file`) limited to
//! [`Setup::limit_mib`], with a swap file of [`Setup::swap_mib`] (the host has no swap of
//! its own). Each guest runs, all at once, `blocks` times: `fill F` (dirty F MiB once and
//! free it: memory the guest used and gave back, which the host keeps or swaps unless a
//! balloon takes it), then `jobs` memory-bound jobs `work mem M P R`. Throughput of a guest
//! = the work it completed (F MiB per fill, M × (P + 1) MiB per job) ÷ its sequence's wall
//! time; the host's throughput is the sum over the guests. A fill or job the guest's OOM
//! killer ends is work not done, counted as such (and the kills are reported).
//!
//! Host swap traffic: the cgroup v1 memory controller has no per-group swap-in/out counters,
//! so the measured numbers are the host's `/proc/vmstat` `pswpin`/`pswpout` over the run
//! (the whole machine: the swap file is the only swap while it runs, `swaps` records
//! `/proc/swaps`, but any other group at its own limit could use it) and, per group,
//! `memory.stat`'s `pgmajfault` (major faults of the QEMUs: every swap-in of guest memory
//! is one; a fault may read a readahead cluster) and `workingset_refault_anon` (swapped-out
//! anonymous pages faulted back soon), plus the group's peak `swap` use. Where the kernel
//! offers them (cgroup v2 memory.stat `pswpin`/`pswpout`), those are read as well.

use super::mixed::WorkLine;
use crate::fleet::{Fleet, Recorder};
use crate::hostlimit::HostLimit;
use crate::{GuestImage, VmSpec};
use autoballoon_core::Kib;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// With or without the balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No daemon: the guests keep their configured memory.
    Vanilla,
    /// The daemon with `balancer = "pressure"`, `pressure_file` = the group's PSI.
    Pressure,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Vanilla => "vanilla",
            Mode::Pressure => "pressure",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub guests: usize,
    pub guest_mib: u64,
    pub limit_mib: u64,
    pub swap_mib: u64,
    /// `blocks` × (`fill F`, then `jobs` × `work mem M P R`).
    pub blocks: u64,
    pub fill_mib: u64,
    pub jobs: u64,
    pub mem_mib: u64,
    pub passes: u64,
    pub rounds: u64,
    /// Runs of each mode, interleaved vanilla, pressure, pressure, vanilla, ...
    pub runs: usize,
}

impl Default for Setup {
    /// Three 768 MiB guests (2304 MiB) in 1536 MiB: guests that have dirtied 600 MiB each
    /// cannot all stay resident; the second fill touches the first one's pages again. `AUTOBALLOON_BENCH_A1_RUNS` sets the
    /// runs of each mode (2).
    fn default() -> Self {
        Setup {
            guests: 3,
            guest_mib: 768,
            limit_mib: 1536,
            swap_mib: 2048,
            blocks: 2,
            fill_mib: 600,
            jobs: 3,
            mem_mib: 224,
            passes: 4,
            rounds: 300,
            runs: std::env::var("AUTOBALLOON_BENCH_A1_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(2),
        }
    }
}

impl Setup {
    pub fn sequence(&self) -> String {
        let job = format!("work mem {} {} {}", self.mem_mib, self.passes, self.rounds);
        let block = std::iter::once(format!("fill {}", self.fill_mib)).chain((0..self.jobs).map(|_| job.clone())).collect::<Vec<_>>().join("; ");
        vec![block; self.blocks as usize].join("; ")
    }

    /// MiB of work in `fills` completed fills and `jobs` completed jobs.
    pub fn work_mib(&self, fills: u64, jobs: u64) -> f64 {
        (fills * self.fill_mib + jobs * self.mem_mib * (self.passes + 1)) as f64
    }

    /// The interleaved order of the runs.
    pub fn order(&self) -> Vec<Mode> {
        (0..self.runs).flat_map(|r| if r % 2 == 0 { [Mode::Vanilla, Mode::Pressure] } else { [Mode::Pressure, Mode::Vanilla] }).collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GuestA1 {
    pub name: String,
    pub runtime_s: f64,
    pub jobs_s: Vec<f64>,
    pub fills_done: u64,
    /// MiB of work completed (fills and jobs).
    pub work_mib: f64,
    pub throughput_mib_s: f64,
    pub oom_kills: usize,
    /// Smallest and largest size the daemon saw (pressure only).
    pub size_range_mib: Option<(u64, u64)>,
}

/// Counters over one run (deltas), and what the group held in swap at most.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Swap {
    /// The host's /proc/vmstat.
    pub pswpin: u64,
    pub pswpout: u64,
    /// The group's memory.stat.
    pub pgmajfault: u64,
    pub refault_anon: u64,
    /// cgroup v2 only: the group's own pswpin/pswpout.
    pub group_pswpin: Option<u64>,
    pub group_pswpout: Option<u64>,
    pub peak_swap_mib: u64,
    /// /proc/swaps during the run (the device lines).
    pub swaps: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunA1 {
    pub mode: Mode,
    pub run: usize,
    pub guests: Vec<GuestA1>,
    pub makespan_s: f64,
    pub swap: Swap,
    pub peak_group_mib: u64,
    /// The group's PSI some avg10 at its highest (sampled every 250 ms).
    pub peak_psi: f64,
    /// The guests' kernel (`uname -r` in the first guest).
    pub guest_kernel: String,
}

impl RunA1 {
    pub fn throughput(&self) -> f64 {
        self.guests.iter().map(|g| g.throughput_mib_s).sum()
    }
}

/// Means per mode and the ratios pressure ÷ vanilla: (swap-in, swap-out, throughput,
/// major faults, anon refaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub pswpin: (f64, f64),
    pub pswpout: (f64, f64),
    pub throughput: (f64, f64),
    pub pgmajfault: (f64, f64),
    pub refault_anon: (f64, f64),
}

impl Summary {
    pub fn of(runs: &[RunA1]) -> Summary {
        let mean = |m: Mode, f: &dyn Fn(&RunA1) -> f64| {
            let v: Vec<f64> = runs.iter().filter(|r| r.mode == m).map(f).collect();
            if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
        };
        let both = |f: &dyn Fn(&RunA1) -> f64| (mean(Mode::Vanilla, f), mean(Mode::Pressure, f));
        Summary {
            pswpin: both(&|r| r.swap.pswpin as f64),
            pswpout: both(&|r| r.swap.pswpout as f64),
            throughput: both(&RunA1::throughput),
            pgmajfault: both(&|r| r.swap.pgmajfault as f64),
            refault_anon: both(&|r| r.swap.refault_anon as f64),
        }
    }

    /// `(pressure − vanilla) / vanilla`, as the seed's "Difference %".
    pub fn change(pair: (f64, f64)) -> f64 {
        super::ratio(pair.1, pair.0) - 1.0
    }
}

fn host_vmstat() -> BTreeMap<String, u64> {
    parse_stat(&std::fs::read_to_string("/proc/vmstat").unwrap_or_default())
}

/// `key value` lines.
pub fn parse_stat(text: &str) -> BTreeMap<String, u64> {
    text.lines().filter_map(|l| {
        let mut w = l.split_whitespace();
        Some((w.next()?.to_string(), w.next()?.parse().ok()?))
    }).collect()
}

fn delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>, k: &str) -> u64 {
    b.get(k).copied().unwrap_or(0).saturating_sub(a.get(k).copied().unwrap_or(0))
}

/// The group's counter, hierarchical (`total_` on v1) where there is one.
fn group(s: &BTreeMap<String, u64>, k: &str) -> Option<u64> {
    s.get(&format!("total_{k}")).or_else(|| s.get(k)).copied()
}

/// Runs every mode in the interleaved order, in `dir`.
pub fn run(image: &GuestImage, dir: &Path, setup: &Setup) -> Result<Vec<RunA1>, String> {
    let mut runs = Vec::new();
    let mut seen = BTreeMap::new();
    for mode in setup.order() {
        let n = seen.entry(mode.label()).or_insert(0usize);
        let r = one(image, &dir.join(format!("{}-{n}", mode.label())), setup, mode, *n)?;
        eprintln!(
            "hostbench: a1: {} run {}: throughput {:.2} MiB/s, host pswpin {} pswpout {}, group pgmajfault {}, makespan {:.0} s",
            mode.label(), n, r.throughput(), r.swap.pswpin, r.swap.pswpout, r.swap.pgmajfault, r.makespan_s
        );
        *n += 1;
        runs.push(r);
    }
    Ok(runs)
}

fn one(image: &GuestImage, dir: &Path, setup: &Setup, mode: Mode, run: usize) -> Result<RunA1, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let limit = HostLimit::new("autoballoon-bench-host-a1", setup.limit_mib).and_then(|l| l.with_swap(dir, setup.swap_mib)).map_err(|e| format!("host limit: {e}"))?;
    let names: Vec<String> = (1..=setup.guests).map(|i| format!("vm{i}")).collect();
    let specs = names.iter().map(|n| VmSpec::new(n, Kib::from_mib_saturating(setup.guest_mib))).collect();
    let t = Instant::now();
    let mut fleet = Fleet::start(image, &dir.join("vms"), specs, limit)?;
    let guest_kernel = fleet.guests.first().and_then(|(_, q)| q.console.run("uname -r", Duration::from_secs(30)).ok()).map(|o| o.text.trim().to_string()).unwrap_or_default();
    eprintln!("hostbench: a1: {} run {run}: {} guests (kernel {guest_kernel}) booted in {:.0} s under {} MiB with {} MiB swap", mode.label(), setup.guests, t.elapsed().as_secs_f64(), setup.limit_mib, setup.swap_mib);
    let daemon = match mode {
        Mode::Vanilla => None,
        Mode::Pressure => Some(fleet.daemon(&format!("balancer = \"pressure\"\npressure_file = {:?}", fleet.limit.pressure_file().display().to_string()), "", |_| String::new())?),
    };
    // The recorder samples the group (use, PSI) in both modes; sizes only with a daemon.
    let status = daemon.as_ref().map(|d| d.status_socket.clone()).unwrap_or_else(|| dir.join("no-daemon.sock"));
    let rec = Recorder::start(&status, &fleet.limit);
    let (vm0, st0) = (host_vmstat(), parse_stat(&fleet.limit.memory_stat()));
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default().lines().skip(1).map(str::to_string).collect();
    let cmd = setup.sequence();
    let t0 = Instant::now();
    let (mut peak_swap, mut peak_group_mib, mut peak_psi) = (0u64, 0u64, 0f64);
    let results: Vec<Result<(String, f64), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = fleet
            .guests
            .iter()
            .map(|(n, q)| {
                let cmd = cmd.clone();
                s.spawn(move || {
                    let out = q.console.run(&cmd, Duration::from_secs(3600)).map_err(|e| format!("{n}: {cmd}: {e}"))?;
                    Ok((out.text, t0.elapsed().as_secs_f64()))
                })
            })
            .collect();
        let mut next = 15;
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(250));
            let st = parse_stat(&fleet.limit.memory_stat());
            peak_swap = peak_swap.max(group(&st, "swap").unwrap_or(0));
            peak_group_mib = peak_group_mib.max(fleet.limit.usage_mib().unwrap_or(0));
            peak_psi = peak_psi.max(fleet.limit.pressure_some_avg10().unwrap_or(0.0));
            if t0.elapsed().as_secs() >= next {
                next += 15;
                let sizes = rec.rows().last().map(|r| format!(", sizes {:?} MiB", r.sizes.values().collect::<Vec<_>>())).unwrap_or_default();
                eprintln!("hostbench: a1: {} {:>4} s, group {} MiB, swap {} MiB, PSI {:.1}{sizes}", mode.label(), t0.elapsed().as_secs(), fleet.limit.usage_mib().unwrap_or(0), peak_swap >> 20, fleet.limit.pressure_some_avg10().unwrap_or(f64::NAN));
            }
        }
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a workload thread panicked".into()))).collect()
    });
    let makespan_s = t0.elapsed().as_secs_f64();
    let (vm1, st1) = (host_vmstat(), parse_stat(&fleet.limit.memory_stat()));
    let rows = rec.rows();
    drop(rec);
    drop(daemon);
    fleet.check_alive()?;
    let mut guests = Vec::new();
    for ((n, q), r) in fleet.guests.iter().zip(results) {
        let (text, runtime_s) = r?;
        let jobs: Vec<f64> = WorkLine::all(&text).iter().map(|w| w.secs).collect();
        let fills_done = text.lines().filter(|l| l.trim_start().starts_with("FILL mib=")).count() as u64;
        let oom_kills = q.console.oom_kills();
        if (jobs.len() as u64) < setup.blocks * setup.jobs || fills_done < setup.blocks {
            eprintln!("hostbench: a1: {n}: {fills_done} of {} fills and {} of {} jobs completed ({oom_kills} OOM kills in the guest)", setup.blocks, jobs.len(), setup.blocks * setup.jobs);
            if oom_kills == 0 {
                return Err(format!("{n}: work missing without an OOM kill; the guest printed:\n{text}"));
            }
        }
        let work_mib = setup.work_mib(fills_done, jobs.len() as u64);
        let s = rows.iter().filter_map(|r| r.sizes.get(n.as_str()).copied());
        let range = s.clone().min().zip(s.max());
        guests.push(GuestA1 { name: n.clone(), runtime_s, jobs_s: jobs, fills_done, work_mib, throughput_mib_s: work_mib / runtime_s, oom_kills, size_range_mib: range });
    }
    let gdelta = |k: &str| group(&st1, k).unwrap_or(0).saturating_sub(group(&st0, k).unwrap_or(0));
    let swap = Swap {
        pswpin: delta(&vm0, &vm1, "pswpin"),
        pswpout: delta(&vm0, &vm1, "pswpout"),
        pgmajfault: gdelta("pgmajfault"),
        refault_anon: gdelta("workingset_refault_anon"),
        group_pswpin: group(&st1, "pswpin").map(|_| gdelta("pswpin")),
        group_pswpout: group(&st1, "pswpout").map(|_| gdelta("pswpout")),
        peak_swap_mib: peak_swap >> 20,
        swaps,
    };
    Ok(RunA1 { mode, run, guests, makespan_s, swap, peak_group_mib, peak_psi, guest_kernel })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_order_and_work() {
        let s = Setup { runs: 2, ..Setup::default() };
        assert_eq!(s.order(), vec![Mode::Vanilla, Mode::Pressure, Mode::Pressure, Mode::Vanilla]);
        assert!(s.sequence().starts_with("fill 600; work mem 224 4 300; "));
        assert_eq!(s.sequence().matches("work mem").count(), 6);
        assert_eq!(s.sequence().matches("fill 600").count(), 2);
        assert_eq!(s.work_mib(2, 6), (2 * 600 + 6 * 224 * 5) as f64);
    }

    #[test]
    fn stats_and_changes() {
        let v1 = "cache 1\nswap 4096\ntotal_swap 8192\ntotal_pgmajfault 7\n";
        let st = parse_stat(v1);
        assert_eq!(group(&st, "swap"), Some(8192), "hierarchical first");
        assert_eq!(group(&st, "cache"), Some(1));
        assert_eq!(group(&st, "pswpin"), None);
        assert!((Summary::change((100.0, 90.4)) + 0.096).abs() < 1e-9);
    }
}
