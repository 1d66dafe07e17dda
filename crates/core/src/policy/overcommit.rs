//! Memory being freed is not memory promised: the overcommitment the estimator counts.
//!
//! Why: a program that unmaps its memory or exits frees its pages first and gives back its
//! commitment after (`munmap` and `exit_mmap` unaccount once the range is torn down), and
//! so does a deleted tmpfs file for its `Shmem`. A sample taken in between shows the freed
//! memory twice: available (free again) and overcommitted (`Committed_AS` still counts it,
//! `AnonPages` no longer does). The estimator then wants the whole freed range back on top
//! of the guest's size: at the end of `make bench`'s 1 GiB fill the stock default grew a
//! guest from 1327 to 1910 MiB (`size 1327.0 MiB - available 506.5 MiB + overcommitted
//! 1025.1 MiB`), the headroom kept that need for ten minutes, and QEMU with
//! `x-populate-on-deflate` backed the 583 MiB it deflated for nothing (run/fp2).
//!
//! The rule, pure: the overcommitment counted rises at most by what the guest committed
//! since the last sample (`Committed_AS`'s growth); it falls as meminfo's does. A program
//! that allocates is counted in full at the sample that sees its commitment grow, as
//! before; one whose resident memory falls while its commitment stays (freeing, or
//! `MADV_DONTNEED` on its own memory) is not counted again until it touches it.

use super::MemView;
use crate::units::Kib;

/// The overcommitment counted so far, and the commitment it was counted at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overcommit {
    last: Option<(Kib, Kib)>,
}

/// One sample's overcommitment: what meminfo shows and what the estimator counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub counted: Kib,
    /// Shown by meminfo and not counted: memory being freed whose commitment is still
    /// accounted (`MemView::overcommitted` − `counted`).
    pub freeing: Kib,
}

impl Overcommit {
    /// Takes a sample's view; call once per fresh sample.
    pub fn observe(&mut self, mem: &MemView) -> Counted {
        let shown = mem.overcommitted();
        let counted = match self.last {
            Some((committed, counted)) => shown.min(counted.saturating_add(mem.committed_as.saturating_sub(committed))),
            None => shown,
        };
        self.last = Some((mem.committed_as, counted));
        Counted { counted, freeing: shown.saturating_sub(counted) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_units::mib;

    /// A view with `committed` MiB committed and `resident` MiB of anonymous memory.
    fn view(committed: u64, resident: u64) -> MemView {
        MemView { committed_as: mib(committed), anon_and_shmem: Some(mib(resident)), ..MemView::default() }
    }

    #[test]
    fn a_new_commitment_is_counted_at_once() {
        let mut o = Overcommit::default();
        assert_eq!(o.observe(&view(200, 150)).counted, mib(50), "the first view as meminfo shows it");
        assert_eq!(o.observe(&view(1224, 150)), Counted { counted: mib(1074), freeing: mib(0) });
        assert_eq!(o.observe(&view(1224, 650)).counted, mib(574), "touched: counted as resident instead");
    }

    #[test]
    fn memory_freed_before_its_commitment_goes_is_not_counted() {
        let mut o = Overcommit::default();
        o.observe(&view(200, 150));
        o.observe(&view(1224, 150));
        assert_eq!(o.observe(&view(1224, 1174)).counted, mib(50), "the fill touched all of it");
        // munmap: the pages are freed, the commitment still accounted.
        assert_eq!(o.observe(&view(1224, 600)), Counted { counted: mib(50), freeing: mib(574) });
        assert_eq!(o.observe(&view(200, 150)), Counted { counted: mib(50), freeing: mib(0) }, "and given back");
    }

    #[test]
    fn a_commitment_made_while_another_is_freed_is_counted() {
        let mut o = Overcommit::default();
        o.observe(&view(1224, 1174));
        // One program exits (574 MiB freed, still committed) as another commits 400 MiB.
        assert_eq!(o.observe(&view(1624, 600)), Counted { counted: mib(450), freeing: mib(574) });
    }

    #[test]
    fn it_falls_with_meminfo_and_rises_again_with_the_next_commitment() {
        let mut o = Overcommit::default();
        o.observe(&view(1000, 100));
        assert_eq!(o.observe(&view(1000, 900)).counted, mib(100));
        assert_eq!(o.observe(&view(1000, 300)).counted, mib(100), "freed, not counted again");
        assert_eq!(o.observe(&view(1300, 300)).counted, mib(400));
    }
}
