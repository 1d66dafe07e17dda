//! The memory footprint over a workload with phases: the source QEMU's RSS sampled every
//! 0.5 s and integrated over time (GiB·min, the HyperAlloc paper's metric).

use super::fleet::Fleet;
use super::model::{Config, FootprintRecord};
use super::stats::gib_min;
use crate::guest::{balloon_to, health};
use crate::{rss_of, step};
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The workload: (phase, guest command). Idle phases let the balloon (or FPR) catch up.
pub const PHASES: [(&str, &str); 7] = [
    ("idle", "sleep 10"),
    ("fill 1 GiB", "fill 1024"),
    ("idle", "sleep 15"),
    ("spike 3×400 MiB, 5 s", "spike 3 400 5 0 1"),
    ("idle", "sleep 15"),
    ("3 spikes 2×300 MiB", "spike 2 300 2 3 3"),
    ("idle", "sleep 15"),
];

/// Runs [`PHASES`] in `c`'s guest and integrates its QEMU's RSS.
pub fn measure(fleet: &mut Fleet, c: Config, fixed_mib: u64, run: u32) -> Result<FootprintRecord, String> {
    let line = fleet.line;
    let g = fleet.guest(c);
    if c == Config::DooFixed {
        let ctl = step("QMP", Qmp::connect_with_retry(&g.q.qmp_ctl, Instant::now() + Duration::from_secs(10)))?;
        step("balloon", balloon_to(&ctl, Kib::from_mib_saturating(fixed_mib), Duration::from_secs(60)))?;
    }
    let pid = g.q.pid();
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let sampler = {
        let (stop, samples) = (stop.clone(), samples.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(k) = rss_of(pid) {
                    samples.lock().unwrap().push((t0.elapsed().as_secs_f64(), k.mib_f64()));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let mut phases = Vec::new();
    let mut completed = true;
    for (name, cmd) in PHASES {
        let from = t0.elapsed().as_secs_f64();
        let ok = g.q.console.run(cmd, Duration::from_secs(300)).is_ok_and(|o| o.status == 0);
        completed &= ok;
        phases.push((from, t0.elapsed().as_secs_f64(), name.to_string()));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    let (kernel_errors, tainted, kills) = g.seen.news(&health(&g.q, Duration::from_secs(30)));
    Ok(FootprintRecord {
        qemu: line,
        config: c,
        run,
        gib_min: gib_min(&samples),
        seconds: t0.elapsed().as_secs_f64(),
        peak_mib: samples.iter().map(|s| s.1).fold(0.0, f64::max),
        oom_kills: kills,
        kernel_errors,
        tainted,
        completed,
        samples,
        phases,
    })
}
