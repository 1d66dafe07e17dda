//! Spike headroom: memory a guest needed a moment ago stays in it for a while after the
//! need is gone, so a spike that comes back starts on free memory instead of waiting for
//! the balloon to deflate (Hyper-V keeps a buffer in proportion to demand, ESX taxes idle
//! memory only gradually; senpai and TMO give memory back slowly for the same reason).
//!
//! Why: on a stock kernel a spike the guest has no room for stalls in reclaim while the
//! balloon deflates, and on a guest with few vCPUs the stalled threads take the CPU the
//! balloon's deflation needs (a 1.2 GiB spike into a shrunk 2 GiB guest took 4× as long as
//! into memory free page reporting had given back; docs/spikes.md). Memory kept free in
//! the guest costs the host little where free page reporting is on: the guest reports it
//! back within seconds, and a spike refaults it as fast as with free page reporting alone.
//!
//! The rule, pure (time comes with each sample): the headroom remembers the largest *need*
//! (the estimate without its buffer) seen recently; it is kept whole for `hold`, then fades
//! to nothing over `fade` in four equal steps (four actions and four log lines, not one a
//! tick). The target is `max(need now, remembered need) + buffer`.
//! A larger need replaces the remembered one whenever it reaches its faded value.

use crate::units::Kib;
use std::time::Duration;

/// How long a need is remembered: whole for `hold`, then fading over `fade`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadroomRule {
    pub hold: Duration,
    pub fade: Duration,
}

impl HeadroomRule {
    /// No headroom at all: the estimate alone.
    pub const OFF: HeadroomRule = HeadroomRule { hold: Duration::ZERO, fade: Duration::ZERO };

    pub fn is_off(&self) -> bool {
        self.hold.is_zero() && self.fade.is_zero()
    }

    /// What is left at `at` of `value` kept since `since`: whole for `hold`, then less by
    /// a quarter at a time over `fade`, then nothing.
    pub fn faded(&self, value: Kib, since: Duration, at: Duration) -> Kib {
        let age = at.saturating_sub(since);
        if age <= self.hold {
            return value;
        }
        let faded = age - self.hold;
        if faded >= self.fade {
            return Kib::ZERO;
        }
        // value × (1 − faded / fade) rounded up to a quarter, in u128 so no product overflows.
        let left = self.fade.as_nanos() - faded.as_nanos();
        let quarters = (4 * left).div_ceil(self.fade.as_nanos());
        Kib((u128::from(value.0) * quarters / 4) as u64)
    }
}

/// How fast free page reporting gives a guest's free memory back to the host, at the
/// slowest: a freed 2 MiB block is reported `delay` after the free (the kernel's
/// `PAGE_REPORTING_DELAY`, 2 s), then at least `per_s` a second (125–320 MiB/s measured
/// here, in 2 s passes). Where it is done with a headroom the host no longer backs that
/// memory, and a migration sends it as zero pages (or, with free page hinting, not at
/// all): shedding it then writes guest memory (the balloon's page lists) for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportDrain {
    pub delay: Duration,
    /// KiB a second; zero turns the rule off (memory never counts as reported).
    pub per_s: Kib,
}

impl ReportDrain {
    /// The kernel's delay between a free and the report that can take it.
    pub const KERNEL_DELAY: Duration = Duration::from_secs(2);
    pub const OFF: ReportDrain = ReportDrain { delay: Duration::ZERO, per_s: Kib::ZERO };

    pub fn is_off(&self) -> bool {
        self.per_s == Kib::ZERO
    }

    /// How long after a free of `amount` reporting has surely returned all of it; `None`
    /// when the rule is off.
    pub fn drained_after(&self, amount: Kib) -> Option<Duration> {
        if self.is_off() {
            return None;
        }
        // amount / per_s seconds, in whole milliseconds rounded up (u128: no overflow).
        let ms = (u128::from(amount.0) * 1000).div_ceil(u128::from(self.per_s.0));
        Some(self.delay.saturating_add(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))))
    }
}

/// The remembered need of one VM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headroom {
    peak: Option<(Kib, Duration)>,
}

impl Headroom {
    /// The remembered need at `at`, faded by `rule`; zero once faded out.
    pub fn remembered(&self, rule: &HeadroomRule, at: Duration) -> Kib {
        let Some((need, since)) = self.peak else { return Kib::ZERO };
        rule.faded(need, since, at)
    }

    /// Whether free page reporting has had time, by `at`, to give back the `headroom` this
    /// remembered need keeps above today's need: the need was last seen long enough ago.
    pub fn reported(&self, drain: &ReportDrain, headroom: Kib, at: Duration) -> bool {
        let (Some((_, since)), Some(after)) = (self.peak, drain.drained_after(headroom)) else { return false };
        at.saturating_sub(since) >= after
    }

    /// Takes the need at `at` and returns what the target covers: the larger of it and
    /// the remembered need.
    pub fn observe(&mut self, rule: &HeadroomRule, need: Kib, at: Duration) -> Kib {
        if rule.is_off() {
            self.peak = None;
            return need;
        }
        let kept = self.remembered(rule, at);
        if need >= kept {
            self.peak = Some((need, at));
            return need;
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_units::{mib, s};
    const RULE: HeadroomRule = HeadroomRule { hold: Duration::from_secs(30), fade: Duration::from_secs(60) };

    #[test]
    fn a_spike_is_kept_then_fades_out() {
        let mut h = Headroom::default();
        assert_eq!(h.observe(&RULE, mib(200), s(0)), mib(200));
        assert_eq!(h.observe(&RULE, mib(1400), s(1)), mib(1400), "the spike");
        assert_eq!(h.observe(&RULE, mib(200), s(3)), mib(1400), "freed: kept whole");
        assert_eq!(h.observe(&RULE, mib(200), s(31)), mib(1400), "still within the hold");
        assert_eq!(h.observe(&RULE, mib(200), s(45)), mib(1400), "the first quarter of the fade: still whole");
        assert_eq!(h.observe(&RULE, mib(200), s(46)), mib(1050), "a quarter given back");
        assert_eq!(h.observe(&RULE, mib(200), s(61)), mib(700), "half faded");
        assert_eq!(h.observe(&RULE, mib(200), s(85)), mib(350), "the last quarter");
        assert_eq!(h.observe(&RULE, mib(200), s(91)), mib(200));
        assert_eq!(h.remembered(&RULE, s(100)), mib(200), "the need itself is remembered now");
    }

    #[test]
    fn a_spike_that_comes_back_renews_the_hold() {
        let mut h = Headroom::default();
        h.observe(&RULE, mib(1400), s(0));
        assert_eq!(h.observe(&RULE, mib(1000), s(47)), mib(1050), "fading, and the smaller spike is inside it");
        assert_eq!(h.observe(&RULE, mib(1200), s(50)), mib(1200), "the faded value fell below the need: renewed");
        assert_eq!(h.observe(&RULE, mib(100), s(79)), mib(1200), "held 30 s from the renewal");
    }

    #[test]
    fn a_headroom_counts_as_reported_once_reporting_had_time_for_it() {
        let drain = ReportDrain { delay: ReportDrain::KERNEL_DELAY, per_s: mib(125) };
        assert_eq!(drain.drained_after(mib(1250)), Some(s(12)), "2 s, then 10 s at 125 MiB/s");
        assert_eq!(ReportDrain::OFF.drained_after(mib(1)), None);
        let mut h = Headroom::default();
        assert!(!h.reported(&drain, mib(1250), s(100)), "nothing remembered");
        h.observe(&RULE, mib(1400), s(0));
        h.observe(&RULE, mib(150), s(3));
        assert!(!h.reported(&drain, mib(1250), s(11)));
        assert!(h.reported(&drain, mib(1250), s(12)), "counted from when the need was last seen");
        assert!(!h.reported(&ReportDrain::OFF, mib(1250), s(1000)), "off: never");
        h.observe(&RULE, mib(1400), s(20));
        assert!(!h.reported(&drain, mib(1250), s(30)), "the need came back: counted again");
    }

    #[test]
    fn off_is_the_need_alone() {
        let mut h = Headroom::default();
        h.observe(&RULE, mib(1400), s(0));
        assert_eq!(h.observe(&HeadroomRule::OFF, mib(100), s(1)), mib(100));
        assert_eq!(h.remembered(&RULE, s(1)), Kib::ZERO, "and forgets");
        let no_fade = HeadroomRule { hold: s(10), fade: Duration::ZERO };
        h.observe(&no_fade, mib(1400), s(0));
        assert_eq!(h.observe(&no_fade, mib(100), s(10)), mib(1400));
        assert_eq!(h.observe(&no_fade, mib(100), s(11)), mib(100), "no fade: gone after the hold");
    }
}
