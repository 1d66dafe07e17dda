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
}
