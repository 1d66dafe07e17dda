//! FakeAgentPort seen from a plain UnixStream standing in for the daemon.

mod common;

use autoballoon_core::protocol::{decode, encode, AgentMessage, HostMessage, MigrationOutcome, MAX_LINE};
use autoballoon_core::units::{Kib, Pages};
use autoballoon_fakes::{sample, wait_until, FakeAgentPort};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(5);

fn daemon(port: &FakeAgentPort) -> (UnixStream, BufReader<UnixStream>) {
    let s = UnixStream::connect(port.path()).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    assert!(port.wait_connected(WAIT));
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn read_msg(r: &mut BufReader<UnixStream>) -> Option<AgentMessage> {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    decode(&l)
}

#[test]
fn samples_reach_the_daemon() {
    let port = FakeAgentPort::start();
    let hello = AgentMessage::Hello {
        version: "0.1.0".into(),
        backend: "fake".into(),
    };
    assert_eq!(
        port.send(&hello).unwrap_err().kind(),
        ErrorKind::NotConnected
    );
    let (_s, mut r) = daemon(&port);
    port.send(&hello).unwrap();
    assert_eq!(read_msg(&mut r), Some(hello));
    let sent = port
        .send_sample(Kib(4 << 20), Kib(1 << 20), Kib(2 << 20), Pages(1000))
        .unwrap();
    assert_eq!(sent.seq, 1);
    assert_eq!(read_msg(&mut r), Some(AgentMessage::Sample(sent)));
    let s2 = port
        .send_sample(Kib(4 << 20), Kib(1 << 20), Kib(2 << 20), Pages(1000))
        .unwrap();
    assert_eq!(s2.seq, 2);
    let plain = AgentMessage::Sample(sample(Kib(100), Kib(50), Kib(10), Pages(0)));
    port.send(&plain).unwrap();
    read_msg(&mut r);
    assert_eq!(read_msg(&mut r), Some(plain));
}

#[test]
fn raw_bytes_are_sent_as_is() {
    let port = FakeAgentPort::start();
    let (_s, mut r) = daemon(&port);
    let long = "x".repeat(MAX_LINE * 2);
    port.send_raw(format!("garbage\n{long}\n{{\"type\":").as_bytes())
        .unwrap();
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert_eq!(l, "garbage\n");
    l.clear();
    r.read_line(&mut l).unwrap();
    assert_eq!(l.len(), MAX_LINE * 2 + 1);
    port.close();
    let mut rest = String::new();
    r.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "{\"type\":", "a half line, then EOF");
}

#[test]
fn records_what_the_daemon_sends() {
    let port = FakeAgentPort::start();
    let (mut s, _r) = daemon(&port);
    s.write_all(encode(&HostMessage::MigrationStarted { shrink_allowed: false }).as_bytes())
        .unwrap();
    s.write_all(b"not json\n").unwrap();
    s.write_all(&vec![b'{'; MAX_LINE * 3]).unwrap();
    s.write_all(b"\n").unwrap();
    let ended = HostMessage::MigrationEnded {
        outcome: MigrationOutcome::Completed,
    };
    s.write_all(encode(&ended).as_bytes()).unwrap();
    assert!(wait_until(WAIT, || port.received().len() == 2));
    assert_eq!(port.received(), [HostMessage::MigrationStarted { shrink_allowed: false }, ended]);
    assert_eq!(port.garbage_lines(), 2);
}

#[test]
fn not_reading_blocks_the_daemon() {
    let port = FakeAgentPort::start();
    let (mut s, _r) = daemon(&port);
    port.set_reading(false);
    std::thread::sleep(Duration::from_millis(20)); // let the reader notice
    s.set_write_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let line = encode(&HostMessage::MigrationStarted { shrink_allowed: false });
    let chunk = line.repeat(1000);
    common::assert_writes_block(&mut s, chunk.as_bytes());
    port.set_reading(true);
    assert!(wait_until(WAIT, || port.received().len() >= 1000));
}

#[test]
fn close_and_reconnect() {
    let port = FakeAgentPort::start();
    let (_s, mut r) = daemon(&port);
    port.close();
    let mut l = String::new();
    assert_eq!(r.read_line(&mut l).unwrap(), 0, "EOF after close");
    assert!(wait_until(WAIT, || !port.is_connected()));
    let (_s2, mut r2) = daemon(&port);
    assert_eq!(port.connections(), 2);
    let hello = AgentMessage::Hello {
        version: "2".into(),
        backend: "fake".into(),
    };
    port.send(&hello).unwrap();
    assert_eq!(read_msg(&mut r2), Some(hello));
}

#[test]
fn drop_with_a_stuck_daemon() {
    let port = FakeAgentPort::start();
    let path = port.path().to_owned();
    let (_s, _r) = daemon(&port);
    port.set_reading(false);
    port.set_write_timeout(Duration::from_millis(100));
    // The daemon never reads: sending eventually fails instead of hanging.
    let big = vec![b'x'; 1 << 20];
    let t = Instant::now();
    while port.send_raw(&big).is_ok() {
        assert!(t.elapsed() < Duration::from_secs(10));
    }
    let t = Instant::now();
    drop(port);
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(!path.exists());
}
