use super::{CacheKeep, CacheKeepRule, Decision, Headroom, HeadroomRule, MemView, Policy, Reason, ReportDrain, Rinse, RinseRule, Sample, Steady};
use crate::units::Kib;
use std::time::Duration;

/// The inputs and result of one run of the swap-free estimator, all in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub target: Kib,
    pub current: Kib,
    pub available: Kib,
    pub overcommitted: Kib,
    /// Overcommitted as meminfo shows it but not counted: memory being freed whose
    /// commitment is still accounted ([`MemView::freeing`]).
    pub freeing: Kib,
    /// Memory the guest has in swap (`SwapTotal − SwapFree`): demand it had no room for.
    pub swapped: Kib,
    pub buffer: Kib,
    /// Kept on top for a need seen recently ([`super::Headroom`]); zero from [`estimate`].
    pub headroom: Kib,
    /// Kept on top for page cache the guest read again after it was evicted
    /// ([`super::CacheKeep`]); zero from [`estimate`].
    pub cache_kept: Kib,
    /// Why the headroom is kept through a running migration; [`KeptThrough::No`] from
    /// [`estimate`].
    pub headroom_kept: KeptThrough,
    /// The headroom a running migration shed because the guest wrote into its free memory
    /// during it ([`MigrationWatch::wrote`]); zero from [`estimate`].
    pub headroom_shed: Kib,
    /// The part of the buffer a running migration shed ([`SwapFree::decide`]): free memory
    /// the guest touched that the migration would send; zero from [`estimate`].
    pub buffer_shed: Kib,
    /// Taken off while a settled guest's buffer is rinsed ([`super::Rinse`]); zero
    /// from [`estimate`].
    pub rinsed: Kib,
}

/// The continuous self-ballooning estimator of the swap-free ballooning design:
///
/// `overcommitted = max(0, Committed_AS − (AnonPages + Shmem + (SwapTotal − SwapFree)))`
/// ([`MemView::overcommitted`]: the seed writes `Active + Inactive`, which counts page cache)
/// `swapped = SwapTotal − SwapFree`
/// `target = current − MemAvailable + overcommitted + swapped + buffer`, clamped to [4 KiB, max].
///
/// `current` is the guest's present logical size. Counting memory promised but not yet
/// touched (`overcommitted`) makes the target rise when a program allocates, before it
/// writes, so the VM grows ahead of the spike rather than behind it.
///
/// Counting what the guest has in swap (`swapped`) keeps a swapping guest from being
/// shrunk: its working set partly lives in swap, so `MemAvailable` alone looks large (the
/// mixed-workload benchmark saw a guest grown to its ceiling shrunk again, swap again,
/// grow again). A guest is sized as if it had never swapped, the design's own aim; as its
/// pages come back in and their swap is freed, `swapped` falls and the target with it. A
/// guest without swap (SwapTotal 0) is unaffected. Pages in the swap cache are counted in
/// swap and as used alike (a little too much while swap-outs are under way).
///
/// `overcommitted` is the figure counted: memory being freed ([`MemView::freeing`]) is
/// not promised memory.
pub fn estimate(mem: &MemView, current: Kib, max: Kib, buffer: Kib) -> Estimate {
    let overcommitted = mem.overcommitted();
    let swapped = mem.swapped();
    let raw = current.saturating_add(overcommitted).saturating_add(swapped).saturating_add(buffer).saturating_sub(mem.available);
    Estimate {
        target: raw.clamp(Kib::ONE_PAGE, max),
        current,
        available: mem.available,
        overcommitted,
        freeing: mem.freeing,
        swapped,
        buffer,
        headroom: Kib::ZERO,
        cache_kept: Kib::ZERO,
        headroom_kept: KeptThrough::No,
        headroom_shed: Kib::ZERO,
        buffer_shed: Kib::ZERO,
        rinsed: Kib::ZERO,
    }
}

/// Why a headroom stays through a running migration instead of being shed at its start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeptThrough {
    /// No migration runs, or it sheds the headroom.
    #[default]
    No,
    /// Free page reporting has given it back to the host already ([`super::ReportDrain`]):
    /// the migration sends none of it.
    Reported,
    /// It lay in whole blocks of free page hinting before the migration began
    /// ([`MemView::free_in_hint_blocks`]): the migration skips them.
    Hinted,
}

/// What a policy saw of the guest before the running migration, and whether the guest
/// wrote into its free memory during it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigrationWatch {
    /// The guest's free memory in hinting's whole blocks at its last sample before the
    /// migration (while one runs, hinting holds those blocks).
    pub hintable_before: Option<Kib>,
    /// What the guest claimed ([`MemView::claimed`]) at its last sample before the
    /// migration; hinting's held blocks do not move it.
    pub claimed_before: Option<Kib>,
    /// During the migration the guest claimed more than the band beyond `claimed_before`
    /// (or nothing was seen before it): it wrote into its free memory, a spike, so a
    /// headroom is no longer memory reporting gave back or hinting skips. Kept, the
    /// spike's memory freed inside it stays dirty and the migration sends it (a 1.2 GiB
    /// spike during a 32 MiB/s migration sent 589 MiB, as many as FPR + hinting; run/hdo).
    pub wrote: bool,
}

impl MigrationWatch {
    /// Takes a sample's view: before a migration, what the guest shows; during one,
    /// whether it claimed more than `band` beyond that.
    pub fn observe(&mut self, mem: &MemView, migrating: bool, band: Kib) {
        if !migrating {
            *self = MigrationWatch { hintable_before: mem.free_in_hint_blocks, claimed_before: Some(mem.claimed()), wrote: false };
        } else if self.claimed_before.is_none_or(|c| mem.claimed() > c.saturating_add(band)) {
            self.wrote = true;
        }
    }
}

/// The per-VM continuous swap-free policy: the estimator on every fresh sample.
#[derive(Debug, Clone, PartialEq)]
pub struct SwapFree {
    /// Extra memory kept free on top of the estimate (KiB).
    pub buffer: Kib,
    /// Page cache the guest may keep: up to this much of `Cached` is added to the target,
    /// for cache-heavy guests. Zero turns it off.
    pub cache_buffer: Kib,
    /// The buffer while a migration is prepared (`Sample::preparing_migration`): free
    /// memory the migration would send for nothing. The cache buffer is not added then.
    pub migration_buffer: Kib,
    /// How long a recent need is kept as headroom ([`super::Headroom`]). It applies only
    /// where a migration can shed it (`Sample::shrink_while_migrating`: the hypervisor lets
    /// the balloon shrink during one), never while a migration runs or is prepared; a need
    /// seen during a migration is not remembered.
    pub headroom_rule: HeadroomRule,
    /// The headroom's rule where the balloon reports free pages
    /// (`Sample::reports_free_pages`): the kept memory goes back to the host within
    /// seconds anyway, so it may be kept longer.
    pub headroom_fpr_rule: HeadroomRule,
    /// How fast free page reporting gives free memory back, at the slowest: a running
    /// migration keeps a headroom reporting has had time to give back (it costs the
    /// migration nothing, where shedding it writes the balloon's page lists into memory
    /// the migration sends). Off: every migration sheds the headroom.
    pub report_drain: ReportDrain,
    /// How long the guest has been still before a migration (what reporting had time for).
    pub steady: Steady,
    /// The band within which the need and size count as still (the rails' dead band).
    pub steady_band: Kib,
    /// A migration with free page hinting that starts once the guest has been still this
    /// long keeps as much of the headroom as lay in hinting's whole blocks before it
    /// began, which it skips; shedding that part would write the balloon's page lists into
    /// memory it sends, and the balloon takes the smallest free pieces first, those
    /// hinting cannot skip. Sooner after a free hinting misses much of it (measured:
    /// docs/migration.md). `None`: only a reported headroom is kept.
    pub hinted_keep_after: Option<Duration>,
    /// What the guest showed before the running migration, and whether it wrote into its
    /// free memory during it.
    pub watch: MigrationWatch,
    pub headroom: Headroom,
    /// How much room page cache the guest reads again may claim ([`super::CacheKeep`]);
    /// not while a migration is prepared.
    pub cache_keep_rule: CacheKeepRule,
    pub cache_keep: CacheKeep,
    /// When a settled guest's buffer is rinsed ([`super::Rinse`]); never while a migration
    /// runs or is prepared.
    pub rinse_rule: RinseRule,
    pub rinse: Rinse,
}

impl SwapFree {
    /// The estimator with `buffer`, no cache buffer and no headroom; a migration is
    /// prepared with no buffer at all.
    pub fn new(buffer: Kib) -> SwapFree {
        SwapFree {
            buffer,
            cache_buffer: Kib::ZERO,
            migration_buffer: Kib::ZERO,
            headroom_rule: HeadroomRule::OFF,
            headroom_fpr_rule: HeadroomRule::OFF,
            report_drain: ReportDrain::OFF,
            steady: Steady::default(),
            steady_band: Kib::from_mib_saturating(16),
            hinted_keep_after: None,
            watch: MigrationWatch::default(),
            headroom: Headroom::default(),
            cache_keep_rule: CacheKeepRule::OFF,
            cache_keep: CacheKeep::default(),
            rinse_rule: RinseRule::OFF,
            rinse: Rinse::default(),
        }
    }
}

impl Policy for SwapFree {
    fn name(&self) -> &'static str {
        "swapfree"
    }

    fn decide(&mut self, s: &Sample) -> Option<Decision> {
        let mem = s.mem.as_ref()?;
        let buffer = if s.preparing_migration { self.migration_buffer } else { self.buffer.saturating_add(mem.cached.min(self.cache_buffer)) };
        let mut e = estimate(mem, s.guest_size, s.max, buffer);
        let need = estimate(mem, s.guest_size, s.max, Kib::ZERO).target;
        // A need seen while a migration runs is not remembered: it would keep memory the
        // next migration sends.
        let rule = if s.reports_free_pages { &self.headroom_fpr_rule } else { &self.headroom_rule };
        let covered = if s.migrating { self.headroom.remembered(rule, s.at).max(need) } else { self.headroom.observe(rule, need, s.at) };
        // A migration sheds the headroom: hinting does not skip all of it (a 1.2 GiB
        // headroom kept 1 s after its spike sent about 100 MiB more pages whole, 1.55-1.60x
        // what FPR + hinting sent; docs/migration.md). Unless free page reporting has given
        // it back already (the host holds none of it, the migration sends none of it), or,
        // on a guest still for a while, as far as it lies in hinting's whole blocks (the
        // migration skips them): shedding that would write the balloon's page lists
        // (64 bytes of `struct page` for each 4 KiB inflated) into pages it sends. Kept
        // only until the guest writes into it during the migration ([`MigrationWatch`]).
        let headroom = covered.saturating_sub(need);
        // While a migration runs, hinting's held pages move the need and hold its whole
        // blocks: stillness and those blocks are what the guest showed before it; what it
        // claims does not move with them.
        if !s.migrating {
            self.steady.observe(s.at, need, s.guest_size, self.steady_band);
        }
        self.watch.observe(mem, s.migrating, self.steady_band);
        let still_for = self.steady.for_how_long(s.at);
        let (kept_headroom, why) = if !s.migrating {
            (headroom, KeptThrough::No)
        } else if self.watch.wrote {
            (Kib::ZERO, KeptThrough::No)
        } else if s.reports_free_pages && self.report_drain.drained_after(headroom).is_some_and(|d| still_for >= d) {
            (headroom, KeptThrough::Reported)
        } else if s.hints_free_pages && self.hinted_keep_after.is_some_and(|t| still_for >= t) {
            (headroom.min(self.watch.hintable_before.unwrap_or(Kib::ZERO)), KeptThrough::Hinted)
        } else {
            (Kib::ZERO, KeptThrough::No)
        };
        if s.shrink_while_migrating && !s.preparing_migration {
            // A running migration sheds the buffer too, down to the migration buffer, as
            // far as it does not lie in hinting's whole blocks (beside the headroom kept
            // there): it is free memory the guest touched, dirty in the host, and the
            // migration sends it whole (a shrunk stock guest's idle migration sent 150 MiB
            // of pages against FPR + hinting's 106: docs/migration.md). The balloon takes
            // the smallest free pieces first, the ones hinting cannot skip. Not once the
            // guest writes into its free memory during the migration: a spike gets its
            // buffer back.
            if s.migrating && !self.watch.wrote {
                let whole = if s.hints_free_pages { self.watch.hintable_before.unwrap_or(Kib::ZERO).saturating_sub(kept_headroom) } else { Kib::ZERO };
                let kept_buffer = e.buffer.min(whole.max(self.migration_buffer));
                if kept_buffer < e.buffer {
                    e = Estimate { buffer_shed: e.buffer.saturating_sub(kept_buffer), ..estimate(mem, s.guest_size, s.max, kept_buffer) };
                }
            }
            // Kept, never grown back: a migration keeps at most what the guest still holds.
            e.headroom = if s.migrating { kept_headroom.min(s.guest_size.saturating_sub(e.target)) } else { kept_headroom };
            e.headroom_kept = if e.headroom > Kib::ZERO { why } else { KeptThrough::No };
            e.headroom_shed = if s.migrating && self.watch.wrote { headroom } else { Kib::ZERO };
            e.target = e.target.saturating_add(e.headroom).min(s.max);
        }
        let kept = self.cache_keep.observe(&self.cache_keep_rule, s.file_refaults, mem.file_cache, s.at);
        if !s.preparing_migration {
            e.cache_kept = kept;
            e.target = e.target.saturating_add(kept).min(s.max);
        }
        // What a rinse takes: the free memory kept on top of the need (the buffer and the
        // headroom), not the page cache kept for reading again.
        let free = e.buffer.saturating_add(e.headroom);
        e.rinsed = self.rinse.observe(&self.rinse_rule, e.target, free, s.guest_size, s.migrating || s.preparing_migration, s.at).min(e.target.saturating_sub(Kib::ONE_PAGE));
        e.target = e.target.saturating_sub(e.rinsed);
        Some(Decision { target: e.target, reason: Reason::Estimate(e) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn view(available: u64, committed: u64, active: u64, inactive: u64) -> MemView {
        MemView {
            total: Kib(2_000_000),
            available: Kib(available),
            committed_as: Kib(committed),
            active: Kib(active),
            inactive: Kib(inactive),
            ..Default::default()
        }
    }

    #[test]
    fn a_settled_guest_has_its_buffer_rinsed_for_one_tick() {
        use std::time::Duration;
        let mut p = SwapFree {
            rinse_rule: RinseRule { after: Duration::from_secs(20), every: Duration::from_secs(300), band: Kib::from_mib_saturating(16) },
            ..SwapFree::new(Kib::from_mib_saturating(64))
        };
        let at = |s: u64, size: u64| Sample { guest_size: Kib::from_mib_saturating(size), max: Kib::from_mib_saturating(2048), mem: Some(view(64 * 1024, 0, 0, 0)), at: Duration::from_secs(s), ..Sample::default() };
        let t = |p: &mut SwapFree, s: u64, size: u64| p.decide(&at(s, size)).unwrap().target;
        assert_eq!(t(&mut p, 0, 300), Kib::from_mib_saturating(300));
        assert_eq!(t(&mut p, 10, 300), Kib::from_mib_saturating(300));
        let d = p.decide(&at(20, 300)).unwrap();
        assert_eq!(d.target, Kib::from_mib_saturating(236), "rinsed by the buffer");
        assert!(d.reason.to_string().contains("- rinse 64.0 MiB"), "{}", d.reason);
        // The guest shrank by the buffer, and its available memory with it: back to 300.
        let mut s = at(22, 236);
        s.mem = Some(view(0, 0, 0, 0));
        let mut half = at(21, 270);
        half.mem = Some(view(34 * 1024, 0, 0, 0));
        assert_eq!(p.decide(&half).unwrap().target, Kib::from_mib_saturating(236), "lowered until the balloon gets there");
        assert_eq!(p.decide(&s).unwrap().target, Kib::from_mib_saturating(300), "back once it did");
        assert_eq!(t(&mut p, 60, 300), Kib::from_mib_saturating(300), "not again before rinse_every");
        let mut m = at(400, 300);
        m.migrating = true;
        assert_eq!(p.decide(&m).unwrap().target, Kib::from_mib_saturating(300), "never during a migration");
    }

    #[test]
    fn the_formula_exactly() {
        // current 1 GiB, 800 MiB available, 300 MiB committed beyond 100 MiB resident, 64 MiB buffer.
        let v = view(800 * 1024, 400 * 1024, 60 * 1024, 40 * 1024);
        let e = estimate(&v, Kib::from_mib_saturating(1024), Kib::from_mib_saturating(2048), Kib::from_mib_saturating(64));
        assert_eq!(e.overcommitted, Kib::from_mib_saturating(300));
        assert_eq!(e.target, Kib::from_mib_saturating(1024 - 800 + 300 + 64));
    }

    #[test]
    fn clamps_to_one_page_and_max() {
        let idle = view(900 * 1024, 0, 0, 0);
        assert_eq!(estimate(&idle, Kib::from_mib_saturating(512), Kib::from_mib_saturating(2048), Kib::ZERO).target, Kib(4));
        let spike = view(0, 10_000_000, 0, 0);
        assert_eq!(estimate(&spike, Kib::from_mib_saturating(512), Kib::from_mib_saturating(2048), Kib::ZERO).target, Kib::from_mib_saturating(2048));
    }

    #[test]
    fn policy_needs_a_view_and_adds_the_cache_buffer() {
        let mut p = SwapFree { buffer: Kib::from_mib_saturating(10), cache_buffer: Kib::from_mib_saturating(100), migration_buffer: Kib::from_mib_saturating(2), ..SwapFree::new(Kib::ZERO) };
        let mut s = Sample { guest_size: Kib::from_mib_saturating(1000), max: Kib::from_mib_saturating(2000), ..Sample::default() };
        assert_eq!(p.decide(&s), None);
        let mut v = view(500 * 1024, 0, 0, 0);
        v.cached = Kib::from_mib_saturating(30);
        s.mem = Some(v);
        assert_eq!(p.decide(&s).unwrap().target, Kib::from_mib_saturating(1000 - 500 + 10 + 30));
        s.preparing_migration = true;
        assert_eq!(p.decide(&s).unwrap().target, Kib::from_mib_saturating(1000 - 500 + 2), "the migration buffer, no cache buffer");
    }

    #[test]
    fn memory_freed_before_its_commitment_goes_neither_grows_the_guest_nor_stays_as_headroom() {
        use std::time::Duration;
        let mib = Kib::from_mib_saturating;
        let rule = HeadroomRule { hold: Duration::from_secs(600), fade: Duration::from_secs(60) };
        let mut p = SwapFree { headroom_rule: rule, ..SwapFree::new(mib(64)) };
        // A 1327 MiB guest: `resident` MiB of anonymous memory, `committed` MiB committed,
        // its samples admitted as a host loop admits them.
        let mut o = crate::policy::Overcommit::default();
        let mut at = |secs: u64, committed: u64, resident: u64| Sample {
            at: Duration::from_secs(secs),
            guest_size: mib(1327),
            max: mib(2048),
            mem: Some(o.admit(MemView { available: mib(1327 - resident), committed_as: mib(committed), anon_and_shmem: Some(mib(resident)), ..view(0, 0, 0, 0) })),
            shrink_while_migrating: true,
            ..Sample::default()
        };
        assert_eq!(p.decide(&at(0, 1224, 1224)).unwrap().target, mib(1224 + 64), "a fill of 1 GiB, touched");
        // Its munmap: 600 MiB freed, the commitment still accounted (run/fp2 grew the guest
        // to 1910 MiB here).
        let d = p.decide(&at(1, 1224, 624)).unwrap();
        assert_eq!(d.target, mib(1224 + 64), "the fill's need, kept as headroom, and no more");
        assert!(d.reason.to_string().contains("overcommitted 0.0 MiB (600.0 MiB more being freed"), "{}", d.reason);
        assert_eq!(p.decide(&at(2, 200, 200)).unwrap().target, mib(1224 + 64), "the headroom is the fill's, not more");
    }

    #[test]
    fn headroom_is_shed_by_a_migration_and_a_need_during_one_is_not_remembered() {
        use std::time::Duration;
        let mib = Kib::from_mib_saturating;
        let rule = HeadroomRule { hold: Duration::from_secs(30), fade: Duration::from_secs(60) };
        let mut p = SwapFree { headroom_rule: rule, ..SwapFree::new(mib(64)) };
        // A 2 GiB guest at 1.5 GiB: `used` MiB of it in use.
        let at = |secs: u64, used: u64| Sample {
            at: Duration::from_secs(secs),
            guest_size: mib(1536),
            max: mib(2048),
            mem: Some(view((1536 - used) * 1024, 0, 0, 0)),
            shrink_while_migrating: true,
            ..Sample::default()
        };
        assert_eq!(p.decide(&at(0, 1000)).unwrap().target, mib(1064), "a spike");
        assert_eq!(p.decide(&at(2, 200)).unwrap().target, mib(1064), "freed: kept as headroom");
        let migrating = |secs, used| Sample { migrating: true, ..at(secs, used) };
        assert_eq!(p.decide(&migrating(3, 200)).unwrap().target, mib(200), "a migration sheds it, and the buffer (no hinting)");
        assert_eq!(p.decide(&migrating(4, 1400)).unwrap().target, mib(1400), "a spike during the migration grows the guest (to its need: this view shows no claim, so no write)");
        assert_eq!(p.decide(&migrating(5, 200)).unwrap().target, mib(200), "and is given back when freed (the buffer shed still)");
        assert_eq!(p.decide(&at(6, 200)).unwrap().target, mib(1064), "after the migration: the headroom from before it, not the spike during it");
    }

    #[test]
    fn with_free_page_reporting_a_spike_is_kept_longer() {
        use std::time::Duration;
        let mib = Kib::from_mib_saturating;
        let short = HeadroomRule { hold: Duration::from_secs(30), fade: Duration::from_secs(60) };
        let long = HeadroomRule { hold: Duration::from_secs(600), fade: Duration::from_secs(60) };
        let at = |secs: u64, used: u64, fpr: bool| Sample {
            at: Duration::from_secs(secs),
            guest_size: mib(1536),
            max: mib(2048),
            mem: Some(view((1536 - used) * 1024, 0, 0, 0)),
            shrink_while_migrating: true,
            reports_free_pages: fpr,
            ..Sample::default()
        };
        for (fpr, after_two_minutes) in [(false, 264), (true, 1064)] {
            let mut p = SwapFree { headroom_rule: short, headroom_fpr_rule: long, ..SwapFree::new(mib(64)) };
            assert_eq!(p.decide(&at(0, 1000, fpr)).unwrap().target, mib(1064), "a spike");
            assert_eq!(p.decide(&at(20, 200, fpr)).unwrap().target, mib(1064), "freed: kept as headroom either way");
            assert_eq!(p.decide(&at(120, 200, fpr)).unwrap().target, mib(after_two_minutes), "two minutes later, free page reporting {fpr}");
        }
        // The long hold ends too, and a migration sheds it as the short one.
        let mut p = SwapFree { headroom_rule: short, headroom_fpr_rule: long, ..SwapFree::new(mib(64)) };
        p.decide(&at(0, 1000, true));
        assert_eq!(p.decide(&at(700, 200, true)).unwrap().target, mib(264));
        p.decide(&at(800, 1000, true));
        assert_eq!(p.decide(&Sample { migrating: true, ..at(801, 200, true) }).unwrap().target, mib(200), "and the buffer");
    }

    #[test]
    fn a_migration_keeps_a_headroom_free_page_reporting_gave_back() {
        let mib = Kib::from_mib_saturating;
        let long = HeadroomRule { hold: Duration::from_secs(600), fade: Duration::from_secs(60) };
        let drain = ReportDrain { delay: ReportDrain::KERNEL_DELAY, per_s: mib(100) };
        let at = |secs: u64, size: u64, used: u64, migrating: bool| Sample {
            at: Duration::from_secs(secs),
            guest_size: mib(size),
            max: mib(2048),
            mem: Some(view((size - used) * 1024, 0, 0, 0)),
            shrink_while_migrating: true,
            reports_free_pages: true,
            migrating,
            ..Sample::default()
        };
        let mut p = SwapFree { headroom_fpr_rule: long, report_drain: drain, ..SwapFree::new(mib(64)) };
        assert_eq!(p.decide(&at(0, 1536, 1000, false)).unwrap().target, mib(1064), "a spike");
        assert_eq!(p.decide(&at(1, 1064, 200, false)).unwrap().target, mib(1064), "freed: 800 MiB of headroom");
        // 800 MiB at 100 MiB/s after the kernel's 2 s: reported 10 s after the guest was
        // last seen to move (its size fell with the free at 1 s).
        p.decide(&at(5, 1064, 200, false));
        p.decide(&at(9, 1064, 200, false));
        let d = p.decide(&at(10, 1064, 200, true)).unwrap();
        assert_eq!(d.target, mib(200), "not reported yet: the migration sheds it, and the buffer");
        let d = p.decide(&at(11, 1064, 200, true)).unwrap();
        assert_eq!(d.target, mib(1000), "reported: kept through the migration; the buffer (never reported: under reporting's threshold) shed");
        assert!(d.reason.to_string().contains("given back to the host by free page reporting"), "{}", d.reason);
        assert_eq!(p.decide(&at(12, 600, 200, true)).unwrap().target, mib(600), "shed already in part: kept, never grown back");
        assert_eq!(p.decide(&at(13, 264, 200, true)).unwrap().target, mib(264));
        // A spike inside the headroom: its memory is fresh though the headroom is old.
        p.decide(&at(95, 1064, 200, false));
        p.decide(&at(99, 1064, 200, false));
        p.decide(&at(100, 1064, 700, false));
        p.decide(&at(101, 1064, 200, false));
        assert_eq!(p.decide(&at(105, 1064, 200, true)).unwrap().target, mib(200), "4 s after the spike inside it: shed");
        // Unseen: a loop that did not sample for a while knows nothing of the free memory.
        p.decide(&at(300, 1064, 200, false));
        assert_eq!(p.decide(&at(301, 1064, 200, true)).unwrap().target, mib(200), "after a gap: shed");
        let mut off = SwapFree { headroom_fpr_rule: long, ..SwapFree::new(mib(64)) };
        off.decide(&at(0, 1536, 1000, false));
        assert_eq!(off.decide(&at(100, 1064, 200, true)).unwrap().target, mib(200), "rule off: always shed");
        let mut stock = SwapFree { headroom_rule: long, report_drain: drain, ..SwapFree::new(mib(64)) };
        stock.decide(&Sample { reports_free_pages: false, ..at(0, 1536, 1000, false) });
        assert_eq!(stock.decide(&Sample { reports_free_pages: false, ..at(100, 1064, 200, true) }).unwrap().target, mib(200), "no reporting: shed");
    }

    #[test]
    fn a_spike_during_a_migration_sheds_the_headroom_it_kept() {
        let mib = Kib::from_mib_saturating;
        let long = HeadroomRule { hold: Duration::from_secs(600), fade: Duration::from_secs(60) };
        let drain = ReportDrain { delay: ReportDrain::KERNEL_DELAY, per_s: mib(1000) };
        // `anon` MiB of the guest's memory is its programs' (all it uses), `held` MiB more
        // is held by free page hinting: gone from `available`, not claimed.
        let at = |secs: u64, size: u64, anon: u64, held: u64, migrating: bool| Sample {
            at: Duration::from_secs(secs),
            guest_size: mib(size),
            max: mib(2048),
            mem: Some(MemView { anon_and_shmem: Some(mib(anon)), file_cache: Some(mib(0)), committed_as: mib(anon), ..view((size - anon - held) * 1024, 0, 0, 0) }),
            shrink_while_migrating: true,
            reports_free_pages: true,
            migrating,
            ..Sample::default()
        };
        let policy = || SwapFree { headroom_fpr_rule: long, report_drain: drain, ..SwapFree::new(mib(64)) };
        let mut p = policy();
        p.decide(&at(0, 1536, 1200, 0, false));
        for t in [1, 4, 7, 10] {
            p.decide(&at(t, 1264, 200, 0, false));
        }
        let d = p.decide(&at(11, 1264, 200, 0, true)).unwrap();
        assert_eq!(d.target, mib(1200), "reported: the 1 GiB headroom is kept through the migration, the buffer shed");
        assert_eq!(p.decide(&at(12, 1264, 200, 900, true)).unwrap().target, mib(1200), "hinting holds its blocks: no write");
        assert_eq!(p.decide(&at(13, 1264, 1100, 0, true)).unwrap().target, mib(1164), "a spike inside the headroom: the need, no headroom on top");
        let d = p.decide(&at(15, 1264, 200, 0, true)).unwrap();
        assert_eq!(d.target, mib(264), "freed: shed before the migration sends the spike's pages");
        assert!(matches!(d.reason, Reason::Estimate(e) if e.headroom_shed == mib(1000) && e.headroom == Kib::ZERO), "{:?}", d.reason);
        assert!(d.reason.to_string().ends_with("(headroom 1000.0 MiB shed: the guest wrote into its free memory during the migration)"), "{}", d.reason);
        assert_eq!(p.decide(&at(16, 300, 200, 0, true)).unwrap().target, mib(264), "for the rest of the migration");
        let d = p.decide(&at(17, 264, 200, 0, false)).unwrap();
        assert_eq!(d.target, mib(1264), "after it: the headroom from before it");
        assert!(!d.reason.to_string().contains("shed"), "{}", d.reason);
        // Unseen before the migration: nothing says its free memory is clean.
        let mut p = policy();
        let d = p.decide(&at(11, 1264, 200, 0, true)).unwrap();
        assert_eq!(d.target, mib(264));
        assert!(p.watch.wrote);
    }

    #[test]
    fn a_running_migration_sheds_the_buffer_hinting_would_not_skip() {
        let mib = Kib::from_mib_saturating;
        // A guest shrunk to 300 MiB, 200 of them used, `whole` MiB of its free memory in
        // hinting's 4 MiB blocks, `anon` MiB its programs' (what it claims).
        let at = |secs: u64, used: u64, whole: u64, migrating: bool| Sample {
            at: Duration::from_secs(secs),
            guest_size: mib(300),
            max: mib(2048),
            mem: Some(MemView { free_in_hint_blocks: Some(mib(whole)), anon_and_shmem: Some(mib(used)), file_cache: Some(mib(0)), ..view((300 - used) * 1024, 0, 0, 0) }),
            shrink_while_migrating: true,
            hints_free_pages: true,
            migrating,
            ..Sample::default()
        };
        let mut p = SwapFree::new(mib(64));
        assert_eq!(p.decide(&at(0, 200, 16, false)).unwrap().target, mib(264));
        let d = p.decide(&at(1, 200, 0, true)).unwrap();
        assert_eq!(d.target, mib(216), "the 48 MiB of the buffer in pieces shed; the 16 in whole blocks kept");
        assert!(matches!(d.reason, Reason::Estimate(e) if e.buffer == mib(16) && e.buffer_shed == mib(48)), "{:?}", d.reason);
        assert!(d.reason.to_string().contains("+ buffer 16.0 MiB (48.0 MiB of the buffer shed while the migration runs: free memory it would send)"), "{}", d.reason);
        assert_eq!(p.decide(&at(2, 260, 0, true)).unwrap().target, mib(324), "the guest wrote into its free memory: its buffer back");
        assert_eq!(p.decide(&at(3, 200, 16, false)).unwrap().target, mib(264), "after the migration: the buffer");
        // The migration buffer is the least kept, and a migration being prepared keeps it.
        let mut p = SwapFree { migration_buffer: mib(8), ..SwapFree::new(mib(64)) };
        p.decide(&at(0, 200, 0, false));
        assert_eq!(p.decide(&at(1, 200, 0, true)).unwrap().target, mib(208));
        assert_eq!(p.decide(&Sample { preparing_migration: true, ..at(2, 200, 0, true) }).unwrap().target, mib(208));
        // Where the hypervisor lets nothing shrink during a migration, nothing is shed.
        let mut p = SwapFree::new(mib(64));
        p.decide(&at(0, 200, 0, false));
        let d = p.decide(&Sample { shrink_while_migrating: false, ..at(1, 200, 0, true) }).unwrap();
        assert!(matches!(d.reason, Reason::Estimate(e) if e.buffer_shed == Kib::ZERO), "{:?}", d.reason);
    }

    #[test]
    fn a_hinted_migration_keeps_the_headroom_in_hintings_whole_blocks_once_the_guest_is_still() {
        let mib = Kib::from_mib_saturating;
        let long = HeadroomRule { hold: Duration::from_secs(600), fade: Duration::from_secs(60) };
        // 1 GiB guest of which 200 MiB used; `whole` MiB of the free memory in 4 MiB blocks.
        let at = |secs: u64, size: u64, used: u64, whole: u64, migrating: bool| Sample {
            at: Duration::from_secs(secs),
            guest_size: mib(size),
            max: mib(2048),
            mem: Some(MemView { free_in_hint_blocks: Some(mib(whole)), ..view((size - used) * 1024, 0, 0, 0) }),
            shrink_while_migrating: true,
            hints_free_pages: true,
            migrating,
            ..Sample::default()
        };
        let policy = || SwapFree { headroom_rule: long, hinted_keep_after: Some(Duration::from_secs(3)), ..SwapFree::new(mib(64)) };
        let mut p = policy();
        assert_eq!(p.decide(&at(0, 1536, 1000, 0, false)).unwrap().target, mib(1064), "a spike");
        p.decide(&at(1, 1064, 200, 700, false));
        // While the migration runs hinting holds the blocks: the guest shows none whole.
        let d = p.decide(&at(5, 1064, 200, 0, true)).unwrap();
        assert_eq!(d.target, mib(200 + 700), "700 of the 800 MiB headroom lay in whole blocks: kept; the pieces shed, and the buffer (no whole block left for it)");
        assert!(matches!(d.reason, Reason::Estimate(e) if e.headroom == mib(700) && e.headroom_kept == KeptThrough::Hinted), "{:?}", d.reason);
        assert!(d.reason.to_string().contains("free in whole blocks that free page hinting skips"), "{}", d.reason);
        assert_eq!(p.decide(&at(6, 1064, 200, 0, true)).unwrap().target, mib(900), "not shed later for what hinting holds");
        assert_eq!(p.decide(&at(7, 900, 200, 0, true)).unwrap().target, mib(900), "shed already in part: never grown back");
        // Too soon after the free: hinting misses much of it, and the headroom is shed.
        let mut p = policy();
        p.decide(&at(0, 1536, 1000, 0, false));
        p.decide(&at(1, 1064, 200, 800, false));
        assert_eq!(p.decide(&at(2, 1064, 200, 0, true)).unwrap().target, mib(264), "still for 1 s: the headroom shed; the buffer lay in whole blocks: kept");
        // Without hinting, or with the rule off, as before.
        for (hints, after) in [(false, Some(Duration::from_secs(3))), (true, None)] {
            let mut p = SwapFree { hinted_keep_after: after, ..policy() };
            let h = |s: Sample| Sample { hints_free_pages: hints, ..s };
            p.decide(&h(at(0, 1536, 1000, 0, false)));
            p.decide(&h(at(1, 1064, 200, 800, false)));
            assert_eq!(p.decide(&h(at(10, 1064, 200, 0, true))).unwrap().target, mib(if hints { 264 } else { 200 }), "hinting {hints}, rule {after:?}: the headroom shed, the buffer kept as far as it lay in whole blocks");
        }
    }

    #[test]
    fn a_rinse_takes_the_headroom_with_the_buffer() {
        use std::time::Duration;
        let mib = Kib::from_mib_saturating;
        let mut p = SwapFree {
            headroom_rule: HeadroomRule { hold: Duration::from_secs(600), fade: Duration::from_secs(60) },
            rinse_rule: RinseRule { after: Duration::from_secs(20), every: Duration::from_secs(600), band: mib(16) },
            ..SwapFree::new(mib(64))
        };
        let at = |secs: u64, size: u64, used: u64| Sample {
            at: Duration::from_secs(secs),
            guest_size: mib(size),
            max: mib(2048),
            mem: Some(view((size - used) * 1024, 0, 0, 0)),
            shrink_while_migrating: true,
            ..Sample::default()
        };
        assert_eq!(p.decide(&at(0, 1536, 1000)).unwrap().target, mib(1064), "a spike");
        assert_eq!(p.decide(&at(2, 1064, 200)).unwrap().target, mib(1064), "freed: 800 MiB kept as headroom");
        let d = p.decide(&at(22, 1064, 200)).unwrap();
        assert_eq!(d.target, mib(200), "settled for 20 s: the buffer and the headroom rinsed");
        assert!(d.reason.to_string().contains("- rinse 864.0 MiB"), "{}", d.reason);
        assert_eq!(p.decide(&at(24, 210, 200)).unwrap().target, mib(1064), "the balloon got there: all of it back");
    }

    #[test]
    fn cache_read_again_is_kept_but_not_while_a_migration_is_prepared() {
        use std::time::Duration;
        let rule = CacheKeepRule { max: Kib::from_mib_saturating(256), time: HeadroomRule { hold: Duration::from_secs(60), fade: Duration::from_secs(60) } };
        let mut p = SwapFree { cache_keep_rule: rule, ..SwapFree::new(Kib::from_mib_saturating(10)) };
        let mut s = Sample { guest_size: Kib::from_mib_saturating(1000), max: Kib::from_mib_saturating(2000), mem: Some(view(500 * 1024, 0, 0, 0)), file_refaults: Some(1_000), ..Sample::default() };
        let lean = Kib::from_mib_saturating(1000 - 500 + 10);
        assert_eq!(p.decide(&s).unwrap().target, lean, "the first count is a base");
        s.at = Duration::from_secs(1);
        s.file_refaults = Some(1_000 + 30 * 256);
        let d = p.decide(&s).unwrap();
        assert_eq!(d.target, lean.saturating_add(Kib::from_mib_saturating(30)), "30 MiB read again after eviction: room for it");
        assert!(d.reason.to_string().ends_with("+ cache kept 30.0 MiB (read again after eviction)"), "{}", d.reason);
        s.preparing_migration = true;
        assert_eq!(p.decide(&s).unwrap().target, Kib::from_mib_saturating(1000 - 500), "a migration sends no cache");
        s.preparing_migration = false;
        s.file_refaults = None;
        assert_eq!(p.decide(&s).unwrap().target, lean.saturating_add(Kib::from_mib_saturating(30)), "kept through the migration");
    }

    /// A guest of 768 MiB whose 320 MiB working set is half in its zram swap: 100 MiB
    /// resident anon, 160 MiB in swap, 500 MiB available.
    fn swapping() -> MemView {
        MemView {
            total: Kib::from_mib_saturating(730),
            available: Kib::from_mib_saturating(500),
            committed_as: Kib::from_mib_saturating(340),
            active: Kib::from_mib_saturating(120),
            inactive: Kib::from_mib_saturating(60),
            swap_total: Kib::from_mib_saturating(384),
            swap_free: Kib::from_mib_saturating(224),
            ..Default::default()
        }
    }

    #[test]
    fn swapped_memory_is_demand() {
        let v = swapping();
        let (size, max, buffer) = (Kib::from_mib_saturating(768), Kib::from_mib_saturating(768), Kib::from_mib_saturating(64));
        let e = estimate(&v, size, max, buffer);
        assert_eq!(e.swapped, Kib::from_mib_saturating(160));
        assert_eq!(e.overcommitted, Kib::ZERO, "committed memory in swap is backed, not overcommitted");
        assert_eq!(e.target, Kib::from_mib_saturating(768 - 500 + 160 + 64));
        // The swap-blind formula (size − available + overcommitted + buffer) shrank the
        // same guest to 332 MiB, into swap again.
        let blind = size.saturating_add(e.overcommitted).saturating_add(buffer).saturating_sub(v.available);
        assert_eq!(blind, Kib::from_mib_saturating(332));
        assert_eq!(e.target.saturating_sub(blind), e.swapped);
    }

    #[test]
    fn a_swapping_guest_is_not_shrunk_below_its_working_set() {
        // The working set (320 MiB) fits a 768 MiB guest: the policy's target covers it
        // whether its pages are resident or still in swap, and falls as they come back in.
        let mut p = SwapFree::new(Kib::from_mib_saturating(64));
        let mut s = Sample { guest_size: Kib::from_mib_saturating(768), max: Kib::from_mib_saturating(768), mem: Some(swapping()), ..Sample::default() };
        let half_in = p.decide(&s).unwrap().target;
        assert!(half_in >= Kib::from_mib_saturating(100 + 160 + 64), "{half_in}");
        // All back in: 260 MiB more resident anon, swap free again, 260 less available.
        s.mem = Some(MemView { available: Kib::from_mib_saturating(240), active: Kib::from_mib_saturating(380), swap_free: Kib::from_mib_saturating(384), ..swapping() });
        let all_in = p.decide(&s).unwrap().target;
        assert_eq!(all_in, Kib::from_mib_saturating(768 - 240 + 64));
        assert!(all_in >= half_in, "pages coming back in never make the guest look smaller: {half_in} -> {all_in}");
        match p.decide(&s).unwrap().reason {
            Reason::Estimate(e) => assert_eq!(e.swapped, Kib::ZERO),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn swap_on_a_captured_guest_fixture() {
        use crate::procfs::{fixtures, parse_meminfo};
        // A 384 MiB guest 25 s into a 320 MiB working set with a 384 MiB zram swap: 67 MiB
        // in swap, MemAvailable 5.7 MiB. The swap-blind target was its present size plus
        // the buffer; the swap-aware one asks for what is in swap on top.
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/linux-6.1-guest-zram-swapping/meminfo")).unwrap();
        let v = MemView::from_meminfo(&parse_meminfo(&text).unwrap()).unwrap();
        assert_eq!(v.swapped(), Kib(393212 - 324348));
        let size = Kib::from_mib_saturating(384);
        let e = estimate(&v, size, Kib::from_mib_saturating(768), Kib::from_mib_saturating(64));
        // Committed_AS 335288 − (AnonPages 262088 + Shmem 3548 + swapped 68864).
        assert_eq!(e.overcommitted, Kib(335288 - (262088 + 3548 + 68864)));
        assert_eq!(e.target, Kib(size.0 - 5864 + 788 + (393212 - 324348) + 64 * 1024));
        assert!(e.target > size.saturating_add(Kib::from_mib_saturating(64)), "grows by what is in swap: {}", e.target);
        for (source, text) in fixtures::all("meminfo") {
            let v = MemView::from_meminfo(&parse_meminfo(&text).unwrap()).unwrap();
            let e = estimate(&v, Kib::from_mib_saturating(1024), Kib::from_mib_saturating(4096), Kib::ZERO);
            assert_eq!(e.swapped, v.swap_total.saturating_sub(v.swap_free), "{source}");
            let blind = Kib::from_mib_saturating(1024).saturating_add(e.overcommitted).saturating_sub(v.available).clamp(Kib::ONE_PAGE, Kib::from_mib_saturating(4096));
            assert_eq!(e.target, blind.saturating_add(e.swapped).min(Kib::from_mib_saturating(4096)).max(blind), "{source}");
        }
    }

    proptest! {
        #[test]
        fn more_swapped_never_lowers_the_target(a in 0u64..1 << 30, total in 0u64..1 << 30, used in 0u64..1 << 30, more in 0u64..1 << 30, current in 0u64..1 << 31) {
            let used = used.min(total);
            let more = more.min(total - used);
            let v = |u: u64| MemView { available: Kib(a), swap_total: Kib(total), swap_free: Kib(total - u), ..Default::default() };
            let lo = estimate(&v(used), Kib(current), Kib(1 << 32), Kib(0)).target;
            let hi = estimate(&v(used + more), Kib(current), Kib(1 << 32), Kib(0)).target;
            prop_assert!(lo <= hi);
        }
        #[test]
        fn target_is_always_within_bounds(avail in 0u64..1 << 40, committed in 0u64..1 << 40, active in 0u64..1 << 40,
                                          inactive in 0u64..1 << 40, current in 0u64..1 << 40, max in 4u64..1 << 40, buffer in 0u64..1 << 30) {
            let e = estimate(&view(avail, committed, active, inactive), Kib(current), Kib(max), Kib(buffer));
            prop_assert!(e.target >= Kib(4) && e.target <= Kib(max));
        }
        #[test]
        fn more_available_never_raises_the_target(a in 0u64..1 << 30, extra in 0u64..1 << 30, current in 0u64..1 << 31) {
            let lo = estimate(&view(a + extra, 0, 0, 0), Kib(current), Kib(1 << 32), Kib(0)).target;
            let hi = estimate(&view(a, 0, 0, 0), Kib(current), Kib(1 << 32), Kib(0)).target;
            prop_assert!(lo <= hi);
        }
    }
}
