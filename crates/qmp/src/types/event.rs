//! Asynchronous events (`{"event": NAME, "data": {...}, "timestamp": {...}}`)
//! and the size estimate the client's event queue is bounded by.

use std::mem::size_of;

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

/// Bookkeeping per object member beyond its key and value (map node,
/// pointers), a rough figure for `serde_json`'s `BTreeMap`.
const MEMBER_OVERHEAD: usize = 2 * size_of::<usize>();

/// Estimated memory an event occupies while queued, in bytes: the `Event`
/// itself, its name, and every node, string and object key of `data`.
/// Scalars inside arrays and objects count as a whole `Value` each, so
/// `[0,0,0]` costs about 32 bytes per element, not 2, which is what it
/// costs in memory. Allocator slack is not counted. Iterative, so any
/// nesting depth is fine.
pub(crate) fn queued_size(ev: &Event) -> usize {
    let mut total = size_of::<Event>().saturating_add(ev.name.len());
    let mut stack = vec![&ev.data];
    while let Some(v) = stack.pop() {
        let here = match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
            Value::String(s) => s.len(),
            Value::Array(items) => {
                stack.extend(items);
                items.len().saturating_mul(size_of::<Value>())
            }
            Value::Object(members) => members.iter().fold(0usize, |acc, (k, item)| {
                stack.push(item);
                acc.saturating_add(
                    k.len() + size_of::<String>() + size_of::<Value>() + MEMBER_OVERHEAD,
                )
            }),
        };
        total = total.saturating_add(here);
    }
    total
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

    #[test]
    fn queued_size_counts_names_strings_and_nodes() {
        let stop = parse_event(&json!({"event": "STOP"})).unwrap();
        assert_eq!(queued_size(&stop), size_of::<Event>() + 4);

        // A real SHUTDOWN event (QEMU 7.2) stays far below 1 KiB.
        let shutdown = parse_event(&v(r#"{"timestamp": {"seconds": 1795281043, "microseconds": 187377}, "event": "SHUTDOWN", "data": {"guest": false, "reason": "host-qmp-quit"}}"#)).unwrap();
        let small = queued_size(&shutdown);
        assert!(small > queued_size(&stop) && small < 1024, "{small}");

        // Big strings count with their length...
        let blob = parse_event(&json!({"event": "X", "data": {"s": "a".repeat(100_000)}})).unwrap();
        assert!(queued_size(&blob) >= 100_000);
        // ...and numbers in arrays with the size of a Value, not of their text.
        let nums = parse_event(&json!({"event": "X", "data": vec![0; 10_000]})).unwrap();
        assert!(queued_size(&nums) >= 10_000 * size_of::<Value>());
    }

    #[test]
    fn queued_size_handles_deep_nesting() {
        // Deeper than serde_json's parser allows, built by hand: no recursion.
        let mut data = Value::Null;
        for _ in 0..100_000 {
            data = Value::Array(vec![data]);
        }
        let ev = Event {
            name: "DEEP".into(),
            data,
            timestamp: None,
        };
        assert!(queued_size(&ev) >= 100_000 * size_of::<Value>());
        // Dropping 100k nested Values recursively would overflow the test
        // thread's stack; unwind it iteratively.
        let mut v = ev.data;
        while let Value::Array(mut items) = v {
            v = items.pop().unwrap_or(Value::Null);
        }
    }
}
