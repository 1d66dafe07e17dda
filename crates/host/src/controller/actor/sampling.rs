//! The actor's sampling: the balloon's `actual`, the agent's report and guest-stats read
//! through core's border into one checked sample (core's `merge`), published to the VM's
//! mailbox for the decider and shown in the status and its time series.

use super::{Actor, Session};
use crate::controller::status::{Point, VmState, VmStatus};
use crate::controller::sync::lock;
use crate::controller::Observation;
use crate::hypervisor::{self, Checked, Hypervisor, HypervisorError};
use crate::log::EventKind;
use autoballoon_core::policy::MemView;
use autoballoon_core::protocol::Rejected;
use autoballoon_core::sample::{merge, SampleSource, SizeViews};
use autoballoon_core::Kib;
use std::time::{Duration, Instant};

/// How often a VM without an active balloon device is checked again: one `query-balloon`,
/// cheap, so a device that becomes active (a guest whose driver loads late, a device
/// hot-plugged) is controlled within this long. Only the change is logged.
pub(super) const NO_BALLOON_RETRY: Duration = Duration::from_secs(2);

/// The balloon's size, as read at a tick.
pub(super) enum Read {
    /// Through the border: an impossible one counts as the configured size, the balloon
    /// empty.
    Actual(Kib),
    /// The VM has no (active) balloon device: reported; check again later.
    NoBalloon,
    /// The session is lost.
    Lost(HypervisorError),
}

impl Actor {
    /// The balloon's `actual` for this tick's sample.
    pub(super) fn read_actual(&mut self, hv: &dyn Hypervisor, configured: Kib) -> Read {
        match hypervisor::actual(hv, configured) {
            Ok(a) => {
                if lock(&self.shared.status).state == VmState::NoBalloon {
                    self.log.event_at(crate::log::Level::Info, &self.shared.name, EventKind::NoBalloon, "the balloon device answers again: controlling this VM", &[]);
                }
                Read::Actual(self.checked_actual(a).unwrap_or(configured))
            }
            Err(e) if e.is_no_balloon() => {
                self.no_balloon(&e);
                Read::NoBalloon
            }
            Err(e) => Read::Lost(e),
        }
    }

    /// One sample with the balloon at `actual`: the agent's report, guest-stats if no
    /// fresh report, merged; published for the decider (not while paused) and shown.
    pub(super) fn sample(&mut self, hv: &dyn Hypervisor, s: &mut Session, actual: Kib) {
        let configured = s.configured;
        let report = s.agent.as_ref().and_then(|a| a.latest());
        let now = Instant::now();
        let mut views = SizeViews {
            configured,
            actual,
            previous_actual: s.prev_actual,
            agent: report.as_ref().map(|(at, v)| (now.saturating_duration_since(*at), v)),
            agent_stale_after: self.shared.agent_stale(),
            guest_stats: None,
        };
        if s.migrating && self.balloon.free_page_hint == Some(true) {
            s.hold_guest_stats();
        }
        if views.wants_guest_stats() {
            views.guest_stats = match hypervisor::balloon_view(hv, configured, s.stats_after) {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => {
                    self.rejected(EventKind::GuestStatsRejected, "guest-stats", &e, |st| st.guest_stats_rejected += 1);
                    None
                }
                Err(_) => None,
            };
        }
        let merged = merge(&views);
        s.prev_actual = Some(actual);
        let mut sample = merged.sample(now - self.started, configured, s.migrating);
        sample.preparing_migration = self.prep.is_some();
        sample.shrink_while_migrating = self.migration_shrink.allowed();
        sample.reports_free_pages = self.balloon.free_page_reporting == Some(true);
        sample.hints_free_pages = self.balloon.free_page_hint == Some(true);
        sample.backs_reported = self.balloon.backs_reported == Some(true);
        // Publish for the decider (not while paused), and show it.
        if !self.paused {
            // The agent's view is the host's since its report arrived.
            let seen = match (merged.source, &report) {
                (SampleSource::Agent, Some((at, _))) => (*at).min(now),
                _ => now,
            };
            *lock(&self.shared.mailbox) = Some(Observation { sample: sample.clone(), source: merged.source, epoch: self.epoch, taken: now, seen });
            self.bell.ring();
        }
        let used = merged.mem.map(|m: MemView| merged.guest_size.saturating_sub(m.available));
        let mut st = lock(&self.shared.status);
        st.size = actual;
        st.used = used;
        st.source = merged.source;
        st.samples += 1;
        for d in self.grows.sampled(actual, now) {
            st.grow_times.settle.observe(d);
        }
        if merged.oom_kills.is_some() {
            st.guest_oom_kills = merged.oom_kills;
        }
        if let Some(a) = &s.agent {
            st.agent = a.stats();
        }
        st.state = if self.paused { VmState::Paused } else if s.migrating { VmState::Migrating } else { VmState::Running };
        let target = st.target;
        drop(st);
        lock(&self.shared.history).push(Point { t: sample.at.as_secs_f64(), size: actual, target, used });
    }

    /// The balloon's `actual` once through the border: an impossible one is counted and
    /// noted (rate-limited: the guest makes it) and gives `None`.
    pub(super) fn checked_actual(&mut self, a: Checked<Kib>) -> Option<Kib> {
        a.map_err(|e| self.rejected(EventKind::ActualRejected, "QEMU's balloon size", &e, |st| st.actual_rejected += 1)).ok()
    }

    /// A guest's number refused at the border: counted in the status, noted rate-limited.
    fn rejected(&mut self, kind: EventKind, what: &str, e: &Rejected, count: impl FnOnce(&mut VmStatus)) {
        count(&mut lock(&self.shared.status));
        self.note(kind, &format!("{what} refused: {e}"), &[]);
    }

    /// The VM has no balloon device: reported (rate-limited), nothing published.
    pub(super) fn no_balloon(&mut self, e: &HypervisorError) {
        *lock(&self.shared.mailbox) = None;
        if lock(&self.shared.status).state == VmState::NoBalloon {
            return;
        }
        self.set_state(VmState::NoBalloon);
        let msg = format!("cannot balloon this VM ({e}): QEMU has no balloon device for it; checking again every {} s", NO_BALLOON_RETRY.as_secs());
        self.note(EventKind::NoBalloon, &msg, &[]);
    }
}

/// Time left until the next multiple of `interval` (a whole interval if exactly on one).
pub(super) fn until_next_tick(elapsed: Duration, interval: Duration) -> Duration {
    let i = interval.as_nanos().max(1);
    Duration::from_nanos((i - elapsed.as_nanos() % i) as u64)
}

#[cfg(test)]
mod tests {
    use super::until_next_tick;
    use std::time::Duration;

    #[test]
    fn ticks_fall_on_multiples_of_the_interval() {
        let ms = Duration::from_millis;
        assert_eq!(until_next_tick(ms(0), ms(1000)), ms(1000));
        assert_eq!(until_next_tick(ms(2300), ms(1000)), ms(700));
        assert_eq!(until_next_tick(ms(2999), ms(1000)), ms(1));
    }
}
