//! systemd's service notifications (sd_notify(3)), without libsystemd: one datagram per
//! message to the unix socket `$NOTIFY_SOCKET` names (a path, or `@name` for an abstract
//! socket). The daemon sends `READY=1` once its configuration is loaded and its VMs'
//! workers started, `RELOADING=1` / `READY=1` around a SIGHUP, `STOPPING=1` on the way out,
//! and `WATCHDOG=1` from its main loop every half `WatchdogSec=` (`$WATCHDOG_USEC`), so
//! systemd restarts a daemon whose main loop hangs. Without `$NOTIFY_SOCKET` (not under
//! systemd, or `Type=simple`) every call does nothing.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// Where notifications go, and the watchdog's period, as systemd passed them.
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    /// Half the watchdog timeout: a ping at least this often.
    watchdog_every: Option<Duration>,
    last_ping: Option<Instant>,
}

impl Notifier {
    /// From the environment systemd sets: `NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`.
    pub fn from_env() -> Notifier {
        let var = |k: &str| std::env::var(k).ok();
        Notifier::new(var("NOTIFY_SOCKET").as_deref(), var("WATCHDOG_USEC").as_deref(), var("WATCHDOG_PID").as_deref(), std::process::id())
    }

    /// From the variables' values (`None` = unset). A watchdog meant for another process
    /// (`WATCHDOG_PID` not `pid`) or an unusable value is ignored, as sd_watchdog_enabled does.
    pub fn new(socket: Option<&str>, watchdog_usec: Option<&str>, watchdog_pid: Option<&str>, pid: u32) -> Notifier {
        let target = socket.filter(|s| !s.is_empty()).and_then(|s| {
            let addr = address(s).ok()?;
            let sock = UnixDatagram::unbound().ok()?;
            Some((sock, addr))
        });
        let ours = watchdog_pid.is_none_or(|p| p.trim().parse::<u32>().ok() == Some(pid));
        let watchdog_every = watchdog_usec
            .filter(|_| ours && target.is_some())
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0)
            .map(|u| Duration::from_micros(u) / 2);
        Notifier { target, watchdog_every, last_ping: None }
    }

    /// Whether systemd listens (`Type=notify`).
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// The watchdog's ping period (half `WatchdogSec=`), if systemd asked for pings.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog_every
    }

    /// Sends one notification (`KEY=VALUE` lines); nothing without `$NOTIFY_SOCKET`.
    pub fn send(&self, msg: &str) -> io::Result<()> {
        match &self.target {
            Some((sock, addr)) => sock.send_to_addr(msg.as_bytes(), addr).map(drop),
            None => Ok(()),
        }
    }

    /// The service is up: `READY=1` with a status line.
    pub fn ready(&self, status: &str) -> io::Result<()> {
        self.send(&format!("READY=1\nSTATUS={status}"))
    }

    /// Sends `WATCHDOG=1` if half the watchdog period passed since the last one (call it
    /// from the main loop, more often than that). True if it sent one.
    pub fn watchdog(&mut self, now: Instant) -> bool {
        let Some(every) = self.watchdog_every else { return false };
        if self.last_ping.is_some_and(|t| now.saturating_duration_since(t) < every) {
            return false;
        }
        self.last_ping = Some(now);
        self.send("WATCHDOG=1").is_ok()
    }
}

/// `$NOTIFY_SOCKET`'s address: a path, or `@name` for Linux's abstract namespace.
fn address(s: &str) -> io::Result<SocketAddr> {
    match s.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None => SocketAddr::from_pathname(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(s: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = s.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn ready_and_watchdog_pings_reach_the_socket() {
        let path = std::env::temp_dir().join(format!("ab-notify-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let systemd = UnixDatagram::bind(&path).unwrap();
        systemd.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let pid = std::process::id();
        let mut n = Notifier::new(path.to_str(), Some("2000000"), Some(&pid.to_string()), pid);
        assert!(n.enabled());
        assert_eq!(n.watchdog_every(), Some(Duration::from_secs(1)));
        n.ready("managing 2 VMs").unwrap();
        assert_eq!(recv(&systemd), "READY=1\nSTATUS=managing 2 VMs");
        let t0 = Instant::now();
        assert!(n.watchdog(t0), "the first ping goes at once");
        assert_eq!(recv(&systemd), "WATCHDOG=1");
        assert!(!n.watchdog(t0 + Duration::from_millis(900)), "not before half the timeout");
        assert!(n.watchdog(t0 + Duration::from_millis(1000)));
        assert_eq!(recv(&systemd), "WATCHDOG=1");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_abstract_socket_works_too() {
        let name = format!("ab-notify-abstract-{}", std::process::id());
        use std::os::linux::net::SocketAddrExt;
        let systemd = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        systemd.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = Notifier::new(Some(&format!("@{name}")), None, None, 1);
        n.send("STOPPING=1").unwrap();
        assert_eq!(recv(&systemd), "STOPPING=1");
        assert_eq!(n.watchdog_every(), None);
    }

    #[test]
    fn without_systemd_or_for_another_pid_nothing_is_sent() {
        let mut n = Notifier::new(None, Some("1000000"), None, 1);
        assert!(!n.enabled());
        assert_eq!(n.watchdog_every(), None, "no socket, no watchdog");
        assert!(n.ready("x").is_ok());
        assert!(!n.watchdog(Instant::now()));
        let n = Notifier::new(Some("/nonexistent/notify"), Some("1000000"), Some("42"), 7);
        assert_eq!(n.watchdog_every(), None, "WATCHDOG_PID names another process");
        let n = Notifier::new(Some("/nonexistent/notify"), Some("0"), None, 7);
        assert_eq!(n.watchdog_every(), None);
    }
}
