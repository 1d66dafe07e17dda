//! Classifying one line received from the server (reply, event or other),
//! and the error-message helpers the reply parsers share.

use serde_json::Value;

use super::event::{parse_event, Event};
use crate::error::QmpError;

/// What a reply carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `{"return": ...}`
    Return(Value),
    /// `{"error": {"class": ..., "desc": ...}}`
    Error {
        /// QEMU's error class, e.g. `GenericError`.
        class: String,
        /// QEMU's message.
        desc: String,
    },
    /// An `error` member without string `class` and `desc`.
    MalformedError(String),
}

/// One frame received from the server, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A command reply, with the `id` it echoes (if any).
    Reply {
        /// The `id` the reply echoes.
        id: Option<Value>,
        /// What it carries.
        outcome: Outcome,
    },
    /// An asynchronous event.
    Event(Event),
    /// Valid JSON that is neither a reply nor an event (a repeated greeting,
    /// a non-object, ...). The client ignores these.
    Other(Value),
}

/// Classifies one line received from the server. `Err` only for bytes that
/// are not valid UTF-8 JSON.
pub fn parse_frame(bytes: &[u8]) -> Result<Frame, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "malformed JSON from server ({e}): {}",
            abbreviate_str(&String::from_utf8_lossy(bytes))
        )
    })?;
    Ok(classify_frame(value))
}

fn classify_frame(value: Value) -> Frame {
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

/// The [`QmpError::Protocol`] for a reply whose shape does not match what
/// `what` (the command) is documented to return.
pub(super) fn shape_error(what: &str, problem: &str, value: &Value) -> QmpError {
    QmpError::Protocol(format!(
        "unexpected {what} reply ({problem}): {}",
        abbreviate(value)
    ))
}

/// A JSON value rendered for an error message, cut to a sane length.
pub(super) fn abbreviate(value: &Value) -> String {
    abbreviate_str(&value.to_string())
}

/// `s` cut to at most 200 bytes (on a character boundary) for an error
/// message, with the full length appended when cut.
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
    use super::super::samples::{GREETING, MIGRATE_COMPLETED};
    use super::*;
    use serde_json::json;

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
    fn abbreviation_is_char_safe() {
        let long = "é".repeat(300);
        let a = abbreviate_str(&long);
        assert!(a.len() < long.len());
        assert!(a.ends_with("(600 bytes)"));
    }

    #[test]
    fn shape_errors_are_protocol_errors() {
        let e = shape_error("query-x", "no \"y\"", &json!({"z": "w".repeat(500)}));
        let QmpError::Protocol(msg) = e else {
            panic!("expected Protocol, got {e:?}");
        };
        assert!(
            msg.starts_with("unexpected query-x reply (no \"y\"): {\"z\":"),
            "{msg}"
        );
        assert!(msg.len() < 300, "{msg}");
    }
}
