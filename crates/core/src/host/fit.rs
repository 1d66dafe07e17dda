//! The last pass every balancer of this module runs: targets put inside their rooms, then
//! cut to the host's capacity above the floors. Pure, integer only, never panics.

use super::{Claim, HostView};
use crate::units::Kib;

/// The sum of `ks`, stopping at [`Kib::MAX`].
pub(crate) fn total(ks: impl IntoIterator<Item = Kib>) -> Kib {
    ks.into_iter().fold(Kib::ZERO, Kib::saturating_add)
}

/// The exact sum of `ks`.
pub(crate) fn sum128(ks: impl IntoIterator<Item = Kib>) -> u128 {
    ks.into_iter().map(|k| k.0 as u128).sum()
}

/// `targets` (one per claim; a missing one means the claim's want) clamped to each room;
/// if their sum exceeds `host.capacity`, every VM above its floor gives in proportion to
/// how far above it is, rounded so the sum fits. If the floors alone do not fit, every VM
/// gets its floor (as close as the rooms allow).
pub(crate) fn fit(host: &HostView, claims: &[Claim], targets: &[Kib]) -> Vec<Kib> {
    let mut out: Vec<Kib> =
        claims.iter().enumerate().map(|(i, c)| c.room.clamp(targets.get(i).copied().unwrap_or(c.want))).collect();
    let Some(cap) = host.capacity else { return out };
    let sum: u128 = out.iter().map(|k| k.0 as u128).sum();
    if sum <= cap.0 as u128 {
        return out;
    }
    let floors: u128 = claims.iter().map(|c| c.room.floor.0 as u128).sum();
    if floors >= sum || floors > cap.0 as u128 {
        return claims.iter().zip(&out).map(|(c, t)| c.room.floor.min(*t)).collect();
    }
    let mut excess = sum - cap.0 as u128;
    let slack = sum - floors;
    for (c, t) in claims.iter().zip(out.iter_mut()) {
        let s = t.saturating_sub(c.room.floor).0 as u128;
        // ceil(s · excess / slack) ≤ s because excess ≤ slack (0 if the product overflows:
        // the pass below takes the rest).
        let cut = s.checked_mul(excess).map_or(0, |p| p.div_ceil(slack)).min(s).min(excess);
        *t = t.saturating_sub(Kib(cut as u64));
        excess -= cut;
    }
    // Whatever rounding or overflow left: from the first VMs above their floors.
    for (c, t) in claims.iter().zip(out.iter_mut()) {
        let cut = (t.saturating_sub(c.room.floor).0 as u128).min(excess);
        *t = t.saturating_sub(Kib(cut as u64));
        excess -= cut;
    }
    out
}

/// An f64 quantity of KiB as [`Kib`]: negative and NaN give 0, too large gives [`Kib::MAX`].
pub(crate) fn kib_f64(x: f64) -> Kib {
    // `as` saturates and maps NaN to 0.
    Kib(x as u64)
}
