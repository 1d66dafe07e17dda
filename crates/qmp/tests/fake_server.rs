//! Client tests against a fake QMP server replaying QEMU 7.2 transcripts.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use autoballoon_qmp::types::{parse_guest_stats, parse_migration_info};
use autoballoon_qmp::{
    Backoff, GuestStats, MigrationStatus, QemuVersion, Qmp, QmpError, BALLOON_DEVICE_PATH,
};
use common::{assert_clean, connect, names, GIB, fixture, Action, FakeServer, Script, Step, TempDir};
use serde_json::{json, Value};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);




#[test]
fn greeting_and_capabilities() {
    let server = FakeServer::start(Script::with_handshake(vec![]).lingering());
    let qmp = connect(&server);
    assert_eq!(
        *qmp.version(),
        QemuVersion {
            major: 7,
            minor: 2,
            micro: 22,
            package: "Debian 1:7.2+dfsg-7+deb12u18+b3".into(),
        }
    );
    assert_eq!(qmp.greeting().capabilities, vec!["oob".to_string()]);
    assert!(qmp.is_connected());
    drop(qmp); // the lingering server waits for us to close
    assert_clean(server);
}

/// Replays the whole stock-balloon transcript through the typed helpers.
#[test]
fn replay_balloon_stats_stock() {
    let server = FakeServer::start(Script::from_fixture("balloon-stats-stock.qmp.log"));
    let qmp = connect(&server);
    let dev = BALLOON_DEVICE_PATH;

    assert_eq!(qmp.query_balloon().unwrap(), 4 * GIB);
    assert_eq!(
        qmp.qom_get(dev, "guest-stats-polling-interval").unwrap(),
        json!(0)
    );
    let first = qmp.guest_stats(dev).unwrap();
    assert_eq!(first.minor_faults, Some(512));
    assert_eq!(first.last_update_epoch_secs, Some(1795274835));
    qmp.set_stats_polling_interval(dev, 2).unwrap();
    let second = qmp.guest_stats(dev).unwrap();
    assert_eq!(second.minor_faults, Some(1080));
    assert_eq!(qmp.qom_get(dev, "deflate-on-oom").unwrap(), json!(false));
    assert_eq!(
        qmp.qom_get(dev, "free-page-reporting").unwrap(),
        json!(false)
    );
    assert_eq!(qmp.qom_get(dev, "free-page-hint").unwrap(), json!(false));
    assert_eq!(
        qmp.qom_get(dev, "guest-stats-polling-interval").unwrap(),
        json!(2)
    );
    let props = qmp
        .execute("qom-list", Some(json!({ "path": dev })))
        .unwrap();
    assert_eq!(props.as_array().unwrap().len(), 59);
    assert!(qmp.poll_events().is_empty());

    // BALLOON_CHANGE events arrive between the `balloon` reply and the
    // `query-balloon` reply; by the time query-balloon returns they are queued.
    qmp.set_balloon_guest_size(2 * GIB).unwrap();
    assert_eq!(qmp.query_balloon().unwrap(), 2 * GIB);
    let events = qmp.poll_events();
    assert_eq!(names(&events), vec!["BALLOON_CHANGE"; 4]);
    let actual: Vec<u64> = events
        .iter()
        .filter_map(|e| e.balloon_actual_bytes())
        .collect();
    assert_eq!(actual, vec![4293918720, 3493855232, 2539651072, 2147483648]);
    assert_eq!(events[0].timestamp, Some((1795274840, 433064)));
    assert_eq!(events[3].timestamp, Some((1795274843, 10724)));
    assert!(qmp.poll_events().is_empty(), "drained");

    let shrunk = qmp.guest_stats(dev).unwrap();
    assert_eq!(
        shrunk.total_memory_bytes,
        Some(1958137856),
        "stock device: MemTotal shrinks"
    );

    qmp.set_balloon_guest_size(4 * GIB).unwrap();
    assert_eq!(qmp.query_balloon().unwrap(), 4 * GIB);
    // Same events, drained one at a time this time.
    let mut actual = Vec::new();
    while let Some(ev) = qmp.next_event(Duration::ZERO).unwrap() {
        actual.push(ev.balloon_actual_bytes().unwrap());
    }
    assert_eq!(actual, vec![2148532224, 3735027712, 4294967296]);

    let params = qmp.execute("query-migrate-parameters", None).unwrap();
    assert_eq!(params["max-bandwidth"], json!(134217728));
    let caps = qmp.execute("query-migrate-capabilities", None).unwrap();
    assert!(caps
        .as_array()
        .unwrap()
        .contains(&json!({"state": false, "capability": "events"})));

    qmp.quit().unwrap();
    assert_eq!(names(&qmp.poll_events()), vec!["SHUTDOWN"]);
    // QEMU (and the fake) close the socket after quit.
    assert!(matches!(
        qmp.execute("query-status", None),
        Err(QmpError::Disconnected)
    ));
    assert!(!qmp.is_connected());
    assert!(matches!(
        qmp.next_event(Duration::from_millis(10)),
        Err(QmpError::Disconnected)
    ));
    assert_eq!(qmp.dropped_events(), 0);
    assert_clean(server);
}

#[test]
fn replay_migration_source() {
    let server = FakeServer::start(Script::from_fixture("migration-source.qmp.log"));
    let qmp = connect(&server);
    qmp.migrate_set_max_bandwidth(107374182400).unwrap();
    let params = qmp.execute("query-migrate-parameters", None).unwrap();
    assert_eq!(params["max-bandwidth"], json!(107374182400u64));
    qmp.migrate("tcp:127.0.0.1:46850").unwrap();
    // The transcript has a bare query-migrate return value (no "return"
    // wrapper) after STOP; the client must skip such a frame, not choke on it.
    qmp.quit().unwrap();
    assert_eq!(names(&qmp.poll_events()), vec!["STOP", "SHUTDOWN"]);
    assert_clean(server);
}

#[test]
fn replay_migration_destination() {
    let server = FakeServer::start(Script::from_fixture("migration-destination.qmp.log"));
    let qmp = connect(&server);
    assert_eq!(qmp.query_status().unwrap(), "running");
    // RESUME arrived before the query-status reply.
    let resume = qmp
        .next_event(Duration::ZERO)
        .unwrap()
        .expect("RESUME queued");
    assert_eq!(resume.name, "RESUME");
    assert_eq!(resume.data, Value::Null);
    assert_eq!(qmp.query_balloon().unwrap(), 4 * GIB);
    qmp.quit().unwrap();
    assert_clean(server);
}

/// The completed `query-migrate` reply recorded in migration-source.qmp.log.
fn completed_migration_reply() -> String {
    let text = fixture("migration-source.qmp.log");
    text.lines()
        .filter_map(|l| l.strip_prefix("<- "))
        .find(|l| l.contains(r#""status": "completed""#))
        .expect("completed query-migrate reply in fixture")
        .to_owned()
}

#[test]
fn parse_query_migrate_completed_from_fixture() {
    let v: Value = serde_json::from_str(&completed_migration_reply()).unwrap();
    let m = parse_migration_info(&v).unwrap();
    assert_eq!(m.status, MigrationStatus::Completed);
    assert_eq!(m.total_time_ms, Some(580));
    assert_eq!(m.downtime_ms, Some(110));
    assert_eq!(m.setup_time_ms, Some(1));
    assert_eq!(m.ram_transferred_bytes, Some(200249632));
    assert_eq!(m.ram_total_bytes, Some(4295499776));
    assert_eq!(m.ram_duplicate_pages, Some(1002165));
    assert_eq!(m.ram_normal_pages, Some(46596));
    assert_eq!(m.ram_normal_bytes, Some(190857216));
    assert_eq!(m.ram_remaining_bytes, Some(0));
}

#[test]
fn query_migrate_over_the_wire() {
    let reply = format!(r#"{{"return": {}}}"#, completed_migration_reply());
    let server = FakeServer::start(Script::with_handshake(vec![
        Step::reply("query-migrate", &[r#"{"return": {}}"#]),
        Step::reply("migrate-set-capabilities", &[r#"{"return": {}}"#]),
        Step::reply(
            "migrate",
            &[
                r#"{"return": {}}"#,
                r#"{"timestamp": {"seconds": 1795278606, "microseconds": 1}, "event": "MIGRATION", "data": {"status": "setup"}}"#,
                r#"{"timestamp": {"seconds": 1795278606, "microseconds": 2}, "event": "MIGRATION", "data": {"status": "active"}}"#,
                r#"{"timestamp": {"seconds": 1795278607, "microseconds": 24844}, "event": "STOP"}"#,
                r#"{"timestamp": {"seconds": 1795278607, "microseconds": 3}, "event": "MIGRATION", "data": {"status": "completed"}}"#,
            ],
        ),
        Step::reply("query-migrate", &[&reply]),
    ]));
    let qmp = connect(&server);
    assert_eq!(qmp.query_migrate().unwrap().status, MigrationStatus::None);
    qmp.enable_migration_events().unwrap();
    qmp.migrate("tcp:127.0.0.1:46850").unwrap();
    let info = qmp.query_migrate().unwrap();
    assert_eq!(info.status, MigrationStatus::Completed);
    assert_eq!(info.ram_transferred_bytes, Some(200249632));
    let statuses: Vec<MigrationStatus> = qmp
        .poll_events()
        .iter()
        .filter_map(|e| e.migration_status())
        .collect();
    assert_eq!(
        statuses,
        vec![
            MigrationStatus::Setup,
            MigrationStatus::Active,
            MigrationStatus::Completed
        ]
    );
    assert_clean(server);
}

#[test]
fn the_event_hook_sees_each_event_once_it_is_queued() {
    let server = FakeServer::start(Script::with_handshake(vec![
        Step::reply("migrate-set-capabilities", &[r#"{"return": {}}"#]),
        Step::reply(
            "migrate",
            &[
                r#"{"return": {}}"#,
                r#"{"timestamp": {"seconds": 1795278606, "microseconds": 1}, "event": "MIGRATION", "data": {"status": "setup"}}"#,
                r#"{"timestamp": {"seconds": 1795278606, "microseconds": 2}, "event": "BALLOON_CHANGE", "data": {"actual": 1073741824}}"#,
            ],
        ),
    ]));
    let qmp = Arc::new(connect(&server));
    let (tx, rx) = std::sync::mpsc::channel();
    // The hook runs on the reader thread; what it prompts finds the event queued.
    let weak = Arc::downgrade(&qmp);
    qmp.on_event(Box::new(move |e| {
        let queued = weak.upgrade().map_or(0, |q| q.queued_event_bytes());
        let _ = tx.send((e.name.clone(), queued > 0));
    }));
    qmp.enable_migration_events().unwrap();
    qmp.migrate("tcp:127.0.0.1:46850").unwrap();
    let seen: Vec<(String, bool)> = (0..2).map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("the hook was called")).collect();
    assert_eq!(seen, vec![("MIGRATION".to_string(), true), ("BALLOON_CHANGE".to_string(), true)]);
    assert_eq!(qmp.poll_events().len(), 2, "the hook takes nothing from the queue");
    assert_clean(server);
}

#[test]
fn guest_stats_from_fixtures() {
    // deflate-on-oom + free-page-reporting transcript: MemTotal does not shrink.
    let text = fixture("balloon-stats-deflate-on-oom-fpr.qmp.log");
    let stats: Vec<GuestStats> = text
        .lines()
        .filter_map(|l| l.strip_prefix("<- "))
        .filter(|l| l.contains("stat-total-memory"))
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            parse_guest_stats(&v["return"]).unwrap()
        })
        .collect();
    assert_eq!(stats.len(), 3);
    assert!(stats
        .iter()
        .all(|s| s.total_memory_bytes == Some(4105633792)));
    assert_eq!(stats[2].free_memory_bytes, Some(1916600320));
    assert_eq!(stats[2].available_memory_bytes, Some(1798283264));
    assert_eq!(stats[2].disk_caches_bytes, Some(3035136));
    assert_eq!(stats[2].swap_in_bytes, Some(0));
    assert_eq!(stats[2].hugetlb_failures, Some(0));
    assert_eq!(stats[2].last_update_epoch_secs, Some(1795274814));
}

/// Captured from QEMU 7.2 started with -S (no guest driver): error replies,
/// unreported guest stats, empty query-migrate.
#[test]
fn replay_prelaunch_errors() {
    let server = FakeServer::start(Script::from_fixture("prelaunch-no-guest.qmp.log"));
    let qmp = connect(&server);
    assert_eq!(qmp.query_balloon().unwrap(), 256 << 20);
    assert_eq!(qmp.query_status().unwrap(), "prelaunch");
    assert_eq!(qmp.query_migrate().unwrap().status, MigrationStatus::None);
    assert_eq!(
        qmp.guest_stats(BALLOON_DEVICE_PATH).unwrap(),
        GuestStats::default()
    );
    assert_eq!(
        qmp.qom_get(BALLOON_DEVICE_PATH, "guest-stats-polling-interval")
            .unwrap(),
        json!(0)
    );

    match qmp.execute("nonexistent-command", None) {
        Err(e) if !e.is_command_not_found() => panic!("expected CommandNotFound, got {e:?}"),
        Err(QmpError::CommandFailed {
            command,
            class,
            desc,
        }) => {
            assert_eq!(command, "nonexistent-command");
            assert_eq!(class, "CommandNotFound");
            assert_eq!(desc, "The command nonexistent-command has not been found");
        }
        other => panic!("expected CommandFailed, got {other:?}"),
    }
    match qmp.set_balloon_guest_size(0) {
        Err(QmpError::CommandFailed { command, class, .. }) => {
            assert_eq!(command, "balloon");
            assert_eq!(class, "GenericError");
        }
        other => panic!("expected CommandFailed, got {other:?}"),
    }
    match qmp.guest_stats("/machine/peripheral/nosuchdevice") {
        Err(e @ QmpError::CommandFailed { .. }) => assert_eq!(
            e.to_string(),
            "QMP command qom-get failed: DeviceNotFound: Device '/machine/peripheral/nosuchdevice' not found"
        ),
        other => panic!("expected CommandFailed, got {other:?}"),
    }
    // A failed command leaves the session usable.
    qmp.enable_migration_events().unwrap();
    qmp.quit().unwrap();
    assert_eq!(names(&qmp.poll_events()), vec!["SHUTDOWN"]);
    assert_clean(server);
}

/// Captured from QEMU 7.2 without a balloon device: both balloon commands
/// fail with DeviceNotActive, which the error helpers recognise.
#[test]
fn replay_no_balloon_device() {
    let server = FakeServer::start(Script::from_fixture("no-balloon-device.qmp.log"));
    let qmp = connect(&server);
    let e = qmp.query_balloon().unwrap_err();
    assert!(e.is_device_not_active(), "{e}");
    assert!(!e.is_command_not_found());
    assert!(!e.is_transient());
    assert_eq!(
        e.to_string(),
        "QMP command query-balloon failed: DeviceNotActive: No balloon device has been activated"
    );
    let e = qmp.set_balloon_guest_size(128 << 20).unwrap_err();
    assert!(e.is_device_not_active(), "{e}");
    assert_eq!(qmp.query_status().unwrap(), "prelaunch");
    qmp.quit().unwrap();
    assert_eq!(names(&qmp.poll_events()), vec!["SHUTDOWN"]);
    assert_clean(server);
}

#[test]
fn timeout_when_server_never_answers() {
    let server = FakeServer::start(Script::with_handshake(vec![
        Step::new("query-balloon", Action::Silent),
        Step::reply(
            "query-status",
            &[r#"{"return": {"status": "running", "singlestep": false, "running": true}}"#],
        ),
    ]));
    let qmp = connect(&server);
    qmp.set_command_timeout(Duration::from_millis(200));
    assert_eq!(qmp.command_timeout(), Duration::from_millis(200));
    let t0 = Instant::now();
    match qmp.query_balloon() {
        Err(QmpError::Timeout { command, after }) => {
            assert_eq!(command, "query-balloon");
            assert_eq!(after, Duration::from_millis(200));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // A zero timeout fails before anything is sent and harms nothing.
    assert!(matches!(
        qmp.execute_with_timeout("query-status", None, Duration::ZERO),
        Err(QmpError::Timeout { .. })
    ));
    assert!(qmp.is_connected());
    // The session survives a timeout; absurd timeouts do not panic.
    qmp.set_command_timeout(Duration::MAX);
    assert_eq!(qmp.next_event(Duration::ZERO).unwrap(), None);
    assert_eq!(qmp.query_status().unwrap(), "running");
    assert_clean(server);
}

#[test]
fn late_reply_after_timeout_is_discarded() {
    let server = FakeServer::start(Script::with_handshake(vec![
        Step::new(
            "query-balloon",
            Action::ReplyLate(vec![r#"{"return": {"actual": 1}}"#.into()]),
        ),
        Step::reply("query-balloon", &[r#"{"return": {"actual": 2}}"#]),
    ]));
    let qmp = connect(&server);
    assert!(matches!(
        qmp.execute_with_timeout("query-balloon", None, Duration::from_millis(100)),
        Err(QmpError::Timeout { .. })
    ));
    // The server now sends the late reply (old id) and then this one's.
    assert_eq!(qmp.query_balloon().unwrap(), 2);
    assert_clean(server);
}

#[test]
fn disconnected_when_server_closes_mid_call() {
    let server = FakeServer::start(Script::with_handshake(vec![Step::new(
        "query-balloon",
        Action::Close,
    )]));
    let qmp = connect(&server);
    let t0 = Instant::now();
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Disconnected)));
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "must not wait for the timeout"
    );
    assert!(!qmp.is_connected());
    assert_eq!(
        qmp.close_reason().as_deref(),
        Some("server closed the connection")
    );
    assert!(matches!(qmp.query_status(), Err(QmpError::Disconnected)));
    assert!(matches!(
        qmp.next_event(Duration::from_secs(1)),
        Err(QmpError::Disconnected)
    ));
    assert_clean(server);
}

#[test]
fn every_pending_caller_gets_disconnected() {
    // Two threads each send query-balloon; the server answers neither and
    // closes the socket after the second arrives.
    let server = FakeServer::start(Script::with_handshake(vec![
        Step::new("query-balloon", Action::Silent),
        Step::new("query-balloon", Action::Close),
    ]));
    let qmp = Arc::new(connect(&server));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let qmp = Arc::clone(&qmp);
            thread::spawn(move || qmp.query_balloon())
        })
        .collect();
    for h in handles {
        assert!(matches!(h.join().unwrap(), Err(QmpError::Disconnected)));
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_clean(server);
}

#[test]
fn events_survive_disconnect() {
    let server = FakeServer::start(Script::with_handshake(vec![Step::new(
        "quit",
        Action::ReplyWithoutId(vec![
            r#"{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "SHUTDOWN", "data": {"guest": false, "reason": "host-qmp-quit"}}"#.into(),
        ]),
    )]));
    let qmp = connect(&server);
    // No reply at all, just the event and EOF: quit still succeeds.
    qmp.quit().unwrap();
    let ev = qmp.next_event(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(ev.name, "SHUTDOWN");
    assert_eq!(ev.data["reason"], "host-qmp-quit");
    assert_eq!(ev.timestamp, Some((1, 2)));
    assert!(matches!(
        qmp.next_event(Duration::from_secs(5)),
        Err(QmpError::Disconnected)
    ));
    assert_clean(server);
}

#[test]
fn next_event_wakes_on_arrival() {
    // The event arrives after the reply; next_event must pick it up without
    // another command being issued.
    let server = FakeServer::start(Script::with_handshake(vec![
        Step::reply(
            "balloon",
            &[
                r#"{"return": {}}"#,
                r#"{"timestamp": {"seconds": 5, "microseconds": 6}, "event": "BALLOON_CHANGE", "data": {"actual": 1048576}}"#,
            ],
        ),
        Step::reply("query-balloon", &[r#"{"return": {"actual": 1048576}}"#]),
    ]));
    let qmp = connect(&server);
    qmp.set_balloon_guest_size(1 << 20).unwrap();
    let ev = qmp
        .next_event(Duration::from_secs(5))
        .unwrap()
        .expect("event within 5 s");
    assert_eq!(ev.balloon_actual_bytes(), Some(1 << 20));
    assert_eq!(qmp.next_event(Duration::from_millis(20)).unwrap(), None);
    assert_eq!(qmp.query_balloon().unwrap(), 1 << 20);
    assert_clean(server);
}

#[test]
fn reply_without_id_reaches_single_pending_caller() {
    let server = FakeServer::start(Script::with_handshake(vec![Step::new(
        "query-balloon",
        Action::ReplyWithoutId(vec![r#"{"return": {"actual": 42}}"#.into()]),
    )]));
    let qmp = connect(&server);
    assert_eq!(qmp.query_balloon().unwrap(), 42);
    assert_clean(server);
}

#[test]
fn malformed_frames() {
    // A reply of the wrong shape is a Protocol error for that command only.
    let server = FakeServer::start(Script::with_handshake(vec![
        Step::reply("query-balloon", &[r#"{"return": {"actul": 1}}"#]),
        Step::reply("query-status", &[r#"{"error": "boom"}"#]),
        // Valid JSON that is neither reply nor event is skipped.
        Step::reply(
            "query-balloon",
            &["[1, 2, 3]", "17", r#"{"return": {"actual": 7}}"#],
        ),
        // Invalid JSON kills the connection; the pending caller learns why.
        Step::reply("query-balloon", &["this is not json"]),
    ]));
    let qmp = connect(&server);
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Protocol(_))));
    assert!(matches!(qmp.query_status(), Err(QmpError::Protocol(_))));
    assert_eq!(qmp.query_balloon().unwrap(), 7);
    match qmp.query_balloon() {
        Err(QmpError::Protocol(msg)) => assert!(msg.contains("this is not json"), "{msg}"),
        other => panic!("expected Protocol, got {other:?}"),
    }
    assert!(!qmp.is_connected());
    assert!(qmp.close_reason().unwrap().starts_with("protocol error"));
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Disconnected)));
    assert_clean(server);
}

#[test]
fn bad_greetings() {
    // Not a greeting at all.
    let server = FakeServer::start(Script {
        greeting: vec![r#"{"hello": "world"}"#.into()],
        steps: vec![],
        linger: false,
    });
    assert!(matches!(
        Qmp::connect(server.path(), CONNECT_TIMEOUT),
        Err(QmpError::Greeting(_))
    ));
    server.finish();

    let server = FakeServer::start(Script {
        greeting: vec!["garbage".into()],
        steps: vec![],
        linger: false,
    });
    assert!(matches!(
        Qmp::connect(server.path(), CONNECT_TIMEOUT),
        Err(QmpError::Greeting(_))
    ));
    server.finish();

    // Server closes before greeting.
    let server = FakeServer::start(Script {
        greeting: vec![],
        steps: vec![],
        linger: false,
    });
    assert!(matches!(
        Qmp::connect(server.path(), CONNECT_TIMEOUT),
        Err(QmpError::Disconnected)
    ));
    server.finish();

    // qmp_capabilities refused.
    let mut script = Script::with_handshake(vec![]);
    script.steps[0] = Step::reply(
        "qmp_capabilities",
        &[
            r#"{"error": {"class": "CommandNotFound", "desc": "Capabilities negotiation is already complete, command ignored"}}"#,
        ],
    );
    let server = FakeServer::start(script);
    assert!(matches!(
        Qmp::connect(server.path(), CONNECT_TIMEOUT),
        Err(QmpError::CommandFailed { .. })
    ));
    assert_clean(server);
}

/// Seen in CI on a QEMU migration destination: a `RESUME` meant for the
/// client before came ahead of the greeting.
#[test]
fn events_left_for_an_earlier_client_ahead_of_the_greeting_are_skipped() {
    let resume = r#"{"event": "RESUME", "timestamp": {"microseconds": 884482, "seconds": 1796327335}}"#;
    let mut script = Script::with_handshake(vec![]).lingering();
    script.greeting.insert(0, resume.to_owned());
    let server = FakeServer::start(script);
    let qmp = connect(&server);
    assert_eq!(qmp.version().major, 7);
    drop(qmp);
    assert_clean(server);

    // Only events are skipped, and only so many: a stream of them is no greeting.
    let mut script = Script::with_handshake(vec![]);
    script.greeting = vec![resume.to_owned(); 40];
    let server = FakeServer::start(script);
    assert!(matches!(
        Qmp::connect(server.path(), CONNECT_TIMEOUT),
        Err(QmpError::Greeting(_))
    ));
    server.finish();
}

#[test]
fn greeting_timeout() {
    // A listener that accepts (via the kernel backlog) but never speaks,
    // like a QEMU that is busy with another QMP client.
    let dir = TempDir::new();
    let path = dir.path().join("silent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let t0 = Instant::now();
    match Qmp::connect(&path, Duration::from_millis(200)) {
        Err(QmpError::Timeout { command, .. }) => assert_eq!(command, "greeting"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn connect_errors() {
    let dir = TempDir::new();
    let path = dir.path().join("missing.sock");
    match Qmp::connect(&path, CONNECT_TIMEOUT) {
        Err(e @ QmpError::Connect { .. }) => {
            assert!(e.is_transient());
            assert!(e.to_string().contains("missing.sock"), "{e}");
        }
        other => panic!("expected Connect, got {other:?}"),
    }

    // connect_with_retry gives up at the deadline with the last error.
    let t0 = Instant::now();
    let res = Qmp::connect_with_backoff(
        &path,
        t0 + Duration::from_millis(300),
        &mut Backoff::new(Duration::from_millis(20), Duration::from_millis(50)),
    );
    assert!(matches!(res, Err(QmpError::Connect { .. })));
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

#[test]
fn connect_with_retry_waits_for_socket() {
    let dir = TempDir::new();
    let path = dir.path().join("late.sock");
    let server_path = path.clone();
    // The "QEMU" creates its socket only after a while.
    let server = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        let listener = std::os::unix::net::UnixListener::bind(&server_path).unwrap();
        let (mut stream, _) = listener.accept().unwrap();
        use std::io::{BufRead, BufReader, Write};
        writeln!(stream, "{}", common::GREETING_7_2).unwrap();
        let mut line = String::new();
        BufReader::new(stream.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        let cmd: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(cmd["execute"], "qmp_capabilities");
        writeln!(stream, "{}", json!({"return": {}, "id": cmd["id"]})).unwrap();
        stream
    });
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
    let qmp = Qmp::connect_with_backoff(
        &path,
        Instant::now() + Duration::from_secs(10),
        &mut backoff,
    )
    .expect("connects once the socket exists");
    assert_eq!(
        backoff.peek(),
        Duration::from_millis(10),
        "reset on success"
    );
    assert_eq!(qmp.version().major, 7);
    let _stream = server.join().unwrap();
    drop(qmp);
}

#[test]
fn drop_and_close() {
    let server = FakeServer::start(Script::with_handshake(vec![]).lingering());
    let qmp = connect(&server);
    assert!(qmp.is_connected());
    qmp.close();
    qmp.close();
    assert!(!qmp.is_connected());
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Disconnected)));
    drop(qmp); // joins the reader thread; must not hang
    assert_clean(server);
}
