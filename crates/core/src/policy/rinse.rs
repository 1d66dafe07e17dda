//! Rinse: the free memory a guest keeps on top of its need (the buffer, and the headroom of
//! a recent spike) is given back to the host once the guest has settled, and returned to the
//! guest clean.
//!
//! Why: the buffer (the memory kept free on top of the estimate) is memory the guest has
//! touched: what a job allocated and freed while the guest was lean. It stays backed in
//! the host, and free page reporting cannot give it back, because it reports only free
//! blocks of 2 MiB and the buffer of a guest whose balloon took 4 KiB pages is in smaller
//! pieces (four guests over a job sequence held a quarter more than with free page
//! reporting alone, all of it guest memory; docs/spikes.md). The headroom a spike leaves is
//! memory the spike touched, in the pieces the balloon handed back. A balloon that
//! inflates by that free memory takes those pieces first (order-0 allocations come from
//! the smallest free blocks), the host discards them, and deflating right after hands the
//! guest the same amount of memory the host no longer backs: the guest keeps its free
//! memory, the host stops paying for it. A migration that starts afterwards does not send
//! it either.
//!
//! The rule, pure (time and the guest's size come with each sample): once the policy's
//! target has not grown by more than `band` for `after` (shrinks do not count), the target
//! is lowered by the free memory until the guest's size has come within `band` of the
//! lowered target (a busy guest's balloon may take more than a tick), or [`MAX_DIP`] at the
//! most; then it is back, and the next rinse waits for another `after` of steadiness and at
//! least `every` since the last one, and for the target to have grown in between (a guest
//! that touched nothing since has nothing to rinse). The lowered target never goes below
//! the need, so a need that grows during a rinse raises it, and ends the rinse once the
//! guest is within it. Never while a migration runs or is prepared.

use crate::units::Kib;
use std::time::Duration;

/// The longest a rinse keeps the target lowered, reached or not.
pub const MAX_DIP: Duration = Duration::from_secs(10);

/// When a settled guest's buffer is rinsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RinseRule {
    /// How long the target must not have grown; zero: off.
    pub after: Duration,
    /// The least time between two rinses of one guest.
    pub every: Duration,
    /// How far the target may grow and still count as steady.
    pub band: Kib,
}

impl RinseRule {
    pub const OFF: RinseRule = RinseRule { after: Duration::ZERO, every: Duration::ZERO, band: Kib::ZERO };

    pub fn is_off(&self) -> bool {
        self.after.is_zero()
    }
}

/// One VM's rinse state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rinse {
    /// The target the steadiness is measured from, and since when.
    steady: Option<(Kib, Duration)>,
    /// When the last rinse was.
    last: Option<Duration>,
    /// The target grew (by more than the band) since the last rinse: the guest touched
    /// memory since, which another rinse can give back. An idle guest is rinsed once.
    grown: bool,
    /// A rinse under way: since when.
    dipped: Option<Duration>,
}

impl Rinse {
    /// Takes the policy's `target` at `at` (with the `free` memory it keeps on top of the
    /// need, and the guest's size `current`); returns how much to take off it this tick:
    /// `free` while a rinse is under way, else nothing. `busy`: a migration runs or is
    /// prepared (no rinse, and the steadiness starts again after it).
    pub fn observe(&mut self, rule: &RinseRule, target: Kib, free: Kib, current: Kib, busy: bool, at: Duration) -> Kib {
        if rule.is_off() || free == Kib::ZERO || busy {
            *self = Rinse { last: self.last, grown: self.grown, ..Rinse::default() };
            return Kib::ZERO;
        }
        if let Some(since) = self.dipped {
            let reached = current <= target.saturating_sub(free).saturating_add(rule.band);
            if !reached && at.saturating_sub(since) < MAX_DIP {
                return free;
            }
            self.dipped = None;
            self.steady = Some((target, at));
            return Kib::ZERO;
        }
        // Steady: no growth beyond the band for `after`. A shrink (a headroom fading, a need
        // gone) keeps the wait going from the lower target: the balloon took pieces then too.
        let since = match self.steady {
            Some((t, since)) if target <= t.saturating_add(rule.band) => {
                self.steady = Some((t.min(target), since));
                since
            }
            moved => {
                self.grown |= moved.is_some();
                self.steady = Some((target, at));
                return Kib::ZERO;
            }
        };
        let settled = at.saturating_sub(since) >= rule.after;
        let due = self.last.is_none_or(|l| self.grown && at.saturating_sub(l) >= rule.every);
        if settled && due {
            self.dipped = Some(at);
            self.last = Some(at);
            self.grown = false;
            return free;
        }
        Kib::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_units::{mib, s};
    const RULE: RinseRule = RinseRule { after: Duration::from_secs(20), every: Duration::from_secs(300), band: Kib(16 * 1024) };

    #[test]
    fn a_settled_guest_is_rinsed_until_the_balloon_gets_there() {
        let mut r = Rinse::default();
        let b = mib(64);
        let at300 = mib(300);
        assert_eq!(r.observe(&RULE, mib(300), b, at300, false, s(0)), Kib::ZERO);
        assert_eq!(r.observe(&RULE, mib(305), b, at300, false, s(10)), Kib::ZERO, "steady, not long enough");
        assert_eq!(r.observe(&RULE, mib(310), b, at300, false, s(20)), b, "steady for 20 s: rinsed");
        assert_eq!(r.observe(&RULE, mib(300), b, mib(290), false, s(21)), b, "the balloon is not there yet: still lowered");
        assert_eq!(r.observe(&RULE, mib(300), b, mib(240), false, s(22)), Kib::ZERO, "reached: back");
        assert_eq!(r.observe(&RULE, mib(300), b, at300, false, s(60)), Kib::ZERO, "not again before `every`");
        assert_eq!(r.observe(&RULE, mib(300), b, at300, false, s(320)), Kib::ZERO, "nor after it, as the target has not grown since");
        assert_eq!(r.observe(&RULE, mib(400), b, at300, false, s(330)), Kib::ZERO, "grown: steady again from here");
        assert_eq!(r.observe(&RULE, mib(300), b, at300, false, s(345)), Kib::ZERO, "a shrink is steady too");
        assert_eq!(r.observe(&RULE, mib(300), b, at300, false, s(350)), b, "20 s later: again");
        assert_eq!(r.observe(&RULE, mib(300), b, at300, false, s(355)), b, "never reached ...");
        assert_eq!(r.observe(&RULE, mib(300), b, at300, false, s(360)), Kib::ZERO, "... back after MAX_DIP");
    }

    #[test]
    fn a_moving_target_or_a_migration_restarts_the_wait() {
        let mut r = Rinse::default();
        let b = mib(64);
        let c = mib(400);
        r.observe(&RULE, mib(300), b, c, false, s(0));
        assert_eq!(r.observe(&RULE, mib(400), b, c, false, s(15)), Kib::ZERO, "grew by more than the band");
        assert_eq!(r.observe(&RULE, mib(400), b, c, false, s(30)), Kib::ZERO, "steady for 15 s only");
        assert_eq!(r.observe(&RULE, mib(400), b, c, true, s(35)), Kib::ZERO, "a migration");
        assert_eq!(r.observe(&RULE, mib(400), b, c, false, s(50)), Kib::ZERO, "steady again from 50 s");
        assert_eq!(r.observe(&RULE, mib(400), b, c, false, s(70)), b);
        assert_eq!(r.observe(&RULE, mib(400), b, c, true, s(71)), Kib::ZERO, "a migration ends a rinse under way");
    }

    #[test]
    fn a_shrinking_target_is_steady() {
        let mut r = Rinse::default();
        let b = mib(64);
        r.observe(&RULE, mib(900), b, mib(900), false, s(0));
        assert_eq!(r.observe(&RULE, mib(700), b, mib(900), false, s(10)), Kib::ZERO, "a headroom fading");
        assert_eq!(r.observe(&RULE, mib(710), b, mib(700), false, s(15)), Kib::ZERO, "within the band of the lower target");
        assert_eq!(r.observe(&RULE, mib(500), b, mib(700), false, s(20)), b, "no growth for 20 s");
    }

    #[test]
    fn off_or_no_buffer_never_rinses() {
        let mut r = Rinse::default();
        for t in 0..100 {
            assert_eq!(r.observe(&RinseRule::OFF, mib(300), mib(64), mib(300), false, s(t)), Kib::ZERO);
            assert_eq!(r.observe(&RULE, mib(300), Kib::ZERO, mib(300), false, s(t)), Kib::ZERO);
        }
    }
}
