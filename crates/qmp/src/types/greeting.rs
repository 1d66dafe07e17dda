//! The QMP greeting QEMU sends on connect: its version and capabilities.

use std::fmt;

use serde_json::Value;

use super::frame::{abbreviate, shape_error};
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
    let version = version_in(version, "QMP.version", &bad)?;
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
        version,
        capabilities,
    })
}

/// Parses the `return` of `query-version`: the same object as the greeting's
/// `QMP.version` (`{"qemu": {"major", "minor", "micro"}, "package"}`).
pub fn parse_query_version(ret: &Value) -> Result<QemuVersion, QmpError> {
    version_in(ret, "return", &|what: &str| {
        shape_error("query-version", what, ret)
    })
}

/// A version object found at `at` (for messages); `bad` makes the error.
fn version_in(
    version: &Value,
    at: &str,
    bad: &dyn Fn(&str) -> QmpError,
) -> Result<QemuVersion, QmpError> {
    let qemu = version
        .get("qemu")
        .ok_or_else(|| bad(&format!("no {at}.qemu")))?;
    let num = |key: &str| -> Result<u32, QmpError> {
        qemu.get(key)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad(&format!("missing or invalid {at}.qemu.{key}")))
    };
    let package = match version.get("package") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad(&format!("non-string {at}.package"))),
    };
    Ok(QemuVersion {
        major: num("major")?,
        minor: num("minor")?,
        micro: num("micro")?,
        package,
    })
}

#[cfg(test)]
mod tests {
    use super::super::samples::{v, GREETING};
    use super::*;
    use serde_json::json;

    #[test]
    fn query_version_is_the_greetings_version_object() {
        let ret = json!({"qemu": {"micro": 2, "minor": 0, "major": 10}, "package": "Debian 1:10.0.2+ds-2+deb13u1~bpo12+1"});
        let v = parse_query_version(&ret).unwrap();
        assert_eq!(
            (v.triple(), v.package.as_str()),
            ((10, 0, 2), "Debian 1:10.0.2+ds-2+deb13u1~bpo12+1")
        );
        let e = parse_query_version(&json!({"qemu": {"major": 10}})).unwrap_err();
        assert!(
            matches!(&e, QmpError::Protocol(m) if m.contains("return.qemu.minor")),
            "{e:?}"
        );
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
}
