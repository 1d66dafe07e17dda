//! ESX's guard rails on ballooning: the target is looked at once a second, and inflation
//! (shrinking the guest) is rate-limited adaptively so the guest OS is not stressed.
//!
//! Each VM has an allowed shrink per second, starting at `max` (default 512 MiB/s, near the
//! inflate speeds measured on this machine, 0.4–1.4 GB/s). At most once a second it halves
//! (not below `min`, default 4 MiB) when the guest shows stress — its own PSI `some` avg10
//! at or above `stress_some` (default 10 %) or a new OOM kill — and doubles back towards
//! `max` otherwise. Between those once-a-second looks a VM may not shrink at all.

use super::VmId;
use crate::sample::Sample;
use crate::units::Kib;
use std::collections::BTreeMap;
use std::time::Duration;

/// The adaptive inflation-rate limit's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateRail {
    /// The largest shrink per second, and the starting one (default 512 MiB).
    pub max: Kib,
    /// The smallest shrink per second the halving stops at (default 4 MiB).
    pub min: Kib,
    /// The guest PSI `some` avg10 (percent) that counts as stress (default 10).
    pub stress_some: f64,
    /// How often the limit is looked at and a shrink allowed (default 1 s).
    pub every: Duration,
}

impl Default for RateRail {
    fn default() -> Self {
        RateRail { max: Kib::from_mib_saturating(512), min: Kib::from_mib_saturating(4), stress_some: 10.0, every: Duration::from_secs(1) }
    }
}

/// One VM's limit and what the rail last saw of it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct VmRate {
    rate: Kib,
    at: Duration,
    oom_kills: Option<u64>,
}

/// The per-VM state of the rail.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Rates {
    vms: BTreeMap<VmId, VmRate>,
}

impl Rates {
    /// How much `vm` may shrink at this sample: its limit if a second has passed since the
    /// last look (which updates the limit), zero otherwise.
    pub(crate) fn allowed(&mut self, rail: &RateRail, vm: VmId, s: &Sample) -> Kib {
        let (lo, hi) = (rail.min.max(Kib::ONE_PAGE).min(rail.max), rail.max);
        let Some(r) = self.vms.get_mut(&vm) else {
            self.vms.insert(vm, VmRate { rate: hi, at: s.at, oom_kills: s.oom_kills });
            return hi;
        };
        if s.at < r.at.saturating_add(rail.every) {
            return Kib::ZERO;
        }
        let oom = matches!((r.oom_kills, s.oom_kills), (Some(a), Some(b)) if b > a);
        let psi = s.pressure.is_some_and(|p| p.some.avg10 >= rail.stress_some);
        r.rate = if oom || psi { Kib(r.rate.0 / 2).max(lo) } else { Kib(r.rate.0.saturating_mul(2)).clamp(lo, hi) };
        r.at = s.at;
        if s.oom_kills.is_some() {
            r.oom_kills = s.oom_kills;
        }
        r.rate
    }
    /// `vm`'s present limit per second, if it was seen.
    pub(crate) fn rate(&self, vm: VmId) -> Option<Kib> {
        self.vms.get(&vm).map(|r| r.rate)
    }
    /// Drops `vm`'s state.
    pub(crate) fn forget(&mut self, vm: VmId) {
        self.vms.remove(&vm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testkit::{mib, psi, sample};

    #[test]
    fn halves_under_stress_and_grows_back_once_a_second() {
        let rail = RateRail::default();
        let mut r = Rates::default();
        let vm = VmId(0);
        let mut s = sample(0, 1024, 100);
        assert_eq!(r.allowed(&rail, vm, &s), mib(512), "starts at max");
        s.at = Duration::from_millis(500);
        assert_eq!(r.allowed(&rail, vm, &s), Kib::ZERO, "once a second");
        s.at = Duration::from_secs(1);
        s.pressure = Some(psi(20.0, 0.0));
        assert_eq!(r.allowed(&rail, vm, &s), mib(256));
        s.pressure = None;
        s.oom_kills = Some(1);
        s.at = Duration::from_secs(2);
        assert_eq!(r.allowed(&rail, vm, &s), mib(512), "the first OOM count seen is no rise");
        s.at = Duration::from_secs(3);
        s.oom_kills = Some(3);
        assert_eq!(r.allowed(&rail, vm, &s), mib(256), "a rise halves");
        for at in 4..20 {
            s.at = Duration::from_secs(at);
            s.pressure = Some(psi(90.0, 90.0));
            r.allowed(&rail, vm, &s);
        }
        assert_eq!(r.rate(vm), Some(mib(4)), "not below min");
        s.pressure = None;
        s.at = Duration::from_secs(20);
        assert_eq!(r.allowed(&rail, vm, &s), mib(8), "doubles back");
        r.forget(vm);
        assert_eq!(r.rate(vm), None);
    }
}
