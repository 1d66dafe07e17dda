//! The commitment watch: between samples, while the guest has little memory to spare, the
//! agent reads `/proc/meminfo` every [`WATCH_EVERY`] and samples at once when what its
//! programs hold or were promised ([`MemView::demand`]) grew by [`DROP`] since the last sample;
//! every [`WATCH_EVERY_BUSY`] for [`BUSY_FOR`] after that demand last grew, except once the
//! programs stopped committing and while they hold what they committed ([`WATCH_EVERY_HELD`]).
//!
//! Why: the pressure trigger ([`crate::trigger`]) wakes the agent only once tasks stall on
//! memory. A program that commits memory and touches it at its own pace (a slow ramp), or a
//! guest whose allocations the patched kernel's hook serves without a stall, stalls late or
//! never, and was seen at the next once-a-second sample: growth reactions of 0.55-0.91 s on
//! a 100 MiB/s ramp (docs/spikes.md; 0.08-0.11 s with the watch). What programs were
//! promised (`Committed_AS`) grows the moment such a program maps its memory, before it
//! touches any.
//!
//! Not the margin itself (`MemAvailable` less what is committed and not touched): it falls
//! too when free page hinting holds the guest's free pages during a migration, or while
//! the balloon takes memory the host asked back, and a sample that says "running short"
//! then lets the host grow the guest in the middle of a migration for a need nobody has
//! (seen on QEMU 10: a hinted migration's shed followed by a growth of 857 MiB half a second
//! later, docs/migration.md).
//!
//! A guest whose balloon device reports free pages is watched whatever its margin
//! ([`Watch::set_whatever_the_margin`]) once its host says it backs reported memory again on
//! request (`HostMessage::Abilities`): what the guest keeps free has gone back to the host,
//! and it faults that memory in again page by page, so a program's commitment is worth
//! telling the host at once even when the guest has room for it, and the host backs it
//! ahead of the program (core's `back_ahead`, docs/spikes.md, *Backing reported memory
//! ahead of a spike*). A host that cannot (QEMU as upstream ships it) gains nothing from
//! those reads, which take the vCPU from the program: the guest is then watched only
//! below the margin.
//!
//! The rule is pure; the agent's loop reads the file and acts on it.

use autoballoon_core::policy::MemView;
use autoballoon_core::Kib;
use std::time::{Duration, Instant};

/// How often the margin is read between samples while watched.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);
/// How often while watched only because the guest's free memory is reported (its margin
/// is ample) and its programs' demand has not grown for [`BUSY_FOR`]: each read of
/// `/proc/meminfo` costs the agent CPU (under TCG, 10 reads a second took its share over
/// `make bench`'s footprint workload from 0.54 % to 1.18 % of a vCPU), and a guest with
/// room to spare loses no more than the pages it touches meanwhile.
pub const WATCH_EVERY_AMPLE: Duration = Duration::from_millis(250);
/// How often, whatever the margin, within [`BUSY_FOR`] of the last time the programs'
/// demand grew: a guest whose programs come back for memory again and again. A spike
/// touches memory at over 2 GiB/s; what it touches before the host hears of it, the host
/// faults in again 4 KiB at a time where its page table stayed (docs/spikes.md, *An
/// earlier request*): on QEMU 10, 405-28,765 vCPU faults a steady spike read at 250 ms,
/// 118-2,630 at 50 ms.
pub const WATCH_EVERY_BUSY: Duration = Duration::from_millis(50);
/// How often after the programs' demand grew, once a read found it grown no further, until
/// it falls by [`DROP`] again: the growth went to the host with the sample it woke, and a
/// read now only finds what another program commits meanwhile (while the demand still
/// grows from read to read, a spike's threads starting one after another, the pace stays
/// [`WATCH_EVERY_BUSY`]). Each read takes a vCPU from the spike: at [`WATCH_EVERY_BUSY`]
/// throughout (and before reads were made cheaper, [`crate::procfile`]) the agent took
/// 67-103 ms of a single vCPU over a spike of 3 × 400 MiB under TCG, 5-19 ms without the
/// watch; with this pace and those reads, 7-19 ms (docs/spikes.md, *The watch's own cost*).
pub const WATCH_EVERY_HELD: Duration = Duration::from_millis(250);
/// How long after the programs' demand last grew the guest counts as busy.
pub const BUSY_FOR: Duration = Duration::from_secs(60);
/// The guest is watched while its margin at the last sample was below this: a guest with
/// more to spare absorbs what a program commits without growing.
pub const WATCH_BELOW: Kib = Kib::from_mib_saturating(512);
/// A growth of the programs' demand since the last sample that is worth sampling at once.
pub const DROP: Kib = Kib::from_mib_saturating(32);

/// What the guest can still give its programs: `MemAvailable − overcommitted`.
pub fn margin(m: &MemView) -> Kib {
    m.available.saturating_sub(m.overcommitted())
}

/// The demand at the last sample, if the guest is watched after it (its margin was
/// below [`WATCH_BELOW`], or it is watched whatever its margin), and how often to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Watch {
    last: Option<Kib>,
    always: bool,
    ample: bool,
    /// When the programs' demand last grew by [`DROP`] between two samples or reads.
    grew_at: Option<Instant>,
    /// The programs' demand since it last grew, until a sample or read sees it fall by
    /// [`DROP`] below its peak.
    held: Option<Held>,
}

/// What the programs' demand did since it last grew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    peak: Kib,
    /// A read found it no higher than the sample or read before: the programs stopped
    /// committing, and the host has heard of what they hold.
    settled: bool,
}

impl Watch {
    /// Watches whatever the margin (`true`: a guest whose free memory goes back to the host
    /// and whose host backs it again ahead of a program) or only below [`WATCH_BELOW`] from
    /// the next sample on, keeping what the watch has seen; whether that changed anything.
    pub fn set_whatever_the_margin(&mut self, always: bool) -> bool {
        std::mem::replace(&mut self.always, always) != always
    }

    /// Takes the sample's view (none: not watched), taken at `now`: a demand grown by
    /// [`DROP`] since the sample before counts as busy, whether or not a read between
    /// the two saw it.
    pub fn after_sample(&mut self, m: Option<&MemView>, now: Instant) {
        if let Some(m) = m {
            self.see(m, now, false);
        }
        self.ample = m.is_some_and(|m| margin(m) >= WATCH_BELOW);
        self.last = m.filter(|_| self.always || !self.ample).map(MemView::demand);
        if self.last.is_none() {
            self.held = None;
        }
    }

    /// How often to read the margin while watched, `now`.
    pub fn every(&self, now: Instant) -> Duration {
        if self.held.is_some_and(|h| h.settled) {
            WATCH_EVERY_HELD
        } else if self.grew_at.is_some_and(|t| now.saturating_duration_since(t) < BUSY_FOR) {
            WATCH_EVERY_BUSY
        } else if self.ample {
            WATCH_EVERY_AMPLE
        } else {
            WATCH_EVERY
        }
    }

    pub fn watching(&self) -> bool {
        self.last.is_some()
    }

    /// Whether the demand in `m`, read at `now`, grew far enough since the last sample to
    /// sample at once; if so, the guest counts as busy from `now`.
    pub fn grew(&mut self, m: &MemView, now: Instant) -> bool {
        self.see(m, now, true)
    }

    /// [`Watch::grew`] for a read (`read`: it may find the growth settled) or a sample (it
    /// follows the read that woke it at once, so it says nothing of what came after).
    fn see(&mut self, m: &MemView, now: Instant, read: bool) -> bool {
        let Some(last) = self.last else { return false };
        let demand = m.demand();
        let grew = demand >= last.saturating_add(DROP);
        if grew {
            self.grew_at = Some(now);
        }
        self.held = match self.held {
            Some(h) if demand.saturating_add(DROP) <= h.peak => None,
            Some(h) if demand >= h.peak.saturating_add(DROP) => Some(Held { peak: demand, settled: false }),
            Some(h) => Some(Held { peak: h.peak.max(demand), settled: h.settled || read }),
            None => grew.then_some(Held { peak: demand, settled: false }),
        };
        grew
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch at any margin, as the agent sets it once the host says it backs ahead.
    fn any_margin() -> Watch {
        let mut w = Watch::default();
        w.set_whatever_the_margin(true);
        w
    }

    fn view(available_mib: u64, committed_mib: u64, anon_mib: u64) -> MemView {
        let mib = Kib::from_mib_saturating;
        MemView { total: mib(2048), available: mib(available_mib), committed_as: mib(committed_mib), anon_and_shmem: Some(mib(anon_mib)), ..MemView::default() }
    }

    #[test]
    fn a_program_that_maps_its_memory_wakes_the_agent_before_it_touches_any() {
        let t = Instant::now();
        let mut w = Watch::default();
        w.after_sample(Some(&view(80, 200, 190)), t);
        assert!(w.watching(), "70 MiB to spare: watched");
        assert_eq!(w.every(t), WATCH_EVERY);
        assert!(!w.grew(&view(80, 200, 190), t), "nothing changed");
        assert!(!w.grew(&view(70, 210, 200), t), "10 MiB less: not worth a sample");
        assert!(w.grew(&view(80, 1400, 190), t), "1.2 GiB mapped, none of it touched yet");
        assert!(w.grew(&view(30, 200, 240), t), "50 MiB touched: a slow ramp");
    }

    #[test]
    fn hinting_and_the_balloon_taking_memory_are_no_reason_to_sample() {
        let t = Instant::now();
        let mut w = Watch::default();
        w.after_sample(Some(&view(150, 200, 190)), t);
        assert!(w.watching());
        assert!(!w.grew(&view(0, 200, 190), t), "free page hinting holds every free page");
        assert!(!w.grew(&view(40, 200, 190), t), "the balloon took 110 MiB");
        assert_eq!(w.every(t), WATCH_EVERY, "no growth: not busy");
        assert!(w.grew(&view(0, 400, 190), t), "a program mapped 200 MiB while hinting held the rest");
    }

    #[test]
    fn a_guest_with_room_to_spare_is_not_watched() {
        let t = Instant::now();
        let mut w = Watch::default();
        w.after_sample(Some(&view(1800, 200, 190)), t);
        assert!(!w.watching());
        assert!(!w.grew(&view(0, 2000, 190), t), "not watched: the next sample sees it");
        w.after_sample(None, t);
        assert!(!w.watching(), "no view: not watched");
    }

    #[test]
    fn a_guest_whose_free_memory_is_reported_is_watched_with_room_to_spare() {
        let t = Instant::now();
        let mut w = any_margin();
        w.after_sample(Some(&view(1800, 200, 190)), t);
        assert!(w.watching());
        assert_eq!(w.every(t), WATCH_EVERY_AMPLE, "room to spare: read less often");
        assert!(w.grew(&view(1800, 1400, 190), t), "1.2 GiB mapped into a guest that has it free");
        w.after_sample(None, t);
        assert!(!w.watching(), "no view: not watched");
    }

    #[test]
    fn the_host_saying_what_it_backs_switches_the_watch_at_the_next_sample() {
        let t = Instant::now();
        let mut w = Watch::default();
        w.after_sample(Some(&view(1800, 200, 190)), t);
        assert!(!w.watching(), "room to spare, no host that backs ahead: not watched");
        assert!(w.set_whatever_the_margin(true), "the host backs reported memory ahead");
        assert!(!w.set_whatever_the_margin(true), "said again: no change");
        w.after_sample(Some(&view(1800, 200, 190)), t);
        assert!(w.watching(), "watched from the next sample on");
        assert!(w.grew(&view(1800, 1400, 190), t));
        assert!(w.set_whatever_the_margin(false), "a new QEMU that does not");
        w.after_sample(Some(&view(1800, 1400, 190)), t);
        assert!(!w.watching());
        assert_eq!(w.every(t), WATCH_EVERY_BUSY, "what it saw is kept: the demand grew a moment ago");
    }

    #[test]
    fn a_guest_whose_programs_came_back_for_memory_lately_is_read_more_often() {
        let t = Instant::now();
        let mut w = any_margin();
        w.after_sample(Some(&view(1800, 200, 190)), t);
        assert!(w.grew(&view(1800, 1400, 190), t), "a spike's programs mapped 1.2 GiB");
        w.after_sample(Some(&view(1800, 200, 190)), t);
        assert_eq!(w.every(t + Duration::from_secs(8)), WATCH_EVERY_BUSY, "the next spike comes within seconds");
        assert_eq!(w.every(t + BUSY_FOR), WATCH_EVERY_AMPLE, "a minute without one: back to the ample pace");
        let mut short = Watch::default();
        short.after_sample(Some(&view(80, 200, 190)), t);
        assert!(short.grew(&view(80, 400, 190), t));
        short.after_sample(Some(&view(80, 200, 190)), t);
        assert_eq!(short.every(t), WATCH_EVERY_BUSY, "busy beats a short margin too");
        let mut sampled = any_margin();
        sampled.after_sample(Some(&view(1800, 200, 190)), t);
        sampled.after_sample(Some(&view(1800, 1400, 190)), t);
        assert_eq!(sampled.every(t), WATCH_EVERY_BUSY, "a sample, not a read, saw the growth");
        assert!(!sampled.grew(&view(1800, 200, 190), t), "the spike's programs freed it");
        assert_eq!(sampled.every(t), WATCH_EVERY_BUSY, "busy until the next spike");
    }

    #[test]
    fn a_growth_told_and_still_held_is_read_at_the_slower_pace() {
        let t = Instant::now();
        let mut w = any_margin();
        w.after_sample(Some(&view(1800, 200, 190)), t);
        assert!(w.grew(&view(1800, 1400, 190), t), "a spike's programs mapped 1.2 GiB");
        w.after_sample(Some(&view(1000, 1400, 990)), t);
        assert_eq!(w.every(t), WATCH_EVERY_BUSY, "more of the spike's threads may be mapping theirs");
        assert!(!w.grew(&view(600, 1400, 1390), t), "touching what was committed is no growth");
        assert_eq!(w.every(t), WATCH_EVERY_HELD, "the host has the growth; the spike has the vCPU");
        assert!(w.grew(&view(600, 1700, 1390), t), "another program commits 300 MiB: still seen");
        assert_eq!(w.every(t), WATCH_EVERY_BUSY);
        w.after_sample(Some(&view(400, 1700, 1590)), t);
        assert!(!w.grew(&view(400, 1690, 1580), t), "10 MiB freed: still held");
        assert_eq!(w.every(t), WATCH_EVERY_HELD);
        assert!(!w.grew(&view(1800, 200, 190), t), "the programs freed it");
        assert_eq!(w.every(t + Duration::from_secs(8)), WATCH_EVERY_BUSY, "the next spike comes within seconds");
    }

    #[test]
    fn threads_that_map_their_memory_one_after_another_are_read_at_the_busy_pace_until_the_last() {
        let t = Instant::now();
        let mut w = any_margin();
        w.after_sample(Some(&view(1800, 200, 190)), t);
        for (i, committed) in [600, 1000, 1400].into_iter().enumerate() {
            assert!(w.grew(&view(1800, committed, 190), t), "thread {i} mapped 400 MiB");
            w.after_sample(Some(&view(1800, committed, 190)), t);
            assert_eq!(w.every(t), WATCH_EVERY_BUSY, "thread {i}");
        }
        assert!(!w.grew(&view(1500, 1400, 490), t));
        assert_eq!(w.every(t), WATCH_EVERY_HELD, "no thread mapped more since the last read");
    }

    #[test]
    fn the_margin_leaves_out_what_programs_committed_and_have_not_touched() {
        assert_eq!(margin(&view(500, 800, 300)), Kib::ZERO);
        assert_eq!(margin(&view(500, 400, 300)), Kib::from_mib_saturating(400));
    }
}
