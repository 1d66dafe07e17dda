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
//!
//! What the room keeps is never more than the file cache the guest holds at the sample
//! (`Active(file) + Inactive(file)`) and what it refaulted since the last one (that cache
//! is on its way): room for cache that is not there is free memory.
//! Sequential re-reads of a set larger than the guest's cache refault every page, so the
//! refaults add up past the set (a 256 MiB set read three times claimed 318-339 MiB), and
//! once the cache trim dropped the set the room kept its place free for the hold and the
//! fade (the density benchmark's guests stayed at 535-568 MiB with 400 MiB free for a
//! minute, 2026-12-02; free page reporting returned it to the host, a guest without it
//! would not have). The bound is on what is kept, not on the room: cache squeezed out by a
//! spike comes back into its room as it is read again, the kept part growing with the
//! cache by what each sample refaulted, as fast as without the bound.

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
    /// reported this time) and the file cache it holds (`None`: not known), and returns
    /// what is kept for its cache: the room, at most that cache and what was refaulted
    /// since the last sample (cache on its way into the room).
    pub fn observe(&mut self, rule: &CacheKeepRule, refaults: Option<u64>, file_cache: Option<Kib>, at: Duration) -> Kib {
        if rule.max == Kib::ZERO {
            *self = CacheKeep::default();
            return Kib::ZERO;
        }
        let new = refaults.map_or(Kib::ZERO, |count| self.count(count));
        if new > Kib::ZERO {
            let room = self.kept(rule, at).saturating_add(new).min(rule.max);
            self.room = Some((room, at));
        }
        let room = self.kept(rule, at);
        file_cache.map_or(room, |c| room.min(c.saturating_add(new)))
    }

    /// What `count` adds to the last count. A count that went down is a new boot (or a
    /// new guest under the same name): nothing to compare with yet.
    fn count(&mut self, count: u64) -> Kib {
        let new = match self.last_count {
            Some(last) if count >= last => count - last,
            _ => 0,
        };
        self.last_count = Some(count);
        Pages(new).to_kib_saturating()
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
        assert_eq!(k.observe(&RULE, Some(pages(1000)), None, s(0)), Kib::ZERO, "the first count is only a base");
        assert_eq!(k.observe(&RULE, Some(pages(1040)), None, s(1)), mib(40), "40 MiB read again");
        assert_eq!(k.observe(&RULE, Some(pages(1100)), None, s(2)), mib(100));
        assert_eq!(k.observe(&RULE, Some(pages(1100)), None, s(100)), mib(100), "the set fits: no more refaults, the room stays");
        assert_eq!(k.observe(&RULE, None, None, s(121)), mib(100), "a sample without the count changes nothing");
        assert_eq!(k.observe(&RULE, Some(pages(1100)), None, s(182)), mib(75), "the hold is over: a quarter fades");
        assert_eq!(k.observe(&RULE, Some(pages(1100)), None, s(400)), Kib::ZERO, "faded out");
    }

    #[test]
    fn the_room_is_bounded_and_a_reset_count_is_a_new_base() {
        let mut k = CacheKeep::default();
        k.observe(&RULE, Some(0), None, s(0));
        assert_eq!(k.observe(&RULE, Some(u64::MAX), None, s(1)), mib(512), "a hostile count claims at most max");
        assert_eq!(k.observe(&RULE, Some(pages(10)), None, s(2)), mib(512), "the count went down: a new base, nothing added");
        assert_eq!(k.observe(&RULE, Some(pages(20)), None, s(3)), mib(512));
    }

    #[test]
    fn refaults_while_fading_add_to_what_is_left() {
        let mut k = CacheKeep::default();
        k.observe(&RULE, Some(0), None, s(0));
        k.observe(&RULE, Some(pages(200)), None, s(1));
        assert_eq!(k.kept(&RULE, s(241)), mib(100), "half faded");
        assert_eq!(k.observe(&RULE, Some(pages(210)), None, s(241)), mib(110), "10 MiB more on the 100 left, held again");
        assert_eq!(k.kept(&RULE, s(361)), mib(110));
    }

    #[test]
    fn what_is_kept_is_at_most_the_cache_there() {
        let mut k = CacheKeep::default();
        k.observe(&RULE, Some(0), Some(mib(64)), s(0));
        assert_eq!(k.observe(&RULE, Some(pages(200)), Some(mib(64)), s(1)), mib(200), "200 MiB refaulted: kept at once, for the cache on its way");
        assert_eq!(k.observe(&RULE, Some(pages(300)), Some(mib(230)), s(2)), mib(300), "100 more on the 200 there");
        assert_eq!(k.observe(&RULE, Some(pages(300)), Some(mib(256)), s(3)), mib(256), "no more refaults: the 256 MiB the set took, not the 300 its reads added up to");
        assert_eq!(k.observe(&RULE, Some(pages(300)), Some(mib(400)), s(4)), mib(300), "the room bounds it");
        assert_eq!(k.observe(&RULE, Some(pages(300)), Some(mib(40)), s(5)), mib(40), "trimmed: its place is not kept free");
        assert_eq!(k.observe(&RULE, Some(pages(300)), None, s(6)), mib(300), "the room itself stays: no cache figure, no bound");
        assert_eq!(k.kept(&RULE, s(7)), mib(300));
    }

    #[test]
    fn off_keeps_nothing_and_forgets() {
        let mut k = CacheKeep::default();
        k.observe(&RULE, Some(0), None, s(0));
        k.observe(&RULE, Some(pages(100)), None, s(1));
        assert_eq!(k.observe(&CacheKeepRule::OFF, Some(pages(200)), None, s(2)), Kib::ZERO);
        assert_eq!(k, CacheKeep::default());
    }
}
