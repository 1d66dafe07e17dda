//! The iBalloon seed's mixed-workload experiment (ICWS'16 §V.C) scaled to this machine.
//!
//! Four guests on one host memory limit run memory-bound and CPU-bound phases (the guest's
//! `work`, guest/workloads/work.c) in sequence, each guest in another order, all at once,
//! with swap on a zram ramdisk inside every guest:
//!
//! * [`Sizing::Static`]: each guest is configured with `capacity / 4` (no balloon moves);
//! * [`Sizing::IBalloon`]: each guest is configured with twice that, and the daemon as
//!   shipped (`balancer = "iballoon"`, `capacity_mib` = the same total, default policy)
//!   moves memory between them.
//!
//! A memory phase's working set (320 MiB) does not fit a static guest (331 MiB MemTotal,
//! less the kernel's and the agent's), so it swaps; with the balancer, the guests in CPU
//! phases give memory to those in memory phases. Per guest: the runtime of its sequence
//! (host wall clock), each phase's own time, and its swap traffic (`pswpin`/`pswpout` of
//! its `/proc/vmstat`).

use super::ratio;
use crate::fleet::{Fleet, Recorder};
use crate::guest::vmstat;
use crate::hostlimit::HostLimit;
use crate::{wait_for, GuestAgent, GuestImage, VmSpec};
use autoballoon_core::Kib;
use std::path::Path;
use std::time::{Duration, Instant};

/// One phase of a guest's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// `work mem MIB PASSES ROUNDS`: sweeps over a working set.
    Mem,
    /// `work cpu MOPS`: an integer hash in registers.
    Cpu,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Mem => "mem",
            Phase::Cpu => "cpu",
        }
    }
}

/// How the guests are sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    Static,
    IBalloon,
}

impl Sizing {
    pub fn label(self) -> &'static str {
        match self {
            Sizing::Static => "static",
            Sizing::IBalloon => "iballoon",
        }
    }
}

use Phase::{Cpu, Mem};

/// The guests and their orders, after the seed's four VMs: Dacapo (memory and CPU
/// alternating), Dacapo-plus (the same in another order), crypto.rsa then Himeno (CPU, then
/// memory), QuickSort (memory in the middle). One, two or three memory phases overlap.
pub const GUESTS: [(&str, [Phase; 4]); 4] = [("vm1", [Mem, Cpu, Mem, Cpu]), ("vm2", [Cpu, Mem, Cpu, Mem]), ("vm3", [Cpu, Cpu, Mem, Mem]), ("vm4", [Cpu, Mem, Mem, Cpu])];

/// The experiment's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// What the four guests have together (static: a quarter each).
    pub capacity_mib: u64,
    /// A guest's configured size under the balancer.
    pub max_mib: u64,
    /// The zram swap's (uncompressed) size in every guest.
    pub zram_mib: u64,
    /// A memory phase: working set, sweeps, hash rounds per touched word.
    pub mem_mib: u64,
    pub passes: u64,
    pub rounds: u64,
    /// A CPU phase: million hash rounds.
    pub cpu_mops: u64,
    /// What QEMU itself takes beyond its guest's RAM (TCG code cache, devices), per guest,
    /// for the host limit: measured at about 60-90 MiB here.
    pub qemu_overhead_mib: u64,
}

impl Default for Setup {
    /// About 20 s per phase alone under TCG here; 40 s with four guests on two cores.
    fn default() -> Self {
        Setup { capacity_mib: 1536, max_mib: 768, zram_mib: 384, mem_mib: 320, passes: 5, rounds: 1000, cpu_mops: 12000, qemu_overhead_mib: 150 }
    }
}

impl Setup {
    fn command(&self, phase: Phase) -> String {
        match phase {
            Mem => format!("work mem {} {} {}", self.mem_mib, self.passes, self.rounds),
            Cpu => format!("work cpu {}", self.cpu_mops),
        }
    }

    /// The guest shell's command line for a sequence: every phase runs even if one fails.
    pub fn sequence(&self, phases: &[Phase]) -> String {
        phases.iter().map(|p| self.command(*p)).collect::<Vec<_>>().join("; ")
    }

    pub fn limit_mib(&self) -> u64 {
        self.capacity_mib + GUESTS.len() as u64 * self.qemu_overhead_mib
    }
}

/// One `WORK kind=K ... secs=X` line of `work`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkLine {
    pub phase: Phase,
    pub secs: f64,
}

impl WorkLine {
    pub fn parse(line: &str) -> Option<WorkLine> {
        let mut words = line.split_whitespace();
        if words.next()? != "WORK" {
            return None;
        }
        let (mut phase, mut secs) = (None, None);
        for w in words {
            match w.split_once('=')? {
                ("kind", "mem") => phase = Some(Mem),
                ("kind", "cpu") => phase = Some(Cpu),
                ("kind", _) => return None,
                ("secs", v) => secs = v.parse().ok(),
                _ => {}
            }
        }
        Some(WorkLine { phase: phase?, secs: secs? })
    }

    /// Every phase line of a transcript, in order.
    pub fn all(text: &str) -> Vec<WorkLine> {
        text.lines().filter_map(WorkLine::parse).collect()
    }
}

/// One guest's run.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestRun {
    pub name: String,
    /// Its sequence's phases and their own times, as `work` printed them.
    pub phases: Vec<WorkLine>,
    /// Host wall clock from the start of its sequence to its end.
    pub runtime_s: f64,
    /// Pages swapped in and out during the sequence (the guest's /proc/vmstat).
    pub pswpin: u64,
    pub pswpout: u64,
    pub oom_kills: usize,
    /// The largest and smallest size the daemon saw while the workloads ran (balancer only).
    pub size_range_mib: Option<(u64, u64)>,
}

impl GuestRun {
    pub fn phase_secs(&self, phase: Phase) -> f64 {
        self.phases.iter().filter(|w| w.phase == phase).map(|w| w.secs).sum()
    }
    /// Swap traffic in MiB (4 KiB pages).
    pub fn swap_mib(&self) -> f64 {
        (self.pswpin + self.pswpout) as f64 * 4.0 / 1024.0
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub sizing: Sizing,
    pub guests: Vec<GuestRun>,
    /// From the first start to the last end.
    pub makespan_s: f64,
    /// The daemon's view of the sizes (MiB) every 5 s while the workloads ran (balancer
    /// only): seconds since the start, sizes in `GUESTS` order.
    pub timeline: Vec<(f64, Vec<u64>)>,
}

impl Run {
    pub fn total_runtime_s(&self) -> f64 {
        self.guests.iter().map(|g| g.runtime_s).sum()
    }
    pub fn total_swap_mib(&self) -> f64 {
        self.guests.iter().map(GuestRun::swap_mib).sum()
    }
}

/// The two runs side by side: per guest (static, balancer, balancer / static).
pub fn runtime_ratios(stat: &Run, bal: &Run) -> Vec<(String, f64, f64, f64)> {
    stat.guests.iter().zip(&bal.guests).map(|(s, b)| (s.name.clone(), s.runtime_s, b.runtime_s, ratio(b.runtime_s, s.runtime_s))).collect()
}

fn step<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Runs the experiment once with `sizing`, in `dir`.
pub fn run(image: &GuestImage, dir: &Path, setup: &Setup, sizing: Sizing) -> Result<Run, String> {
    let label = sizing.label();
    let quarter = setup.capacity_mib / GUESTS.len() as u64;
    let limit = step("host limit", HostLimit::new(&format!("autoballoon-bench-host-{label}"), setup.limit_mib()))?;
    let specs = GUESTS
        .iter()
        .map(|(n, _)| match sizing {
            Sizing::Static => VmSpec { agent: GuestAgent::None, ..VmSpec::new(n, Kib::from_mib_saturating(quarter)) },
            Sizing::IBalloon => VmSpec::new(n, Kib::from_mib_saturating(setup.max_mib)),
        })
        .collect();
    let t = Instant::now();
    let mut fleet = Fleet::start(image, &dir.join(label), specs, limit)?;
    eprintln!("hostbench: {label}: 4 guests booted in {:.0} s under a {} MiB limit", t.elapsed().as_secs_f64(), setup.limit_mib());
    for (n, q) in &fleet.guests {
        let out = step(&format!("{n}: zram-swap"), q.console.run(&format!("zram-swap {}", setup.zram_mib), Duration::from_secs(60)))?;
        if out.status != 0 || !out.text.contains("ZRAM-SWAP") {
            return Err(format!("{n}: zram-swap {} failed (exit {}): {}", setup.zram_mib, out.status, out.text.trim()));
        }
    }
    let (daemon, rec) = match sizing {
        Sizing::Static => (None, None),
        Sizing::IBalloon => {
            let d = fleet.daemon(&format!("balancer = \"iballoon\"\ncapacity_mib = {}", setup.capacity_mib), "", |_| String::new())?;
            let rec = Recorder::start(&d.status_socket, &fleet.limit);
            // Before the workloads: the idle guests shrunk into the capacity (10 looks in a row).
            let settled = wait_for(Duration::from_secs(180), Duration::from_secs(1), || {
                let r = rec.rows();
                r.len() >= 10 && r[r.len() - 10..].iter().all(|r| r.sizes.len() == GUESTS.len() && r.total() <= setup.capacity_mib)
            });
            let sizes = rec.rows().last().map(|r| r.sizes.clone()).unwrap_or_default();
            if settled.is_none() {
                return Err(format!("the idle guests did not shrink into {} MiB within 180 s: {sizes:?}\n{}", setup.capacity_mib, d.log_text()));
            }
            eprintln!("hostbench: {label}: idle guests settled at {sizes:?} MiB");
            (Some(d), Some(rec))
        }
    };
    let before: Vec<(u64, u64)> = fleet.guests.iter().map(|(_, q)| Ok::<_, String>((step("vmstat", vmstat(q, "pswpin"))?, step("vmstat", vmstat(q, "pswpout"))?))).collect::<Result<_, _>>()?;
    let t_rec = rec.as_ref().map_or(0.0, Recorder::now);

    // All four sequences at once, one thread each; this thread prints progress.
    let t0 = Instant::now();
    let marks: Vec<usize> = fleet.guests.iter().map(|(_, q)| q.console.transcript().len()).collect();
    let results: Vec<Result<(String, f64), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = fleet
            .guests
            .iter()
            .zip(GUESTS.iter())
            .map(|((n, q), (_, phases))| {
                let cmd = setup.sequence(phases);
                s.spawn(move || {
                    let out = step(&format!("{n}: {cmd}"), q.console.run(&cmd, Duration::from_secs(3600)))?;
                    Ok((out.text, t0.elapsed().as_secs_f64()))
                })
            })
            .collect();
        let mut next = 15;
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(200));
            if t0.elapsed().as_secs() >= next {
                next += 15;
                let done: Vec<String> = fleet.guests.iter().zip(&marks).map(|((n, q), m)| format!("{n} {}/4", WorkLine::all(&q.console.transcript()[*m..]).len())).collect();
                let sizes = rec.as_ref().and_then(|r| r.rows().last().map(|r| format!(", sizes {:?} MiB", r.sizes.values().collect::<Vec<_>>()))).unwrap_or_default();
                eprintln!("hostbench: {label}: {:>4} s, phases done {}{sizes}", t0.elapsed().as_secs(), done.join(", "));
            }
        }
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a workload thread panicked".into()))).collect()
    });
    let makespan_s = t0.elapsed().as_secs_f64();
    let rows = rec.as_ref().map(|r| r.since(t_rec)).unwrap_or_default();
    drop(rec);
    drop(daemon);

    let mut guests = Vec::new();
    for (((n, q), (_, phases)), (r, (in0, out0))) in fleet.guests.iter().zip(GUESTS.iter()).zip(results.into_iter().zip(before)) {
        let (text, runtime_s) = r?;
        let lines = WorkLine::all(&text);
        if lines.iter().map(|w| w.phase).collect::<Vec<_>>() != phases.to_vec() {
            return Err(format!("{n}: expected the phases {phases:?}, the guest printed:\n{text}"));
        }
        let range = (!rows.is_empty()).then(|| {
            let s = rows.iter().filter_map(|r| r.sizes.get(n.as_str()).copied());
            (s.clone().max().unwrap_or(0), s.min().unwrap_or(0))
        });
        guests.push(GuestRun {
            name: n.clone(),
            phases: lines,
            runtime_s,
            pswpin: step("vmstat", vmstat(q, "pswpin"))?.saturating_sub(in0),
            pswpout: step("vmstat", vmstat(q, "pswpout"))?.saturating_sub(out0),
            oom_kills: q.console.oom_kills(),
            size_range_mib: range.filter(|(hi, _)| *hi > 0),
        });
    }
    fleet.check_alive()?;
    let mut timeline = Vec::new();
    let mut next = 0.0;
    for r in rows.iter().filter(|r| r.sizes.len() == GUESTS.len()) {
        if r.t - t_rec + 1e-9 >= next {
            timeline.push((r.t - t_rec, GUESTS.iter().map(|(n, _)| r.sizes[*n]).collect()));
            next = r.t - t_rec + 5.0;
        }
    }
    Ok(Run { sizing, guests, makespan_s, timeline })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_lines_are_read() {
        let text = "ZRAM-SWAP mib=384 comp=lzo-rle\nWORK kind=mem mib=320 passes=5 rounds=1000 secs=21.50 sum=ab\r\nnoise\nWORK kind=cpu mops=12000 secs=19.90 sum=cd\n";
        assert_eq!(WorkLine::all(text), vec![WorkLine { phase: Mem, secs: 21.5 }, WorkLine { phase: Cpu, secs: 19.9 }]);
        assert_eq!(WorkLine::parse("WORK kind=mem mib=320 error=mmap"), None, "no time");
        assert_eq!(WorkLine::parse("WORK kind=io secs=1"), None);
        assert_eq!(WorkLine::parse("WORKS kind=cpu secs=1"), None);
    }

    #[test]
    fn sequences_and_limits() {
        let s = Setup::default();
        assert_eq!(s.sequence(&[Mem, Cpu]), "work mem 320 5 1000; work cpu 12000");
        assert_eq!(s.limit_mib(), 1536 + 4 * 150);
        // Every guest runs two phases of each kind, in its own order.
        for (_, p) in GUESTS {
            assert_eq!(p.iter().filter(|p| **p == Mem).count(), 2);
        }
        let orders: std::collections::BTreeSet<_> = GUESTS.iter().map(|(_, p)| p).collect();
        assert_eq!(orders.len(), 4);
    }
}
