//! Xen's balloon in sysfs (`/sys/devices/system/xen_memory/xen_memory0`): the size in
//! `info/current_kb`, the target in `target_kb`, both KiB. Xen gives the guest no
//! maximum, so it is fixed when the agent starts (`--max-kb`, or the size then).

use super::files::{optional, read_number, write_number};
use super::{Backend, FileError, WriteError};
use autoballoon_core::Kib;
use std::path::PathBuf;

pub struct XenBalloon {
    dir: PathBuf,
    max: Kib,
}

impl XenBalloon {
    /// The balloon in `dir`; its maximum is `max`, or the guest's size now.
    pub fn open(dir: PathBuf, max: Option<Kib>) -> Result<XenBalloon, FileError> {
        let max = match max {
            Some(m) => m,
            None => Kib(read_number(&dir.join("info/current_kb"))?),
        };
        Ok(XenBalloon { dir, max })
    }
}

impl Backend for XenBalloon {
    fn name(&self) -> &'static str {
        "xen"
    }
    fn size(&self) -> Result<(Kib, Kib), FileError> {
        Ok((Kib(read_number(&self.dir.join("info/current_kb"))?), self.max))
    }
    fn target_in_force(&self) -> Result<Option<Kib>, FileError> {
        optional(read_number(&self.dir.join("target_kb")).map(Kib))
    }
    fn set_guest_size(&self, guest_size: Kib) -> Result<(), WriteError> {
        write_number(&self.dir.join("target_kb"), guest_size.max(Kib::ONE_PAGE).0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::ProcTree;

    #[test]
    fn the_size_is_kib_and_the_max_fixed_at_start() {
        let t = ProcTree::new("backend-xen", "linux-6.1-guest-idle");
        std::fs::write(t.xen.join("info/current_kb"), "1048576\n").unwrap();
        let b = XenBalloon::open(t.xen.clone(), None).unwrap();
        std::fs::write(t.xen.join("info/current_kb"), "524288\n").unwrap();
        assert_eq!(b.size().unwrap(), (Kib::from_mib_saturating(512), Kib::from_gib_saturating(1)));
        assert!(matches!(XenBalloon::open(t.xen.join("nope"), None), Err(FileError::Read { .. })));
        assert_eq!(XenBalloon::open(t.xen.join("nope"), Some(Kib(8))).unwrap().max, Kib(8));
    }

    #[test]
    fn the_target_is_kib_never_zero() {
        let t = ProcTree::new("backend-xen-target", "linux-6.1-guest-idle");
        let b = XenBalloon::open(t.xen.clone(), Some(Kib(8))).unwrap();
        b.set_guest_size(Kib(123_456)).unwrap();
        assert_eq!(std::fs::read_to_string(t.xen.join("target_kb")).unwrap(), "123456\n");
        assert_eq!(b.target_in_force().unwrap(), Some(Kib(123_456)));
        b.set_guest_size(Kib::ZERO).unwrap();
        assert_eq!(t.read(&t.xen.join("target_kb")), 4, "never zero");
    }
}
