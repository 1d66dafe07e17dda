//! The one border every number from a guest crosses, whichever way it comes: the agent's
//! samples ([`check_sample`]), the virtio-balloon driver's statistics as QEMU's
//! `guest-stats` or libvirt's `virDomainMemoryStats` hand them on ([`check_balloon_stats`]), and the
//! balloon's `actual`, which QEMU computes from the page count the guest writes and which
//! underflows to a huge number when the guest claims more pages than the VM has
//! ([`check_actual`]). A guest can send anything, so the host uses these numbers only after
//! these checks. Rate limits and line lengths are the link's job ([`crate::lines`]); this is
//! about the values.

use super::AgentSample;
use crate::policy::MemView;
use crate::procfs::{Pressure, PressureLine};
use crate::sample::AgentView;
use crate::units::{Bytes, Kib};

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
    /// the balloon's actual size {actual} is larger than the VM ({configured})
    #[error("the balloon's actual size {actual} is larger than the VM ({configured})")]
    ActualAboveSize { actual: Bytes, configured: Kib },
}

/// The virtio-balloon driver's statistics as QEMU (`qom-get guest-stats`) or libvirt
/// (`virDomainMemoryStats`) hand them on: the guest's own numbers, unchecked. `None`: not reported
/// (QEMU's `-1`, a statistic libvirt does not give). Sizes in bytes, saturated where the source counts in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BalloonStats {
    /// MemTotal.
    pub total: Option<Bytes>,
    /// MemFree.
    pub free: Option<Bytes>,
    /// MemAvailable.
    pub available: Option<Bytes>,
    /// The page cache.
    pub disk_caches: Option<Bytes>,
    /// When the hypervisor received them, host time in seconds since the epoch (QEMU's
    /// `last-update`, libvirt's `last_update`); `None`: not said.
    pub written_at_epoch_secs: Option<u64>,
}

impl BalloonStats {
    /// Whether these statistics were received after `after` (host epoch seconds); ones
    /// without a time count as fresh, as before this was known. QEMU keeps the last
    /// statistics it got and a migration's destination starts with the ones the guest
    /// wrote on the source, so a sampler asks for statistics written after an incoming
    /// migration ended, and after any moment free page hinting held the guest's free
    /// memory (hinting's held blocks are missing from `MemFree` and `MemAvailable`: a
    /// guest holding them reads as out of memory, `stat-available-memory` 0, while it
    /// needs nothing).
    pub fn written_after(&self, after: u64) -> bool {
        self.written_at_epoch_secs.is_none_or(|t| t > after)
    }
}

/// The balloon's `actual` (QMP `query-balloon`, libvirt's `actual`) of a VM of
/// `configured` size: the guest's present size, or why it cannot be.
pub fn check_actual(actual: Bytes, configured: Kib) -> Result<Kib, Rejected> {
    let kib = actual.to_kib_floor();
    if kib > configured {
        return Err(Rejected::ActualAboveSize { actual, configured });
    }
    Ok(kib)
}

/// Checks the balloon driver's statistics of a VM of `configured` size and returns the
/// memory view they give: `Ok(None)` while the guest has not reported MemTotal, MemFree and
/// MemAvailable. The driver knows no Committed_AS, so `overcommitted` reads as zero.
pub fn check_balloon_stats(s: &BalloonStats, configured: Kib) -> Result<Option<MemView>, Rejected> {
    let kib = |b: Option<Bytes>| b.map(Bytes::to_kib_floor);
    let (Some(total), Some(free), Some(available)) = (kib(s.total), kib(s.free), kib(s.available)) else {
        return Ok(None);
    };
    if total > configured {
        return Err(Rejected::TotalAboveSize { total, configured });
    }
    let cached = kib(s.disk_caches).unwrap_or_default();
    for (field, value) in [("MemFree", free), ("MemAvailable", available), ("Cached", cached)] {
        if value > total {
            return Err(Rejected::AboveTotal { field, value, total });
        }
    }
    Ok(Some(MemView { total, free, available, cached, ..Default::default() }))
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
    let anon = m.anon_and_shmem.unwrap_or_default();
    let file = m.file_cache.unwrap_or_default();
    let whole = m.free_in_hint_blocks.unwrap_or_default();
    for (field, value) in [("MemFree", m.free), ("MemAvailable", m.available), ("Cached", m.cached), ("Active + Inactive", resident), ("AnonPages + Shmem", anon), ("Active(file) + Inactive(file)", file), ("free in hinting's blocks", whole)] {
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
            (|s| s.mem.anon_and_shmem = Some(Kib::MAX), "AnonPages + Shmem"),
            (|s| s.mem.file_cache = Some(mib(1901)), "Active(file) + Inactive(file)"),
            (|s| s.mem.free_in_hint_blocks = Some(mib(1901)), "free in hinting's blocks"),
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

    #[test]
    fn actual_is_the_guests_size_only_within_the_vm() {
        let c = mib(2048);
        assert_eq!(check_actual(mib(1024).to_bytes_saturating(), c), Ok(mib(1024)));
        assert_eq!(check_actual(c.to_bytes_saturating(), c), Ok(c), "an empty balloon");
        assert_eq!(check_actual(Bytes(0), c), Ok(Kib(0)));
        assert_eq!(check_actual(Bytes(c.to_bytes_saturating().0 + 1023), c), Ok(c), "a part KiB rounds down");
        // QEMU's ram_size - (pages << 12) when the guest claims more pages than the VM has.
        let underflowed = Bytes(c.to_bytes_saturating().0.wrapping_sub(mib(4096).to_bytes_saturating().0));
        for actual in [underflowed, Bytes(u64::MAX), Bytes(u64::MAX - 1), Bytes(1 << 63), Bytes(c.to_bytes_saturating().0 + 1024)] {
            let e = check_actual(actual, c).unwrap_err();
            assert!(matches!(e, Rejected::ActualAboveSize { .. }), "{actual:?}");
            assert!(e.to_string().contains("larger than the VM (2048.0 MiB)"), "{e}");
        }
    }

    #[test]
    fn balloon_stats_are_fresh_only_when_written_after_the_moment_asked() {
        let at = |t: Option<u64>| BalloonStats { written_at_epoch_secs: t, ..Default::default() };
        assert!(at(Some(101)).written_after(100));
        assert!(!at(Some(100)).written_after(100), "the same second may be before it");
        assert!(!at(Some(0)).written_after(100), "QEMU's 0: never written");
        assert!(at(None).written_after(u64::MAX), "no time said: taken as before");
    }

    #[test]
    fn balloon_stats_are_a_view_only_within_the_vm() {
        let c = mib(2048);
        let b = |m: u64| Some(mib(m).to_bytes_saturating());
        let good = BalloonStats { total: b(1900), free: b(100), available: b(800), disk_caches: b(300), written_at_epoch_secs: None };
        let v = check_balloon_stats(&good, c).unwrap().unwrap();
        assert_eq!((v.total, v.free, v.available, v.cached, v.committed_as), (mib(1900), mib(100), mib(800), mib(300), Kib(0)));
        assert_eq!(check_balloon_stats(&BalloonStats { disk_caches: None, ..good }, c).unwrap().unwrap().cached, Kib(0));
        for missing in [BalloonStats { total: None, ..good }, BalloonStats { free: None, ..good }, BalloonStats { available: None, ..good }, BalloonStats::default()] {
            assert_eq!(check_balloon_stats(&missing, c), Ok(None), "not reported yet: no view, no refusal");
        }
        // Numbers QEMU or libvirt passed on from a hostile guest: huge, overflowing a KiB
        // count (libvirt's KiB saturated to bytes), or a wrapped negative.
        type Spoil = fn(&mut BalloonStats);
        let cases: Vec<(Spoil, &str)> = vec![
            (|s| s.total = Some(Bytes(u64::MAX)), "MemTotal"),
            (|s| s.total = Some(Kib(u64::MAX).to_bytes_saturating()), "MemTotal"),
            (|s| s.total = Some(mib(2049).to_bytes_saturating()), "larger than the VM"),
            (|s| s.free = Some(Bytes(u64::MAX - 1)), "MemFree"),
            (|s| s.available = Some(Bytes(-1i64 as u64 - 4096)), "MemAvailable"),
            (|s| s.available = Some(mib(1901).to_bytes_saturating()), "MemAvailable"),
            (|s| s.disk_caches = Some(Bytes(1 << 63)), "Cached"),
        ];
        for (spoil, says) in cases {
            let mut s = good;
            spoil(&mut s);
            let e = check_balloon_stats(&s, c).unwrap_err().to_string();
            assert!(e.contains(says), "{e} should say {says}");
        }
    }
}
