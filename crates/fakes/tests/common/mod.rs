//! Helpers shared by the fakes' own tests.
#![allow(dead_code)] // each test binary uses a subset

use autoballoon_fakes::FakeQemu;
use autoballoon_qmp::{Event, Qmp};
use std::time::{Duration, Instant};

pub const GIB: u64 = 1 << 30;

/// A connected real client.
pub fn connect(fake: &FakeQemu) -> Qmp {
    Qmp::connect(fake.qmp_path(), Duration::from_secs(5)).expect("connect to FakeQemu")
}

/// Waits until `n` events named `name` arrived (others are skipped); returns them.
pub fn events_named(qmp: &Qmp, name: &str, n: usize, timeout: Duration) -> Vec<Event> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match qmp.next_event(left) {
            Ok(Some(ev)) if ev.name == name => out.push(ev),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    out
}

/// Writes `chunk` again and again until a write fails, which it must within 10 s, with
/// the time-out of a peer that stopped reading (the writer has a write timeout set).
pub fn assert_writes_block(w: &mut impl std::io::Write, chunk: &[u8]) {
    let t = Instant::now();
    let err = loop {
        if let Err(e) = w.write_all(chunk) {
            break e;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "writes never blocked");
    };
    assert!(matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut), "{err}");
}
