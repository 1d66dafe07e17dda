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
use std::time::Duration;

/// Smaller requests are not made: the commitment watch's own step.
pub const BACK_AHEAD_MIN: Kib = Kib::from_mib_saturating(32);

/// Free memory free page reporting never gives back: it reports only while a zone's free
/// memory stays above its low watermark plus 32 blocks of 2 MiB (the kernel's
/// `PAGE_REPORTING_CAPACITY` at `pageblock_order`), so a guest's last 64 MiB of free
/// memory above the watermark are still backed and serve a program's first pages.
pub const NEVER_REPORTED: Kib = Kib::from_mib_saturating(64);

/// How much of the guest's reported memory to back now for sample `s`, if any: what its
/// programs committed and have not touched, at most what the guest has available beyond
/// [`NEVER_REPORTED`], when the guest runs short (its agent's trigger or commitment
/// watch) on a device that backs reported memory and reports free pages.
pub fn back_ahead(s: &Sample) -> Option<Kib> {
    if !(s.running_short && s.backs_reported && s.reports_free_pages) {
        return None;
    }
    let m = s.mem.as_ref()?;
    Some(m.overcommitted().min(m.available.saturating_sub(NEVER_REPORTED))).filter(|k| *k >= BACK_AHEAD_MIN)
}

/// One VM's requests: each sample asks once, and only for what was not asked already.
///
/// The device backs at least the bytes asked on each request, so a spike whose samples
/// each asked for the whole commitment had it backed several times over (a 1 GiB fill
/// asked 103, 103, 179, 278 and 359 MiB within 0.4 s, run/fp3). What was asked stays
/// outstanding until the programs touch it (their resident memory grows) or give it back
/// (it is never more than the commitment). Nothing is asked while the guest grows by more
/// than `band` (the size last commanded above the one measured): QEMU backs what it
/// deflates already (`x-populate-on-deflate`, which backing reported memory needs), and
/// the guest takes those pages first, freed at the head of its free lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackAhead {
    /// The time of the last sample seen.
    seen: Option<Duration>,
    /// Asked for and not yet touched or given back.
    outstanding: Kib,
    /// The programs' resident memory at the last sample (`MemView::resident`).
    resident: Option<Kib>,
}

impl BackAhead {
    /// What to ask for `s`, given the size last commanded. Pure.
    pub fn observe(&mut self, s: &Sample, commanded: Option<Kib>, band: Kib) -> Option<Kib> {
        if self.seen.is_some_and(|t| s.at <= t) {
            return None;
        }
        self.seen = Some(s.at);
        let m = s.mem.as_ref()?;
        let touched = self.resident.map_or(Kib::ZERO, |r| m.resident().saturating_sub(r));
        self.resident = Some(m.resident());
        self.outstanding = self.outstanding.saturating_sub(touched).min(m.overcommitted());
        if commanded.is_some_and(|c| c > s.guest_size.saturating_add(band)) {
            return None;
        }
        let ask = back_ahead(s)?.saturating_sub(self.outstanding);
        (ask >= BACK_AHEAD_MIN).then(|| {
            self.outstanding = self.outstanding.saturating_add(ask);
            ask
        })
    }
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
        assert_eq!(back_ahead(&spike(4000)), Some(mib(1300 - 64)), "no more than the guest has available beyond what reporting keeps");
    }

    #[test]
    fn nothing_is_asked_without_the_device_the_trigger_or_a_commitment_worth_it() {
        assert_eq!(back_ahead(&Sample { backs_reported: false, ..spike(1200) }), None, "QEMU as it is");
        assert_eq!(back_ahead(&Sample { reports_free_pages: false, ..spike(1200) }), None, "nothing was reported");
        assert_eq!(back_ahead(&Sample { running_short: false, ..spike(1200) }), None, "a routine sample");
        assert_eq!(back_ahead(&spike(16)), None, "below the watch's step");
        assert_eq!(back_ahead(&Sample { mem: None, ..spike(1200) }), None, "no view of the guest");
    }

    #[test]
    fn each_sample_asks_once_and_only_what_was_not_asked() {
        let mut b = BackAhead::default();
        let at = |ms: u64, committed: u64| Sample { at: Duration::from_millis(ms), ..spike(committed) };
        assert_eq!(b.observe(&at(0, 400), None, mib(16)), Some(mib(400)));
        assert_eq!(b.observe(&at(0, 400), None, mib(16)), None, "the same sample again");
        assert_eq!(b.observe(&at(100, 420), None, mib(16)), None, "20 MiB more: under the step");
        assert_eq!(b.observe(&at(200, 1000), None, mib(16)), Some(mib(600)), "the rest of a larger commitment");
        // The programs touched 700 MiB of it (resident, no longer overcommitted), then
        // committed 500 more: 300 + 500 wanted, 300 still outstanding.
        let mut touched = at(300, 800);
        if let Some(m) = &mut touched.mem {
            m.anon_and_shmem = Some(mib(1000));
            m.committed_as = mib(300 + 800 + 700);
        }
        assert_eq!(b.observe(&touched, None, mib(16)), Some(mib(500)));
    }

    #[test]
    fn nothing_is_asked_while_the_guest_grows() {
        let mut b = BackAhead::default();
        let s = Sample { guest_size: mib(300), ..spike(1200) };
        assert_eq!(b.observe(&s, Some(mib(1300)), mib(16)), None, "QEMU backs what it deflates");
        let grown = Sample { at: Duration::from_secs(10), guest_size: mib(1300), ..spike(1200) };
        assert_eq!(b.observe(&grown, Some(mib(1300)), mib(16)), Some(mib(1200)), "grown: asked again");
    }
}
