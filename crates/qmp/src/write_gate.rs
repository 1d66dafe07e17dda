//! A lock for the socket's write side that waiters give up on at their
//! deadline. With a plain `Mutex`, a caller queued behind a command whose
//! write is blocked (QEMU stopped reading) would wait for *that* command's
//! timeout, which may be much longer than its own.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// Grants one writer at a time; see [`WriteGate::enter`].
#[derive(Default)]
pub(crate) struct WriteGate {
    busy: Mutex<bool>,
    idle: Condvar,
}

/// The right to write, until dropped.
pub(crate) struct WriteTurn<'a>(&'a WriteGate);

impl WriteGate {
    fn lock(&self) -> MutexGuard<'_, bool> {
        // The flag is a plain bool; a poisoned lock still holds a valid one.
        self.busy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the turn to write until `deadline`; `None` if another
    /// writer still holds it then.
    pub(crate) fn enter(&self, deadline: Instant) -> Option<WriteTurn<'_>> {
        let mut busy = self.lock();
        while *busy {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            busy = self
                .idle
                .wait_timeout(busy, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *busy = true;
        Some(WriteTurn(self))
    }
}

impl Drop for WriteTurn<'_> {
    fn drop(&mut self) {
        *self.0.lock() = false;
        self.0.idle.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn one_writer_at_a_time_and_waiters_give_up_at_their_deadline() {
        let gate = WriteGate::default();
        let turn = gate.enter(soon(0)).expect("free gate is entered at once");
        let t0 = Instant::now();
        assert!(gate.enter(soon(50)).is_none());
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        drop(turn);
        assert!(gate.enter(soon(0)).is_some());
    }

    #[test]
    fn a_waiter_gets_the_turn_when_it_is_released() {
        let gate = Arc::new(WriteGate::default());
        let turn = gate.enter(soon(0)).unwrap();
        let waiter = {
            let gate = Arc::clone(&gate);
            thread::spawn(move || gate.enter(soon(10_000)).is_some())
        };
        thread::sleep(Duration::from_millis(50));
        drop(turn);
        assert!(waiter.join().unwrap());
    }
}
