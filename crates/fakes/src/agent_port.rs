//! [`FakeAgentPort`]: the host end of the guest agent's virtio-serial port, as QEMU serves
//! it with `-chardev socket,path=...,server=on`. The daemon connects; the test is the agent.

use crate::lines::{LineReader, Polled};
use crate::sync::{lock, wait_until, TICK};
use crate::tempdir::TempDir;
use autoballoon_core::policy::MemView;
use autoballoon_core::protocol::{
    decode, encode, AgentMessage, AgentSample, HostMessage, MAX_LINE,
};
use autoballoon_core::units::{Kib, Pages};
use std::io::{self, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long drop waits for the port thread before leaving it behind.
const STOP_WAIT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Inbox {
    received: Vec<HostMessage>,
    garbage: u64,
    connections: u64,
    connected: bool,
}

struct Shared {
    stop: AtomicBool,
    reading: AtomicBool,
    write_timeout_ms: AtomicU64,
    conn: Mutex<Option<UnixStream>>,
    /// Held for a whole send: a real agent writes from one thread, so one send's bytes
    /// are never interleaved with another's (a test thread's garbage with a sample
    /// thread's line would otherwise tear both).
    writing: Mutex<()>,
    inbox: Mutex<Inbox>,
}

/// A listening agent port in a private temp dir; stopped and removed on drop.
pub struct FakeAgentPort {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    done: Receiver<()>,
    path: PathBuf,
    started: Instant,
    seq: AtomicU64,
    _dir: TempDir,
}

impl std::fmt::Debug for FakeAgentPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeAgentPort")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FakeAgentPort {
    /// Starts listening; panics if the socket cannot be created (a test setup failure).
    pub fn start() -> FakeAgentPort {
        FakeAgentPort::try_start().expect("cannot start FakeAgentPort")
    }

    /// Starts listening at `<private temp dir>/agent.sock`.
    pub fn try_start() -> io::Result<FakeAgentPort> {
        let dir = TempDir::new()?;
        let path = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            reading: AtomicBool::new(true),
            write_timeout_ms: AtomicU64::new(5000),
            conn: Mutex::new(None),
            writing: Mutex::new(()),
            inbox: Mutex::new(Inbox::default()),
        });
        let (tx, done) = mpsc::channel::<()>();
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fake-agent-port".into())
            .spawn(move || {
                let _done = tx; // dropped when the thread ends, even by panic: wakes `done`
                accept_loop(&listener, &s);
            })?;
        Ok(FakeAgentPort {
            shared,
            thread: Some(thread),
            done,
            path,
            started: Instant::now(),
            seq: AtomicU64::new(0),
            _dir: dir,
        })
    }

    /// The socket path the daemon connects to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the daemon is connected now.
    pub fn is_connected(&self) -> bool {
        lock(&self.shared.inbox).connected
    }

    /// How many times the daemon connected.
    pub fn connections(&self) -> u64 {
        lock(&self.shared.inbox).connections
    }

    /// Waits up to `timeout` for a connected daemon.
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        wait_until(timeout, || self.is_connected())
    }

    /// Sends one message as a JSON line.
    pub fn send(&self, msg: &AgentMessage) -> io::Result<()> {
        self.send_raw(encode(msg).as_bytes())
    }

    /// Sends bytes as they are (garbage, oversized or half lines, floods); fails if nobody is connected.
    pub fn send_raw(&self, bytes: &[u8]) -> io::Result<()> {
        let mut stream = match lock(&self.shared.conn).as_ref() {
            Some(s) => s.try_clone()?,
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "no daemon connected to the agent port",
                ))
            }
        };
        let ms = self.shared.write_timeout_ms.load(Ordering::Relaxed).max(1);
        stream.set_write_timeout(Some(Duration::from_millis(ms)))?;
        let _one_writer = lock(&self.shared.writing);
        stream.write_all(bytes)
    }

    /// Sends a [`sample`] with the next sequence number and the port's age as uptime; returns it.
    pub fn send_sample(
        &self,
        total: Kib,
        available: Kib,
        committed: Kib,
        balloon: Pages,
    ) -> io::Result<AgentSample> {
        let mut s = sample(total, available, committed, balloon);
        s.seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        s.uptime_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.send(&AgentMessage::Sample(s.clone()))?;
        Ok(s)
    }

    /// Samples sent so far ([`FakeAgentPort::send_sample`]).
    pub fn samples_sent(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// How long a send may block on a daemon that does not read (default 5 s).
    pub fn set_write_timeout(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.shared.write_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Every message the daemon sent, oldest first.
    pub fn received(&self) -> Vec<HostMessage> {
        lock(&self.shared.inbox).received.clone()
    }

    /// Lines from the daemon that were not valid host messages (or longer than `MAX_LINE`).
    pub fn garbage_lines(&self) -> u64 {
        lock(&self.shared.inbox).garbage
    }

    /// Stops (false) or resumes (true) reading, so the daemon's writes fill the socket buffer.
    pub fn set_reading(&self, reading: bool) {
        self.shared.reading.store(reading, Ordering::SeqCst);
    }

    /// Closes the daemon's connection (it sees EOF); the port keeps listening for a reconnect.
    pub fn close(&self) {
        if let Some(s) = lock(&self.shared.conn).as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for FakeAgentPort {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.close();
        // The sender is dropped when the thread ends; a timeout means it is stuck: leave it.
        if let Err(mpsc::RecvTimeoutError::Disconnected) = self.done.recv_timeout(STOP_WAIT) {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// A plausible sample (seq and uptime 0): free = available / 2, the rest of available is
/// page cache, Active + Inactive = used + cache, no swap, no OOM kills.
pub fn sample(total: Kib, available: Kib, committed: Kib, balloon: Pages) -> AgentSample {
    let available = available.min(total);
    let free = Kib(available.0 / 2);
    let cached = available.saturating_sub(free);
    let lru = total.saturating_sub(available).saturating_add(cached);
    let active = Kib(lru.0 / 2);
    let mem = MemView {
        total,
        free,
        available,
        committed_as: committed,
        active,
        inactive: lru.saturating_sub(active),
        swap_total: Kib(0),
        swap_free: Kib(0),
        cached,
        anon_and_shmem: None,
        file_cache: Some(cached),
        free_in_hint_blocks: None,
        freeing: Kib::ZERO,
    };
    AgentSample {
        seq: 0,
        uptime_ms: 0,
        mem,
        oom_kills: Some(0),
        file_refaults: None,
        balloon: Some(balloon),
        target: None,
        pressure: None,
        running_short: false,
    }
}

fn accept_loop(listener: &UnixListener, shared: &Shared) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = serve(stream, shared);
                if let Some(s) = lock(&shared.conn).take() {
                    let _ = s.shutdown(Shutdown::Both);
                }
                lock(&shared.inbox).connected = false;
            }
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

/// Reads the daemon's lines until it closes, the test closes, or the port stops.
fn serve(stream: UnixStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let mut reader = LineReader::new(stream.try_clone()?, MAX_LINE)?;
    *lock(&shared.conn) = Some(stream);
    {
        let mut ib = lock(&shared.inbox);
        ib.connections += 1;
        ib.connected = true;
    }
    while !shared.stop.load(Ordering::SeqCst) {
        if !shared.reading.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
            continue;
        }
        match reader.poll() {
            Polled::Idle => {}
            Polled::Line(line) => {
                let msg = std::str::from_utf8(&line)
                    .ok()
                    .and_then(decode::<HostMessage>);
                let mut ib = lock(&shared.inbox);
                match msg {
                    Some(m) => ib.received.push(m),
                    None => ib.garbage += 1,
                }
            }
            Polled::TooLong => lock(&shared.inbox).garbage += 1,
            Polled::Eof | Polled::Failed => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plausible_sample() {
        let s = sample(Kib(4 << 20), Kib(3 << 20), Kib(2 << 20), Pages(100));
        let m = s.mem;
        assert!(m.free <= m.available && m.available <= m.total);
        assert_eq!(m.active.0 + m.inactive.0, (1 << 20) + m.cached.0);
        assert_eq!(m.overcommitted(), Kib(0));
        assert_eq!(s.balloon, Some(Pages(100)));
        let over = sample(Kib(100), Kib(500), Kib(10_000), Pages(0));
        assert_eq!(over.mem.available, Kib(100));
        assert!(over.mem.overcommitted() > Kib(0));
    }
}
