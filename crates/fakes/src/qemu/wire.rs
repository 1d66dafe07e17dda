//! QMP frames in QEMU 7.2's exact shapes: greeting, replies, errors, events.

use serde_json::{json, Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// The greeting of the QEMU the fixtures were recorded with (7.2.22, Debian).
pub(crate) const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18+b3"}, "capabilities": ["oob"]}}"#;

/// The greeting of a QEMU of `version` (upstream: no package string).
pub(crate) fn greeting(version: Option<(u32, u32, u32)>) -> String {
    match version {
        None => GREETING.to_string(),
        Some((major, minor, micro)) => serde_json::json!({"QMP": {"version": {"qemu": {"micro": micro, "minor": minor, "major": major}, "package": ""}, "capabilities": ["oob"]}}).to_string(),
    }
}

/// A command's outcome: `return` value or `(class, desc)` error.
pub(crate) type Outcome = Result<Value, (&'static str, String)>;

/// Seconds since the epoch (0 if the clock is before it).
pub(crate) fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `{"seconds": ..., "microseconds": ...}` for now.
fn timestamp() -> Value {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    json!({"seconds": d.as_secs(), "microseconds": d.subsec_micros()})
}

/// An event frame; `data` is left out when `Null` (as QEMU does for STOP, RESUME).
pub(crate) fn event(name: &str, data: Value) -> Value {
    let mut m = Map::new();
    m.insert("timestamp".into(), timestamp());
    m.insert("event".into(), Value::String(name.to_owned()));
    if !data.is_null() {
        m.insert("data".into(), data);
    }
    Value::Object(m)
}

/// A reply frame for `outcome`, echoing the command's `id` if it had one.
pub(crate) fn reply(outcome: Outcome, id: Option<Value>) -> Value {
    let mut m = Map::new();
    match outcome {
        Ok(v) => m.insert("return".into(), v),
        Err((class, desc)) => m.insert("error".into(), json!({"class": class, "desc": desc})),
    };
    if let Some(id) = id {
        m.insert("id".into(), id);
    }
    Value::Object(m)
}

/// One line of wire text for `frame`, newline included.
pub(crate) fn line(frame: &Value) -> Vec<u8> {
    let mut v = frame.to_string().into_bytes();
    v.push(b'\n');
    v
}

/// A `FAKE_FLOOD` event whose line is about `size_bytes` long.
pub(crate) fn flood_event(size_bytes: usize) -> Value {
    let base = line(&event("FAKE_FLOOD", json!({"padding": ""}))).len();
    event(
        "FAKE_FLOOD",
        json!({"padding": "x".repeat(size_bytes.saturating_sub(base))}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(
            reply(Ok(json!({})), Some(json!(3))),
            json!({"return": {}, "id": 3})
        );
        assert_eq!(
            reply(
                Err((
                    "DeviceNotActive",
                    "No balloon device has been activated".into()
                )),
                None
            ),
            json!({"error": {"class": "DeviceNotActive", "desc": "No balloon device has been activated"}})
        );
        let stop = event("STOP", Value::Null);
        assert!(stop.get("data").is_none() && stop["timestamp"]["seconds"].as_u64().unwrap() > 0);
        assert_eq!(line(&flood_event(1000)).len(), 1000);
        assert!(serde_json::from_str::<Value>(GREETING).is_ok());
    }
}
