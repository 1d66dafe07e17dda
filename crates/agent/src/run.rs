//! The agent's loop: sample procfs → (host backend) report, or (kernel/Xen backend)
//! policy → guard rails → set the target. Single-threaded; never waits on the balloon.

use crate::backend::Backend;
use crate::channel::Channel;
use crate::logging::{info, RateLimited};
use crate::{protect, BackendKind, RunArgs};
use autoballoon_core::control::ControlLoop;
use autoballoon_core::guard::GuardRails;
use autoballoon_core::interval::{AdaptiveInterval, Interval};
use autoballoon_core::outlier::{Filtered, OutlierFilter};
use autoballoon_core::policy::{MemView, Sample, SwapFree};
use autoballoon_core::procfs::{parse_meminfo, parse_vmstat, Vmstat};
use autoballoon_core::protocol::{encode, AgentMessage, AgentSample, HostMessage};
use autoballoon_core::Kib;
use std::path::Path;
use std::time::{Duration, Instant};

/// Reads the guest's memory view; `Err` carries a message for the (rate-limited) log.
fn read_view(proc_dir: &Path) -> Result<MemView, String> {
    let path = proc_dir.join("meminfo");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let m = parse_meminfo(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    MemView::from_meminfo(&m).map_err(|e| e.to_string())
}

fn read_vmstat(proc_dir: &Path) -> Option<Vmstat> {
    parse_vmstat(&std::fs::read_to_string(proc_dir.join("vmstat")).ok()?).ok()
}

pub fn run(a: &RunArgs) -> Result<(), String> {
    if a.backend == BackendKind::Host && a.port.is_none() {
        return Err("--backend host needs --port (the virtio-serial port to the host)".into());
    }
    if !a.unprivileged {
        protect::protect_self().map_err(|e| format!("cannot protect the agent from the OOM killer: {e}"))?;
        protect::allow_overcommit(&a.proc_dir).map_err(|e| format!("cannot enable memory overcommit: {e}"))?;
    }
    let backend = match a.backend {
        BackendKind::Host => Backend::Host,
        BackendKind::Kernel => Backend::Kernel { dir: a.kernel_dir.clone() },
        BackendKind::Xen => Backend::xen(a.xen_dir.clone(), a.max_kb.map(Kib)).map_err(|e| e.to_string())?,
    };
    let mut channel = match &a.port {
        Some(p) => Some(Channel::open(p).map_err(|e| format!("cannot open port {}: {e}", p.display()))?),
        None => None,
    };
    let tau = Duration::from_millis(a.interval_ms.max(10));
    let interval = if a.adaptive { Interval::Adaptive(AdaptiveInterval::new(tau)) } else { Interval::Fixed(tau) };
    let policy = SwapFree { buffer: Kib(a.buffer_kb), cache_buffer: Kib(a.cache_buffer_kb) };
    let mut lp = ControlLoop::new(policy, GuardRails::default(), interval);
    if let Some(ms) = a.outlier_delay_ms {
        lp = lp.with_outlier_filter(OutlierFilter::new(Duration::from_millis(ms), Kib(a.outlier_threshold_kb), Filtered::ShrinkOnly));
    }
    info(format_args!("started: backend {}, interval {} ms{}", backend.name(), tau.as_millis(), if a.adaptive { " (adaptive)" } else { "" }));
    if let Some(ch) = &mut channel {
        let hello = AgentMessage::Hello { version: env!("CARGO_PKG_VERSION").into(), backend: backend.name().into() };
        ch.send(&encode(&hello)).map_err(|e| format!("cannot write to the host port: {e}"))?;
    }

    let start = Instant::now();
    let mut migrating = false;
    let mut bad_sample = RateLimited::new(Duration::from_secs(60));
    let mut bad_backend = RateLimited::new(Duration::from_secs(60));
    let mut bad_port = RateLimited::new(Duration::from_secs(60));
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        seq += 1;
        // Read back to back, so the balloon size matches the memory view.
        let view = read_view(&a.proc_dir).map_err(|e| bad_sample.log(now, format_args!("bad memory sample, keeping the last target: {e}"))).ok();
        let vmstat = read_vmstat(&a.proc_dir);
        let mut next_in = tau;
        let mut own_target = None;
        match backend.size() {
            Ok(Some(size)) => {
                let s = Sample { at: now - start, vm_size: size.current, max: size.max, mem: view, migrating };
                let tick = lp.tick(&s);
                next_in = tick.next_in;
                match tick.outcome {
                    Ok(act) => {
                        own_target = Some(act.target);
                        match backend.set_guest_size(act.target) {
                            Ok(()) => info(format_args!("target {} -> {}: {}{}", act.previous, act.target, act.reason, act.limits_note())),
                            Err(e) => {
                                lp.forget_target();
                                bad_backend.log(now, format_args!("{e}"));
                            }
                        }
                    }
                    Err(idle) if a.verbose => info(format_args!("tick: {idle}")),
                    Err(_) => {}
                }
            }
            Ok(None) => {}
            Err(e) => bad_backend.log(now, format_args!("{e}")),
        }
        if let (Some(ch), Some(mem)) = (&mut channel, view) {
            let msg = AgentMessage::Sample(AgentSample { seq, uptime_ms: (now - start).as_millis() as u64, mem, oom_kills: vmstat.as_ref().and_then(|v| v.oom_kills()), balloon: vmstat.as_ref().and_then(|v| v.balloon_pages()), target: own_target });
            if let Err(e) = ch.send(&encode(&msg)) {
                bad_port.log(now, format_args!("cannot write to the host port: {e}"));
            }
            if a.verbose {
                info(format_args!("sample {seq}: available {}, committed {}", mem.available, mem.committed_as));
            }
        }
        if a.samples > 0 && seq >= a.samples {
            return Ok(());
        }
        let messages = match &mut channel {
            Some(ch) => ch.wait(next_in),
            None => {
                std::thread::sleep(next_in);
                Vec::new()
            }
        };
        for m in messages {
            migrating = matches!(m, HostMessage::MigrationStarted);
            match m {
                HostMessage::MigrationStarted => info(format_args!("migration started: no shrinking until it ends")),
                HostMessage::MigrationEnded { outcome } => info(format_args!("migration ended ({outcome}): shrinking resumes")),
            }
        }
    }
}
