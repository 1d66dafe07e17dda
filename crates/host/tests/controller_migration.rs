//! Live migration: nothing shrinks while one runs (growth still goes through), the agent
//! is told when it starts and how it ended, shrinking resumes after a failed one, and a
//! completed one leaves the source QEMU alone.
mod common;

use autoballoon::controller::VmState;
use autoballoon_core::protocol::{HostMessage, MigrationOutcome as Outcome};
use autoballoon_fakes::MigrationOutcome;
use common::*;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

#[test]
fn no_shrinking_while_migrating_growth_allowed_then_resumes_after_a_failure() {
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));

    g.q().start_migration();
    wait_for(T, "state migrating", || d.status("a").state == VmState::Migrating);
    wait_for(T, "the agent told of the migration", || g.p().received().contains(&HostMessage::MigrationStarted));

    // The guest frees memory: the estimator wants 364 MiB, but nothing may shrink now.
    let before = g.fakes.requests().len();
    g.set_used(300);
    wait_for(T, "the loop holding for the migration", || d.status("a").metrics.held_for_migration >= 5);
    let during = g.fakes.requests()[before..].to_vec();
    assert!(during.iter().all(|&r| r >= expected_target(1000)), "shrinking requests during a migration: {during:?}");
    assert_eq!(d.status("a").state, VmState::Migrating);

    // Growth goes through at once.
    g.set_used(1500);
    wait_for(T, "growth to 1564 MiB during the migration", || g.fakes.last_request() == Some(expected_target(1500)));
    let grown = g.fakes.requests().len();

    // The migration fails: the agent hears it, and shrinking resumes.
    g.q().finish_migration(MigrationOutcome::Failed);
    wait_for(T, "the agent told of the failure", || g.p().received().contains(&HostMessage::MigrationEnded { outcome: Outcome::Failed }));
    wait_for(T, "state running", || d.status("a").state == VmState::Running);
    let during = g.fakes.requests()[before..grown].to_vec();
    assert!(during.iter().all(|&r| r >= expected_target(1000)), "{during:?}");
    g.set_used(300);
    wait_for(T, "shrinking to 364 MiB after the failed migration", || g.fakes.last_request() == Some(expected_target(300)));
    assert_requests_in_bounds(&g.q());
    let received = g.p().received();
    assert_eq!(received, vec![HostMessage::MigrationStarted, HostMessage::MigrationEnded { outcome: Outcome::Failed }], "one notice each");
}

#[test]
fn a_completed_migration_leaves_the_source_alone() {
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    g.q().start_migration();
    wait_for(T, "state migrating", || d.status("a").state == VmState::Migrating);
    g.q().finish_migration(MigrationOutcome::Completed);
    wait_for(T, "state migrated away", || d.status("a").state == VmState::MigratedAway);
    wait_for(T, "the agent told of the completion", || g.p().received().contains(&HostMessage::MigrationEnded { outcome: Outcome::Completed }));
    assert_eq!(d.log.count("migrated_away"), 1, "{}", d.log.text());

    // Whatever the guest reports now, this QEMU gets no more requests.
    let n = g.fakes.requests().len();
    g.set_used(2000);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        assert_eq!(g.fakes.requests().len(), n, "a request after the VM left: {:?}", g.fakes.requests());
        assert_eq!(d.status("a").state, VmState::MigratedAway);
        std::thread::sleep(Duration::from_millis(50));
    }
    g.set_used(100);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(g.fakes.requests().len(), n, "{:?}", g.fakes.requests());
}

#[test]
fn a_migration_running_when_the_controller_connects_is_seen() {
    let g = Guest::start(Fakes::start(), 1000);
    // QEMU refuses to turn events on while a migration runs: the controller polls instead.
    g.q().start_migration();
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "state migrating", || d.status("a").state == VmState::Migrating);
    wait_for(T, "the loop holding for the migration", || d.status("a").metrics.held_for_migration >= 3);
    assert!(g.fakes.requests().is_empty(), "nothing shrinks from 4 GiB during the migration: {:?}", g.fakes.requests());
    g.q().finish_migration(MigrationOutcome::Cancelled);
    wait_for(T, "state running", || d.status("a").state == VmState::Running);
    wait_for(T, "target 1064 MiB after the migration", || g.fakes.last_request() == Some(expected_target(1000)));
}

#[test]
fn an_orchestrated_migration_shrinks_at_once_to_the_migration_buffer_then_migrates_and_resumes_after_a_failure() {
    use autoballoon::config::PolicyConfig;
    use autoballoon::controller::{StartedBy, VmCommand};
    let g = Guest::start(Fakes::start(), 1000);
    let policy = PolicyConfig { hold_off_s: 60, ..Default::default() };
    let d = Daemon::start(vec![g.fakes.vm("a", Some(policy))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    g.set_used(1500);
    wait_for(T, "growth to 1564 MiB", || g.fakes.last_request() == Some(expected_target(1500)));
    // The guest frees memory: the hold-off keeps the size.
    g.set_used(300);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(g.fakes.last_request(), Some(expected_target(1500)), "held off");

    let asked = Instant::now();
    assert!(d.ctl().vm("a").unwrap().command(VmCommand::Migrate { uri: "tcp:127.0.0.1:9".into(), max_bandwidth: Some(64 << 20) }));
    // No hold-off, no step, no buffer: 300 MiB, then the migration starts.
    wait_for(T, "shrinking to the estimate with no buffer", || g.fakes.last_request() == Some(mib(300)));
    wait_for(T, "the migration started", || g.q().migration_status() == "active");
    assert!(asked.elapsed() < Duration::from_secs(5), "prepared in {:?}", asked.elapsed());
    let r = d.status("a").last_migration.expect("a report");
    assert_eq!((r.started_by, r.uri.as_deref(), r.size_at_start), (StartedBy::Autoballoon, Some("tcp:127.0.0.1:9"), Some(mib(300))));
    assert!(r.prepare_s.is_some());
    wait_for(T, "state migrating", || d.status("a").state == VmState::Migrating);

    // It fails: reported, and normal control resumes (the buffer comes back).
    g.q().finish_migration(MigrationOutcome::Failed);
    wait_for(T, "the failure reported", || d.status("a").last_migration.is_some_and(|r| r.status == "failed"));
    wait_for(T, "the buffer back after the failure", || g.fakes.last_request() == Some(expected_target(300)));
    assert!(d.log.text().contains("migration failed"), "{}", d.log.text());

    // A migration another tool starts is reported too, as started by another tool.
    g.q().start_migration();
    wait_for(T, "the other tool's migration seen", || d.status("a").last_migration.is_some_and(|r| r.started_by == StartedBy::Other));
    g.q().finish_migration(MigrationOutcome::Completed);
    wait_for(T, "its end reported", || d.status("a").last_migration.is_some_and(|r| r.status == "completed"));
    assert_requests_in_bounds(&g.q());
}

#[test]
fn a_second_migration_request_is_refused_while_one_is_prepared_or_runs() {
    use autoballoon::controller::VmCommand;
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    let vm = d.ctl().vm("a").unwrap();
    assert!(vm.command(VmCommand::Migrate { uri: "tcp:127.0.0.1:9".into(), max_bandwidth: None }));
    assert!(vm.command(VmCommand::Migrate { uri: "tcp:127.0.0.1:10".into(), max_bandwidth: None }));
    wait_for(T, "the migration started", || g.q().migration_status() == "active");
    wait_for(T, "the second request refused", || d.log.text().contains("refused"));
    assert_eq!(d.status("a").last_migration.and_then(|r| r.uri).as_deref(), Some("tcp:127.0.0.1:9"));
}
