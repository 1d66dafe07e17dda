//! The single error type of this crate.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong when talking to QEMU over QMP.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// cannot connect to QMP socket {path}: {source}
    #[error("cannot connect to QMP socket {path}: {source}")]
    Connect {
        /// The socket path we tried.
        path: PathBuf,
        /// The error from `connect(2)`.
        #[source]
        source: io::Error,
    },

    /// I/O error on the QMP socket: {0}
    #[error("I/O error on the QMP socket: {0}")]
    Io(#[from] io::Error),

    /// malformed QMP greeting: {0}
    #[error("malformed QMP greeting: {0}")]
    Greeting(String),

    /// QMP protocol error: {0}
    ///
    /// Malformed JSON from the peer, an unexpected frame, or a reply whose
    /// shape does not match what the command is documented to return.
    #[error("QMP protocol error: {0}")]
    Protocol(String),

    /// QMP command {command} failed: {class}: {desc}
    ///
    /// QEMU answered with `{"error": {"class": ..., "desc": ...}}`.
    #[error("QMP command {command} failed: {class}: {desc}")]
    CommandFailed {
        /// The `execute` name of the failed command.
        command: String,
        /// QMP error class, e.g. `GenericError`, `CommandNotFound`, `DeviceNotActive`.
        class: String,
        /// Human-readable description from QEMU.
        desc: String,
    },

    /// QMP command {command} timed out after {after:?}
    #[error("QMP command {command} timed out after {after:?}")]
    Timeout {
        /// The `execute` name of the command (or `greeting` during the handshake).
        command: String,
        /// How long we waited.
        after: Duration,
    },

    /// QMP connection closed
    ///
    /// The socket reached EOF or failed while reading, or the connection was
    /// shut down locally. Every caller waiting for a reply gets this error.
    #[error("QMP connection closed")]
    Disconnected,
}

impl QmpError {
    /// Whether retrying the same operation (typically after reconnecting)
    /// can plausibly succeed: connection failures, I/O errors, timeouts and
    /// disconnects. Protocol violations and command failures are not transient.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            QmpError::Connect { .. }
                | QmpError::Io(_)
                | QmpError::Timeout { .. }
                | QmpError::Disconnected
        )
    }

    /// The QMP error class (`GenericError`, `CommandNotFound`,
    /// `DeviceNotActive`, `DeviceNotFound`, `KVMMissingCap`) of a
    /// [`QmpError::CommandFailed`]; `None` for every other variant.
    pub fn error_class(&self) -> Option<&str> {
        match self {
            QmpError::CommandFailed { class, .. } => Some(class),
            _ => None,
        }
    }

    /// QEMU refused the command with class `DeviceNotActive`. QEMU 7.2
    /// answers `query-balloon` and `balloon` this way ("No balloon device
    /// has been activated") when the VM has no balloon device at all. A
    /// device whose guest driver is not loaded (yet) does not cause it: QEMU
    /// registers the balloon when the device is created, so both commands
    /// succeed even under `-S` (see tests/fixtures/prelaunch-no-guest.qmp.log
    /// and no-balloon-device.qmp.log). Not transient: reconnecting will not
    /// add a device.
    pub fn is_device_not_active(&self) -> bool {
        self.error_class() == Some("DeviceNotActive")
    }

    /// QEMU does not know the command (class `CommandNotFound`), e.g. a
    /// command newer than the running QEMU.
    pub fn is_command_not_found(&self) -> bool {
        self.error_class() == Some("CommandNotFound")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        let e = QmpError::CommandFailed {
            command: "balloon".into(),
            class: "DeviceNotActive".into(),
            desc: "No balloon device has been activated".into(),
        };
        assert_eq!(
            e.to_string(),
            "QMP command balloon failed: DeviceNotActive: No balloon device has been activated"
        );
        let e = QmpError::Timeout {
            command: "query-balloon".into(),
            after: Duration::from_millis(1500),
        };
        assert_eq!(
            e.to_string(),
            "QMP command query-balloon timed out after 1.5s"
        );
        assert_eq!(QmpError::Disconnected.to_string(), "QMP connection closed");
    }

    #[test]
    fn transient() {
        assert!(QmpError::Disconnected.is_transient());
        assert!(QmpError::Io(io::Error::other("x")).is_transient());
        assert!(!QmpError::Protocol("x".into()).is_transient());
        assert!(!QmpError::Greeting("x".into()).is_transient());
    }

    fn failed(class: &str, desc: &str) -> QmpError {
        QmpError::CommandFailed {
            command: "query-balloon".into(),
            class: class.into(),
            desc: desc.into(),
        }
    }

    #[test]
    fn error_classes() {
        // Verbatim from QEMU 7.2 (tests/fixtures/no-balloon-device.qmp.log,
        // prelaunch-no-guest.qmp.log).
        let not_active = failed("DeviceNotActive", "No balloon device has been activated");
        assert!(not_active.is_device_not_active());
        assert!(!not_active.is_command_not_found());
        assert!(!not_active.is_transient());
        assert_eq!(not_active.error_class(), Some("DeviceNotActive"));

        let not_found = failed(
            "CommandNotFound",
            "The command nonexistent-command has not been found",
        );
        assert!(not_found.is_command_not_found());
        assert!(!not_found.is_device_not_active());

        // Other classes, and the class compared exactly, not the text.
        for e in [
            failed("DeviceNotFound", "Device 'x' not found"),
            failed("GenericError", "No balloon device has been activated"),
            failed("devicenotactive", ""),
        ] {
            assert!(!e.is_device_not_active(), "{e}");
            assert!(!e.is_command_not_found(), "{e}");
        }

        // Variants other than CommandFailed have no class.
        for e in [
            QmpError::Disconnected,
            QmpError::Protocol("DeviceNotActive".into()),
            QmpError::Greeting("CommandNotFound".into()),
            QmpError::Timeout {
                command: "balloon".into(),
                after: Duration::from_secs(1),
            },
        ] {
            assert_eq!(e.error_class(), None, "{e}");
            assert!(!e.is_device_not_active(), "{e}");
            assert!(!e.is_command_not_found(), "{e}");
        }
    }
}
