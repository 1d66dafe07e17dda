//! What a VM's actor asks of its QEMU, whichever way it is reached: a QMP socket
//! ([`autoballoon_qmp::Qmp`]) or a libvirt domain ([`crate::libvirt::Domain`], through
//! libvirt's API: `setmem`, `dommemstat`, `domjobinfo`).
//!
//! The numbers the guest makes (the balloon's `actual`, the balloon driver's statistics)
//! come out of a monitor raw, in core's types, and reach the actor only through core's
//! border ([`actual`], [`balloon_view`]).

use crate::libvirt::{Domain, VirshError};
use autoballoon_core::migration::{Accel, Hypervisor};
use autoballoon_core::policy::MemView;
use autoballoon_core::protocol::{check_actual, check_balloon_stats, BalloonStats, Rejected};
use autoballoon_core::{Bytes, Kib};
use autoballoon_qmp::{GuestStats, MigrationStatus, Qmp, QmpError};

/// A failed monitor operation.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error(transparent)]
    Qmp(#[from] QmpError),
    #[error("libvirt: {0}")]
    Libvirt(#[from] VirshError),
}

impl MonitorError {
    /// The VM has no (active) balloon device.
    pub fn is_device_not_active(&self) -> bool {
        match self {
            MonitorError::Qmp(e) => e.is_device_not_active(),
            MonitorError::Libvirt(e) => e.is_no_balloon(),
        }
    }
}

/// A migration's state, with what the report shows at its end.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationState {
    pub status: MigrationStatus,
    pub total_time_ms: Option<u64>,
    pub sent_bytes: Option<u64>,
    pub downtime_ms: Option<u64>,
}

pub(crate) type Result<T> = std::result::Result<T, MonitorError>;

/// A number the guest made, through core's border: `Err` says why it is impossible.
pub(crate) type Checked<T> = std::result::Result<T, Rejected>;

/// The guest's present size (the balloon's `actual`) of a VM of `configured` size, checked.
pub(crate) fn actual(m: &dyn Monitor, configured: Kib) -> Result<Checked<Kib>> {
    Ok(check_actual(m.balloon_bytes()?, configured))
}

/// The guest's memory view from the balloon driver's statistics, checked: `Ok(None)` while
/// the guest has reported none.
pub(crate) fn balloon_view(m: &dyn Monitor, balloon_device: &str, configured: Kib) -> Result<Checked<Option<MemView>>> {
    Ok(check_balloon_stats(&m.balloon_stats(balloon_device)?, configured))
}

/// libvirt's `dommemstat` as the border takes them.
fn balloon_stats_of_libvirt(s: &crate::libvirt::parse::MemStats) -> BalloonStats {
    let b = |k: Option<Kib>| k.map(Kib::to_bytes_saturating);
    BalloonStats { total: b(s.available), free: b(s.unused), available: b(s.usable), disk_caches: b(s.disk_caches) }
}

/// QEMU's guest-stats as the border takes them.
fn balloon_stats_of(gs: &GuestStats) -> BalloonStats {
    BalloonStats { total: gs.total_memory_bytes.map(Bytes), free: gs.free_memory_bytes.map(Bytes), available: gs.available_memory_bytes.map(Bytes), disk_caches: gs.disk_caches_bytes.map(Bytes) }
}

/// QEMU's own switches on the VM's balloon device; `None`: not known (libvirt, an old
/// QEMU, a device without the property).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BalloonFeatures {
    pub free_page_reporting: Option<bool>,
    pub free_page_hint: Option<bool>,
    pub deflate_on_oom: Option<bool>,
}

impl BalloonFeatures {
    /// The switches known to be off that help autoballoon: free page reporting gives free
    /// memory back between the agent's samples, hinting skips free pages when a
    /// migration starts (docs/migration.md, "QEMU's own switches").
    pub fn missing(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.free_page_reporting == Some(false) {
            v.push("free-page-reporting");
        }
        if self.free_page_hint == Some(false) {
            v.push("free-page-hint");
        }
        v
    }
}

impl std::fmt::Display for BalloonFeatures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |v: Option<bool>| match v {
            Some(true) => "on",
            Some(false) => "off",
            None => "unknown",
        };
        write!(f, "free-page-reporting {}, free-page-hint {}, deflate-on-oom {}", s(self.free_page_reporting), s(self.free_page_hint), s(self.deflate_on_oom))
    }
}

/// One VM's QEMU. Every call has a deadline (the QMP command timeout, or virsh's).
pub(crate) trait Monitor: Send + Sync {
    /// For log lines: `QEMU 7.2.0`, `through libvirt`.
    fn describe(&self) -> String;
    /// What is known of the hypervisor (QEMU's version, the accelerator), for
    /// [`autoballoon_core::migration::MigrationShrink`]. Never fails: what cannot be read
    /// is unknown.
    fn hypervisor(&self) -> Hypervisor;
    /// The VM's configured memory, bytes: the balloon's ceiling.
    fn configured_bytes(&self) -> Result<u64>;
    /// The guest's present size (the balloon's `actual`), raw: use [`actual`].
    fn balloon_bytes(&self) -> Result<Bytes>;
    /// Sets the guest's size, bytes (QMP `balloon`, `virsh setmem`).
    fn set_guest_size(&self, bytes: u64) -> Result<()>;
    /// QEMU's own switches on the balloon device. Never fails: what cannot be read is unknown.
    fn balloon_features(&self, balloon_device: &str) -> BalloonFeatures;
    /// Has the guest's balloon driver refresh its statistics every `secs`.
    fn set_stats_period(&self, balloon_device: &str, secs: u32) -> Result<()>;
    /// The balloon driver's statistics, raw: use [`balloon_view`].
    fn balloon_stats(&self, balloon_device: &str) -> Result<BalloonStats>;
    /// Asks for migration events, where there are any.
    fn enable_migration_events(&self) -> Result<()>;
    /// Migration statuses seen since the last call, without waiting (QMP: events; libvirt:
    /// the domain's job, polled).
    fn migration_events(&self) -> Vec<MigrationStatus>;
    /// Events dropped because too many came (QMP's bounded queue).
    fn dropped_events(&self) -> u64;
    fn query_migrate(&self) -> Result<MigrationState>;
    /// Whether `autoballoon migrate` can start a migration of this VM.
    fn can_migrate(&self) -> std::result::Result<(), &'static str>;
    fn set_max_bandwidth(&self, bytes_per_sec: u64) -> Result<()>;
    fn migrate(&self, uri: &str) -> Result<()>;
    /// The VM's run state (`running`, `postmigrate`, `paused`, ...).
    fn run_state(&self) -> Result<String>;
    fn is_connected(&self) -> bool;
    /// Cuts the session: a command waiting for an answer fails now (QMP) or at its deadline.
    fn close(&self);
}

impl Monitor for Qmp {
    fn describe(&self) -> String {
        format!("QEMU {}", self.version())
    }
    fn hypervisor(&self) -> Hypervisor {
        // The version is the greeting's (what `query-version` answers too).
        let accel = match self.query_kvm_enabled() {
            Ok(true) => Accel::Kvm,
            Ok(false) => Accel::Tcg,
            Err(_) => Accel::Unknown,
        };
        Hypervisor::from_version(self.version().triple(), &self.version().package, accel)
    }
    fn configured_bytes(&self) -> Result<u64> {
        Ok(self.query_memory_size_bytes()?)
    }
    fn balloon_bytes(&self) -> Result<Bytes> {
        Ok(Bytes(self.query_balloon()?))
    }
    fn set_guest_size(&self, bytes: u64) -> Result<()> {
        Ok(self.set_balloon_guest_size(bytes)?)
    }
    fn set_stats_period(&self, balloon_device: &str, secs: u32) -> Result<()> {
        Ok(self.set_stats_polling_interval(balloon_device, secs)?)
    }
    fn balloon_features(&self, balloon_device: &str) -> BalloonFeatures {
        let get = |p: &str| self.qom_get(balloon_device, p).ok().and_then(|v| v.as_bool());
        BalloonFeatures { free_page_reporting: get("free-page-reporting"), free_page_hint: get("free-page-hint"), deflate_on_oom: get("deflate-on-oom") }
    }
    fn balloon_stats(&self, balloon_device: &str) -> Result<BalloonStats> {
        Ok(balloon_stats_of(&Qmp::guest_stats(self, balloon_device)?))
    }
    fn enable_migration_events(&self) -> Result<()> {
        Ok(Qmp::enable_migration_events(self)?)
    }
    fn migration_events(&self) -> Vec<MigrationStatus> {
        self.poll_events().iter().filter_map(|e| e.migration_status()).collect()
    }
    fn dropped_events(&self) -> u64 {
        Qmp::dropped_events(self)
    }
    fn query_migrate(&self) -> Result<MigrationState> {
        let i = Qmp::query_migrate(self)?;
        Ok(MigrationState { status: i.status, total_time_ms: i.total_time_ms, sent_bytes: i.ram_transferred_bytes, downtime_ms: i.downtime_ms })
    }
    fn can_migrate(&self) -> std::result::Result<(), &'static str> {
        Ok(())
    }
    fn set_max_bandwidth(&self, bytes_per_sec: u64) -> Result<()> {
        Ok(self.migrate_set_max_bandwidth(bytes_per_sec)?)
    }
    fn migrate(&self, uri: &str) -> Result<()> {
        Ok(Qmp::migrate(self, uri)?)
    }
    fn run_state(&self) -> Result<String> {
        Ok(self.query_status()?)
    }
    fn is_connected(&self) -> bool {
        Qmp::is_connected(self)
    }
    fn close(&self) {
        Qmp::close(self)
    }
}

/// A libvirt domain. libvirt sends no QMP events to us: the domain's job is polled once a
/// tick (`domjobinfo`), and a migration job that ended is read back with `--completed`.
pub(crate) struct LibvirtMonitor {
    pub domain: Domain,
    /// A migration job was running at the last poll.
    migrating: std::sync::Mutex<bool>,
}

impl LibvirtMonitor {
    pub fn new(domain: Domain) -> LibvirtMonitor {
        LibvirtMonitor { domain, migrating: std::sync::Mutex::new(false) }
    }
}

/// libvirt's `Job type` of a job as a QMP migration status.
fn job_status(kind: &str) -> MigrationStatus {
    match kind {
        "None" => MigrationStatus::None,
        "Bounded" | "Unbounded" => MigrationStatus::Active,
        "Completed" => MigrationStatus::Completed,
        "Failed" => MigrationStatus::Failed,
        "Cancelled" => MigrationStatus::Cancelled,
        other => MigrationStatus::Unknown(other.to_string()),
    }
}

impl Monitor for LibvirtMonitor {
    fn describe(&self) -> String {
        "through libvirt".into()
    }
    /// Through libvirt's QMP passthrough; unknown (a migration holds the balloon) if
    /// libvirt refuses it.
    fn hypervisor(&self) -> Hypervisor {
        self.domain.hypervisor().unwrap_or_default()
    }
    fn configured_bytes(&self) -> Result<u64> {
        Ok(self.domain.dominfo()?.max.to_bytes_saturating().0)
    }
    fn balloon_bytes(&self) -> Result<Bytes> {
        let s = self.domain.dommemstat()?;
        Ok(s.actual.unwrap_or_default().to_bytes_saturating())
    }
    fn set_guest_size(&self, bytes: u64) -> Result<()> {
        Ok(self.domain.setmem(Bytes(bytes).to_kib_floor())?)
    }
    fn balloon_features(&self, _balloon_device: &str) -> BalloonFeatures {
        // The domain XML's <memballoon freePageReporting=…> would tell; not read yet.
        BalloonFeatures::default()
    }
    fn set_stats_period(&self, _balloon_device: &str, secs: u32) -> Result<()> {
        Ok(self.domain.set_stats_period(secs)?)
    }
    /// libvirt's names: `available` is MemTotal, `unused` MemFree, `usable` MemAvailable;
    /// KiB, saturated to bytes (a huge count stays huge for the border to refuse).
    fn balloon_stats(&self, _balloon_device: &str) -> Result<BalloonStats> {
        Ok(balloon_stats_of_libvirt(&self.domain.dommemstat()?))
    }
    fn enable_migration_events(&self) -> Result<()> {
        Ok(())
    }
    fn migration_events(&self) -> Vec<MigrationStatus> {
        // A failed poll shows as nothing; the next sample's own calls find a lost domain.
        self.query_migrate().map(|m| vec![m.status]).unwrap_or_default()
    }
    fn dropped_events(&self) -> u64 {
        0
    }
    fn query_migrate(&self) -> Result<MigrationState> {
        let job = self.domain.domjobinfo(false)?;
        let mut was = super::sync::lock(&self.migrating);
        let (job, status) = if job.is_running() && job.is_migration() {
            *was = true;
            let s = job_status(&job.kind);
            (job, s)
        } else if *was {
            // The migration job ended since the last poll: how?
            *was = false;
            let done = self.domain.domjobinfo(true)?;
            let s = if done.is_migration() { job_status(&done.kind) } else { MigrationStatus::Failed };
            (done, s)
        } else {
            (job, MigrationStatus::None)
        };
        Ok(MigrationState { status, total_time_ms: job.elapsed_ms, sent_bytes: job.memory_processed, downtime_ms: job.downtime_ms })
    }
    fn can_migrate(&self) -> std::result::Result<(), &'static str> {
        Err("not for a libvirt domain: migrate it with `virsh migrate` (autoballoon sees the migration job and stops shrinking until it ends)")
    }
    fn set_max_bandwidth(&self, _bytes_per_sec: u64) -> Result<()> {
        Err(VirshError::Unsupported("migration bandwidth of a libvirt domain: use virsh migrate-setspeed").into())
    }
    fn migrate(&self, _uri: &str) -> Result<()> {
        Err(VirshError::Unsupported("autoballoon migrate of a libvirt domain: use virsh migrate").into())
    }
    fn run_state(&self) -> Result<String> {
        Ok(self.domain.domstate()?)
    }
    fn is_connected(&self) -> bool {
        !self.domain.is_closed()
    }
    fn close(&self) {
        self.domain.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libvirt_job_types_map_to_migration_statuses() {
        assert_eq!(job_status("None"), MigrationStatus::None);
        assert!(job_status("Unbounded").is_active());
        assert!(job_status("Bounded").is_active());
        assert_eq!(job_status("Completed"), MigrationStatus::Completed);
        assert_eq!(job_status("Failed"), MigrationStatus::Failed);
        assert_eq!(job_status("Cancelled"), MigrationStatus::Cancelled);
        assert!(job_status("Weird").is_active(), "unknown counts as active, like QMP's");
    }

    #[test]
    fn libvirt_and_qmp_stats_reach_the_border_unchanged_and_hostile_ones_are_refused() {
        let configured = Kib::from_gib_saturating(4);
        let text = "actual 4194304\nunused 3000000\navailable 4000000\nusable 3500000\ndisk_caches 1000\nlast_update 1700000000\n";
        let s = crate::libvirt::parse::parse_dommemstat(text).unwrap();
        let v = check_balloon_stats(&balloon_stats_of_libvirt(&s), configured).unwrap().unwrap();
        assert_eq!((v.total, v.free, v.available, v.cached), (Kib(4_000_000), Kib(3_000_000), Kib(3_500_000), Kib(1000)));
        assert_eq!(check_actual(s.actual.unwrap().to_bytes_saturating(), configured), Ok(configured));
        // libvirt passes the guest's numbers on in KiB: a count that overflows in bytes.
        let s = crate::libvirt::parse::parse_dommemstat(&format!("actual {}\nunused 1\navailable {}\nusable 1\n", u64::MAX, u64::MAX)).unwrap();
        assert!(check_balloon_stats(&balloon_stats_of_libvirt(&s), configured).is_err());
        assert!(check_actual(s.actual.unwrap().to_bytes_saturating(), configured).is_err());
        // QEMU's guest-stats: u64::MAX is "not reported" already; one less is refused.
        let gs = GuestStats { total_memory_bytes: Some(u64::MAX - 1), free_memory_bytes: Some(0), available_memory_bytes: Some(0), ..Default::default() };
        assert!(matches!(check_balloon_stats(&balloon_stats_of(&gs), configured), Err(Rejected::TotalAboveSize { .. })));
        let gs = GuestStats { total_memory_bytes: Some(1 << 30), free_memory_bytes: Some(1 << 29), available_memory_bytes: Some(3 << 30), ..Default::default() };
        assert!(matches!(check_balloon_stats(&balloon_stats_of(&gs), configured), Err(Rejected::AboveTotal { field: "MemAvailable", .. })));
        assert_eq!(check_balloon_stats(&balloon_stats_of(&GuestStats::default()), configured), Ok(None));
    }
}
