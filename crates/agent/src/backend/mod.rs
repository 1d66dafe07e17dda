//! The balloons the agent drives, behind one trait: where the guest's size comes from and
//! where its target goes. One file per balloon:
//!
//! - [`kernel`]: the patched kernel's `/proc/sys/vm/balloon` (4 KiB pages); the agent runs
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
        BackendKind::Kernel => Rc::new(kernel::KernelBalloon::new(&a.kernel_dir)),
        BackendKind::Xen => Rc::new(xen::XenBalloon::open(a.xen_dir.clone(), a.max_kb.map(Kib))?),
    })
}

/// A backend as the control loop's [`Actuator`].
pub struct Target(pub Rc<dyn Backend>);

impl Actuator for Target {
    type Error = WriteError;
    fn set_guest_size(&mut self, guest_size: Kib) -> Result<(), WriteError> {
        self.0.set_guest_size(guest_size)
    }
}
