//! Frames shared by the unit tests of several files, verbatim from QEMU
//! 7.2.22 transcripts (see tests/fixtures).

use serde_json::Value;

pub(super) const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18+b3"}, "capabilities": ["oob"]}}"#;
pub(super) const MIGRATE_COMPLETED: &str = r#"{"status": "completed", "setup-time": 1, "downtime": 110, "total-time": 580, "ram": {"total": 4295499776, "postcopy-requests": 0, "dirty-sync-count": 3, "multifd-bytes": 0, "pages-per-second": 2714838, "downtime-bytes": 61934673, "page-size": 4096, "remaining": 0, "postcopy-bytes": 0, "mbps": 2769.0383143350605, "transferred": 200249632, "dirty-sync-missed-zero-copy": 0, "precopy-bytes": 138314959, "duplicate": 1002165, "dirty-pages-rate": 0, "skipped": 0, "normal-bytes": 190857216, "normal": 46596}}"#;

/// Parses test JSON; the samples are known-good.
pub(super) fn v(s: &str) -> Value {
    serde_json::from_str(s).expect("sample is JSON")
}
