//! Small concurrency helpers: poison-tolerant locks, interruptible sleeps, polling waits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often server threads look at their stop flag and shared state.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// Locks `m`, ignoring poisoning: a panicking test must not cascade into the fakes.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sleeps `d`, or less if `stop` becomes true; returns false if stopped.
pub(crate) fn sleep_unless(stop: &AtomicBool, d: Duration) -> bool {
    let deadline = Instant::now().checked_add(d);
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let left = match deadline {
            Some(dl) => dl.saturating_duration_since(Instant::now()),
            None => TICK,
        };
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(TICK));
    }
}

/// Polls `cond` every few milliseconds until it holds (true) or `timeout` passes (false).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(TICK);
    }
}
