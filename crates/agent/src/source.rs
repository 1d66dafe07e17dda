//! The agent's [`Source`]: the guest's procfs (meminfo, vmstat, pressure/memory) read back
//! to back with the balloon [`Backend`]'s view of the guest's size, as one core [`Sample`].

use autoballoon_core::control::Source;
use autoballoon_core::policy::MemView;
use autoballoon_core::procfs::{parse_buddyinfo, parse_meminfo_only, parse_pressure, parse_vmstat_only, Pressure, Vmstat};
use autoballoon_core::sample::Sample;
use crate::backend::{Backend, FileError};
use crate::procfile::ProcFile;
use autoballoon_core::Pages;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

/// A sample could not be taken; each message names the file.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {why}")]
    Parse { path: PathBuf, why: String },
    /// A procfs file, or the balloon's size or target, could not be read as such.
    #[error(transparent)]
    File(#[from] FileError),
}

/// Reads the guest's procfs under `proc_dir` (each file kept open: [`ProcFile`]) and its
/// size from a [`Backend`].
pub struct ProcSource {
    meminfo: ProcFile,
    vmstat: ProcFile,
    pressure: ProcFile,
    buddyinfo: ProcFile,
    backend: Rc<dyn Backend>,
    start: Instant,
    migration: Migration,
    balloon: Option<Pages>,
}

/// What the host said of a live migration of this guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migration {
    None,
    /// One runs; the target must not go down until it ends.
    HoldShrinking,
    /// One runs, and the host's hypervisor keeps it correct while the balloon shrinks.
    ShrinkAllowed,
}

impl ProcSource {
    pub fn new(proc_dir: PathBuf, backend: Rc<dyn Backend>) -> ProcSource {
        let file = |name: &str| ProcFile::new(proc_dir.join(name));
        ProcSource { meminfo: file("meminfo"), vmstat: file("vmstat"), pressure: file("pressure/memory"), buddyinfo: file("buddyinfo"), backend, start: Instant::now(), migration: Migration::None, balloon: None }
    }

    /// The host's notices: a live migration runs (samples say so until it ends).
    pub fn set_migration(&mut self, m: Migration) {
        self.migration = m;
    }

    pub fn migrating(&self) -> bool {
        self.migration != Migration::None
    }

    /// Pages in the balloon at the last sample, as the guest counts them (/proc/vmstat
    /// `balloon_inflate − balloon_deflate`), if the kernel counts them.
    pub fn balloon(&self) -> Option<Pages> {
        self.balloon
    }

    /// `/proc/meminfo` alone, as a memory view: the commitment watch's quick read
    /// between samples ([`crate::watch`]).
    pub fn meminfo_view(&mut self) -> Result<MemView, SourceError> {
        let text = self.meminfo.read()?;
        parse_meminfo_view(self.meminfo.path(), &text)
    }
}

/// The memory view in the text of /proc/meminfo at `path`.
fn parse_meminfo_view(path: &Path, text: &str) -> Result<MemView, SourceError> {
    let m = parse_meminfo_only(text, MemView::MEMINFO_FIELDS).map_err(|e| parse_error(path, e))?;
    MemView::from_meminfo(&m).map_err(|e| parse_error(path, e))
}

fn parse_error(path: &Path, why: impl ToString) -> SourceError {
    SourceError::Parse { path: path.into(), why: why.to_string() }
}

impl Source for ProcSource {
    type Error = SourceError;

    fn sample(&mut self) -> Result<Sample, SourceError> {
        // Read back to back, parse afterwards: the size belongs to this memory view.
        let at = self.start.elapsed();
        let meminfo = self.meminfo.read()?;
        let (guest_size, max) = self.backend.size()?;
        let target_in_force = self.backend.target_in_force()?;
        let held_for_hinting = self.backend.held_for_hinting()?;
        let vmstat = self.vmstat.read()?;
        // None: a kernel without PSI.
        let pressure = self.pressure.read_optional()?;
        let buddyinfo = self.buddyinfo.read_optional()?;

        let mut mem = parse_meminfo_view(self.meminfo.path(), &meminfo)?;
        if let Some(text) = buddyinfo {
            mem = mem.with_buddyinfo(&parse_buddyinfo(&text).map_err(|e| parse_error(self.buddyinfo.path(), e))?);
        }
        if let Some(held) = held_for_hinting {
            mem = mem.with_hinted_saturating(held);
        }
        let vmstat = parse_vmstat_only(&vmstat, Vmstat::SAMPLED).map_err(|e| parse_error(self.vmstat.path(), e))?;
        let pressure: Option<Pressure> = match pressure {
            Some(text) => Some(parse_pressure(&text).map_err(|e| parse_error(self.pressure.path(), e))?),
            None => None,
        };
        self.balloon = vmstat.balloon_pages();
        Ok(Sample { at, guest_size, max, target_in_force, mem: Some(mem), migrating: self.migrating(), preparing_migration: false, shrink_while_migrating: self.migration == Migration::ShrinkAllowed, reports_free_pages: false, hints_free_pages: false, backs_reported: false, pressure, oom_kills: vmstat.oom_kills(), file_refaults: vmstat.file_refaults(), running_short: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoballoon_core::procfs::parse_meminfo;
    use autoballoon_core::Kib;
    use crate::backend::host::HostOwned;
    use crate::backend::kernel::KernelBalloon;
    use crate::testutil::{fixture, ProcTree};

    #[test]
    fn free_memory_in_hintings_blocks_comes_from_buddyinfo_where_there_is_one() {
        let t = ProcTree::new("source-buddyinfo", "linux-6.1-guest-ballooned");
        t.set_kernel(77824, 524288);
        let mut s = ProcSource::new(t.proc.clone(), Rc::new(KernelBalloon::new(&t.kernel)));
        let x = s.sample().unwrap().mem.unwrap();
        assert_eq!(x.free_in_hint_blocks, Some(Kib::from_mib_saturating(124)), "31 blocks of 4 MiB in DMA32");
        assert!(x.free_in_hint_blocks.unwrap() < x.free);
        std::fs::write(t.proc.join("buddyinfo"), "Node 0, zone DMA32 x\n").unwrap();
        let e = s.sample().unwrap_err().to_string();
        assert!(e.contains("buddyinfo"), "{e}");
        std::fs::remove_file(t.proc.join("buddyinfo")).unwrap();
        let mut s = ProcSource::new(t.proc.clone(), Rc::new(KernelBalloon::new(&t.kernel)));
        assert_eq!(s.sample().unwrap().mem.unwrap().free_in_hint_blocks, None, "a kernel without buddyinfo: unknown");
    }

    #[test]
    fn a_sample_is_the_three_files_and_the_kernel_size() {
        let t = ProcTree::new("source-kernel", "linux-6.1-guest-spike");
        t.set_kernel(65536, 524288);
        std::fs::write(t.proc.join("vmstat"), "nr_free_pages 5\noom_kill 3\nballoon_inflate 10\nballoon_deflate 4\n").unwrap();
        let mut s = ProcSource::new(t.proc.clone(), Rc::new(KernelBalloon::new(&t.kernel)));
        s.set_migration(Migration::HoldShrinking);
        let x = s.sample().unwrap();
        assert_eq!((x.guest_size, x.max, x.target_in_force), (Kib::from_mib_saturating(256), Kib::from_gib_saturating(2), None));
        std::fs::write(t.kernel.join("target_pages"), "131072\n").unwrap();
        assert_eq!(s.sample().unwrap().target_in_force, Some(Kib::from_mib_saturating(512)), "target_pages, once there");
        let want = MemView::from_meminfo(&parse_meminfo(&fixture("linux-6.1-guest-spike", "meminfo")).unwrap()).unwrap();
        assert_eq!(x.mem, Some(want));
        assert_eq!(x.pressure, Some(parse_pressure(&fixture("linux-6.1-guest-spike", "pressure-memory")).unwrap()));
        assert_eq!((x.oom_kills, x.migrating, s.balloon()), (Some(3), true, Some(Pages(6))));
    }

    #[test]
    fn free_pages_held_for_hinting_are_free_again_in_the_sample() {
        let t = ProcTree::new("source-hinted", "linux-6.1-guest-idle");
        t.set_kernel(393216, 524288);
        let mut s = ProcSource::new(t.proc.clone(), Rc::new(KernelBalloon::new(&t.kernel)));
        let plain = s.sample().unwrap().mem.unwrap();
        std::fs::write(t.kernel.join("hinted_pages"), "2560\n").unwrap();
        let hinted = s.sample().unwrap().mem.unwrap();
        let held = Kib::from_mib_saturating(10);
        assert_eq!((hinted.free, hinted.available), (plain.free.saturating_add(held), plain.available.saturating_add(held)));
        assert_eq!(hinted.committed_as, plain.committed_as);
    }

    #[test]
    fn no_psi_is_none_not_an_error() {
        let t = ProcTree::new("source-nopsi", "linux-6.12-guest-idle");
        std::fs::remove_file(t.proc.join("pressure/memory")).unwrap();
        let mut s = ProcSource::new(t.proc.clone(), Rc::new(HostOwned));
        let x = s.sample().unwrap();
        assert_eq!((x.pressure, x.guest_size, x.max), (None, Kib::ZERO, Kib::ZERO));
        assert!(x.mem.is_some());
    }

    #[test]
    fn junk_is_an_error_naming_its_file() {
        let t = ProcTree::new("source-junk", "linux-6.1-guest-idle");
        let mut s = ProcSource::new(t.proc.clone(), Rc::new(KernelBalloon::new(&t.kernel)));
        t.set_kernel(1 << 62, 524288);
        assert!(matches!(s.sample(), Err(SourceError::File(FileError::TooLarge { .. }))), "the balloon's own checks");
        t.set_kernel(65536, 524288);
        assert!(s.sample().is_ok());
        for (file, junk) in [("meminfo", "MemTotal: lots kB\n"), ("meminfo", "MemTotal: 5 kB\n"), ("vmstat", "oom_kill x\n"), ("pressure/memory", "some avg10=x\n")] {
            let good = std::fs::read_to_string(t.proc.join(file)).unwrap();
            std::fs::write(t.proc.join(file), junk).unwrap();
            let e = s.sample().unwrap_err();
            assert!(matches!(e, SourceError::Parse { .. }) && e.to_string().contains(file), "{file}: {e}");
            std::fs::write(t.proc.join(file), good).unwrap();
        }
        std::fs::remove_file(t.proc.join("meminfo")).unwrap();
        let mut s = ProcSource::new(t.proc.clone(), Rc::new(KernelBalloon::new(&t.kernel)));
        assert!(matches!(s.sample(), Err(SourceError::File(FileError::Read { .. }))), "no meminfo");
    }
}
