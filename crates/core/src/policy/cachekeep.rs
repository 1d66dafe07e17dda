//! Page cache the guest reads again stays in it; cache nobody reads again goes.
//!
//! The estimator counts page cache as available, so a lean target leaves a guest only its
//! buffer for cache, and a guest that re-reads a file set larger than that reads it from
//! disk again and again (the churn the first seed names as its limit for cache-heavy
//! applications). The kernel says when that happens: a page read again after it was
//! evicted counts as a *refault* (`workingset_refault_file` in /proc/vmstat; the shadow
//! entry left in the page cache at eviction finds it). Had the guest been larger by the
//! pages it refaulted, they would still have been there.
//!
//! The rule, pure (time and the guest's cumulative refault count come with each sample):
//! every page refaulted since the last sample adds its size to the room kept for cache, up
//! to `max`; the room is then kept whole for the rule's hold from the last refault and
//! fades over its fade, a quarter at a time, like the spike headroom. A guest that reads a
//! file once (a backup, a copy) refaults nothing and keeps nothing: that cache goes with
//! the next shrink. One that keeps re-reading grows its room until the set fits and the
//! refaults stop; when it stops reading, the room fades and the next shrink takes it.

use super::HeadroomRule;
use crate::units::{Kib, Pages};
use std::time::Duration;

/// How much room refaults may claim, and how long it stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheKeepRule {
    /// The most room kept; zero: off.
    pub max: Kib,
    /// Whole for `hold` after the last refault, then fading over `fade`.
    pub time: HeadroomRule,
}

impl CacheKeepRule {
    pub const OFF: CacheKeepRule = CacheKeepRule { max: Kib::ZERO, time: HeadroomRule::OFF };
}

/// The room one VM's refaults have claimed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheKeep {
    /// The guest's refault count at the last sample that had one.
    last_count: Option<u64>,
    /// The room at the last refault, and when that was.
    room: Option<(Kib, Duration)>,
}

impl CacheKeep {
    /// The room kept at `at`.
    pub fn kept(&self, rule: &CacheKeepRule, at: Duration) -> Kib {
        self.room.map_or(Kib::ZERO, |(room, since)| rule.time.faded(room, since, at))
    }

    /// Takes the guest's cumulative count of refaulted file pages at `at` (`None`: not
    /// reported this time) and returns the room kept for its cache.
    pub fn observe(&mut self, rule: &CacheKeepRule, refaults: Option<u64>, at: Duration) -> Kib {
        if rule.max == Kib::ZERO {
            *self = CacheKeep::default();
            return Kib::ZERO;
        }
        let Some(count) = refaults else { return self.kept(rule, at) };
        // A count that went down is a new boot (or a new guest under the same name):
        // nothing to compare with yet.
        let new = match self.last_count {
            Some(last) if count >= last => count - last,
            _ => 0,
        };
        self.last_count = Some(count);
        if new > 0 {
            let more = Pages(new).to_kib_saturating();
            let room = self.kept(rule, at).saturating_add(more).min(rule.max);
            self.room = Some((room, at));
        }
        self.kept(rule, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_units::{mib, s};
    /// Pages in `n` MiB.
    fn pages(n: u64) -> u64 {
        n * 256
    }
    const RULE: CacheKeepRule = CacheKeepRule { max: Kib(512 * 1024), time: HeadroomRule { hold: Duration::from_secs(120), fade: Duration::from_secs(240) } };

    #[test]
    fn refaults_claim_room_until_the_set_fits_then_it_fades() {
        let mut k = CacheKeep::default();
        assert_eq!(k.observe(&RULE, Some(pages(1000)), s(0)), Kib::ZERO, "the first count is only a base");
        assert_eq!(k.observe(&RULE, Some(pages(1040)), s(1)), mib(40), "40 MiB read again");
        assert_eq!(k.observe(&RULE, Some(pages(1100)), s(2)), mib(100));
        assert_eq!(k.observe(&RULE, Some(pages(1100)), s(100)), mib(100), "the set fits: no more refaults, the room stays");
        assert_eq!(k.observe(&RULE, None, s(121)), mib(100), "a sample without the count changes nothing");
        assert_eq!(k.observe(&RULE, Some(pages(1100)), s(182)), mib(75), "the hold is over: a quarter fades");
        assert_eq!(k.observe(&RULE, Some(pages(1100)), s(400)), Kib::ZERO, "faded out");
    }

    #[test]
    fn the_room_is_bounded_and_a_reset_count_is_a_new_base() {
        let mut k = CacheKeep::default();
        k.observe(&RULE, Some(0), s(0));
        assert_eq!(k.observe(&RULE, Some(u64::MAX), s(1)), mib(512), "a hostile count claims at most max");
        assert_eq!(k.observe(&RULE, Some(pages(10)), s(2)), mib(512), "the count went down: a new base, nothing added");
        assert_eq!(k.observe(&RULE, Some(pages(20)), s(3)), mib(512));
    }

    #[test]
    fn refaults_while_fading_add_to_what_is_left() {
        let mut k = CacheKeep::default();
        k.observe(&RULE, Some(0), s(0));
        k.observe(&RULE, Some(pages(200)), s(1));
        assert_eq!(k.kept(&RULE, s(241)), mib(100), "half faded");
        assert_eq!(k.observe(&RULE, Some(pages(210)), s(241)), mib(110), "10 MiB more on the 100 left, held again");
        assert_eq!(k.kept(&RULE, s(361)), mib(110));
    }

    #[test]
    fn off_keeps_nothing_and_forgets() {
        let mut k = CacheKeep::default();
        k.observe(&RULE, Some(0), s(0));
        k.observe(&RULE, Some(pages(100)), s(1));
        assert_eq!(k.observe(&CacheKeepRule::OFF, Some(pages(200)), s(2)), Kib::ZERO);
        assert_eq!(k, CacheKeep::default());
    }
}
