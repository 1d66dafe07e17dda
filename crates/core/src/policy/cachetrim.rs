//! Cache trim: page cache nobody reads again goes, a little at a time, while nothing says
//! it is in use.
//!
//! Why: the balloon's target counts page cache as available, but nothing makes the guest
//! drop it. A guest kept at its need plus a headroom (or plus the room its refaults
//! claimed, [`super::CacheKeep`]) holds the cache of every file it read until memory runs
//! short, and free page reporting cannot give that back: it is not free. Four guests
//! that read a 256 MiB file set once held it to the end of their job sequence, with free
//! page reporting and with autoballoon alike (docs/spikes.md, Density). Evicted, the
//! cache's pages are free; where they make whole 2 MiB blocks free page reporting returns
//! them to the host within seconds, and the balloon takes the rest at its next shrink.
//!
//! The law is senpai's (proactive reclaim held back by its own feedback), on the kernel's
//! two signals that cache is in use: file pages read again after eviction
//! (`workingset_refault_file`) and time stalled on memory (PSI `some`). Each sample, once
//! neither has risen by more than its tolerance for `calm`, asks the kernel to reclaim
//! `percent` of the file cache (at most `max_step`, never below `floor`); a rise of either
//! stops it for another `calm`. A file set still in use is read again after a step,
//! refaults, and the trim waits. The wait adapts to the guest's reuse: each time a trim
//! met a refault (it took cache still in use), the next calm is twice as long, up to
//! `calm_max`; each trim that reached its floor undisturbed halves it again, down to
//! `calm`. A file set read again every minute is trimmed and read back twice or three
//! times, then left alone, where a fixed calm shorter than its period would trim it and
//! read it back every time; cache nobody reads again goes `calm` after its last use.
//!
//! Cold cache pays for a commitment before the host does. A program that committed memory
//! it has not touched yet (`Committed_AS` beyond what is resident) is about to take that
//! much; the estimator grows the guest for it, on top of the cache it holds. Where the
//! commitment is larger than a step, half the calm in force suffices (a commitment is the
//! cost of keeping the cache now, not later) and a step asks back as much of the cache as
//! was committed, up to `commit_max_step`, at once; the room kept for cache follows it down
//! ([`super::CacheKeep`]), so the guest grows by that much less. A guest of fixed size
//! would do the same, its LRU evicting the coldest cache for the new memory; one whose
//! balloon kept the cache grew by the program's memory and the cache on top (the density
//! benchmark's fill of 800 MiB on top of its file set's 256 MiB, docs/spikes.md, Density).
//! The cache's pages come free 4 KiB at a time and a program faulting huge pages takes the
//! 2 MiB blocks the balloon gives back instead, so they stay backed by the host until the
//! balloon's next shrink (one guest's peak fell by 40-115 MiB, not by the 224 MiB asked).
//!
//! The rule is pure: time, the cache's size, the memory committed and the two counters
//! come with each input; the agent writes the step to the guest's root cgroup
//! (`memory.reclaim`), which reclaims from the cold end of the LRU.

use crate::units::{Kib, Pages, Percent};
use std::time::Duration;

/// How much cache a step asks back and what holds it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheTrimRule {
    /// The share of the file cache asked back per step; zero: off.
    pub percent: Percent,
    /// The most one step asks back.
    pub max_step: Kib,
    /// The most one step asks back for memory committed and not yet touched (zero: a
    /// commitment asks nothing more than `percent`).
    pub commit_max_step: Kib,
    /// File cache never trimmed below this.
    pub floor: Kib,
    /// A trim starts only once the cache is this much above the floor (then goes on down
    /// to the floor), so a cache that wobbles near its floor is left alone.
    pub start_above: Kib,
    /// How long neither signal may have risen before a step: the shortest calm.
    pub calm: Duration,
    /// The longest calm: a refault after a step doubles the calm up to this (at least
    /// `calm`).
    pub calm_max: Duration,
    /// Refaulted file memory between two inputs that still counts as calm.
    pub refault_tolerance: Kib,
    /// Stalled time between two inputs that still counts as calm.
    pub stall_tolerance: Duration,
    /// At most one step per this, however often inputs come.
    pub every: Duration,
}

impl CacheTrimRule {
    pub const OFF: CacheTrimRule =
        CacheTrimRule { percent: Percent::ZERO, max_step: Kib::ZERO, commit_max_step: Kib::ZERO, floor: Kib::ZERO, start_above: Kib::ZERO, calm: Duration::ZERO, calm_max: Duration::ZERO, refault_tolerance: Kib::ZERO, stall_tolerance: Duration::ZERO, every: Duration::ZERO };

    pub fn is_off(&self) -> bool {
        self.percent == Percent::ZERO || self.max_step == Kib::ZERO
    }

    /// `calm_max`, never below `calm`.
    pub fn longest_calm(&self) -> Duration {
        self.calm_max.max(self.calm)
    }
}

/// What one step sees: the time, the guest's file cache (`Active(file) + Inactive(file)`),
/// the memory committed and not yet touched ([`super::MemView::overcommitted`]) and its
/// cumulative counters, each `None` where the guest does not report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrimInput {
    pub at: Duration,
    pub file_cache: Option<Kib>,
    pub committed: Option<Kib>,
    /// `workingset_refault_file`, pages since boot.
    pub refaults: Option<u64>,
    /// PSI memory `some` total, microseconds since boot.
    pub stalled_us: Option<u64>,
}

/// Why a step asked for nothing, or what it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrimStep {
    /// Reclaim this much file cache now; `first`: the first step of a trim; `committed`:
    /// the memory committed that made the step larger than `percent` (zero: none did).
    Trim { amount: Kib, cache: Kib, first: bool, committed: Kib },
    /// A signal rose since the last input: the cache is in use. `after_trim`: the first
    /// rise since a step. `calm`: how long the next calm lasts (doubled where a step
    /// took cache that was read again).
    InUse { refaulted: Kib, stalled: Duration, after_trim: bool, calm: Duration },
    /// Calm, but not for long enough yet.
    Waiting,
    /// The cache is at its floor (`ended`: a trim just got it there), not far enough above
    /// it to start one, or not reported; or the rule is off.
    Nothing { ended: bool },
}

/// One guest's trim state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheTrim {
    last_refaults: Option<u64>,
    last_stalled_us: Option<u64>,
    /// Since when neither signal rose.
    calm_since: Option<Duration>,
    /// When the last step asked for something.
    last_trim: Option<Duration>,
    /// A trim is under way (it goes on down to the floor).
    trimming: bool,
    /// A step asked for something since the last rise of a signal.
    trimmed_since_use: bool,
    /// The calm in force (`None`: the rule's shortest).
    calm: Option<Duration>,
}

impl CacheTrim {
    /// The calm in force under `rule`: between its `calm` and its `calm_max`.
    pub fn calm(&self, rule: &CacheTrimRule) -> Duration {
        self.calm.unwrap_or(rule.calm).clamp(rule.calm, rule.longest_calm())
    }

    /// The step for `input`.
    pub fn step(&mut self, rule: &CacheTrimRule, input: TrimInput) -> TrimStep {
        if rule.is_off() {
            *self = CacheTrim::default();
            return TrimStep::Nothing { ended: false };
        }
        // A counter that went down is a new boot: a new base, no rise.
        let rise = |last: Option<u64>, now: Option<u64>| match (last, now) {
            (Some(l), Some(n)) if n >= l => n - l,
            _ => 0,
        };
        let refaulted = Pages(rise(self.last_refaults, input.refaults)).to_kib_saturating();
        let stalled = Duration::from_micros(rise(self.last_stalled_us, input.stalled_us));
        self.last_refaults = input.refaults.or(self.last_refaults);
        self.last_stalled_us = input.stalled_us.or(self.last_stalled_us);
        let refault = refaulted > rule.refault_tolerance;
        if refault || stalled > rule.stall_tolerance {
            self.calm_since = Some(input.at);
            self.trimming = false;
            let after_trim = std::mem::take(&mut self.trimmed_since_use);
            // Only a refault says the step took cache in use; a stall is any pressure.
            if after_trim && refault {
                self.calm = Some(self.calm(rule).saturating_mul(2).min(rule.longest_calm()));
            }
            return TrimStep::InUse { refaulted, stalled, after_trim, calm: self.calm(rule) };
        }
        let since = *self.calm_since.get_or_insert(input.at);
        let too_soon = self.last_trim.is_some_and(|l| input.at.saturating_sub(l) < rule.every);
        let cache = input.file_cache.unwrap_or_default();
        let share = rule.percent.of_floor(cache).min(rule.max_step);
        let for_commitment = input.committed.unwrap_or_default().min(rule.commit_max_step);
        // A commitment larger than a step waits half the calm: the cache kept now costs the
        // host its size on top of the program's memory.
        let commits = for_commitment > share;
        let calm = if commits { self.calm(rule) / 2 } else { self.calm(rule) };
        if input.at.saturating_sub(since) < calm || too_soon {
            return TrimStep::Waiting;
        }
        let Some(cache) = input.file_cache else { return TrimStep::Nothing { ended: false } };
        let above = cache.saturating_sub(rule.floor);
        let amount = share.max(for_commitment).min(above);
        let committed = if commits { input.committed.unwrap_or_default() } else { Kib::ZERO };
        if amount < Kib::from_mib_saturating(1) || (!self.trimming && above < rule.start_above) {
            let ended = std::mem::take(&mut self.trimming);
            if ended {
                // Down to the floor with nothing read again: the cache was not in use.
                self.calm = Some(self.calm(rule) / 2);
            }
            return TrimStep::Nothing { ended };
        }
        let first = !self.trimming;
        (self.trimming, self.trimmed_since_use, self.last_trim) = (true, true, Some(input.at));
        TrimStep::Trim { amount, cache, first, committed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_units::{mib, s};

    const RULE: CacheTrimRule = CacheTrimRule {
        percent: Percent::new_checked(10).unwrap(),
        max_step: Kib(32 * 1024),
        commit_max_step: Kib(256 * 1024),
        floor: Kib(32 * 1024),
        start_above: Kib(32 * 1024),
        calm: Duration::from_secs(30),
        calm_max: Duration::from_secs(30),
        refault_tolerance: Kib(1024),
        stall_tolerance: Duration::from_millis(10),
        every: Duration::from_secs(1),
    };

    fn input(at: u64, cache_mib: u64, refault_pages: u64, stalled_ms: u64) -> TrimInput {
        TrimInput { at: s(at), file_cache: Some(mib(cache_mib)), committed: None, refaults: Some(refault_pages), stalled_us: Some(stalled_ms.saturating_mul(1000)) }
    }

    #[test]
    fn a_calm_guest_gives_its_cache_a_share_at_a_time_down_to_the_floor() {
        let mut t = CacheTrim::default();
        assert_eq!(t.step(&RULE, input(0, 256, 0, 0)), TrimStep::Waiting, "calm from the first input on");
        assert_eq!(t.step(&RULE, input(29, 256, 0, 0)), TrimStep::Waiting);
        assert_eq!(t.step(&RULE, input(30, 256, 0, 0)), TrimStep::Trim { amount: Kib(26_214), cache: mib(256), first: true, committed: Kib::ZERO });
        assert_eq!(t.step(&RULE, input(31, 1000, 0, 0)), TrimStep::Trim { amount: mib(32), cache: mib(1000), first: false, committed: Kib::ZERO }, "at most max_step");
        assert_eq!(t.step(&RULE, input(32, 40, 0, 0)), TrimStep::Trim { amount: mib(4), cache: mib(40), first: false, committed: Kib::ZERO }, "10 % of 40 MiB");
        assert_eq!(t.step(&RULE, input(33, 34, 0, 0)), TrimStep::Trim { amount: mib(2), cache: mib(34), first: false, committed: Kib::ZERO }, "never below the floor");
        assert_eq!(t.step(&RULE, input(34, 32, 0, 0)), TrimStep::Nothing { ended: true }, "at the floor: the trim ends");
        assert_eq!(t.step(&RULE, input(35, 60, 0, 0)), TrimStep::Nothing { ended: false }, "28 MiB above the floor: not enough to start again");
        assert_eq!(t.step(&RULE, input(36, 64, 0, 0)), TrimStep::Trim { amount: Kib(6553), cache: mib(64), first: true, committed: Kib::ZERO }, "32 MiB above: a new trim");
        assert_eq!(t.step(&RULE, TrimInput { file_cache: None, ..input(37, 0, 0, 0) }), TrimStep::Nothing { ended: false }, "no cache figure: no step, the trim goes on at the next");
    }

    #[test]
    fn refaults_or_stalls_stop_it_for_another_calm() {
        let mut t = CacheTrim::default();
        t.step(&RULE, input(0, 256, 1000, 5));
        assert!(matches!(t.step(&RULE, input(30, 256, 1000, 5)), TrimStep::Trim { .. }));
        assert_eq!(t.step(&RULE, input(31, 230, 1000 + 256, 5)), TrimStep::Trim { amount: mib(23), cache: mib(230), first: false, committed: Kib::ZERO }, "1 MiB refaulted is within the tolerance");
        assert_eq!(t.step(&RULE, input(32, 207, 1256 + 1024, 5)), TrimStep::InUse { refaulted: mib(4), stalled: Duration::ZERO, after_trim: true, calm: s(30) }, "4 MiB read again");
        assert_eq!(t.step(&RULE, input(61, 207, 2280, 5)), TrimStep::Waiting);
        assert!(matches!(t.step(&RULE, input(62, 207, 2280, 5)), TrimStep::Trim { .. }), "calm again for 30 s");
        assert_eq!(t.step(&RULE, input(63, 190, 2280, 25)), TrimStep::InUse { refaulted: Kib::ZERO, stalled: Duration::from_millis(20), after_trim: true, calm: s(30) }, "stalled 20 ms");
        assert_eq!(t.step(&RULE, input(64, 190, 9999, 25)), TrimStep::InUse { refaulted: Kib(30876), stalled: Duration::ZERO, after_trim: false, calm: s(30) }, "no step since the last rise");
        assert_eq!(t.step(&RULE, input(92, 190, 2280, 25)), TrimStep::Waiting);
    }

    #[test]
    fn hostile_or_reset_counters_do_not_trim_early_or_panic() {
        let mut t = CacheTrim::default();
        t.step(&RULE, input(0, 256, 100, 100));
        assert!(matches!(t.step(&RULE, input(1, 256, u64::MAX, u64::MAX)), TrimStep::InUse { .. }), "a huge rise is a rise");
        assert_eq!(t.step(&RULE, input(2, 256, 5, 5)), TrimStep::Waiting, "counters that went down: a new base, still waiting");
        assert_eq!(t.step(&RULE, TrimInput { refaults: None, stalled_us: None, ..input(31, 256, 0, 0) }), TrimStep::Trim { amount: Kib(26_214), cache: mib(256), first: true, committed: Kib::ZERO }, "no counters this time: no rise");
        assert_eq!(t.step(&RULE, input(1, 256, 5, 5)), TrimStep::Waiting, "time going back counts as no time");
        let huge = Kib(u64::MAX);
        assert_eq!(t.step(&RULE, TrimInput { file_cache: Some(huge), ..input(40, 0, 5, 5) }), TrimStep::Trim { amount: mib(32), cache: huge, first: false, committed: Kib::ZERO }, "no overflow");
    }

    #[test]
    fn the_calm_doubles_when_a_trim_took_cache_in_use_and_halves_when_one_went_to_the_floor() {
        let rule = CacheTrimRule { calm: s(10), calm_max: s(40), ..RULE };
        let mut t = CacheTrim::default();
        assert_eq!(t.calm(&rule), s(10));
        t.step(&rule, input(0, 256, 0, 0));
        assert!(matches!(t.step(&rule, input(10, 256, 0, 0)), TrimStep::Trim { first: true, .. }), "the shortest calm first");
        assert_eq!(t.step(&rule, input(11, 230, 1024, 0)), TrimStep::InUse { refaulted: mib(4), stalled: Duration::ZERO, after_trim: true, calm: s(20) }, "read again: twice the calm");
        assert_eq!(t.step(&rule, input(30, 230, 1024, 0)), TrimStep::Waiting);
        assert!(matches!(t.step(&rule, input(31, 230, 1024, 0)), TrimStep::Trim { first: true, .. }), "after 20 s");
        assert!(matches!(t.step(&rule, input(32, 207, 2048, 0)), TrimStep::InUse { calm, .. } if calm == s(40)));
        assert!(matches!(t.step(&rule, input(33, 207, 2048, 0)), TrimStep::Waiting));
        assert_eq!(t.step(&rule, input(34, 207, 3072, 0)), TrimStep::InUse { refaulted: mib(4), stalled: Duration::ZERO, after_trim: false, calm: s(40) }, "no step since the last rise: no doubling");
        assert!(matches!(t.step(&rule, input(74, 207, 3072, 0)), TrimStep::Trim { .. }), "40 s after the last rise");
        assert!(matches!(t.step(&rule, input(75, 186, 4096, 0)), TrimStep::InUse { calm, .. } if calm == s(40)), "never above calm_max");
        // A stall after a step is pressure, not reuse: the calm stays.
        assert!(matches!(t.step(&rule, input(115, 186, 4096, 0)), TrimStep::Trim { .. }));
        assert!(matches!(t.step(&rule, input(116, 170, 4096, 50)), TrimStep::InUse { after_trim: true, calm, .. } if calm == s(40)));
        // Down to the floor undisturbed: half the calm.
        assert!(matches!(t.step(&rule, input(156, 70, 4096, 50)), TrimStep::Trim { .. }));
        assert!(matches!(t.step(&rule, input(157, 32, 4096, 50)), TrimStep::Nothing { ended: true }));
        assert_eq!(t.calm(&rule), s(20));
    }

    #[test]
    fn a_longest_calm_below_the_shortest_is_the_shortest() {
        let rule = CacheTrimRule { calm: s(30), calm_max: s(5), ..RULE };
        let mut t = CacheTrim::default();
        t.step(&rule, input(0, 256, 0, 0));
        assert!(matches!(t.step(&rule, input(30, 256, 0, 0)), TrimStep::Trim { .. }));
        assert!(matches!(t.step(&rule, input(31, 230, 1024, 0)), TrimStep::InUse { calm, .. } if calm == s(30)));
    }

    #[test]
    fn a_commitment_takes_cold_cache_at_once_up_to_its_size() {
        let mut t = CacheTrim::default();
        let with = |at: u64, cache: u64, committed: u64| TrimInput { committed: Some(mib(committed)), ..input(at, cache, 0, 0) };
        assert_eq!(t.step(&RULE, with(0, 330, 800)), TrimStep::Waiting, "calm from the first input on");
        assert_eq!(t.step(&RULE, with(14, 330, 800)), TrimStep::Waiting, "within half the calm a commitment changes nothing");
        assert_eq!(t.step(&RULE, with(14, 330, 10)), TrimStep::Waiting, "a small one waits the whole calm");
        assert_eq!(t.step(&RULE, with(15, 330, 100)), TrimStep::Trim { amount: mib(100), cache: mib(330), first: true, committed: mib(100) }, "half the calm: as much as was committed");
        assert_eq!(t.step(&RULE, with(16, 230, 800)), TrimStep::Trim { amount: mib(198), cache: mib(230), first: false, committed: mib(800) }, "never below the floor");
        assert_eq!(t.step(&RULE, with(17, 1000, 800)), TrimStep::Trim { amount: mib(256), cache: mib(1000), first: false, committed: mib(800) }, "at most commit_max_step");
        assert_eq!(t.step(&RULE, with(18, 1000, 10)), TrimStep::Waiting, "the share is larger: the whole calm");
        assert_eq!(t.step(&RULE, with(30, 1000, 10)), TrimStep::Trim { amount: mib(32), cache: mib(1000), first: false, committed: Kib::ZERO }, "then an ordinary step");
        let off = CacheTrimRule { commit_max_step: Kib::ZERO, ..RULE };
        assert_eq!(t.step(&off, with(31, 300, 800)), TrimStep::Trim { amount: mib(30), cache: mib(300), first: false, committed: Kib::ZERO }, "commit_max_step zero: the share alone");
    }

    #[test]
    fn one_step_a_second_however_often_samples_come() {
        let mut t = CacheTrim::default();
        t.step(&RULE, input(0, 256, 0, 0));
        assert!(matches!(t.step(&RULE, input(30, 256, 0, 0)), TrimStep::Trim { .. }));
        let quarter = TrimInput { at: s(30) + Duration::from_millis(250), ..input(0, 256, 0, 0) };
        assert_eq!(t.step(&RULE, quarter), TrimStep::Waiting);
        assert!(matches!(t.step(&RULE, input(31, 256, 0, 0)), TrimStep::Trim { .. }));
    }

    #[test]
    fn off_asks_for_nothing_and_forgets() {
        let mut t = CacheTrim::default();
        t.step(&RULE, input(0, 256, 0, 0));
        assert_eq!(t.step(&CacheTrimRule::OFF, input(100, 256, 0, 0)), TrimStep::Nothing { ended: false });
        assert_eq!(t, CacheTrim::default());
    }
}
