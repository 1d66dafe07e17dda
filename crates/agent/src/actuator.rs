//! The agent's [`Actuator`]s: the patched kernel's `target_pages` and Xen's `target_kb`.
//! Each write returns at once; the balloon moves on its own.

use autoballoon_core::control::Actuator;
use autoballoon_core::Kib;
use std::path::{Path, PathBuf};

/// A target could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

fn write_u64(path: &Path, v: u64) -> Result<(), WriteError> {
    std::fs::write(path, format!("{v}\n")).map_err(|source| WriteError { path: path.into(), source })
}

/// The patched kernel's `target_pages`, in 4 KiB pages.
pub struct KernelTarget {
    path: PathBuf,
}

impl KernelTarget {
    /// The interface in `dir` (`/proc/sys/vm/balloon`).
    pub fn new(dir: &Path) -> KernelTarget {
        KernelTarget { path: dir.join("target_pages") }
    }
}

impl Actuator for KernelTarget {
    type Error = WriteError;
    fn set_guest_size(&mut self, guest_size: Kib) -> Result<(), WriteError> {
        // Whole pages, and never 0: a guest of no pages cannot run.
        write_u64(&self.path, guest_size.to_pages_floor().0.max(1))
    }
}

/// Xen's `target_kb`, in KiB.
pub struct XenTarget {
    path: PathBuf,
}

impl XenTarget {
    /// The balloon's sysfs directory (`/sys/devices/system/xen_memory/xen_memory0`).
    pub fn new(dir: &Path) -> XenTarget {
        XenTarget { path: dir.join("target_kb") }
    }
}

impl Actuator for XenTarget {
    type Error = WriteError;
    fn set_guest_size(&mut self, guest_size: Kib) -> Result<(), WriteError> {
        write_u64(&self.path, guest_size.max(Kib::ONE_PAGE).0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::ProcTree;

    #[test]
    fn kernel_target_is_whole_pages_never_zero() {
        let t = ProcTree::new("actuator-kernel", "linux-6.1-guest-idle");
        let mut a = KernelTarget::new(&t.kernel);
        let target = t.kernel.join("target_pages");
        a.set_guest_size(Kib::from_mib_saturating(300)).unwrap();
        assert_eq!(t.read(&target), 76800);
        a.set_guest_size(Kib(4097)).unwrap();
        assert_eq!(t.read(&target), 1024, "rounded down to whole pages");
        for tiny in [Kib(1), Kib::ZERO] {
            a.set_guest_size(tiny).unwrap();
            assert_eq!(t.read(&target), 1, "never zero pages");
        }
        a.set_guest_size(Kib::MAX).unwrap();
        assert_eq!(t.read(&target), u64::MAX / 4);
        let e = KernelTarget::new(&t.root.join("nope")).set_guest_size(Kib(4)).unwrap_err();
        assert!(e.to_string().contains("nope/target_pages"), "{e}");
    }

    #[test]
    fn xen_target_is_kib() {
        let t = ProcTree::new("actuator-xen", "linux-6.1-guest-idle");
        let mut a = XenTarget::new(&t.xen);
        a.set_guest_size(Kib(123_456)).unwrap();
        assert_eq!(std::fs::read_to_string(t.xen.join("target_kb")).unwrap(), "123456\n");
        a.set_guest_size(Kib::ZERO).unwrap();
        assert_eq!(t.read(&t.xen.join("target_kb")), 4, "never zero");
    }
}
