//! One log line per action with its reason, as text or JSON. Timestamps are UTC. Lines
//! a guest or QEMU can trigger go through a per-VM [`RateLimit`]. Every line has a
//! [`Level`] (its event's, see [`EventKind::level`]); lines above the logger's level are
//! not written.

use crate::config::LogFormat;
use serde::Deserialize;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a log line is about; its `event` field in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Connected,
    Unreachable,
    Disconnected,
    NoBalloon,
    Retarget,
    Pause,
    Resume,
    SetTarget,
    ActuatorFailed,
    MigrationStarted,
    MigrationEnded,
    /// `autoballoon migrate`: the request, the preparation's progress, the outcome.
    MigrationRequest,
    MigratedAway,
    AgentConnected,
    AgentLost,
    /// An agent link that carried nothing since it connected was closed to connect again.
    AgentSilent,
    AgentRejected,
    /// The balloon's `actual` was impossible (above the VM's size).
    ActualRejected,
    /// The balloon driver's statistics were impossible.
    GuestStatsRejected,
    AgentFlood,
    NoticeDropped,
    EventsDropped,
    WorkerPanicked,
    /// A VM's samples stopped coming: the balancer decides without it (or it is back).
    SampleStale,
    HostShort,
    /// The `host-need` reclaim mode started or stopped reclaiming for the host.
    Reclaim,
    /// SIGHUP: the configuration was re-read (or could not be).
    Reload,
    /// The metrics endpoint or the status socket.
    Endpoint,
    /// A VM came under control (discovered, or added by a reload).
    VmAdded,
    /// A VM left control (its socket or domain gone, its QEMU gone, removed by a reload).
    VmRemoved,
    /// Reported memory backed again ahead of a program's allocation (x-populate-reported).
    BackAhead,
    Debug,
}

/// How much a log line matters; a logger writes the lines at its level and below
/// (`error` < `warn` < `info` < `debug`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Something autoballoon should do, it cannot: a target not applied, a worker that panicked, an endpoint that could not start.
    Error,
    /// A peer misbehaves or is gone: QEMU unreachable, an agent lost or sending what the border refuses, a host short of memory.
    Warn,
    /// One line per action and state change: targets set, connections, migrations, reloads (the default).
    #[default]
    Info,
    /// Also every tick that changes nothing, and clients of the endpoints that failed.
    Debug,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::Error,
            1 => Level::Warn,
            2 => Level::Info,
            _ => Level::Debug,
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EventKind {
    /// The level of this event's lines.
    pub fn level(self) -> Level {
        match self {
            EventKind::ActuatorFailed | EventKind::WorkerPanicked => Level::Error,
            EventKind::Unreachable
            | EventKind::Disconnected
            | EventKind::NoBalloon
            | EventKind::AgentLost
            | EventKind::AgentSilent
            | EventKind::AgentRejected
            | EventKind::ActualRejected
            | EventKind::GuestStatsRejected
            | EventKind::AgentFlood
            | EventKind::NoticeDropped
            | EventKind::EventsDropped
            | EventKind::SampleStale
            | EventKind::HostShort => Level::Warn,
            EventKind::Connected
            | EventKind::Retarget
            | EventKind::Pause
            | EventKind::Resume
            | EventKind::SetTarget
            | EventKind::MigrationStarted
            | EventKind::MigrationEnded
            | EventKind::MigrationRequest
            | EventKind::MigratedAway
            | EventKind::AgentConnected
            | EventKind::Reload
            | EventKind::Reclaim
            | EventKind::Endpoint
            | EventKind::VmAdded
            | EventKind::VmRemoved
            | EventKind::BackAhead => Level::Info,
            EventKind::Debug => Level::Debug,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Connected => "connected",
            EventKind::Unreachable => "unreachable",
            EventKind::Disconnected => "disconnected",
            EventKind::NoBalloon => "no_balloon",
            EventKind::Retarget => "retarget",
            EventKind::Pause => "pause",
            EventKind::Resume => "resume",
            EventKind::SetTarget => "set_target",
            EventKind::ActuatorFailed => "actuator_failed",
            EventKind::MigrationStarted => "migration_started",
            EventKind::MigrationEnded => "migration_ended",
            EventKind::MigrationRequest => "migration_request",
            EventKind::MigratedAway => "migrated_away",
            EventKind::AgentConnected => "agent_connected",
            EventKind::AgentLost => "agent_lost",
            EventKind::AgentSilent => "agent_silent",
            EventKind::AgentRejected => "agent_rejected",
            EventKind::ActualRejected => "actual_rejected",
            EventKind::GuestStatsRejected => "guest_stats_rejected",
            EventKind::AgentFlood => "agent_flood",
            EventKind::NoticeDropped => "notice_dropped",
            EventKind::EventsDropped => "events_dropped",
            EventKind::WorkerPanicked => "worker_panicked",
            EventKind::SampleStale => "sample_stale",
            EventKind::HostShort => "host_short",
            EventKind::Reclaim => "reclaim",
            EventKind::Reload => "reload",
            EventKind::VmAdded => "vm_added",
            EventKind::VmRemoved => "vm_removed",
            EventKind::Endpoint => "endpoint",
            EventKind::BackAhead => "back_ahead",
            EventKind::Debug => "debug",
        }
    }
}

/// A token bucket for one VM's log lines of one kind: `burst` lines at once, then one
/// per `every`; what it held back is counted and said with the next line let through.
#[derive(Debug, Clone)]
pub struct RateLimit {
    burst: u32,
    every: Duration,
    tokens: u32,
    refilled: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    pub fn new(burst: u32, every: Duration) -> RateLimit {
        RateLimit { burst, every, tokens: burst, refilled: None, suppressed: 0 }
    }

    /// `Some(n)` if a line may go out now (`n` lines were held back before it).
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        let since = self.refilled.map_or(Duration::MAX, |t| now.saturating_duration_since(t));
        if since >= self.every {
            let n = (since.as_nanos() / self.every.as_nanos().max(1)).min(u128::from(self.burst)) as u32;
            self.tokens = (self.tokens + n).min(self.burst);
            self.refilled = Some(now);
        }
        if self.tokens == 0 {
            self.suppressed += 1;
            return None;
        }
        self.tokens -= 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

impl Default for RateLimit {
    /// Five lines at once, then one every ten seconds.
    fn default() -> Self {
        RateLimit::new(5, Duration::from_secs(10))
    }
}

/// A logger's settings, shared by all its clones so a reload reaches every thread.
#[derive(Debug)]
struct Settings {
    json: AtomicBool,
    level: AtomicU8,
}

#[derive(Debug, Clone)]
pub struct Logger {
    settings: Arc<Settings>,
    /// Write here instead of stderr (the demo keeps its terminal for the live view).
    file: Option<Arc<Mutex<std::fs::File>>>,
}

impl Logger {
    /// A logger at level `info`, or `debug` with `verbose`.
    pub fn new(format: LogFormat, verbose: bool) -> Logger {
        Logger::with_level(format, if verbose { Level::Debug } else { Level::Info })
    }

    pub fn with_level(format: LogFormat, level: Level) -> Logger {
        Logger { settings: Arc::new(Settings { json: AtomicBool::new(format == LogFormat::Json), level: AtomicU8::new(level as u8) }), file: None }
    }

    /// Changes the format and level of this logger and every clone of it (SIGHUP).
    pub fn reconfigure(&self, format: LogFormat, level: Level) {
        self.settings.json.store(format == LogFormat::Json, Ordering::Relaxed);
        self.settings.level.store(level as u8, Ordering::Relaxed);
    }

    pub fn level(&self) -> Level {
        Level::from_u8(self.settings.level.load(Ordering::Relaxed))
    }

    pub fn format(&self) -> LogFormat {
        if self.settings.json.load(Ordering::Relaxed) {
            LogFormat::Json
        } else {
            LogFormat::Text
        }
    }

    /// Whether `debug` lines are written.
    pub fn verbose(&self) -> bool {
        self.level() >= Level::Debug
    }

    pub fn to_file(mut self, path: &std::path::Path) -> std::io::Result<Logger> {
        self.file = Some(Arc::new(Mutex::new(std::fs::File::create(path)?)));
        Ok(self)
    }

    /// Logs an event of `vm` through its rate limit: nothing if the limit holds it back;
    /// otherwise the line, with the count of lines held back before it.
    pub fn limited(&self, limit: &mut RateLimit, vm: &str, kind: EventKind, msg: &str, fields: &[(&str, serde_json::Value)]) {
        match limit.admit(Instant::now()) {
            None => {}
            Some(0) => self.event(vm, kind, msg, fields),
            Some(n) => self.event(vm, kind, &format!("{msg} ({n} similar lines suppressed)"), fields),
        }
    }

    /// Logs an event of `vm` with structured fields at its kind's level; `msg` is the
    /// human sentence.
    pub fn event(&self, vm: &str, kind: EventKind, msg: &str, fields: &[(&str, serde_json::Value)]) {
        self.event_at(kind.level(), vm, kind, msg, fields)
    }

    /// As [`Logger::event`], at another level than the kind's (an endpoint that could not
    /// start is an error; a reload that failed, a warning).
    pub fn event_at(&self, level: Level, vm: &str, kind: EventKind, msg: &str, fields: &[(&str, serde_json::Value)]) {
        if level > self.level() {
            return;
        }
        let line = match self.format() {
            LogFormat::Text => format!("{} {:<5} [{vm}] {msg}", timestamp(), level.as_str().to_uppercase()),
            LogFormat::Json => {
                let mut o = serde_json::Map::new();
                o.insert("ts".into(), timestamp().into());
                o.insert("level".into(), level.as_str().into());
                o.insert("vm".into(), vm.into());
                o.insert("event".into(), kind.as_str().into());
                o.insert("msg".into(), msg.into());
                for (k, v) in fields {
                    o.insert((*k).into(), v.clone());
                }
                serde_json::Value::Object(o).to_string()
            }
        };
        match &self.file {
            Some(f) => {
                let _ = writeln!(f.lock().unwrap_or_else(|e| e.into_inner()), "{line}");
            }
            // A line that cannot be written (a full disk, a closed pipe) is lost; `eprintln!`
            // would panic, and the thread with it: the log must never stop the ballooning.
            None => {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
        }
    }

    /// Per-tick detail, only with `verbose`.
    pub fn debug(&self, vm: &str, msg: &str) {
        if self.verbose() {
            self.event(vm, EventKind::Debug, msg, &[]);
        }
    }
}

/// The present time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn timestamp() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format_utc(d.as_secs(), d.subsec_millis())
}

/// Unix time `secs` (and `millis`) as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_utc(secs: u64, millis: u32) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_lets_a_burst_through_then_one_per_period_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(2, Duration::from_secs(10));
        assert_eq!(r.admit(t0), Some(0));
        assert_eq!(r.admit(t0), Some(0));
        for _ in 0..1000 {
            assert_eq!(r.admit(t0 + Duration::from_secs(1)), None);
        }
        assert_eq!(r.admit(t0 + Duration::from_secs(10)), Some(1000));
        assert_eq!(r.admit(t0 + Duration::from_secs(11)), None);
        assert_eq!(r.admit(t0 + Duration::from_secs(100)), Some(1), "refills up to the burst");
        assert_eq!(r.admit(t0 + Duration::from_secs(100)), Some(0));
    }

    #[test]
    fn lines_above_the_level_are_not_written_and_each_says_its_level() {
        let path = std::env::temp_dir().join(format!("ab-log-levels-{}", std::process::id()));
        let log = Logger::with_level(LogFormat::Json, Level::Warn).to_file(&path).unwrap();
        log.event("a", EventKind::SetTarget, "info: dropped", &[]);
        log.debug("a", "debug: dropped");
        log.event("a", EventKind::Unreachable, "warn: kept", &[]);
        log.event_at(Level::Error, "-", EventKind::Endpoint, "error: kept", &[]);
        assert!(!log.verbose());
        log.reconfigure(LogFormat::Text, Level::Debug);
        log.debug("a", "debug: kept");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!((v["level"].as_str(), v["event"].as_str()), (Some("warn"), Some("unreachable")));
        let v: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!((v["level"].as_str(), v["msg"].as_str()), (Some("error"), Some("error: kept")));
        assert!(lines[2].contains(" DEBUG [a] debug: kept"), "{}", lines[2]);
        assert!(Level::Error < Level::Warn && Level::Warn < Level::Info && Level::Info < Level::Debug);
        assert_eq!(Logger::new(LogFormat::Text, true).level(), Level::Debug);
        assert_eq!(Logger::new(LogFormat::Text, false).level(), Level::Info);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn formats_utc() {
        assert_eq!(super::format_utc(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::format_utc(1_795_274_807, 479), "2026-11-21T15:26:47.479Z");
        assert_eq!(super::format_utc(951_782_400, 5), "2000-02-29T00:00:00.005Z");
    }
}
