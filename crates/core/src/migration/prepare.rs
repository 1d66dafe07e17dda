//! Preparing a migration (`autoballoon migrate`), and stopping a shrink when one starts.
//! Pure: the host's actor reads the balloon and the clock and asks these when to send
//! `migrate` and what size to set. Times are the actor's own (time since it started).

use crate::Kib;
use std::fmt;
use std::time::Duration;

/// The longest a prepared migration waits for the balloon before it migrates anyway.
pub const PREPARE_WAIT: Duration = Duration::from_secs(10);
/// The balloon is where it is going once `actual` is this close to the target (and a
/// shrink is under way only while the target is further below `actual` than this).
pub const PREPARE_SLACK: Kib = Kib(2 * 1024);
/// The balloon has stopped (deflate-on-oom pushes back, the guest cannot give more) once
/// `actual` has not moved for this long.
pub const PREPARE_STALL: Duration = Duration::from_millis(1500);
/// With neither a target nor a decision this long after the request, the decider is not
/// deciding (e.g. no fresh sample): migrate as the guest is.
pub const PREPARE_NOTHING: Duration = Duration::from_millis(2500);
/// A preparation's progress is logged at most this often.
pub const PREPARE_PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Why a prepared migration starts now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartReason {
    /// Autoballoon is paused for the VM: the balloon is not ours to wait for.
    Paused,
    ReachedTarget,
    StoppedShort,
    /// The decider decided and changed nothing.
    NothingToShrink,
    /// No target and no decision within [`PREPARE_NOTHING`].
    NoDecision,
    /// [`PREPARE_WAIT`] is up.
    TimedOut,
}

impl fmt::Display for StartReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StartReason::Paused => "autoballoon is paused for this VM: the balloon is left alone",
            StartReason::ReachedTarget => "the balloon reached the target",
            StartReason::StoppedShort => "the balloon stopped short of the target",
            StartReason::NothingToShrink => "nothing to shrink",
            StartReason::NoDecision => "no decision came: migrating as the guest is",
            StartReason::TimedOut => "timed out waiting for the balloon",
        })
    }
}

/// A migration request being prepared: what the decider did since, and how the balloon
/// moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preparation {
    asked: Duration,
    /// The last target applied since the request.
    target: Option<Kib>,
    /// The last `actual` seen and when it last changed.
    actual: Option<(Kib, Duration)>,
    /// The decider decided on a preparing sample and changed nothing.
    held: bool,
    logged: Duration,
}

impl Preparation {
    /// A request made at `now`.
    pub fn new(now: Duration) -> Preparation {
        Preparation { asked: now, target: None, actual: None, held: false, logged: now }
    }

    /// A target was applied: the balloon has not had time to move towards it yet.
    pub fn target_set(&mut self, target: Kib) {
        self.target = Some(target);
        self.actual = None;
    }

    /// The decider decided and changed nothing.
    pub fn held(&mut self) {
        self.held = true;
    }

    /// `actual` read at `now`.
    pub fn observe(&mut self, actual: Kib, now: Duration) {
        match self.actual {
            Some((a, _)) if a == actual => {}
            _ => self.actual = Some((actual, now)),
        }
    }

    pub fn target(&self) -> Option<Kib> {
        self.target
    }

    /// How long since the request.
    pub fn waited(&self, now: Duration) -> Duration {
        now.saturating_sub(self.asked)
    }

    /// Whether a progress line is due at `now` (then the next one is a period away).
    pub fn progress_due(&mut self, now: Duration) -> bool {
        if now.saturating_sub(self.logged) >= PREPARE_PROGRESS_EVERY {
            self.logged = now;
            return true;
        }
        false
    }

    /// Why the migration starts now, with the balloon at `actual`; `None`: wait on.
    pub fn ready(&self, actual: Kib, paused: bool, now: Duration) -> Option<StartReason> {
        if paused {
            return Some(StartReason::Paused);
        }
        let waited = self.waited(now);
        match self.target {
            Some(t) if actual <= t.saturating_add(PREPARE_SLACK) => Some(StartReason::ReachedTarget),
            Some(_) if self.actual.is_some_and(|(_, since)| now.saturating_sub(since) >= PREPARE_STALL) => Some(StartReason::StoppedShort),
            None if self.held => Some(StartReason::NothingToShrink),
            None if waited >= PREPARE_NOTHING => Some(StartReason::NoDecision),
            _ if waited >= PREPARE_WAIT => Some(StartReason::TimedOut),
            _ => None,
        }
    }
}

/// Why a migration request (`autoballoon migrate`) cannot be taken now; `None`: take it.
/// `session`: `None` without a session with the hypervisor, else whether it can start a
/// migration (`Err` says why not); `busy`: an earlier request is being prepared or runs.
pub fn request_refused(session: Option<Result<(), &'static str>>, busy: bool) -> Option<&'static str> {
    match session {
        None => Some("no QMP session to this VM"),
        Some(Err(why)) => Some(why),
        Some(Ok(())) if busy => Some("a migration requested earlier is still being prepared or runs"),
        Some(Ok(())) => None,
    }
}

/// Where to stop a shrink still under way when a migration starts that must not see the
/// balloon shrink: the last target set, `target`, is below the balloon's `actual` (by more
/// than [`PREPARE_SLACK`]), so the guest's driver would go on inflating towards it. `Some`:
/// set the target to `actual` (the size the balloon is at).
pub fn stop_shrink_at(target: Option<Kib>, actual: Kib) -> Option<StopShrink> {
    target.filter(|t| t.saturating_add(PREPARE_SLACK) < actual).map(|towards| StopShrink { towards, at: actual })
}

/// A shrink to stop: it was going `towards` a target; the balloon stops `at` its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopShrink {
    pub towards: Kib,
    pub at: Kib,
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: Kib = Kib(1024 * 1024);
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn starts_once_the_balloon_reaches_the_target() {
        let mut p = Preparation::new(ms(1000));
        assert_eq!(p.ready(Kib(4 * GIB.0), false, ms(1100)), None);
        p.target_set(Kib(2 * GIB.0));
        p.observe(Kib(3 * GIB.0), ms(1200));
        assert_eq!(p.ready(Kib(3 * GIB.0), false, ms(1200)), None);
        // Within the slack of the target.
        let near = Kib(2 * GIB.0).saturating_add(PREPARE_SLACK);
        assert_eq!(p.ready(near, false, ms(1300)), Some(StartReason::ReachedTarget));
        assert_eq!(p.ready(near.saturating_add(Kib(4)), false, ms(1300)), None);
    }

    #[test]
    fn a_balloon_that_stops_moving_starts_the_migration() {
        let mut p = Preparation::new(ms(0));
        p.target_set(GIB);
        p.observe(Kib(3 * GIB.0), ms(100));
        p.observe(Kib(3 * GIB.0), ms(1500));
        assert_eq!(p.ready(Kib(3 * GIB.0), false, ms(1599)), None);
        assert_eq!(p.ready(Kib(3 * GIB.0), false, ms(1600)), Some(StartReason::StoppedShort));
        // It moved: the stall clock starts over; a new target too.
        p.observe(Kib(2 * GIB.0), ms(1600));
        assert_eq!(p.ready(Kib(2 * GIB.0), false, ms(2000)), None);
        p.target_set(Kib(GIB.0 / 2));
        assert_eq!(p.ready(Kib(2 * GIB.0), false, ms(9000)), None, "no actual seen since the new target");
    }

    #[test]
    fn without_a_target_it_waits_for_a_decision_then_goes() {
        let p = Preparation::new(ms(0));
        assert_eq!(p.ready(GIB, false, ms(2499)), None);
        assert_eq!(p.ready(GIB, false, ms(2500)), Some(StartReason::NoDecision));
        let mut p = Preparation::new(ms(0));
        p.held();
        assert_eq!(p.ready(GIB, false, ms(10)), Some(StartReason::NothingToShrink));
    }

    #[test]
    fn paused_starts_at_once_and_every_wait_ends() {
        let p = Preparation::new(ms(0));
        assert_eq!(p.ready(GIB, true, ms(0)), Some(StartReason::Paused));
        let mut p = Preparation::new(ms(0));
        p.target_set(Kib(GIB.0 / 2));
        assert_eq!(p.ready(GIB, false, PREPARE_WAIT - ms(1)), None);
        assert_eq!(p.ready(GIB, false, PREPARE_WAIT), Some(StartReason::TimedOut));
        // A clock that went backwards waits rather than panics.
        assert_eq!(Preparation::new(ms(500)).ready(GIB, false, ms(0)), None);
    }

    #[test]
    fn progress_is_due_once_a_second() {
        let mut p = Preparation::new(ms(0));
        assert!(!p.progress_due(ms(999)));
        assert!(p.progress_due(ms(1000)));
        assert!(!p.progress_due(ms(1999)));
        assert!(p.progress_due(ms(2000)));
        assert_eq!(p.waited(ms(2000)), ms(2000));
    }

    #[test]
    fn a_request_needs_a_session_that_can_migrate_and_no_other_request() {
        assert_eq!(request_refused(Some(Ok(())), false), None);
        assert!(request_refused(None, false).is_some());
        assert_eq!(request_refused(Some(Err("not here")), false), Some("not here"));
        assert!(request_refused(Some(Ok(())), true).is_some());
    }

    #[test]
    fn a_shrink_under_way_is_stopped_where_the_balloon_is() {
        assert_eq!(stop_shrink_at(Some(GIB), Kib(3 * GIB.0)), Some(StopShrink { towards: GIB, at: Kib(3 * GIB.0) }));
        // At the target already (within the slack), or growing: nothing to stop.
        assert_eq!(stop_shrink_at(Some(GIB), GIB.saturating_add(PREPARE_SLACK)), None);
        assert_eq!(stop_shrink_at(Some(Kib(3 * GIB.0)), GIB), None);
        assert_eq!(stop_shrink_at(None, GIB), None);
        assert_eq!(stop_shrink_at(Some(Kib::MAX), Kib::MAX), None);
    }
}
