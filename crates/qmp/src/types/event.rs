//! Asynchronous events (`{"event": NAME, "data": {...}, "timestamp": {...}}`).

use serde_json::Value;

use super::migration::MigrationStatus;

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

#[cfg(test)]
mod tests {
    use super::super::samples::v;
    use super::*;
    use serde_json::json;

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
}
