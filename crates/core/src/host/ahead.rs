//! Backing reported memory ahead of a spike. Free page reporting gives the guest's free
//! memory back to the host within seconds, and the guest faults it in again one page at a
//! time when a program allocates it: a spike that starts on free memory the guest kept is
//! as slow as one with free page reporting alone. Where the balloon device can back that
//! memory again on request (`Sample::backs_reported`), a guest whose programs committed
//! memory they have not touched yet is worth the request at once: the host backs it while
//! the program touches its first pages, off the guest's vCPUs (docs/spikes.md, *Backing
//! reported memory ahead of a spike*). Backing never changes what the guest reads, so a
//! request that comes to nothing costs host memory until the next report, no more.

use crate::sample::Sample;
use crate::units::Kib;

/// Smaller requests are not made: the commitment watch's own step.
pub const BACK_AHEAD_MIN: Kib = Kib::from_mib_saturating(32);

/// How much of the guest's reported memory to back now for sample `s`, if any: what its
/// programs committed and have not touched, at most what the guest has available, when
/// the guest runs short (its agent's trigger or commitment watch) on a device that backs
/// reported memory and reports free pages.
pub fn back_ahead(s: &Sample) -> Option<Kib> {
    if !(s.running_short && s.backs_reported && s.reports_free_pages) {
        return None;
    }
    let m = s.mem.as_ref()?;
    Some(m.overcommitted().min(m.available)).filter(|k| *k >= BACK_AHEAD_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MemView;
    use std::time::Duration;

    fn mib(m: u64) -> Kib {
        Kib::from_mib_saturating(m)
    }

    /// A guest of 2 GiB holding 1.3 GiB free after a spike, whose program has just mapped
    /// `committed` MiB more than it holds.
    fn spike(committed: u64) -> Sample {
        let mem = MemView { total: mib(2048), available: mib(1300), committed_as: mib(300 + committed), anon_and_shmem: Some(mib(300)), ..MemView::default() };
        Sample { at: Duration::from_secs(9), guest_size: mib(2048), max: mib(2048), mem: Some(mem), running_short: true, reports_free_pages: true, backs_reported: true, ..Sample::default() }
    }

    #[test]
    fn a_program_that_mapped_memory_gets_it_backed_up_to_what_the_guest_has() {
        assert_eq!(back_ahead(&spike(1200)), Some(mib(1200)));
        assert_eq!(back_ahead(&spike(4000)), Some(mib(1300)), "no more than the guest has available");
    }

    #[test]
    fn nothing_is_asked_without_the_device_the_trigger_or_a_commitment_worth_it() {
        assert_eq!(back_ahead(&Sample { backs_reported: false, ..spike(1200) }), None, "QEMU as it is");
        assert_eq!(back_ahead(&Sample { reports_free_pages: false, ..spike(1200) }), None, "nothing was reported");
        assert_eq!(back_ahead(&Sample { running_short: false, ..spike(1200) }), None, "a routine sample");
        assert_eq!(back_ahead(&spike(16)), None, "below the watch's step");
        assert_eq!(back_ahead(&Sample { mem: None, ..spike(1200) }), None, "no view of the guest");
    }
}
