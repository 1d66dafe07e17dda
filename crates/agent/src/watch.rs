//! The commitment watch: between samples, while the guest has little memory to spare, the
//! agent reads `/proc/meminfo` every [`WATCH_EVERY`] and samples at once when the guest's
//! margin fell by [`DROP`] since the last sample.
//!
//! Why: the pressure trigger ([`crate::trigger`]) wakes the agent only once tasks stall on
//! memory. A program that commits memory and touches it at its own pace (a slow ramp), or a
//! guest whose allocations the patched kernel's hook serves without a stall, stalls late or
//! never, and was seen at the next once-a-second sample: growth reactions of 0.55-0.91 s on
//! a 100 MiB/s ramp (docs/spikes.md; 0.08-0.11 s with the watch). The margin —
//! `MemAvailable` less what programs committed and have not touched yet
//! ([`MemView::overcommitted`]) — falls the moment such a program maps its memory, before
//! it touches any.
//!
//! The rule is pure; the agent's loop reads the file and acts on it.

use autoballoon_core::policy::MemView;
use autoballoon_core::Kib;
use std::time::Duration;

/// How often the margin is read between samples while watched.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);
/// The guest is watched while its margin at the last sample was below this: a guest with
/// more to spare absorbs what a program commits without growing.
pub const WATCH_BELOW: Kib = Kib::from_mib_saturating(512);
/// A fall of the margin since the last sample that is worth sampling at once.
pub const DROP: Kib = Kib::from_mib_saturating(32);

/// What the guest can still give its programs: `MemAvailable − overcommitted`.
pub fn margin(m: &MemView) -> Kib {
    m.available.saturating_sub(m.overcommitted())
}

/// The margin at the last sample, if the guest is watched after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Watch {
    last: Option<Kib>,
}

impl Watch {
    /// Takes the last sample's view (none: not watched).
    pub fn after_sample(&mut self, m: Option<&MemView>) {
        self.last = m.map(margin).filter(|&k| k < WATCH_BELOW);
    }

    pub fn watching(&self) -> bool {
        self.last.is_some()
    }

    /// Whether the margin `now` fell far enough since the last sample to sample at once.
    pub fn fell(&self, now: &MemView) -> bool {
        self.last.is_some_and(|last| margin(now).saturating_add(DROP) <= last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(available_mib: u64, committed_mib: u64, anon_mib: u64) -> MemView {
        let mib = Kib::from_mib_saturating;
        MemView { total: mib(2048), available: mib(available_mib), committed_as: mib(committed_mib), anon_and_shmem: Some(mib(anon_mib)), ..MemView::default() }
    }

    #[test]
    fn a_program_that_maps_its_memory_wakes_the_agent_before_it_touches_any() {
        let mut w = Watch::default();
        w.after_sample(Some(&view(80, 200, 190)));
        assert!(w.watching(), "70 MiB to spare: watched");
        assert!(!w.fell(&view(80, 200, 190)), "nothing changed");
        assert!(!w.fell(&view(70, 210, 200)), "10 MiB less: not worth a sample");
        assert!(w.fell(&view(80, 1400, 190)), "1.2 GiB mapped, none of it touched yet");
        assert!(w.fell(&view(30, 200, 240)), "50 MiB touched: a slow ramp");
    }

    #[test]
    fn a_guest_with_room_to_spare_is_not_watched() {
        let mut w = Watch::default();
        w.after_sample(Some(&view(1800, 200, 190)));
        assert!(!w.watching());
        assert!(!w.fell(&view(0, 2000, 190)), "not watched: the next sample sees it");
        w.after_sample(None);
        assert!(!w.watching(), "no view: not watched");
    }

    #[test]
    fn the_margin_leaves_out_what_programs_committed_and_have_not_touched() {
        assert_eq!(margin(&view(500, 800, 300)), Kib::ZERO);
        assert_eq!(margin(&view(500, 400, 300)), Kib::from_mib_saturating(400));
    }
}
