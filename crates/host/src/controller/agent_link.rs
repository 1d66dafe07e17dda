//! The host end of the agent's virtio-serial port: QEMU serves it as a unix socket. A
//! reader thread keeps the newest report that passed the border; the controller sends
//! migration notices without ever blocking on a guest that does not read.
//!
//! Everything the guest sends is hostile until checked here: lines are bounded
//! ([`MAX_LINE`]; a longer one is dropped whole and counted), samples are rate-limited
//! ([`MAX_SAMPLES_PER_SEC`]) and checked against the VM's configured size ([`check_sample`]); what fails is counted, never trusted.

use super::status::LinkStats;
use super::sync::lock;
use autoballoon_core::lines::LineReader;
use autoballoon_core::protocol::{check_sample, decode, encode, AgentMessage, HostMessage, MAX_LINE};
use autoballoon_core::sample::AgentView;
use autoballoon_core::Kib;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Samples accepted per second at most; the agent sends one a second.
pub const MAX_SAMPLES_PER_SEC: u32 = 10;
/// A fall of what the guest claims ([`autoballoon_core::policy::MemView::claimed`]) from
/// one accepted report to the next that wakes the actor ([`Wake::Freed`]).
pub const FREED_WAKE: Kib = Kib::from_mib_saturating(32);

/// Why the reader thread wakes the VM's actor (at most once per accepted report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The report says the guest is running short: a growth may be due at once.
    Short,
    /// What the guest's programs and page cache claim fell by [`FREED_WAKE`] or more since
    /// its last report: during a migration, memory to shed before the migration sends it.
    Freed,
}

/// Longest hello field kept.
const MAX_HELLO: usize = 80;

#[derive(Default)]
struct Inbox {
    latest: Option<(Instant, AgentView)>,
    stats: LinkStats,
    closed: bool,
    /// Samples accepted in the present one-second window.
    window: Option<(Instant, u32)>,
    /// A line (of any kind) came in since the link connected.
    heard: bool,
    /// Hellos the agent sent since the link connected (one each time it started).
    hellos: u64,
}

pub struct AgentLink {
    stream: UnixStream,
    inbox: Arc<Mutex<Inbox>>,
    /// The last notice was torn (partly written): the next one starts with a newline so
    /// the agent drops the torn part as garbage.
    torn: bool,
    notices_dropped: u64,
    /// The notices dropped, at most one of each kind (the migration's state, the host's
    /// abilities), oldest first: sent again by [`AgentLink::resend_dropped`] once the guest
    /// reads again. Each kind is a state, so the newest of it says it all.
    owed: Vec<HostMessage>,
    connected: Instant,
    /// The agent's hellos as of the last [`AgentLink::greeted`].
    hellos_seen: u64,
}

impl AgentLink {
    /// Connects to the agent's chardev socket of a VM of `configured` size.
    pub fn connect(path: &Path, configured: Kib) -> std::io::Result<AgentLink> {
        AgentLink::connect_waking(path, configured, |_| {})
    }

    /// [`AgentLink::connect`], and `on_wake` is called (from the reader thread; it must
    /// not block) for each accepted sample that says the guest is running short, or whose
    /// guest claims [`FREED_WAKE`] less than at the report before ([`Wake`]).
    pub fn connect_waking(path: &Path, configured: Kib, on_wake: impl Fn(Wake) + Send + 'static) -> std::io::Result<AgentLink> {
        let stream = UnixStream::connect(path)?;
        let reader = stream.try_clone()?;
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let shared = inbox.clone();
        std::thread::Builder::new().name("agent-reader".into()).spawn(move || read_loop(reader, &shared, configured, on_wake))?;
        Ok(AgentLink { stream, inbox, torn: false, notices_dropped: 0, owed: Vec::new(), connected: Instant::now(), hellos_seen: 0 })
    }

    /// The newest accepted report and when it arrived.
    pub fn latest(&self) -> Option<(Instant, AgentView)> {
        lock(&self.inbox).latest.clone()
    }

    /// The link's counters, for the status view.
    pub fn stats(&self) -> LinkStats {
        let mut s = lock(&self.inbox).stats.clone();
        s.notices_dropped = self.notices_dropped;
        s
    }

    pub fn closed(&self) -> bool {
        lock(&self.inbox).closed
    }

    /// How long the link has been up without a single line from the guest; `None` once
    /// one came.
    pub fn silent_for(&self) -> Option<Duration> {
        (!lock(&self.inbox).heard).then(|| self.connected.elapsed())
    }

    /// Whether the agent said hello since the last call: it started, or started again
    /// while the link stayed up, and what it was told before went to an earlier run of it.
    pub fn greeted(&mut self) -> bool {
        let n = lock(&self.inbox).hellos;
        std::mem::replace(&mut self.hellos_seen, n) != n
    }

    /// Sends a notice without blocking: if the guest's buffer is full the notice is
    /// dropped and counted (`Ok(false)`), and owed until [`AgentLink::resend_dropped`]
    /// delivers it or a newer notice of its kind replaces it. `Err` means the link is dead.
    pub fn send(&mut self, m: &HostMessage) -> std::io::Result<bool> {
        let sent = self.write(m)?;
        if !sent {
            self.notices_dropped += 1;
        }
        owe(&mut self.owed, m, sent);
        Ok(sent)
    }

    /// Sends the dropped notices again, oldest first, without blocking (a guest that
    /// stopped reading for a while would otherwise keep the state of a migration long
    /// over, or never hear of one that runs); not counted again. `Err`: the link is dead.
    pub fn resend_dropped(&mut self) -> std::io::Result<()> {
        while let Some(m) = self.owed.first().cloned() {
            if !self.write(&m)? {
                break;
            }
            self.owed.remove(0);
        }
        Ok(())
    }

    /// One notice line written without blocking: `Ok(false)` if it did not fit whole.
    fn write(&mut self, m: &HostMessage) -> std::io::Result<bool> {
        let mut line = encode(m);
        if self.torn {
            line.insert(0, '\n');
        }
        // SAFETY: a valid fd and buffer for the duration of the call; MSG_DONTWAIT makes
        // this one call non-blocking without touching the fd's flags, which the reader
        // thread shares.
        let n = unsafe { libc::send(self.stream.as_raw_fd(), line.as_ptr().cast(), line.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(false);
            }
            return Err(e);
        }
        // A torn line is finished by the next one's leading newline: the agent drops it.
        self.torn = (n as usize) < line.len();
        Ok(!self.torn)
    }
}

/// What state a notice tells: a migration's start and its end are one state, the host's
/// abilities another.
fn kind(m: &HostMessage) -> u8 {
    match m {
        HostMessage::MigrationStarted { .. } | HostMessage::MigrationEnded { .. } => 0,
        HostMessage::Abilities { .. } => 1,
    }
}

/// `m` was sent, or dropped and now owed: either way no older notice of its kind is owed
/// any more (the newest of a state says it all).
fn owe(owed: &mut Vec<HostMessage>, m: &HostMessage, sent: bool) {
    owed.retain(|o| kind(o) != kind(m));
    if !sent {
        owed.push(m.clone());
    }
}

impl Drop for AgentLink {
    fn drop(&mut self) {
        // Ends the reader thread too: its read returns 0.
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

fn read_loop(stream: UnixStream, inbox: &Mutex<Inbox>, configured: Kib, on_wake: impl Fn(Wake)) {
    // The one framer: a line longer than MAX_LINE is dropped whole, up to its newline.
    let mut r = LineReader::new(stream, MAX_LINE);
    // What the guest claimed at the last accepted report.
    let mut claimed: Option<Kib> = None;
    while let Ok(Some(framed)) = r.next_line() {
        let Ok(line) = framed else {
            let mut ib = lock(inbox);
            ib.stats.overlong += 1;
            ib.heard = true;
            continue;
        };
        let msg = std::str::from_utf8(&line).ok().and_then(decode::<AgentMessage>);
        let now = Instant::now();
        let mut ib = lock(inbox);
        ib.heard = true;
        match msg {
            Some(AgentMessage::Sample(s)) => {
                if !ib.admit(now) {
                    ib.stats.flooded += 1;
                    continue;
                }
                match check_sample(&s, configured) {
                    Ok(v) => {
                        let short = v.running_short;
                        let now_claimed = v.mem.claimed();
                        let freed = claimed.is_some_and(|c| c.saturating_sub(now_claimed) >= FREED_WAKE);
                        claimed = Some(now_claimed);
                        ib.latest = Some((now, v));
                        if short {
                            ib.stats.short += 1;
                        }
                        drop(ib);
                        if short {
                            on_wake(Wake::Short);
                        } else if freed {
                            on_wake(Wake::Freed);
                        }
                    }
                    Err(e) => {
                        ib.stats.rejected += 1;
                        ib.stats.last_rejection = Some(e.to_string());
                    }
                }
            }
            Some(AgentMessage::Hello { version, backend }) => {
                let cut = |s: &str| s.chars().filter(|c| !c.is_control()).take(MAX_HELLO).collect::<String>();
                ib.stats.hello = Some(format!("{} ({})", cut(&version), cut(&backend)));
                ib.hellos += 1;
            }
            None => ib.stats.garbage += 1,
        }
    }
    lock(inbox).closed = true;
}

impl Inbox {
    /// The rate limit: at most MAX_SAMPLES_PER_SEC samples in any one-second window.
    fn admit(&mut self, now: Instant) -> bool {
        match &mut self.window {
            Some((start, n)) if now.saturating_duration_since(*start) < Duration::from_secs(1) => {
                *n += 1;
                *n <= MAX_SAMPLES_PER_SEC
            }
            w => {
                *w = Some((now, 1));
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoballoon_core::protocol::MigrationOutcome;

    #[test]
    fn the_newest_notice_of_each_state_is_owed() {
        let started = HostMessage::MigrationStarted { shrink_allowed: false };
        let ended = HostMessage::MigrationEnded { outcome: MigrationOutcome::Completed };
        let (can, cannot) = (HostMessage::Abilities { backs_reported: true }, HostMessage::Abilities { backs_reported: false });
        let mut owed = Vec::new();
        owe(&mut owed, &started, false);
        owe(&mut owed, &can, false);
        assert_eq!(owed, [started.clone(), can.clone()], "both dropped, oldest first");
        owe(&mut owed, &ended, true);
        assert_eq!(owed, std::slice::from_ref(&can), "the migration's end delivered: its start is no longer owed");
        owe(&mut owed, &ended, false);
        owe(&mut owed, &cannot, false);
        assert_eq!(owed, [ended, cannot.clone()], "a newer abilities notice replaces the owed one");
        owe(&mut owed, &started, true);
        assert_eq!(owed, [cannot]);
    }
}
