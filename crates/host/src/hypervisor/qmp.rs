//! QEMU through its QMP socket ([`autoballoon_qmp::Qmp`]): the balloon device is named by
//! its QOM path, migrations are followed through `MIGRATION` events and `query-migrate`.

use super::{BalloonFeatures, Connected, Hypervisor, Result};
use autoballoon_core::migration::{self, Accel, MigrationPhase, MigrationProgress};
use autoballoon_core::protocol::{BalloonStats, MigrationOutcome};
use autoballoon_core::{Bytes, Kib};
use autoballoon_qmp::{GuestStats, MigrationStatus, Qmp};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A QMP session with one QEMU, and the QOM path of its balloon device.
pub(crate) struct QmpHypervisor {
    qmp: Qmp,
    balloon_device: String,
}

/// Connects to the QMP socket at `path`; every command has `timeout`.
pub(crate) fn connect(path: &Path, balloon_device: &str, agent: Option<&Path>, timeout: Duration) -> Result<Connected> {
    let qmp = Qmp::connect(path, timeout)?;
    qmp.set_command_timeout(timeout);
    let hypervisor = Arc::new(QmpHypervisor { qmp, balloon_device: balloon_device.to_string() });
    Ok(Connected { hypervisor, agent: agent.map(Path::to_path_buf) })
}

/// QMP's migration status as a phase.
pub(crate) fn phase_of(s: &MigrationStatus) -> MigrationPhase {
    match s {
        MigrationStatus::None => MigrationPhase::Idle,
        MigrationStatus::Completed => MigrationPhase::Ended(MigrationOutcome::Completed),
        MigrationStatus::Failed => MigrationPhase::Ended(MigrationOutcome::Failed),
        MigrationStatus::Cancelled => MigrationPhase::Ended(MigrationOutcome::Cancelled),
        // Unknown statuses count as running, as QMP's `is_active` has them.
        other => MigrationPhase::running(other.as_str()),
    }
}

/// QEMU's guest-stats as the border takes them.
fn balloon_stats_of(gs: &GuestStats) -> BalloonStats {
    BalloonStats { total: gs.total_memory_bytes.map(Bytes), free: gs.free_memory_bytes.map(Bytes), available: gs.available_memory_bytes.map(Bytes), disk_caches: gs.disk_caches_bytes.map(Bytes), written_at_epoch_secs: gs.last_update_epoch_secs }
}

impl Hypervisor for QmpHypervisor {
    fn describe(&self) -> String {
        format!("QEMU {}", self.qmp.version())
    }
    fn facts(&self) -> migration::Hypervisor {
        // The version is the greeting's (what `query-version` answers too).
        let accel = match self.qmp.query_kvm_enabled() {
            Ok(true) => Accel::Kvm,
            Ok(false) => Accel::Tcg,
            Err(_) => Accel::Unknown,
        };
        migration::Hypervisor::from_version(self.qmp.version().triple(), &self.qmp.version().package, accel)
    }
    fn configured(&self) -> Result<Kib> {
        Ok(Bytes(self.qmp.query_memory_size_bytes()?).to_kib_floor())
    }
    fn balloon(&self) -> Result<Bytes> {
        Ok(Bytes(self.qmp.query_balloon()?))
    }
    /// QMP `balloon` takes the guest's logical size in bytes.
    fn set_guest_size(&self, size: Kib) -> Result<()> {
        Ok(self.qmp.set_balloon_guest_size(size.to_bytes_saturating().0)?)
    }
    fn set_stats_period(&self, secs: u32) -> Result<()> {
        Ok(self.qmp.set_stats_polling_interval(&self.balloon_device, secs)?)
    }
    fn balloon_features(&self) -> BalloonFeatures {
        let get = |p: &str| self.qmp.qom_get(&self.balloon_device, p).ok().and_then(|v| v.as_bool());
        // `x-populate-reported` works only with `x-populate-on-deflate` on (its thread).
        let backs_reported = self.qmp.qom_get(&self.balloon_device, "x-populate-reported").ok().map(|_| get("x-populate-on-deflate") == Some(true));
        BalloonFeatures { free_page_reporting: get("free-page-reporting"), free_page_hint: get("free-page-hint"), deflate_on_oom: get("deflate-on-oom"), backs_reported }
    }
    fn back_reported(&self, size: Kib) -> Result<()> {
        Ok(self.qmp.qom_set(&self.balloon_device, "x-populate-reported", serde_json::json!(size.to_bytes_saturating().0))?)
    }
    fn balloon_stats(&self) -> Result<BalloonStats> {
        Ok(balloon_stats_of(&self.qmp.guest_stats(&self.balloon_device)?))
    }
    fn enable_migration_events(&self, wake: Box<dyn Fn() + Send + Sync>) -> Result<()> {
        // Only migration events wake: BALLOON_CHANGE comes with every balloon move.
        self.qmp.on_event(Box::new(move |e| {
            if e.migration_status().is_some() {
                wake()
            }
        }));
        Ok(self.qmp.enable_migration_events()?)
    }
    fn migration_events(&self) -> Vec<MigrationPhase> {
        self.qmp.poll_events().iter().filter_map(|e| e.migration_status()).map(|s| phase_of(&s)).collect()
    }
    fn dropped_events(&self) -> u64 {
        self.qmp.dropped_events()
    }
    fn migration(&self) -> Result<MigrationProgress> {
        let i = self.qmp.query_migrate()?;
        Ok(MigrationProgress { phase: phase_of(&i.status), total_time: i.total_time_ms.map(Duration::from_millis), sent: i.ram_transferred_bytes.map(Bytes), downtime: i.downtime_ms.map(Duration::from_millis) })
    }
    fn can_migrate(&self) -> std::result::Result<(), &'static str> {
        Ok(())
    }
    fn set_max_bandwidth(&self, bytes_per_sec: u64) -> Result<()> {
        Ok(self.qmp.migrate_set_max_bandwidth(bytes_per_sec)?)
    }
    fn migrate(&self, uri: &str) -> Result<()> {
        Ok(self.qmp.migrate(uri)?)
    }
    fn run_state(&self) -> Result<String> {
        Ok(self.qmp.query_status()?)
    }
    fn is_connected(&self) -> bool {
        self.qmp.is_connected()
    }
    fn close(&self) {
        self.qmp.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoballoon_core::protocol::{check_balloon_stats, Rejected};

    #[test]
    fn qmp_statuses_map_to_phases() {
        assert_eq!(phase_of(&MigrationStatus::None), MigrationPhase::Idle);
        assert_eq!(phase_of(&MigrationStatus::Completed), MigrationPhase::Ended(MigrationOutcome::Completed));
        assert_eq!(phase_of(&MigrationStatus::Failed), MigrationPhase::Ended(MigrationOutcome::Failed));
        assert_eq!(phase_of(&MigrationStatus::Cancelled), MigrationPhase::Ended(MigrationOutcome::Cancelled));
        for s in ["setup", "active", "cancelling", "postcopy-active", "device", "teleporting"] {
            let st = MigrationStatus::parse(s);
            assert_eq!(phase_of(&st).is_running(), st.is_active(), "{s}");
            assert_eq!(phase_of(&st).to_string(), st.to_string(), "shown as QEMU says it");
        }
    }

    fn captured(name: &str) -> BalloonStats {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/qemu").join(name);
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        balloon_stats_of(&autoballoon_qmp::types::parse_guest_stats(&v).unwrap())
    }

    #[test]
    fn what_the_guest_wrote_while_free_page_hinting_held_its_memory_is_not_read_after_it() {
        let configured = Kib::from_mib_saturating(2048);
        let view = |s: &BalloonStats| check_balloon_stats(s, configured).unwrap().unwrap();
        let (start, during, after) = (captured("guest-stats-hinted-migration-source-at-start.json"), captured("guest-stats-hinted-migration-source-during.json"), captured("guest-stats-hinted-migration-destination-after.json"));
        assert!(view(&start).available > Kib::from_mib_saturating(1800));
        // Hinting holds the free memory: the guest reads as out of memory, on the source
        // during the migration and on the destination after it.
        for s in [&during, &after] {
            assert_eq!(view(s).available, Kib(0));
        }
        // The sampler asks for statistics written a second past its last sample of the
        // hinted migration (the source's `during` was stamped then), and on a destination a
        // second past the incoming migration's end, or past a session begun on a QEMU whose
        // incoming migration had completed (the guest resumed, and its statistics came,
        // before that).
        let (during_at, after_at) = (during.written_at_epoch_secs.unwrap(), after.written_at_epoch_secs.unwrap());
        assert!(!during.written_after(during_at + 1));
        assert!(!after.written_after(during_at + 1), "stamped {after_at}, the second after");
        assert!(!after.written_after(after_at), "a destination's session begun as it resumed");
        assert!(start.written_after(start.written_at_epoch_secs.unwrap() - 1));
    }

    #[test]
    fn qmp_stats_reach_the_border_unchanged_and_hostile_ones_are_refused() {
        let configured = Kib::from_gib_saturating(4);
        // QEMU's guest-stats: u64::MAX is "not reported" already; one less is refused.
        let gs = GuestStats { total_memory_bytes: Some(u64::MAX - 1), free_memory_bytes: Some(0), available_memory_bytes: Some(0), ..Default::default() };
        assert!(matches!(check_balloon_stats(&balloon_stats_of(&gs), configured), Err(Rejected::TotalAboveSize { .. })));
        let gs = GuestStats { total_memory_bytes: Some(1 << 30), free_memory_bytes: Some(1 << 29), available_memory_bytes: Some(3 << 30), ..Default::default() };
        assert!(matches!(check_balloon_stats(&balloon_stats_of(&gs), configured), Err(Rejected::AboveTotal { field: "MemAvailable", .. })));
        assert_eq!(check_balloon_stats(&balloon_stats_of(&GuestStats::default()), configured), Ok(None));
    }
}
