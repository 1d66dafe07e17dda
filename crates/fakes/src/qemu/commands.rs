//! What the fake QEMU answers to each QMP command, in QEMU 7.2's reply and error shapes.

use super::fault::Fault;
use super::state::{Migration, VmState};
use super::wire::Outcome;
use super::BALLOON_PATH;
use serde_json::{json, Map, Value};
use std::time::Instant;

/// A command's answer and whether the connection closes after it (`quit`).
pub(crate) struct Answer {
    pub outcome: Outcome,
    pub close: bool,
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Answer {
        Answer {
            outcome,
            close: false,
        }
    }
}

fn generic(desc: impl Into<String>) -> Outcome {
    Err(("GenericError", desc.into()))
}

fn missing(name: &str) -> Outcome {
    generic(format!("Parameter '{name}' is missing"))
}

fn bad_type(name: &str, expected: &str) -> Outcome {
    generic(format!(
        "Invalid parameter type for '{name}', expected: {expected}"
    ))
}

fn in_migration() -> Outcome {
    generic("There's a migration process in progress")
}

/// The `execute` name of a parsed command, if it has one.
pub(crate) fn command_name(cmd: &Value) -> Option<&str> {
    cmd.get("execute").and_then(Value::as_str)
}

/// Runs one parsed input frame against the state; events it causes go to `st.outbox`.
pub(crate) fn dispatch(st: &mut VmState, cmd: &Value, now: Instant) -> Answer {
    let Some(obj) = cmd.as_object() else {
        return generic("QMP input must be a JSON object").into();
    };
    let Some(name) = obj.get("execute") else {
        return generic("QMP input lacks member 'execute'").into();
    };
    let Some(name) = name.as_str() else {
        return generic("QMP input member 'execute' must be a string").into();
    };
    let empty = Map::new();
    let args = match obj.get("arguments") {
        None => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return generic("QMP input member 'arguments' must be an object").into(),
    };
    if !st.negotiated {
        if name == "qmp_capabilities" {
            st.negotiate(now);
            return Ok(json!({})).into();
        }
        return Err((
            "CommandNotFound",
            "Expecting capabilities negotiation with 'qmp_capabilities'".into(),
        ))
        .into();
    }
    match name {
        "qmp_capabilities" => Err(("CommandNotFound", "Capabilities negotiation is already complete, command ignored".into())),
        "query-memory-size-summary" => Ok(json!({"base-memory": st.configured_bytes(), "plugged-memory": 0})),
        "query-balloon" => query_balloon(st, now),
        "balloon" => balloon(st, args, now),
        "qom-get" => qom_get(st, args),
        "qom-set" => qom_set(st, args),
        "query-status" => Ok(json!({"status": st.run_state, "singlestep": false, "running": st.run_state == "running"})),
        "query-migrate" => Ok(query_migrate(st, now)),
        "query-kvm" => match st.kvm {
            Some(enabled) => Ok(json!({"enabled": enabled, "present": true})),
            None => Err(("CommandNotFound", "The command query-kvm has not been found".into())),
        },
        "migrate-set-capabilities" => set_capabilities(st, args),
        "migrate-set-parameters" => Ok(json!({})),
        "migrate" => migrate(st, args, now),
        "migrate_cancel" => {
            if matches!(st.migration, Migration::Active { .. }) {
                st.finish_migration(super::MigrationOutcome::Cancelled);
            }
            Ok(json!({}))
        }
        "stop" => {
            st.run_state = "paused".into();
            st.emit("STOP", Value::Null);
            Ok(json!({}))
        }
        "cont" => {
            st.run_state = "running".into();
            st.emit("RESUME", Value::Null);
            Ok(json!({}))
        }
        "quit" => {
            st.emit("SHUTDOWN", json!({"guest": false, "reason": "host-qmp-quit"}));
            return Answer { outcome: Ok(json!({})), close: true };
        }
        other => Err(("CommandNotFound", format!("The command {other} has not been found"))),
    }
    .into()
}

fn no_balloon() -> Outcome {
    Err((
        "DeviceNotActive",
        "No balloon device has been activated".into(),
    ))
}

fn query_balloon(st: &VmState, now: Instant) -> Outcome {
    match st.fault {
        Some(Fault::NoBalloonDevice) => no_balloon(),
        Some(Fault::HostileBalloon(actual)) => Ok(json!({"actual": actual})),
        _ => Ok(json!({"actual": st.balloon.actual(now)})),
    }
}

fn balloon(st: &mut VmState, args: &Map<String, Value>, now: Instant) -> Outcome {
    let value = match args.get("value") {
        None => return missing("value"),
        Some(v) => match v.as_u64() {
            Some(v) => v,
            None => return bad_type("value", "integer"),
        },
    };
    st.balloon_requests.push(value);
    if st.fault == Some(Fault::NoBalloonDevice) {
        return no_balloon();
    }
    if value == 0 {
        return generic("Parameter 'target' expects a size");
    }
    // QEMU clamps the target to the RAM size.
    let target = value.min(st.configured_bytes());
    st.balloon.request(target, now);
    Ok(json!({}))
}

/// The `path` and `property` arguments, checked like QEMU checks them.
fn qom_target<'a>(st: &VmState, args: &'a Map<String, Value>) -> Result<&'a str, Outcome> {
    let path = match args.get("path") {
        None => return Err(missing("path")),
        Some(p) => p.as_str().ok_or_else(|| bad_type("path", "string"))?,
    };
    let property = match args.get("property") {
        None => return Err(missing("property")),
        Some(p) => p.as_str().ok_or_else(|| bad_type("property", "string"))?,
    };
    if path != BALLOON_PATH || st.fault == Some(Fault::NoBalloonDevice) {
        return Err(Err((
            "DeviceNotFound",
            format!("Device '{path}' not found"),
        )));
    }
    Ok(property)
}

fn no_property(property: &str) -> Outcome {
    generic(format!(
        "Property 'virtio-balloon-pci.{property}' not found"
    ))
}

fn qom_get(st: &VmState, args: &Map<String, Value>) -> Outcome {
    let property = match qom_target(st, args) {
        Ok(p) => p,
        Err(e) => return e,
    };
    match property {
        "guest-stats" => {
            let g = &st.guest_stats;
            // A guest driver with polling on writes its statistics every period: QEMU
            // stamps each with the time it got them.
            let written = if st.polling_interval > 0 && g.last_update_secs != 0 { crate::qemu::wire::epoch_secs() } else { g.last_update_secs };
            Ok(json!({"stats": {
                "stat-htlb-pgalloc": 0, "stat-swap-out": 0, "stat-available-memory": g.available_bytes,
                "stat-htlb-pgfail": 0, "stat-free-memory": g.free_bytes, "stat-minor-faults": 0,
                "stat-major-faults": 0, "stat-total-memory": g.total_bytes, "stat-swap-in": 0,
                "stat-disk-caches": g.disk_caches_bytes,
            }, "last-update": written}))
        }
        "guest-stats-polling-interval" => Ok(json!(st.polling_interval)),
        "free-page-reporting" => Ok(json!(st.backs_reported)),
        "deflate-on-oom" | "free-page-hint" => Ok(json!(false)),
        "x-populate-on-deflate" if st.backs_reported => Ok(json!(true)),
        // What is recorded: the fake records nothing.
        "x-populate-reported" if st.backs_reported => Ok(json!(0)),
        other => no_property(other),
    }
}

fn qom_set(st: &mut VmState, args: &Map<String, Value>) -> Outcome {
    let property = match qom_target(st, args) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if property == "x-populate-reported" && st.backs_reported {
        return match args.get("value").map(Value::as_u64) {
            None => missing("value"),
            Some(Some(bytes)) => {
                st.populate_requests.push(bytes);
                Ok(json!({}))
            }
            Some(None) => bad_type("value", "size"),
        };
    }
    if property != "guest-stats-polling-interval" {
        return no_property(property);
    }
    match args.get("value") {
        None => missing("value"),
        Some(v) => match v.as_i64() {
            Some(secs) if secs < 0 => generic("timer value must be greater than zero"),
            Some(secs) if secs > i64::from(u32::MAX) => generic("timer value is too big"),
            Some(secs) => {
                st.polling_interval = secs.unsigned_abs();
                Ok(json!({}))
            }
            None => bad_type("value", "int"),
        },
    }
}

fn set_capabilities(st: &mut VmState, args: &Map<String, Value>) -> Outcome {
    let Some(caps) = args.get("capabilities") else {
        return missing("capabilities");
    };
    let Some(caps) = caps.as_array() else {
        return bad_type("capabilities", "array");
    };
    if matches!(st.migration, Migration::Active { .. }) {
        return in_migration();
    }
    let mut events = None;
    for cap in caps {
        match (
            cap.get("capability").and_then(Value::as_str),
            cap.get("state").and_then(Value::as_bool),
        ) {
            (Some("events"), Some(on)) => events = Some(on),
            (Some(_), Some(_)) => {}
            _ => return bad_type("capabilities", "MigrationCapabilityStatus"),
        }
    }
    if let Some(on) = events {
        st.migration_events = on;
    }
    Ok(json!({}))
}

fn migrate(st: &mut VmState, args: &Map<String, Value>, now: Instant) -> Outcome {
    match args.get("uri") {
        None => return missing("uri"),
        Some(u) if !u.is_string() => return bad_type("uri", "string"),
        Some(_) => {}
    }
    if matches!(st.migration, Migration::Active { .. }) {
        return in_migration();
    }
    st.start_migration(now);
    Ok(json!({}))
}

/// `query-migrate` in QEMU 7.2's shapes: `{}` before any migration, RAM counters while active.
fn query_migrate(st: &VmState, now: Instant) -> Value {
    let total = st.configured_bytes();
    match st.migration {
        Migration::None => json!({}),
        Migration::Active { since } => {
            let ms = now.saturating_duration_since(since).as_millis() as u64;
            json!({"expected-downtime": 300, "status": "active", "setup-time": 1, "total-time": ms,
                   "ram": ram_stats(total, total / 2)})
        }
        Migration::Finished(super::MigrationOutcome::Completed) => json!({
            "status": "completed", "setup-time": 1, "downtime": 110, "total-time": 580,
            "ram": ram_stats(total, 0)}),
        Migration::Finished(super::MigrationOutcome::Failed) => {
            json!({"status": "failed", "error-desc": "fake migration failure"})
        }
        Migration::Finished(super::MigrationOutcome::Cancelled) => json!({"status": "cancelled"}),
    }
}

fn ram_stats(total: u64, remaining: u64) -> Value {
    let sent = total - remaining.min(total);
    json!({"total": total, "postcopy-requests": 0, "dirty-sync-count": 1, "multifd-bytes": 0,
           "pages-per-second": 0, "downtime-bytes": 0, "page-size": 4096, "remaining": remaining,
           "postcopy-bytes": 0, "mbps": 0.0, "transferred": sent, "dirty-sync-missed-zero-copy": 0,
           "precopy-bytes": sent, "duplicate": 0, "dirty-pages-rate": 0, "skipped": 0,
           "normal-bytes": sent, "normal": sent / 4096})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::FakeQemuConfig;

    fn run(st: &mut VmState, cmd: Value) -> Outcome {
        dispatch(st, &cmd, Instant::now()).outcome
    }

    #[test]
    fn handshake_first_then_commands() {
        let mut st = VmState::new(&FakeQemuConfig::default());
        assert_eq!(
            run(&mut st, json!({"execute": "query-balloon"}))
                .unwrap_err()
                .0,
            "CommandNotFound"
        );
        assert_eq!(
            run(&mut st, json!({"execute": "qmp_capabilities"})),
            Ok(json!({}))
        );
        assert_eq!(
            run(&mut st, json!({"execute": "qmp_capabilities"}))
                .unwrap_err()
                .0,
            "CommandNotFound"
        );
        assert_eq!(
            run(&mut st, json!({"execute": "query-balloon"})),
            Ok(json!({"actual": 4u64 << 30}))
        );
        assert_eq!(run(&mut st, json!([1])).unwrap_err().0, "GenericError");
        assert_eq!(
            run(&mut st, json!({"execute": 5})).unwrap_err().0,
            "GenericError"
        );
        assert_eq!(
            run(&mut st, json!({"execute": "nonexistent-command"})),
            Err((
                "CommandNotFound",
                "The command nonexistent-command has not been found".into()
            ))
        );
    }

    #[test]
    fn balloon_arguments() {
        let mut st = VmState::new(&FakeQemuConfig::default());
        st.negotiated = true;
        assert!(run(&mut st, json!({"execute": "balloon"})).is_err());
        assert!(run(
            &mut st,
            json!({"execute": "balloon", "arguments": {"value": -1}})
        )
        .is_err());
        assert_eq!(
            run(
                &mut st,
                json!({"execute": "balloon", "arguments": {"value": 0}})
            ),
            generic("Parameter 'target' expects a size")
        );
        assert!(run(
            &mut st,
            json!({"execute": "balloon", "arguments": {"value": u64::MAX}})
        )
        .is_ok());
        assert_eq!(st.balloon.target(), 4 << 30);
        assert_eq!(st.balloon_requests, [0, u64::MAX]);
        assert_eq!(
            run(
                &mut st,
                json!({"execute": "qom-get", "arguments": {"path": "/machine/peripheral/nosuchdevice", "property": "guest-stats"}})
            ),
            Err((
                "DeviceNotFound",
                "Device '/machine/peripheral/nosuchdevice' not found".into()
            ))
        );
        assert!(run(&mut st, json!({"execute": "qom-set", "arguments": {"path": BALLOON_PATH, "property": "guest-stats-polling-interval", "value": -3}})).is_err());
        assert!(run(
            &mut st,
            json!({"execute": "migrate-set-capabilities", "arguments": {"capabilities": [1]}})
        )
        .is_err());
    }
}
