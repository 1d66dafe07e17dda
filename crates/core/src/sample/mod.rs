//! What a policy sees of one VM at one tick, and the pure rule that builds it from the
//! views a host has of the VM (its agent's report, QEMU's balloon size, guest-stats).

mod merge;

pub use merge::{merge, AgentView, Merged, SizeViews};

use crate::policy::MemView;
use crate::procfs::Pressure;
use crate::units::Kib;
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// One VM at one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Monotonic time of the sample, from an origin the driver chose.
    pub at: Duration,
    /// The guest's measured logical size: configured memory minus the balloon, at the time
    /// `mem` was read. (The size last *asked for* is the loop's, not the sample's.)
    pub guest_size: Kib,
    /// The guest's configured (maximum) size.
    pub max: Kib,
    /// The size the balloon is driven to now, where the backend can read it back (the
    /// patched kernel's `target_pages`, Xen's `target_kb`); `None` over QMP. Something
    /// besides the loop may move it (the patched kernel's allocator hook raises it by
    /// what it served from the balloon), so the loop takes it as its last command.
    pub target_in_force: Option<Kib>,
    /// The guest's own view of its memory, if a fresh one is at hand.
    pub mem: Option<MemView>,
    /// A live migration of this VM is running.
    pub migrating: bool,
    /// A migration was asked for and is being prepared (or runs on that request): the
    /// policy keeps its migration buffer instead of its buffer, and the rails skip the
    /// shrink step and the hold-off, so the VM shrinks to the estimate at once. Set by the
    /// driver (the host's VM actor on `autoballoon migrate`) until the migration ends.
    /// Shrinking still stops while `migrating` unless `shrink_while_migrating`: the flag
    /// never overrides that.
    pub preparing_migration: bool,
    /// The hypervisor keeps a running migration correct while the balloon shrinks
    /// ([`crate::migration::MigrationShrink`]): while `migrating`, the rails let the VM
    /// shrink, without the step limit and the hold-off (every tick waited is memory the
    /// migration may send). False (the default): no shrinking while `migrating`.
    pub shrink_while_migrating: bool,
    /// The VM's balloon device reports the guest's free pages to the host (virtio-balloon
    /// free page reporting): free memory the guest keeps goes back to the host within
    /// seconds, so keeping it costs the host little. The policy may keep a spike's memory
    /// longer then (`spike_hold_fpr_s`).
    pub reports_free_pages: bool,
    /// The VM's balloon device hints free pages to a migration (virtio-balloon free page
    /// hinting): while a migration runs, the guest's driver holds its free pages to hand
    /// them to QEMU and gives them back when the migration ends (or to the guest's own
    /// shrinker under pressure), so `mem` then understates what the guest has
    /// ([`Sample::hinting`]).
    pub hints_free_pages: bool,
    /// The VM's balloon device can back again, on request, the free memory that free page
    /// reporting gave back to the host (QEMU with the project's `x-populate-reported`,
    /// docs/spikes.md): a host asks for it when a program committed memory it has not
    /// touched yet ([`crate::host::back_ahead`]).
    pub backs_reported: bool,
    /// The guest's memory pressure (its /proc/pressure/memory), if reported.
    pub pressure: Option<Pressure>,
    /// OOM kills in the guest since boot, if reported.
    pub oom_kills: Option<u64>,
    /// File pages the guest read again after evicting them, since boot (/proc/vmstat
    /// `workingset_refault_file`), if reported: its page cache was too small for what it
    /// reads.
    pub file_refaults: Option<u64>,
    /// The guest is running short of memory now (its agent's pressure trigger fired): a
    /// host decides for the VM at once if the decision is a growth, instead of waiting
    /// out the VM's interval. Never makes a decision larger, only sooner.
    pub running_short: bool,
}

impl Sample {
    /// Every tick counts for a migration: one is being prepared, or one runs and shrinking
    /// during it is allowed. The rails skip the shrink step and the hold-off, the outlier
    /// filter lets the shrink through, and a host decides for the VM at once.
    pub fn migration_urgent(&self) -> bool {
        self.preparing_migration || (self.migrating && self.shrink_while_migrating)
    }

    /// Free page hinting holds the guest's free memory now: a migration runs and the
    /// device hints. `MemAvailable` then falls to about nothing though the guest needs no
    /// more than before (seen on QEMU 10: a sample at a migration's start read 0 MiB
    /// available in an idle guest of 1,511 MiB), so it is no reason to grow.
    pub fn hinting(&self) -> bool {
        self.migrating && self.hints_free_pages
    }

    /// The memory the guest cannot give without its OOM killer running, if its view is at
    /// hand: what it uses (`guest_size − available`) and what its programs committed and
    /// do not have yet (`overcommitted`). `MemAvailable` already leaves the guest's
    /// watermarks and the page cache it cannot drop, so a guest at this size has nothing
    /// left to reclaim but is not out of memory; below it, it is.
    pub fn in_use(&self) -> Option<Kib> {
        let m = self.mem.as_ref()?;
        Some(self.guest_size.saturating_sub(m.available).saturating_add(m.overcommitted()))
    }
}

/// Where a sample's memory view came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SampleSource {
    /// No usable view this tick.
    #[default]
    None,
    /// The guest agent's report (procfs inside the guest).
    Agent,
    /// virtio-balloon guest statistics read over QMP.
    GuestStats,
    /// The guest's own procfs, read by the agent itself.
    Procfs,
}

impl fmt::Display for SampleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SampleSource::None => "none",
            SampleSource::Agent => "agent",
            SampleSource::GuestStats => "guest-stats",
            SampleSource::Procfs => "procfs",
        })
    }
}
