use crate::procfs::{Buddyinfo, Meminfo, MissingField};
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
    /// Resident memory of the kinds `Committed_AS` counts: `AnonPages + Shmem` (tmpfs and
    /// shared memory are accounted there too), where the report has both (virtio
    /// guest-stats do not; an older agent does not send it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anon_and_shmem: Option<Kib>,
    /// Page cache on the LRU lists, `Active(file) + Inactive(file)` (block device buffers
    /// too, shmem not), where the report has both: the most the room kept for cache read
    /// again can hold ([`crate::policy::CacheKeep`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_cache: Option<Kib>,
    /// Free memory in blocks that free page hinting takes whole (order 10, 4 MiB, outside
    /// the DMA zone: /proc/buddyinfo), where the agent reads it: what a migration with
    /// hinting skips. The rest of `free` lies in smaller pieces, which it sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_in_hint_blocks: Option<Kib>,
    /// Memory being freed whose commitment is still accounted: overcommitted as meminfo
    /// shows it, not counted ([`crate::policy::Overcommit`]). Set where a sample enters a
    /// host loop ([`crate::host::HostLoop::admit`]), from the samples before it; never
    /// taken from a report.
    #[serde(skip)]
    pub freeing: Kib,
}

impl MemView {
    /// The fields [`MemView::from_meminfo`] reads.
    pub const MEMINFO_FIELDS: &'static [&'static str] =
        &["MemTotal", "MemFree", "MemAvailable", "Committed_AS", "Active", "Inactive", "SwapTotal", "SwapFree", "Cached", "AnonPages", "Shmem", "Active(file)", "Inactive(file)"];

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
            anon_and_shmem: m.kib("AnonPages").ok().zip(m.kib("Shmem").ok()).map(|(a, s)| a.saturating_add(s)),
            file_cache: m.kib("Active(file)").ok().zip(m.kib("Inactive(file)").ok()).map(|(a, i)| a.saturating_add(i)),
            free_in_hint_blocks: None,
            freeing: Kib::ZERO,
        })
    }

    /// The view with `held` KiB that the balloon driver holds for free page hinting counted
    /// as free and available again: hinting takes the guest's free memory while a
    /// migration runs and gives it back when it ends or when the guest runs short, and
    /// meanwhile `MemFree` and `MemAvailable` leave it out, though the guest needs no more
    /// than before. The held blocks are hinting's whole blocks, so they count there too.
    /// Capped at `total`.
    pub fn with_hinted_saturating(self, held: Kib) -> MemView {
        let add = |v: Kib| v.saturating_add(held).min(self.total);
        MemView { free: add(self.free), available: add(self.available), free_in_hint_blocks: self.free_in_hint_blocks.map(add), ..self }
    }

    /// The view with the free memory in hinting's blocks read from /proc/buddyinfo.
    pub fn with_buddyinfo(self, b: &Buddyinfo) -> MemView {
        MemView { free_in_hint_blocks: Some(b.free_in_blocks_saturating(Buddyinfo::HINT_ORDER).to_kib_saturating()), ..self }
    }

    /// Memory in swap: `SwapTotal − SwapFree` (0 without swap).
    pub fn swapped(&self) -> Kib {
        self.swap_total.saturating_sub(self.swap_free)
    }

    /// Memory promised to programs beyond what is resident or swapped:
    /// `max(0, Committed_AS − (AnonPages + Shmem + (SwapTotal − SwapFree)))`, or with
    /// `Active + Inactive` for the resident part where the report has no `AnonPages` (the
    /// first seed's formula).
    ///
    /// `Active + Inactive` counts page cache as well, which `Committed_AS` never does: a
    /// guest holding 300 MiB of cache looked 300 MiB less overcommitted, so a program that
    /// allocated 800 MiB there was met in 20 MiB steps as it touched its memory (the
    /// density benchmark's `fill`, 12 s) instead of at once.
    ///
    /// Memory being freed ([`MemView::freeing`]) is left out: every reader (the estimator,
    /// the rails' floor, the balancers, back-ahead) sees the overcommitment counted.
    pub fn overcommitted(&self) -> Kib {
        self.overcommitted_shown().saturating_sub(self.freeing)
    }

    /// The overcommitment as meminfo shows it, memory being freed included.
    pub fn overcommitted_shown(&self) -> Kib {
        self.committed_as.saturating_sub(self.resident().saturating_add(self.swapped()))
    }

    /// The programs' resident memory: `AnonPages + Shmem`, or `Active + Inactive` (page
    /// cache included) where meminfo has no `AnonPages`.
    pub(crate) fn resident(&self) -> Kib {
        self.anon_and_shmem.unwrap_or_else(|| self.active.saturating_add(self.inactive))
    }

    /// What the guest's programs hold or were promised: their resident memory plus what
    /// they committed and have not touched. Unlike `MemAvailable` it does not move when
    /// free page hinting holds the free pages during a migration or the balloon takes
    /// memory; the guest kernel's own memory (slab, page tables) is not in it.
    pub fn demand(&self) -> Kib {
        self.resident().saturating_add(self.overcommitted())
    }

    /// What the guest's programs hold or were promised ([`MemView::demand`]) and, where the
    /// report tells it apart, its page cache: the memory it has written or will write. Free
    /// page hinting's held blocks and the balloon's pages are in neither, so during a
    /// migration it rises only when the guest writes into its free memory.
    pub fn claimed(&self) -> Kib {
        let cache = if self.anon_and_shmem.is_some() { self.file_cache.unwrap_or(Kib::ZERO) } else { Kib::ZERO };
        self.demand().saturating_add(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::{fixtures, parse_meminfo, parse_meminfo_only};

    #[test]
    fn the_fields_it_reads_are_all_a_view_needs() {
        for (source, text) in fixtures::all("meminfo") {
            let whole = MemView::from_meminfo(&parse_meminfo(&text).unwrap());
            let some = parse_meminfo_only(&text, MemView::MEMINFO_FIELDS).unwrap();
            assert!(some.len() <= MemView::MEMINFO_FIELDS.len(), "{source}");
            assert_eq!(MemView::from_meminfo(&some), whole, "{source}");
        }
    }

    #[test]
    fn pages_held_for_hinting_count_as_free_and_available() {
        let v = MemView { total: Kib(2000), free: Kib(30), available: Kib(100), cached: Kib(70), free_in_hint_blocks: Some(Kib(8)), ..Default::default() };
        let h = v.with_hinted_saturating(Kib(1500));
        assert_eq!((h.free, h.available, h.cached, h.total), (Kib(1530), Kib(1600), Kib(70), Kib(2000)));
        assert_eq!(h.free_in_hint_blocks, Some(Kib(1508)), "held blocks are whole blocks");
        assert_eq!(MemView { free_in_hint_blocks: None, ..v }.with_hinted_saturating(Kib(1500)).free_in_hint_blocks, None, "unknown stays unknown");
        assert_eq!(v.with_hinted_saturating(Kib::MAX).available, Kib(2000), "never above the total");
        assert_eq!(v.with_hinted_saturating(Kib::ZERO), v);
    }

    #[test]
    fn claimed_memory_counts_page_cache_once_and_not_hintings_blocks() {
        let v = MemView { committed_as: Kib(500), anon_and_shmem: Some(Kib(300)), file_cache: Some(Kib(120)), active: Kib(350), inactive: Kib(70), ..Default::default() };
        assert_eq!(v.claimed(), Kib(500 + 120), "promised 500, cache 120");
        assert_eq!(MemView { anon_and_shmem: None, ..v }.claimed(), Kib(500), "the LRU lists hold the cache already");
        assert_eq!(v.with_hinted_saturating(Kib(1500)).claimed(), v.claimed());
    }

    #[test]
    fn overcommitted_is_never_negative() {
        let v = MemView { committed_as: Kib(100), active: Kib(80), inactive: Kib(30), ..Default::default() };
        assert_eq!(v.overcommitted(), Kib(0));
        let v = MemView { committed_as: Kib(500), active: Kib(80), inactive: Kib(30), swap_total: Kib(100), swap_free: Kib(60), ..Default::default() };
        assert_eq!(v.overcommitted(), Kib(500 - (80 + 30 + 40)));
    }

    #[test]
    fn page_cache_does_not_hide_memory_promised() {
        // The host fixture: 1.2 GiB on the LRU lists, most of it page cache; 335 MiB of
        // anonymous memory and 9 MiB of shmem; 421 MiB committed.
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/host-6.18/meminfo")).unwrap();
        let v = MemView::from_meminfo(&parse_meminfo(&text).unwrap()).unwrap();
        assert_eq!(v.anon_and_shmem, Some(Kib(342692 + 8872)));
        assert_eq!(v.overcommitted(), Kib(431492 - 342692 - 8872));
        assert_eq!(MemView { anon_and_shmem: None, ..v }.overcommitted(), Kib(0), "the seed's formula: the cache hides it");
        // A guest without cache: the same either way, within its shmem's rounding.
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/linux-6.1-guest-spike/meminfo")).unwrap();
        let v = MemView::from_meminfo(&parse_meminfo(&text).unwrap()).unwrap();
        let seed = MemView { anon_and_shmem: None, ..v }.overcommitted();
        assert!(v.overcommitted().abs_diff(seed) <= Kib(1024), "{} vs {seed}", v.overcommitted());
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
