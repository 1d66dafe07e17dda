//! Resource bounds against a misbehaving peer (fake server): a flood of
//! large events must not grow the event queue past its byte bound, and a
//! peer that stops reading must not make any call outlive its timeout.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use autoballoon_qmp::{QmpError, BALLOON_DEVICE_PATH, EVENT_QUEUE_BYTES};
use common::{assert_clean, connect, names, GIB, Action, FakeServer, Script, Step};
use serde_json::json;





const RUNNING: &str = r#"{"return": {"status": "running", "singlestep": false, "running": true}}"#;

/// A BIG event numbered `{n}` carrying `blob_bytes` of string data.
fn big_event_template(blob_bytes: usize) -> String {
    format!(
        r#"{{"timestamp": {{"seconds": 1795274840, "microseconds": 433064}}, "event": "BIG", "data": {{"seq": {{n}}, "blob": "{}"}}}}"#,
        "x".repeat(blob_bytes)
    )
}

/// A peer flooding 5,000 events of 64 KiB (320 MB) must not grow the queue
/// past EVENT_QUEUE_BYTES: the oldest events are dropped and counted, the
/// newest are kept in order, and replies still get through.
#[test]
fn event_flood_is_bounded_in_bytes() {
    const FLOOD: usize = 5_000;
    let server = FakeServer::start(Script::with_handshake(vec![
        Step::new(
            "query-status",
            Action::Flood {
                template: big_event_template(64 << 10),
                count: FLOOD,
                then: vec![RUNNING.to_owned()],
            },
        ),
        Step::reply("query-balloon", &[r#"{"return": {"actual": 1073741824}}"#]),
    ]));
    let qmp = connect(&server);
    let t0 = Instant::now();
    // Every event precedes the reply, so all are handled when it returns.
    let status = qmp
        .execute_with_timeout("query-status", None, Duration::from_secs(120))
        .unwrap();
    assert_eq!(status["status"], "running");
    eprintln!("flood of {FLOOD} events handled in {:?}", t0.elapsed());

    let queued_bytes = qmp.queued_event_bytes();
    assert!(
        queued_bytes > EVENT_QUEUE_BYTES / 2 && queued_bytes <= EVENT_QUEUE_BYTES,
        "{queued_bytes}"
    );
    let dropped = qmp.dropped_events();
    assert!(dropped > 0);
    let kept = qmp.poll_events();
    assert_eq!(qmp.queued_event_bytes(), 0);
    assert_eq!(
        kept.len() as u64 + dropped,
        FLOOD as u64,
        "every event is either kept or counted"
    );
    assert!(kept.len() >= 2 && kept.len() < 16, "{}", kept.len());
    // The newest survive, in order.
    let seqs: Vec<u64> = kept
        .iter()
        .map(|e| e.data["seq"].as_u64().unwrap())
        .collect();
    let first = (FLOOD - kept.len()) as u64;
    assert_eq!(seqs, (first..FLOOD as u64).collect::<Vec<_>>());

    assert_eq!(qmp.query_balloon().unwrap(), GIB);
    assert_eq!(qmp.dropped_events(), dropped);
    assert_clean(server);
}

/// One event larger than EVENT_QUEUE_BYTES is dropped on arrival without
/// evicting the small events around it; next_event keeps the byte count.
#[test]
fn oversized_event_is_dropped_alone() {
    let huge = big_event_template(EVENT_QUEUE_BYTES + 1).replace("{n}", "1");
    let server = FakeServer::start(Script::with_handshake(vec![Step::new(
        "query-status",
        Action::Reply(vec![
            r#"{"event": "STOP", "timestamp": {"seconds": 1795278607, "microseconds": 24844}}"#
                .into(),
            huge,
            r#"{"event": "RESUME", "timestamp": {"seconds": 1795278608, "microseconds": 1}}"#
                .into(),
            RUNNING.into(),
        ]),
    )]));
    let qmp = connect(&server);
    assert_eq!(qmp.query_status().unwrap(), "running");
    assert_eq!(qmp.dropped_events(), 1);
    let two = qmp.queued_event_bytes();
    assert!(two > 0 && two < 1024, "{two}");
    assert_eq!(
        qmp.next_event(Duration::ZERO).unwrap().unwrap().name,
        "STOP"
    );
    let one = qmp.queued_event_bytes();
    assert!(one > 0 && one < two, "{one} {two}");
    assert_eq!(names(&qmp.poll_events()), vec!["RESUME"]);
    assert_eq!(qmp.queued_event_bytes(), 0);
    assert_clean(server);
}

/// Generous slack for a loaded 2-core machine; the bug this guards against
/// costs seconds, not milliseconds.
const SLACK: Duration = Duration::from_millis(700);

/// QEMU stops reading after the handshake. A command whose write blocks
/// must not hold up other threads' commands past their own timeouts, every
/// call returns within its timeout, and dropping the client does not hang.
#[test]
fn writes_never_block_past_the_timeout_when_qemu_stops_reading() {
    let server = FakeServer::start(Script::stalling_after_handshake());
    let qmp = Arc::new(connect(&server));
    let big = json!({ "path": BALLOON_DEVICE_PATH, "property": "x", "value": "v".repeat(8 << 20) });

    // A: 8 MiB that the socket buffer cannot take; its write blocks for 2 s.
    let long = Duration::from_secs(2);
    let a = {
        let (qmp, big) = (Arc::clone(&qmp), big.clone());
        thread::spawn(move || {
            let t0 = Instant::now();
            let r = qmp.execute_with_timeout("qom-set", Some(big), long);
            (r, t0.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(200)); // let A start writing
                                               // B waits for A's write, but only up to its own 300 ms.
    let short = Duration::from_millis(300);
    let t0 = Instant::now();
    let b = qmp.execute_with_timeout("query-status", None, short);
    let b_took = t0.elapsed();
    assert!(
        matches!(&b, Err(QmpError::Timeout { command, after }) if command == "query-status" && *after == short),
        "{b:?}"
    );
    assert!(b_took < short + SLACK, "B took {b_took:?}, not ~{short:?}");

    let (a, a_took) = a.join().unwrap();
    assert!(matches!(a, Err(QmpError::Timeout { .. })), "{a:?}");
    assert!(a_took >= long && a_took < long + SLACK, "A took {a_took:?}");
    // Half a command is on the wire, so the client gave up the stream.
    assert!(!qmp.is_connected());

    // Later large commands fail at once instead of blocking.
    for _ in 0..20 {
        let t0 = Instant::now();
        let r = qmp.execute_with_timeout("qom-set", Some(big.clone()), short);
        assert!(matches!(r, Err(QmpError::Disconnected)), "{r:?}");
        assert!(t0.elapsed() < short + SLACK, "{:?}", t0.elapsed());
    }

    let t0 = Instant::now();
    drop(Arc::try_unwrap(qmp).expect("A has finished"));
    assert!(t0.elapsed() < SLACK, "drop took {:?}", t0.elapsed());
    assert_clean(server);
}

/// Many medium commands into a peer that never reads: each call returns
/// Timeout or Disconnected within its own timeout while the socket buffer
/// fills up, and drop still returns promptly.
#[test]
fn many_large_commands_to_a_stalled_peer_all_return_in_time() {
    let server = FakeServer::start(Script::stalling_after_handshake());
    let qmp = connect(&server);
    let timeout = Duration::from_millis(150);
    qmp.set_command_timeout(timeout);
    let value = json!("v".repeat(64 << 10));
    let mut outcomes = (0, 0);
    for _ in 0..40 {
        let t0 = Instant::now();
        match qmp.qom_set(BALLOON_DEVICE_PATH, "x", value.clone()) {
            Err(QmpError::Timeout { .. }) => outcomes.0 += 1,
            Err(QmpError::Disconnected) => outcomes.1 += 1,
            other => panic!("expected Timeout or Disconnected, got {other:?}"),
        }
        assert!(t0.elapsed() < timeout + SLACK, "{:?}", t0.elapsed());
    }
    // 40 x 64 KiB is more than a Unix socket buffers, so some write was cut
    // short and the connection given up; earlier ones timed out waiting.
    assert!(outcomes.0 > 0 && outcomes.1 > 0, "{outcomes:?}");
    let t0 = Instant::now();
    drop(qmp);
    assert!(t0.elapsed() < SLACK, "drop took {:?}", t0.elapsed());
    assert_clean(server);
}
