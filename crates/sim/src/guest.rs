//! One guest's memory, in KiB, and the kernel's part in moving it: the page allocator's
//! sources for a program's writes (free pages, page cache, the balloon through the
//! last-resort hook, swap, deflate-on-oom, or the OOM killer), the balloon worker,
//! free page reporting and swap-in.
//!
//! Invariant (checked by [`Guest::accounted`]): `max = balloon + kernel + (anon − swapped) +
//! cache + free_clean + free_dirty`. Free pages are *dirty* when they still hold data a
//! program wrote (a migration sends them) and *clean* when they hold none: never written,
//! given back by the balloon, or discarded by free page reporting.

use autoballoon_core::policy::MemView;
use autoballoon_core::units::Kib;
use std::collections::VecDeque;

/// How the guest kernel and its balloon behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kernel {
    /// The patched balloon: the allocator's last-resort hook, 2 MiB units.
    pub patched: bool,
    /// The stock driver's deflate-on-oom: 1 MiB back per OOM round.
    pub deflate_on_oom: bool,
    /// `vm.overcommit_memory = 1` (the agent sets it): no malloc is refused.
    pub overcommit_always: bool,
    /// /proc/meminfo shows the full size whatever the balloon holds.
    pub transparent: bool,
    /// Free page reporting is on.
    pub fpr: bool,
}

/// A guest's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestConfig {
    pub max: Kib,
    /// Unreclaimable kernel memory: struct page plus the rest.
    pub kernel: Kib,
    /// Of which pages that hold no data (reserved, never written): a QEMU migration sends
    /// them as zero pages.
    pub kernel_zero: Kib,
    /// Resident daemons.
    pub daemons: Kib,
    /// Page cache the system needs; below it, it reads the files back.
    pub hot_cache: Kib,
    /// Committed by the daemons and never written (in Committed_AS).
    pub base_uncommitted: Kib,
    pub swap_total: Kib,
    pub wmark_min: Kib,
    pub wmark_low: Kib,
}

impl GuestConfig {
    /// Watermarks as Linux sets them: `min_free_kbytes = sqrt(16 · lowmem KiB)`, at most
    /// 256 MiB; low = min · 5/4.
    pub fn with_watermarks(mut self) -> GuestConfig {
        let min = ((16.0 * self.max.0 as f64).sqrt() as u64).clamp(128, 262_144);
        self.wmark_min = Kib(min);
        self.wmark_low = Kib(min + min / 4);
        self
    }
}

/// Free dirty pages, by when they were freed: recent ones (not reportable yet) and old ones.
#[derive(Debug, Clone, Default, PartialEq)]
struct FreeDirty {
    old: Kib,
    recent: VecDeque<(f64, Kib)>,
    recent_total: Kib,
}

impl FreeDirty {
    fn total(&self) -> Kib {
        self.old.saturating_add(self.recent_total)
    }
    fn push(&mut self, now: f64, k: Kib) {
        if k.0 == 0 {
            return;
        }
        self.recent_total = self.recent_total.saturating_add(k);
        match self.recent.back_mut() {
            Some((t, v)) if (*t - now).abs() < 1e-9 => *v = v.saturating_add(k),
            _ => self.recent.push_back((now, k)),
        }
    }
    fn age(&mut self, now: f64, delay: f64) {
        while let Some(&(t, k)) = self.recent.front() {
            if t + delay > now + 1e-9 {
                break;
            }
            self.recent.pop_front();
            self.recent_total = self.recent_total.saturating_sub(k);
            self.old = self.old.saturating_add(k);
        }
    }
    /// Takes up to `k`, the most recently freed first (the allocator's hot pages).
    fn take(&mut self, k: Kib) -> Kib {
        let t = take_newest(&mut self.recent, k);
        self.recent_total = self.recent_total.saturating_sub(t);
        let mut left = k.saturating_sub(t);
        let t = self.old.min(left);
        self.old = self.old.saturating_sub(t);
        left = left.saturating_sub(t);
        k.saturating_sub(left)
    }
    fn take_old(&mut self, k: Kib) -> Kib {
        let t = self.old.min(k);
        self.old = self.old.saturating_sub(t);
        t
    }
}

/// Takes up to `k` from amounts recorded by time, the newest first; returns what it took.
fn take_newest(q: &mut VecDeque<(f64, Kib)>, k: Kib) -> Kib {
    let mut left = k;
    while left.0 > 0 {
        let Some((_, v)) = q.back_mut() else {
            break;
        };
        let t = (*v).min(left);
        *v = v.saturating_sub(t);
        left = left.saturating_sub(t);
        if v.0 == 0 {
            q.pop_back();
        }
    }
    k.saturating_sub(left)
}

/// Counters of one guest.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GuestStats {
    /// Memory the hook served from the balloon.
    pub hook: Kib,
    pub swap_out: Kib,
    pub swap_in: Kib,
    pub doo_rounds: u64,
    /// Memory written that the host had to fault in (cold pages).
    pub refault: Kib,
    pub reported: Kib,
    /// Memory the balloon took.
    pub inflated: Kib,
    pub deflated: Kib,
}

/// What the allocator found for a write of `want`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Served {
    pub got: Kib,
    /// Of which from the balloon (hook or deflate-on-oom).
    pub from_balloon: Kib,
    /// Memory ran out with time left in the tick and nothing that frees more: an OOM.
    pub exhausted: bool,
}

/// Per-tick budgets of the rate-limited sources.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budgets {
    pub hook: Kib,
    pub swap: Kib,
    pub doo_rounds: u64,
    pub refault_factor: f64,
    /// What a page the hook serves costs, in warm pages.
    pub hook_factor: f64,
}

/// A guest's memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Guest {
    pub cfg: GuestConfig,
    pub kernel: Kernel,
    pub balloon: Kib,
    /// Where the balloon worker drives the balloon (`max − target size`).
    pub balloon_target: Kib,
    /// Anonymous memory: daemons and programs, in RAM or swap.
    pub anon: Kib,
    pub swapped: Kib,
    pub cache: Kib,
    /// Committed by programs and not yet written.
    pub untouched: Kib,
    pub free_clean: Kib,
    free_dirty: FreeDirty,
    /// Programs' frees of the last minute, by time: free page hinting misses part of what
    /// was freed last ([`Guest::free_unhintable`]).
    releases: VecDeque<(f64, Kib)>,
    pub stats: GuestStats,
    next_report: f64,
}

const MIB: u64 = 1024;
const UNIT_2M: u64 = 2 * MIB;

impl Guest {
    /// A freshly booted guest: kernel, daemons and cache in memory, the rest never written.
    pub fn boot(cfg: GuestConfig, kernel: Kernel, cold_cache: Kib) -> Guest {
        let fixed = cfg.kernel.saturating_add(cfg.daemons).min(cfg.max);
        let cache = cfg
            .hot_cache
            .saturating_add(cold_cache)
            .min(cfg.max.saturating_sub(fixed));
        Guest {
            cfg,
            kernel,
            balloon: Kib::ZERO,
            balloon_target: Kib::ZERO,
            anon: cfg.daemons.min(cfg.max.saturating_sub(cfg.kernel)),
            swapped: Kib::ZERO,
            cache,
            untouched: Kib::ZERO,
            free_clean: cfg.max.saturating_sub(fixed).saturating_sub(cache),
            free_dirty: FreeDirty::default(),
            releases: VecDeque::new(),
            stats: GuestStats::default(),
            next_report: 0.0,
        }
    }

    /// The guest booted with the balloon already holding all but `size` (QEMU's
    /// `-device virtio-balloon` set before the guest runs, Xen's `memory` below `maxmem`):
    /// taken from memory never written.
    pub fn with_initial_size(mut self, size: Kib) -> Guest {
        let b = self.cfg.max.saturating_sub(size).min(self.free_clean);
        self.balloon = b;
        self.balloon_target = b;
        self.free_clean = self.free_clean.saturating_sub(b);
        self
    }

    /// The guest's logical size: configured memory less the balloon.
    pub fn size(&self) -> Kib {
        self.cfg.max.saturating_sub(self.balloon)
    }
    pub fn free_dirty(&self) -> Kib {
        self.free_dirty.total()
    }
    /// Takes up to `k` of the free pages that hold data, the most recently freed first
    /// (the allocator's hot pages), from the record of recent frees too.
    fn take_free_dirty(&mut self, k: Kib) -> Kib {
        let got = self.free_dirty.take(k);
        take_newest(&mut self.releases, got);
        got
    }

    /// Of the free pages that hold data, those a round of free page hinting misses: up
    /// to `miss` of what programs freed in the last `miss_s` (`hint_miss_mib`: after a 1.2
    /// GiB spike hinting alone sent ~70 MiB more than idle for 4 s, less at 8 s; neither
    /// hinting nor reporting reaches those pages, which the model does not name).
    pub fn free_unhintable(&self, now: f64, miss: Kib, miss_s: f64) -> Kib {
        self.releases
            .iter()
            .filter(|(t, _)| *t + miss_s > now + 1e-9)
            .fold(Kib::ZERO, |a, (_, k)| a.saturating_add(*k))
            .min(miss)
            .min(self.free_dirty())
    }
    pub fn free(&self) -> Kib {
        self.free_clean.saturating_add(self.free_dirty.total())
    }
    /// Anonymous memory in RAM.
    pub fn ram_anon(&self) -> Kib {
        self.anon.saturating_sub(self.swapped)
    }
    /// Pages holding data (what a QEMU migration sends in full).
    pub fn written(&self) -> Kib {
        self.size()
            .saturating_sub(self.free_clean)
            .saturating_sub(self.cfg.kernel_zero.min(self.cfg.kernel))
    }
    /// Every KiB of `max` is somewhere: the model's invariant.
    pub fn accounted(&self) -> bool {
        let sum = [
            self.balloon,
            self.cfg.kernel,
            self.ram_anon(),
            self.cache,
            self.free_clean,
            self.free_dirty.total(),
        ]
        .iter()
        .fold(0u128, |a, k| a + u128::from(k.0));
        sum == u128::from(self.cfg.max.0)
            && self.swapped <= self.anon
            && self.swapped <= self.cfg.swap_total
    }

    /// The guest's /proc/meminfo as a policy sees it.
    pub fn mem_view(&self) -> MemView {
        let free = self.free();
        let low = self.cfg.wmark_low;
        // MemAvailable: free above the low watermark plus the page cache that can go.
        let available = free.saturating_sub(low).saturating_add(
            self.cache
                .saturating_sub(self.cache.min(Kib(self.cache.0 / 2)).min(low)),
        );
        let total = if self.kernel.transparent || self.kernel.deflate_on_oom {
            self.cfg.max
        } else {
            self.size()
        };
        MemView {
            total: total.saturating_sub(self.cfg.kernel.min(total)),
            free,
            available,
            committed_as: self
                .anon
                .saturating_add(self.untouched)
                .saturating_add(self.cfg.base_uncommitted),
            active: self.ram_anon().saturating_add(Kib(self.cache.0 / 2)),
            inactive: Kib(self.cache.0 - self.cache.0 / 2),
            swap_total: self.cfg.swap_total,
            swap_free: self.cfg.swap_total.saturating_sub(self.swapped),
            cached: self.cache,
            anon_and_shmem: Some(self.ram_anon()),
            file_cache: Some(self.cache),
            // The model has no buddy allocator (and no free page hinting).
            free_in_hint_blocks: None,
            freeing: Kib::ZERO,
        }
    }

    /// The largest single malloc the overcommit rule allows (none: any). Heuristic
    /// overcommit refuses one larger than MemTotal plus swap.
    pub fn commit_limit(&self) -> Option<Kib> {
        if self.kernel.overcommit_always {
            return None;
        }
        let total = if self.kernel.transparent || self.kernel.deflate_on_oom {
            self.cfg.max
        } else {
            self.size()
        };
        Some(total.saturating_add(self.cfg.swap_total))
    }

    /// Programs committed `k` (malloc).
    pub fn commit(&mut self, k: Kib) {
        self.untouched = self.untouched.saturating_add(k);
    }

    /// Programs gave back `resident` written memory and `untouched` committed memory at `now`.
    pub fn release(&mut self, now: f64, resident: Kib, untouched: Kib) {
        self.untouched = self.untouched.saturating_sub(untouched);
        let resident = resident.min(self.anon.saturating_sub(self.cfg.daemons.min(self.anon)));
        if resident.0 == 0 {
            return;
        }
        // Its part in swap goes with it, in proportion.
        let in_swap = Kib((u128::from(self.swapped.0) * u128::from(resident.0)
            / u128::from(self.anon.0.max(1))) as u64)
        .min(self.swapped);
        self.swapped = self.swapped.saturating_sub(in_swap);
        self.anon = self.anon.saturating_sub(resident);
        self.free_dirty.push(now, resident.saturating_sub(in_swap));
        while self.releases.front().is_some_and(|(t, _)| *t + 60.0 < now) {
            self.releases.pop_front();
        }
        self.releases.push_back((now, resident.saturating_sub(in_swap)));
    }

    /// The balloon worker gives back toward its target; returns what it gave.
    pub fn deflate(&mut self, dt: f64, gib_s: f64) -> Kib {
        if self.balloon <= self.balloon_target {
            return Kib::ZERO;
        }
        let k = self
            .balloon
            .saturating_sub(self.balloon_target)
            .min(rate(gib_s, dt));
        self.balloon = self.balloon.saturating_sub(k);
        self.free_clean = self.free_clean.saturating_add(k);
        self.stats.deflated = self.stats.deflated.saturating_add(k);
        k
    }

    /// The balloon worker takes toward its target: free pages above the min watermark, then
    /// page cache; a stock kernel with swap pushes anonymous memory out for it too (up to the
    /// swap budget). Returns (taken, of which dirty free pages).
    pub fn inflate(&mut self, dt: f64, gib_s: f64, swap_budget: &mut Kib) -> (Kib, Kib) {
        if self.balloon >= self.balloon_target {
            return (Kib::ZERO, Kib::ZERO);
        }
        let mut want = self
            .balloon_target
            .saturating_sub(self.balloon)
            .min(rate(gib_s, dt));
        if self.kernel.patched {
            want = Kib(want.0 / UNIT_2M * UNIT_2M);
        }
        let mut got = Kib::ZERO;
        let spare = self.free().saturating_sub(self.cfg.wmark_min);
        let dirty = self.take_free_dirty(want.min(spare));
        got = got.saturating_add(dirty);
        let clean = self
            .free_clean
            .min(want.saturating_sub(got))
            .min(spare.saturating_sub(dirty));
        self.free_clean = self.free_clean.saturating_sub(clean);
        got = got.saturating_add(clean);
        let c = self.cache.min(want.saturating_sub(got));
        self.cache = self.cache.saturating_sub(c);
        got = got.saturating_add(c);
        if !self.kernel.patched && self.cfg.swap_total > self.swapped {
            let s = want
                .saturating_sub(got)
                .min(*swap_budget)
                .min(self.cfg.swap_total.saturating_sub(self.swapped))
                .min(self.ram_anon().saturating_sub(self.cfg.daemons));
            self.swapped = self.swapped.saturating_add(s);
            *swap_budget = swap_budget.saturating_sub(s);
            self.stats.swap_out = self.stats.swap_out.saturating_add(s);
            got = got.saturating_add(s);
        }
        if self.kernel.patched {
            // Whole 2 MiB units only: what does not fill one goes back.
            let over = Kib(got.0 % UNIT_2M);
            got = got.saturating_sub(over);
            self.free_clean = self.free_clean.saturating_add(over);
        }
        self.balloon = self.balloon.saturating_add(got);
        self.stats.inflated = self.stats.inflated.saturating_add(got);
        (got, dirty.min(got))
    }

    /// Finds memory for `want` KiB of writes in one tick (`want` is a whole tick's worth at
    /// full speed). Sources in the allocator's order: free pages above the min watermark
    /// (recently freed first, then clean ones, which cost a host fault each), then on the
    /// patched kernel the hook (balloon pages, before any reclaim), page cache, swap; on a
    /// stock kernel page cache, swap, deflate-on-oom. What is not found is an OOM unless a
    /// rate-limited source still had memory (the writer waits).
    ///
    /// `capacity` is what the writers could write in the whole tick into memory at hand
    /// (at least `want`): the time scale of the costs (a cold page costs `refault_factor`
    /// warm ones, and no writer writes for longer than the tick).
    pub fn serve(&mut self, want: Kib, capacity: Kib, b: &mut Budgets) -> Served {
        let mut s = Served::default();
        if want.0 == 0 {
            return s;
        }
        let w = capacity.max(want).0 as f64;
        let refault = b.refault_factor.max(1.0);
        let mut time_used = 0.0f64; // fraction of the tick
        let mut need = want;
        // A source's pages, each costing `cost` warm ones, up to `cap`.
        // Set when the tick's time, not memory, ended the writes.
        let mut out_of_time = false;
        let mut room = |need: Kib, cap: Kib, cost: f64, time_used: &mut f64| -> Kib {
            if out_of_time {
                return Kib::ZERO;
            }
            let cost = cost.max(1.0);
            let by_time = Kib((((1.0 - *time_used).max(0.0) * w) / cost) as u64);
            if by_time < need.min(cap) {
                out_of_time = true;
            }
            let k = need.min(cap).min(by_time);
            *time_used += k.0 as f64 * cost / w;
            k
        };
        let spare = self.free().saturating_sub(self.cfg.wmark_min);
        let d = room(
            need,
            self.free_dirty.total().min(spare),
            1.0,
            &mut time_used,
        );
        let d = self.take_free_dirty(d);
        need = need.saturating_sub(d);
        let c = room(
            need,
            self.free_clean.min(spare.saturating_sub(d)),
            refault,
            &mut time_used,
        );
        self.free_clean = self.free_clean.saturating_sub(c);
        self.stats.refault = self.stats.refault.saturating_add(c);
        need = need.saturating_sub(c);
        let mut limited = false;
        if self.kernel.patched {
            let h = room(
                need,
                self.balloon.min(b.hook),
                b.hook_factor,
                &mut time_used,
            );
            self.take_balloon(h);
            self.stats.hook = self.stats.hook.saturating_add(h);
            b.hook = b.hook.saturating_sub(h);
            s.from_balloon = h;
            need = need.saturating_sub(h);
            limited |= self.balloon.0 > 0 && b.hook.0 == 0;
            if limited {
                // The balloon still has pages: the writer waits for the hook (its
                // spinlock), it does not reclaim or swap.
                s.got = want.saturating_sub(need);
                return s;
            }
        }
        let r = room(need, self.cache, 1.0, &mut time_used);
        self.cache = self.cache.saturating_sub(r);
        need = need.saturating_sub(r);
        if self.cfg.swap_total > self.swapped {
            let cap = self
                .cfg
                .swap_total
                .saturating_sub(self.swapped)
                .min(b.swap)
                .min(self.ram_anon().saturating_sub(self.cfg.daemons));
            let k = room(need, cap, 1.0, &mut time_used);
            self.swapped = self.swapped.saturating_add(k);
            b.swap = b.swap.saturating_sub(k);
            self.stats.swap_out = self.stats.swap_out.saturating_add(k);
            need = need.saturating_sub(k);
            limited |= b.swap.0 == 0;
        }
        if !self.kernel.patched && self.kernel.deflate_on_oom {
            let pages = Kib(b.doo_rounds.saturating_mul(MIB));
            let k = room(need, self.balloon.min(pages), refault, &mut time_used);
            self.take_balloon(k);
            // The driver's OOM notifier gives pages back and leaves them out: its worker
            // inflates again only when the host sets a target again.
            self.balloon_target = self.balloon_target.min(self.balloon);
            b.doo_rounds = b.doo_rounds.saturating_sub(k.0.div_ceil(MIB));
            self.stats.doo_rounds += k.0.div_ceil(MIB);
            s.from_balloon = k;
            need = need.saturating_sub(k);
            limited |= self.balloon.0 > 0 && b.doo_rounds == 0;
        }
        s.got = want.saturating_sub(need);
        s.exhausted = need.0 > 0 && !out_of_time && !limited;
        s
    }

    /// The balloon gives `k` straight to a writer; the patched kernel's target follows
    /// (it raises its own target by what the hook served).
    fn take_balloon(&mut self, k: Kib) {
        self.balloon = self.balloon.saturating_sub(k);
        self.stats.deflated = self.stats.deflated.saturating_add(k);
        if self.kernel.patched {
            self.balloon_target = self.balloon_target.min(self.balloon);
        }
    }

    /// Served memory becomes a program's (anonymous) or the page cache's.
    pub fn place(&mut self, anon: Kib, cache: Kib) {
        self.anon = self.anon.saturating_add(anon);
        self.cache = self.cache.saturating_add(cache);
    }

    /// The OOM killer freed a program's memory.
    pub fn killed(&mut self, now: f64, resident: Kib, untouched: Kib) {
        self.release(now, resident, untouched);
    }

    /// Pages come back from swap while free memory is above the low watermark; returns what came in.
    pub fn swap_in(&mut self, budget: &mut Kib) -> Kib {
        if self.swapped.0 == 0 {
            return Kib::ZERO;
        }
        let room = self
            .free()
            .saturating_sub(self.cfg.wmark_low.saturating_add(Kib(64 * MIB)));
        let k = self.swapped.min(*budget).min(room);
        let d = self.take_free_dirty(k);
        let c = k.saturating_sub(d).min(self.free_clean);
        self.free_clean = self.free_clean.saturating_sub(c);
        let k = d.saturating_add(c);
        self.swapped = self.swapped.saturating_sub(k);
        *budget = budget.saturating_sub(k);
        self.stats.swap_in = self.stats.swap_in.saturating_add(k);
        k
    }

    /// Free page reporting: every 2 s a pass reports free 2 MiB blocks freed at least
    /// `delay` ago, up to `gib_s` worth of the pass, above the low watermark, leaving
    /// `keep` of the free pages that hold data unreported (32 × 2 MiB in the kernel; more
    /// where free memory is in blocks too small to report). Returns what it reported.
    pub fn report(&mut self, now: f64, delay: f64, gib_s: f64, keep: Kib) -> Kib {
        self.free_dirty.age(now, delay);
        if !self.kernel.fpr || now + 1e-9 < self.next_report {
            return Kib::ZERO;
        }
        let period = 2.0;
        self.next_report = now + period;
        let cap = rate(gib_s, period)
            .min(self.free().saturating_sub(self.cfg.wmark_low))
            .min(self.free_dirty.total().saturating_sub(keep));
        let cap = Kib(cap.0 / UNIT_2M * UNIT_2M);
        let k = self.free_dirty.take_old(cap);
        self.free_clean = self.free_clean.saturating_add(k);
        self.stats.reported = self.stats.reported.saturating_add(k);
        k
    }

    /// Of the page cache, what a program's files hold: all of it beyond the system's hot
    /// files, up to the set (the reader's misses push other cold files out over time).
    pub fn files_cached(&self, set: Kib) -> Kib {
        self.cache
            .saturating_sub(self.cfg.hot_cache.min(self.cache))
            .min(set)
    }

    /// A reader's misses come into the page cache: up to `k` from free pages above the low
    /// watermark (recently freed first). No reclaim, swap or balloon pages for it: once free
    /// memory is at the watermark a miss replaces a cached page (the cache's LRU), so the
    /// cache settles at [`file_cache_room`]. Returns what it took.
    pub fn fill_cache(&mut self, k: Kib) -> Kib {
        let spare = self.free().saturating_sub(self.cfg.wmark_low);
        let want = k.min(spare);
        let d = self.take_free_dirty(want);
        let c = want.saturating_sub(d).min(self.free_clean);
        self.free_clean = self.free_clean.saturating_sub(c);
        let got = d.saturating_add(c);
        self.cache = self.cache.saturating_add(got);
        got
    }

    /// The host's memory behind this guest: every page of a Xen domain; on QEMU what holds
    /// data (clean pages are not backed).
    pub fn footprint(&self, xen: bool) -> Kib {
        if xen {
            self.size()
        } else {
            self.written()
        }
    }
}

/// A file working set a program re-reads (a `files` step): `set` bytes, `hot_share` of the
/// reads going to `hot_fraction` of the files, uniformly within each part (make bench-host's
/// E1 workload: 80 % of operations on a fifth of the files).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FileSet {
    pub set: Kib,
    pub hot_fraction: f64,
    pub hot_share: f64,
}

/// The share of reads of `f` served from the page cache when `cached` of it is cached, the
/// hottest files first (the page cache's LRU keeps the files read most): pure, in [0, 1],
/// non-decreasing in `cached`. With `H = hot_fraction · set` and `s = hot_share`:
/// `h = s · C/H` for `C ≤ H`, `h = s + (1 − s) · (C − H)/(set − H)` above, 1 once it all fits.
pub fn file_hit_rate(cached: Kib, f: &FileSet) -> f64 {
    if f.set.0 == 0 {
        return 1.0;
    }
    let set = f.set.0 as f64;
    let c = (cached.0 as f64).min(set);
    let hot = (f.hot_fraction.clamp(0.0, 1.0) * set).max(0.0);
    let s = f.hot_share.clamp(0.0, 1.0);
    let h = if hot <= 0.0 || hot >= set {
        c / set
    } else if c <= hot {
        s * c / hot
    } else {
        s + (1.0 - s) * (c - hot) / (set - hot)
    };
    h.clamp(0.0, 1.0)
}

/// GiB/s a reader gets at hit rate `hit`: hits at `cache_gib_s` (memory), misses at
/// `disk_gib_s`; the time per byte is the two costs weighted by the hit rate:
/// `1 / (h / cache + (1 − h) / disk)`.
pub fn file_read_gib_s(hit: f64, cache_gib_s: f64, disk_gib_s: f64) -> f64 {
    let h = hit.clamp(0.0, 1.0);
    let per = h / cache_gib_s.max(1e-12) + (1.0 - h) / disk_gib_s.max(1e-12);
    1.0 / per
}

/// The page cache a guest's files can hold once it has settled (what a file reader's misses
/// fill): the configured size less the kernel (struct page of the *configured* size included),
/// anonymous memory in RAM, the balloon, the low watermark (free memory the allocator keeps)
/// and the system's own hot files. MemAvailable-like.
pub fn file_cache_room(cfg: &GuestConfig, ram_anon: Kib, balloon: Kib) -> Kib {
    cfg.max
        .saturating_sub(cfg.kernel)
        .saturating_sub(ram_anon)
        .saturating_sub(balloon)
        .saturating_sub(cfg.wmark_low)
        .saturating_sub(cfg.hot_cache)
}

/// `gib_s` for `dt` seconds, in KiB.
pub fn rate(gib_s: f64, dt: f64) -> Kib {
    Kib((gib_s * dt * 1024.0 * 1024.0).max(0.0) as u64)
}
