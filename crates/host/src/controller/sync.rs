//! Locks that survive a panic elsewhere: a worker that panicked while holding a status
//! lock must not take the daemon's status view (or another VM) down with it. Every
//! value behind these locks is whole after each single assignment, so a poisoned lock
//! is used as it is.

use std::sync::{Mutex, MutexGuard};

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
