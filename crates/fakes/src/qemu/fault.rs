//! Faults a test can inject into [`super::FakeQemu`] at any time.

use std::time::Duration;

/// A misbehaviour of the fake QEMU. Applies to every command received while set,
/// `qmp_capabilities` included (so setting one before connecting breaks the handshake).
/// Only one fault is active at a time; [`Fault::CloseAfter`] clears itself when it fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `query-balloon`, `balloon`: QEMU 7.2's `DeviceNotActive`; `qom-get`/`qom-set` on the balloon: `DeviceNotFound`.
    NoBalloonDevice,
    /// Read (and count) commands but never answer them.
    NeverReply,
    /// Stop reading the socket entirely, so the client's writes eventually block.
    StopReading,
    /// Answer each command with a line that is not JSON.
    Garbage,
    /// Write the first half of the reply line, then close the connection.
    HalfReply,
    /// Answer `n` more commands, then close the connection (with `0`: close on the next command, unanswered).
    CloseAfter(u64),
    /// Answer each command only after this delay.
    Delay(Duration),
    /// Before each reply, send `count` events of about `size_bytes` each (event `FAKE_FLOOD`).
    EventFlood {
        /// Approximate length of each event line in bytes.
        size_bytes: usize,
        /// Events sent before each reply.
        count: usize,
    },
    /// `query-balloon` reports this `actual` (bytes), e.g. `u64::MAX`.
    HostileBalloon(u64),
}
