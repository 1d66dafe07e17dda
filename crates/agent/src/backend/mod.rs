//! The balloons the agent drives, behind one trait: where the guest's size comes from and
//! where its target goes. One file per balloon:
//!
//! - [`kernel`]: the patched kernel's balloon directory in sysfs (4 KiB pages); the agent runs
//!   the control loop and the kernel's allocator hook gives memory back by itself.
//! - [`xen`]: Xen's balloon in sysfs (KiB); the agent runs the control loop.
//! - [`host`]: a stock kernel: the host owns the balloon and sets it over QMP; the agent
//!   only reports.
//!
//! The loop itself is core's (`one_vm_step`); a backend is only a size to read and a
//! target to write.

mod files;
pub mod host;
pub mod kernel;
pub mod xen;

pub use files::{FileError, WriteError};

use crate::{BackendKind, RunArgs};
use autoballoon_core::control::Actuator;
use autoballoon_core::Kib;
use std::rc::Rc;

/// A balloon the agent reads the guest's size from and, unless the host owns it, writes
/// the target to. Reads and writes are one file each and return at once: the balloon
/// moves on its own.
pub trait Backend {
    /// The name in logs and in the hello to the host (`kernel`, `xen`, `host`).
    fn name(&self) -> &'static str;

    /// The guest's present and maximum size; both zero where the guest cannot know them
    /// (the host owns the balloon).
    fn size(&self) -> Result<(Kib, Kib), FileError>;

    /// The target in force, which the kernel's allocator hook raises by itself; `None`
    /// where the guest cannot read it or before anything was written.
    fn target_in_force(&self) -> Result<Option<Kib>, FileError>;

    /// Sets the guest's size.
    fn set_guest_size(&self, guest_size: Kib) -> Result<(), WriteError>;

    /// Free memory the balloon driver holds for free page hinting now (a migration runs),
    /// which the guest's meminfo leaves out; `None` where the driver does not say.
    fn held_for_hinting(&self) -> Result<Option<Kib>, FileError> {
        Ok(None)
    }

    /// Whether the agent runs the control loop on this balloon; if not, the host owns it:
    /// the agent reports and the host decides.
    fn agent_decides(&self) -> bool {
        true
    }
}

/// The backend `--backend` names, set up from the agent's arguments.
pub fn open(a: &RunArgs) -> Result<Rc<dyn Backend>, FileError> {
    Ok(match a.backend {
        BackendKind::Host => Rc::new(host::HostOwned),
        BackendKind::Kernel => Rc::new(kernel::KernelBalloon::new(&a.kernel_dir.clone().unwrap_or_else(|| kernel::locate(std::path::Path::new("/sys"), &a.proc_dir)))),
        BackendKind::Xen => Rc::new(xen::XenBalloon::open(a.xen_dir.clone(), a.max_kb.map(Kib))?),
    })
}

/// Less than this between the target and the size is no shrink under way (the balloon
/// rounds to its own units).
const STOP_SLACK: Kib = Kib(2 * 1024);

/// Why a shrink under way could not be stopped.
#[derive(Debug, thiserror::Error)]
pub enum StopError {
    #[error("cannot read the balloon: {0}")]
    Read(#[from] FileError),
    #[error("cannot stop the balloon: {0}")]
    Write(#[from] WriteError),
}

/// Stops a shrink still under way where the guest is now: a migration that must not see
/// the balloon shrink has started, and the balloon would otherwise go on inflating towards
/// the last target during it (memory the hypervisor may lose track of). Returns the target
/// it was heading to and the size it stopped at, if one was under way.
pub fn stop_shrinking(b: &dyn Backend) -> Result<Option<(Kib, Kib)>, StopError> {
    if !b.agent_decides() {
        return Ok(None);
    }
    let (size, _) = b.size()?;
    let Some(target) = b.target_in_force()?.filter(|t| t.saturating_add(STOP_SLACK) < size) else { return Ok(None) };
    b.set_guest_size(size)?;
    Ok(Some((target, size)))
}

/// A backend as the control loop's [`Actuator`].
pub struct Target(pub Rc<dyn Backend>);

impl Actuator for Target {
    type Error = WriteError;
    fn set_guest_size(&mut self, guest_size: Kib) -> Result<(), WriteError> {
        self.0.set_guest_size(guest_size)
    }
}

#[cfg(test)]
mod tests {
    use super::kernel::KernelBalloon;
    use super::*;
    use crate::testutil::ProcTree;

    #[test]
    fn a_shrink_under_way_is_stopped_where_the_guest_is() {
        let t = ProcTree::new("backend-stop", "linux-6.1-guest-idle");
        let b = KernelBalloon::new(&t.kernel);
        let mib = Kib::from_mib_saturating;
        let pages = |m: u64| mib(m).to_pages_floor().0;
        t.set_kernel(pages(1500), pages(2048));
        assert_eq!(stop_shrinking(&b).unwrap(), None, "no target written yet: nothing under way");
        b.set_guest_size(mib(300)).unwrap();
        assert_eq!(stop_shrinking(&b).unwrap(), Some((mib(300), mib(1500))), "inflating from 1500 towards 300");
        assert_eq!(b.target_in_force().unwrap(), Some(mib(1500)), "stopped at 1500");
        assert_eq!(stop_shrinking(&b).unwrap(), None, "and nothing under way any more");
        b.set_guest_size(mib(1800)).unwrap();
        assert_eq!(stop_shrinking(&b).unwrap(), None, "a growth is left alone");
        assert_eq!(stop_shrinking(&host::HostOwned).unwrap(), None, "the host's balloon is the host's to stop");
        std::fs::remove_file(t.kernel.join("current_pages")).unwrap();
        assert!(matches!(stop_shrinking(&b), Err(StopError::Read(_))));
    }
}
