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

/// How long a guest has been still: its need and its size each within `band` of the last
/// sample's, with no gap of more than [`Steady::MAX_GAP`] between samples. Memory the
/// guest freed can be no older than that, so free page reporting had at least that long
/// to give it back (a spike inside the headroom, or one the loop did not see, restarts it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Steady {
    since: Option<Duration>,
    last: Option<(Duration, Kib, Kib)>,
}

impl Steady {
    /// A longer gap between samples (a paused loop, a stale agent) says nothing of what the
    /// guest did meanwhile.
    pub const MAX_GAP: Duration = Duration::from_secs(5);

    /// Takes a sample's time, need and guest size.
    pub fn observe(&mut self, at: Duration, need: Kib, size: Kib, band: Kib) {
        let still = self.last.is_some_and(|(t, n, z)| at.saturating_sub(t) <= Self::MAX_GAP && n.abs_diff(need) <= band && z.abs_diff(size) <= band);
        if !still {
            self.since = Some(at);
        }
        self.last = Some((at, need, size));
    }

    /// How long the guest has been still at `at` (zero before any sample).
    pub fn for_how_long(&self, at: Duration) -> Duration {
        self.since.map_or(Duration::ZERO, |t| at.saturating_sub(t))
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
    fn reporting_drains_after_its_delay_at_its_rate() {
        let drain = ReportDrain { delay: ReportDrain::KERNEL_DELAY, per_s: mib(125) };
        assert_eq!(drain.drained_after(mib(1250)), Some(s(12)), "2 s, then 10 s at 125 MiB/s");
        assert_eq!(ReportDrain::OFF.drained_after(mib(1)), None);
    }

    #[test]
    fn a_guest_is_still_while_its_need_and_size_stay_and_samples_come() {
        let band = mib(16);
        let mut st = Steady::default();
        assert_eq!(st.for_how_long(s(5)), Duration::ZERO, "no sample yet");
        st.observe(s(0), mib(200), mib(1500), band);
        st.observe(s(1), mib(210), mib(1500), band);
        st.observe(s(2), mib(200), mib(1490), band);
        assert_eq!(st.for_how_long(s(2)), s(2), "within the band");
        st.observe(s(3), mib(900), mib(1500), band);
        st.observe(s(4), mib(200), mib(1500), band);
        assert_eq!(st.for_how_long(s(10)), s(6), "a spike inside the headroom: from its free");
        st.observe(s(5), mib(200), mib(2048), band);
        assert_eq!(st.for_how_long(s(6)), s(1), "the size moved");
        st.observe(s(20), mib(200), mib(2048), band);
        assert_eq!(st.for_how_long(s(20)), Duration::ZERO, "no sample for 15 s: anything may have happened");
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
