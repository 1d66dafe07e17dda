//! `query-status`: the VM run state.

use serde_json::Value;

use super::frame::shape_error;
use crate::error::QmpError;

/// Parses the `return` of `query-status`: the run state string, e.g.
/// `running`, `paused`, `prelaunch`, `inmigrate`, `postmigrate`, `shutdown`.
pub fn parse_status(ret: &Value) -> Result<String, QmpError> {
    ret.get("status")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| shape_error("query-status", "no string \"status\"", ret))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status() {
        // QEMU 7.2 started with -S.
        assert_eq!(
            parse_status(&json!({"status": "prelaunch", "singlestep": false, "running": false}))
                .unwrap(),
            "prelaunch"
        );
        assert!(matches!(
            parse_status(&json!({"running": true})),
            Err(QmpError::Protocol(_))
        ));
        assert!(parse_status(&json!({"status": 1})).is_err());
        assert!(parse_status(&json!(null)).is_err());
    }
}
