//! What a VM's actor asks of the hypervisor that runs the VM, whichever it is: one trait,
//! [`Hypervisor`], in core's neutral types (sizes in [`Kib`] and [`Bytes`], the balloon
//! driver's statistics as [`BalloonStats`], a migration as [`MigrationPhase`] and
//! [`MigrationProgress`]), and one file per hypervisor: [`qmp`] (QEMU's QMP socket) and
//! [`libvirt`] (a libvirt domain through libvirt's library). Another hypervisor is one more file
//! here implementing [`Hypervisor`] and one more [`Endpoint`] variant, matched in
//! [`connect`] (with its client's error as one more [`HypervisorError`] variant).
//!
//! The numbers the guest makes (the balloon's size, the balloon driver's statistics) come
//! out of a hypervisor raw and reach the actor only through core's border ([`actual`],
//! [`balloon_view`]).

pub(crate) mod libvirt;
pub(crate) mod qmp;

use crate::config::{Endpoint, VmConfig};
use crate::libvirt::LibvirtError;
use autoballoon_core::migration::{self, MigrationPhase, MigrationProgress};
use autoballoon_core::policy::MemView;
use autoballoon_core::protocol::{check_actual, check_balloon_stats, BalloonStats, Rejected};
use autoballoon_core::{Bytes, Kib};
use autoballoon_qmp::QmpError;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A failed hypervisor operation.
#[derive(Debug, thiserror::Error)]
pub enum HypervisorError {
    #[error(transparent)]
    Qmp(#[from] QmpError),
    #[error("libvirt: {0}")]
    Libvirt(#[from] LibvirtError),
}

impl HypervisorError {
    /// The VM has no (active) balloon device.
    pub fn is_no_balloon(&self) -> bool {
        match self {
            HypervisorError::Qmp(e) => e.is_device_not_active(),
            HypervisorError::Libvirt(e) => e.is_no_balloon(),
        }
    }

    /// Nothing listens on the VM's QMP socket (refused, or no such file): its QEMU is gone.
    pub fn nobody_listens(&self) -> bool {
        match self {
            HypervisorError::Qmp(QmpError::Connect { source, .. }) => {
                matches!(source.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound)
            }
            _ => false,
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, HypervisorError>;

/// A number the guest made, through core's border: `Err` says why it is impossible.
pub(crate) type Checked<T> = std::result::Result<T, Rejected>;

/// The guest's present size (the balloon's `actual`) of a VM of `configured` size, checked.
pub(crate) fn actual(h: &dyn Hypervisor, configured: Kib) -> Result<Checked<Kib>> {
    Ok(check_actual(h.balloon()?, configured))
}

/// The guest's memory view from the balloon driver's statistics, checked: `Ok(None)` while
/// the guest has reported none, or none written after `written_after` (host epoch seconds,
/// [`BalloonStats::written_after`]).
pub(crate) fn balloon_view(h: &dyn Hypervisor, configured: Kib, written_after: u64) -> Result<Checked<Option<MemView>>> {
    let stats = h.balloon_stats()?;
    if !stats.written_after(written_after) {
        return Ok(Ok(None));
    }
    Ok(check_balloon_stats(&stats, configured))
}

/// A session with a VM's hypervisor, and the agent's socket for it: the configured one,
/// or the one the hypervisor declares (a libvirt domain's XML).
pub(crate) struct Connected {
    pub hypervisor: Arc<dyn Hypervisor>,
    pub agent: Option<PathBuf>,
}

/// Opens a session with `vm`'s hypervisor; every command of it has `timeout`.
pub(crate) fn connect(vm: &VmConfig, timeout: Duration) -> Result<Connected> {
    match vm.endpoint() {
        Endpoint::Qmp(path) => qmp::connect(path, &vm.balloon_device, vm.agent.as_deref(), timeout),
        Endpoint::Libvirt { uri, domain } => libvirt::connect(uri, domain, vm.agent.as_deref(), timeout),
    }
}

/// QEMU's own switches on the VM's balloon device; `None`: not known (libvirt, an old
/// QEMU, a device without the property).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BalloonFeatures {
    pub free_page_reporting: Option<bool>,
    pub free_page_hint: Option<bool>,
    pub deflate_on_oom: Option<bool>,
    /// The device backs again, on request, what free page reporting gave back
    /// (`x-populate-reported` with `x-populate-on-deflate` on: the project's QEMU patches,
    /// docs/qemu-versions.md); `None` where the device has no such property.
    pub backs_reported: Option<bool>,
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
        write!(f, "free-page-reporting {}, free-page-hint {}, deflate-on-oom {}", s(self.free_page_reporting), s(self.free_page_hint), s(self.deflate_on_oom))?;
        match self.backs_reported {
            Some(b) => write!(f, ", x-populate-reported {}", s(Some(b))),
            None => Ok(()),
        }
    }
}

/// One VM's hypervisor. Every call has a deadline (the QMP command timeout, or the libvirt
/// connection's).
pub(crate) trait Hypervisor: Send + Sync {
    /// For log lines: `QEMU 7.2.0`, `through libvirt`.
    fn describe(&self) -> String;
    /// What is known of the hypervisor (QEMU's version, the accelerator), for
    /// [`autoballoon_core::migration::MigrationShrink`]. Never fails: what cannot be read
    /// is unknown.
    fn facts(&self) -> migration::Hypervisor;
    /// The VM's configured memory: the balloon's ceiling.
    fn configured(&self) -> Result<Kib>;
    /// The guest's present size (the balloon's `actual`), raw: use [`actual`].
    fn balloon(&self) -> Result<Bytes>;
    /// Sets the guest's size (QMP `balloon`, libvirt's `virDomainSetMemoryFlags`).
    fn set_guest_size(&self, size: Kib) -> Result<()>;
    /// The hypervisor's own switches on the balloon device. Never fails: what cannot be
    /// read is unknown.
    fn balloon_features(&self) -> BalloonFeatures;
    /// Backs again `size` of what free page reporting gave back of the guest's memory
    /// (`BalloonFeatures::backs_reported`). A hypervisor that cannot does nothing.
    fn back_reported(&self, _size: Kib) -> Result<()> {
        Ok(())
    }
    /// Has the guest's balloon driver refresh its statistics every `secs`.
    fn set_stats_period(&self, secs: u32) -> Result<()>;
    /// The balloon driver's statistics, raw: use [`balloon_view`].
    fn balloon_stats(&self) -> Result<BalloonStats>;
    /// Asks for migration events, where there are any; `wake` is called (from another
    /// thread, and must not block) when one arrives, so the caller can look at once
    /// instead of at its next poll. A hypervisor without events never calls it.
    fn enable_migration_events(&self, wake: Box<dyn Fn() + Send + Sync>) -> Result<()>;
    /// Migration phases seen since the last call, without waiting (QMP: events; libvirt:
    /// the domain's job, polled).
    fn migration_events(&self) -> Vec<MigrationPhase>;
    /// Events dropped because too many came (QMP's bounded queue).
    fn dropped_events(&self) -> u64;
    /// The migration's phase now, and what the hypervisor reports of it.
    fn migration(&self) -> Result<MigrationProgress>;
    /// Whether `autoballoon migrate` can start a migration of this VM.
    fn can_migrate(&self) -> std::result::Result<(), &'static str>;
    fn set_max_bandwidth(&self, bytes_per_sec: u64) -> Result<()>;
    fn migrate(&self, uri: &str) -> Result<()>;
    /// The VM's run state (`running`, `postmigrate`, `paused`, ...).
    fn run_state(&self) -> Result<String>;
    fn is_connected(&self) -> bool;
    /// Cuts the session: a command waiting for an answer fails now.
    fn close(&self);
}
