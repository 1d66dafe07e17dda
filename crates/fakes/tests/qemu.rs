//! FakeQemu against the real QMP client: state, balloon, stats, migration, reconnects.

mod common;

use autoballoon_core::units::Kib;
use autoballoon_fakes::{
    BalloonMotion, FakeGuestStats, FakeQemu, FakeQemuConfig, MigrationOutcome, BALLOON_PATH,
};
use autoballoon_qmp::{MigrationStatus, Qmp, QmpError};
use common::{connect, events_named, GIB};
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn balloon_requests_move_actual() {
    let fake = FakeQemu::start(FakeQemuConfig::new(Kib::from_gib_saturating(4)));
    let qmp = connect(&fake);
    assert_eq!(qmp.version().triple(), (7, 2, 22));
    assert_eq!(qmp.query_memory_size_bytes().unwrap(), 4 * GIB);
    assert_eq!(qmp.query_balloon().unwrap(), 4 * GIB);
    qmp.set_balloon_guest_size(2 * GIB).unwrap();
    assert_eq!(qmp.query_balloon().unwrap(), 2 * GIB);
    assert_eq!(fake.actual(), Kib::from_gib_saturating(2));
    assert_eq!(fake.balloon_requests(), [Kib::from_gib_saturating(2)]);
    assert_eq!(fake.command_count("balloon"), 1);
    assert_eq!(fake.command_count("query-balloon"), 2);
    let ev = events_named(&qmp, "BALLOON_CHANGE", 1, Duration::from_secs(2));
    assert_eq!(ev[0].balloon_actual_bytes(), Some(2 * GIB));
    // More than the RAM is clamped, as in QEMU; the request is still recorded as sent.
    qmp.set_balloon_guest_size(8 * GIB).unwrap();
    assert_eq!(qmp.query_balloon().unwrap(), 4 * GIB);
    assert_eq!(fake.balloon_requests_bytes(), [2 * GIB, 8 * GIB]);
    // The guest moves on its own (e.g. deflate on OOM).
    fake.set_actual(Kib::from_gib_saturating(3));
    assert_eq!(qmp.query_balloon().unwrap(), 3 * GIB);
    // Moves while no client listens are not reported to the next one.
    drop(qmp);
    fake.set_actual(Kib::from_gib_saturating(1));
    let qmp = connect(&fake);
    assert!(events_named(&qmp, "BALLOON_CHANGE", 1, Duration::from_millis(100)).is_empty());
}

#[test]
fn balloon_rate_and_never() {
    let cfg = FakeQemuConfig {
        motion: BalloonMotion::PerSecond(Kib::from_gib_saturating(1)),
        ..FakeQemuConfig::new(Kib::from_gib_saturating(4))
    };
    let fake = FakeQemu::start(cfg);
    let qmp = connect(&fake);
    qmp.set_balloon_guest_size(GIB).unwrap();
    let now = qmp.query_balloon().unwrap();
    assert!(now > GIB && now <= 4 * GIB, "{now}");
    assert_eq!(fake.target(), Kib::from_gib_saturating(1));
    fake.set_motion(BalloonMotion::Never);
    let frozen = qmp.query_balloon().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(qmp.query_balloon().unwrap(), frozen);
    fake.set_motion(BalloonMotion::Instant);
    assert_eq!(qmp.query_balloon().unwrap(), GIB);
}

#[test]
fn guest_stats_and_polling_interval() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    let none = qmp.guest_stats(BALLOON_PATH).unwrap();
    assert_eq!(none.available_memory_bytes, None);
    assert_eq!(none.last_update_epoch_secs, None);
    let stats = FakeGuestStats::plausible(Kib::from_gib_saturating(4), Kib::from_gib_saturating(3));
    fake.set_guest_stats(stats);
    let got = qmp.guest_stats(BALLOON_PATH).unwrap();
    assert_eq!(got.total_memory_bytes, Some(4 * GIB));
    assert_eq!(got.available_memory_bytes, Some(3 * GIB));
    assert_eq!(got.free_memory_bytes, Some(stats.free_bytes));
    assert_eq!(got.last_update_epoch_secs, Some(stats.last_update_secs));
    qmp.set_stats_polling_interval(BALLOON_PATH, 2).unwrap();
    assert_eq!(fake.stats_polling_interval(), 2);
    assert_eq!(
        qmp.qom_get(BALLOON_PATH, "guest-stats-polling-interval")
            .unwrap(),
        json!(2)
    );
    match qmp.guest_stats("/machine/peripheral/nosuchdevice") {
        Err(QmpError::CommandFailed { class, .. }) => assert_eq!(class, "DeviceNotFound"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn migration_events_after_enabling() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    assert_eq!(qmp.query_migrate().unwrap().status, MigrationStatus::None);
    // Without the capability: state changes, no events.
    fake.start_migration();
    assert!(qmp.query_migrate().unwrap().status.is_active());
    assert!(events_named(&qmp, "MIGRATION", 1, Duration::from_millis(100)).is_empty());
    // QEMU refuses capability changes during a migration.
    assert!(matches!(
        qmp.enable_migration_events(),
        Err(QmpError::CommandFailed { .. })
    ));
    fake.finish_migration(MigrationOutcome::Failed);
    assert_eq!(qmp.query_migrate().unwrap().status, MigrationStatus::Failed);
    assert_eq!(qmp.query_status().unwrap(), "running");

    qmp.enable_migration_events().unwrap();
    assert!(fake.migration_events_enabled());
    fake.start_migration();
    let ev = events_named(&qmp, "MIGRATION", 2, Duration::from_secs(2));
    let st: Vec<_> = ev.iter().map(|e| e.migration_status().unwrap()).collect();
    assert_eq!(st, [MigrationStatus::Setup, MigrationStatus::Active]);
    let info = qmp.query_migrate().unwrap();
    assert_eq!(info.ram_total_bytes, Some(4 * GIB));
    fake.finish_migration(MigrationOutcome::Completed);
    let ev = events_named(&qmp, "MIGRATION", 1, Duration::from_secs(2));
    assert_eq!(ev[0].migration_status(), Some(MigrationStatus::Completed));
    assert_eq!(
        qmp.query_migrate().unwrap().status,
        MigrationStatus::Completed
    );
    assert_eq!(qmp.query_status().unwrap(), "postmigrate");
    assert_eq!(fake.migration_status(), "completed");
}

#[test]
fn migrate_command_and_cancel() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    qmp.enable_migration_events().unwrap();
    qmp.migrate("tcp:127.0.0.1:4444").unwrap();
    assert_eq!(fake.migration_status(), "active");
    qmp.migrate_cancel().unwrap();
    assert_eq!(
        qmp.query_migrate().unwrap().status,
        MigrationStatus::Cancelled
    );
    let ev = events_named(&qmp, "MIGRATION", 3, Duration::from_secs(2));
    assert_eq!(
        ev.last().and_then(|e| e.migration_status()),
        Some(MigrationStatus::Cancelled)
    );
}

#[test]
fn unknown_commands_and_custom_events() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    assert!(!fake.emit_event("NOBODY", json!({})));
    let qmp = connect(&fake);
    match qmp.execute("nonexistent-command", None) {
        Err(QmpError::CommandFailed { class, desc, .. }) => {
            assert_eq!(class, "CommandNotFound");
            assert_eq!(desc, "The command nonexistent-command has not been found");
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.emit_event("WATCHDOG", json!({"action": "reset"})));
    let ev = events_named(&qmp, "WATCHDOG", 1, Duration::from_secs(2));
    assert_eq!(ev[0].data, json!({"action": "reset"}));
    fake.set_run_state("paused");
    assert_eq!(qmp.query_status().unwrap(), "paused");
}

#[test]
fn one_client_at_a_time_and_reconnects() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let first = connect(&fake);
    assert!(fake.is_negotiated());
    // Like QEMU: a second client gets no greeting while the first is connected.
    assert!(matches!(
        Qmp::connect(fake.qmp_path(), Duration::from_millis(200)),
        Err(QmpError::Timeout { .. })
    ));
    drop(first);
    let second = connect(&fake);
    second.query_balloon().unwrap();
    assert_eq!(fake.connections(), 3);
    fake.disconnect();
    assert!(matches!(
        second.next_event(Duration::from_secs(2)),
        Err(QmpError::Disconnected)
    ));
    let third = connect(&fake);
    third.quit().unwrap();
    assert_eq!(fake.connections(), 4);
}

#[test]
fn drop_does_not_hang_on_a_stuck_client() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let path = fake.qmp_path().to_owned();
    let qmp = connect(&fake);
    fake.set_fault(autoballoon_fakes::Fault::EventFlood {
        size_bytes: 1 << 20,
        count: 64,
    });
    qmp.set_command_timeout(Duration::from_millis(50));
    let _ = qmp.query_balloon();
    let t = Instant::now();
    drop(fake);
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(!path.exists());
}
