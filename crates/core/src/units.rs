//! Memory quantities as types, so a KiB count is never mistaken for bytes or pages.
//!
//! The kernel reports /proc/meminfo in KiB, QMP speaks bytes, and balloon drivers count
//! 4 KiB pages. Conversions are explicit methods; rounding direction is in the name.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Size of the page unit the virtio balloon works in, in bytes.
pub const PAGE_SIZE: u64 = 4096;

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
    pub const ONE_PAGE: Kib = Kib(PAGE_SIZE / 1024);

    pub const fn from_mib(mib: u64) -> Kib {
        Kib(mib * 1024)
    }
    pub const fn from_gib(gib: u64) -> Kib {
        Kib(gib * 1024 * 1024)
    }
    pub const fn as_bytes(self) -> Bytes {
        Bytes(self.0 * 1024)
    }
    /// Whole pages contained in this size (rounded down).
    pub const fn pages_floor(self) -> Pages {
        Pages(self.0 / (PAGE_SIZE / 1024))
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
    /// The absolute difference between two sizes.
    pub const fn abs_diff(self, other: Kib) -> Kib {
        Kib(self.0.abs_diff(other.0))
    }
    /// Rounds up to a multiple of `unit` (a zero unit leaves the value alone).
    pub const fn align_up(self, unit: Kib) -> Kib {
        if unit.0 == 0 {
            return self;
        }
        Kib(self.0.div_ceil(unit.0).saturating_mul(unit.0))
    }
    pub fn clamp(self, min: Kib, max: Kib) -> Kib {
        // Unlike Ord::clamp this never panics: a min above max yields max.
        Kib(self.0.max(min.0).min(max.0))
    }
}

impl Bytes {
    /// Whole KiB contained in this many bytes (rounded down).
    pub const fn kib_floor(self) -> Kib {
        Kib(self.0 / 1024)
    }
}

impl Pages {
    pub const fn as_kib(self) -> Kib {
        Kib(self.0 * (PAGE_SIZE / 1024))
    }
    pub const fn as_bytes(self) -> Bytes {
        Bytes(self.0 * PAGE_SIZE)
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
        assert_eq!(Kib::from_mib(1).as_bytes(), Bytes(1 << 20));
        assert_eq!(Bytes(1 << 30).kib_floor(), Kib::from_gib(1));
        assert_eq!(Kib(10).pages_floor(), Pages(2));
        assert_eq!(Pages(3).as_kib(), Kib(12));
        assert_eq!(Pages(1).as_bytes(), Bytes(4096));
        assert_eq!(Kib(5).align_up(Kib(4)), Kib(8));
        assert_eq!(Kib(8).align_up(Kib(4)), Kib(8));
        assert_eq!(Kib(5).align_up(Kib(0)), Kib(5));
        assert_eq!(Kib(5).clamp(Kib(10), Kib(3)), Kib(3));
        assert_eq!(Kib::from_mib(3).to_string(), "3.0 MiB");
    }

    proptest! {
        #[test]
        fn kib_bytes_roundtrip(k in 0u64..(1u64 << 50)) {
            prop_assert_eq!(Kib(k).as_bytes().kib_floor(), Kib(k));
        }
        #[test]
        fn align_up_is_smallest_multiple(k in 0u64..(1u64 << 40), u in 1u64..(1u64 << 20)) {
            let a = Kib(k).align_up(Kib(u));
            prop_assert!(a.0 >= k && a.0.is_multiple_of(u) && a.0 - k < u);
        }
    }
}
