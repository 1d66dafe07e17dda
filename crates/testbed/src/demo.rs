//! `autoballoon-demo`: the main job on an embedded default guest. Boots a 2 GiB guest
//! under TCG with the controller and QEMU's own switches on (free page reporting and free
//! page hinting, the product's default), shows it shrink, spike and shrink back with no OOM
//! kill, then compares three live migrations from the same state (memory dirtied by `fill`
//! and freed): QEMU's best alone, the controller paused, given the time free page reporting
//! needs to drain (A → B); with autoballoon after `--idle-s` (B → C); and no balloon at all
//! on a second guest (F → G). Prints a table and writes a plot.

use crate::plot::{self, Series, Span};
use crate::guest::fill;
use crate::{migrate, rss_of, step, wait_for, wait_vm_settled, GuestAgent, Migrated, Qemu, VmSpec};
use autoballoon::config::{Config, ControllerConfig, LogFormat, PolicyConfig, VmConfig};
use autoballoon::controller::{Controller, VmCommand, VmHandle};
use autoballoon::log::Logger;
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// The guest image directory (from guest/build-image.sh); default: $AUTOBALLOON_IMAGE.
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// The guest's configured memory, MiB.
    #[arg(long, default_value_t = 2048)]
    pub memory_mib: u64,
    /// Spike: threads × MiB each, held for --spike-hold-s seconds.
    #[arg(long, default_value_t = 3)]
    pub spike_threads: u32,
    #[arg(long, default_value_t = 400)]
    pub spike_mib: u64,
    #[arg(long, default_value_t = 10)]
    pub spike_hold_s: u64,
    /// Dirty this much guest memory (then free it) before the migrations, MiB
    /// (default: 75 % of the guest).
    #[arg(long)]
    pub fill_mib: Option<u64>,
    /// Seconds between the free and the migration with autoballoon and without a balloon;
    /// QEMU's best waits at least this long and until free page reporting has drained.
    #[arg(long, default_value_t = 10)]
    pub idle_s: u64,
    /// Migration bandwidth cap, MiB/s (QEMU 7.2's default is 128).
    #[arg(long, default_value_t = 128)]
    pub bandwidth_mib: u64,
    /// Where logs, the plot and the summary go.
    #[arg(long, default_value = "run/demo")]
    pub out: PathBuf,
    /// The QEMU binary (or the QEMU 10 wrapper `make qemu10` prints); default:
    /// $AUTOBALLOON_QEMU, else qemu-system-x86_64 from PATH.
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,
}

/// The three migrations the demo compares, all from the same guest state: `fill` dirtied
/// memory and freed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    /// QEMU's own switches alone: free page reporting and hinting on, the controller paused
    /// and the balloon empty, given the time free page reporting needs to drain (A → B).
    QemuBest,
    /// The same guest and switches, the controller shrinking it during `--idle-s` (B → C).
    With,
    /// A second guest with no balloon switch and no agent (F → G).
    NoBalloon,
}

impl Row {
    fn route(self) -> &'static str {
        match self {
            Row::QemuBest => "A -> B",
            Row::With => "B -> C",
            Row::NoBalloon => "F -> G",
        }
    }

    /// What the row means, for the table's footnote.
    fn how(self) -> &'static str {
        match self {
            Row::QemuBest => "free-page-reporting=on and free-page-hint=on, the controller paused, the balloon empty; migrated once reporting had drained",
            Row::With => "the same guest and switches (on B), under its controller, the fill run with the controller running",
            Row::NoBalloon => "a second guest with no free page reporting, no hinting, no agent",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Row::QemuBest => "qemu_best",
            Row::With => "with",
            Row::NoBalloon => "no_balloon",
        }
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            Row::QemuBest => "QEMU's best (FPR + hinting)",
            Row::With => "with autoballoon",
            Row::NoBalloon => "no balloon",
        })
    }
}

/// The demo's phases: shown in the live view, the spike and the migrations shaded in the plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    #[default]
    Boot,
    Shrink,
    Spike { threads: u32, mib: u64 },
    /// The spike's memory kept as headroom for `hold` s, then given back over `fade` s.
    ShrinkBack { hold: u64, fade: u64 },
    /// The controller paused and the guest given all its memory back, before the first fill.
    FullSize,
    /// `fill` dirties memory and frees it (on the row's source guest).
    Fill(Row),
    /// The idle time between the free and the migration.
    Idle(Row),
    Migration(Row),
    /// Booting the guest without a balloon.
    BootBare,
    Check,
}

impl Phase {
    /// Shaded in the plot.
    fn shaded(self) -> bool {
        matches!(self, Phase::Spike { .. } | Phase::Migration(_))
    }

    /// Phases on the guest without a balloon, which the controller does not manage: the
    /// live view shows only its QEMU's RSS then.
    fn on_bare_guest(self) -> bool {
        matches!(self, Phase::BootBare | Phase::Fill(Row::NoBalloon) | Phase::Idle(Row::NoBalloon) | Phase::Migration(Row::NoBalloon))
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Phase::Boot => write!(f, "boot"),
            Phase::Shrink => write!(f, "autoballoon shrinks the idle guest"),
            Phase::Spike { threads, mib } => write!(f, "spike: {threads} threads x {mib} MiB"),
            Phase::ShrinkBack { hold, fade } => write!(f, "spike headroom: kept {hold} s, then given back over {fade} s; free page reporting returns its free memory to the host meanwhile"),
            Phase::FullSize => write!(f, "autoballoon paused, guest back at full size"),
            Phase::Fill(r) => write!(f, "dirty and free memory ({r})"),
            Phase::Idle(Row::QemuBest) => write!(f, "idle until free page reporting has drained ({})", Row::QemuBest),
            Phase::Idle(r) => write!(f, "idle ({r})"),
            Phase::Migration(r) => write!(f, "migration: {r}"),
            Phase::BootBare => write!(f, "boot a second guest without a balloon"),
            Phase::Check => write!(f, "check"),
        }
    }
}

/// What the live view shows and the plot gets: phases, and the source QEMU's RSS.
#[derive(Default)]
struct Phases {
    current: Phase,
    spans: Vec<(f64, f64, Phase)>,
    /// The QEMU process whose RSS the live view samples (the current source of the row).
    source_pid: Option<u32>,
    /// (seconds since the demo started, MiB) samples of that RSS.
    rss: Vec<(f64, f64)>,
}

struct Live {
    phases: Arc<Mutex<Phases>>,
    t0: Instant,
    stop: Arc<AtomicBool>,
}

impl Live {
    fn phase(&self, phase: Phase) {
        let t = self.t0.elapsed().as_secs_f64();
        let mut p = self.phases.lock().unwrap();
        if let Some(last) = p.spans.last_mut() {
            last.1 = t;
        }
        p.spans.push((t, t, phase));
        p.current = phase;
        println!("==> {phase}");
    }

    fn source(&self, q: &Qemu) {
        self.phases.lock().unwrap().source_pid = Some(q.pid());
    }
}

fn wait_size(vm: &VmHandle, timeout: Duration, what: &str, cond: impl Fn(Kib) -> bool) -> Result<Duration, String> {
    wait_for(timeout, Duration::from_millis(200), || vm.snapshot().known_size().is_some_and(&cond)).ok_or_else(|| format!("timed out after {timeout:?} waiting for {what} (size {})", vm.snapshot().size))
}

/// How long QEMU's best waits at most for free page reporting to drain.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(180);
/// Drained: the source QEMU's RSS fell less than [`DRAIN_SLACK_MIB`] over this long
/// (reporting runs in 2 s steps, so three steps reported nothing more).
const DRAIN_QUIET: Duration = Duration::from_secs(6);
const DRAIN_SLACK_MIB: f64 = 8.0;

/// The wait for free page reporting to drain before QEMU's best migrates.
#[derive(Debug, Clone, Copy)]
struct Drain {
    waited: Duration,
    /// The RSS had stopped falling (false: [`DRAIN_TIMEOUT`] passed first).
    settled: bool,
}

/// Waits at least `min`, then until the QEMU process `pid`'s RSS stops falling, at most
/// `timeout`; one progress line every 10 s.
fn wait_drained(pid: u32, min: Duration, timeout: Duration) -> Drain {
    let t0 = Instant::now();
    let mut seen: Vec<(Instant, f64)> = Vec::new();
    let mut said = t0;
    loop {
        let now = Instant::now();
        if let Some(r) = rss_of(pid) {
            seen.push((now, r.mib_f64()));
        }
        seen.retain(|(t, _)| now.duration_since(*t) <= DRAIN_QUIET);
        let full_window = seen.first().is_some_and(|(t, _)| now.duration_since(*t) + Duration::from_millis(600) >= DRAIN_QUIET);
        let fell = match (seen.iter().map(|p| p.1).reduce(f64::max), seen.last()) {
            (Some(max), Some(last)) => max - last.1,
            _ => f64::INFINITY,
        };
        let waited = t0.elapsed();
        if waited >= min && full_window && fell < DRAIN_SLACK_MIB {
            return Drain { waited, settled: true };
        }
        if waited >= timeout {
            return Drain { waited, settled: false };
        }
        if now.duration_since(said) >= Duration::from_secs(10) {
            said = now;
            println!("    ... free page reporting still draining after {:.0} s (QEMU RSS {:.0} MiB)", waited.as_secs_f64(), seen.last().map_or(f64::NAN, |p| p.1));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

struct MigrationRow {
    row: Row,
    /// The guest's logical size when the migration started.
    size_before: Kib,
    /// The source QEMU's resident memory then (what the host pays for the guest).
    rss_before: Option<Kib>,
    info: Migrated,
}

pub fn run(a: DemoArgs) -> Result<(), String> {
    let image = crate::GuestImage::given_or_env(a.image.as_deref()).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let out = a.out.canonicalize().unwrap_or(a.out.clone());
    let configured = Kib::from_mib_saturating(a.memory_mib);
    let fill_mib = a.fill_mib.unwrap_or(a.memory_mib * 3 / 4);
    let bandwidth = a.bandwidth_mib << 20;
    let idle_time = Duration::from_secs(a.idle_s);
    println!("autoballoon demo: a {} MiB guest under TCG; logs, plot and summary in {}", a.memory_mib, out.display());
    println!(
        "Three live migrations from the same state ({fill_mib} MiB dirtied and freed, migrated at {} MiB/s): {}, given the time \
         free page reporting needs to drain; {} after {} s idle; and {} on a second guest.",
        a.bandwidth_mib, Row::QemuBest, Row::With, a.idle_s, Row::NoBalloon
    );

    let live = Live { phases: Arc::default(), t0: Instant::now(), stop: Arc::default() };
    live.phase(Phase::Boot);
    let qemu = a.qemu.clone().unwrap_or_else(crate::qemu_binary);
    // QEMU's two switches on, as docs/migration.md tells operators to run their VMs.
    let spec = |name: &str| VmSpec { qemu: qemu.clone(), free_page_reporting: true, free_page_hint: true, ..VmSpec::new(name, configured) };
    let mut vm_a = step("starting QEMU", Qemu::start(&image, spec("demo-a"), &out))?;
    live.source(&vm_a);
    let qemu_version = step("QMP", Qmp::connect_with_retry(&vm_a.qmp_ctl, Instant::now() + Duration::from_secs(10)))?.version().to_string();
    println!("    QEMU {qemu_version} ({})", qemu.display());
    let boot = step("booting the guest", vm_a.wait_booted(Duration::from_secs(120)))?;
    println!("    guest booted in {:.1} s", boot.as_secs_f64());

    let config = Config {
        controller: ControllerConfig::default(),
        defaults: PolicyConfig::default(),
        vms: vec![VmConfig { agent: Some(vm_a.agent.clone()), ..VmConfig::new("demo", vm_a.qmp.clone()) }],

        ..Default::default()
    };
    let logger = Logger::new(LogFormat::Text, false).to_file(&out.join("controller.log")).map_err(|e| format!("cannot write the controller log: {e}"))?;
    // The controller's history is timed from its start; the phases from the demo's.
    let ctl_t0 = live.t0.elapsed().as_secs_f64();
    let ctl = Controller::start(&config, logger);
    let vm = &ctl.vm("demo").expect("the demo VM is configured");
    let view = spawn_live_view(vm.status_view(), live.phases.clone(), live.t0, live.stop.clone());

    let result = (|| -> Result<(Vec<MigrationRow>, Summary), String> {
        live.phase(Phase::Shrink);
        wait_size(vm, Duration::from_secs(60), "the idle guest to shrink to 25 %", |s| s <= Kib(configured.0 / 4))?;
        let idle = wait_vm_settled(vm, Duration::from_secs(60))?;

        live.phase(Phase::Spike { threads: a.spike_threads, mib: a.spike_mib });
        let cmd = format!("spike {} {} {} 0 1", a.spike_threads, a.spike_mib, a.spike_hold_s);
        let peak = Arc::new(Mutex::new(Kib(0)));
        let (pk, st, stop_peak) = (peak.clone(), vm.status_view(), Arc::new(AtomicBool::new(false)));
        let sp = stop_peak.clone();
        let watcher = std::thread::spawn(move || {
            while !sp.load(Ordering::SeqCst) {
                let s = st.snapshot().size;
                let mut p = pk.lock().unwrap();
                *p = (*p).max(s);
                drop(p);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let spike = step("spike", vm_a.console.run(&cmd, Duration::from_secs(300)));
        stop_peak.store(true, Ordering::SeqCst);
        let _ = watcher.join();
        let spike = spike?;
        let spike_ok = spike.status == 0 && spike.text.contains("failed=0");

        // The spike's memory stays as headroom (so a spike that comes back starts on free
        // memory, docs/spikes.md): with free page reporting on, as here, for
        // `spike_hold_fpr_s`, while reporting gives its free memory back to the host (the
        // live view's QEMU RSS); the demo goes on once the size settled, not ten minutes on.
        let (hold, fade) = (config.defaults.spike_hold_fpr_s, config.defaults.spike_fade_s);
        live.phase(Phase::ShrinkBack { hold, fade });
        let after = wait_vm_settled(vm, Duration::from_secs(60))?;

        // Row 1, QEMU's best alone: the controller paused, the guest at full size, free page
        // reporting given the time it needs.
        live.phase(Phase::FullSize);
        vm.command(VmCommand::Pause);
        wait_for(Duration::from_secs(10), Duration::from_millis(50), || vm.snapshot().state == autoballoon::controller::VmState::Paused)
            .ok_or("the controller did not pause")?;
        let ctl_a = step("QMP", Qmp::connect_with_retry(&vm_a.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
        step("balloon", ctl_a.set_balloon_guest_size(configured.to_bytes_saturating().0))?;
        wait_size(vm, Duration::from_secs(60), "the guest to be back at full size", |s| s >= configured)?;
        // Destinations start before the fill, so the idle time is idle.
        let (vm_b, _) = step("starting the destination", Qemu::start_incoming(&image, spec("demo-b"), &out))?;
        live.phase(Phase::Fill(Row::QemuBest));
        fill(&vm_a, fill_mib)?;
        live.phase(Phase::Idle(Row::QemuBest));
        let drain = wait_drained(vm_a.pid(), idle_time, DRAIN_TIMEOUT);
        live.phase(Phase::Migration(Row::QemuBest));
        let (before, rss) = (vm.snapshot().size, rss_of(vm_a.pid()));
        let info = step("migration", migrate(&ctl_a, &vm_b, bandwidth, Duration::from_secs(300)))?;
        let best = MigrationRow { row: Row::QemuBest, size_before: before, rss_before: rss, info };
        drop(ctl_a);
        vm_a.kill();
        live.source(&vm_b);
        vm.command(VmCommand::Retarget { qmp: vm_b.qmp.clone(), agent: Some(vm_b.agent.clone()) });

        // Row 2, with autoballoon: the same guest under its controller, settled, then the
        // same fill with the controller running, as in a deployment: it grows the guest for
        // the fill and keeps the headroom a recent need earns. (Filled with the controller
        // paused and resumed at the free, its first sample came from before or after the
        // free by chance, and the row sent 106 or 152 MiB.)
        let (vm_c, _) = step("starting the destination", Qemu::start_incoming(&image, spec("demo-c"), &out))?;
        let ctl_b = step("QMP", Qmp::connect_with_retry(&vm_b.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
        live.phase(Phase::Shrink);
        vm.command(VmCommand::Resume);
        wait_vm_settled(vm, Duration::from_secs(60))?;
        live.phase(Phase::Fill(Row::With));
        fill(&vm_b, fill_mib)?;
        live.phase(Phase::Idle(Row::With));
        std::thread::sleep(idle_time);
        live.phase(Phase::Migration(Row::With));
        let (before, rss) = (vm.snapshot().size, rss_of(vm_b.pid()));
        let info = step("migration", migrate(&ctl_b, &vm_c, bandwidth, Duration::from_secs(300)))?;
        let with = MigrationRow { row: Row::With, size_before: before, rss_before: rss, info };
        drop(ctl_b);
        drop(vm_b);
        live.source(&vm_c);
        vm.command(VmCommand::Retarget { qmp: vm_c.qmp.clone(), agent: Some(vm_c.agent.clone()) });

        // Row 3, no balloon: its own guest (device properties are fixed at QEMU's start),
        // which the controller never sees, and no agent in it.
        live.phase(Phase::BootBare);
        let bare_spec = |name: &str| VmSpec { free_page_reporting: false, free_page_hint: false, agent: GuestAgent::None, ..spec(name) };
        let vm_f = step("starting the guest without a balloon", Qemu::start(&image, bare_spec("demo-f"), &out))?;
        live.source(&vm_f);
        step("booting the guest without a balloon", vm_f.wait_booted(Duration::from_secs(120)))?;
        let ctl_f = step("QMP", Qmp::connect_with_retry(&vm_f.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
        let (vm_g, _) = step("starting the destination", Qemu::start_incoming(&image, bare_spec("demo-g"), &out))?;
        live.phase(Phase::Fill(Row::NoBalloon));
        fill(&vm_f, fill_mib)?;
        live.phase(Phase::Idle(Row::NoBalloon));
        std::thread::sleep(idle_time);
        live.phase(Phase::Migration(Row::NoBalloon));
        let rss = rss_of(vm_f.pid());
        let info = step("migration", migrate(&ctl_f, &vm_g, bandwidth, Duration::from_secs(300)))?;
        let bare = MigrationRow { row: Row::NoBalloon, size_before: configured, rss_before: rss, info };
        drop(ctl_f);
        drop(vm_f);
        live.source(&vm_c);
        let bare_dest_ok = vm_g.console.run("true", Duration::from_secs(30)).is_ok_and(|o| o.status == 0);
        drop(vm_g);

        live.phase(Phase::Check);
        // The kernel log travels with the guest: dmesg on the final QEMU covers the whole run.
        let dmesg = step("dmesg", vm_c.console.run("dmesg", Duration::from_secs(30)))?;
        let oom_kills = crate::count_oom_kills(&dmesg.text);
        let peak = *peak.lock().unwrap();
        Ok((vec![best, with, bare], Summary { idle, peak, after, spike_ok, oom_kills, boot, bare_dest_ok, fill_mib, idle_s: a.idle_s, drain, qemu: qemu_version.clone() }))
    })();

    live.stop.store(true, Ordering::SeqCst);
    let _ = view.join();
    let phases = std::mem::take(&mut *live.phases.lock().unwrap());
    let history = vm.history();
    ctl.stop();
    let total = live.t0.elapsed();
    let (rows, summary) = result?;
    report(&out, configured, &rows, &summary, &phases, ctl_t0, &history, a.bandwidth_mib, total)
}

struct Summary {
    idle: Kib,
    peak: Kib,
    after: Kib,
    spike_ok: bool,
    oom_kills: usize,
    boot: Duration,
    /// The guest without a balloon answered on its destination after the migration.
    bare_dest_ok: bool,
    fill_mib: u64,
    idle_s: u64,
    /// How long QEMU's best waited for free page reporting to drain.
    drain: Drain,
    /// The QEMU version, from its QMP greeting.
    qemu: String,
}

fn spawn_live_view(status: autoballoon::controller::StatusView, phases: Arc<Mutex<Phases>>, t0: Instant, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        println!("    {:>5}  {:>9} {:>9} {:>9} {:>9} {:>9}  phase", "t(s)", "size MiB", "target", "used", "balloon", "QEMU RSS");
        while !stop.load(Ordering::SeqCst) {
            let s = status.snapshot();
            let (phase, pid) = {
                let p = phases.lock().unwrap();
                (p.current, p.source_pid)
            };
            let t = t0.elapsed().as_secs_f64();
            let rss = pid.and_then(rss_of);
            if let Some(r) = rss {
                phases.lock().unwrap().rss.push((t, r.mib_f64()));
            }
            let f = |k: Option<Kib>| k.map(|k| format!("{:.0}", k.mib_f64())).unwrap_or_else(|| "-".into());
            // The guest without a balloon is not the controller's: show only its RSS.
            let ours = !phase.on_bare_guest();
            let known = |k: Kib| if ours { Some(k) } else { None };
            println!(
                "    {t:>5.0}  {:>9} {:>9} {:>9} {:>9} {:>9}  {phase}",
                f(known(s.size)), f(s.target.filter(|_| ours)), f(s.used.filter(|_| ours)), f(known(s.configured.saturating_sub(s.size))), f(rss)
            );
            let _ = std::io::stdout().flush();
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    })
}

#[allow(clippy::too_many_arguments)]
fn report(out: &Path, configured: Kib, rows: &[MigrationRow], s: &Summary, phases: &Phases, ctl_t0: f64, history: &[autoballoon::controller::Point], bw: u64, total: Duration) -> Result<(), String> {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let get = |r: Row| rows.iter().find(|m| m.row == r).expect("every row ran");
    let (best, bare) = (get(Row::QemuBest), get(Row::NoBalloon));
    // Speedups: the other row's seconds over this row's (above 1: this row is faster).
    let speedup = |of: &MigrationRow, vs: &MigrationRow| vs.info.seconds() / of.info.seconds().max(0.001);
    let sent_ratio = |of: &MigrationRow, vs: &MigrationRow| of.info.bytes_sent() as f64 / vs.info.bytes_sent().max(1) as f64;
    let drained = format!("{:.0} s{}", s.drain.waited.as_secs_f64(), if s.drain.settled { "" } else { ", still draining" });
    println!();
    println!("Guest {:.0} MiB: booted in {:.1} s; idle size {:.0} MiB; spike peak {:.0} MiB; after the spike {:.0} MiB; spike completed: {}; OOM kills: {}",
        configured.mib_f64(), s.boot.as_secs_f64(), s.idle.mib_f64(), s.peak.mib_f64(), s.after.mib_f64(), s.spike_ok, s.oom_kills);
    println!();
    println!("Live migration to a new QEMU {} on 127.0.0.1, every row from the same state: {} MiB dirtied by `fill` and freed,", s.qemu, s.fill_mib);
    println!("then idle ({} s; QEMU's best until free page reporting drained: {drained}), then migrated with a {bw} MiB/s cap.", s.idle_s);
    println!("  {:<34} {:>6} {:>9} {:>9} {:>8} {:>9} {:>10} {:>9}", "", "idle", "guest", "QEMU RSS", "", "", "speedup vs", "MiB sent");
    println!("  {:<34} {:>6} {:>9} {:>9} {:>8} {:>9} {:>10} {:>9}", "", "s", "MiB", "MiB", "seconds", "MiB sent", "no balloon", "vs best");
    for r in rows {
        let idle = if r.row == Row::QemuBest { s.drain.waited.as_secs_f64() } else { s.idle_s as f64 };
        println!("  {:<34} {:>6.0} {:>9.0} {:>9} {:>8.2} {:>9.1} {:>9.2}x {:>8.2}x",
            format!("{} ({})", r.row, r.row.route()), idle, r.size_before.mib_f64(), r.rss_before.map_or("-".into(), |k| format!("{:.0}", k.mib_f64())),
            r.info.seconds(), mib(r.info.bytes_sent()), speedup(r, bare), sent_ratio(r, best));
    }
    for r in rows {
        println!("  {}: {}", r.row, r.row.how());
    }
    println!("  speedup = no balloon's seconds / this row's (above 1: faster); MiB sent vs best = this row's bytes / QEMU's best's.");
    println!("  Free page reporting hands freed memory back in 2 s steps (about 250 MiB each here), so QEMU's best is");
    println!("  given the time it needs; autoballoon migrates after --idle-s. Hinting skips free pages when a migration starts.");
    if !s.bare_dest_ok {
        println!("  Note: the guest without a balloon did not answer on its destination after the migration.");
    }
    let with = get(Row::With);
    let saved = 100.0 * (1.0 - sent_ratio(with, bare));
    println!("  with autoballoon: {:.1}x faster than no balloon, {saved:.0} % fewer bytes sent; {:.2}x the bytes QEMU's best sent ({:.2}x its time)",
        speedup(with, bare), sent_ratio(with, best), with.info.seconds() / best.info.seconds().max(0.001));
    println!("  (the demo took {:.0} s)", total.as_secs_f64());

    let shift = |t: f64| t - ctl_t0;
    let series = [
        Series { name: "guest size", color: "#1f77b4", points: history.iter().map(|p| (p.t, p.size.mib_f64())).collect() },
        Series { name: "target", color: "#ff7f0e", points: history.iter().map(|p| (p.t, p.target.map_or(f64::NAN, |t| t.mib_f64()))).collect() },
        Series { name: "used", color: "#2ca02c", points: history.iter().map(|p| (p.t, p.used.map_or(f64::NAN, |u| u.mib_f64()))).collect() },
        Series {
            name: "source QEMU RSS (A, B, C, guest without a balloon)",
            color: "#9467bd",
            points: phases.rss.iter().map(|&(t, v)| (shift(t), v)).filter(|p| p.0 >= 0.0).collect(),
        },
    ];
    let labels: Vec<(f64, f64, String)> = phases.spans.iter().filter(|sp| sp.2.shaded()).map(|sp| (shift(sp.0), shift(sp.1), sp.2.to_string())).collect();
    let spans: Vec<Span> = labels.iter().map(|(from, to, label)| Span { from: *from, to: *to, label }).collect();
    // QEMU's RSS can exceed the guest's memory by QEMU's own.
    let y_max = series[3].points.iter().map(|p| p.1).fold(configured.mib_f64(), f64::max);
    let svg = plot::svg("autoballoon demo: guest size, target, used memory and host RSS", &series, &spans, y_max);
    let plot_path = out.join("demo.svg");
    std::fs::write(&plot_path, svg).map_err(|e| format!("cannot write {}: {e}", plot_path.display()))?;
    let summary = serde_json::json!({
        "qemu": s.qemu,
        "configured_mib": configured.mib_f64(), "boot_s": s.boot.as_secs_f64(), "idle_mib": s.idle.mib_f64(), "spike_peak_mib": s.peak.mib_f64(),
        "after_spike_mib": s.after.mib_f64(), "spike_completed": s.spike_ok, "oom_kills": s.oom_kills, "bandwidth_mib_s": bw,
        "fill_mib": s.fill_mib, "idle_before_migration_s": s.idle_s, "qemu_best_drain_s": s.drain.waited.as_secs_f64(), "qemu_best_drained": s.drain.settled,
        "no_balloon_destination_answered": s.bare_dest_ok, "demo_s": total.as_secs_f64(),
        "migrations": rows.iter().map(|r| serde_json::json!({"row": r.row.key(), "label": r.row.to_string(), "route": r.row.route(), "how": r.row.how(),
            "guest_size_mib": r.size_before.mib_f64(), "source_rss_mib": r.rss_before.map(|k| k.mib_f64()),
            "seconds": r.info.seconds(), "qemu_total_time_ms": r.info.info.total_time_ms, "ram_transferred_bytes": r.info.bytes_sent(), "downtime_ms": r.info.info.downtime_ms,
            "speedup_vs_no_balloon": speedup(r, bare), "bytes_vs_qemu_best": sent_ratio(r, best)})).collect::<Vec<_>>(),
        "speedup_vs_no_balloon": speedup(with, bare), "bytes_saved_percent": saved, "bytes_vs_qemu_best": sent_ratio(with, best),
    });
    std::fs::write(out.join("summary.json"), format!("{summary:#}\n")).map_err(|e| e.to_string())?;
    println!();
    println!("Plot: {}   Summary: {}   Controller log: {}", plot_path.display(), out.join("summary.json").display(), out.join("controller.log").display());
    if s.oom_kills > 0 || !s.spike_ok {
        return Err(format!("the guest had {} OOM kills; spike completed: {}", s.oom_kills, s.spike_ok));
    }
    Ok(())
}
