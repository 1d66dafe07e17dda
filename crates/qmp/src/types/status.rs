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

/// Parses the `return` of `query-kvm`: whether KVM is enabled (the guest runs under KVM;
/// false under TCG). `{"enabled": false, "present": true}` on QEMU 7.2 with `-accel tcg`.
pub fn parse_kvm_enabled(ret: &Value) -> Result<bool, QmpError> {
    ret.get("enabled")
        .and_then(Value::as_bool)
        .ok_or_else(|| shape_error("query-kvm", "no boolean \"enabled\"", ret))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kvm() {
        // QEMU 7.2.22, -accel tcg, on a host with /dev/kvm.
        assert!(!parse_kvm_enabled(&json!({"enabled": false, "present": true})).unwrap());
        assert!(parse_kvm_enabled(&json!({"enabled": true, "present": true})).unwrap());
        assert!(parse_kvm_enabled(&json!({"present": true})).is_err());
    }

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
