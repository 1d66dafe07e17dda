//! Guard rails between a policy's wish and the actuator, in two halves. Pure.
//!
//! 1. [`GuardRails::room`]: before any balancer looks, the room a VM has this tick — the
//!    lowest and highest size the rails allow, measured from the size last asked for: the
//!    bounds, the memory the guest uses (no balancer takes it below that, whatever the
//!    host's need: that is what would run the guest's OOM killer), the step limits, the
//!    hold-off after growth, and no shrinking while a migration
//!    runs (unless the sample says the hypervisor allows it, [`crate::migration`]). A sample
//!    that prepares a migration, or whose running migration allows shrinking, skips the
//!    shrink step and the hold-off.
//! 2. [`GuardRails::check`]: after the balancer chose, the final check — the target is put
//!    back inside the room whatever the balancer returned, aligned, and dropped if it is no
//!    change or inside the dead band.

use crate::sample::Sample;
use crate::units::Kib;
use std::fmt;
use std::time::Duration;

/// The guest kernel's own memory, which [`crate::policy::MemView::demand`] does not count
/// (slab, page tables, kernel stacks: 40-60 MiB in a 2 GiB guest here), allowed for when a
/// hinted migration's guest says it runs short.
const KERNEL_UNCOUNTED: Kib = Kib::from_mib_saturating(64);

/// Free memory a hinted migration's guest that runs short may grow to beyond what it claims
/// (the policy's default buffer): room for the allocation under way, where the policy's
/// own target would count hinting's held pages as used.
const HINTED_ROOM: Kib = Kib::from_mib_saturating(64);

/// Limits applied to every target. Sizes are the guest's logical size, not the balloon's.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardRails {
    /// Never set the guest smaller than this.
    pub min: Kib,
    /// Never set the guest larger than this (the sample's `max` applies too).
    pub max: Kib,
    /// Largest shrink (balloon inflation) in one tick; zero means unlimited.
    pub max_shrink_per_tick: Kib,
    /// Largest growth in one tick; zero means unlimited (the safe default).
    pub max_grow_per_tick: Kib,
    /// Changes smaller than this are not worth an actuator call.
    pub dead_band: Kib,
    /// After the guest was grown, do not shrink it again for this long.
    pub hold_off: Duration,
    /// Targets are rounded up to a multiple of this.
    pub align: Kib,
}

impl Default for GuardRails {
    fn default() -> Self {
        GuardRails {
            min: Kib::ONE_PAGE,
            max: Kib::MAX,
            max_shrink_per_tick: Kib::ZERO,
            max_grow_per_tick: Kib::ZERO,
            dead_band: Kib::ZERO,
            hold_off: Duration::ZERO,
            align: Kib::ONE_PAGE,
        }
    }
}

/// What set one end of a VM's room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The configured minimum (floor) or the smaller of the configured and the VM's maximum (ceiling).
    Limit,
    /// The per-tick step limit.
    Step,
    /// A live migration runs (on a hypervisor where shrinking during one is not safe): the
    /// floor is the present size.
    Migration,
    /// The guest grew recently: the floor is the present size until the hold-off ends.
    HoldOff,
    /// The memory the guest uses now ([`Sample::in_use`]): less would run its OOM killer.
    InUse,
    /// Free page hinting holds the guest's free memory during a migration
    /// ([`Sample::hinting`]): the ceiling is the present size unless the guest runs short.
    Hinting,
}

/// How far the rails let one VM's size move this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// The size the rails measure from: the size last asked of the actuator, or the
    /// guest's measured size before the first (or after the loop forgot it).
    pub commanded: Kib,
    /// The smallest size allowed now.
    pub floor: Kib,
    /// The largest size allowed now; never below `floor`.
    pub ceiling: Kib,
    pub floor_by: Bound,
    pub ceiling_by: Bound,
}

impl Room {
    /// `want` put inside the room.
    pub fn clamp(&self, want: Kib) -> Kib {
        want.clamp(self.floor, self.ceiling)
    }
    /// A room that allows no change: for a VM that is not decided on this tick.
    pub fn fixed(commanded: Kib) -> Room {
        Room { commanded, floor: commanded, ceiling: commanded, floor_by: Bound::Limit, ceiling_by: Bound::Limit }
    }
}

/// A rail (or the balancer) that changed the policy's target on its way through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    RaisedToMin,
    /// Raised to the memory the guest uses ([`Bound::InUse`]).
    RaisedToInUse,
    LoweredToMax,
    ShrinkStepLimited,
    GrowStepLimited,
    /// Grown only as far as the guest claims ([`Bound::Hinting`]): free page hinting holds
    /// its free memory during the migration.
    GrowHintedLimited,
    /// The balancer gave less than the policy wanted: the host is short.
    HostShort,
    /// The balancer took more than the policy offered, for another VM.
    Reclaimed,
}

/// Why the guard rails kept the present target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The target equals the present one.
    Unchanged,
    /// The change is inside the dead band.
    DeadBand,
    /// A live migration runs: shrinking now would lose track of pages already sent.
    Migration,
    /// The guest grew recently; shrinking waits until the hold-off has passed.
    HoldOff,
    /// Free page hinting holds the guest's free memory during a migration; it grows only
    /// if it runs short.
    Hinting,
}

/// What the rails let through.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Set { target: Kib, limits: Vec<Limit> },
    Hold(Hold),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::RaisedToMin => "raised to the minimum",
            Limit::RaisedToInUse => "raised to the memory the guest uses (less would run its OOM killer)",
            Limit::LoweredToMax => "lowered to the maximum",
            Limit::ShrinkStepLimited => "shrink limited to one step",
            Limit::GrowStepLimited => "growth limited to one step",
            Limit::GrowHintedLimited => "growth limited to what the guest claims: free page hinting holds its free memory during the migration",
            Limit::HostShort => "host short: less than wanted",
            Limit::Reclaimed => "reclaimed for another VM",
        })
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hold::Unchanged => "unchanged",
            Hold::DeadBand => "inside the dead band",
            Hold::Migration => "migration running: no shrinking",
            Hold::HoldOff => "grew recently: hold-off before shrinking",
            Hold::Hinting => "free page hinting holds the guest's free memory during the migration: no growth unless it runs short",
        })
    }
}

/// The rails' memory between ticks: when the guest last grew, and what it used beyond
/// what it claims at its last sample outside a migration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RailState {
    pub last_grow_at: Option<Duration>,
    /// Size less `MemAvailable` less [`crate::policy::MemView::claimed`], seen outside a
    /// migration: the guest kernel's own memory, its reserves and what `MemTotal` leaves
    /// out (about 180 MiB in the test bed's 2 GiB guests, whose files live in their
    /// initramfs). During a hinted migration `MemAvailable` says nothing, so this is what
    /// the hinting hold allows for beside what the guest claims.
    pub uncounted: Option<Kib>,
}

impl GuardRails {
    /// The room of a VM whose present size is `commanded` (the last target set, or the
    /// guest's size if none was set yet), at the time and migration state of `s`.
    pub fn room(&self, state: &RailState, s: &Sample, commanded: Kib) -> Room {
        let (mut ceiling, mut ceiling_by) = (self.max.min(s.max), Bound::Limit);
        if self.max_grow_per_tick > Kib::ZERO {
            let step = commanded.saturating_add(self.max_grow_per_tick);
            if step < ceiling {
                (ceiling, ceiling_by) = (step, Bound::Step);
            }
        }
        // While free page hinting holds the guest's free pages, MemAvailable is about
        // nothing and every sample would ask for growth the guest does not need; a guest
        // that does need memory stalls (its pressure trigger) and hinting gives its pages
        // back to it under pressure, so only a guest running short grows. Not one whose
        // programs and page cache hold and were promised less than it has (its kernel's
        // own memory allowed for, as the guest showed it before the migration): its stall
        // is the balloon's shed at the migration's start meeting hinting's held pages, and
        // growing it then gave back, a fifth of a second later, 860-1360 MiB the migration
        // then sent (docs/migration.md). And a guest that runs short grows only as far as
        // what it claims, its kernel's memory and [`HINTED_ROOM`], not to the policy's
        // target, which counts the held pages as used.
        // With a fixed 64 MiB for the kernel, a 1.2 GiB spike into a 1.39 GiB guest whose
        // own memory took the other 180 MiB was held for its whole allocation and went down
        // the OOM path until deflate-on-oom had given back 3-81 MiB (docs/migration.md).
        if s.hinting() && commanded < ceiling {
            let uncounted = state.uncounted.unwrap_or(Kib::ZERO).max(KERNEL_UNCOUNTED);
            let claimed = s.mem.as_ref().map(|m| m.claimed().saturating_add(uncounted));
            let cap = match claimed {
                _ if !s.running_short => commanded,
                None => ceiling,
                Some(c) if c < commanded => commanded,
                Some(c) => c.saturating_add(HINTED_ROOM),
            };
            if cap < ceiling {
                (ceiling, ceiling_by) = (cap, Bound::Hinting);
            }
        }
        let (mut floor, mut floor_by) = (self.min, Bound::Limit);
        // What the guest uses now: a balancer under host pressure, another VM's need or a
        // fixed request may take the guest down to it, never below; the host swaps instead.
        // It only stops a shrink: growth stays the policy's and the balancer's to decide.
        if let Some(in_use) = s.in_use().map(|u| u.min(commanded)) {
            if in_use > floor {
                (floor, floor_by) = (in_use, Bound::InUse);
            }
        }
        // Preparing a migration, or one running where shrinking is allowed: every tick of
        // the step limit and the hold-off is memory the migration would send, so both are
        // skipped (the floor holds, and so does a running migration that allows no shrink).
        let urgent = s.migration_urgent();
        if self.max_shrink_per_tick > Kib::ZERO && !urgent {
            let step = commanded.saturating_sub(self.max_shrink_per_tick);
            if step > floor {
                (floor, floor_by) = (step, Bound::Step);
            }
        }
        let holding_off = !urgent && state.last_grow_at.is_some_and(|g| s.at < g.saturating_add(self.hold_off));
        let no_shrink = if s.migrating && !s.shrink_while_migrating { Some(Bound::Migration) } else { holding_off.then_some(Bound::HoldOff) };
        if let Some(by) = no_shrink {
            if commanded > floor {
                (floor, floor_by) = (commanded, by);
            }
        }
        // The ceiling wins: a size above the VM's maximum cannot be set, whatever holds.
        if floor > ceiling {
            floor = ceiling;
        }
        Room { commanded, floor, ceiling, floor_by, ceiling_by }
    }

    /// The final check of `target` (what the balancer granted for a policy that wanted
    /// `want`) against `room`: back inside the room, aligned, and held if it changes nothing
    /// or too little. Records growth for the hold-off and, outside migrations, the guest's
    /// own memory for the hinting hold ([`RailState::uncounted`]).
    pub fn check(&self, state: &mut RailState, s: &Sample, room: &Room, want: Kib, target: Kib) -> Verdict {
        if let Some(m) = s.mem.as_ref().filter(|_| !s.migrating && !s.preparing_migration) {
            state.uncounted = Some(s.guest_size.saturating_sub(m.available).saturating_sub(m.claimed()));
        }
        let mut t = room.clamp(target).align_up_saturating(self.align);
        if t > room.ceiling {
            t = room.ceiling;
        }
        let limits = limits(room, want, t);
        if t == room.commanded {
            return Verdict::Hold(if want < t && t == room.floor {
                match room.floor_by {
                    Bound::Migration => Hold::Migration,
                    Bound::HoldOff => Hold::HoldOff,
                    _ => Hold::Unchanged,
                }
            } else if want > t && room.ceiling_by == Bound::Hinting {
                Hold::Hinting
            } else {
                Hold::Unchanged
            });
        }
        let to_bound = limits.contains(&Limit::RaisedToMin) || limits.contains(&Limit::LoweredToMax);
        if t.abs_diff(room.commanded) < self.dead_band && !to_bound {
            return Verdict::Hold(Hold::DeadBand);
        }
        if t > room.commanded {
            state.last_grow_at = Some(s.at);
        }
        Verdict::Set { target: t, limits }
    }
}

/// Which rails (or the balancer) moved the target away from what the policy wanted.
fn limits(room: &Room, want: Kib, t: Kib) -> Vec<Limit> {
    let mut out = Vec::new();
    if want < room.floor && t == room.floor {
        match room.floor_by {
            Bound::Limit => out.push(Limit::RaisedToMin),
            Bound::Step => out.push(Limit::ShrinkStepLimited),
            Bound::InUse => out.push(Limit::RaisedToInUse),
            Bound::Migration | Bound::HoldOff | Bound::Hinting => {}
        }
    } else if want > room.ceiling && t == room.ceiling {
        match room.ceiling_by {
            Bound::Limit => out.push(Limit::LoweredToMax),
            Bound::Hinting => out.push(Limit::GrowHintedLimited),
            _ => out.push(Limit::GrowStepLimited),
        }
    } else if t < room.clamp(want) && t < want {
        out.push(if t < room.commanded { Limit::Reclaimed } else { Limit::HostShort });
    }
    out
}

#[cfg(test)]
mod tests;
