//! Reclaim modes: how far below their present size the VMs are taken, whatever the
//! balancer. Pure, integer only, never panics.
//!
//! - [`Reclaim::Lean`] (the default): every VM toward its policy's estimate at once, as
//!   before modes existed. Nothing is wrapped.
//! - [`Reclaim::HostNeed`]: guests keep their free memory and page cache while the host's
//!   use (`MemTotal − MemAvailable`, in [`HostView::memory`]) is below `target` % of its
//!   memory. As the host's use (plus what growing VMs ask for, less what VMs shrinking for
//!   a migration give back) passes the target, the excess is reclaimed from the VMs above
//!   their estimates, each giving in proportion to what it can give divided by its shares
//!   (more shares, less taken: Proxmox's and ESX's sense of shares), never below its
//!   estimate. A VM whose migration is prepared or runs is always shrunk to its estimate:
//!   every MiB it keeps is a MiB the migration sends.
//!
//! [`HostNeed`] is a balancer around the configured one: it lifts the shrinking VMs' wants
//! to what host need leaves them and hands the claims on, so capacity, classes and shares
//! still apply after it.

use super::{Balancer, Claim, HostView, SharesConfig, VmId};
use crate::units::{Kib, Percent};
use serde::Deserialize;
use std::fmt;

/// The reclaim mode by its configuration name (`[controller] reclaim`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReclaimMode {
    /// `lean`: every VM toward its estimate at once (the default).
    #[default]
    Lean,
    /// `host-need`: guests keep their memory until the host's use passes its target.
    HostNeed,
}

impl ReclaimMode {
    /// Its configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReclaimMode::Lean => "lean",
            ReclaimMode::HostNeed => "host-need",
        }
    }
}

impl fmt::Display for ReclaimMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reclaim mode with its parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reclaim {
    /// Every VM toward its estimate at once.
    #[default]
    Lean,
    /// Guests keep their memory while the host uses less than `target` of its memory.
    HostNeed { target: Percent },
}

impl Reclaim {
    /// The host's target use, for a mode that has one (`host-need`).
    pub fn target(&self) -> Option<Percent> {
        match *self {
            Reclaim::HostNeed { target } => Some(target),
            Reclaim::Lean => None,
        }
    }
}

/// The host's memory as a reclaim mode sees it: from the host's /proc/meminfo.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostMemoryUse {
    /// `MemTotal`.
    pub total: Kib,
    /// `MemAvailable`.
    pub available: Kib,
}

impl HostMemoryUse {
    /// Picks `MemTotal` and `MemAvailable` out of a parsed /proc/meminfo.
    pub fn from_meminfo(m: &crate::procfs::Meminfo) -> Result<HostMemoryUse, crate::procfs::MissingField> {
        Ok(HostMemoryUse { total: m.kib("MemTotal")?, available: m.kib("MemAvailable")? })
    }
    /// The host's use: `MemTotal − MemAvailable` (0 if a broken report says more is
    /// available than there is).
    pub fn used(&self) -> Kib {
        self.total.saturating_sub(self.available)
    }
}

/// What [`HostNeed`] found at its last step, for the log line of each action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimStep {
    /// The host's memory was not known: every VM toward its estimate, as `lean`.
    Unknown,
    /// The host's use was below its target: guests keep their memory.
    Keep { used: Kib, total: Kib, target: Percent },
    /// The host's use (with what growing VMs ask for) was `excess` above its target;
    /// `reclaimed` of it was asked of the VMs above their estimates.
    Reclaim { used: Kib, total: Kib, target: Percent, excess: Kib, reclaimed: Kib },
}

impl ReclaimStep {
    /// Whether memory is reclaimed for the host at this step.
    pub fn reclaiming(&self) -> bool {
        !matches!(self, ReclaimStep::Keep { .. })
    }
    /// How far the host's use was above its target: 0 while guests keep their memory,
    /// unknown when the host's memory was.
    pub fn excess(&self) -> Option<Kib> {
        match *self {
            ReclaimStep::Unknown => None,
            ReclaimStep::Keep { .. } => Some(Kib::ZERO),
            ReclaimStep::Reclaim { excess, .. } => Some(excess),
        }
    }
}

impl fmt::Display for ReclaimStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReclaimStep::Unknown => f.write_str("host memory unknown: every VM toward its estimate"),
            ReclaimStep::Keep { used, total, target } => {
                write!(f, "host use {used} of {total} ({}) not above the target {target}: guests keep their memory", Percent::share_floor(used, total))
            }
            ReclaimStep::Reclaim { used, total, target, excess, reclaimed } => write!(
                f,
                "host use {used} of {total} ({}), with the growth asked for, {excess} above the target {target}: {reclaimed} reclaimed toward the estimates, by shares",
                Percent::share_floor(used, total)
            ),
        }
    }
}

/// The `host-need` mode around a balancer `B`.
#[derive(Debug, Clone)]
pub struct HostNeed<B> {
    inner: B,
    target: Percent,
    /// Each VM's shares (`SharesConfig::of`).
    shares: SharesConfig,
    last: Option<ReclaimStep>,
}

impl<B: Balancer> HostNeed<B> {
    /// `inner` with guests' memory kept until the host uses `target` of its memory.
    pub fn new(inner: B, target: Percent, shares: SharesConfig) -> HostNeed<B> {
        HostNeed { inner, target, shares, last: None }
    }

    /// What the last step found.
    pub fn last(&self) -> Option<ReclaimStep> {
        self.last
    }

    /// The claims with each shrinking VM's want lifted to what host need leaves it.
    pub fn lift(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Claim> {
        let Some(mem) = host.memory else {
            self.last = Some(ReclaimStep::Unknown);
            return claims.to_vec();
        };
        // A migration, prepared or running, takes every VM to its estimate.
        let migrating = |c: &Claim| c.sample.preparing_migration || c.sample.migrating;
        let growth = total(claims.iter().filter(|c| !migrating(c)).map(|c| c.want.saturating_sub(c.room.commanded)));
        let freed = total(claims.iter().filter(|c| migrating(c)).map(|c| c.room.commanded.saturating_sub(c.want)));
        let limit = self.target.of_floor(mem.total);
        let excess = mem.used().saturating_add(growth).saturating_sub(freed).saturating_sub(limit);
        // What each VM could give: from its present size down to its estimate (within its room).
        let slack: Vec<Kib> = claims.iter().map(|c| if migrating(c) { Kib::ZERO } else { c.room.commanded.saturating_sub(c.want.max(c.room.floor)) }).collect();
        let shares: Vec<u64> = claims.iter().map(|c| self.shares.of(c.vm).shares).collect();
        let cuts = share_out(excess, &slack, &shares);
        self.last = Some(if excess == Kib::ZERO {
            ReclaimStep::Keep { used: mem.used(), total: mem.total, target: self.target }
        } else {
            ReclaimStep::Reclaim { used: mem.used(), total: mem.total, target: self.target, excess, reclaimed: total(cuts.iter().copied()) }
        });
        claims
            .iter()
            .zip(&cuts)
            .map(|(c, cut)| {
                if migrating(c) || c.want >= c.room.commanded {
                    return c.clone();
                }
                // Kept at its present size, less its part of the host's need; never below its estimate.
                let want = c.room.clamp(c.room.commanded.saturating_sub(*cut).max(c.want));
                Claim { want, ..c.clone() }
            })
            .collect()
    }
}

impl<B: Balancer> Balancer for HostNeed<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn balance(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Kib> {
        let lifted = self.lift(host, claims);
        self.inner.balance(host, &lifted)
    }
    fn class(&self, vm: VmId) -> Option<&'static str> {
        self.inner.class(vm)
    }
    fn short(&self) -> Option<Kib> {
        self.inner.short()
    }
    fn reclaim_step(&self) -> Option<ReclaimStep> {
        self.last
    }
}

fn total(ks: impl IntoIterator<Item = Kib>) -> Kib {
    ks.into_iter().fold(Kib::ZERO, Kib::saturating_add)
}

/// `need` shared out over VMs that can give `slack[i]` each: zero-share VMs first, in
/// proportion to their slack; then the others in proportion to `slack / shares`, each
/// capped at its slack, what a capped VM could not give going to the rest. The cuts sum
/// to `min(need, Σ slack)`.
pub fn share_out(need: Kib, slack: &[Kib], shares: &[u64]) -> Vec<Kib> {
    let mut cut = vec![Kib::ZERO; slack.len()];
    let mut left = need.0 as u128;
    let share = |i: usize| shares.get(i).copied().unwrap_or(1000);
    // Zero shares: these give first, in proportion to what they can.
    let zero: Vec<usize> = (0..slack.len()).filter(|&i| share(i) == 0 && slack[i] > Kib::ZERO).collect();
    left -= proportional(left, &zero, slack, |i| slack[i].0 as u128, &mut cut);
    // The rest, weighted by slack / shares (scaled so small slacks keep their weight).
    let mut open: Vec<usize> = (0..slack.len()).filter(|&i| share(i) > 0 && slack[i] > Kib::ZERO).collect();
    let weight = |i: usize| (slack[i].0 as u128).saturating_mul(1 << 20) / share(i) as u128;
    while left > 0 && !open.is_empty() {
        let w: u128 = open.iter().map(|&i| weight(i)).fold(0u128, u128::saturating_add);
        // The VMs whose part would exceed what they can give: capped, the rest shared again.
        let capped: Vec<usize> = open.iter().copied().filter(|&i| w == 0 || mul_div_ceil(left, weight(i), w) >= slack[i].0 as u128).collect();
        if capped.is_empty() {
            proportional(left, &open, slack, weight, &mut cut);
            break;
        }
        for &i in &capped {
            let give = (slack[i].0 as u128).min(left);
            cut[i] = Kib(give as u64);
            left -= give;
        }
        open.retain(|i| !capped.contains(i));
    }
    cut
}

/// Gives `need` out over `vms` in proportion to `weight`, each at most its slack; returns
/// what was given (at most `need`).
fn proportional(need: u128, vms: &[usize], slack: &[Kib], weight: impl Fn(usize) -> u128, cut: &mut [Kib]) -> u128 {
    let w: u128 = vms.iter().map(|&i| weight(i)).fold(0u128, u128::saturating_add);
    let mut left = need;
    if w == 0 {
        return 0;
    }
    for &i in vms {
        let give = mul_div_ceil(need, weight(i), w).min(slack[i].0 as u128).min(left);
        cut[i] = Kib(give as u64);
        left -= give;
    }
    // Rounding left overs, from the first VMs that can still give.
    for &i in vms {
        let give = (slack[i].0 as u128 - cut[i].0 as u128).min(left);
        cut[i] = Kib((cut[i].0 as u128 + give) as u64);
        left -= give;
    }
    need - left
}

/// `⌈a · b / c⌉`, saturating (an overflowing product gives `u128::MAX`); `c` > 0.
fn mul_div_ceil(a: u128, b: u128, c: u128) -> u128 {
    a.checked_mul(b).map_or(u128::MAX, |p| p.div_ceil(c))
}

#[cfg(test)]
mod tests;
