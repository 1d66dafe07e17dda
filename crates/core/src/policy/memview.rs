use crate::procfs::{Meminfo, MissingField};
use crate::units::Kib;
use serde::{Deserialize, Serialize};

/// The fields of a guest's /proc/meminfo that policies use, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemView {
    pub total: Kib,
    pub free: Kib,
    pub available: Kib,
    pub committed_as: Kib,
    pub active: Kib,
    pub inactive: Kib,
    pub swap_total: Kib,
    pub swap_free: Kib,
    /// Page cache (`Cached`), for the optional cache buffer.
    pub cached: Kib,
}

impl MemView {
    /// Picks the fields out of a parsed report; fails naming the first missing one.
    pub fn from_meminfo(m: &Meminfo) -> Result<MemView, MissingField> {
        Ok(MemView {
            total: m.kib("MemTotal")?,
            free: m.kib("MemFree")?,
            available: m.kib("MemAvailable")?,
            committed_as: m.kib("Committed_AS")?,
            active: m.kib("Active")?,
            inactive: m.kib("Inactive")?,
            swap_total: m.kib("SwapTotal")?,
            swap_free: m.kib("SwapFree")?,
            cached: m.kib("Cached")?,
        })
    }

    /// Memory in swap: `SwapTotal − SwapFree` (0 without swap).
    pub fn swapped(&self) -> Kib {
        self.swap_total.saturating_sub(self.swap_free)
    }

    /// Memory promised to programs beyond what is resident or swapped:
    /// `max(0, Committed_AS − (Active + Inactive + (SwapTotal − SwapFree)))`.
    pub fn overcommitted(&self) -> Kib {
        let backed = self
            .active
            .saturating_add(self.inactive)
            .saturating_add(self.swapped());
        self.committed_as.saturating_sub(backed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::{fixtures, parse_meminfo};

    #[test]
    fn overcommitted_is_never_negative() {
        let v = MemView { committed_as: Kib(100), active: Kib(80), inactive: Kib(30), ..Default::default() };
        assert_eq!(v.overcommitted(), Kib(0));
        let v = MemView { committed_as: Kib(500), active: Kib(80), inactive: Kib(30), swap_total: Kib(100), swap_free: Kib(60), ..Default::default() };
        assert_eq!(v.overcommitted(), Kib(500 - (80 + 30 + 40)));
    }

    #[test]
    fn builds_from_every_fixture() {
        for (source, text) in fixtures::all("meminfo") {
            let v = MemView::from_meminfo(&parse_meminfo(&text).unwrap()).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert!(v.available <= v.total, "{source}");
        }
        let partial = parse_meminfo("MemTotal: 1 kB\nMemFree: 1 kB\n").unwrap();
        assert_eq!(MemView::from_meminfo(&partial), Err(MissingField("MemAvailable")));
    }
}
