//! Locks that survive a panic elsewhere: a worker that panicked while holding a status
//! lock must not take the daemon's status view (or another VM) down with it. Every
//! value behind these locks is whole after each single assignment, so a poisoned lock
//! is used as it is.

use std::sync::{Mutex, MutexGuard};

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a caught panic said, for the log line.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default()
}
