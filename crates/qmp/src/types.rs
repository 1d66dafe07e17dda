//! Typed QMP replies and events, and the pure parsers that build them from
//! `serde_json::Value`s. Nothing here does I/O, so everything is unit-tested
//! against frames captured from QEMU 7.2.
//!
//! Parsers are strict about what a command is documented to always return
//! (e.g. `query-balloon`'s `actual`) and lenient about optional statistics:
//! a missing or non-numeric optional field becomes `None` instead of failing
//! the whole reply.

use std::fmt;

use serde_json::{Map, Value};

use crate::error::QmpError;

/// QEMU version from the QMP greeting, e.g. 7.2.22 with package
/// `Debian 1:7.2+dfsg-7+deb12u18+b3`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QemuVersion {
    /// Major version (7 for 7.2.22).
    pub major: u32,
    /// Minor version (2 for 7.2.22).
    pub minor: u32,
    /// Micro version (22 for 7.2.22).
    pub micro: u32,
    /// Distribution package string; empty for upstream builds.
    pub package: String,
}

impl QemuVersion {
    /// `(major, minor, micro)`, handy for comparisons such as `>= (7, 2, 0)`.
    pub fn triple(&self) -> (u32, u32, u32) {
        (self.major, self.minor, self.micro)
    }
}

impl fmt::Display for QemuVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)?;
        if !self.package.is_empty() {
            write!(f, " ({})", self.package)?;
        }
        Ok(())
    }
}

/// The QMP greeting: `{"QMP": {"version": {...}, "capabilities": [...]}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// The QEMU version.
    pub version: QemuVersion,
    /// Capabilities the server offers, e.g. `["oob"]` (we enable none).
    pub capabilities: Vec<String>,
}

/// Parses the greeting frame. Errors are [`QmpError::Greeting`].
pub fn parse_greeting(frame: &Value) -> Result<Greeting, QmpError> {
    let bad = |what: &str| QmpError::Greeting(format!("{what} in {}", abbreviate(frame)));
    let qmp = frame.get("QMP").ok_or_else(|| bad("no \"QMP\" member"))?;
    let version = qmp.get("version").ok_or_else(|| bad("no QMP.version"))?;
    let qemu = version
        .get("qemu")
        .ok_or_else(|| bad("no QMP.version.qemu"))?;
    let num = |key: &str| -> Result<u32, QmpError> {
        qemu.get(key)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad(&format!("missing or invalid QMP.version.qemu.{key}")))
    };
    let package = match version.get("package") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("non-string QMP.version.package")),
    };
    let capabilities = match qmp.get("capabilities") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(caps)) => caps
            .iter()
            .map(|c| c.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("non-string entry in QMP.capabilities"))?,
        Some(_) => return Err(bad("non-array QMP.capabilities")),
    };
    Ok(Greeting {
        version: QemuVersion {
            major: num("major")?,
            minor: num("minor")?,
            micro: num("micro")?,
            package,
        },
        capabilities,
    })
}

/// An asynchronous QMP event such as `BALLOON_CHANGE`, `MIGRATION`, `STOP`,
/// `RESUME` or `SHUTDOWN`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Event name, e.g. `BALLOON_CHANGE`.
    pub name: String,
    /// The `data` member; `Value::Null` when the event has none (e.g. `STOP`).
    pub data: Value,
    /// QEMU's host timestamp as `(seconds, microseconds)` since the Unix epoch.
    pub timestamp: Option<(u64, u64)>,
}

impl Event {
    /// For `BALLOON_CHANGE`: the guest's logical memory size (`actual`) in
    /// bytes. QEMU rate-limits this event to one per second, so the last
    /// value may arrive up to 1 s late; poll `query-balloon` for timing.
    pub fn balloon_actual_bytes(&self) -> Option<u64> {
        if self.name != "BALLOON_CHANGE" {
            return None;
        }
        self.data.get("actual").and_then(Value::as_u64)
    }

    /// For `MIGRATION` events (only sent after
    /// [`Qmp::enable_migration_events`](crate::Qmp::enable_migration_events)):
    /// the new migration status.
    pub fn migration_status(&self) -> Option<MigrationStatus> {
        if self.name != "MIGRATION" {
            return None;
        }
        self.data
            .get("status")
            .and_then(Value::as_str)
            .map(MigrationStatus::parse)
    }
}

/// Parses an event frame (`{"event": NAME, "data": {...}, "timestamp":
/// {...}}`); `None` if the frame is not an event.
pub fn parse_event(frame: &Value) -> Option<Event> {
    let obj = frame.as_object()?;
    let name = obj.get("event")?.as_str()?.to_owned();
    let data = obj.get("data").cloned().unwrap_or(Value::Null);
    let timestamp = obj.get("timestamp").and_then(|t| {
        Some((
            t.get("seconds")?.as_u64()?,
            t.get("microseconds")?.as_u64()?,
        ))
    });
    Some(Event {
        name,
        data,
        timestamp,
    })
}

/// What a reply carries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// `{"return": ...}`
    Return(Value),
    /// `{"error": {"class": ..., "desc": ...}}`
    Error { class: String, desc: String },
    /// An `error` member without string `class` and `desc`.
    MalformedError(String),
}

/// One frame received from the server, classified.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame {
    /// A command reply, with the `id` it echoes (if any).
    Reply { id: Option<Value>, outcome: Outcome },
    /// An asynchronous event.
    Event(Event),
    /// Valid JSON that is neither a reply nor an event (a repeated greeting,
    /// a non-object, ...). The client ignores these.
    Other(Value),
}

/// Classifies one line received from the server. `Err` only for bytes that
/// are not valid UTF-8 JSON.
pub(crate) fn parse_frame(bytes: &[u8]) -> Result<Frame, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "malformed JSON from server ({e}): {}",
            abbreviate_str(&String::from_utf8_lossy(bytes))
        )
    })?;
    Ok(classify_frame(value))
}

pub(crate) fn classify_frame(value: Value) -> Frame {
    let Value::Object(mut obj) = value else {
        return Frame::Other(value);
    };
    if let Some(ret) = obj.remove("return") {
        return Frame::Reply {
            id: obj.remove("id"),
            outcome: Outcome::Return(ret),
        };
    }
    if let Some(err) = obj.remove("error") {
        let class = err.get("class").and_then(Value::as_str);
        let desc = err.get("desc").and_then(Value::as_str);
        let outcome = match (class, desc) {
            (Some(class), Some(desc)) => Outcome::Error {
                class: class.to_owned(),
                desc: desc.to_owned(),
            },
            _ => Outcome::MalformedError(format!("malformed error reply: {}", abbreviate(&err))),
        };
        return Frame::Reply {
            id: obj.remove("id"),
            outcome,
        };
    }
    let value = Value::Object(obj);
    match parse_event(&value) {
        Some(ev) => Frame::Event(ev),
        None => Frame::Other(value),
    }
}

/// Parses the `return` of `query-balloon` (`{"actual": bytes}`): the guest's
/// current logical memory size in bytes (RAM size minus the balloon).
pub fn parse_balloon_info(ret: &Value) -> Result<u64, QmpError> {
    ret.get("actual")
        .and_then(Value::as_u64)
        .ok_or_else(|| shape_error("query-balloon", "no unsigned \"actual\"", ret))
}

/// Parses the `return` of `query-memory-size-summary`
/// (`{"base-memory": bytes, "plugged-memory": bytes}`): the VM's configured
/// RAM in bytes, boot memory plus hot-plugged memory. This is the size
/// `query-balloon` reports while the balloon is empty.
pub fn parse_memory_size_summary(ret: &Value) -> Result<u64, QmpError> {
    let base = ret
        .get("base-memory")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            shape_error(
                "query-memory-size-summary",
                "no unsigned \"base-memory\"",
                ret,
            )
        })?;
    let plugged = ret
        .get("plugged-memory")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    base.checked_add(plugged)
        .ok_or_else(|| shape_error("query-memory-size-summary", "size overflows u64", ret))
}

/// Parses the `return` of `query-status`: the run state string, e.g.
/// `running`, `paused`, `prelaunch`, `inmigrate`, `postmigrate`, `shutdown`.
pub fn parse_status(ret: &Value) -> Result<String, QmpError> {
    ret.get("status")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| shape_error("query-status", "no string \"status\"", ret))
}

/// The virtio-balloon guest statistics, from `qom-get <device> guest-stats`.
///
/// Each field is `None` when the guest has not reported it: QEMU reports
/// such stats as `u64::MAX` (its internal `-1`), which is mapped to `None`.
/// Sizes are in bytes (the Linux driver converts pages to bytes), faults and
/// hugetlb fields are event counts since guest boot.
///
/// Note: with a stock device `total_memory_bytes` (MemTotal) shrinks as the
/// balloon inflates; with `deflate-on-oom=on` it does not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestStats {
    /// `stat-swap-in`: bytes swapped in.
    pub swap_in_bytes: Option<u64>,
    /// `stat-swap-out`: bytes swapped out.
    pub swap_out_bytes: Option<u64>,
    /// `stat-major-faults`: number of major page faults.
    pub major_faults: Option<u64>,
    /// `stat-minor-faults`: number of minor page faults.
    pub minor_faults: Option<u64>,
    /// `stat-free-memory`: MemFree, bytes.
    pub free_memory_bytes: Option<u64>,
    /// `stat-total-memory`: MemTotal, bytes.
    pub total_memory_bytes: Option<u64>,
    /// `stat-available-memory`: MemAvailable, bytes.
    pub available_memory_bytes: Option<u64>,
    /// `stat-disk-caches`: page cache, bytes.
    pub disk_caches_bytes: Option<u64>,
    /// `stat-htlb-pgalloc`: successful hugetlb page allocations.
    pub hugetlb_allocations: Option<u64>,
    /// `stat-htlb-pgfail`: failed hugetlb page allocations.
    pub hugetlb_failures: Option<u64>,
    /// `last-update`: host time (Unix epoch seconds) of the last sample;
    /// `None` if the guest never sent one (QEMU reports 0).
    pub last_update_epoch_secs: Option<u64>,
}

/// Parses the value of the `guest-stats` QOM property
/// (`{"stats": {"stat-...": n, ...}, "last-update": secs}`).
pub fn parse_guest_stats(value: &Value) -> Result<GuestStats, QmpError> {
    let stats = value
        .get("stats")
        .and_then(Value::as_object)
        .ok_or_else(|| shape_error("qom-get guest-stats", "no \"stats\" object", value))?;
    let stat = |key: &str| {
        stats
            .get(key)
            .and_then(Value::as_u64)
            .filter(|&n| n != u64::MAX)
    };
    Ok(GuestStats {
        swap_in_bytes: stat("stat-swap-in"),
        swap_out_bytes: stat("stat-swap-out"),
        major_faults: stat("stat-major-faults"),
        minor_faults: stat("stat-minor-faults"),
        free_memory_bytes: stat("stat-free-memory"),
        total_memory_bytes: stat("stat-total-memory"),
        available_memory_bytes: stat("stat-available-memory"),
        disk_caches_bytes: stat("stat-disk-caches"),
        hugetlb_allocations: stat("stat-htlb-pgalloc"),
        hugetlb_failures: stat("stat-htlb-pgfail"),
        last_update_epoch_secs: value
            .get("last-update")
            .and_then(Value::as_u64)
            .filter(|&n| n != 0),
    })
}

/// QEMU's `MigrationStatus` (QAPI enum, QEMU 7.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MigrationStatus {
    /// No migration has been started (QEMU omits `status` in this case).
    None,
    /// `setup`
    Setup,
    /// `cancelling`
    Cancelling,
    /// `cancelled`
    Cancelled,
    /// `active`
    Active,
    /// `postcopy-active`
    PostcopyActive,
    /// `postcopy-paused`
    PostcopyPaused,
    /// `postcopy-recover`
    PostcopyRecover,
    /// `completed`
    Completed,
    /// `failed`
    Failed,
    /// `colo`
    Colo,
    /// `pre-switchover`
    PreSwitchover,
    /// `device`
    Device,
    /// `wait-unplug`
    WaitUnplug,
    /// Any status this crate does not know (newer QEMU).
    Unknown(String),
}

impl MigrationStatus {
    /// Maps the QAPI string to the enum; unknown strings become `Unknown`.
    pub fn parse(s: &str) -> MigrationStatus {
        use MigrationStatus::*;
        match s {
            "none" => None,
            "setup" => Setup,
            "cancelling" => Cancelling,
            "cancelled" => Cancelled,
            "active" => Active,
            "postcopy-active" => PostcopyActive,
            "postcopy-paused" => PostcopyPaused,
            "postcopy-recover" => PostcopyRecover,
            "completed" => Completed,
            "failed" => Failed,
            "colo" => Colo,
            "pre-switchover" => PreSwitchover,
            "device" => Device,
            "wait-unplug" => WaitUnplug,
            other => Unknown(other.to_owned()),
        }
    }

    /// The QAPI string.
    pub fn as_str(&self) -> &str {
        use MigrationStatus::*;
        match self {
            None => "none",
            Setup => "setup",
            Cancelling => "cancelling",
            Cancelled => "cancelled",
            Active => "active",
            PostcopyActive => "postcopy-active",
            PostcopyPaused => "postcopy-paused",
            PostcopyRecover => "postcopy-recover",
            Completed => "completed",
            Failed => "failed",
            Colo => "colo",
            PreSwitchover => "pre-switchover",
            Device => "device",
            WaitUnplug => "wait-unplug",
            Unknown(s) => s,
        }
    }

    /// `completed`, `failed` or `cancelled`: the migration will not progress
    /// any further.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            MigrationStatus::Completed | MigrationStatus::Failed | MigrationStatus::Cancelled
        )
    }
}

impl MigrationStatus {
    /// A migration is under way: neither [`MigrationStatus::None`] nor
    /// finished ([`MigrationStatus::is_finished`]). `Unknown` statuses count
    /// as active, so a loop waiting for the end still ends on a known
    /// terminal status or its own timeout.
    pub fn is_active(&self) -> bool {
        !matches!(self, MigrationStatus::None) && !self.is_finished()
    }
}

impl fmt::Display for MigrationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reply of `query-migrate`. Everything except `status` is optional
/// because QEMU only includes what applies to the current state (nothing at
/// all before the first migration).
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationInfo {
    /// `status`; [`MigrationStatus::None`] if absent.
    pub status: MigrationStatus,
    /// `total-time`: ms since `migrate` (includes setup); while active, so far.
    pub total_time_ms: Option<u64>,
    /// `setup-time`, ms.
    pub setup_time_ms: Option<u64>,
    /// `downtime`, ms (after completion).
    pub downtime_ms: Option<u64>,
    /// `expected-downtime`, ms (while active).
    pub expected_downtime_ms: Option<u64>,
    /// `ram.transferred`: bytes sent on the wire.
    pub ram_transferred_bytes: Option<u64>,
    /// `ram.remaining`: bytes still to send.
    pub ram_remaining_bytes: Option<u64>,
    /// `ram.total`: guest RAM size including ROMs, bytes.
    pub ram_total_bytes: Option<u64>,
    /// `ram.duplicate`: zero pages (sent as a header only).
    pub ram_duplicate_pages: Option<u64>,
    /// `ram.normal`: pages sent in full.
    pub ram_normal_pages: Option<u64>,
    /// `ram.normal-bytes`: bytes of full pages sent.
    pub ram_normal_bytes: Option<u64>,
    /// `ram.page-size`, bytes.
    pub ram_page_size_bytes: Option<u64>,
    /// `ram.dirty-sync-count`: number of dirty-bitmap syncs (≈ passes).
    pub ram_dirty_sync_count: Option<u64>,
    /// `ram.dirty-pages-rate`, pages per second.
    pub ram_dirty_pages_per_sec: Option<u64>,
    /// `ram.pages-per-second`: transfer rate, pages per second.
    pub ram_pages_per_sec: Option<u64>,
    /// `ram.mbps`: throughput in **megabits** per second.
    pub ram_throughput_mbit_per_sec: Option<f64>,
    /// `ram.precopy-bytes`.
    pub ram_precopy_bytes: Option<u64>,
    /// `ram.downtime-bytes`: bytes sent while the VM was stopped.
    pub ram_downtime_bytes: Option<u64>,
    /// `ram.postcopy-bytes`.
    pub ram_postcopy_bytes: Option<u64>,
    /// `error-desc`, set when `status` is `failed`.
    pub error_desc: Option<String>,
    /// The whole reply, for fields not modelled here.
    pub raw: Value,
}

/// Parses the `return` of `query-migrate`.
pub fn parse_migration_info(ret: &Value) -> Result<MigrationInfo, QmpError> {
    let obj = ret
        .as_object()
        .ok_or_else(|| shape_error("query-migrate", "not an object", ret))?;
    let status = match obj.get("status") {
        None | Some(Value::Null) => MigrationStatus::None,
        Some(Value::String(s)) => MigrationStatus::parse(s),
        Some(_) => return Err(shape_error("query-migrate", "non-string \"status\"", ret)),
    };
    let empty = Map::new();
    let ram = obj.get("ram").and_then(Value::as_object).unwrap_or(&empty);
    let top = |k: &str| obj.get(k).and_then(Value::as_u64);
    let r = |k: &str| ram.get(k).and_then(Value::as_u64);
    Ok(MigrationInfo {
        status,
        total_time_ms: top("total-time"),
        setup_time_ms: top("setup-time"),
        downtime_ms: top("downtime"),
        expected_downtime_ms: top("expected-downtime"),
        ram_transferred_bytes: r("transferred"),
        ram_remaining_bytes: r("remaining"),
        ram_total_bytes: r("total"),
        ram_duplicate_pages: r("duplicate"),
        ram_normal_pages: r("normal"),
        ram_normal_bytes: r("normal-bytes"),
        ram_page_size_bytes: r("page-size"),
        ram_dirty_sync_count: r("dirty-sync-count"),
        ram_dirty_pages_per_sec: r("dirty-pages-rate"),
        ram_pages_per_sec: r("pages-per-second"),
        ram_throughput_mbit_per_sec: ram.get("mbps").and_then(Value::as_f64),
        ram_precopy_bytes: r("precopy-bytes"),
        ram_downtime_bytes: r("downtime-bytes"),
        ram_postcopy_bytes: r("postcopy-bytes"),
        error_desc: obj
            .get("error-desc")
            .and_then(Value::as_str)
            .map(str::to_owned),
        raw: ret.clone(),
    })
}

fn shape_error(what: &str, problem: &str, value: &Value) -> QmpError {
    QmpError::Protocol(format!(
        "unexpected {what} reply ({problem}): {}",
        abbreviate(value)
    ))
}

/// A JSON value rendered for an error message, cut to a sane length.
pub(crate) fn abbreviate(value: &Value) -> String {
    abbreviate_str(&value.to_string())
}

pub(crate) fn abbreviate_str(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Frames below are verbatim from QEMU 7.2.22 transcripts (see tests/fixtures).
    const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18+b3"}, "capabilities": ["oob"]}}"#;
    const GUEST_STATS: &str = r#"{"stats": {"stat-htlb-pgalloc": 0, "stat-swap-out": 0, "stat-available-memory": 3944198144, "stat-htlb-pgfail": 0, "stat-free-memory": 4062744576, "stat-minor-faults": 512, "stat-major-faults": 0, "stat-total-memory": 4105621504, "stat-swap-in": 0, "stat-disk-caches": 3035136}, "last-update": 1795274835}"#;
    const GUEST_STATS_NO_DRIVER: &str = r#"{"stats": {"stat-htlb-pgalloc": 18446744073709551615, "stat-swap-out": 18446744073709551615, "stat-available-memory": 18446744073709551615, "stat-htlb-pgfail": 18446744073709551615, "stat-free-memory": 18446744073709551615, "stat-minor-faults": 18446744073709551615, "stat-major-faults": 18446744073709551615, "stat-total-memory": 18446744073709551615, "stat-swap-in": 18446744073709551615, "stat-disk-caches": 18446744073709551615}, "last-update": 0}"#;
    const MIGRATE_COMPLETED: &str = r#"{"status": "completed", "setup-time": 1, "downtime": 110, "total-time": 580, "ram": {"total": 4295499776, "postcopy-requests": 0, "dirty-sync-count": 3, "multifd-bytes": 0, "pages-per-second": 2714838, "downtime-bytes": 61934673, "page-size": 4096, "remaining": 0, "postcopy-bytes": 0, "mbps": 2769.0383143350605, "transferred": 200249632, "dirty-sync-missed-zero-copy": 0, "precopy-bytes": 138314959, "duplicate": 1002165, "dirty-pages-rate": 0, "skipped": 0, "normal-bytes": 190857216, "normal": 46596}}"#;

    fn v(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn greeting() {
        let g = parse_greeting(&v(GREETING)).unwrap();
        assert_eq!(
            g.version,
            QemuVersion {
                major: 7,
                minor: 2,
                micro: 22,
                package: "Debian 1:7.2+dfsg-7+deb12u18+b3".into()
            }
        );
        assert_eq!(g.capabilities, vec!["oob".to_string()]);
        assert_eq!(g.version.triple(), (7, 2, 22));
        assert!(g.version.triple() >= (7, 2, 0));
        assert_eq!(
            g.version.to_string(),
            "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"
        );
    }

    #[test]
    fn greeting_minimal_and_bad() {
        let g = parse_greeting(
            &json!({"QMP": {"version": {"qemu": {"major": 9, "minor": 0, "micro": 1}}}}),
        )
        .unwrap();
        assert_eq!(g.version.to_string(), "9.0.1");
        assert!(g.capabilities.is_empty());

        for bad in [
            json!({}),
            json!({"return": {}}),
            json!({"QMP": {}}),
            json!({"QMP": {"version": {"qemu": {"major": 7, "minor": 2}}}}),
            json!({"QMP": {"version": {"qemu": {"major": -7, "minor": 2, "micro": 0}}}}),
            json!({"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}, "package": 3}}}),
            json!({"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}}, "capabilities": [1]}}),
            json!([1, 2]),
        ] {
            assert!(
                matches!(parse_greeting(&bad), Err(QmpError::Greeting(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn events() {
        let ev = parse_event(&v(r#"{"timestamp": {"seconds": 1795274840, "microseconds": 433064}, "event": "BALLOON_CHANGE", "data": {"actual": 4293918720}}"#)).unwrap();
        assert_eq!(ev.name, "BALLOON_CHANGE");
        assert_eq!(ev.timestamp, Some((1795274840, 433064)));
        assert_eq!(ev.balloon_actual_bytes(), Some(4293918720));
        assert_eq!(ev.migration_status(), None);

        let stop = parse_event(&v(
            r#"{"timestamp": {"seconds": 1795278607, "microseconds": 24844}, "event": "STOP"}"#,
        ))
        .unwrap();
        assert_eq!(stop.data, Value::Null);
        assert_eq!(stop.balloon_actual_bytes(), None);

        let mig =
            parse_event(&json!({"event": "MIGRATION", "data": {"status": "postcopy-active"}}))
                .unwrap();
        assert_eq!(mig.timestamp, None);
        assert_eq!(
            mig.migration_status(),
            Some(MigrationStatus::PostcopyActive)
        );

        assert!(parse_event(&json!({"return": {}})).is_none());
        assert!(parse_event(&json!({"event": 5})).is_none());
        let weird_ts =
            parse_event(&json!({"event": "X", "timestamp": {"seconds": -1, "microseconds": 0}}))
                .unwrap();
        assert_eq!(weird_ts.timestamp, None);
    }

    #[test]
    fn frames() {
        assert_eq!(
            parse_frame(br#"{"return": {"actual": 268435456}, "id": 2}"#).unwrap(),
            Frame::Reply {
                id: Some(json!(2)),
                outcome: Outcome::Return(json!({"actual": 268435456}))
            }
        );
        assert_eq!(
            parse_frame(br#"{"id": 3, "error": {"class": "CommandNotFound", "desc": "The command nonexistent has not been found"}}"#).unwrap(),
            Frame::Reply {
                id: Some(json!(3)),
                outcome: Outcome::Error {
                    class: "CommandNotFound".into(),
                    desc: "The command nonexistent has not been found".into()
                }
            }
        );
        // QEMU's reply to unparsable input carries no id.
        assert!(matches!(
            parse_frame(br#"{"error": {"class": "GenericError", "desc": "JSON parse error, invalid keyword 'garbage'"}}"#).unwrap(),
            Frame::Reply { id: None, outcome: Outcome::Error { .. } }
        ));
        assert!(matches!(
            parse_frame(br#"{"error": "boom", "id": 1}"#).unwrap(),
            Frame::Reply {
                outcome: Outcome::MalformedError(_),
                ..
            }
        ));
        assert!(matches!(
            parse_frame(br#"{"event": "STOP"}"#).unwrap(),
            Frame::Event(_)
        ));
        assert!(matches!(
            parse_frame(GREETING.as_bytes()).unwrap(),
            Frame::Other(_)
        ));
        assert!(matches!(
            parse_frame(MIGRATE_COMPLETED.as_bytes()).unwrap(),
            Frame::Other(_)
        ));
        assert!(matches!(parse_frame(b"42").unwrap(), Frame::Other(_)));
        assert!(parse_frame(b"not json").is_err());
        assert!(parse_frame(b"{\"return\": ").is_err());
        assert!(parse_frame(b"\xff\xfe").is_err());
        assert!(parse_frame(b"").is_err());
    }

    #[test]
    fn balloon_and_status() {
        assert_eq!(
            parse_balloon_info(&json!({"actual": 4294967296u64})).unwrap(),
            4 << 30
        );
        assert!(matches!(
            parse_balloon_info(&json!({})),
            Err(QmpError::Protocol(_))
        ));
        assert!(matches!(
            parse_balloon_info(&json!({"actual": -1})),
            Err(QmpError::Protocol(_))
        ));
        assert_eq!(
            parse_status(&json!({"status": "prelaunch", "singlestep": false, "running": false}))
                .unwrap(),
            "prelaunch"
        );
        assert!(parse_status(&json!({"running": true})).is_err());
    }

    #[test]
    fn memory_size_summary() {
        // QEMU 7.2, -m 256M.
        let v = v(r#"{"base-memory": 268435456, "plugged-memory": 0}"#);
        assert_eq!(parse_memory_size_summary(&v).unwrap(), 256 << 20);
        assert_eq!(
            parse_memory_size_summary(&json!({"base-memory": 1024, "plugged-memory": 512}))
                .unwrap(),
            1536
        );
        assert_eq!(
            parse_memory_size_summary(&json!({"base-memory": 1024})).unwrap(),
            1024
        );
        assert!(parse_memory_size_summary(&json!({"plugged-memory": 1})).is_err());
        assert!(
            parse_memory_size_summary(&json!({"base-memory": u64::MAX, "plugged-memory": 1}))
                .is_err()
        );
    }

    #[test]
    fn guest_stats() {
        let s = parse_guest_stats(&v(GUEST_STATS)).unwrap();
        assert_eq!(
            s,
            GuestStats {
                swap_in_bytes: Some(0),
                swap_out_bytes: Some(0),
                major_faults: Some(0),
                minor_faults: Some(512),
                free_memory_bytes: Some(4062744576),
                total_memory_bytes: Some(4105621504),
                available_memory_bytes: Some(3944198144),
                disk_caches_bytes: Some(3035136),
                hugetlb_allocations: Some(0),
                hugetlb_failures: Some(0),
                last_update_epoch_secs: Some(1795274835),
            }
        );
        // No guest driver yet (QEMU -S): every stat is u64::MAX, last-update 0.
        assert_eq!(
            parse_guest_stats(&v(GUEST_STATS_NO_DRIVER)).unwrap(),
            GuestStats::default()
        );
        // Partial and odd values are tolerated, a missing "stats" object is not.
        let partial =
            parse_guest_stats(&json!({"stats": {"stat-free-memory": 5, "stat-swap-in": "x"}}))
                .unwrap();
        assert_eq!(partial.free_memory_bytes, Some(5));
        assert_eq!(partial.swap_in_bytes, None);
        assert_eq!(partial.last_update_epoch_secs, None);
        assert!(matches!(
            parse_guest_stats(&json!({})),
            Err(QmpError::Protocol(_))
        ));
        assert!(parse_guest_stats(&json!(3)).is_err());
    }

    #[test]
    fn migration_completed() {
        let m = parse_migration_info(&v(MIGRATE_COMPLETED)).unwrap();
        assert_eq!(m.status, MigrationStatus::Completed);
        assert!(m.status.is_finished());
        assert_eq!(m.total_time_ms, Some(580));
        assert_eq!(m.setup_time_ms, Some(1));
        assert_eq!(m.downtime_ms, Some(110));
        assert_eq!(m.expected_downtime_ms, None);
        assert_eq!(m.ram_transferred_bytes, Some(200249632));
        assert_eq!(m.ram_remaining_bytes, Some(0));
        assert_eq!(m.ram_total_bytes, Some(4295499776));
        assert_eq!(m.ram_duplicate_pages, Some(1002165));
        assert_eq!(m.ram_normal_pages, Some(46596));
        assert_eq!(m.ram_normal_bytes, Some(190857216));
        assert_eq!(m.ram_page_size_bytes, Some(4096));
        assert_eq!(m.ram_dirty_sync_count, Some(3));
        assert_eq!(m.ram_dirty_pages_per_sec, Some(0));
        assert_eq!(m.ram_pages_per_sec, Some(2714838));
        assert_eq!(m.ram_throughput_mbit_per_sec, Some(2769.0383143350605));
        assert_eq!(m.ram_precopy_bytes, Some(138314959));
        assert_eq!(m.ram_downtime_bytes, Some(61934673));
        assert_eq!(m.ram_postcopy_bytes, Some(0));
        assert_eq!(m.error_desc, None);
        assert_eq!(m.raw["ram"]["skipped"], json!(0));
    }

    #[test]
    fn migration_other_states() {
        // QEMU 7.2 before any migration: `{}`.
        let none = parse_migration_info(&json!({})).unwrap();
        assert_eq!(none.status, MigrationStatus::None);
        assert_eq!(none.ram_transferred_bytes, None);
        assert!(!none.status.is_finished());

        let failed =
            parse_migration_info(&json!({"status": "failed", "error-desc": "Connection refused"}))
                .unwrap();
        assert_eq!(failed.status, MigrationStatus::Failed);
        assert_eq!(failed.error_desc.as_deref(), Some("Connection refused"));

        let future = parse_migration_info(&json!({"status": "teleporting"})).unwrap();
        assert_eq!(
            future.status,
            MigrationStatus::Unknown("teleporting".into())
        );
        assert_eq!(future.status.to_string(), "teleporting");
        assert!(future.status.is_active());

        assert!(parse_migration_info(&json!({"status": 1})).is_err());
        assert!(parse_migration_info(&json!([])).is_err());
    }

    #[test]
    fn migration_status_round_trip() {
        for s in [
            "none",
            "setup",
            "cancelling",
            "cancelled",
            "active",
            "postcopy-active",
            "postcopy-paused",
            "postcopy-recover",
            "completed",
            "failed",
            "colo",
            "pre-switchover",
            "device",
            "wait-unplug",
        ] {
            let st = MigrationStatus::parse(s);
            assert!(!matches!(st, MigrationStatus::Unknown(_)), "{s}");
            assert_eq!(st.as_str(), s);
            let terminal = matches!(s, "completed" | "failed" | "cancelled");
            assert_eq!(st.is_finished(), terminal, "{s}");
            assert_eq!(st.is_active(), !terminal && s != "none", "{s}");
        }
    }

    #[test]
    fn abbreviation_is_char_safe() {
        let long = "é".repeat(300);
        let a = abbreviate_str(&long);
        assert!(a.len() < long.len());
        assert!(a.ends_with("(600 bytes)"));
    }
}
