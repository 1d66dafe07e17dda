//! A libvirt domain ([`crate::libvirt::Domain`], through libvirt's API: `setmem`,
//! `dommemstat`, `domjobinfo`). libvirt sends no QMP events to us: the domain's job is
//! polled once a tick (`domjobinfo`), and a migration job that ended is read back with
//! `--completed`.

use super::{BalloonFeatures, Connected, Hypervisor, Result};
use crate::controller::lock;
use crate::libvirt::{Domain, VirshError};
use autoballoon_core::migration::{self, MigrationPhase, MigrationProgress};
use autoballoon_core::protocol::{BalloonStats, MigrationOutcome};
use autoballoon_core::{Bytes, Kib};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) struct LibvirtHypervisor {
    domain: Domain,
    /// A migration job was running at the last poll.
    migrating: Mutex<bool>,
}

/// Opens the domain `domain` on `uri`; the agent's socket, if none is configured, is the
/// one the domain's XML declares.
pub(crate) fn connect(uri: &str, domain: &str, agent: Option<&Path>, timeout: Duration) -> Result<Connected> {
    let (d, _) = Domain::open(uri, domain, timeout)?;
    let agent = match agent {
        Some(p) => Some(p.to_path_buf()),
        None => d.agent_socket(autoballoon_core::protocol::PORT_NAME)?.map(PathBuf::from),
    };
    Ok(Connected { hypervisor: Arc::new(LibvirtHypervisor { domain: d, migrating: Mutex::new(false) }), agent })
}

/// libvirt's `Job type` of a job as a migration phase.
fn job_phase(kind: &str) -> MigrationPhase {
    match kind {
        "None" => MigrationPhase::Idle,
        "Bounded" | "Unbounded" => MigrationPhase::running("active"),
        "Completed" => MigrationPhase::Ended(MigrationOutcome::Completed),
        "Failed" => MigrationPhase::Ended(MigrationOutcome::Failed),
        "Cancelled" => MigrationPhase::Ended(MigrationOutcome::Cancelled),
        other => MigrationPhase::running(other),
    }
}

/// libvirt's `dommemstat` as the border takes them.
fn balloon_stats_of(s: &crate::libvirt::parse::MemStats) -> BalloonStats {
    let b = |k: Option<Kib>| k.map(Kib::to_bytes_saturating);
    BalloonStats { total: b(s.available), free: b(s.unused), available: b(s.usable), disk_caches: b(s.disk_caches) }
}

impl Hypervisor for LibvirtHypervisor {
    fn describe(&self) -> String {
        "through libvirt".into()
    }
    /// Through libvirt's QMP passthrough; unknown (a migration holds the balloon) if
    /// libvirt refuses it.
    fn facts(&self) -> migration::Hypervisor {
        self.domain.hypervisor().unwrap_or_default()
    }
    fn configured(&self) -> Result<Kib> {
        Ok(self.domain.dominfo()?.max)
    }
    fn balloon(&self) -> Result<Bytes> {
        let s = self.domain.dommemstat()?;
        Ok(s.actual.unwrap_or_default().to_bytes_saturating())
    }
    fn set_guest_size(&self, size: Kib) -> Result<()> {
        Ok(self.domain.setmem(size)?)
    }
    fn balloon_features(&self) -> BalloonFeatures {
        // The domain XML's <memballoon freePageReporting=…> would tell; not read yet.
        BalloonFeatures::default()
    }
    fn set_stats_period(&self, secs: u32) -> Result<()> {
        Ok(self.domain.set_stats_period(secs)?)
    }
    /// libvirt's names: `available` is MemTotal, `unused` MemFree, `usable` MemAvailable;
    /// KiB, saturated to bytes (a huge count stays huge for the border to refuse).
    fn balloon_stats(&self) -> Result<BalloonStats> {
        Ok(balloon_stats_of(&self.domain.dommemstat()?))
    }
    fn enable_migration_events(&self) -> Result<()> {
        Ok(())
    }
    fn migration_events(&self) -> Vec<MigrationPhase> {
        // A failed poll shows as nothing; the next sample's own calls find a lost domain.
        self.migration().map(|m| vec![m.phase]).unwrap_or_default()
    }
    fn dropped_events(&self) -> u64 {
        0
    }
    fn migration(&self) -> Result<MigrationProgress> {
        let job = self.domain.domjobinfo(false)?;
        let mut was = lock(&self.migrating);
        let (job, phase) = if job.is_running() && job.is_migration() {
            *was = true;
            let p = job_phase(&job.kind);
            (job, p)
        } else if *was {
            // The migration job ended since the last poll: how?
            *was = false;
            let done = self.domain.domjobinfo(true)?;
            let p = if done.is_migration() { job_phase(&done.kind) } else { MigrationPhase::Ended(MigrationOutcome::Failed) };
            (done, p)
        } else {
            (job, MigrationPhase::Idle)
        };
        Ok(MigrationProgress { phase, total_time: job.elapsed_ms.map(Duration::from_millis), sent: job.memory_processed.map(Bytes), downtime: job.downtime_ms.map(Duration::from_millis) })
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
    use autoballoon_core::protocol::{check_actual, check_balloon_stats};

    #[test]
    fn libvirt_job_types_map_to_migration_phases() {
        assert_eq!(job_phase("None"), MigrationPhase::Idle);
        assert_eq!(job_phase("Unbounded"), MigrationPhase::running("active"));
        assert!(job_phase("Bounded").is_running());
        assert_eq!(job_phase("Completed"), MigrationPhase::Ended(MigrationOutcome::Completed));
        assert_eq!(job_phase("Failed"), MigrationPhase::Ended(MigrationOutcome::Failed));
        assert_eq!(job_phase("Cancelled"), MigrationPhase::Ended(MigrationOutcome::Cancelled));
        assert!(job_phase("Weird").is_running(), "unknown counts as running, like QMP's");
    }

    #[test]
    fn libvirt_stats_reach_the_border_unchanged_and_hostile_ones_are_refused() {
        let configured = Kib::from_gib_saturating(4);
        let text = "actual 4194304\nunused 3000000\navailable 4000000\nusable 3500000\ndisk_caches 1000\nlast_update 1700000000\n";
        let s = crate::libvirt::parse::parse_dommemstat(text).unwrap();
        let v = check_balloon_stats(&balloon_stats_of(&s), configured).unwrap().unwrap();
        assert_eq!((v.total, v.free, v.available, v.cached), (Kib(4_000_000), Kib(3_000_000), Kib(3_500_000), Kib(1000)));
        assert_eq!(check_actual(s.actual.unwrap().to_bytes_saturating(), configured), Ok(configured));
        // libvirt passes the guest's numbers on in KiB: a count that overflows in bytes.
        let s = crate::libvirt::parse::parse_dommemstat(&format!("actual {}\nunused 1\navailable {}\nusable 1\n", u64::MAX, u64::MAX)).unwrap();
        assert!(check_balloon_stats(&balloon_stats_of(&s), configured).is_err());
        assert!(check_actual(s.actual.unwrap().to_bytes_saturating(), configured).is_err());
    }
}
