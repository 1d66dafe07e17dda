//! Live migration: on QEMU before 9.0 under TCG (the fake's default) or an unknown
//! hypervisor nothing shrinks while one runs (growth still goes through); on QEMU 9.0 or
//! later, or under KVM, shrinking goes on. The agent
//! is told when it starts and how it ended, shrinking resumes after a failed one, and a
//! completed one leaves the source QEMU alone, while its destination, managed from its
//! start, is controlled once the guest runs there.
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
    wait_for(T, "the agent told of the migration", || g.p().received().contains(&HostMessage::MigrationStarted { shrink_allowed: false }));

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
    let abilities = HostMessage::Abilities { backs_reported: false };
    assert_eq!(received, vec![abilities, HostMessage::MigrationStarted { shrink_allowed: false }, HostMessage::MigrationEnded { outcome: Outcome::Failed }], "one notice each, after what the host does");
}

#[test]
fn a_destination_managed_before_its_incoming_migration_stays_under_control_after_it() {
    // QEMU waiting in `inmigrate` reports the incoming migration in `query-migrate`
    // (`setup`, `active`, then `completed`, as QEMU 10 did here): a daemon that manages the
    // destination from its start must not take that completion for the VM leaving.
    let g = Guest::start(Fakes::start(), 1000);
    g.q().start_incoming_migration();
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "state migrating", || d.status("a").state == VmState::Migrating);
    assert!(d.log.text().contains("waiting for an incoming migration"), "{}", d.log.text());
    g.q().finish_migration(MigrationOutcome::Completed);
    wait_for(T, "state running", || d.status("a").state == VmState::Running);
    assert_eq!(d.log.count("migrated_away"), 0, "{}", d.log.text());
    assert!(d.log.text().contains("incoming migration ended (completed): the guest runs here now"), "{}", d.log.text());
    g.set_used(300);
    wait_for(T, "shrinking to 364 MiB on the destination", || g.fakes.last_request() == Some(expected_target(300)));
    g.set_used(1500);
    wait_for(T, "growth to 1564 MiB", || g.fakes.last_request() == Some(expected_target(1500)));
    assert_requests_in_bounds(&g.q());
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

#[test]
fn autoballoon_migrate_asks_the_daemon_and_reports_the_end() {
    use autoballoon::status_socket::{commands_of, StatusServer};
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    // The report gives the size the daemon last measured when asked: wait until it saw 1064.
    wait_for(T, "the daemon sees the guest at 1064 MiB", || d.status("a").size == expected_target(1000));
    let dir = autoballoon_fakes::TempDir::new().unwrap();
    let sock = dir.path().join("status.sock");
    let server = StatusServer::start_with(&sock, autoballoon::metrics::snapshots_of(d.ctl()), Some(autoballoon::metrics::host_of(d.ctl())), Some(commands_of(d.ctl())), autoballoon::log::Logger::new(autoballoon::config::LogFormat::Json, false)).unwrap();
    // The fake QEMU's migration completes half a second after it started.
    let q = g.fakes.clone();
    let finisher = std::thread::spawn(move || {
        let t = Instant::now();
        while q.q().migration_status() != "active" && t.elapsed() < T {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(500));
        q.q().finish_migration(MigrationOutcome::Completed);
    });
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_autoballoon"))
        .args(["migrate", "a", "--to", "tcp:127.0.0.1:9", "--bandwidth-mib", "64", "--socket", sock.to_str().unwrap()])
        .output()
        .unwrap();
    finisher.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("migration to tcp:127.0.0.1:9 completed"), "{stdout}");
    assert!(stdout.contains("1064 -> 1000 MiB"), "prepared to the estimate with no buffer: {stdout}");
    assert_eq!(g.fakes.last_request(), Some(mib(1000)), "shrunk to what the guest uses");
    server.stop();
}

#[test]
fn a_shrink_still_in_flight_when_another_tool_starts_a_migration_is_stopped_where_the_balloon_is() {
    let (g, d) = Guest::slow_balloon();
    let asked = g.shrink_in_flight();
    g.q().start_migration();
    wait_for(T, "the balloon stopped for the migration", || g.fakes.last_request().is_some_and(|r| r > asked));
    let stopped = g.fakes.last_request().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let actual = g.q().actual();
    assert!(actual >= stopped.saturating_sub(mib(2)) && actual < expected_target(1900), "stopped at {stopped}, actual {actual}");
    assert!(d.log.text().contains("stopped at"), "{}", d.log.text());
    g.q().finish_migration(MigrationOutcome::Failed);
    wait_for(T, "shrinking resumes after the failure", || g.fakes.last_request().is_some_and(|r| r.abs_diff(expected_target(100)) <= mib(8)));
}

#[test]
fn a_migration_with_nothing_to_shrink_starts_at_once() {
    use autoballoon::config::PolicyConfig;
    use autoballoon::controller::VmCommand;
    let g = Guest::start(Fakes::start(), 1000);
    // The migration buffer is the buffer: the VM is already where the preparation wants it.
    let d = Daemon::start(vec![g.fakes.vm("a", Some(PolicyConfig { migration_buffer_mib: 64, ..quick_policy() }))], 1000);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    let asked = Instant::now();
    assert!(d.ctl().vm("a").unwrap().command(VmCommand::Migrate { uri: "tcp:127.0.0.1:9".into(), max_bandwidth: None }));
    wait_for(T, "the migration started", || g.q().migration_status() == "active");
    // No wait for a shrink (the log line says why); the bound only catches a preparation
    // timeout, with room for a loaded machine (1.5 s failed once beside a parallel suite).
    assert!(asked.elapsed() < Duration::from_secs(5), "started after {:?}", asked.elapsed());
    // The line is written as the migration is started: it may follow QEMU's status by a moment.
    wait_for(T, "the log line saying why there was no wait", || d.log.text().contains("nothing to shrink"));
    assert_eq!(g.fakes.last_request(), Some(expected_target(1000)));
}

/// QEMU 9.0 and later (here 10.0.2, under TCG like the fake's default) or any QEMU under
/// KVM: shrinking goes on during a migration another tool started, at once and without the
/// step limit, and a shrink in flight is not stopped.
fn shrinks_during_the_migration(cfg: autoballoon_fakes::FakeQemuConfig, why: &str) {
    shrinks_during_the_migration_with(cfg, autoballoon::config::ShrinkSetting::Auto, why)
}

fn shrinks_during_the_migration_with(cfg: autoballoon_fakes::FakeQemuConfig, setting: autoballoon::config::ShrinkSetting, why: &str) {
    use autoballoon_fakes::BalloonMotion;
    let g = Guest::start(Fakes::start_with(autoballoon_fakes::FakeQemuConfig { motion: BalloonMotion::PerSecond(mib(600)), ..cfg }), 1900);
    let controller = autoballoon::config::ControllerConfig { interval_ms: 200, migration_shrink: setting, ..Default::default() };
    let d = Daemon::start_with(controller, vec![g.fakes.vm("a", Some(quick_policy()))]);
    wait_for(T, "the balloon at about 1964 MiB", || g.fakes.last_request().is_some_and(|r| r.abs_diff(expected_target(1900)) <= mib(8) && g.q().actual() == r));
    assert!(d.status("a").migration_shrink.as_deref().is_some_and(|s| s.contains(why)), "{:?}", d.status("a").migration_shrink);
    // A shrink in flight when the migration starts goes on.
    g.set_used(1000);
    wait_for(T, "a shrink asked", || g.fakes.last_request().is_some_and(|r| r < mib(1500)));
    let asked = g.fakes.last_request().unwrap();
    let n = g.fakes.requests().len();
    g.q().start_migration();
    wait_for(T, "state migrating", || d.status("a").state == VmState::Migrating);
    wait_for(T, "the agent told it may shrink", || g.p().received().contains(&HostMessage::MigrationStarted { shrink_allowed: true }));
    // It goes further: the running migration sheds the buffer too (this agent reports no
    // free blocks that hinting would skip).
    wait_for(T, "the shrink reached its target, the buffer shed, during the migration", || g.q().actual() <= asked && g.fakes.last_request().is_some_and(|r| r.abs_diff(mib(1000)) <= mib(8) && g.q().actual() == r));
    assert!(g.fakes.requests()[n..].iter().all(|&r| r <= asked), "stopped: {:?}", g.fakes.requests());
    assert!(!d.log.text().contains("stopped at"), "{}", d.log.text());
    assert!(d.log.text().contains("of the buffer shed while the migration runs"), "{}", d.log.text());
    // Memory freed during the migration is given back during it.
    g.set_used(200);
    wait_for(T, "shrinking to about 200 MiB during the migration", || g.fakes.last_request().is_some_and(|r| r.abs_diff(mib(200)) <= mib(8)));
    assert_eq!(d.status("a").state, VmState::Migrating);
    assert_eq!(d.status("a").metrics.held_for_migration, 0);
    // Growth too.
    g.set_used(1500);
    wait_for(T, "growth during the migration", || g.fakes.last_request().is_some_and(|r| r.abs_diff(expected_target(1500)) <= mib(8)));
    g.q().finish_migration(MigrationOutcome::Completed);
    wait_for(T, "state migrated away", || d.status("a").state == VmState::MigratedAway);
    assert_requests_in_bounds(&g.q());
}

#[test]
fn qemu_10_under_tcg_shrinks_during_a_migration() {
    shrinks_during_the_migration(autoballoon_fakes::FakeQemuConfig { version: Some((10, 0, 2)), ..autoballoon_fakes::FakeQemuConfig::new(configured()) }, "QEMU >= 9.0");
}

#[test]
fn qemu_7_2_under_kvm_shrinks_during_a_migration() {
    shrinks_during_the_migration(autoballoon_fakes::FakeQemuConfig { kvm: Some(true), ..autoballoon_fakes::FakeQemuConfig::new(configured()) }, "KVM");
}

#[test]
fn qemu_7_2_without_query_kvm_holds() {
    let g = Guest::start(Fakes::start_with(autoballoon_fakes::FakeQemuConfig { kvm: None, ..autoballoon_fakes::FakeQemuConfig::new(configured()) }), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    holds_during_the_migration(&g, &d, "not known");
}

/// The guest's use drops during a migration and the controller, whose status gives
/// `because` as the reason, holds the balloon where it was.
fn holds_during_the_migration(g: &Guest, d: &Daemon, because: &str) {
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    assert!(d.status("a").migration_shrink.as_deref().is_some_and(|s| s.contains(because)), "{:?}", d.status("a").migration_shrink);
    g.q().start_migration();
    wait_for(T, "state migrating", || d.status("a").state == VmState::Migrating);
    let before = g.fakes.requests().len();
    g.set_used(300);
    wait_for(T, "the loop holding for the migration", || d.status("a").metrics.held_for_migration >= 3);
    assert!(g.fakes.requests()[before..].iter().all(|&r| r >= expected_target(1000)), "{:?}", g.fakes.requests());
}

#[test]
fn migration_shrink_always_overrides_qemu_7_2_under_tcg() {
    shrinks_during_the_migration_with(autoballoon_fakes::FakeQemuConfig::new(configured()), autoballoon::config::ShrinkSetting::Always, "\"always\"");
}

#[test]
fn migration_shrink_never_overrides_qemu_10() {
    let g = Guest::start(Fakes::start_with(autoballoon_fakes::FakeQemuConfig { version: Some((10, 0, 2)), ..autoballoon_fakes::FakeQemuConfig::new(configured()) }), 1000);
    let controller = autoballoon::config::ControllerConfig { interval_ms: 200, migration_shrink: autoballoon::config::ShrinkSetting::Never, ..Default::default() };
    let d = Daemon::start_with(controller, vec![g.fakes.vm("a", Some(quick_policy()))]);
    holds_during_the_migration(&g, &d, "\"never\"");
}

/// Where a migration can shed it (QEMU 10), a spike's memory stays in the guest after the
/// spike (the next one starts on free memory) until a migration starts: then the VM
/// shrinks to its estimate at once, and the headroom comes back only after it.
#[test]
fn spike_headroom_stays_until_a_migration_sheds_it() {
    let g = Guest::start(Fakes::start_with(autoballoon_fakes::FakeQemuConfig { version: Some((10, 0, 2)), ..autoballoon_fakes::FakeQemuConfig::new(configured()) }), 1500);
    let policy = autoballoon::config::PolicyConfig { spike_hold_s: 30, spike_fade_s: 60, ..quick_policy() };
    let controller = autoballoon::config::ControllerConfig { interval_ms: 200, ..Default::default() };
    let d = Daemon::start_with(controller, vec![g.fakes.vm("a", Some(policy))]);
    wait_for(T, "the spike's size", || g.fakes.last_request().is_some_and(|r| r.abs_diff(expected_target(1500)) <= mib(8)));
    g.set_used(200);
    let n = g.fakes.requests().len();
    wait_for(T, "the loop deciding on the freed spike", || d.status("a").metrics.ticks >= 10);
    assert!(g.fakes.requests()[n..].iter().all(|&r| r.saturating_add(mib(8)) >= expected_target(1500)), "kept as headroom: {:?}", g.fakes.requests());
    assert!(d.log.text().contains("(a recent need)") || g.fakes.requests().len() == n, "{}", d.log.text());
    g.q().start_migration();
    wait_for(T, "shrinking to about 200 MiB (the headroom and the buffer shed) at the migration's start", || g.fakes.last_request().is_some_and(|r| r.abs_diff(mib(200)) <= mib(8)));
    g.q().finish_migration(MigrationOutcome::Failed);
    wait_for(T, "the headroom back after the migration", || g.fakes.last_request().is_some_and(|r| r.abs_diff(expected_target(1500)) <= mib(8)));
}

#[test]
fn a_migration_it_started_that_ends_while_qmp_is_lost_is_followed_to_its_end() {
    use autoballoon::controller::VmCommand;
    use autoballoon_fakes::Fault;
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    assert!(d.ctl().vm("a").unwrap().command(VmCommand::Migrate { uri: "tcp:127.0.0.1:9".into(), max_bandwidth: None }));
    wait_for(T, "the migration started", || g.q().migration_status() == "active");
    wait_for(T, "state migrating", || d.status("a").state == VmState::Migrating);

    // QMP stops answering: the session is lost, and the migration completes meanwhile.
    g.q().set_fault(Fault::NeverReply);
    wait_for(Duration::from_secs(20), "state unreachable", || d.status("a").state == VmState::Unreachable);
    g.q().finish_migration(MigrationOutcome::Completed);
    g.q().clear_fault();
    // The next session finds it completed: the request's report says so, and the source is left alone.
    wait_for(Duration::from_secs(20), "state migrated away", || d.status("a").state == VmState::MigratedAway);
    let r = d.status("a").last_migration.expect("a report");
    assert_eq!(r.status, "completed", "{r:?}");
    assert_eq!(d.log.count("migrated_away"), 1, "{}", d.log.text());
}

/// A migration another tool starts is followed when QEMU's event arrives, not at the next
/// tick: free page hinting takes the guest's free memory as soon as the migration starts,
/// so the shrink that sheds it must be decided on the report read before.
/// A guest using 1000 MiB on a fake QEMU 10 (shrinking goes on during migrations) and a
/// daemon that samples every 60 s, after its first sample (with migration events on): any
/// sample before a minute is up was woken.
fn sampled_once_a_minute() -> (Guest, Daemon) {
    let g = Guest::start(Fakes::start_with(autoballoon_fakes::FakeQemuConfig { version: Some((10, 0, 2)), ..autoballoon_fakes::FakeQemuConfig::new(configured()) }), 1000);
    let controller = autoballoon::config::ControllerConfig { interval_ms: 60_000, ..Default::default() };
    let d = Daemon::start_with(controller, vec![g.fakes.vm("a", Some(quick_policy()))]);
    wait_for(T, "the first sample, events on", || d.status("a").samples >= 1 && g.q().migration_events_enabled());
    (g, d)
}

#[test]
fn a_migration_event_wakes_the_controller_before_its_next_tick() {
    let (g, d) = sampled_once_a_minute();
    let samples = d.status("a").samples;
    g.q().start_migration();
    wait_for(T, "state migrating, well before the next tick", || d.status("a").state == VmState::Migrating);
    wait_for(T, "the agent told", || g.p().received().contains(&HostMessage::MigrationStarted { shrink_allowed: true }));
    assert!(d.status("a").samples > samples, "a sample taken at the event");
}

#[test]
fn memory_freed_during_a_migration_wakes_the_controller_before_its_next_tick() {
    let (g, d) = sampled_once_a_minute();
    wait_for(T, "the agent's first reports", || g.p().samples_sent() >= 2);
    g.q().start_migration();
    wait_for(T, "the guest shrunk to 1064 MiB at the migration's start", || g.fakes.last_request() == Some(expected_target(1000)));
    // The guest frees 700 MiB during the migration: its agent's next report (every 250 ms)
    // wakes the controller, which sheds the memory before the migration sends it.
    g.set_used(300);
    wait_for(T, "shrunk to 364 MiB, a minute before the next tick", || g.fakes.last_request() == Some(expected_target(300)));
    assert_eq!(d.status("a").state, VmState::Migrating);
}
