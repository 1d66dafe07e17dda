//! The thread behind the metrics endpoint and the status socket: accept one connection at
//! a time from a non-blocking listener, serve it, look at a stop flag between accepts.
//!
//! A client gets a whole-request deadline, not only a per-read timeout: its connection is
//! handed to the server as a [`Bounded`] socket, whose reads and writes fail once the
//! deadline passes, once the client has sent or taken nothing for its idle time, or once
//! the server is halted. Each read or write waits at most [`SLICE`] before it looks at the
//! stop flag again, so a slow client (a byte every few seconds) cannot hold the deadline
//! past its end, nor delay shutdown by more than a slice and an accept poll.

use crate::log::{EventKind, Logger};
use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the accept loop looks at its stop flag.
const POLL: Duration = Duration::from_millis(100);
/// The longest a blocked read or write of a client waits before it looks at the stop flag
/// and the deadline again.
pub const SLICE: Duration = Duration::from_millis(100);

/// A socket whose blocking reads and writes take a timeout.
pub trait Timeouts {
    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()>;
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
}

macro_rules! timeouts {
    ($t:ty) => {
        impl Timeouts for $t {
            fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
                <$t>::set_read_timeout(self, d)
            }
            fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
                <$t>::set_write_timeout(self, d)
            }
            fn set_nonblocking(&self, on: bool) -> io::Result<()> {
                <$t>::set_nonblocking(self, on)
            }
        }
    };
}
timeouts!(TcpStream);
timeouts!(UnixStream);

/// A client's connection under its whole-request deadline (see the module's doc).
pub struct Bounded<S> {
    conn: S,
    ends: Instant,
    idle: Duration,
    stop: Arc<AtomicBool>,
}

impl<S: Timeouts> Bounded<S> {
    /// `conn` (made blocking), done with by `deadline` from now, with `idle` at most
    /// between two bytes, until `stop` is set.
    pub fn new(conn: S, deadline: Duration, idle: Duration, stop: Arc<AtomicBool>) -> io::Result<Bounded<S>> {
        conn.set_nonblocking(false)?;
        let now = Instant::now();
        Ok(Bounded { conn, ends: now.checked_add(deadline).unwrap_or(now), idle, stop })
    }

    /// Sets how long a read or write may wait for the client at most, from the next call.
    pub fn set_idle(&mut self, idle: Duration) {
        self.idle = idle;
    }

    pub fn get_ref(&self) -> &S {
        &self.conn
    }

    /// Runs `op` in slices until it is done, fails otherwise, or the time is up.
    fn bounded<T>(&mut self, write: bool, mut op: impl FnMut(&mut S) -> io::Result<T>) -> io::Result<T> {
        let started = Instant::now();
        let idle_ends = started.checked_add(self.idle).unwrap_or(started);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(io::Error::other("the server is stopping"));
            }
            let now = Instant::now();
            let left = self.ends.min(idle_ends).saturating_duration_since(now);
            if left.is_zero() {
                let why = if now >= self.ends { "the request's deadline passed" } else { "the client sent or took nothing for too long" };
                return Err(io::Error::new(ErrorKind::TimedOut, why));
            }
            let slice = Some(left.min(SLICE));
            if write {
                self.conn.set_write_timeout(slice)?;
            } else {
                self.conn.set_read_timeout(slice)?;
            }
            match op(&mut self.conn) {
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
                r => return r,
            }
        }
    }
}

impl<S: Timeouts + Read> Read for Bounded<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.bounded(false, |c| c.read(buf))
    }
}

impl<S: Timeouts + Write> Write for Bounded<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bounded(true, |c| c.write(buf))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.bounded(true, |c| c.flush())
    }
}

/// How long a server gives one client: the whole request, and at most between two bytes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub idle: Duration,
}

/// A running server thread; stopped (and joined) by `halt` or on drop.
pub struct ServerThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ServerThread {
    /// Runs `accept` (on a non-blocking listener) and `serve` for each connection, under
    /// `limits`, until halted. A failed client is logged at debug level; a failed accept
    /// as `what`.
    pub fn spawn<C: Timeouts>(
        name: &str,
        what: &'static str,
        log: Logger,
        limits: Limits,
        mut accept: impl FnMut() -> std::io::Result<C> + Send + 'static,
        mut serve: impl FnMut(Bounded<C>) -> std::io::Result<()> + Send + 'static,
    ) -> std::io::Result<ServerThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match accept().and_then(|c| Bounded::new(c, limits.deadline, limits.idle, flag.clone())) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LogFormat;
    use std::os::unix::net::UnixListener;
    use std::sync::mpsc;

    /// A server that reads each request to its end and answers `ok`.
    fn server(limits: Limits) -> (ServerThread, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("ab-server-thread-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let t = ServerThread::spawn("test", "test", Logger::new(LogFormat::Json, false), limits, move || listener.accept().map(|(c, _)| c), |mut c| {
            let mut req = Vec::new();
            c.read_to_end(&mut req)?;
            c.write_all(b"ok\n")
        })
        .unwrap();
        (t, path)
    }

    /// A client that sends a byte every 0.5 s until the server closes on it (or 30 s);
    /// reports when it connected and when its writes started failing.
    fn dripping(path: std::path::PathBuf) -> mpsc::Receiver<Instant> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut c = UnixStream::connect(path).unwrap();
            let _ = tx.send(Instant::now());
            for _ in 0..60 {
                if c.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            let _ = tx.send(Instant::now());
        });
        rx
    }

    #[test]
    fn a_client_sending_a_byte_every_half_second_delays_shutdown_by_less_than_a_second() {
        let (mut t, path) = server(Limits { deadline: Duration::from_secs(60), idle: Duration::from_secs(5) });
        let rx = dripping(path.clone());
        let connected = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // Until it has sent a few bytes: the server is then busy with it.
        std::thread::sleep(Duration::from_millis(1200).saturating_sub(connected.elapsed()));
        let asked = Instant::now();
        assert!(t.halt());
        let took = asked.elapsed();
        assert!(took < Duration::from_secs(1), "shutdown took {took:?}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_slow_client_is_cut_off_at_the_whole_request_deadline() {
        let deadline = Duration::from_secs(2);
        let (_t, path) = server(Limits { deadline, idle: Duration::from_secs(5) });
        let rx = dripping(path.clone());
        let connected = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // Each byte comes well within the idle time; the deadline ends the request.
        let cut = rx.recv_timeout(Duration::from_secs(10)).expect("the server closed on the client");
        let after = cut.duration_since(connected);
        assert!(after >= deadline && after < deadline + Duration::from_secs(2), "cut off after {after:?}");
        let _ = std::fs::remove_file(path);
    }
}
