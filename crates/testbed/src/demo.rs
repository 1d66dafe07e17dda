//! `autoballoon-demo`: the main job on an embedded default guest. Boots a 2 GiB guest
//! under TCG with the controller, shows it shrink, spike and shrink back with no OOM kill,
//! then live-migrates it twice from the same state, without and with autoballoon, and
//! prints a table and writes a plot.

use crate::plot::{self, Series, Span};
use crate::{migrate, wait_for, GuestImage, Migrated, Qemu, VmSpec};
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

/// Phases shown in the live view and shaded in the plot.
#[derive(Default)]
struct Phases {
    current: String,
    spans: Vec<(f64, f64, String)>,
}

struct Live {
    phases: Arc<Mutex<Phases>>,
    t0: Instant,
    stop: Arc<AtomicBool>,
}

impl Live {
    fn phase(&self, name: &str) {
        let t = self.t0.elapsed().as_secs_f64();
        let mut p = self.phases.lock().unwrap();
        if let Some(last) = p.spans.last_mut() {
            last.1 = t;
        }
        p.spans.push((t, t, name.to_string()));
        p.current = name.to_string();
        println!("==> {name}");
    }
}

fn step<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

fn wait_size(vm: &VmHandle, timeout: Duration, what: &str, cond: impl Fn(Kib) -> bool) -> Result<Duration, String> {
    wait_for(timeout, Duration::from_millis(200), || vm.snapshot().known_size().is_some_and(&cond)).ok_or_else(|| format!("timed out after {timeout:?} waiting for {what} (size {})", vm.snapshot().size))
}

fn wait_settled(vm: &VmHandle, timeout: Duration) -> Result<Kib, String> {
    crate::wait_settled(timeout, || vm.snapshot().known_size().unwrap_or(Kib(u64::MAX))).ok_or_else(|| format!("the guest size did not settle within {timeout:?}"))
}

struct MigrationRow {
    label: &'static str,
    size_before: Kib,
    info: Migrated,
}

pub fn run(a: DemoArgs) -> Result<(), String> {
    let image = match &a.image {
        Some(d) => GuestImage::at(d),
        None => GuestImage::from_env(),
    }
    .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let out = a.out.canonicalize().unwrap_or(a.out.clone());
    let configured = Kib::from_mib_saturating(a.memory_mib);
    let fill_mib = a.fill_mib.unwrap_or(a.memory_mib * 3 / 4);
    let bandwidth = a.bandwidth_mib << 20;
    println!("autoballoon demo: a {} MiB guest under TCG; logs, plot and summary in {}", a.memory_mib, out.display());

    let live = Live { phases: Arc::default(), t0: Instant::now(), stop: Arc::default() };
    live.phase("boot");
    let qemu = a.qemu.clone().unwrap_or_else(crate::qemu_binary);
    let spec = |name: &str| VmSpec { qemu: qemu.clone(), ..VmSpec::new(name, configured) };
    let mut vm_a = step("starting QEMU", Qemu::start(&image, spec("demo-a"), &out))?;
    let qemu_version = step("QMP", Qmp::connect_with_retry(&vm_a.qmp_ctl, Instant::now() + Duration::from_secs(10)))?.version().to_string();
    println!("    QEMU {qemu_version} ({})", qemu.display());
    let boot = step("booting the guest", vm_a.wait_booted(Duration::from_secs(120)))?;
    println!("    guest booted in {:.1} s", boot.as_secs_f64());

    let config = Config {
        controller: ControllerConfig::default(),
        defaults: PolicyConfig::default(),
        vms: vec![VmConfig { agent: Some(vm_a.agent.clone()), ..VmConfig::new("demo", vm_a.qmp.clone()) }],
    };
    let logger = Logger::new(LogFormat::Text, false).to_file(&out.join("controller.log")).map_err(|e| format!("cannot write the controller log: {e}"))?;
    let ctl = Controller::start(&config, logger);
    let vm = ctl.vm("demo").expect("the demo VM is configured");
    let view = spawn_live_view(vm.status_view(), live.phases.clone(), live.t0, live.stop.clone());

    let result = (|| -> Result<(Vec<MigrationRow>, Summary), String> {
        live.phase("autoballoon shrinks the idle guest");
        wait_size(vm, Duration::from_secs(60), "the idle guest to shrink to 25 %", |s| s <= Kib(configured.0 / 4))?;
        let idle = wait_settled(vm, Duration::from_secs(60))?;

        live.phase(&format!("spike: {} threads x {} MiB", a.spike_threads, a.spike_mib));
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

        live.phase("autoballoon shrinks it back");
        let after = wait_settled(vm, Duration::from_secs(90))?;

        live.phase("hold at full size, dirty memory");
        vm.command(VmCommand::Pause);
        wait_for(Duration::from_secs(10), Duration::from_millis(50), || vm.snapshot().state == autoballoon::controller::VmState::Paused)
            .ok_or("the controller did not pause")?;
        let ctl_a = step("QMP", Qmp::connect_with_retry(&vm_a.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
        step("balloon", ctl_a.set_balloon_guest_size(configured.to_bytes_saturating().0))?;
        wait_size(vm, Duration::from_secs(60), "the guest to be back at full size", |s| s >= configured)?;
        step("fill", vm_a.console.run(&format!("fill {fill_mib}"), Duration::from_secs(120)))?;

        live.phase("migration without autoballoon");
        let (vm_b, port) = step("starting the destination", Qemu::start_incoming(&image, spec("demo-b"), &out))?;
        let before = vm.snapshot().size;
        let without = step("migration", migrate(&ctl_a, port, bandwidth, Duration::from_secs(300)))?;
        drop(ctl_a);
        vm_a.kill();
        vm.command(VmCommand::Retarget { qmp: vm_b.qmp.clone(), agent: Some(vm_b.agent.clone()) });
        let rows_without = MigrationRow { label: "without autoballoon", size_before: before, info: without };

        live.phase("autoballoon shrinks the same guest");
        vm.command(VmCommand::Resume);
        wait_size(vm, Duration::from_secs(90), "the guest to shrink", |s| s <= Kib(configured.0 / 4))?;
        wait_settled(vm, Duration::from_secs(60))?;

        live.phase("migration with autoballoon");
        let (vm_c, port) = step("starting the destination", Qemu::start_incoming(&image, spec("demo-c"), &out))?;
        let ctl_b = step("QMP", Qmp::connect_with_retry(&vm_b.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
        let before = vm.snapshot().size;
        let with = step("migration", migrate(&ctl_b, port, bandwidth, Duration::from_secs(300)))?;
        drop(ctl_b);
        drop(vm_b);
        vm.command(VmCommand::Retarget { qmp: vm_c.qmp.clone(), agent: Some(vm_c.agent.clone()) });
        let rows_with = MigrationRow { label: "with autoballoon", size_before: before, info: with };

        live.phase("check");
        // The kernel log travels with the guest: dmesg on the final QEMU covers the whole run.
        let dmesg = step("dmesg", vm_c.console.run("dmesg", Duration::from_secs(30)))?;
        let oom_kills = crate::count_oom_kills(&dmesg.text);
        Ok((vec![rows_without, rows_with], Summary { idle, peak: { let p = *peak.lock().unwrap(); p }, after, spike_ok, oom_kills, boot, qemu: qemu_version.clone() }))
    })();

    live.stop.store(true, Ordering::SeqCst);
    let _ = view.join();
    let phases = std::mem::take(&mut *live.phases.lock().unwrap());
    let history = vm.history();
    ctl.stop();
    let (rows, summary) = result?;
    report(&out, configured, &rows, &summary, &phases, &history, a.bandwidth_mib)
}

struct Summary {
    idle: Kib,
    peak: Kib,
    after: Kib,
    spike_ok: bool,
    oom_kills: usize,
    boot: Duration,
    /// The QEMU version, from its QMP greeting.
    qemu: String,
}

fn spawn_live_view(status: autoballoon::controller::StatusView, phases: Arc<Mutex<Phases>>, t0: Instant, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        println!("    {:>5}  {:>9} {:>9} {:>9} {:>9}  phase", "t(s)", "size MiB", "target", "used", "balloon");
        while !stop.load(Ordering::SeqCst) {
            let s = status.snapshot();
            let phase = phases.lock().unwrap().current.clone();
            let f = |k: Option<Kib>| k.map(|k| format!("{:.0}", k.mib_f64())).unwrap_or_else(|| "-".into());
            println!(
                "    {:>5.0}  {:>9.0} {:>9} {:>9} {:>9.0}  {phase}",
                t0.elapsed().as_secs_f64(), s.size.mib_f64(), f(s.target), f(s.used), s.configured.saturating_sub(s.size).mib_f64()
            );
            let _ = std::io::stdout().flush();
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    })
}

fn report(out: &Path, configured: Kib, rows: &[MigrationRow], s: &Summary, phases: &Phases, history: &[autoballoon::controller::Point], bw: u64) -> Result<(), String> {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!();
    println!("Guest {:.0} MiB: booted in {:.1} s; idle size {:.0} MiB; spike peak {:.0} MiB; after the spike {:.0} MiB; spike completed: {}; OOM kills: {}",
        configured.mib_f64(), s.boot.as_secs_f64(), s.idle.mib_f64(), s.peak.mib_f64(), s.after.mib_f64(), s.spike_ok, s.oom_kills);
    println!();
    println!("Live migration to a second QEMU {} on 127.0.0.1 ({bw} MiB/s cap), same guest state:", s.qemu);
    println!("  {:<22} {:>14} {:>9} {:>12} {:>13}", "", "guest size MiB", "seconds", "MiB sent", "downtime ms");
    for r in rows {
        println!("  {:<22} {:>14.0} {:>9.2} {:>12.1} {:>13}", r.label, r.size_before.mib_f64(), r.info.seconds(),
            mib(r.info.bytes_sent()), r.info.info.downtime_ms.map(|d| d.to_string()).unwrap_or_else(|| "-".into()));
    }
    let (w, a) = (&rows[0].info, &rows[1].info);
    let speedup = w.seconds() / a.seconds().max(0.001);
    let saved = 100.0 * (1.0 - a.bytes_sent() as f64 / w.bytes_sent().max(1) as f64);
    println!("  speedup {speedup:.1}x, {saved:.0} % fewer bytes sent");

    let series = [
        Series { name: "guest size", color: "#1f77b4", points: history.iter().map(|p| (p.t, p.size.mib_f64())).collect() },
        Series { name: "target", color: "#ff7f0e", points: history.iter().map(|p| (p.t, p.target.map_or(f64::NAN, |t| t.mib_f64()))).collect() },
        Series { name: "used", color: "#2ca02c", points: history.iter().map(|p| (p.t, p.used.map_or(f64::NAN, |u| u.mib_f64()))).collect() },
    ];
    // Phases are timed from the demo's start, the history from the controller's: near enough
    // (the controller starts right after boot), so shift spans by the boot phase.
    let shift = phases.spans.iter().find(|sp| sp.2 != "boot").map(|sp| sp.0).unwrap_or(0.0);
    let spans: Vec<Span> = phases.spans.iter().filter(|sp| sp.2.starts_with("spike") || sp.2.starts_with("migration"))
        .map(|sp| Span { from: sp.0 - shift, to: sp.1 - shift, label: &sp.2 }).collect();
    let svg = plot::svg("autoballoon demo: guest size, target and used memory", &series, &spans, configured.mib_f64());
    let plot_path = out.join("demo.svg");
    std::fs::write(&plot_path, svg).map_err(|e| format!("cannot write {}: {e}", plot_path.display()))?;
    let summary = serde_json::json!({
        "qemu": s.qemu,
        "configured_mib": configured.mib_f64(), "boot_s": s.boot.as_secs_f64(), "idle_mib": s.idle.mib_f64(), "spike_peak_mib": s.peak.mib_f64(),
        "after_spike_mib": s.after.mib_f64(), "spike_completed": s.spike_ok, "oom_kills": s.oom_kills, "bandwidth_mib_s": bw,
        "migrations": rows.iter().map(|r| serde_json::json!({"label": r.label, "guest_size_mib": r.size_before.mib_f64(),
            "seconds": r.info.seconds(), "qemu_total_time_ms": r.info.info.total_time_ms, "ram_transferred_bytes": r.info.bytes_sent(), "downtime_ms": r.info.info.downtime_ms})).collect::<Vec<_>>(),
        "speedup": speedup, "bytes_saved_percent": saved,
    });
    std::fs::write(out.join("summary.json"), format!("{summary:#}\n")).map_err(|e| e.to_string())?;
    println!();
    println!("Plot: {}   Summary: {}   Controller log: {}", plot_path.display(), out.join("summary.json").display(), out.join("controller.log").display());
    if s.oom_kills > 0 || !s.spike_ok {
        return Err(format!("the guest had {} OOM kills; spike completed: {}", s.oom_kills, s.spike_ok));
    }
    Ok(())
}
