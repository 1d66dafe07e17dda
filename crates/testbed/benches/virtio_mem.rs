//! `make kernel-bench-vmem`: the series against virtio-mem, the alternative an mm reviewer
//! names for resizing a guest, side by side in one run, each guest 2 GiB at its largest and
//! shrunk to 256 MiB (2 vCPUs, no agent, QEMU TCG):
//!
//! * **Balloon** (the patched kernel, `kernel/build.sh patched`): 2 GiB of boot memory,
//!   QMP `balloon` to 256 MiB, deflate-on-oom on; the spike's pages come from the
//!   balloon through the allocator hook, without the host.
//! * **virtio-mem** (the stock kernel with `CONFIG_VIRTIO_MEM`, `kernel/build.sh vmem`):
//!   256 MiB of boot memory and a 1,792 MiB virtio-mem device, none of it plugged; blocks
//!   the guest plugs come online movable (`memhp_default_state=online_movable`). Growth
//!   is the host's to decide (QOM `requested-size`), so three cases: the host plugs all of
//!   it and then the spike runs (an oracle that knew the spike was coming: the plug's time
//!   plus the spike's); the host asks for all of it the moment the spike starts (a host
//!   that reacts in no time; the guest plugs while the spike allocates); and, for what a
//!   spike meets before the host has noticed it, the spike with nothing plugged (a failed
//!   spike is the expected outcome there, counted, not an error).
//!
//! Both guests run free page reporting and free page hinting, as the product does.
//!
//! Each round, on each guest: the spike (4 threads × 384 MiB), then the shrink back to
//! 256 MiB when the spike has exited (balloon: QMP `balloon`; virtio-mem: `requested-size`
//! 0, the guest offlines and unplugs), with QEMU's resident memory after it. A failed spike
//! counts its refused thread allocations (`mmaps`: heuristic overcommit refuses a 384 MiB
//! mapping in a guest of 256 MiB) and its OOM kills. At the end each
//! shrunk guest migrates once, idle, to a fresh destination: bytes and seconds.
//!
//! Prints medians; writes them to `run/bench/virtio-mem.json`. Needs
//! `AUTOBALLOON_PATCHED_IMAGE` and `AUTOBALLOON_VMEM_IMAGE` (kernel.mk builds both);
//! `AUTOBALLOON_BENCH_REPS` sets the rounds (3); the guests run under `$AUTOBALLOON_QEMU`.

use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use autoballoon_testbed::guest::{balloon_to, meminfo_kib, oom_kills, run_spike_checked, virtio_mem_request, virtio_mem_resize};
use autoballoon_testbed::bench::stats::median;
use autoballoon_testbed::{migrate, GuestAgent, GuestImage, Qemu, VmSpec};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const GUEST: Kib = Kib::from_mib_saturating(2048);
const SHRUNK: Kib = Kib::from_mib_saturating(256);
/// The virtio-mem device: what the balloon guest has above [`SHRUNK`].
const DEVICE: Kib = Kib(GUEST.0 - SHRUNK.0);
const THREADS: u32 = 4;
const MIB_PER_THREAD: u64 = 384;
/// Shrinking may have to migrate pages out of every block; growing waits on the guest.
const RESIZE_TIMEOUT: Duration = Duration::from_secs(300);
/// The idle migrations' cap: far above what TCG sends, so the bytes decide the time.
const MIGRATION_BANDWIDTH: u64 = 1 << 30;

/// How a guest gets its memory back for a spike.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Growth {
    /// The balloon, through the allocator hook (patched kernel).
    Hook,
    /// virtio-mem, plugged in full before the spike starts.
    PlugFirst,
    /// virtio-mem, the whole plug asked for as the spike starts.
    PlugAtStart,
    /// virtio-mem with no host reaction: what the guest meets while the host has not
    /// noticed the spike yet (virtio-mem has no guest-side growth).
    NoPlug,
}

impl Growth {
    fn name(self) -> &'static str {
        match self {
            Growth::Hook => "balloon-hook",
            Growth::PlugFirst => "virtio-mem-plug-first",
            Growth::PlugAtStart => "virtio-mem-plug-at-start",
            Growth::NoPlug => "virtio-mem-no-plug",
        }
    }
}

#[derive(Default)]
struct Samples {
    /// Growing to the full size before the spike (virtio-mem plug-first only).
    grow_s: Vec<f64>,
    /// The spike's allocation time (its own clock, in the guest).
    spike_s: Vec<f64>,
    /// Back to 256 MiB after the spike exited.
    shrink_s: Vec<f64>,
    /// QEMU's resident memory once shrunk, MiB.
    rss_mib: Vec<f64>,
    failed_spikes: usize,
    /// Thread allocations (mmaps) the guest refused, over the failed spikes.
    failed_allocations: u64,
    oom_kills: usize,
}

struct Guest {
    q: Qemu,
    qmp: Qmp,
    image: GuestImage,
}

fn boot(image: &GuestImage, spec: VmSpec, run_dir: &Path) -> Result<Guest, String> {
    let q = Qemu::start(image, spec, run_dir).map_err(|e| e.to_string())?;
    q.wait_booted(Duration::from_secs(180)).map_err(|e| e.to_string())?;
    let qmp = Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)).map_err(|e| e.to_string())?;
    Ok(Guest { q, qmp, image: image.clone() })
}

/// The spec both kinds of guest share; `memory` is the boot memory. Free page reporting
/// and hinting are on in both, as the product runs them: the idle migrations then compare
/// what each leaves to send beyond what those two already skip.
fn spec(name: &str, memory: Kib) -> VmSpec {
    VmSpec { cpus: 2, agent: GuestAgent::None, free_page_reporting: true, free_page_hint: true, ..VmSpec::new(name, memory) }
}

fn balloon_guest(image: &GuestImage, run_dir: &Path) -> Result<Guest, String> {
    let g = boot(image, VmSpec { deflate_on_oom: true, ..spec("vmem-bench-balloon", GUEST) }, run_dir)?;
    shrink(&g, Growth::Hook)?;
    Ok(g)
}

fn virtio_mem_guest(image: &GuestImage, run_dir: &Path) -> Result<Guest, String> {
    let spec = VmSpec {
        deflate_on_oom: false,
        virtio_mem: Some(DEVICE),
        append: "memhp_default_state=online_movable".into(),
        ..spec("vmem-bench-virtio-mem", SHRUNK)
    };
    boot(image, spec, run_dir)
}

fn secs(what: &str, took: Result<Option<Duration>, autoballoon_qmp::QmpError>) -> Result<f64, String> {
    match took {
        Ok(Some(d)) => Ok(d.as_secs_f64()),
        Ok(None) => Err(format!("{what}: not done in {RESIZE_TIMEOUT:?}")),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// Plugs all of the virtio-mem device and checks that the guest's MemTotal took it in
/// (QEMU's `size` counts what the guest asked to plug, not what it onlined).
fn grow(g: &Guest, growth: Growth) -> Result<f64, String> {
    match growth {
        Growth::Hook | Growth::NoPlug => Ok(0.0),
        Growth::PlugFirst | Growth::PlugAtStart => {
            let took = secs("virtio-mem plug", virtio_mem_resize(&g.qmp, DEVICE, RESIZE_TIMEOUT))?;
            let total = meminfo_kib(&g.q, "MemTotal").map_err(|e| e.to_string())?;
            if total < DEVICE.0 {
                return Err(format!("virtio-mem plugged {} MiB but the guest's MemTotal is {} MiB", DEVICE.0 / 1024, total / 1024));
            }
            Ok(took)
        }
    }
}

fn shrink(g: &Guest, growth: Growth) -> Result<f64, String> {
    match growth {
        Growth::Hook => secs("balloon to 256 MiB", balloon_to(&g.qmp, SHRUNK, RESIZE_TIMEOUT)),
        Growth::PlugFirst | Growth::PlugAtStart | Growth::NoPlug => secs("virtio-mem unplug", virtio_mem_resize(&g.qmp, Kib(0), RESIZE_TIMEOUT)),
    }
}

/// One round: grow (plug-first), the spike, shrink back.
fn round(g: &Guest, growth: Growth, s: &mut Samples) -> Result<(), String> {
    if growth == Growth::PlugFirst {
        s.grow_s.push(grow(g, growth)?);
    }
    if growth == Growth::PlugAtStart {
        virtio_mem_request(&g.qmp, DEVICE).map_err(|e| e.to_string())?;
    }
    let kills_before = oom_kills(&g.q);
    let (run, check) = run_spike_checked(&g.q, THREADS, MIB_PER_THREAD, Duration::from_secs(600));
    s.failed_allocations += check.failed.unwrap_or(0);
    let kills = oom_kills(&g.q).saturating_sub(kills_before);
    s.oom_kills += kills;
    match (run.completed, run.alloc_s) {
        (true, Some(t)) if kills == 0 => s.spike_s.push(t),
        _ => {
            if growth != Growth::NoPlug {
                eprintln!("[vmem-bench] {}: the spike failed ({run:?}, {kills} OOM kills)", growth.name());
            }
            s.failed_spikes += 1;
        }
    }
    if growth == Growth::PlugAtStart {
        // The plug the spike outran: let it finish before unplugging.
        grow(g, growth)?;
    }
    s.shrink_s.push(shrink(g, growth)?);
    s.rss_mib.push(g.q.rss().map_or(f64::NAN, |r| r.0 as f64 / 1024.0));
    Ok(())
}

/// Migrates the (shrunk, idle) guest to a fresh destination of the same shape.
fn migrate_idle(g: &Guest, run_dir: &Path) -> Result<(u64, f64), String> {
    let spec = VmSpec { name: format!("{}-dest", g.q.spec.name), ..g.q.spec.clone() };
    let (dest, _port) = Qemu::start_incoming(&g.image, spec, run_dir).map_err(|e| e.to_string())?;
    let m = migrate(&g.qmp, &dest, MIGRATION_BANDWIDTH, Duration::from_secs(600)).map_err(|e| e.to_string())?;
    Ok((m.bytes_sent(), m.seconds()))
}

fn image(var: &str) -> Result<GuestImage, String> {
    let dir = std::env::var_os(var).ok_or_else(|| format!("{var} is not set: run `make kernel-bench-vmem`"))?;
    GuestImage::at(Path::new(&dir)).map_err(|e| e.to_string())
}

fn run() -> Result<(), String> {
    let reps: usize = std::env::var("AUTOBALLOON_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let (patched, vmem) = (image("AUTOBALLOON_PATCHED_IMAGE")?, image("AUTOBALLOON_VMEM_IMAGE")?);
    let run_dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../run/bench");
    std::fs::create_dir_all(&run_dir).map_err(|e| format!("cannot create {}: {e}", run_dir.display()))?;
    let run_dir = run_dir.canonicalize().unwrap_or(run_dir);
    let t0 = Instant::now();
    let balloon = balloon_guest(&patched, &run_dir)?;
    let vm = virtio_mem_guest(&vmem, &run_dir)?;
    let qemu = balloon.qmp.version().to_string();
    let mut samples: Vec<(Growth, Samples)> = [Growth::Hook, Growth::PlugFirst, Growth::PlugAtStart, Growth::NoPlug].into_iter().map(|g| (g, Samples::default())).collect();
    for rep in 0..reps {
        // Interleaved, so that the machine's drift over the run falls on every kind alike.
        for (growth, s) in samples.iter_mut() {
            let g = if *growth == Growth::Hook { &balloon } else { &vm };
            round(g, *growth, s)?;
            eprintln!(
                "[vmem-bench] round {} of {reps}, {}: spike {:.2} s, shrink {:.2} s ({:.0} s so far)",
                rep + 1,
                growth.name(),
                s.spike_s.last().copied().unwrap_or(f64::NAN),
                s.shrink_s.last().copied().unwrap_or(f64::NAN),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let mut migrations = serde_json::Map::new();
    for (name, g) in [("balloon", &balloon), ("virtio-mem", &vm)] {
        let (bytes, secs) = migrate_idle(g, &run_dir)?;
        eprintln!("[vmem-bench] idle migration, {name} at 256 MiB: {:.1} MiB in {secs:.2} s", bytes as f64 / 1048576.0);
        migrations.insert(name.into(), json!({ "mib_sent": bytes as f64 / 1048576.0, "seconds": secs }));
    }
    let hook_spike = median(&samples[0].1.spike_s);
    println!("autoballoon kernel series against virtio-mem: 2 GiB guests shrunk to 256 MiB, 2 vCPUs, TCG, QEMU {qemu}, medians of {reps} round(s)");
    println!("{:<26} {:>8} {:>8} {:>10} {:>9} {:>9} {:>7} {:>7} {:>5}", "growth", "grow s", "spike s", "vs hook", "shrink s", "RSS MiB", "failed", "mmaps", "OOM");
    let mut kinds = serde_json::Map::new();
    for (growth, s) in &samples {
        let (grow_s, spike_s) = (median(&s.grow_s), median(&s.spike_s));
        let total = if s.grow_s.is_empty() { spike_s } else { grow_s + spike_s };
        println!(
            "{:<26} {:>8.2} {:>8.2} {:>9.2}x {:>9.2} {:>9.0} {:>7} {:>7} {:>5}",
            growth.name(),
            grow_s,
            spike_s,
            total / hook_spike,
            median(&s.shrink_s),
            median(&s.rss_mib),
            s.failed_spikes,
            s.failed_allocations,
            s.oom_kills
        );
        kinds.insert(
            growth.name().into(),
            json!({ "grow_s": s.grow_s, "spike_s": s.spike_s, "shrink_s": s.shrink_s, "rss_mib": s.rss_mib, "failed_spikes": s.failed_spikes, "failed_allocations": s.failed_allocations, "oom_kills": s.oom_kills,
                    "grow_and_spike_vs_hook": total / hook_spike }),
        );
    }
    for (name, m) in &migrations {
        println!("idle migration at 256 MiB, {name}: {:.1} MiB in {:.2} s", m["mib_sent"].as_f64().unwrap_or(f64::NAN), m["seconds"].as_f64().unwrap_or(f64::NAN));
    }
    let out = run_dir.join("virtio-mem.json");
    let record = json!({ "qemu": qemu, "rounds": reps, "kinds": kinds, "idle_migrations": migrations, "seconds": t0.elapsed().as_secs_f64() });
    std::fs::write(&out, serde_json::to_string_pretty(&record).unwrap_or_default()).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    println!("written: {}", out.display());
    Ok(())
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; this harness takes no options.
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmem-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
