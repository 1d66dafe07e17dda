//! The thread behind the metrics endpoint and the status socket: accept one connection at
//! a time from a non-blocking listener, serve it, look at a stop flag between accepts.

use crate::log::{EventKind, Logger};
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the accept loop looks at its stop flag.
const POLL: Duration = Duration::from_millis(100);

/// A running server thread; stopped (and joined) by `halt` or on drop.
pub struct ServerThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ServerThread {
    /// Runs `accept` (on a non-blocking listener) and `serve` for each connection until
    /// halted. A failed client is logged at debug level; a failed accept as `what`.
    pub fn spawn<C>(
        name: &str,
        what: &'static str,
        log: Logger,
        mut accept: impl FnMut() -> std::io::Result<C> + Send + 'static,
        mut serve: impl FnMut(C) -> std::io::Result<()> + Send + 'static,
    ) -> std::io::Result<ServerThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match accept() {
                    Ok(conn) => {
                        if let Err(e) = serve(conn) {
                            log.debug("-", &format!("{what}: a client failed: {e}"));
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                    Err(e) => {
                        log.event("-", EventKind::Endpoint, &format!("{what}: accept failed: {e}"), &[]);
                        std::thread::sleep(POLL);
                    }
                }
            }
        })?;
        Ok(ServerThread { stop, thread: Some(thread) })
    }

    /// Stops the thread and waits for it; true the first time.
    pub fn halt(&mut self) -> bool {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => {
                let _ = t.join();
                true
            }
            None => false,
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.halt();
    }
}
