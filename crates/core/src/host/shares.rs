//! ESX-style proportional shares with an idle-memory tax.
//!
//! Each VM has `shares` S (default 1000), a reservation `min` and a limit `max`. Its
//! shares-per-page ratio is `ρ = S / (P · (f + k·(1 − f)))`, `k = 1/(1 − τ)`, with P its
//! size, f its active (used) fraction — here `(size − MemAvailable) / size` — and τ the
//! idle-memory tax rate (default 0.75, the ESX paper's default: an idle page costs
//! k = 4 active ones). Sizes are in KiB rather than pages, which scales every ρ alike.
//! When the wants (each within `[max(min, floor), min(max, ceiling)]`) do not fit the
//! host's capacity, memory is reclaimed from the VM with the lowest ρ first — a VM's ρ
//! rises as it shrinks — until the sum fits: all reclaimed VMs end at one common ρ (the
//! limit of reclaiming a page at a time). Zero-share VMs go first. Never below
//! `max(min, room floor)`. The [`RateRail`] limits how fast any VM shrinks; it yields
//! when the capacity cannot be met otherwise.

use super::fit::{fit, kib_f64, sum128};
use super::rate::{RateRail, Rates};
use super::{Balancer, Claim, HostView, VmId};
use crate::units::Kib;
use std::collections::BTreeMap;

/// One VM's shares, reservation and limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmShares {
    /// Relative entitlement (default 1000).
    pub shares: u64,
    /// Never reclaimed below this (default 0).
    pub min: Kib,
    /// Never given more than this (default unlimited).
    pub max: Kib,
}

impl Default for VmShares {
    fn default() -> Self {
        VmShares { shares: 1000, min: Kib::ZERO, max: Kib::MAX }
    }
}

/// The shares balancer's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SharesConfig {
    /// Per-VM settings; VMs not named get `default`.
    pub vms: BTreeMap<VmId, VmShares>,
    /// Settings of VMs not in `vms`.
    pub default: VmShares,
    /// The idle-memory tax rate τ in [0, 0.99] (default 0.75).
    pub tax: f64,
    /// The adaptive inflation-rate limit.
    pub rate: RateRail,
}

impl Default for SharesConfig {
    fn default() -> Self {
        SharesConfig { vms: BTreeMap::new(), default: VmShares::default(), tax: 0.75, rate: RateRail::default() }
    }
}

impl SharesConfig {
    /// `vm`'s settings.
    pub fn of(&self, vm: VmId) -> VmShares {
        self.vms.get(&vm).copied().unwrap_or(self.default)
    }
    /// `k = 1/(1 − τ)`, τ made sane (NaN → 0.75, clamped to [0, 0.99]).
    pub fn k(&self) -> f64 {
        let tau = if self.tax.is_nan() { 0.75 } else { self.tax.clamp(0.0, 0.99) };
        1.0 / (1.0 - tau)
    }
}

/// ρ of a VM of `size` KiB with `active` KiB in use: `S / (min(P, A) + k·(P − A)⁺)`
/// (= `S / (P·(f + k(1 − f)))` with `f = A/P`); infinite for a zero size.
pub fn shares_per_kib(shares: u64, size: Kib, active: Kib, k: f64) -> f64 {
    let (p, a) = (size.0 as f64, active.0 as f64);
    shares as f64 / (p.min(a) + k * (p - a).max(0.0))
}

/// The size at which a VM with `shares` and `active` KiB has ratio `rho` (the inverse of
/// [`shares_per_kib`] in the size).
fn size_at(shares: u64, active: f64, k: f64, rho: f64) -> f64 {
    let cost = shares as f64 / rho;
    if cost <= active {
        cost
    } else {
        active + (cost - active) / k
    }
}

/// One VM inside a step.
#[derive(Clone, Copy)]
struct Vm {
    shares: u64,
    active: f64,
    lo: Kib,
    hi: Kib,
}

/// ESX-style proportional-share balancer with the idle-memory tax and the rate rail.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shares {
    cfg: SharesConfig,
    rates: Rates,
    short: Option<Kib>,
}

impl Shares {
    /// A balancer with `cfg`.
    pub fn new(cfg: SharesConfig) -> Shares {
        Shares { cfg, rates: Rates::default(), short: None }
    }
    /// The configuration in use.
    pub fn config(&self) -> &SharesConfig {
        &self.cfg
    }
    /// How far the reservations (`max(min, floor)`) alone exceeded the capacity at the last step.
    pub fn short(&self) -> Option<Kib> {
        self.short
    }
    /// `vm`'s present shrink limit per second, if it was seen.
    pub fn rate(&self, vm: VmId) -> Option<Kib> {
        self.rates.rate(vm)
    }
    /// Drops `vm`'s rate state.
    pub fn forget(&mut self, vm: VmId) {
        self.rates.forget(vm);
    }

    /// Reclaims from the lowest ρ first until the sizes fit `cap`: zero-share VMs (ρ = 0)
    /// in proportion to what they can give, then one common ρ for the rest.
    fn reclaim(vms: &[Vm], k: f64, cap: Kib) -> Vec<Kib> {
        let cap = cap.0 as u128;
        let excess = sum128(vms.iter().map(|v| v.hi)).saturating_sub(cap);
        let zero: Vec<usize> = (0..vms.len()).filter(|&i| vms[i].shares == 0).collect();
        let slack = sum128(zero.iter().map(|&i| vms[i].hi.saturating_sub(vms[i].lo)));
        let mut out: Vec<Kib> = vms.iter().map(|v| v.hi).collect();
        if slack >= excess {
            let mut left = excess;
            for &i in &zero {
                let s = vms[i].hi.saturating_sub(vms[i].lo).0 as u128;
                let share = s.checked_mul(excess).map_or_else(|| (s as f64 * (excess as f64 / slack as f64)).ceil() as u128, |p| p.div_ceil(slack.max(1)));
                let cut = share.min(s).min(left);
                left -= cut;
                out[i] = vms[i].hi.saturating_sub(Kib(cut as u64));
            }
            // Rounding left overs, from the first zero-share VMs that can still give.
            for &i in &zero {
                let cut = (out[i].saturating_sub(vms[i].lo).0 as u128).min(left);
                left -= cut;
                out[i] = out[i].saturating_sub(Kib(cut as u64));
            }
            return out;
        }
        for &i in &zero {
            out[i] = vms[i].lo;
        }
        let at = |rho: f64| -> Vec<Kib> {
            vms.iter()
                .map(|v| if v.shares == 0 { v.lo } else { kib_f64(size_at(v.shares, v.active, k, rho).floor()).clamp(v.lo, v.hi) })
                .collect()
        };
        // Σ size is non-increasing in ρ: bisect ln ρ for the smallest ρ whose sizes fit.
        let (mut lo, mut hi) = (-200.0f64, 200.0f64);
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            if sum128(at(mid.exp())) <= cap {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        at(hi.exp())
    }
}

impl Balancer for Shares {
    fn name(&self) -> &'static str {
        "shares"
    }

    fn short(&self) -> Option<Kib> {
        Shares::short(self)
    }

    fn balance(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Kib> {
        let k = self.cfg.k();
        let mut hard = Vec::with_capacity(claims.len());
        let mut soft = Vec::with_capacity(claims.len());
        for c in claims {
            let cfg = self.cfg.of(c.vm);
            let r = &c.room;
            let lo = r.clamp(cfg.min.max(r.floor));
            let hi = r.clamp(c.want.min(cfg.max)).max(lo);
            let size = if c.sample.guest_size.0 > 0 { c.sample.guest_size } else { r.commanded };
            let active = c.sample.mem.map_or(f64::INFINITY, |m| size.saturating_sub(m.available).0 as f64);
            let allowed = self.rates.allowed(&self.cfg.rate, c.vm, &c.sample);
            let rail = r.clamp(r.commanded.saturating_sub(allowed)).max(lo);
            hard.push(Vm { shares: cfg.shares, active, lo, hi });
            soft.push(Vm { shares: cfg.shares, active, lo: rail, hi: hi.max(rail) });
        }
        let Some(cap) = host.capacity else { return soft.iter().map(|v| v.hi).collect() };
        let fits = |ks: &mut dyn Iterator<Item = Kib>| sum128(ks) <= cap.0 as u128;
        let hard_lo = sum128(hard.iter().map(|v| v.lo));
        self.short = (hard_lo > cap.0 as u128).then(|| Kib((hard_lo - cap.0 as u128).min(u64::MAX as u128) as u64));
        let t = if fits(&mut soft.iter().map(|v| v.hi)) {
            soft.iter().map(|v| v.hi).collect()
        } else if fits(&mut soft.iter().map(|v| v.lo)) {
            Self::reclaim(&soft, k, cap)
        } else if self.short.is_none() {
            // The rail yields, no further than the capacity needs.
            let yielded: Vec<Vm> = hard.iter().zip(&soft).map(|(h, s)| Vm { hi: s.hi, ..*h }).collect();
            Self::reclaim(&yielded, k, cap)
        } else {
            return hard.iter().map(|v| v.lo).collect();
        };
        fit(host, claims, &t)
    }
}

#[cfg(test)]
mod tests;
