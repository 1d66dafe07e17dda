//! `make bench-host`: the host controller's own cost per managed VM at 1, 4 and 16 VMs
//! (fake QEMUs and agents, plus one real guest), the iBalloon seed's mixed-workload
//! experiment on four real guests (static sizes against the balancer), E1 (the ESX
//! paper's balloon overhead: ballooned against configured guests, file-server workload)
//! and A1 (the KVM automatic-ballooning seed: an overcommitted host with swap, with and
//! without the pressure balancer). Writes `bench/host/results.json` and
//! `bench/host/RESULTS.md` (`testbed::hostbench`), merged with the sections of the previous
//! files that this run did not measure.
//!
//! Needs `AUTOBALLOON_BIN` (the release daemon) and `AUTOBALLOON_IMAGE` (the guest image),
//! which `make bench-host` sets, and for A1 `AUTOBALLOON_A1_IMAGE` (the stock image of the
//! kernel series, `kernel/scripts/images.sh`); root (cgroups, a swap file). `HOSTBENCH_ONLY=cost,mixed,e1,a1`
//! (any of them, comma-separated) runs only those sections. Flags after `--`: `--cost-only`,
//! `--mixed-only` (the same as `HOSTBENCH_ONLY=cost` / `mixed`), `--out DIR`.
//! `AUTOBALLOON_BENCH_HOST_WINDOW_S` sets the cost window (60); `AUTOBALLOON_BENCH_E1_*`
//! and `AUTOBALLOON_BENCH_A1_RUNS` the E1 and A1 sizes and runs (`hostbench::e1`, `a1`).

use autoballoon_core::units::{Kib, Pages};
use autoballoon_fakes::{FakeAgentPort, FakeQemu, FakeQemuConfig};
use autoballoon_testbed::hostbench::cost::{self, CostRow, Managed};
use autoballoon_testbed::hostbench::mixed::{self, Setup, Sizing};
use autoballoon_testbed::hostbench::{a1, e1};
use autoballoon_testbed::hostbench::report::Results;
use autoballoon_testbed::{qemu_binary, GuestImage};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Each fake VM: 4 GiB configured.
const FAKE_MIB: u64 = 4096;

/// Fake VMs whose guests use 1024 ± 512 MiB on a 60 s sine (each VM at another phase), with
/// an agent reporting once a second like the real one's default, its balloon following
/// QEMU's size. The fakes live on the driver thread; they stop when it does.
struct FakeFleet {
    tables: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeFleet {
    fn start(n: usize) -> FakeFleet {
        let vms: Vec<(FakeQemu, FakeAgentPort)> = (0..n).map(|_| (FakeQemu::start(FakeQemuConfig::new(Kib::from_mib_saturating(FAKE_MIB))), FakeAgentPort::start())).collect();
        let tables = vms.iter().enumerate().map(|(i, (q, p))| format!("[[vm]]\nname = \"fake{i}\"\nqmp = {:?}\nagent = {:?}\n\n", q.qmp_path().display().to_string(), p.path().display().to_string())).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut tick = 0u32;
            while !s.load(Ordering::SeqCst) {
                let t = t0.elapsed().as_secs_f64();
                for (i, (q, p)) in vms.iter().enumerate() {
                    let angle = std::f64::consts::TAU * (t / 60.0 + i as f64 / n as f64);
                    let used = Kib::from_mib_saturating((1024.0 + 512.0 * angle.sin()) as u64);
                    let size = q.actual();
                    let balloon: Pages = q.configured().saturating_sub(size).to_pages_floor();
                    if p.is_connected() {
                        let _ = p.send_sample(size, size.saturating_sub(used), used, balloon);
                    }
                }
                tick += 1;
                // The next report one second after the previous one started (no drift).
                let next = Duration::from_secs(u64::from(tick));
                while !s.load(Ordering::SeqCst) && t0.elapsed() < next {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        FakeFleet { tables, stop, thread: Some(thread) }
    }
}

impl Drop for FakeFleet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn cost_rows(run: &Path, image: &GuestImage) -> Result<Vec<CostRow>, String> {
    let window = cost::window();
    let mut rows = Vec::new();
    for n in [1, 4, 16] {
        eprintln!("hostbench: controller cost, {n} fake VMs, {} s window", window.as_secs());
        let fakes = FakeFleet::start(n);
        let r = cost::measure(&run.join(format!("cost-{n}")), &fakes.tables, n, n as u64 * 2048, Managed::Fake, window)?;
        eprintln!("hostbench: {n} VMs: {:.2} % CPU ({:.3} % per VM), RSS {} KiB, {} samples, {} actions", r.cost.cpu_percent(), r.cpu_percent_per_vm(), r.cost.rss_kib, r.samples, r.actions);
        rows.push(r);
    }
    eprintln!("hostbench: controller cost, 1 real guest, {} s window", window.as_secs());
    let r = cost::real_guest(image, &run.join("cost-real"), window)?;
    eprintln!("hostbench: real guest: {:.2} % CPU, RSS {} KiB, {} samples, {} actions", r.cost.cpu_percent(), r.cost.rss_kib, r.samples, r.actions);
    rows.push(r);
    Ok(rows)
}

fn qemu_version() -> String {
    std::process::Command::new(qemu_binary()).arg("--version").output().ok().and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string)).unwrap_or_else(|| "QEMU (version unknown)".into())
}

fn today() -> String {
    std::process::Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

/// The first three fields of `/proc/loadavg`.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = args.iter().position(|a| a == "--out").and_then(|i| args.get(i + 1)).map_or_else(|| root.join("bench/host"), PathBuf::from);
    let only: Option<Vec<String>> = if args.iter().any(|a| a == "--cost-only") {
        Some(vec!["cost".into()])
    } else if args.iter().any(|a| a == "--mixed-only") {
        Some(vec!["mixed".into()])
    } else {
        std::env::var("HOSTBENCH_ONLY").ok().filter(|v| !v.trim().is_empty()).map(|v| v.split(',').map(|w| w.trim().to_lowercase()).collect())
    };
    if let Some(bad) = only.iter().flatten().find(|w| !["cost", "mixed", "e1", "a1"].contains(&w.as_str())) {
        eprintln!("hostbench: error: HOSTBENCH_ONLY: unknown section {bad:?} (cost, mixed, e1, a1)");
        return ExitCode::FAILURE;
    }
    let on = |s: &str| only.as_ref().is_none_or(|o| o.iter().any(|w| w == s));
    match run(&root.join("run/bench-host"), &out, [on("cost"), on("mixed"), on("e1"), on("a1")]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hostbench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(run_dir: &Path, out: &Path, [cost_on, mixed_on, e1_on, a1_on]: [bool; 4]) -> Result<(), String> {
    if std::env::var_os("AUTOBALLOON_BIN").is_none() {
        return Err("AUTOBALLOON_BIN is not set: run `make bench-host` (it builds the release daemon and sets it)".into());
    }
    let image = GuestImage::from_env().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let load0 = loadavg();
    let cost = if cost_on { cost_rows(run_dir, &image)? } else { Vec::new() };
    let setup = Setup::default();
    let mixed = if mixed_on {
        let s = mixed::run(&image, &run_dir.join("mixed"), &setup, Sizing::Static)?;
        let b = mixed::run(&image, &run_dir.join("mixed"), &setup, Sizing::IBalloon)?;
        Some((s, b))
    } else {
        None
    };
    let e1 = if e1_on {
        let s = e1::Setup::default();
        let pairs = e1::run(&image, &run_dir.join("e1"), &s)?;
        Some((s, pairs))
    } else {
        None
    };
    let a1 = if a1_on {
        let s = a1::Setup::default();
        // A1 runs on the stock kernel of the project's kernel series where `make bench-host`
        // names it (AUTOBALLOON_A1_IMAGE), else on the default guest image.
        let a1_image = match std::env::var_os("AUTOBALLOON_A1_IMAGE").filter(|v| !v.is_empty()) {
            Some(dir) => GuestImage::at(Path::new(&dir)).map_err(|e| format!("AUTOBALLOON_A1_IMAGE: {e}"))?,
            None => image.clone(),
        };
        let runs = a1::run(&a1_image, &run_dir.join("a1"), &s)?;
        Some((s, runs))
    } else {
        None
    };
    let results = Results { cost, cost_window_s: cost::window().as_secs_f64(), mixed, setup, e1, a1, qemu: qemu_version(), cores: std::thread::available_parallelism().map_or(0, |n| n.get()), date: today(), duration_s: t0.elapsed().as_secs_f64(), loadavg: (load0, loadavg()) };
    print!("{}", results.write(out)?);
    eprintln!("hostbench: wrote {} and {}", out.join("RESULTS.md").display(), out.join("results.json").display());
    Ok(())
}
