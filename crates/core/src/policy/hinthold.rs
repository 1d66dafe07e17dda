//! What free page hinting holds in a guest whose kernel does not say. Pure.
//!
//! While a migration runs with `free-page-hint=on`, the guest's balloon driver takes its
//! free memory in 4 MiB blocks, tells QEMU, and keeps the blocks until the migration ends
//! (or gives them back to its shrinker under pressure). `MemFree` and `MemAvailable` leave
//! them out, and a stock kernel counts them nowhere else, so the guest looks full: the
//! estimator would see a guest that needs all it has, and a spike freed during the
//! migration would stay in it, to be sent, until the migration ends (the patched kernel
//! says what it holds in `hinted_pages`).
//!
//! What meminfo does count — free memory, page cache, anonymous memory, slab, page tables,
//! kernel stacks, per-cpu and vmalloc memory, huge pages — plus the pages in the balloon
//! (/proc/vmstat) is the same total whatever the guest does, less the little no counter
//! covers (a driver's pages); hinting is what takes it down. So the total at the last
//! sample before the migration, less the total now, is what hinting holds. The balloon's
//! own pages are in the total because they leave `MemTotal` or stay in it depending on
//! deflate-on-oom, and move during a migration.

use crate::procfs::Meminfo;
use crate::units::{Kib, Pages};

/// Differences smaller than this are taken for the counters' own drift, not hinting.
pub const HINT_NOISE: Kib = Kib::from_mib_saturating(8);

/// Everything `m` accounts for, plus the balloon's `balloon` pages: free and used memory
/// of every kind meminfo counts. `None` if a field it needs is missing (fields older
/// kernels lack count as zero).
pub fn accounted_with_balloon(m: &Meminfo, balloon: Pages) -> Option<Kib> {
    const NEEDED: [&str; 7] = ["MemFree", "Buffers", "Cached", "AnonPages", "Slab", "KernelStack", "PageTables"];
    const OPTIONAL: [&str; 5] = ["SwapCached", "SecPageTables", "Percpu", "VmallocUsed", "Hugetlb"];
    let mut sum = balloon.to_kib_saturating();
    for f in NEEDED {
        sum = sum.saturating_add(Kib(m.get(f)?));
    }
    for f in OPTIONAL {
        sum = sum.saturating_add(Kib(m.get(f).unwrap_or(0)));
    }
    Some(sum)
}

/// The total before the migration, and what hinting holds during one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HintHold {
    before: Option<Kib>,
}

impl HintHold {
    /// Takes a sample's total ([`accounted_with_balloon`]) and whether a migration runs;
    /// returns what hinting holds now, if a migration runs and it is more than
    /// [`HINT_NOISE`]. Outside migrations the total is remembered; an unknown total
    /// forgets it (no estimate until the next migration starts from a known one).
    pub fn observe(&mut self, total: Option<Kib>, migrating: bool) -> Option<Kib> {
        let Some(now) = total else {
            if !migrating {
                self.before = None;
            }
            return None;
        };
        if !migrating {
            self.before = Some(now);
            return None;
        }
        let held = self.before?.saturating_sub(now);
        (held > HINT_NOISE).then_some(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::parse_meminfo;

    fn meminfo(free_mib: u64, anon_mib: u64) -> Meminfo {
        let kib = |m: u64| m * 1024;
        parse_meminfo(&format!(
            "MemTotal: {} kB\nMemFree: {} kB\nBuffers: 0 kB\nCached: {} kB\nAnonPages: {} kB\nSlab: {} kB\nKernelStack: 764 kB\nPageTables: 56 kB\nPercpu: 260 kB\n",
            kib(2048),
            kib(free_mib),
            kib(30),
            kib(anon_mib),
            kib(16)
        ))
        .unwrap()
    }

    #[test]
    fn the_total_counts_every_kind_and_the_balloon() {
        let m = meminfo(1000, 100);
        assert_eq!(accounted_with_balloon(&m, Pages(0)), Some(Kib((1000 + 30 + 100 + 16) * 1024 + 764 + 56 + 260)));
        assert_eq!(accounted_with_balloon(&m, Pages(256)), Some(Kib((1000 + 30 + 100 + 16 + 1) * 1024 + 764 + 56 + 260)));
        assert_eq!(accounted_with_balloon(&parse_meminfo("MemFree: 5 kB\n").unwrap(), Pages(0)), None, "a report without the used kinds");
    }

    #[test]
    fn a_real_guest_report_has_every_needed_field() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/linux-6.1-guest-idle/meminfo")).unwrap();
        let m = parse_meminfo(&text).unwrap();
        // 942076 + 0 + 5312 + 164 + 16080 + 764 + 56 + 0 + 0 + 260 + 7548 + 0
        assert_eq!(accounted_with_balloon(&m, Pages(0)), Some(Kib(972_260)));
    }

    #[test]
    fn a_real_guest_during_a_hinted_migration() {
        let read = |f: &str| std::fs::read_to_string(format!("{}/fixtures/linux-6.1-guest-hinting/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let total = |m: &str, v: &str| {
            let balloon = crate::procfs::parse_vmstat(&read(v)).unwrap().balloon_pages().unwrap();
            accounted_with_balloon(&parse_meminfo(&read(m)).unwrap(), balloon)
        };
        let mut h = HintHold::default();
        assert_eq!(h.observe(total("meminfo-before", "vmstat-before"), false), None);
        let held = h.observe(total("meminfo", "vmstat"), true).expect("hinting holds the free memory");
        let free = |m: &str| parse_meminfo(&read(m)).unwrap().kib("MemFree").unwrap();
        let lost = free("meminfo-before").saturating_sub(free("meminfo"));
        assert!(held.abs_diff(lost) < Kib::from_mib_saturating(1), "held {held:?}, MemFree lost {lost:?}");
        assert_eq!(parse_meminfo(&read("meminfo")).unwrap().kib("MemAvailable").unwrap(), Kib::ZERO, "what the estimator would have seen");
    }

    #[test]
    fn hinting_is_what_the_total_lost_since_the_migration_started() {
        let mut h = HintHold::default();
        let t = |free: u64, anon: u64, balloon: u64| accounted_with_balloon(&meminfo(free, anon), Pages(balloon * 256));
        assert_eq!(h.observe(t(1000, 100, 0), false), None, "no migration");
        // The migration starts; hinting takes 900 MiB of the free 1000.
        assert_eq!(h.observe(t(100, 100, 0), true), Some(Kib::from_mib_saturating(900)));
        // A spike takes 1 GiB: hinting gave back what it needed, the rest is held.
        assert_eq!(h.observe(t(20, 1100, 0), true), None, "all of it given back: nothing held");
        // Freed, then the balloon takes 600 MiB: free memory became balloon, not hinting.
        assert_eq!(h.observe(t(400, 100, 600), true), None);
        assert_eq!(h.observe(t(100, 100, 600), true), Some(Kib::from_mib_saturating(300)), "hinting took the rest");
        assert_eq!(h.observe(t(4, 100, 600), true), Some(Kib::from_mib_saturating(396)));
        // The migration ends: hinting returns its blocks; the new total is the base.
        assert_eq!(h.observe(t(400, 100, 600), false), None);
        assert_eq!(h.observe(t(395, 100, 600), true), None, "inside the noise");
    }

    #[test]
    fn without_a_total_before_the_migration_there_is_no_estimate() {
        let mut h = HintHold::default();
        assert_eq!(h.observe(Some(Kib::from_mib_saturating(1000)), false), None);
        assert_eq!(h.observe(None, false), None);
        assert_eq!(h.observe(Some(Kib::from_mib_saturating(100)), true), None, "the base was forgotten");
        let mut h = HintHold::default();
        assert_eq!(h.observe(Some(Kib::from_mib_saturating(100)), true), None, "a migration from the start");
    }
}
