//! Each Fault of FakeQemu does what it says, seen from the real QMP client or a raw socket.

mod common;

use autoballoon_fakes::{wait_until, FakeQemu, FakeQemuConfig, Fault, BALLOON_PATH};
use autoballoon_qmp::{Qmp, QmpError};
use common::{connect, GIB};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

fn class_of(r: Result<impl std::fmt::Debug, QmpError>) -> String {
    match r {
        Err(QmpError::CommandFailed { class, .. }) => class,
        other => panic!("expected CommandFailed, got {other:?}"),
    }
}

#[test]
fn no_balloon_device() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    fake.set_fault(Fault::NoBalloonDevice);
    assert_eq!(class_of(qmp.query_balloon()), "DeviceNotActive");
    assert_eq!(class_of(qmp.set_balloon_guest_size(GIB)), "DeviceNotActive");
    assert_eq!(class_of(qmp.guest_stats(BALLOON_PATH)), "DeviceNotFound");
    match qmp.query_balloon() {
        Err(QmpError::CommandFailed { desc, .. }) => {
            assert_eq!(desc, "No balloon device has been activated")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fake.actual_bytes(),
        4 * GIB,
        "a refused request changes nothing"
    );
    fake.clear_fault();
    assert_eq!(qmp.query_balloon().unwrap(), 4 * GIB);
}

#[test]
fn never_reply_times_out() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    qmp.set_command_timeout(Duration::from_millis(100));
    fake.set_fault(Fault::NeverReply);
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Timeout { .. })));
    assert_eq!(fake.command_count("query-balloon"), 1);
    fake.clear_fault();
    assert_eq!(qmp.query_balloon().unwrap(), 4 * GIB);
    // Set before connecting, the handshake never completes.
    drop(qmp);
    fake.set_fault(Fault::NeverReply);
    assert!(matches!(
        Qmp::connect(fake.qmp_path(), Duration::from_millis(100)),
        Err(QmpError::Timeout { .. })
    ));
}

#[test]
fn stop_reading_blocks_writers() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    qmp.set_command_timeout(Duration::from_millis(100));
    fake.set_fault(Fault::StopReading);
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Timeout { .. })));
    drop(qmp);
    // A raw writer fills the socket buffer and then blocks.
    let mut raw = UnixStream::connect(fake.qmp_path()).unwrap();
    raw.set_write_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let cmd = br#"{"execute": "qmp_capabilities"}"#.repeat(1024);
    common::assert_writes_block(&mut raw, &cmd);
}

#[test]
fn garbage_then_reconnect() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    fake.set_fault(Fault::Garbage);
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Protocol(_))));
    assert!(!qmp.is_connected());
    fake.clear_fault();
    drop(qmp);
    assert_eq!(connect(&fake).query_balloon().unwrap(), 4 * GIB);
    assert_eq!(fake.connections(), 2);
}

#[test]
fn half_reply_then_reconnect() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    fake.set_fault(Fault::HalfReply);
    assert!(qmp.query_balloon().is_err());
    assert!(!qmp.is_connected());
    fake.clear_fault();
    assert_eq!(connect(&fake).query_balloon().unwrap(), 4 * GIB);
}

#[test]
fn close_after_n_commands() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    fake.set_fault(Fault::CloseAfter(2));
    qmp.query_balloon().unwrap();
    qmp.query_status().unwrap();
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Disconnected)));
    assert_eq!(fake.fault(), None, "fires once");
    let qmp = connect(&fake);
    fake.set_fault(Fault::CloseAfter(0));
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Disconnected)));
    assert_eq!(fake.connections(), 2);
}

#[test]
fn delay_answers_late() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    fake.set_fault(Fault::Delay(Duration::from_millis(300)));
    let t = Instant::now();
    qmp.query_balloon().unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    qmp.set_command_timeout(Duration::from_millis(100));
    assert!(matches!(qmp.query_balloon(), Err(QmpError::Timeout { .. })));
}

#[test]
fn event_flood_precedes_each_reply() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    fake.set_fault(Fault::EventFlood {
        size_bytes: 64 << 10,
        count: 50,
    });
    assert_eq!(qmp.query_balloon().unwrap(), 4 * GIB);
    // The client keeps at most EVENT_QUEUE_BYTES of events: 50 of 64 KiB do not all fit,
    // so what it kept and what it dropped add up to the 50 sent, all before the reply.
    let events = qmp.poll_events();
    assert!(!events.is_empty() && events.iter().all(|e| e.name == "FAKE_FLOOD"));
    assert_eq!(events.len() as u64 + qmp.dropped_events(), 50);
}

#[test]
fn hostile_balloon() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let qmp = connect(&fake);
    fake.set_fault(Fault::HostileBalloon(u64::MAX));
    assert_eq!(qmp.query_balloon().unwrap(), u64::MAX);
}

#[test]
fn bad_input_gets_qemu_errors_and_keeps_the_connection() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let mut raw = UnixStream::connect(fake.qmp_path()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(raw.try_clone().unwrap());
    let mut read = || -> Value {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        serde_json::from_str(&l).unwrap()
    };
    assert!(read()["QMP"]["version"].is_object());
    raw.write_all(b"{\"execute\": \"query-balloon\", \"id\": 1}\n")
        .unwrap();
    assert_eq!(read()["error"]["class"], "CommandNotFound");
    raw.write_all(b"garbage\n[1]\n{\"execute\": \"qmp_capabilities\", \"id\": \"x\"}\n")
        .unwrap();
    let parse = read();
    assert_eq!(parse["error"]["class"], "GenericError");
    assert!(parse.get("id").is_none());
    assert_eq!(read()["error"]["desc"], "QMP input must be a JSON object");
    assert_eq!(read(), serde_json::json!({"return": {}, "id": "x"}));
    assert_eq!(fake.command_count("(invalid)"), 2);
}

#[test]
fn drop_with_a_client_that_never_reads() {
    let fake = FakeQemu::start(FakeQemuConfig::default());
    let mut raw = UnixStream::connect(fake.qmp_path()).unwrap();
    fake.set_fault(Fault::EventFlood {
        size_bytes: 1 << 20,
        count: 1000,
    });
    raw.write_all(b"{\"execute\": \"qmp_capabilities\"}\n")
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || fake
        .command_count("qmp_capabilities")
        == 1));
    std::thread::sleep(Duration::from_millis(50)); // the fake is now blocked writing the flood
    let t = Instant::now();
    drop(fake);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}
