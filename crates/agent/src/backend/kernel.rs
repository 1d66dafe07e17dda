//! The patched kernel's balloon interface: `current_pages`, `max_pages` and
//! `target_pages`, in 4 KiB pages, in the balloon device's sysfs directory
//! (`/sys/bus/virtio/devices/virtioN/balloon/`, series v3) or in `/proc/sys/vm/balloon`
//! (v1 and v2 of the series). The allocator hook raises `target_pages` by itself when it
//! hands the balloon's memory to an allocation. `hinted_pages` (patch 23; absent before)
//! counts the free pages the driver holds for free page hinting during a migration.
//!
//! The balloon is kept in whole 2 MiB units: the target is rounded up so that `max_pages`
//! less the target is a multiple of [`UNIT_PAGES`] (the guest up to 2 MiB larger than
//! asked). For less than a unit the driver takes single 4 KiB pages, which it allocates
//! unmovable: with no unmovable piece free, each such allocation steals a movable
//! pageblock and converts it, leaving the rest of it in unmovable pieces that free page
//! reporting (2 MiB blocks) never reports, compaction cannot merge and the allocator hook
//! (whole units) cannot serve. A lean guest after a job sequence held 70-71 unmovable
//! pageblocks against 7 at boot, 41-51 MiB free in their pieces and backed by the host;
//! 60 with whole units (the kernel's own unmovable allocations make the rest; docs/
//! spikes.md, *Free pieces*).

use super::files::{optional, read_pages, write_number};
use super::{Backend, FileError, WriteError};
use autoballoon_core::{Kib, Pages};
use std::cell::Cell;
use std::path::{Path, PathBuf};

/// The driver's unit in 4 KiB pages: 2 MiB, the pageblock on x86.
pub const UNIT_PAGES: u64 = 512;

/// The target for a guest of `goal` pages out of `max`: the balloon (`max − target`) in
/// whole units, the guest rounded up. A goal at or above `max` is no balloon.
pub fn whole_units(goal: u64, max: u64) -> u64 {
    if goal >= max {
        return goal;
    }
    max - (max - goal) / UNIT_PAGES * UNIT_PAGES
}

/// Where the interface is: the `balloon/` directory of the first bound balloon device
/// (by name, `virtio0` before `virtio1`) under `sys`'s virtio_balloon driver, else
/// `proc`'s `sys/vm/balloon` (older versions of the series; what errors then name).
pub fn locate(sys: &Path, proc: &Path) -> PathBuf {
    let driver = sys.join("bus/virtio/drivers/virtio_balloon");
    let mut devices: Vec<PathBuf> = std::fs::read_dir(&driver)
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("virtio")).map(|e| e.path().join("balloon")).collect())
        .unwrap_or_default();
    devices.sort();
    devices.into_iter().find(|d| d.join("target_pages").exists()).unwrap_or_else(|| proc.join("sys/vm/balloon"))
}

pub struct KernelBalloon {
    dir: PathBuf,
    /// The guest size last asked for, in pages, and the target written for it: the loop
    /// reads its own command back, not the rounding.
    last: Cell<Option<(u64, u64)>>,
}

impl KernelBalloon {
    /// The interface in `dir`.
    pub fn new(dir: &Path) -> KernelBalloon {
        KernelBalloon { dir: dir.into(), last: Cell::new(None) }
    }
}

impl Backend for KernelBalloon {
    fn name(&self) -> &'static str {
        "kernel"
    }
    fn size(&self) -> Result<(Kib, Kib), FileError> {
        Ok((read_pages(&self.dir.join("current_pages"))?, read_pages(&self.dir.join("max_pages"))?))
    }
    /// What the loop asked for while the driver holds the target written for it; what the
    /// file says once anything else moved it (the allocator hook).
    fn target_in_force(&self) -> Result<Option<Kib>, FileError> {
        let t = optional(read_pages(&self.dir.join("target_pages")))?;
        Ok(match self.last.get() {
            Some((goal, written)) if t.map(|t| t.to_pages_floor().0) == Some(written) => Pages(goal).to_kib_checked().or(t),
            _ => t,
        })
    }
    fn set_guest_size(&self, guest_size: Kib) -> Result<(), WriteError> {
        // Whole pages, and never 0: a guest of no pages cannot run.
        let goal = guest_size.to_pages_floor().0.max(1);
        // Without max_pages (a junk file) the goal goes as it is.
        let written = read_pages(&self.dir.join("max_pages")).map_or(goal, |max| whole_units(goal, max.to_pages_floor().0));
        write_number(&self.dir.join("target_pages"), written)?;
        self.last.set(Some((goal, written)));
        Ok(())
    }
    fn held_for_hinting(&self) -> Result<Option<Kib>, FileError> {
        optional(read_pages(&self.dir.join("hinted_pages")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::ProcTree;

    #[test]
    fn the_device_sysfs_directory_is_found_before_the_old_sysctl() {
        let root = std::env::temp_dir().join(format!("ab-kernel-locate-{}", std::process::id()));
        let (sys, proc) = (root.join("sys"), root.join("proc"));
        assert_eq!(locate(&sys, &proc), proc.join("sys/vm/balloon"), "no device: the v2 path, for the error message");
        let driver = sys.join("bus/virtio/drivers/virtio_balloon");
        for dev in ["virtio3", "virtio1"] {
            std::fs::create_dir_all(driver.join(dev).join("balloon")).unwrap();
            std::fs::write(driver.join(dev).join("balloon/target_pages"), "1\n").unwrap();
        }
        std::fs::create_dir_all(driver.join("module")).unwrap();
        assert_eq!(locate(&sys, &proc), driver.join("virtio1/balloon"), "the first device by name");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_balloon_is_whole_units() {
        assert_eq!(whole_units(400_000, 510_116), 510_116 - 215 * 512, "110,116 pages of balloon: 215 units");
        assert_eq!(whole_units(510_116 - 1024, 510_116), 510_116 - 1024, "already whole");
        assert_eq!(whole_units(510_000, 510_116), 510_116, "less than a unit: no balloon");
        assert_eq!(whole_units(600_000, 510_116), 600_000, "above the maximum");
        assert_eq!(whole_units(1, 510_116), 510_116 - 996 * 512, "the smallest guest");
        let t = ProcTree::new("backend-kernel-units", "linux-6.1-guest-idle");
        t.set_kernel(510_116, 510_116);
        let b = KernelBalloon::new(&t.kernel);
        let target = t.kernel.join("target_pages");
        b.set_guest_size(Pages(400_000).to_kib_saturating()).unwrap();
        assert_eq!(t.read(&target), 400_036);
        assert_eq!(b.target_in_force().unwrap(), Some(Pages(400_000).to_kib_saturating()), "the loop reads its own command back");
        std::fs::write(&target, "400548\n").unwrap();
        assert_eq!(b.target_in_force().unwrap(), Some(Pages(400_548).to_kib_saturating()), "the hook raised it: the file's");
    }

    #[test]
    fn the_target_is_whole_pages_never_zero() {
        let t = ProcTree::new("backend-kernel", "linux-6.1-guest-idle");
        let b = KernelBalloon::new(&t.kernel);
        let target = t.kernel.join("target_pages");
        assert_eq!(b.target_in_force().unwrap(), None, "nothing written yet");
        b.set_guest_size(Kib::from_mib_saturating(300)).unwrap();
        assert_eq!(t.read(&target), 76800);
        assert_eq!(b.target_in_force().unwrap(), Some(Kib::from_mib_saturating(300)));
        b.set_guest_size(Kib(4097)).unwrap();
        assert_eq!(t.read(&target), 1024, "rounded down to whole pages");
        for tiny in [Kib(1), Kib::ZERO] {
            b.set_guest_size(tiny).unwrap();
            assert_eq!(t.read(&target), 1, "never zero pages");
        }
        b.set_guest_size(Kib::MAX).unwrap();
        assert_eq!(t.read(&target), u64::MAX / 4);
        let e = KernelBalloon::new(&t.root.join("nope")).set_guest_size(Kib(4)).unwrap_err();
        assert!(e.to_string().contains("nope/target_pages"), "{e}");
    }

    #[test]
    fn pages_held_for_hinting_are_read_where_the_kernel_has_them() {
        let t = ProcTree::new("backend-kernel-hinted", "linux-6.1-guest-idle");
        let b = KernelBalloon::new(&t.kernel);
        assert_eq!(b.held_for_hinting().unwrap(), None, "a series before patch 23");
        std::fs::write(t.kernel.join("hinted_pages"), "393216\n").unwrap();
        assert_eq!(b.held_for_hinting().unwrap(), Some(Kib::from_mib_saturating(1536)));
        std::fs::write(t.kernel.join("hinted_pages"), "1e9\n").unwrap();
        assert!(matches!(b.held_for_hinting(), Err(FileError::NotANumber { .. })));
    }

    #[test]
    fn hostile_sizes_are_errors_not_wraps() {
        let t = ProcTree::new("backend-kernel-junk", "linux-6.1-guest-idle");
        let b = KernelBalloon::new(&t.kernel);
        t.set_kernel(65536, 524288);
        assert_eq!(b.size().unwrap(), (Kib::from_mib_saturating(256), Kib::from_gib_saturating(2)));
        t.set_kernel(1 << 62, 524288);
        assert!(matches!(b.size(), Err(FileError::TooLarge { pages, .. }) if pages == 1 << 62));
        for junk in ["junk\n", "99999999999999999999999\n", "-1\n"] {
            std::fs::write(t.kernel.join("current_pages"), junk).unwrap();
            assert!(matches!(b.size(), Err(FileError::NotANumber { .. })), "{junk:?}");
        }
        t.set_kernel(65536, 524288);
        std::fs::remove_file(t.kernel.join("max_pages")).unwrap();
        let e = b.size().unwrap_err();
        assert!(e.is_missing() && e.to_string().contains("max_pages"), "{e}");
    }
}
