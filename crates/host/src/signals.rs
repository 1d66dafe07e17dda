//! SIGINT/SIGTERM set a flag the main loop polls, so the controller stops cleanly; SIGHUP
//! sets another, so the main loop re-reads the configuration.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_hangup(_: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
}

pub fn install() -> std::io::Result<()> {
    for (sig, handler) in [(libc::SIGINT, on_signal as *const ()), (libc::SIGTERM, on_signal as *const ()), (libc::SIGHUP, on_hangup as *const ())] {
        // SAFETY: the handlers only store to an atomic, which is async-signal-safe.
        if unsafe { libc::signal(sig, handler as libc::sighandler_t) } == libc::SIG_ERR {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// True once per SIGHUP (or several SIGHUPs that came before this call).
pub fn take_reload() -> bool {
    RELOAD.swap(false, Ordering::SeqCst)
}
