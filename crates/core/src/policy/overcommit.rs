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
//!
//! Where: once per VM where its samples enter the host loop ([`crate::host::HostLoop::admit`],
//! which [`crate::host::host_step`] calls), so every reader of the overcommitment (the
//! estimator, the rails' in-use floor, the pressure balancer's need, back-ahead) sees the
//! figure counted, in the daemon, the agent and the simulator alike.

use super::MemView;
use crate::units::Kib;

/// One VM's overcommitment counted so far, and the commitment it was counted at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overcommit {
    last: Option<(Kib, Kib)>,
}

impl Overcommit {
    /// `mem` with the memory being freed set aside ([`MemView::freeing`]), so that its
    /// [`MemView::overcommitted`] is the overcommitment counted. Takes the samples in
    /// order; the same sample again changes nothing.
    pub fn admit(&mut self, mem: MemView) -> MemView {
        let shown = mem.overcommitted_shown();
        let counted = match self.last {
            Some((committed, counted)) => shown.min(counted.saturating_add(mem.committed_as.saturating_sub(committed))),
            None => shown,
        };
        self.last = Some((mem.committed_as, counted));
        MemView { freeing: shown.saturating_sub(counted), ..mem }
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

    /// The overcommitment counted and the memory being freed, as `o` admits the view.
    fn counted(o: &mut Overcommit, v: MemView) -> (Kib, Kib) {
        let m = o.admit(v);
        (m.overcommitted(), m.freeing)
    }

    #[test]
    fn a_new_commitment_is_counted_at_once() {
        let mut o = Overcommit::default();
        assert_eq!(counted(&mut o, view(200, 150)).0, mib(50), "the first view as meminfo shows it");
        assert_eq!(counted(&mut o, view(1224, 150)), (mib(1074), mib(0)));
        assert_eq!(counted(&mut o, view(1224, 650)).0, mib(574), "touched: counted as resident instead");
    }

    #[test]
    fn memory_freed_before_its_commitment_goes_is_not_counted() {
        let mut o = Overcommit::default();
        o.admit(view(200, 150));
        o.admit(view(1224, 150));
        assert_eq!(counted(&mut o, view(1224, 1174)).0, mib(50), "the fill touched all of it");
        // munmap: the pages are freed, the commitment still accounted.
        assert_eq!(counted(&mut o, view(1224, 600)), (mib(50), mib(574)));
        assert_eq!(counted(&mut o, view(200, 150)), (mib(50), mib(0)), "and given back");
    }

    #[test]
    fn a_commitment_made_while_another_is_freed_is_counted() {
        let mut o = Overcommit::default();
        o.admit(view(1224, 1174));
        // One program exits (574 MiB freed, still committed) as another commits 400 MiB.
        assert_eq!(counted(&mut o, view(1624, 600)), (mib(450), mib(574)));
    }

    #[test]
    fn it_falls_with_meminfo_and_rises_again_with_the_next_commitment() {
        let mut o = Overcommit::default();
        o.admit(view(1000, 100));
        assert_eq!(counted(&mut o, view(1000, 900)).0, mib(100));
        assert_eq!(counted(&mut o, view(1000, 300)).0, mib(100), "freed, not counted again");
        assert_eq!(counted(&mut o, view(1300, 300)).0, mib(400));
    }

    #[test]
    fn the_same_sample_again_changes_nothing() {
        let mut o = Overcommit::default();
        o.admit(view(1224, 1174));
        let freeing = o.admit(view(1224, 600));
        assert_eq!(o.admit(view(1224, 600)), freeing, "a report read twice");
        assert_eq!(freeing.overcommitted_shown(), mib(624), "meminfo's own figure is still there");
    }
}
