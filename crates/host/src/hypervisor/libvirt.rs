//! A libvirt domain ([`crate::libvirt::Domain`], through libvirt's API:
//! `virDomainSetMemoryFlags`, `virDomainMemoryStats`, `virDomainGetJobStats`,
//! `virDomainMigrateToURI3` for `autoballoon migrate`). The `virt` crate wraps no domain
//! event callbacks, so the domain's job is polled once a tick, and a migration job that
//! ended is read back with `VIR_DOMAIN_JOB_STATS_COMPLETED`.

use super::{BalloonFeatures, Connected, Hypervisor, Result};
use crate::controller::lock;
use crate::libvirt::parse::{self, JobType, MemStats};
use crate::libvirt::{Domain, LibvirtError};
use autoballoon_core::migration::{self, MigrationPhase, MigrationProgress};
use autoballoon_core::protocol::{BalloonStats, MigrationOutcome};
use autoballoon_core::{Bytes, Kib};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) struct LibvirtHypervisor {
    domain: Domain,
    /// The accelerator the domain's XML asks for (its type), read at connect; QEMU's
    /// version comes later ([`crate::libvirt::probe_version`], in the background).
    accel: migration::Accel,
    /// The balloon device's switches in the domain's XML at connect.
    features: BalloonFeatures,
    /// A migration job was running at the last poll.
    migrating: Mutex<bool>,
    /// `autoballoon migrate`'s bandwidth cap, MiB/s, for the next migration.
    bandwidth_mib_s: Mutex<Option<u64>>,
    /// The end of the migration `autoballoon migrate` started, until read.
    started: Mutex<Option<Receiver<std::result::Result<(), LibvirtError>>>>,
}

/// How long [`Hypervisor::migrate`] waits for libvirt's migration job to appear (or the
/// migration to fail).
const MIGRATION_START: Duration = Duration::from_secs(5);

/// Opens the domain `domain` on `uri`, on a connection of its own; the agent's socket, if
/// none is configured, is the one the domain's XML declares. QEMU's version is not waited
/// for (libvirt may take tens of seconds to tell it): it is asked in the background, and
/// [`Hypervisor::facts`] has it once known.
pub(crate) fn connect(uri: &str, domain: &str, agent: Option<&Path>, timeout: Duration) -> Result<Connected> {
    let (d, _) = Domain::open(uri, domain, timeout)?;
    let xml = d.xml()?;
    let agent = match agent {
        Some(p) => Some(p.to_path_buf()),
        None => parse::agent_socket_in_xml(&xml, autoballoon_core::protocol::PORT_NAME).map(PathBuf::from),
    };
    crate::libvirt::probe_version(uri);
    let accel = parse::domain_accel_in_xml(&xml);
    let features = features_of(parse::memballoon_in_xml(&xml));
    Ok(Connected { hypervisor: Arc::new(LibvirtHypervisor { domain: d, accel, features, migrating: Mutex::new(false), bandwidth_mib_s: Mutex::new(None), started: Mutex::new(None) }), agent })
}

/// QEMU's version (`virConnectGetVersion`), if known yet, and the accelerator the domain
/// type asks for. libvirt has no QEMU package string (QMP's greeting has it; no QMP passes
/// through libvirt here): a backported dirty-sync fix is not known. KVM needs no version;
/// TCG without one is unknown (a migration holds the balloon until it is known).
fn facts_of(version: Option<(u32, u32, u32)>, accel: migration::Accel) -> migration::Hypervisor {
    migration::Hypervisor { qemu: version, accel, fix_backported: false }
}

/// The balloon device's switches as the domain's XML sets them: libvirt writes
/// `autodeflate` and `freePageReporting` only when on, and has no free page hinting.
fn features_of(b: Option<parse::Memballoon>) -> BalloonFeatures {
    match b {
        Some(b) if b.model.starts_with("virtio") => BalloonFeatures { free_page_reporting: Some(b.free_page_reporting), free_page_hint: None, deflate_on_oom: Some(b.autodeflate), backs_reported: None },
        _ => BalloonFeatures::default(),
    }
}

/// libvirt's type of a job as a migration phase.
fn job_phase(kind: JobType) -> MigrationPhase {
    match kind {
        JobType::None => MigrationPhase::Idle,
        JobType::Bounded | JobType::Unbounded => MigrationPhase::running("active"),
        JobType::Completed => MigrationPhase::Ended(MigrationOutcome::Completed),
        JobType::Failed => MigrationPhase::Ended(MigrationOutcome::Failed),
        JobType::Cancelled => MigrationPhase::Ended(MigrationOutcome::Cancelled),
        JobType::Other(_) => MigrationPhase::running("unknown"),
    }
}

/// libvirt's memory statistics as the border takes them.
fn balloon_stats_of(s: &MemStats) -> BalloonStats {
    let b = |k: Option<Kib>| k.map(Kib::to_bytes_saturating);
    BalloonStats { total: b(s.available), free: b(s.unused), available: b(s.usable), disk_caches: b(s.disk_caches), written_at_epoch_secs: s.last_update.filter(|t| *t != 0) }
}

impl Hypervisor for LibvirtHypervisor {
    fn describe(&self) -> String {
        match self.facts().qemu {
            Some((a, b, c)) => format!("QEMU {a}.{b}.{c} through libvirt"),
            None => "through libvirt; QEMU's version not known yet".into(),
        }
    }
    /// Read again at every call: the version comes when libvirt tells it.
    fn facts(&self) -> migration::Hypervisor {
        facts_of(crate::libvirt::known_version(self.domain.uri()), self.accel)
    }
    /// The domain's `<memory>` (its maximum): the balloon's ceiling.
    fn configured(&self) -> Result<Kib> {
        Ok(self.domain.info()?.max)
    }
    fn balloon(&self) -> Result<Bytes> {
        let s = self.domain.memory_stats()?;
        Ok(s.actual.unwrap_or_default().to_bytes_saturating())
    }
    fn set_guest_size(&self, size: Kib) -> Result<()> {
        Ok(self.domain.set_memory(size)?)
    }
    fn balloon_features(&self) -> BalloonFeatures {
        self.features
    }
    fn set_stats_period(&self, secs: u32) -> Result<()> {
        Ok(self.domain.set_stats_period(secs)?)
    }
    /// libvirt's names: `available` is MemTotal, `unused` MemFree, `usable` MemAvailable;
    /// KiB, saturated to bytes (a huge count stays huge for the border to refuse).
    fn balloon_stats(&self) -> Result<BalloonStats> {
        Ok(balloon_stats_of(&self.domain.memory_stats()?))
    }
    fn enable_migration_events(&self, _wake: Box<dyn Fn() + Send + Sync>) -> Result<()> {
        // The domain's job is polled at each tick (`migration_events`).
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
        let job = self.domain.job(false)?;
        let mut was = lock(&self.migrating);
        let (job, phase) = if job.is_running() && job.is_migration() {
            *was = true;
            let p = job_phase(job.kind);
            (job, p)
        } else if *was {
            // The migration job ended since the last poll: how?
            *was = false;
            let done = self.domain.job(true)?;
            let p = if done.is_migration() { job_phase(done.kind) } else { MigrationPhase::Ended(MigrationOutcome::Failed) };
            (done, p)
        } else {
            // A migration `migrate` started that ended before its job was ever seen.
            let mut started = lock(&self.started);
            let ended = started.as_ref().and_then(|rx| match rx.try_recv() {
                Ok(r) => Some(r.is_ok()),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(false),
            });
            match ended {
                Some(ok) => {
                    started.take();
                    (job, MigrationPhase::Ended(if ok { MigrationOutcome::Completed } else { MigrationOutcome::Failed }))
                }
                None => (job, MigrationPhase::Idle),
            }
        };
        Ok(MigrationProgress { phase, total_time: job.elapsed_ms.map(Duration::from_millis), sent: job.memory_processed.map(Bytes), downtime: job.downtime_ms.map(Duration::from_millis) })
    }
    /// Through libvirt's migration API: `uri` is the destination's libvirt URI.
    fn can_migrate(&self) -> std::result::Result<(), &'static str> {
        Ok(())
    }
    /// Kept for the next [`Hypervisor::migrate`] (libvirt's `bandwidth` parameter, MiB/s,
    /// rounded up).
    fn set_max_bandwidth(&self, bytes_per_sec: u64) -> Result<()> {
        *lock(&self.bandwidth_mib_s) = Some(bytes_per_sec.div_ceil(1 << 20).max(1));
        Ok(())
    }
    /// A live peer-to-peer migration to the libvirt at `uri` (e.g.
    /// `qemu+ssh://dst/system`), on a thread of its own; returns once libvirt's migration
    /// job runs (or within [`MIGRATION_START`]), or with the error of a migration that failed
    /// at once. Its progress and end are the domain's job, polled as for any migration.
    fn migrate(&self, uri: &str) -> Result<()> {
        let rx = self.domain.start_migration(uri, *lock(&self.bandwidth_mib_s));
        let until = Instant::now() + MIGRATION_START;
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Err(e)) => return Err(e.into()),
                Ok(Ok(())) => {
                    // Over before the first look: its end is read as the job's.
                    *lock(&self.migrating) = true;
                    return Ok(());
                }
                Err(RecvTimeoutError::Disconnected) => return Err(LibvirtError::Closed.into()),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let job = self.domain.job(false)?;
            if (job.is_running() && job.is_migration()) || Instant::now() >= until {
                *lock(&self.started) = Some(rx);
                return Ok(());
            }
        }
    }
    /// The domain's state; an inactive domain (shut off, crashed: after an outgoing
    /// migration, or stopped) is an error, so a session waiting for it to go ends.
    fn run_state(&self) -> Result<String> {
        match self.domain.info()?.state {
            s @ ("shut off" | "crashed") => Err(LibvirtError::NotRunning { state: s }.into()),
            s => Ok(s.to_string()),
        }
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
    use autoballoon_core::migration::Accel;
    use autoballoon_core::protocol::{check_actual, check_balloon_stats};

    #[test]
    fn libvirt_job_types_map_to_migration_phases() {
        assert_eq!(job_phase(JobType::None), MigrationPhase::Idle);
        assert_eq!(job_phase(JobType::Unbounded), MigrationPhase::running("active"));
        assert!(job_phase(JobType::Bounded).is_running());
        assert_eq!(job_phase(JobType::Completed), MigrationPhase::Ended(MigrationOutcome::Completed));
        assert_eq!(job_phase(JobType::Failed), MigrationPhase::Ended(MigrationOutcome::Failed));
        assert_eq!(job_phase(JobType::Cancelled), MigrationPhase::Ended(MigrationOutcome::Cancelled));
        assert!(job_phase(JobType::Other(9)).is_running(), "unknown counts as running, like QMP's");
    }

    #[test]
    fn libvirt_stats_reach_the_border_unchanged_and_hostile_ones_are_refused() {
        let configured = Kib::from_gib_saturating(4);
        // virDomainMemoryStats' tags: actual 6, unused 4, available 5, usable 8, disk_caches 10, last_update 9.
        let s = parse::mem_stats(&[(6, 4194304), (4, 3000000), (5, 4000000), (8, 3500000), (10, 1000), (9, 1700000000)]).unwrap();
        let v = check_balloon_stats(&balloon_stats_of(&s), configured).unwrap().unwrap();
        assert_eq!((v.total, v.free, v.available, v.cached), (Kib(4_000_000), Kib(3_000_000), Kib(3_500_000), Kib(1000)));
        assert_eq!(check_actual(s.actual.unwrap().to_bytes_saturating(), configured), Ok(configured));
        // libvirt passes the guest's numbers on in KiB: a count that overflows in bytes.
        let s = parse::mem_stats(&[(6, u64::MAX), (4, 1), (5, u64::MAX), (8, 1)]).unwrap();
        assert!(check_balloon_stats(&balloon_stats_of(&s), configured).is_err());
        assert!(check_actual(s.actual.unwrap().to_bytes_saturating(), configured).is_err());
    }

    #[test]
    fn facts_and_switches_come_from_the_version_and_the_xml() {
        let kvm = "<domain type='kvm' id='1'>\n  <devices>\n    <memballoon model='virtio' autodeflate='on' freePageReporting='on'>\n";
        let f = facts_of(Some((7, 2, 22)), parse::domain_accel_in_xml(kvm));
        assert_eq!((f.qemu, f.accel, f.fix_backported), (Some((7, 2, 22)), Accel::Kvm, false));
        // No version yet: KVM is still known (its rule needs none), TCG is not.
        let f = facts_of(None, parse::domain_accel_in_xml(kvm));
        assert_eq!((f.qemu, f.accel), (None, Accel::Kvm));
        assert_eq!(migration::MigrationShrink::of(&f), migration::MigrationShrink::AllowedKvm);
        let tcg = facts_of(None, parse::domain_accel_in_xml("<domain type='qemu' id='1'>"));
        assert_eq!(migration::MigrationShrink::of(&tcg), migration::MigrationShrink::HeldUnknown);
        let b = features_of(parse::memballoon_in_xml(kvm));
        assert_eq!(b, BalloonFeatures { free_page_reporting: Some(true), free_page_hint: None, deflate_on_oom: Some(true), backs_reported: None });
        assert_eq!(features_of(parse::memballoon_in_xml("<memballoon model='virtio'>")).missing(), ["free-page-reporting"]);
        assert_eq!(features_of(parse::memballoon_in_xml("<memballoon model='none'/>")), BalloonFeatures::default());
        assert_eq!(features_of(None), BalloonFeatures::default());
    }

    /// The whole trait against libvirt's test driver (in libvirt0: no daemon).
    #[test]
    fn the_test_drivers_domain_as_a_hypervisor() {
        let c = connect("test:///default", "test", None, Duration::from_secs(5)).unwrap();
        assert_eq!(c.agent, None, "the test domain has no agent channel");
        let h = c.hypervisor;
        assert_eq!(h.configured().unwrap(), Kib(8 * 1024 * 1024));
        // The version comes in the background.
        let t = Instant::now();
        while h.facts().qemu.is_none() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(h.describe(), "QEMU 0.0.2 through libvirt");
        assert_eq!(h.run_state().unwrap(), "running");
        assert_eq!(h.migration().unwrap().phase, MigrationPhase::Idle);
        let configured = h.configured().unwrap();
        assert!(super::super::actual(&*h, configured).unwrap().is_ok());
        assert!(super::super::balloon_view(&*h, configured, 0).unwrap().is_ok());
        h.set_guest_size(Kib(1024 * 1024)).unwrap();
        assert_eq!(h.balloon().unwrap(), Kib(1024 * 1024).to_bytes_saturating());
        assert!(h.set_guest_size(Kib(16 * 1024 * 1024)).is_err(), "libvirt refuses more than <memory>");
        // The test driver cannot migrate: the error comes back at once.
        assert!(h.can_migrate().is_ok());
        h.set_max_bandwidth(10 << 20).unwrap();
        let e = h.migrate("test:///default").unwrap_err();
        assert!(e.to_string().contains("virDomainMigrateToURI3"), "{e}");
        assert_eq!(h.migration().unwrap().phase, MigrationPhase::Idle);
        h.close();
        assert!(!h.is_connected());
        assert!(h.balloon().is_err());
    }

    /// A persistent domain that stops is `shut off`: an error, so a session waiting for the
    /// husk of a migrated domain to go ends (and reconnects when it runs again).
    #[test]
    fn a_stopped_domain_ends_the_wait_for_it_to_go() {
        // The test's own connection shares the driver's state with the hypervisor's.
        let own = virt::connect::Connect::open(Some("test:///default")).unwrap();
        let xml = "<domain type='test'><name>stops</name><memory unit='MiB'>256</memory><os><type>hvm</type></os></domain>";
        let dom = own.define_domain_xml(xml).unwrap();
        dom.create().unwrap();
        let h = connect("test:///default", "stops", None, Duration::from_secs(5)).unwrap().hypervisor;
        assert_eq!(h.run_state().unwrap(), "running");
        dom.destroy().unwrap();
        let e = h.run_state().unwrap_err();
        assert!(e.to_string().contains("the domain is shut off"), "{e}");
        dom.undefine().unwrap();
    }
}
