//! The host's rule for one VM's sample: which view of the guest's memory to trust, and
//! the size that view was measured at. Pure; the controller's actors feed it.

use super::{Sample, SampleSource};
use crate::policy::MemView;
use crate::procfs::Pressure;
use crate::units::{Kib, Pages};
use std::time::Duration;

/// A report from the guest agent that passed the border checks
/// ([`crate::protocol::check_sample`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentView {
    pub mem: MemView,
    /// Pages in the balloon when the agent read `mem`; never above the configured size.
    pub balloon: Option<Pages>,
    pub oom_kills: Option<u64>,
    pub file_refaults: Option<u64>,
    pub pressure: Option<Pressure>,
    /// The agent said the guest is running short now (its pressure trigger fired).
    pub running_short: bool,
}

/// Everything the host knows about one VM's size and memory at one tick.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeViews<'a> {
    pub configured: Kib,
    /// QMP `query-balloon`'s `actual` now.
    pub actual: Kib,
    /// `actual` at the previous tick, if there was one.
    pub previous_actual: Option<Kib>,
    /// The agent's latest report and how old it is.
    pub agent: Option<(Duration, &'a AgentView)>,
    /// Reports older than this are not used.
    pub agent_stale_after: Duration,
    /// virtio-balloon guest-stats, if read (see [`SizeViews::wants_guest_stats`]).
    pub guest_stats: Option<MemView>,
}

/// The merged view: what goes into the [`Sample`].
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub guest_size: Kib,
    pub mem: Option<MemView>,
    pub source: SampleSource,
    pub oom_kills: Option<u64>,
    pub file_refaults: Option<u64>,
    pub pressure: Option<Pressure>,
    pub running_short: bool,
}

impl SizeViews<'_> {
    fn fresh_agent(&self) -> Option<&AgentView> {
        self.agent.filter(|(age, _)| *age <= self.agent_stale_after).map(|(_, a)| a)
    }
    /// Whether guest-stats are worth reading: only when no fresh agent report is at hand.
    pub fn wants_guest_stats(&self) -> bool {
        self.fresh_agent().is_none()
    }
}

/// The rule:
/// - a fresh agent report wins. The size its MemAvailable belongs to is the configured
///   size minus the agent's own balloon count, not QMP's `actual`: the report may be a
///   second older than `actual`, and mixing the two double-counts whatever the balloon
///   moved in between (the first demo runs crept up 8 MiB a tick that way);
/// - otherwise guest-stats, with `actual` as the size; but guest-stats carry no balloon
///   count and refresh once a second, so while the balloon moves (`actual` changed since
///   the previous tick) they describe a size that is gone, and no view is used;
/// - otherwise no view: the policy keeps the VM where it is.
pub fn merge(v: &SizeViews) -> Merged {
    if let Some(a) = v.fresh_agent() {
        let guest_size = match a.balloon.and_then(Pages::to_kib_checked) {
            Some(b) => v.configured.saturating_sub(b),
            None => v.actual,
        };
        return Merged { guest_size, mem: Some(a.mem), source: SampleSource::Agent, oom_kills: a.oom_kills, file_refaults: a.file_refaults, pressure: a.pressure, running_short: a.running_short };
    }
    let moving = v.previous_actual.is_some_and(|p| p != v.actual);
    let mem = if moving { None } else { v.guest_stats };
    let source = if mem.is_some() { SampleSource::GuestStats } else { SampleSource::None };
    Merged { guest_size: v.actual, mem, source, oom_kills: None, file_refaults: None, pressure: None, running_short: false }
}

impl Merged {
    /// The sample for the policy.
    pub fn sample(&self, at: Duration, max: Kib, migrating: bool) -> Sample {
        Sample { at, guest_size: self.guest_size, max, target_in_force: None, mem: self.mem, migrating, preparing_migration: false, reports_free_pages: false, hints_free_pages: false, backs_reported: false, shrink_while_migrating: false, pressure: self.pressure, oom_kills: self.oom_kills, file_refaults: self.file_refaults, running_short: self.running_short }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mib(n: u64) -> Kib {
        Kib::from_mib_saturating(n)
    }
    fn agent(avail_mib: u64, balloon_mib: Option<u64>) -> AgentView {
        let mem = MemView { total: mib(2000), available: mib(avail_mib), ..Default::default() };
        AgentView { mem, balloon: balloon_mib.map(|b| mib(b).to_pages_floor()), oom_kills: Some(2), file_refaults: None, pressure: None, running_short: false }
    }
    fn views(agent: Option<(Duration, &AgentView)>, previous: Option<u64>, stats: Option<MemView>) -> SizeViews<'_> {
        SizeViews { configured: mib(2048), actual: mib(1000), previous_actual: previous.map(mib), agent, agent_stale_after: Duration::from_secs(3), guest_stats: stats }
    }

    #[test]
    fn a_fresh_agent_report_wins_with_its_own_balloon_count() {
        let a = agent(300, Some(1100));
        let m = merge(&views(Some((Duration::from_secs(1), &a)), Some(900), None));
        assert_eq!((m.source, m.guest_size, m.mem.unwrap().available, m.oom_kills), (SampleSource::Agent, mib(948), mib(300), Some(2)));
        let no_count = agent(300, None);
        assert_eq!(merge(&views(Some((Duration::ZERO, &no_count)), None, None)).guest_size, mib(1000), "QMP's actual without a count");
    }

    #[test]
    fn a_stale_report_falls_back_to_guest_stats_unless_the_balloon_moves() {
        let a = agent(300, Some(1100));
        let stats = MemView { available: mib(700), ..Default::default() };
        let v = views(Some((Duration::from_secs(4), &a)), Some(1000), Some(stats));
        assert!(v.wants_guest_stats());
        let m = merge(&v);
        assert_eq!((m.source, m.guest_size, m.mem), (SampleSource::GuestStats, mib(1000), Some(stats)));
        let moving = merge(&views(None, Some(1200), Some(stats)));
        assert_eq!((moving.source, moving.mem), (SampleSource::None, None), "the balloon moved since the last tick");
        assert_eq!(merge(&views(None, None, None)).source, SampleSource::None);
        assert!(!views(Some((Duration::ZERO, &a)), None, None).wants_guest_stats());
    }
}
