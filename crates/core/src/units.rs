//! Memory quantities as types, so a KiB count is never mistaken for bytes or pages.
//!
//! The kernel reports /proc/meminfo in KiB, QMP speaks bytes, and balloon drivers count
//! 4 KiB pages. Conversions are explicit methods and say in their names what they do at
//! the edges: `_floor` rounds down, `_checked` returns `None` on overflow, `_saturating`
//! stops at `u64::MAX`. Nothing here panics or wraps, whatever a guest or QEMU reports.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Size of the page unit the virtio balloon works in, in bytes.
pub const PAGE_SIZE: u64 = 4096;
const KIB_PER_PAGE: u64 = PAGE_SIZE / 1024;

/// A quantity of memory in KiB (1024 bytes), the unit of /proc/meminfo.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Kib(pub u64);

/// A quantity of memory in bytes, the unit of QMP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bytes(pub u64);

/// A number of 4 KiB pages, the unit of balloon drivers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pages(pub u64);

impl Kib {
    pub const ZERO: Kib = Kib(0);
    /// One 4 KiB page, the smallest size a balloon target may take.
    pub const ONE_PAGE: Kib = Kib(KIB_PER_PAGE);
    /// The largest quantity; what saturating conversions stop at.
    pub const MAX: Kib = Kib(u64::MAX);

    /// `mib` MiB, or [`Kib::MAX`] if that does not fit.
    pub const fn from_mib_saturating(mib: u64) -> Kib {
        Kib(mib.saturating_mul(1024))
    }
    /// `gib` GiB, or [`Kib::MAX`] if that does not fit.
    pub const fn from_gib_saturating(gib: u64) -> Kib {
        Kib(gib.saturating_mul(1024 * 1024))
    }
    /// In bytes; `None` above 16 EiB.
    pub const fn to_bytes_checked(self) -> Option<Bytes> {
        match self.0.checked_mul(1024) {
            Some(b) => Some(Bytes(b)),
            None => None,
        }
    }
    /// In bytes, stopping at `u64::MAX` bytes.
    pub const fn to_bytes_saturating(self) -> Bytes {
        Bytes(self.0.saturating_mul(1024))
    }
    /// Whole pages contained in this size (rounded down; never overflows).
    pub const fn to_pages_floor(self) -> Pages {
        Pages(self.0 / KIB_PER_PAGE)
    }
    /// MiB as a float, for display only.
    pub fn mib_f64(self) -> f64 {
        self.0 as f64 / 1024.0
    }
    pub const fn saturating_sub(self, other: Kib) -> Kib {
        Kib(self.0.saturating_sub(other.0))
    }
    pub const fn saturating_add(self, other: Kib) -> Kib {
        Kib(self.0.saturating_add(other.0))
    }
    pub const fn checked_add(self, other: Kib) -> Option<Kib> {
        match self.0.checked_add(other.0) {
            Some(k) => Some(Kib(k)),
            None => None,
        }
    }
    /// The absolute difference between two sizes.
    pub const fn abs_diff(self, other: Kib) -> Kib {
        Kib(self.0.abs_diff(other.0))
    }
    /// Rounds up to a multiple of `unit`, saturating at the largest multiple that fits
    /// (a zero unit leaves the value alone).
    pub const fn align_up_saturating(self, unit: Kib) -> Kib {
        if unit.0 == 0 {
            return self;
        }
        match self.0.div_ceil(unit.0).checked_mul(unit.0) {
            Some(k) => Kib(k),
            None => Kib(u64::MAX / unit.0 * unit.0),
        }
    }
    pub fn clamp(self, min: Kib, max: Kib) -> Kib {
        // Unlike Ord::clamp this never panics: a min above max yields max.
        Kib(self.0.max(min.0).min(max.0))
    }
}

impl Bytes {
    /// Whole KiB contained in this many bytes (rounded down; never overflows).
    pub const fn to_kib_floor(self) -> Kib {
        Kib(self.0 / 1024)
    }
}

impl Pages {
    /// In KiB; `None` if a (hostile) page count does not fit.
    pub const fn to_kib_checked(self) -> Option<Kib> {
        match self.0.checked_mul(KIB_PER_PAGE) {
            Some(k) => Some(Kib(k)),
            None => None,
        }
    }
    /// In KiB, stopping at [`Kib::MAX`].
    pub const fn to_kib_saturating(self) -> Kib {
        Kib(self.0.saturating_mul(KIB_PER_PAGE))
    }
    /// In bytes, stopping at `u64::MAX`.
    pub const fn to_bytes_saturating(self) -> Bytes {
        Bytes(self.0.saturating_mul(PAGE_SIZE))
    }
}

/// A whole percentage, 0 to 100: a share of the host's memory (`host_target_pct`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Percent(u8);

impl Percent {
    /// 0 %.
    pub const ZERO: Percent = Percent(0);
    /// 100 %.
    pub const FULL: Percent = Percent(100);
    /// `p` %, or `None` above 100.
    pub const fn new_checked(p: u64) -> Option<Percent> {
        if p <= 100 {
            Some(Percent(p as u8))
        } else {
            None
        }
    }
    /// The number of percent.
    pub const fn get(self) -> u8 {
        self.0
    }
    /// This share of `k`, rounded down (never overflows).
    pub const fn of_floor(self, k: Kib) -> Kib {
        Kib((k.0 as u128 * self.0 as u128 / 100) as u64)
    }
    /// How much of `whole` `part` is, in percent (rounded down, at most 100; 0 of nothing),
    /// for logs and status only.
    pub fn share_floor(part: Kib, whole: Kib) -> Percent {
        if whole.0 == 0 {
            return Percent(0);
        }
        Percent((part.0.min(whole.0) as u128 * 100 / whole.0 as u128) as u8)
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} %", self.0)
    }
}

impl fmt::Display for Kib {
    /// Human form: MiB with one decimal, the scale an operator reasons in.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} MiB", self.mib_f64())
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} MiB", self.0 as f64 / (1024.0 * 1024.0))
    }
}

impl fmt::Display for Pages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} pages", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn conversions() {
        assert_eq!(Kib::from_mib_saturating(1).to_bytes_saturating(), Bytes(1 << 20));
        assert_eq!(Bytes(1 << 30).to_kib_floor(), Kib::from_gib_saturating(1));
        assert_eq!(Kib(10).to_pages_floor(), Pages(2));
        assert_eq!(Pages(3).to_kib_checked(), Some(Kib(12)));
        assert_eq!(Pages(1).to_bytes_saturating(), Bytes(4096));
        assert_eq!(Kib(5).align_up_saturating(Kib(4)), Kib(8));
        assert_eq!(Kib(8).align_up_saturating(Kib(4)), Kib(8));
        assert_eq!(Kib(5).align_up_saturating(Kib(0)), Kib(5));
        assert_eq!(Kib(5).clamp(Kib(10), Kib(3)), Kib(3));
        assert_eq!(Kib::from_mib_saturating(3).to_string(), "3.0 MiB");
        assert_eq!(Percent::new_checked(80).map(|p| p.of_floor(Kib(1000))), Some(Kib(800)));
        assert_eq!(Percent::new_checked(101), None);
        assert_eq!(Percent::new_checked(100).unwrap().of_floor(Kib::MAX), Kib::MAX, "no overflow at the edge");
        assert_eq!(Percent::share_floor(Kib(5), Kib(0)), Percent::new_checked(0).unwrap());
        assert_eq!(Percent::share_floor(Kib(7), Kib(5)).get(), 100);
        assert_eq!(Percent::share_floor(Kib(859), Kib(1000)).to_string(), "85 %");
    }

    #[test]
    fn hostile_values_never_wrap() {
        // A guest reporting 2^62, 2^63 or u64::MAX balloon pages.
        for p in [1u64 << 62, 1 << 63, u64::MAX] {
            assert_eq!(Pages(p).to_kib_checked(), None, "{p}");
            assert_eq!(Pages(p).to_kib_saturating(), Kib::MAX);
            assert_eq!(Pages(p).to_bytes_saturating(), Bytes(u64::MAX));
        }
        assert_eq!(Kib::MAX.to_bytes_checked(), None);
        assert_eq!(Kib::MAX.to_bytes_saturating(), Bytes(u64::MAX));
        assert_eq!(Kib::from_mib_saturating(u64::MAX), Kib::MAX);
        assert_eq!(Kib::from_gib_saturating(1 << 50), Kib::MAX);
        assert_eq!(Kib(u64::MAX).align_up_saturating(Kib(1024)), Kib(u64::MAX / 1024 * 1024));
        assert_eq!(Kib::MAX.checked_add(Kib(1)), None);
    }

    proptest! {
        #[test]
        fn kib_bytes_roundtrip(k in 0u64..(1u64 << 50)) {
            prop_assert_eq!(Kib(k).to_bytes_checked().map(Bytes::to_kib_floor), Some(Kib(k)));
        }
        #[test]
        fn align_up_is_smallest_multiple(k in 0u64..(1u64 << 40), u in 1u64..(1u64 << 20)) {
            let a = Kib(k).align_up_saturating(Kib(u));
            prop_assert!(a.0 >= k && a.0.is_multiple_of(u) && a.0 - k < u);
        }
        #[test]
        fn conversions_agree_where_they_fit(p in any::<u64>()) {
            match Pages(p).to_kib_checked() {
                Some(k) => prop_assert_eq!(k, Pages(p).to_kib_saturating()),
                None => prop_assert_eq!(Pages(p).to_kib_saturating(), Kib::MAX),
            }
        }
    }
}
