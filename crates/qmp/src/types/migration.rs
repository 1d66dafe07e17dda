//! `query-migrate` and the migration status it (and the `MIGRATION` event)
//! reports.

use std::fmt;

use serde_json::{Map, Value};

use super::frame::shape_error;
use crate::error::QmpError;

/// Defines [`MigrationStatus`] from one table of `Variant => "qapi-string"`
/// rows: the enum (plus `Unknown`), both directions of the mapping, and
/// `TABLE` for tests, so the two directions cannot drift apart.
macro_rules! migration_statuses {
    ($($(#[$doc:meta])* $variant:ident => $qapi:literal,)+) => {
        /// QEMU's `MigrationStatus` (QAPI enum: QEMU 7.2's 14 values plus
        /// `postcopy-recover-setup`, added in QEMU 9.1 and present in 10.0).
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum MigrationStatus {
            $($(#[$doc])* $variant,)+
            /// Any status this crate does not know (newer QEMU).
            Unknown(String),
        }

        impl MigrationStatus {
            /// Every known status with its QAPI string, in QAPI order.
            #[cfg(test)]
            const TABLE: &'static [(MigrationStatus, &'static str)] =
                &[$((MigrationStatus::$variant, $qapi),)+];

            /// Maps the QAPI string to the enum; unknown strings become `Unknown`.
            pub fn parse(s: &str) -> MigrationStatus {
                match s {
                    $($qapi => MigrationStatus::$variant,)+
                    other => MigrationStatus::Unknown(other.to_owned()),
                }
            }

            /// The QAPI string.
            pub fn as_str(&self) -> &str {
                match self {
                    $(MigrationStatus::$variant => $qapi,)+
                    MigrationStatus::Unknown(s) => s,
                }
            }
        }
    };
}

migration_statuses! {
    /// No migration has been started (QEMU omits `status` in this case).
    None => "none",
    /// `setup`
    Setup => "setup",
    /// `cancelling`
    Cancelling => "cancelling",
    /// `cancelled`
    Cancelled => "cancelled",
    /// `active`
    Active => "active",
    /// `postcopy-active`
    PostcopyActive => "postcopy-active",
    /// `postcopy-paused`
    PostcopyPaused => "postcopy-paused",
    /// `postcopy-recover-setup` (QEMU 9.1 and later)
    PostcopyRecoverSetup => "postcopy-recover-setup",
    /// `postcopy-recover`
    PostcopyRecover => "postcopy-recover",
    /// `completed`
    Completed => "completed",
    /// `failed`
    Failed => "failed",
    /// `colo`
    Colo => "colo",
    /// `pre-switchover`
    PreSwitchover => "pre-switchover",
    /// `device`
    Device => "device",
    /// `wait-unplug`
    WaitUnplug => "wait-unplug",
}

impl MigrationStatus {
    /// `completed`, `failed` or `cancelled`: the migration will not progress
    /// any further.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            MigrationStatus::Completed | MigrationStatus::Failed | MigrationStatus::Cancelled
        )
    }

    /// A migration is under way: neither [`MigrationStatus::None`] nor
    /// finished ([`MigrationStatus::is_finished`]). `Unknown` statuses count
    /// as active, so a loop waiting for the end still ends on a known
    /// terminal status or its own timeout.
    pub fn is_active(&self) -> bool {
        !matches!(self, MigrationStatus::None) && !self.is_finished()
    }
}

impl fmt::Display for MigrationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reply of `query-migrate`. Everything except `status` is optional
/// because QEMU only includes what applies to the current state (nothing at
/// all before the first migration).
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationInfo {
    /// `status`; [`MigrationStatus::None`] if absent.
    pub status: MigrationStatus,
    /// `total-time`: ms since `migrate` (includes setup); while active, so far.
    pub total_time_ms: Option<u64>,
    /// `setup-time`, ms.
    pub setup_time_ms: Option<u64>,
    /// `downtime`, ms (after completion).
    pub downtime_ms: Option<u64>,
    /// `expected-downtime`, ms (while active).
    pub expected_downtime_ms: Option<u64>,
    /// `ram.transferred`: bytes sent on the wire.
    pub ram_transferred_bytes: Option<u64>,
    /// `ram.remaining`: bytes still to send.
    pub ram_remaining_bytes: Option<u64>,
    /// `ram.total`: guest RAM size including ROMs, bytes.
    pub ram_total_bytes: Option<u64>,
    /// `ram.duplicate`: zero pages (sent as a header only).
    pub ram_duplicate_pages: Option<u64>,
    /// `ram.normal`: pages sent in full.
    pub ram_normal_pages: Option<u64>,
    /// `ram.normal-bytes`: bytes of full pages sent.
    pub ram_normal_bytes: Option<u64>,
    /// `ram.page-size`, bytes.
    pub ram_page_size_bytes: Option<u64>,
    /// `ram.dirty-sync-count`: number of dirty-bitmap syncs (≈ passes).
    pub ram_dirty_sync_count: Option<u64>,
    /// `ram.dirty-pages-rate`, pages per second.
    pub ram_dirty_pages_per_sec: Option<u64>,
    /// `ram.pages-per-second`: transfer rate, pages per second.
    pub ram_pages_per_sec: Option<u64>,
    /// `ram.mbps`: throughput in **megabits** per second.
    pub ram_throughput_mbit_per_sec: Option<f64>,
    /// `ram.precopy-bytes`.
    pub ram_precopy_bytes: Option<u64>,
    /// `ram.downtime-bytes`: bytes sent while the VM was stopped.
    pub ram_downtime_bytes: Option<u64>,
    /// `ram.postcopy-bytes`.
    pub ram_postcopy_bytes: Option<u64>,
    /// `error-desc`, set when `status` is `failed`.
    pub error_desc: Option<String>,
    /// The whole reply, for fields not modelled here.
    pub raw: Value,
}

/// Parses the `return` of `query-migrate`.
pub fn parse_migration_info(ret: &Value) -> Result<MigrationInfo, QmpError> {
    let obj = ret
        .as_object()
        .ok_or_else(|| shape_error("query-migrate", "not an object", ret))?;
    let status = match obj.get("status") {
        None | Some(Value::Null) => MigrationStatus::None,
        Some(Value::String(s)) => MigrationStatus::parse(s),
        Some(_) => return Err(shape_error("query-migrate", "non-string \"status\"", ret)),
    };
    let empty = Map::new();
    let ram = obj.get("ram").and_then(Value::as_object).unwrap_or(&empty);
    let top = |k: &str| obj.get(k).and_then(Value::as_u64);
    let r = |k: &str| ram.get(k).and_then(Value::as_u64);
    Ok(MigrationInfo {
        status,
        total_time_ms: top("total-time"),
        setup_time_ms: top("setup-time"),
        downtime_ms: top("downtime"),
        expected_downtime_ms: top("expected-downtime"),
        ram_transferred_bytes: r("transferred"),
        ram_remaining_bytes: r("remaining"),
        ram_total_bytes: r("total"),
        ram_duplicate_pages: r("duplicate"),
        ram_normal_pages: r("normal"),
        ram_normal_bytes: r("normal-bytes"),
        ram_page_size_bytes: r("page-size"),
        ram_dirty_sync_count: r("dirty-sync-count"),
        ram_dirty_pages_per_sec: r("dirty-pages-rate"),
        ram_pages_per_sec: r("pages-per-second"),
        ram_throughput_mbit_per_sec: ram.get("mbps").and_then(Value::as_f64),
        ram_precopy_bytes: r("precopy-bytes"),
        ram_downtime_bytes: r("downtime-bytes"),
        ram_postcopy_bytes: r("postcopy-bytes"),
        error_desc: obj
            .get("error-desc")
            .and_then(Value::as_str)
            .map(str::to_owned),
        raw: ret.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::samples::{v, MIGRATE_COMPLETED};
    use super::*;
    use serde_json::json;

    #[test]
    fn migration_completed() {
        let m = parse_migration_info(&v(MIGRATE_COMPLETED)).unwrap();
        assert_eq!(m.status, MigrationStatus::Completed);
        assert!(m.status.is_finished());
        assert_eq!(m.total_time_ms, Some(580));
        assert_eq!(m.setup_time_ms, Some(1));
        assert_eq!(m.downtime_ms, Some(110));
        assert_eq!(m.expected_downtime_ms, None);
        assert_eq!(m.ram_transferred_bytes, Some(200249632));
        assert_eq!(m.ram_remaining_bytes, Some(0));
        assert_eq!(m.ram_total_bytes, Some(4295499776));
        assert_eq!(m.ram_duplicate_pages, Some(1002165));
        assert_eq!(m.ram_normal_pages, Some(46596));
        assert_eq!(m.ram_normal_bytes, Some(190857216));
        assert_eq!(m.ram_page_size_bytes, Some(4096));
        assert_eq!(m.ram_dirty_sync_count, Some(3));
        assert_eq!(m.ram_dirty_pages_per_sec, Some(0));
        assert_eq!(m.ram_pages_per_sec, Some(2714838));
        assert_eq!(m.ram_throughput_mbit_per_sec, Some(2769.0383143350605));
        assert_eq!(m.ram_precopy_bytes, Some(138314959));
        assert_eq!(m.ram_downtime_bytes, Some(61934673));
        assert_eq!(m.ram_postcopy_bytes, Some(0));
        assert_eq!(m.error_desc, None);
        assert_eq!(m.raw["ram"]["skipped"], json!(0));
    }

    #[test]
    fn migration_other_states() {
        // QEMU 7.2 before any migration: `{}`.
        let none = parse_migration_info(&json!({})).unwrap();
        assert_eq!(none.status, MigrationStatus::None);
        assert_eq!(none.ram_transferred_bytes, None);
        assert!(!none.status.is_finished());

        let failed =
            parse_migration_info(&json!({"status": "failed", "error-desc": "Connection refused"}))
                .unwrap();
        assert_eq!(failed.status, MigrationStatus::Failed);
        assert_eq!(failed.error_desc.as_deref(), Some("Connection refused"));

        let future = parse_migration_info(&json!({"status": "teleporting"})).unwrap();
        assert_eq!(
            future.status,
            MigrationStatus::Unknown("teleporting".into())
        );
        assert_eq!(future.status.to_string(), "teleporting");
        assert!(future.status.is_active());

        assert!(parse_migration_info(&json!({"status": 1})).is_err());
        assert!(parse_migration_info(&json!([])).is_err());
    }

    /// The QEMU 10.0 QAPI `MigrationStatus` values (7.2's and
    /// `postcopy-recover-setup`), written out independently
    /// of the table so an edit to the table cannot go unnoticed.
    #[test]
    fn migration_status_round_trip() {
        for s in [
            "none",
            "setup",
            "cancelling",
            "cancelled",
            "active",
            "postcopy-active",
            "postcopy-paused",
            "postcopy-recover-setup",
            "postcopy-recover",
            "completed",
            "failed",
            "colo",
            "pre-switchover",
            "device",
            "wait-unplug",
        ] {
            let st = MigrationStatus::parse(s);
            assert!(!matches!(st, MigrationStatus::Unknown(_)), "{s}");
            assert_eq!(st.as_str(), s);
            let terminal = matches!(s, "completed" | "failed" | "cancelled");
            assert_eq!(st.is_finished(), terminal, "{s}");
            assert_eq!(st.is_active(), !terminal && s != "none", "{s}");
        }
    }

    #[test]
    fn migration_status_table_round_trips() {
        let table = MigrationStatus::TABLE;
        assert_eq!(
            table.len(),
            15,
            "QEMU 10.0 has 15 migration statuses (7.2's 14 and postcopy-recover-setup)"
        );
        for (i, (status, qapi)) in table.iter().enumerate() {
            assert_eq!(MigrationStatus::parse(qapi), *status, "{qapi}");
            assert_eq!(status.as_str(), *qapi);
            assert_eq!(status.to_string(), *qapi);
            // Strings and variants are unique, so both directions are functions.
            for (other, other_qapi) in &table[i + 1..] {
                assert_ne!(qapi, other_qapi);
                assert_ne!(status, other);
            }
        }
        // Unknown keeps its string and never collides with a known one.
        let unknown = MigrationStatus::parse("teleporting");
        assert_eq!(unknown, MigrationStatus::Unknown("teleporting".into()));
        assert_eq!(unknown.as_str(), "teleporting");
        assert!(!table.iter().any(|(s, _)| *s == unknown));
        // Case matters, as in QAPI.
        assert!(matches!(
            MigrationStatus::parse("Completed"),
            MigrationStatus::Unknown(_)
        ));
    }
}
