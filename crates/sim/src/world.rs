//! The simulated host as core's [`World`]: every VM's guest model and programs, the
//! migrations, on a virtual clock. `sample` reads each guest as its agent would (its
//! /proc/meminfo, the balloon's size) at the virtual time; `set_guest_size` moves the
//! balloon's target. [`SimWorld::advance`] moves the model one tick.

use crate::calib::{Calibration, MigrationKind};
use crate::guest::{rate, Budgets, Guest, GuestConfig, Kernel};
use crate::migration::{Migration, MigrationRecord};
use crate::policies::GuestSide;
use crate::rng::Rng;
use crate::scenario::{gib, Scenario};
use crate::workload::Program;
use autoballoon_core::host::{HostSample, HostView, VmId, World};
use autoballoon_core::procfs::{Pressure, PressureLine};
use autoballoon_core::sample::Sample;
use autoballoon_core::units::Kib;
use std::time::Duration;

/// What the simulated world refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorldError {
    #[error("no VM {0}")]
    NoSuchVm(VmId),
}

/// One VM: its guest, its programs, its counters.
#[derive(Debug, Clone)]
pub struct VmState {
    pub name: String,
    pub vcpus: u32,
    pub guest: Guest,
    pub programs: Vec<Program>,
    pub migration: Option<Migration>,
    /// PSI `some` avg10 of the guest, percent.
    pub psi: f64,
    pub oom_kills: u64,
    pub failed_allocations: u64,
    /// CPU seconds the hook and the agent took.
    pub cpu_s: f64,
    cpu_last_tick: f64,
    /// The share of the last tick the balloon's moves took from computing programs.
    balloon_stall_last_tick: f64,
    pub min_size: Kib,
    /// ∫ size dt, KiB·s.
    pub size_kib_s: f64,
    /// Seconds in which a write waited for memory.
    pub stalled_s: f64,
}

/// Time-integrated and peak figures of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// ∫ host footprint dt, KiB·s.
    pub footprint_kib_s: f64,
    pub peak_footprint: Kib,
    /// ∫ guest sizes dt, KiB·s.
    pub size_kib_s: f64,
    pub host_swap_out: Kib,
    pub host_swap_in: Kib,
    pub host_swapped: Kib,
    pub host_resident: Kib,
    /// Of which memory the guests use.
    pub host_hot: Kib,
    /// ∫ programs' memory dt, KiB·s, and its peak (summed over VMs).
    pub app_kib_s: f64,
    pub peak_app: Kib,
    /// ∫ programs' memory dt and ∫ dt over the time some program had started and was running.
    pub app_running_kib_s: f64,
    pub app_running_s: f64,
}

/// Where one VM's migration plan stands.
#[derive(Debug, Clone, PartialEq)]
struct PlanState {
    vm: usize,
    next: Option<f64>,
    extra: Vec<f64>,
    left: Option<u32>,
    gap: Option<f64>,
    /// Waiting for this program (index in the VM) to finish, then `after_s`.
    after: Option<(usize, f64)>,
}

/// The simulated host.
pub struct SimWorld {
    pub now: f64,
    pub dt: f64,
    pub calib: Calibration,
    pub side: GuestSide,
    pub vms: Vec<VmState>,
    pub records: Vec<MigrationRecord>,
    pub totals: Totals,
    host_memory: Option<Kib>,
    rng: Rng,
    plans: Vec<PlanState>,
    events: Vec<(f64, usize, Kib)>,
    next_event: usize,
}

impl SimWorld {
    /// The world of `s` booted at time 0 under a policy whose guest side is `side`.
    pub fn new(s: &Scenario, calib: Calibration, side: GuestSide, seed: u64) -> SimWorld {
        let vms =
            s.vm.iter()
                .enumerate()
                .map(|(i, v)| {
                    let max = gib(v.memory_gib);
                    let cfg = GuestConfig {
                        max,
                        kernel: Kib((max.0 as f64 * calib.struct_page_fraction) as u64)
                            .saturating_add(gib(calib.kernel_base_gib)),
                        kernel_zero: gib(if side.patched {
                            calib.patched_kernel_zero_gib
                        } else {
                            calib.kernel_zero_gib
                        }),
                        daemons: gib(calib.daemons_gib),
                        hot_cache: gib(calib.hot_cache_gib),
                        base_uncommitted: gib(calib.base_uncommitted_gib),
                        swap_total: gib(v.swap_gib),
                        wmark_min: Kib::ZERO,
                        wmark_low: Kib::ZERO,
                    }
                    .with_watermarks();
                    let kernel = Kernel {
                        patched: side.patched,
                        deflate_on_oom: s.deflate_on_oom,
                        overcommit_always: side.overcommit_always,
                        transparent: side.transparent,
                        fpr: side.fpr,
                    };
                    let mut guest = Guest::boot(cfg, kernel, gib(v.cold_cache_gib));
                    if let Some(initial) = v.initial_gib {
                        guest = guest.with_initial_size(gib(initial));
                    }
                    VmState {
                        name: v.name.clone(),
                        vcpus: v.vcpus,
                        min_size: guest.size(),
                        guest,
                        programs: v
                            .program
                            .iter()
                            .enumerate()
                            .map(|(k, p)| {
                                Program::new(p, seed ^ ((i as u64 + 1) << 32) ^ (k as u64 + 1))
                            })
                            .collect(),
                        migration: None,
                        psi: 0.0,
                        oom_kills: 0,
                        failed_allocations: 0,
                        cpu_s: 0.0,
                        cpu_last_tick: 0.0,
                        balloon_stall_last_tick: 0.0,
                        size_kib_s: 0.0,
                        stalled_s: 0.0,
                    }
                })
                .collect();
        let plans = s
            .migration
            .iter()
            .map(|m| {
                let mut extra = m.at_s.clone();
                extra.sort_by(f64::total_cmp);
                let vm =
                    m.vm.as_ref()
                        .and_then(|n| s.vm.iter().position(|v| &v.name == n))
                        .unwrap_or(0);
                let after = m
                    .after_program
                    .as_ref()
                    .and_then(|n| s.vm[vm].program.iter().position(|p| &p.name == n))
                    .map(|i| (i, m.after_s));
                PlanState {
                    vm,
                    next: if after.is_some() {
                        None
                    } else {
                        Some(m.first_s)
                    },
                    extra,
                    left: m.count,
                    gap: m.gap_s,
                    after,
                }
            })
            .collect();
        let mut events: Vec<(f64, usize, Kib)> = s
            .event
            .iter()
            .filter_map(|e| {
                s.vm.iter()
                    .position(|v| v.name == e.vm)
                    .map(|i| (e.at_s, i, gib(e.set_size_gib)))
            })
            .collect();
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        SimWorld {
            now: 0.0,
            dt: s.tick_s,
            calib,
            side,
            vms,
            records: Vec::new(),
            totals: Totals::default(),
            host_memory: s.host.memory_gib.map(gib),
            rng: Rng::new(seed),
            plans,
            events,
            next_event: 0,
        }
    }

    fn xen(&self) -> bool {
        self.calib.migration == MigrationKind::Xen
    }

    /// Moves the model one tick, from `now` to `now + dt`.
    pub fn advance(&mut self) {
        let (now, dt) = (self.now, self.dt);
        while let Some(&(at, vm, size)) = self.events.get(self.next_event) {
            if at > now + 1e-9 {
                break;
            }
            self.next_event += 1;
            let g = &mut self.vms[vm].guest;
            g.balloon_target = g
                .cfg
                .max
                .saturating_sub(size.clamp(Kib::ONE_PAGE, g.cfg.max));
        }
        self.start_migrations(now);
        let host_slow = match self.totals.host_hot.0 {
            0 => 1.0,
            s => 1.0 / (1.0 + 20.0 * s as f64 / (self.totals.peak_footprint.0.max(1) as f64)),
        };
        let xen = self.xen();
        let mut footprint = Kib::ZERO;
        for i in 0..self.vms.len() {
            let jitter = self.rng.jitter(1.0, 0.02);
            let record = step_vm(
                &mut self.vms[i],
                &self.calib,
                &self.side,
                now,
                dt,
                host_slow * jitter,
                xen,
            );
            if let Some(r) = record {
                let end = r.start_s + r.duration_s;
                self.records.push(r);
                self.vms[i].migration = None;
                for p in self.plans.iter_mut().filter(|p| p.vm == i) {
                    if let (Some(g), None) = (p.gap, p.next) {
                        if p.left != Some(0) {
                            p.next = Some(end + g);
                        }
                    }
                }
            }
            let v = &mut self.vms[i];
            v.min_size = v.min_size.min(v.guest.size());
            v.size_kib_s += v.guest.size().0 as f64 * dt;
            footprint = footprint.saturating_add(v.guest.footprint(xen));
            self.totals.size_kib_s += v.guest.size().0 as f64 * dt;
        }
        let app = self
            .vms
            .iter()
            .flat_map(|v| v.programs.iter())
            .fold(Kib::ZERO, |a, p| a.saturating_add(p.resident));
        self.totals.app_kib_s += app.0 as f64 * dt;
        if self
            .vms
            .iter()
            .flat_map(|v| v.programs.iter())
            .any(|p| p.running() && p.started(self.now))
        {
            self.totals.app_running_kib_s += app.0 as f64 * dt;
            self.totals.app_running_s += dt;
        }
        self.totals.peak_app = self.totals.peak_app.max(app);
        self.totals.footprint_kib_s += footprint.0 as f64 * dt;
        self.totals.peak_footprint = self.totals.peak_footprint.max(footprint);
        if let Some(h) = self.host_memory {
            // The host backs the VMs' footprint with its memory and swaps out the excess.
            // Pages the VMs give up come from its memory and its swap in proportion; new
            // pages take free host memory first. Swapped pages are the coldest: memory
            // free inside the guests (written once, not in use); only the rest, memory in
            // use, comes back in and slows the guests down.
            let t = &mut self.totals;
            let held = t.host_resident.saturating_add(t.host_swapped);
            if footprint < held {
                let d = held.saturating_sub(footprint);
                let from_swap = Kib((u128::from(d.0) * u128::from(t.host_swapped.0)
                    / u128::from(held.0.max(1))) as u64);
                t.host_swapped = t.host_swapped.saturating_sub(from_swap);
                t.host_resident = t.host_resident.saturating_sub(d.saturating_sub(from_swap));
            } else {
                t.host_resident = t
                    .host_resident
                    .saturating_add(footprint.saturating_sub(held));
                let excess = t.host_resident.saturating_sub(h);
                t.host_resident = t.host_resident.saturating_sub(excess);
                t.host_swapped = t.host_swapped.saturating_add(excess);
                t.host_swap_out = t.host_swap_out.saturating_add(excess);
            }
            let cold = self.vms.iter().fold(Kib::ZERO, |a, v| {
                a.saturating_add(if xen {
                    v.guest.free()
                } else {
                    v.guest.free_dirty()
                })
            });
            let hot = t.host_swapped.saturating_sub(cold);
            t.host_swap_in = t
                .host_swap_in
                .saturating_add(hot.saturating_sub(t.host_hot));
            t.host_hot = hot;
        }
        self.now = now + dt;
    }

    fn start_migrations(&mut self, now: f64) {
        for k in 0..self.plans.len() {
            let p = &mut self.plans[k];
            if let Some((prog, after)) = p.after {
                if let Some(t) = self.vms[p.vm]
                    .programs
                    .get(prog)
                    .and_then(|q| q.finished_at)
                {
                    p.next = Some(t + after);
                    p.after = None;
                }
            }
            let due_planned = p.next.is_some_and(|t| t <= now + 1e-9);
            let due_extra = p.extra.first().is_some_and(|&t| t <= now + 1e-9);
            if !(due_planned || due_extra)
                || p.left == Some(0)
                || self.vms[p.vm].migration.is_some()
            {
                continue;
            }
            if due_extra {
                p.extra.remove(0);
            } else {
                p.next = None;
            }
            if let Some(n) = &mut p.left {
                *n -= 1;
            }
            let i = p.vm;
            let f = self.rng.jitter(1.0, 0.05);
            let v = &mut self.vms[i];
            v.migration = Some(Migration::new(
                i,
                now,
                &v.guest,
                &self.calib,
                self.side.prepare_migration,
                self.side.hinting,
                f,
            ));
        }
    }

    /// The host's view for the balancers.
    fn host_view(&self) -> HostView {
        let pressure = self.host_memory.map(|h| {
            let held = self.vms.iter().fold(Kib::ZERO, |a, v| {
                a.saturating_add(v.guest.footprint(self.xen()))
            });
            let over = held.0 as f64 / h.0.max(1) as f64;
            let some = ((over - 0.9) * 400.0).clamp(0.0, 100.0);
            psi(some)
        });
        HostView {
            capacity: self.host_memory,
            pressure,
            memory: None,
        }
    }
}

fn psi(some: f64) -> Pressure {
    Pressure {
        some: PressureLine {
            avg10: some,
            avg60: some,
            avg300: some,
            total_us: 0,
        },
        full: Some(PressureLine {
            avg10: some / 2.0,
            avg60: some / 2.0,
            avg300: some / 2.0,
            total_us: 0,
        }),
    }
}

/// One VM through one tick; returns its migration's record if it ended.
fn step_vm(
    v: &mut VmState,
    c: &Calibration,
    side: &GuestSide,
    now: f64,
    dt: f64,
    host_speed: f64,
    xen: bool,
) -> Option<MigrationRecord> {
    let migrating = v
        .migration
        .as_ref()
        .is_some_and(|m| m.active() && !m.preparing());
    // CPU speed of the programs this tick.
    let mut speed = host_speed;
    if migrating {
        speed *= c.migration_app_speed;
    }
    let cpus = f64::from(v.vcpus) * dt;
    speed *= (1.0 - (v.cpu_last_tick / cpus).min(0.9)).max(0.1);
    let prog_anon = v.guest.anon.saturating_sub(v.guest.cfg.daemons).0.max(1) as f64;
    speed /= 1.0 + c.swap_slowdown * (v.guest.swapped.0 as f64 / prog_anon).min(1.0);
    // Allocation rates are measured with the balloon's costs in them (S1); compute pays them.
    let alloc_speed = speed;
    let compute_speed = speed * (1.0 - v.balloon_stall_last_tick.min(0.9));
    let g = &mut v.guest;
    if migrating && c.freeze_balloon_while_migrating {
        g.balloon_target = g.balloon_target.min(g.balloon);
    }
    // 1. Instant steps: malloc, free, file reads.
    let limit = g.commit_limit();
    let mut cache_wanted = Kib::ZERO;
    for p in &mut v.programs {
        let i = p.begin_tick(now, limit, c.touch_gib_s, c.cache_read_gib_s);
        v.failed_allocations += i.refused;
        g.release(now, i.freed_resident, Kib::ZERO);
        cache_wanted = cache_wanted.saturating_add(i.cache);
    }
    // 2. The balloon worker gives back first: its pages are there for this tick's writes.
    let deflated = g.deflate(
        dt,
        if g.kernel.patched {
            c.patched_deflate_gib_s
        } else {
            c.deflate_gib_s
        },
    );
    // 2b. File readers: hits at memory speed, misses at the disk's, into the page cache
    // while free memory above the low watermark lasts (then they replace cached pages).
    let mut files_in = Kib::ZERO;
    for p in &mut v.programs {
        let Some(set) = p.file_set() else {
            continue;
        };
        let cached = g.files_cached(set.set);
        let hit = crate::guest::file_hit_rate(cached, &set);
        let gib_s = crate::guest::file_read_gib_s(hit, c.cache_read_gib_s, c.disk_read_gib_s);
        let (_, misses) = p.read_files(dt, alloc_speed, gib_s, hit);
        let k = misses.min(set.set.saturating_sub(cached));
        files_in = files_in.saturating_add(g.fill_cache(k));
    }
    // 3. Writes.
    let mut b = Budgets {
        hook: if g.kernel.patched {
            rate(c.hook_gib_s, dt).saturating_sub(deflated)
        } else {
            Kib::ZERO
        },
        swap: rate(c.swap_gib_s, dt),
        doo_rounds: (dt * 1000.0 / c.doo_round_ms) as u64,
        refault_factor: if xen { 1.0 } else { c.refault_factor },
        hook_factor: if xen { 1.0 } else { c.hook_refault_factor },
    };
    let mut wants = Vec::with_capacity(v.programs.len());
    let mut speeds = Vec::with_capacity(v.programs.len());
    let (mut total, mut capacity) = (Kib::ZERO, Kib::ZERO);
    for p in &mut v.programs {
        let speed = if p.computes() {
            compute_speed
        } else {
            alloc_speed
        };
        speeds.push(speed);
        let (w, cap, i) = p.want(dt, speed, c.touch_gib_s);
        g.release(now, i.freed_resident, Kib::ZERO);
        wants.push(w);
        total = total.saturating_add(w);
        capacity = capacity.saturating_add(cap);
    }
    let served = g.serve(total, capacity, &mut b);
    g.place(served.got, Kib::ZERO);
    let mut left = served.got;
    for ((p, w), speed) in v.programs.iter_mut().zip(&wants).zip(speeds) {
        let share = if total.0 == 0 {
            Kib::ZERO
        } else {
            Kib((u128::from(served.got.0) * u128::from(w.0) / u128::from(total.0)) as u64).min(left)
        };
        left = left.saturating_sub(share);
        p.end_tick(now, dt, speed, *w, share);
    }
    let mut hook_pages = if g.kernel.patched {
        served.from_balloon
    } else {
        Kib::ZERO
    };
    if total.0 > 0 && served.got < total {
        v.stalled_s += dt * (1.0 - served.got.0 as f64 / total.0 as f64);
    }
    if served.exhausted {
        // The OOM killer: the program holding the most.
        v.oom_kills += 1;
        v.failed_allocations += 1;
        if let Some(p) = v
            .programs
            .iter_mut()
            .filter(|p| p.running())
            .max_by_key(|p| p.resident.saturating_add(p.untouched))
        {
            let (r, _) = p.kill();
            g.killed(now, r, Kib::ZERO);
        }
    }
    // 4. Files read, and the system's own hot files read back after reclaim.
    let refill = g
        .cfg
        .hot_cache
        .saturating_sub(g.cache)
        .saturating_add(cache_wanted)
        .min(rate(c.touch_gib_s, dt));
    let got_cache = if refill.0 > 0 {
        let s = g.serve(refill, rate(c.touch_gib_s, dt), &mut b);
        g.place(Kib::ZERO, s.got);
        if g.kernel.patched {
            hook_pages = hook_pages.saturating_add(s.from_balloon);
        }
        s.got
    } else {
        Kib::ZERO
    };
    g.untouched = v
        .programs
        .iter()
        .fold(Kib::ZERO, |a, p| a.saturating_add(p.untouched));
    // 5. The balloon worker takes toward its target; swap-in; free page reporting.
    let (inflated, dirty_taken) = g.inflate(
        dt,
        if g.kernel.patched {
            c.patched_inflate_gib_s
        } else {
            c.inflate_gib_s
        },
        &mut b.swap,
    );
    g.swap_in(&mut b.swap);
    let reported = g.report(
        now + dt,
        c.fpr_delay_s,
        c.fpr_gib_s,
        crate::guest::rate(c.fpr_keep_mib / 1024.0, 1.0),
    );
    // 6. CPU: the hook's per-page cost and the agent's sample.
    let agent = if side.agent {
        c.agent_cpu_ms / 1000.0 * dt
    } else {
        0.0
    };
    let hook_cpu = hook_pages.to_pages_floor().0 as f64 * c.hook_cost_us_per_page / 1e6;
    // The slow path's latency is the faulting threads' own time, not shared with other vCPUs.
    let moved = deflated.saturating_add(inflated).saturating_add(hook_pages);
    v.balloon_stall_last_tick =
        moved.to_pages_floor().0 as f64 * c.balloon_stall_us_per_page / 1e6 / dt;
    v.cpu_last_tick = hook_cpu + agent;
    v.cpu_s += v.cpu_last_tick;
    // 7. The migration: what was written, then its progress.
    let rec = if let Some(m) = &mut v.migration {
        let dirty_rate: f64 = v
            .programs
            .iter()
            .filter(|p| p.running())
            .map(|p| p.dirty_rate())
            .sum();
        let written = served
            .got
            .saturating_add(got_cache)
            .saturating_add(files_in)
            .0 as f64
            + dirty_rate * dt * compute_speed
            + if xen { deflated.0 as f64 } else { 0.0 };
        m.dirty(written, g);
        // QEMU does not send what the balloon or reporting discarded meanwhile.
        if !xen && dirty_taken.0 > 0 {
            m.ballooned(dirty_taken, g);
        }
        if !xen && reported.0 > 0 {
            m.discarded(reported, g);
        }
        m.step(now, dt, g, c, side.hinting, &v.name)
    } else {
        None
    };
    // 8. The guest's memory pressure (PSI some avg10): the share of the tick writes waited.
    let stall = if total.0 == 0 {
        0.0
    } else {
        100.0 * (1.0 - served.got.0 as f64 / total.0 as f64)
    };
    v.psi += (stall - v.psi) * (dt / 10.0).min(1.0);
    debug_assert!(g.accounted(), "memory not accounted for: {g:?}");
    rec
}

impl World for SimWorld {
    type Error = WorldError;

    fn sample(&mut self) -> HostSample {
        let at = Duration::from_secs_f64(self.now);
        let vms = self
            .vms
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let g = &v.guest;
                let m = v.migration.as_ref();
                let migrating = m.is_some_and(|m| m.active() && !m.preparing());
                let s = Sample {
                    at,
                    guest_size: g.size(),
                    max: g.cfg.max,
                    target_in_force: self
                        .side
                        .target_in_force
                        .then(|| g.cfg.max.saturating_sub(g.balloon_target)),
                    mem: Some(g.mem_view()),
                    migrating,
                    preparing_migration: m.is_some_and(|m| m.preparing()),
                    // The host knows its hypervisor; the agent on its kernel backend learns
                    // it only from a migration notice (so it keeps no spike headroom).
                    shrink_while_migrating: self.calib.shrink_while_migrating
                        && (!self.side.target_in_force || migrating),
                    // The host reads it from the balloon device; the agent does not.
                    reports_free_pages: self.side.fpr && !self.side.target_in_force,
                    // The model's guests hint nothing to a migration.
                    hints_free_pages: false,
                    // Nor do they back reported memory ahead (the project's QEMU patch).
                    backs_reported: false,
                    pressure: Some(psi(v.psi)),
                    oom_kills: Some(v.oom_kills),
                    // The model keeps no refault history (docs/simulator.md, limits).
                    file_refaults: None,
                    running_short: false,
                };
                (VmId(i as u32), s)
            })
            .collect();
        HostSample {
            at,
            host: self.host_view(),
            vms,
            forget: Vec::new(),
        }
    }

    fn set_guest_size(&mut self, vm: VmId, guest_size: Kib) -> Result<(), WorldError> {
        let v = self
            .vms
            .get_mut(vm.0 as usize)
            .ok_or(WorldError::NoSuchVm(vm))?;
        let g = &mut v.guest;
        g.balloon_target = g
            .cfg
            .max
            .saturating_sub(guest_size.clamp(Kib::ONE_PAGE, g.cfg.max));
        Ok(())
    }
}
