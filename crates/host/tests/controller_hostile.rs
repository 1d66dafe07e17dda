//! Hostile values from the guest agent and from QEMU: refused at the border, counted, no
//! panic, and no balloon request outside [min 128 MiB, configured].
mod common;

use autoballoon::controller::VmState;
use autoballoon_core::protocol::AgentMessage;
use autoballoon_core::sample::SampleSource;
use autoballoon_core::units::{Kib, Pages};
use autoballoon_fakes::{sample, Fault};
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

#[test]
fn impossible_agent_samples_are_rejected_with_their_reason() {
    let f = Fakes::start();
    let d = Daemon::start(vec![f.vm("a", None)], 200);
    f.wait_agent_connected();
    // A plausible guest: 4 GiB, 3 GiB available, nothing ballooned: target 1088 MiB.
    let good = || sample(mib(4096), mib(3072), Kib(0), Pages(0));
    f.p().send(&AgentMessage::Sample(good())).unwrap();
    wait_for(T, "target 1088 MiB", || f.last_request() == Some(expected_target(1024)));

    let mut hostile = Vec::new();
    for pages in [1u64 << 62, 1 << 63, u64::MAX] {
        let mut s = good();
        s.balloon = Some(Pages(pages));
        hostile.push((s, "larger than the VM"));
    }
    let mut s = good();
    s.mem.available = mib(5000);
    hostile.push((s, "MemAvailable"));
    let mut s = good();
    s.mem.total = mib(8192);
    hostile.push((s, "MemTotal"));
    let mut s = good();
    s.mem.total = Kib::MAX;
    s.mem.available = Kib::MAX;
    hostile.push((s, "MemTotal"));

    for (i, (s, says)) in hostile.into_iter().enumerate() {
        f.p().send(&AgentMessage::Sample(s.clone())).unwrap();
        wait_for(T, &format!("rejection {} ({says})", i + 1), || d.status("a").agent.rejected == i as u64 + 1);
        let why = d.status("a").agent.last_rejection.unwrap_or_default();
        assert!(why.contains(says), "rejection of {s:?} says {why:?}, not {says:?}");
        // A good one in between keeps the agent fresh.
        f.p().send(&AgentMessage::Sample(good())).unwrap();
    }
    d.wait_samples("a", 5, T);
    let s = d.status("a");
    assert_eq!((s.state, s.source), (VmState::Running, SampleSource::Agent), "{s:?}");
    assert_eq!(s.used, Some(mib(1024)), "the good samples' view, never a hostile one");
    assert_eq!(s.errors, 0);
    assert_eq!(f.last_request(), Some(expected_target(1024)));
    assert_requests_in_bounds(&f.q());
    assert_eq!(d.log.count("worker_panicked"), 0, "{}", d.log.text());

    // Control goes on.
    f.p().send(&AgentMessage::Sample(sample(mib(4096), mib(2048), Kib(0), Pages(0)))).unwrap();
    wait_for(T, "target 2112 MiB", || f.last_request() == Some(expected_target(2048)));
}

#[test]
fn a_hostile_qmp_actual_never_panics_nor_leaves_the_bounds() {
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    for actual in [u64::MAX, u64::MAX - 1, 1 << 63] {
        g.q().set_fault(Fault::HostileBalloon(actual));
        d.wait_samples("a", 5, T);
        let s = d.status("a");
        assert!(s.size <= configured(), "size {} above the VM", s.size);
        assert_eq!(s.state, VmState::Running);
        assert!(s.actual_rejected > 0, "refused at the border and counted");
    }
    // The agent's numbers still drive the target.
    g.set_used(2000);
    wait_for(T, "target 2064 MiB", || g.fakes.last_request() == Some(expected_target(2000)));
    // Without an agent or guest-stats, a hostile actual gives no view: no action.
    g.set_agent(false);
    wait_for(T, "source none", || d.status("a").source == SampleSource::None);
    let n = g.fakes.requests().len();
    d.wait_samples("a", 10, T);
    assert_eq!(g.fakes.requests().len(), n, "{:?}", g.fakes.requests());
    g.q().clear_fault();
    assert_requests_in_bounds(&g.q());
    assert_eq!(d.log.count("worker_panicked"), 0, "{}", d.log.text());
    assert_eq!(d.status("a").errors, 0);
}

#[test]
fn a_hostile_actual_when_a_migration_starts_freezes_no_balloon_at_it() {
    use autoballoon_fakes::MigrationOutcome;
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    // The guest claims more pages than the VM has: QEMU's actual underflows.
    g.q().set_fault(Fault::HostileBalloon(u64::MAX - (1 << 30)));
    let rejected = d.status("a").actual_rejected;
    wait_for(T, "the hostile actual refused", || d.status("a").actual_rejected > rejected);
    // Another tool starts a migration: QEMU 7.2 under TCG, so a shrink in flight would be
    // stopped where the balloon is; an impossible size is no place to stop it.
    g.q().start_migration();
    wait_for(T, "the migration seen", || d.status("a").state == VmState::Migrating);
    d.wait_samples("a", 3, T);
    assert!(g.fakes.requests().iter().all(|r| *r <= configured()), "{:?}", g.fakes.requests());
    assert!(!d.log.text().contains("stopped at"), "{}", d.log.text());
    g.q().clear_fault();
    g.q().finish_migration(MigrationOutcome::Failed);
    wait_for(T, "running again", || d.status("a").state == VmState::Running);
    assert_requests_in_bounds(&g.q());
    assert_eq!(d.log.count("worker_panicked"), 0, "{}", d.log.text());
}
