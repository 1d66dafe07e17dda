//! The one border every guest report crosses: a guest can send anything, so a sample is
//! used only after these checks. Rate limits and line lengths are the link's job; this is
//! about the values.

use super::AgentSample;
use crate::procfs::{Pressure, PressureLine};
use crate::sample::AgentView;
use crate::units::Kib;

/// Why a guest's sample was refused. Each message names the offending values.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejected {
    /// the balloon ({balloon_pages} pages) is larger than the VM ({configured})
    #[error("the balloon ({balloon_pages} pages) is larger than the VM ({configured})")]
    BalloonAboveSize { balloon_pages: u64, configured: Kib },
    /// MemTotal {total} is larger than the VM ({configured})
    #[error("MemTotal {total} is larger than the VM ({configured})")]
    TotalAboveSize { total: Kib, configured: Kib },
    /// {field} {value} is larger than MemTotal {total}
    #[error("{field} {value} is larger than MemTotal {total}")]
    AboveTotal { field: &'static str, value: Kib, total: Kib },
    /// SwapFree {free} is larger than SwapTotal {total}
    #[error("SwapFree {free} is larger than SwapTotal {total}")]
    SwapFreeAboveTotal { free: Kib, total: Kib },
    /// the agent's target {target} is larger than the VM ({configured})
    #[error("the agent's target {target} is larger than the VM ({configured})")]
    TargetAboveSize { target: Kib, configured: Kib },
    /// memory pressure is not a share of time between 0 and 100 %
    #[error("memory pressure is not a share of time between 0 and 100 %")]
    PressureOutOfRange,
}

/// Checks one sample from the guest of a VM of `configured` size and returns the view the
/// host may use.
pub fn check_sample(s: &AgentSample, configured: Kib) -> Result<AgentView, Rejected> {
    let m = &s.mem;
    if let Some(b) = s.balloon {
        if b.to_kib_checked().is_none_or(|k| k > configured) {
            return Err(Rejected::BalloonAboveSize { balloon_pages: b.0, configured });
        }
    }
    if m.total > configured {
        return Err(Rejected::TotalAboveSize { total: m.total, configured });
    }
    let resident = m.active.checked_add(m.inactive).unwrap_or(Kib::MAX);
    for (field, value) in [("MemFree", m.free), ("MemAvailable", m.available), ("Cached", m.cached), ("Active + Inactive", resident)] {
        if value > m.total {
            return Err(Rejected::AboveTotal { field, value, total: m.total });
        }
    }
    if m.swap_free > m.swap_total {
        return Err(Rejected::SwapFreeAboveTotal { free: m.swap_free, total: m.swap_total });
    }
    if let Some(t) = s.target.filter(|t| *t > configured) {
        return Err(Rejected::TargetAboveSize { target: t, configured });
    }
    if let Some(p) = &s.pressure {
        if !pressure_ok(p) {
            return Err(Rejected::PressureOutOfRange);
        }
    }
    Ok(AgentView { mem: *m, balloon: s.balloon, oom_kills: s.oom_kills, file_refaults: s.file_refaults, pressure: s.pressure, running_short: s.running_short })
}

fn pressure_ok(p: &Pressure) -> bool {
    let line = |l: &PressureLine| [l.avg10, l.avg60, l.avg300].iter().all(|v| (0.0..=100.0).contains(v));
    line(&p.some) && p.full.as_ref().is_none_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MemView;
    use crate::units::Pages;

    fn mib(n: u64) -> Kib {
        Kib::from_mib_saturating(n)
    }
    fn good() -> AgentSample {
        let mem = MemView { total: mib(1900), free: mib(100), available: mib(800), committed_as: Kib::MAX, active: mib(500), inactive: mib(400), cached: mib(300), ..Default::default() };
        AgentSample { seq: 1, uptime_ms: 5, mem, oom_kills: Some(u64::MAX), file_refaults: Some(u64::MAX), balloon: Some(mib(1024).to_pages_floor()), target: Some(mib(900)), pressure: None, running_short: false }
    }

    #[test]
    fn a_plausible_sample_passes_unchanged() {
        let v = check_sample(&good(), mib(2048)).unwrap();
        assert_eq!((v.mem, v.balloon, v.oom_kills), (good().mem, good().balloon, Some(u64::MAX)), "committed memory and counters may be anything");
    }

    #[test]
    fn hostile_values_are_refused_with_their_reason() {
        let c = mib(2048);
        for pages in [1u64 << 62, 1 << 63, u64::MAX, mib(2049).to_pages_floor().0] {
            let mut s = good();
            s.balloon = Some(Pages(pages));
            assert!(matches!(check_sample(&s, c), Err(Rejected::BalloonAboveSize { .. })), "{pages}");
        }
        type Spoil = fn(&mut AgentSample);
        let cases: Vec<(Spoil, &str)> = vec![
            (|s| s.mem.total = mib(4096), "MemTotal 4096.0 MiB is larger than the VM (2048.0 MiB)"),
            (|s| s.mem.available = Kib::MAX, "MemAvailable"),
            (|s| s.mem.free = mib(1901), "MemFree"),
            (|s| s.mem.inactive = Kib::MAX, "Active + Inactive"),
            (|s| s.mem.swap_free = mib(1), "SwapFree"),
            (|s| s.target = Some(Kib::MAX), "target"),
            (|s| s.pressure = Some(Pressure { some: PressureLine { avg10: f64::NAN, ..Default::default() }, full: None }), "pressure"),
            (|s| s.pressure = Some(Pressure { some: Default::default(), full: Some(PressureLine { avg60: 101.0, ..Default::default() }) }), "pressure"),
        ];
        for (spoil, says) in cases {
            let mut s = good();
            spoil(&mut s);
            let e = check_sample(&s, c).unwrap_err().to_string();
            assert!(e.contains(says), "{e} should say {says}");
        }
    }
}
