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

use crate::bench::fleet::{policy_from_toml, Fleet, Images};
use crate::bench::model::{Config, QemuLine};
use crate::bench::stats::{median, percentile};
use crate::guest::{balloon_to, watch_balloon, SpikeRun};
use crate::{step, wait_vm_settled};
use autoballoon::config::ShrinkSetting;
use autoballoon_core::procfs::{parse_pressure, parse_vmstat, Pressure, Vmstat};
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct SpikeArgs {
    /// The project's guest image (stock kernel); default: $AUTOBALLOON_IMAGE.
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// The patched kernel's guest image; without it the patched configurations are left out.
    #[arg(long)]
    pub patched_image: Option<PathBuf>,
    /// QEMU binaries or wrappers, one fleet each, comma-separated [default:
    /// $AUTOBALLOON_QEMU, else qemu-system-x86_64].
    #[arg(long, value_delimiter = ',')]
    pub qemu: Vec<PathBuf>,
    /// Configurations, comma-separated [default: none,fpr,ab-stock, and fpr-patched (the
    /// patched rows' bar), ab-patched, ab-patched+fpr with --patched-image].
    #[arg(long, value_delimiter = ',')]
    pub configs: Vec<Config>,
    /// Spike shapes, THREADSxMIB (MiB per thread), or THREADSxMIB@R for a slow ramp of R
    /// MiB/s per thread, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "3x400,12x100,1x1200@100", value_parser = Shape::parse)]
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
    /// Guest vCPUs, one fleet each, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub cpus: Vec<u32>,
    #[arg(long, default_value_t = 2048)]
    pub memory_mib: u64,
    /// Diagnostic: before each spike, configurations without an agent are ballooned to
    /// this many MiB and back to their full size over QMP (waiting for both), so the spike
    /// touches memory the balloon gave back and QEMU discarded page by page; 0: off.
    #[arg(long, default_value_t = 0)]
    pub balloon_first_mib: u64,
    /// Touch this much fresh host memory (and give it back) right before each spike, MiB;
    /// 0: off. For hosts that are VMs whose hypervisor takes free memory back (this
    /// project's test machines): the spike then finds host memory backed, as on bare metal
    /// (docs/spikes.md; `crate::hostbench::warm_host_memory`).
    #[arg(long, default_value_t = 0)]
    pub warm_host_mib: u64,
    /// Sockets, logs and `spikes.jsonl`.
    #[arg(long, default_value = "run/bench/spikes")]
    pub out: PathBuf,
    /// Where SPIKES.md and spikes.json go; none: only the table on stdout.
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Policy keys for the controlled configurations instead of the defaults, as TOML of
    /// the `[defaults]` table (e.g. `'rinse_after_s = 5'`); for experiments.
    #[arg(long)]
    pub policy: Option<String>,
    /// Measure nothing: write the report again from the `spikes.json` an earlier run wrote
    /// (into `--results`, or on stdout), with this version's report.
    #[arg(long)]
    pub report_from: Option<PathBuf>,
    /// An earlier run's `spikes.json`: its fleets (a QEMU and a vCPU count) that this run
    /// does not measure stay in the report beside this run's, each table headed with the
    /// sitting it was measured in. To measure some QEMU builds of a long run again (after a change to
    /// them) and keep the others' tables; ratios stay within one fleet, so within one run.
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

/// What `spikes.json` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Results {
    spikes: Vec<SpikeRecord>,
    oom_kills: Vec<OomRecord>,
}

impl Results {
    fn load(path: &Path) -> Result<Results, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: not a spikes.json: {e}", path.display()))
    }

    /// The fleets (QEMU label, vCPUs) in the order they were measured.
    fn fleets(&self) -> Vec<(String, u32)> {
        let mut v: Vec<(String, u32)> = Vec::new();
        for k in self.spikes.iter().map(|r| (r.qemu_version.clone(), r.cpus)).chain(self.oom_kills.iter().map(|o| (o.qemu_version.clone(), o.cpus))) {
            if !v.contains(&k) {
                v.push(k);
            }
        }
        v
    }

    /// This run's records with `earlier`'s fleets that this run did not measure: `earlier`'s
    /// order, a fleet measured again in its old place, this run's new fleets last.
    fn keeping(self, earlier: Results) -> Results {
        let mine = self.fleets();
        let mut order = earlier.fleets();
        order.extend(mine.iter().filter(|k| !order.contains(k)).cloned().collect::<Vec<_>>());
        let mut out = Results::default();
        for (version, cpus) in order {
            let from = if mine.contains(&(version.clone(), cpus)) { &self } else { &earlier };
            out.spikes.extend(from.spikes.iter().filter(|r| r.qemu_version == version && r.cpus == cpus).cloned());
            out.oom_kills.extend(from.oom_kills.iter().filter(|o| o.qemu_version == version && o.cpus == cpus).cloned());
        }
        out
    }
}

/// A spike's shape: threads, each mapping and touching `mib` MiB, as fast as they can or
/// at `ramp` MiB/s each (a slow ramp: a program that grows gradually).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub threads: u32,
    pub mib: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<u32>,
}

impl Shape {
    /// `THREADSxMIB`, or `THREADSxMIB@RATE` for a ramp of RATE MiB/s per thread.
    pub fn parse(s: &str) -> Result<Shape, String> {
        let (size, ramp) = match s.split_once('@') {
            Some((size, r)) => (size, Some(r.parse::<u32>().ok().filter(|&r| r > 0).ok_or_else(|| format!("{s:?}: bad ramp, want MiB/s per thread (at least 1)"))?)),
            None => (s, None),
        };
        let (t, m) = size.split_once('x').ok_or_else(|| format!("{s:?}: want THREADSxMIB, e.g. 3x400, or THREADSxMIB@MIB_PER_S, e.g. 1x1200@100"))?;
        let threads = t.parse().map_err(|_| format!("{s:?}: bad thread count"))?;
        let mib = m.parse().map_err(|_| format!("{s:?}: bad MiB per thread"))?;
        if threads == 0 || mib == 0 {
            return Err(format!("{s:?}: threads and MiB must be at least 1"));
        }
        Ok(Shape { threads, mib, ramp })
    }

    pub fn key(&self) -> String {
        match self.ramp {
            Some(r) => format!("{}x{}@{r}", self.threads, self.mib),
            None => format!("{}x{}", self.threads, self.mib),
        }
    }

    /// The guest's `spike` command for one spike of this shape held `hold_s`.
    fn command(&self, hold_s: u64) -> String {
        let ramp = self.ramp.map_or(String::new(), |r| format!(" ramp={r}"));
        format!("spike {} {} {hold_s} 0 1{ramp}", self.threads, self.mib)
    }

    /// A heading: `3 threads × 400 MiB`, with its ramp if any.
    fn heading(&self) -> String {
        let ramp = self.ramp.map_or(String::new(), |r| format!(", a ramp of {r} MiB/s each"));
        format!("{} threads × {} MiB{ramp}", self.threads, self.mib)
    }
}

/// One spike of one configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpikeRecord {
    /// QEMU's version as QMP reports it.
    #[serde(default)]
    pub qemu_version: String,
    pub config: Config,
    pub shape: Shape,
    pub round: u32,
    /// 0: the cold spike of the round.
    pub cycle: u32,
    pub cpus: u32,
    /// When the spike's command went to the guest's console (Unix time, s): to line it up
    /// with the controller's log.
    #[serde(default)]
    pub sent_unix_s: Option<f64>,
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
    /// What the guest's kernel counted during the spike, if it could be read.
    #[serde(default)]
    pub guest: Option<GuestDelta>,
    /// What the host did for the spike, if it could be read.
    #[serde(default)]
    pub host: Option<HostDelta>,
    /// The `-global` settings the QEMU wrapper adds (`scripts/lib/qemu-build.sh`'s
    /// `-populate` wrappers), e.g. `virtio-balloon-device.x-zeroed=on`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qemu_globals: Vec<String>,
}

/// What the host did for one spike: QEMU's page faults (a guest page the host had discarded
/// faults in again, 4 KiB or 2 MiB at a time) and the host kernel's transparent huge page
/// faults (host-wide: the spikes run one guest at a time), with the guest RAM block's
/// resident and huge-page memory after it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct HostDelta {
    pub qemu_minflt: u64,
    pub qemu_majflt: u64,
    pub thp_fault_alloc: u64,
    pub thp_fault_fallback: u64,
    pub ram_rss_mib: f64,
    pub ram_huge_mib: f64,
    /// Of QEMU's faults and CPU time: its vCPU threads', and its thread backing memory
    /// ahead (`balloon-fill`, the project's QEMU patches); CPU seconds of the rest.
    #[serde(default)]
    pub vcpu_minflt: u64,
    #[serde(default)]
    pub vcpu_cpu_s: f64,
    #[serde(default)]
    pub populate_minflt: u64,
    #[serde(default)]
    pub populate_cpu_s: f64,
    #[serde(default)]
    pub other_cpu_s: f64,
    /// TLB shootdowns the host's CPUs took (`/proc/interrupts`, host-wide): each
    /// `madvise` that unmaps or remaps guest RAM interrupts the CPUs running QEMU.
    #[serde(default)]
    pub tlb_shootdowns: u64,
}

/// What the guest's kernel counted during one spike (`/proc/vmstat` and
/// `/proc/pressure/memory` read before and after it): where its time went.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct GuestDelta {
    /// Time some / all tasks stalled on memory (PSI), seconds.
    pub psi_some_s: f64,
    pub psi_full_s: f64,
    /// Direct reclaim entries and pages scanned by it.
    pub allocstall: u64,
    pub pgscan_direct: u64,
    /// OOM kills.
    pub oom_kill: u64,
    /// Pages the balloon gave back (deflated) and took (inflated).
    pub balloon_deflate: u64,
    pub balloon_inflate: u64,
    /// Faults that got a transparent huge page, and those that fell back to 4 KiB pages.
    pub thp_fault_alloc: u64,
    #[serde(default)]
    pub thp_fault_fallback: u64,
    /// Direct compaction stalls.
    #[serde(default)]
    pub compact_stall: u64,
    /// Pages kswapd scanned and reclaimed: background reclaim on the guest's vCPUs, which
    /// PSI does not count as a stall.
    #[serde(default)]
    pub pgscan_kswapd: u64,
    #[serde(default)]
    pub pgsteal_kswapd: u64,
    /// The guest agent's CPU time (on the guest's vCPUs), seconds; none without an agent.
    #[serde(default)]
    pub agent_cpu_s: Option<f64>,
}

/// The guest's counters at one moment, and the agent's CPU time in ns if it runs.
type Counters = (Vmstat, Pressure, Option<u64>);

/// The guest's counters now: `/proc/vmstat`, the PSI totals and the agent's `schedstat`
/// in one console command, read by core's parsers.
fn guest_counters(q: &crate::Qemu) -> Option<Counters> {
    let cmd = "cat /proc/vmstat; echo ==; cat /proc/pressure/memory; echo ==; p=$(pidof autoballoon-guest) && cat /proc/${p%% *}/schedstat";
    let out = q.console.run(cmd, Duration::from_secs(30)).ok()?;
    let mut parts = out.text.split("==");
    let (vm, psi) = (parts.next()?, parts.next()?);
    let agent = parts.next().and_then(|t| t.split_whitespace().next()?.parse().ok());
    Some((parse_vmstat(vm.trim()).ok()?, parse_pressure(psi.trim()).ok()?, agent))
}

fn delta(before: &Counters, after: &Counters) -> GuestDelta {
    let d = |k: &str| after.0.get(k).unwrap_or(0).saturating_sub(before.0.get(k).unwrap_or(0));
    let sum = |ks: &[&str]| ks.iter().map(|k| d(k)).sum::<u64>();
    let us = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e6;
    GuestDelta {
        psi_some_s: us(after.1.some.total_us, before.1.some.total_us),
        psi_full_s: us(after.1.full.map_or(0, |f| f.total_us), before.1.full.map_or(0, |f| f.total_us)),
        allocstall: sum(&["allocstall_dma", "allocstall_dma32", "allocstall_normal", "allocstall_movable"]),
        pgscan_direct: d("pgscan_direct"),
        oom_kill: d("oom_kill"),
        balloon_deflate: d("balloon_deflate"),
        balloon_inflate: d("balloon_inflate"),
        thp_fault_alloc: d("thp_fault_alloc"),
        thp_fault_fallback: d("thp_fault_fallback"),
        compact_stall: d("compact_stall"),
        pgscan_kswapd: d("pgscan_kswapd"),
        pgsteal_kswapd: d("pgsteal_kswapd"),
        agent_cpu_s: before.2.zip(after.2).map(|(b, a)| a.saturating_sub(b) as f64 / 1e9),
    }
}

/// The host's side of one guest at one moment: QEMU's memory, its threads, the host
/// kernel's counters and its TLB shootdowns so far.
type HostCounters = (crate::HostMemory, Vmstat, Vec<crate::ThreadUsage>, Option<u64>);

/// The host's side of one guest now.
fn host_counters(q: &crate::Qemu) -> Option<HostCounters> {
    let vmstat = std::fs::read_to_string("/proc/vmstat").ok()?;
    let tlb = std::fs::read_to_string("/proc/interrupts").ok().and_then(|t| interrupts_total(&t, "TLB"));
    Some((crate::host_memory_of(q.pid(), q.spec.memory)?, parse_vmstat(&vmstat).ok()?, crate::threads_of(q.pid())?, tlb))
}

/// The count of interrupt `name` (e.g. `TLB`) over all CPUs in a `/proc/interrupts` text.
/// Pure.
fn interrupts_total(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.trim_start().strip_prefix(name).is_some_and(|r| r.starts_with(':')))?;
    let counts = line.split_once(':')?.1.split_whitespace().map_while(|w| w.parse::<u64>().ok());
    Some(counts.sum())
}

/// Which of QEMU's threads a thread is, by the name `debug-threads=on` gives it
/// (`balloon-fill`: the populating thread of the project's QEMU patches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QemuThread {
    Vcpu,
    Populate,
    Other,
}

fn qemu_thread(name: &str) -> QemuThread {
    if name.starts_with("CPU ") || name.starts_with("ALL CPUs") {
        QemuThread::Vcpu
    } else if name == "balloon-fill" {
        QemuThread::Populate
    } else {
        QemuThread::Other
    }
}

/// The faults and CPU seconds of `kind`'s threads between two readings (a thread started
/// in between counts from zero; one that ended in between is left out).
fn threads_delta(before: &[crate::ThreadUsage], after: &[crate::ThreadUsage], kind: QemuThread) -> (u64, f64) {
    let mut faults = 0;
    let mut ns = 0;
    for t in after.iter().filter(|t| qemu_thread(&t.name) == kind) {
        let b = before.iter().find(|b| b.tid == t.tid);
        faults += t.minflt.saturating_sub(b.map_or(0, |b| b.minflt));
        ns += t.cpu_ns.saturating_sub(b.map_or(0, |b| b.cpu_ns));
    }
    (faults, ns as f64 / 1e9)
}

fn host_delta(before: &HostCounters, after: &HostCounters) -> HostDelta {
    let d = |k: &str| after.1.get(k).unwrap_or(0).saturating_sub(before.1.get(k).unwrap_or(0));
    let (vcpu_minflt, vcpu_cpu_s) = threads_delta(&before.2, &after.2, QemuThread::Vcpu);
    let (populate_minflt, populate_cpu_s) = threads_delta(&before.2, &after.2, QemuThread::Populate);
    let (_, other_cpu_s) = threads_delta(&before.2, &after.2, QemuThread::Other);
    HostDelta {
        qemu_minflt: after.0.faults.0.saturating_sub(before.0.faults.0),
        qemu_majflt: after.0.faults.1.saturating_sub(before.0.faults.1),
        thp_fault_alloc: d("thp_fault_alloc"),
        thp_fault_fallback: d("thp_fault_fallback"),
        ram_rss_mib: after.0.ram_rss.0 as f64 / 1024.0,
        ram_huge_mib: after.0.ram_huge.0 as f64 / 1024.0,
        tlb_shootdowns: after.3.zip(before.3).map_or(0, |(a, b)| a.saturating_sub(b)),
        vcpu_minflt,
        vcpu_cpu_s,
        populate_minflt,
        populate_cpu_s,
        other_cpu_s,
    }
}

/// OOM kills over a fleet's whole run, per configuration (its guest's console and dmesg).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OomRecord {
    pub qemu_version: String,
    pub cpus: u32,
    pub config: Config,
    pub oom_kills: usize,
}

/// The growth that counts as a reaction.
const REACTED: Kib = Kib::from_mib_saturating(32);

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// One spike's run and what `actual` did meanwhile.
struct Watched {
    run: SpikeRun,
    sent_unix_s: Option<f64>,
    reaction_s: Option<f64>,
    grown_s: Option<f64>,
    start_mib: f64,
    peak_mib: f64,
}

/// Runs one spike on `q`, sampling `actual` every 20 ms meanwhile.
fn one_spike(q: &crate::Qemu, ctl: &Qmp, shape: Shape, hold_s: u64) -> Result<Watched, String> {
    let start = ctl.query_balloon().map_err(|e| e.to_string())?;
    let cmd = shape.command(hold_s);
    let sent_unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs_f64());
    let (run, sizes) = watch_balloon(ctl, Duration::from_millis(20), || q.console.run(&cmd, Duration::from_secs(300)).map(|o| SpikeRun::parse(&o.text, o.status)));
    let run = run.map_err(|e| format!("spike: {e}"))?;
    let reacted = sizes.iter().find(|(_, b)| *b >= start.saturating_add(REACTED.to_bytes_saturating().0)).map(|(t, _)| *t);
    let peak = sizes.iter().map(|(_, b)| *b).max().unwrap_or(start).max(start);
    let nine_tenths = start + (peak - start) / 10 * 9;
    let grown_s = (peak >= start.saturating_add(REACTED.to_bytes_saturating().0)).then(|| sizes.iter().find(|(_, b)| *b >= nine_tenths).map(|(t, _)| *t)).flatten();
    Ok(Watched { run, sent_unix_s, reaction_s: reacted, grown_s, start_mib: mib(start), peak_mib: mib(peak) })
}

/// Brings `c`'s guest to its cold state before a round: the controller's guests settled,
/// the others at their full size (deflate-on-oom's and FPR's guests are never ballooned).
fn settle(fleet: &Fleet, c: Config, ctl: &Qmp, memory: Kib) -> Result<(), String> {
    if let Some(vm) = fleet.vm(c) {
        if let Err(e) = wait_vm_settled(&vm, Duration::from_secs(90)) {
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
    if let Some(from) = &a.report_from {
        return write_report(&a, Results::load(from)?);
    }
    // Read before hours of measuring, so a wrong path fails at once.
    let kept = a.keep.as_deref().map(Results::load).transpose()?;
    let images = Images::load(a.image.as_deref(), a.patched_image.as_deref())?;
    let configs = if a.configs.is_empty() {
        let mut v = vec![Config::NoBalloon, Config::Fpr, Config::AbStock];
        if images.patched.is_some() {
            v.extend([Config::FprPatched, Config::AbPatched, Config::AbPatchedFpr]);
        }
        v
    } else {
        a.configs.clone()
    };
    if !configs.contains(&Config::Fpr) {
        return Err("--configs must include fpr: every figure is a ratio to it".into());
    }
    let policy = a.policy.as_deref().map(policy_from_toml).transpose()?;
    let qemus = if a.qemu.is_empty() { vec![crate::qemu_binary()] } else { a.qemu.clone() };
    let memory = Kib::from_mib_saturating(a.memory_mib);
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let jsonl = a.out.join("spikes.jsonl");
    let mut sink = std::fs::File::create(&jsonl).map_err(|e| format!("{}: {e}", jsonl.display()))?;
    let mut records = Vec::new();
    let mut ooms = Vec::new();
    // Two wrappers of one QEMU build (say, one that preloads a measuring library) report the
    // same version: their rows are told apart by the wrapper's file name.
    let mut seen: Vec<(String, PathBuf)> = Vec::new();
    for (qi, qemu) in qemus.iter().enumerate() {
        for &cpus in &a.cpus {
            println!("[spikes] booting {} guests ({} MiB, {cpus} vCPU) on {}", configs.len(), a.memory_mib, qemu.display());
            let out = a.out.join(format!("q{qi}-c{cpus}"));
            let mut fleet = Fleet::boot_cpus(QemuLine::System, qemu, &configs, &images, memory, &out, ShrinkSetting::Auto, cpus)?;
            fleet.version = fleet_label(&mut seen, &fleet.version, qemu);
            if let Some(p) = &policy {
                fleet.restart_controller_with(p.clone())?;
            }
            let globals = wrapper_globals(qemu);
            let result = measure(&a, &mut fleet, &configs, memory, cpus, &globals, &mut sink);
            if result.is_ok() {
                ooms.extend(fleet.guests.iter().map(|g| OomRecord { qemu_version: fleet.version.clone(), cpus, config: g.config, oom_kills: crate::guest::oom_kills(&g.q) }));
            }
            fleet.shutdown();
            records.extend(result?);
        }
    }
    let measured = Results { spikes: records, oom_kills: ooms };
    write_report(&a, match kept {
        Some(earlier) => measured.keeping(earlier),
        None => measured,
    })
}

/// The `-global` settings a wrapper script passes to QEMU (`-global DRIVER.PROP=VALUE`);
/// none for a binary.
fn wrapper_globals(qemu: &Path) -> Vec<String> {
    use std::io::Read as _;
    let mut head = Vec::new();
    let read = std::fs::File::open(qemu).and_then(|f| f.take(8192).read_to_end(&mut head));
    if read.is_err() || !head.starts_with(b"#!") {
        return Vec::new();
    }
    globals_of_script(&String::from_utf8_lossy(&head))
}

fn globals_of_script(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with('#')).flat_map(str::split_whitespace).collect();
    words.windows(2).filter(|w| w[0] == "-global").map(|w| w[1].trim_matches(|c| c == '"' || c == '\'').to_string()).collect()
}

/// A run's spikes follow each other within minutes (a fleet's boot is the longest pause):
/// a pause this long between two spikes starts another run.
const RUN_GAP_S: f64 = 1800.0;

/// The first spike of each run among `records` (kept from earlier runs or not), in order.
fn runs(records: &[SpikeRecord]) -> Vec<f64> {
    let mut times: Vec<f64> = records.iter().filter_map(|r| r.sent_unix_s).collect();
    times.sort_by(f64::total_cmp);
    let mut starts: Vec<f64> = Vec::new();
    for (i, &t) in times.iter().enumerate() {
        if i == 0 || t - times[i - 1] > RUN_GAP_S {
            starts.push(t);
        }
    }
    starts
}

/// A Unix time to the minute, `YYYY-MM-DD HH:MM` (UTC).
fn minute_of(unix_s: f64) -> String {
    autoballoon::log::format_utc(unix_s as u64, 0)[..16].replace('T', " ")
}

/// `driver.a=on, driver.b=on` as `driver: a=on, b=on` where they share a driver.
fn globals_heading(globals: &[String]) -> String {
    let driver = |g: &String| g.split_once('.').map(|(d, _)| d.to_string());
    match globals.first().and_then(driver) {
        None => String::new(),
        Some(d) if globals.iter().all(|g| driver(g).as_deref() == Some(d.as_str())) => {
            let props: Vec<&str> = globals.iter().filter_map(|g| g.split_once('.').map(|(_, p)| p)).collect();
            format!(" with {d}: {}", props.join(", "))
        }
        Some(_) => format!(" with {}", globals.join(", ")),
    }
}

/// The label of a fleet's rows: its QEMU's version, and the file name of the binary or
/// wrapper where that is not plain `qemu-system-x86_64` (a wrapper that changes how QEMU
/// runs, e.g. `scripts/build-qemu10-populate.sh --populate`'s) or where an earlier fleet of
/// this run had the same version from another one (`10.0.2 (...) via qemu-async`). `seen`
/// holds the versions met so far and their first binaries.
fn fleet_label(seen: &mut Vec<(String, PathBuf)>, version: &str, qemu: &Path) -> String {
    let name = qemu.file_name().map_or("?".into(), |n| n.to_string_lossy());
    let first = match seen.iter().find(|(v, _)| v == version) {
        Some((_, first)) => first.as_path(),
        None => {
            seen.push((version.to_string(), qemu.to_path_buf()));
            qemu
        }
    };
    if name == "qemu-system-x86_64" && first == qemu {
        version.to_string()
    } else {
        format!("{version} via {name}")
    }
}

/// Prints the report and, with `--results`, writes SPIKES.md and spikes.json there.
fn write_report(a: &SpikeArgs, r: Results) -> Result<(), String> {
    let report = report(a, &r.spikes, &r.oom_kills, &host_line());
    println!("{report}");
    if let Some(dir) = &a.results {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join("SPIKES.md"), &report).map_err(|e| e.to_string())?;
        let json = serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("spikes.json"), json + "\n").map_err(|e| e.to_string())?;
        println!("[spikes] wrote {}/SPIKES.md and spikes.json", dir.display());
    }
    Ok(())
}

fn measure(a: &SpikeArgs, fleet: &mut Fleet, configs: &[Config], memory: Kib, cpus: u32, globals: &[String], sink: &mut std::fs::File) -> Result<Vec<SpikeRecord>, String> {
    let version = fleet.version.clone();
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
                    crate::hostbench::warm_host_memory(a.warm_host_mib)?;
                    let before = guest_counters(&g.q);
                    let host_before = host_counters(&g.q);
                    let w = one_spike(&g.q, &ctl, shape, a.hold_s)?;
                    let host = host_before.zip(host_counters(&g.q)).map(|(b, a)| host_delta(&b, &a));
                    let guest = before.zip(guest_counters(&g.q)).map(|(b, a)| delta(&b, &a));
                    let r = SpikeRecord { qemu_version: version.clone(), config: c, shape, round, cycle, cpus, sent_unix_s: w.sent_unix_s, alloc_s: w.run.alloc_s, reaction_s: w.reaction_s, completed: w.run.completed, start_mib: w.start_mib, peak_mib: w.peak_mib, grown_s: w.grown_s, guest, host, qemu_globals: globals.to_vec() };
                    let (start_mib, peak_mib) = (r.start_mib, r.peak_mib);
                    println!(
                        "[spikes]   spike {}: {} s, reaction {}, grown {}, {:.0} -> {:.0} MiB{}{}{}",
                        cycle + 1,
                        r.alloc_s.map_or("-".into(), |s| format!("{s:.2}")),
                        r.reaction_s.map_or("-".into(), |s| format!("{s:.2} s")),
                        r.grown_s.map_or("-".into(), |s| format!("{s:.2} s")),
                        start_mib,
                        peak_mib,
                        if r.completed { "" } else { ", FAILED" },
                        r.guest.map_or(String::new(), |g| format!(" (guest: stalled {:.2} s some / {:.2} s full, {} direct reclaims scanning {} pages, {} MiB deflated, {} THP faults, {} fell back to 4 KiB, {} compaction stalls, kswapd scanned {} / reclaimed {} pages{})", g.psi_some_s, g.psi_full_s, g.allocstall, g.pgscan_direct, g.balloon_deflate / 256, g.thp_fault_alloc, g.thp_fault_fallback, g.compact_stall, g.pgscan_kswapd, g.pgsteal_kswapd, g.agent_cpu_s.map_or(String::new(), |s| format!(", agent {s:.3} CPU s")))),
                        r.host.map_or(String::new(), |h| format!(" (host: QEMU faulted {} times, its vCPUs {} times in {:.2} CPU s, its populating thread {} times in {:.2} s, the rest {:.2} s; {} TLB shootdowns, {} THP faults, {} fell back; guest RAM {:.0} MiB resident, {:.0} MiB of it huge)", h.qemu_minflt + h.qemu_majflt, h.vcpu_minflt, h.vcpu_cpu_s, h.populate_minflt, h.populate_cpu_s, h.other_cpu_s, h.tlb_shootdowns, h.thp_fault_alloc, h.thp_fault_fallback, h.ram_rss_mib, h.ram_huge_mib))
                    );
                    writeln!(sink, "{}", serde_json::to_string(&r).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
                    records.push(r);
                }
            }
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

/// Whether a virtio device of this machine (its sysfs `device` and `features` files) is a
/// balloon with free page reporting (`VIRTIO_BALLOON_F_REPORTING`, bit 5): the machine is
/// then itself a guest whose free 2 MiB blocks go back to its hypervisor, so memory it
/// allocates afresh faults in from there, which moves every spike that needs new host
/// memory (docs/spikes.md, "The host's faults"). Pure.
pub fn balloon_reports_free_pages(device: &str, features: &str) -> bool {
    device.trim() == "0x0005" && features.trim().as_bytes().get(5) == Some(&b'1')
}

/// A line on the host for the report: whether it is such a guest.
fn host_line() -> String {
    let nested = std::fs::read_dir("/sys/bus/virtio/devices").into_iter().flatten().flatten().any(|d| {
        let read = |f: &str| std::fs::read_to_string(d.path().join(f)).unwrap_or_default();
        balloon_reports_free_pages(&read("device"), &read("features"))
    });
    if nested {
        "The host running these guests is itself a guest with a free-page-reporting balloon: its free 2 MiB blocks go back to its hypervisor, so memory it allocates afresh (QEMU's huge pages after a whole discard) faults in from there, and FPR's spikes with it.".into()
    } else {
        "The host has no free-page-reporting balloon of its own.".into()
    }
}

/// The report: per QEMU, vCPU count and shape, each configuration's cold and steady-state
/// spike time as a ratio to FPR alone and to no balloon, and its reaction time. Pure.
pub fn report(a: &SpikeArgs, records: &[SpikeRecord], ooms: &[OomRecord], host: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Spikes: how fast a spike gets its memory\n");
    let _ = writeln!(s, "{host}\n");
    let _ = writeln!(
        s,
        "Written by `autoballoon-spikebench` (TCG single-threaded, {} MiB guests): per QEMU, vCPU count, shape and round {} spikes {} s apart, each holding its memory {} s; the first spike is the cold one (the guest settled), the others the steady state. `spike` s: its own allocation time (every thread mapped and touched its memory). Reaction: from the spike's start until QMP `actual` rose by 32 MiB; grown: until it had made 90 % of its way to the peak. Ratios are of medians, to FPR alone and to no balloon of the same fleet, on the row's own kernel where the fleet has that kernel's bar (FPR and no balloon on the patched kernel for the patched rows). OOM kills: the guest's over the whole fleet's run (console and dmesg). Failed: spikes with an allocation that failed or a shell that did not answer.\n",
        a.memory_mib, a.cycles, a.gap_s, a.hold_s
    );
    if let Some(p) = &a.policy {
        let _ = writeln!(s, "The controlled configurations ran with the policy keys `{p}` instead of the defaults.\n");
    }
    let runs = runs(records);
    let run_of = |r: &SpikeRecord| r.sent_unix_s.and_then(|t| runs.iter().rev().find(|&&start| start <= t).copied());
    if runs.len() > 1 {
        let _ = writeln!(s, "The tables were measured in {} sittings, with more than {} min between them (each heading says when; `--keep` keeps an earlier run's tables): every ratio is within one table's fleet, measured side by side.\n", runs.len(), RUN_GAP_S / 60.0);
    }
    let mut groups: Vec<(String, u32, Shape)> = Vec::new();
    let mut configs: Vec<Config> = Vec::new();
    for r in records {
        let g = (r.qemu_version.clone(), r.cpus, r.shape);
        if !groups.contains(&g) {
            groups.push(g);
        }
        if !configs.contains(&r.config) {
            configs.push(r.config);
        }
    }
    configs.sort();
    for (version, cpus, shape) in groups {
        let mine: Vec<&SpikeRecord> = records.iter().filter(|r| r.qemu_version == version && r.cpus == cpus && r.shape == shape).collect();
        let pick = |c: Config, steady: bool| mine.iter().copied().filter(move |r| r.config == c && (r.cycle > 0) == steady);
        let steady = |c: Config| med(pick(c, true).filter_map(|r| r.alloc_s));
        // Each row against the bars of its own kernel, where this fleet has them.
        let bar = |c: Config, stock: Config, patched: Config| c.bar_of(stock, patched, steady);
        let ratio = |x: Option<f64>, bar: Option<f64>| match (x, bar) {
            (Some(x), Some(b)) if b > 0.0 => format!("{:.2}×", x / b),
            _ => "–".into(),
        };
        let globals = mine.first().map_or(String::new(), |r| globals_heading(&r.qemu_globals));
        let run = mine.first().and_then(|r| run_of(r)).map_or(String::new(), |t| format!(" (measured from {} UTC)", minute_of(t)));
        let _ = writeln!(s, "## QEMU {version}{globals}, {cpus} vCPU, {}{run}\n", shape.heading());
        let _ = writeln!(s, "| configuration | cold spike s | steady s (median) | × FPR | × no balloon | reaction s, steady: median [p90, max] (spikes) | grown s (median, steady) | guest stalled s, some / full (median, steady) | direct reclaims (median, steady) | THP faults / fallbacks (median, steady) | failed | OOM kills |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for &c in &configs {
            if pick(c, false).chain(pick(c, true)).next().is_none() {
                continue;
            }
            let cold = med(pick(c, false).filter_map(|r| r.alloc_s));
            let st = steady(c);
            let reactions: Vec<f64> = pick(c, true).filter_map(|r| r.reaction_s).collect();
            let react = match reactions.len() {
                0 => "–".into(),
                n => format!("{:.2} [{:.2}, {:.2}] ({n})", median(&reactions), percentile(&reactions, 90.0), percentile(&reactions, 100.0)),
            };
            let grown = med(pick(c, true).filter_map(|r| r.grown_s));
            let failed = mine.iter().filter(|r| r.config == c && !r.completed).count();
            let f = |x: Option<f64>| x.map_or("–".into(), |v| format!("{v:.2}"));
            let kills: usize = ooms.iter().filter(|o| o.qemu_version == version && o.cpus == cpus && o.config == c).map(|o| o.oom_kills).sum();
            let g = |get: fn(&GuestDelta) -> f64| med(pick(c, true).filter_map(|r| r.guest.as_ref().map(get)));
            let stalled = format!("{} / {}", f(g(|d| d.psi_some_s)), f(g(|d| d.psi_full_s)));
            let reclaims = g(|d| d.allocstall as f64).map_or("–".into(), |v| format!("{v:.0}"));
            let n = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
            let thp = format!("{} / {}", n(g(|d| d.thp_fault_alloc as f64)), n(g(|d| d.thp_fault_fallback as f64)));
            let _ = writeln!(s, "| {} | {} | {} | {} | {} | {} | {} | {stalled} | {reclaims} | {thp} | {failed} | {kills} |", c.label(), f(cold), f(st), ratio(st, bar(c, Config::Fpr, Config::FprPatched)), ratio(st, bar(c, Config::NoBalloon, Config::NoBalloonPatched)), react, f(grown));
        }
        let _ = writeln!(s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_wrappers_of_one_qemu_get_rows_of_their_own() {
        let mut seen = Vec::new();
        let (q10, wrapped, q72) = (Path::new("/c/qemu10/bin/qemu-system-x86_64"), Path::new("/tmp/p/qemu-async"), Path::new("/c/72/bin/qemu-system-x86_64"));
        assert_eq!(fleet_label(&mut seen, "10.0.2", q10), "10.0.2");
        assert_eq!(fleet_label(&mut seen, "7.2.22", q72), "7.2.22");
        assert_eq!(fleet_label(&mut seen, "10.0.2", wrapped), "10.0.2 via qemu-async");
        // The same binary again (another vCPU count, or a second pass) joins its first rows.
        assert_eq!(fleet_label(&mut seen, "10.0.2", q10), "10.0.2");
        assert_eq!(fleet_label(&mut seen, "10.0.2", wrapped), "10.0.2 via qemu-async");
        // A wrapper says so even where it is the only one of its version.
        let populate = Path::new("/c/qemu/qemu10-populate/bin/qemu-system-x86_64-populate");
        assert_eq!(fleet_label(&mut seen, "10.0.2 (patched)", populate), "10.0.2 (patched) via qemu-system-x86_64-populate");
        assert_eq!(fleet_label(&mut seen, "10.0.2 (patched)", populate), "10.0.2 (patched) via qemu-system-x86_64-populate");
    }

    #[test]
    fn a_spike_delta_counts_kswapd_beside_direct_reclaim() {
        let psi = |us: u64| parse_pressure(&format!("some avg10=0.00 avg60=0.00 avg300=0.00 total={us}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={}", us / 2)).unwrap();
        let before = (parse_vmstat("pgscan_kswapd 100\npgsteal_kswapd 90\npgscan_direct 7\nallocstall_dma32 1").unwrap(), psi(1_000_000), Some(2_000_000_000));
        let after = (parse_vmstat("pgscan_kswapd 4196\npgsteal_kswapd 4000\npgscan_direct 7\nallocstall_dma32 1").unwrap(), psi(1_500_000), Some(2_040_000_000));
        let d = delta(&before, &after);
        assert_eq!((d.pgscan_kswapd, d.pgsteal_kswapd, d.pgscan_direct, d.allocstall), (4096, 3910, 0, 0));
        assert_eq!((d.psi_some_s, d.psi_full_s), (0.5, 0.25));
        assert_eq!(d.agent_cpu_s, Some(0.04));
        assert_eq!(delta(&(before.0.clone(), before.1, None), &after).agent_cpu_s, None, "no agent");
    }

    #[test]
    fn a_spike_splits_qemus_faults_and_cpu_time_by_thread() {
        let t = |tid: u32, name: &str, minflt: u64, cpu_ns: u64| crate::ThreadUsage { tid, name: name.into(), minflt, cpu_ns };
        let before = [t(1, "qemu-system-x86", 10, 1_000_000_000), t(2, "CPU 0/TCG", 100, 5_000_000_000), t(3, "CPU 1/TCG", 100, 5_000_000_000), t(4, "balloon-fill", 0, 0)];
        let after = [t(1, "qemu-system-x86", 12, 1_100_000_000), t(2, "CPU 0/TCG", 700, 5_400_000_000), t(3, "CPU 1/TCG", 150, 5_500_000_000), t(4, "balloon-fill", 40, 200_000_000), t(9, "worker", 3, 50_000_000)];
        assert_eq!(threads_delta(&before, &after, QemuThread::Vcpu), (650, 0.9));
        assert_eq!(threads_delta(&before, &after, QemuThread::Populate), (40, 0.2));
        assert_eq!(threads_delta(&before, &after, QemuThread::Other), (5, 0.15), "a thread started meanwhile counts from zero");
        assert_eq!(qemu_thread("ALL CPUs/TCG"), QemuThread::Vcpu, "single-threaded TCG");
    }

    #[test]
    fn counts_an_interrupt_over_all_cpus() {
        let t = "           CPU0       CPU1\n  0:         33          0   IO-APIC    2-edge      timer\nRES:    1709147    1643117   Rescheduling interrupts\nTLB:    4031069    2556292   TLB shootdowns\n";
        assert_eq!(interrupts_total(t, "TLB"), Some(6_587_361));
        assert_eq!(interrupts_total(t, "CAL"), None);
    }

    impl SpikeArgs {
        fn try_parse_from_empty() -> SpikeArgs {
            #[derive(clap::Parser)]
            struct P {
                #[command(flatten)]
                a: SpikeArgs,
            }
            <P as clap::Parser>::parse_from(["spikebench"]).a
        }
    }

    fn rec(config: Config, cycle: u32, alloc_s: f64) -> SpikeRecord {
        SpikeRecord {
            qemu_version: "10.0.2".into(),
            config,
            shape: Shape { threads: 3, mib: 400, ramp: None },
            round: 0,
            cycle,
            cpus: 1,
            sent_unix_s: None,
            alloc_s: Some(alloc_s),
            reaction_s: None,
            completed: true,
            start_mib: 2048.0,
            peak_mib: 2048.0,
            grown_s: None,
            guest: Some(GuestDelta { psi_some_s: 0.5, psi_full_s: 0.25, allocstall: 3, ..Default::default() }),
            host: None,
            qemu_globals: Vec::new(),
        }
    }

    #[test]
    fn the_report_shows_ratios_to_fpr_per_group() {
        let rs = vec![rec(Config::Fpr, 0, 3.0), rec(Config::Fpr, 1, 2.0), rec(Config::AbStock, 0, 5.0), rec(Config::AbStock, 1, 1.0), rec(Config::AbStock, 2, 3.0)];
        let ooms = vec![OomRecord { qemu_version: "10.0.2".into(), cpus: 1, config: Config::AbStock, oom_kills: 0 }];
        let a = SpikeArgs::try_parse_from_empty();
        let md = report(&a, &rs, &ooms, "The host line.");
        assert!(md.contains("The host line.\n"), "{md}");
        assert!(md.contains("## QEMU 10.0.2, 1 vCPU, 3 threads × 400 MiB"), "{md}");
        assert!(md.contains("| FPR | 3.00 | 2.00 | 1.00× | – | – | – | 0.50 / 0.25 | 3 | 0 / 0 | 0 | 0 |"), "{md}");
        assert!(md.contains("| autoballoon, stock kernel (+FPR +hinting) | 5.00 | 2.00 | 1.00× |"), "{md}");
        // A patched row against FPR on the patched kernel once the fleet has it, else stock FPR.
        let patched = [rec(Config::AbPatchedFpr, 0, 2.0), rec(Config::AbPatchedFpr, 1, 1.0)];
        let md = report(&a, &[&rs[..], &patched[..]].concat(), &ooms, "");
        assert!(md.contains("| autoballoon, patched kernel +FPR +hinting | 2.00 | 1.00 | 0.50× |"), "{md}");
        let bar = [rec(Config::FprPatched, 0, 4.0), rec(Config::FprPatched, 1, 4.0)];
        let md = report(&a, &[&rs[..], &patched[..], &bar[..]].concat(), &ooms, "");
        assert!(md.contains("| autoballoon, patched kernel +FPR +hinting | 2.00 | 1.00 | 0.25× |"), "{md}");
        assert!(md.contains("| FPR, patched kernel | 4.00 | 4.00 | 1.00× |"), "{md}");
    }

    #[test]
    fn a_table_is_headed_with_the_wrappers_settings_and_its_sitting() {
        let globals = globals_of_script(include_str!("../fixtures/qemu-system-x86_64-populate"));
        assert_eq!(globals, ["virtio-balloon-device.x-populate-on-deflate=on", "virtio-balloon-device.x-migrate-skip-ballooned=on", "virtio-balloon-device.x-zeroed=on"]);
        let r = |cycle| SpikeRecord { qemu_globals: globals.clone(), sent_unix_s: Some(1_796_680_000.0 + 10.0 * f64::from(cycle)), ..rec(Config::Fpr, cycle, 1.0) };
        let a = SpikeArgs::try_parse_from_empty();
        let md = report(&a, &[r(0), r(1)], &[], "");
        assert!(md.contains("## QEMU 10.0.2 with virtio-balloon-device: x-populate-on-deflate=on, x-migrate-skip-ballooned=on, x-zeroed=on, 1 vCPU, 3 threads × 400 MiB (measured from 2026-12-07 21:46 UTC)\n"), "{md}");
        assert!(!md.contains("sittings"), "one run: {md}");
        // A table kept from an earlier run (`--keep`), hours before: headed with that run.
        let old = |cycle| SpikeRecord { qemu_version: "7.2".into(), sent_unix_s: Some(1_796_600_000.0 + 10.0 * f64::from(cycle)), ..rec(Config::Fpr, cycle, 1.0) };
        let md = report(&a, &[old(1), old(0), r(0), r(1)], &[], "");
        assert!(md.contains("The tables were measured in 2 sittings, with more than 30 min between them"), "{md}");
        assert!(md.contains("## QEMU 7.2, 1 vCPU, 3 threads × 400 MiB (measured from 2026-12-06 23:33 UTC)\n"), "{md}");
        assert_eq!(globals_heading(&["a.x=1".into(), "b.y=2".into()]), " with a.x=1, b.y=2");
        assert_eq!(globals_heading(&[]), "");
        assert!(globals_of_script("#!/bin/sh\n# -global commented.out=on\nexec qemu \"$@\"\n").is_empty());
    }

    #[test]
    fn a_run_keeps_the_fleets_of_an_earlier_one_that_it_did_not_measure() {
        let at = |v: &str, cpus, alloc_s| SpikeRecord { qemu_version: v.into(), cpus, ..rec(Config::Fpr, 1, alloc_s) };
        let oom = |v: &str, cpus| OomRecord { qemu_version: v.into(), cpus, config: Config::Fpr, oom_kills: 0 };
        let earlier = Results { spikes: vec![at("7.2", 1, 1.0), at("7.2 via p", 1, 2.0), at("10", 1, 3.0), at("10", 2, 4.0)], oom_kills: vec![oom("7.2", 1), oom("7.2 via p", 1)] };
        let now = Results { spikes: vec![at("7.2 via p", 1, 9.0), at("7.2 via p", 2, 8.0)], oom_kills: vec![oom("7.2 via p", 1)] };
        let r = now.keeping(earlier);
        let got: Vec<(&str, u32, f64)> = r.spikes.iter().map(|s| (s.qemu_version.as_str(), s.cpus, s.alloc_s.unwrap())).collect();
        assert_eq!(got, [("7.2", 1, 1.0), ("7.2 via p", 1, 9.0), ("10", 1, 3.0), ("10", 2, 4.0), ("7.2 via p", 2, 8.0)]);
        assert_eq!(r.oom_kills, [oom("7.2", 1), oom("7.2 via p", 1)]);
    }

    #[test]
    fn a_host_balloon_with_free_page_reporting_is_recognised() {
        // This machine's own virtio devices (sysfs `features`): its balloon (device 0x0005)
        // offers free page reporting (bit 5); a network device (0x0001) is no balloon.
        let balloon = include_str!("../fixtures/host-virtio-balloon.features");
        assert!(balloon_reports_free_pages("0x0005\n", balloon));
        assert!(!balloon_reports_free_pages("0x0001\n", include_str!("../fixtures/host-virtio-net.features")));
        assert!(!balloon_reports_free_pages("0x0005", "0110001"), "bit 5 off");
        assert!(!balloon_reports_free_pages("0x0005", ""));
    }

    #[test]
    fn shapes_parse() {
        assert_eq!(Shape::parse("3x400"), Ok(Shape { threads: 3, mib: 400, ramp: None }));
        let ramp = Shape::parse("1x1200@100").unwrap();
        assert_eq!(ramp, Shape { threads: 1, mib: 1200, ramp: Some(100) });
        assert_eq!((ramp.key(), ramp.command(2)), ("1x1200@100".to_string(), "spike 1 1200 2 0 1 ramp=100".to_string()));
        assert_eq!(Shape::parse("3x400").unwrap().command(2), "spike 3 400 2 0 1");
        assert!(Shape::parse("1x1200@0").is_err() && Shape::parse("1x1200@fast").is_err());
        assert!(Shape::parse("3").is_err());
        assert!(Shape::parse("0x400").is_err());
        assert!(Shape::parse("3xlots").is_err());
    }
}
