//! Programs as allocation traces: each runs its steps in order (malloc+touch at a rate,
//! hold, free, compute, a memory trace), once or over and over. A program knows what it
//! holds and how far it got; the guest model decides how much of what it asks for it gets.

use crate::guest::FileSet;
use crate::rng::Rng;
use crate::scenario::{gib, ProgramSpec, Step};
use autoballoon_core::units::Kib;

const GIB_KIB: f64 = 1024.0 * 1024.0;

/// What a program did at the start of a tick that needs no time: memory committed (or
/// refused), freed, cache read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Instant {
    /// Touched memory given back (resident or in swap).
    pub freed_resident: Kib,
    /// Committed memory given back before it was touched.
    pub freed_untouched: Kib,
    /// Memory newly committed (malloc).
    pub committed: Kib,
    /// Allocations refused at malloc (one per thread).
    pub refused: u64,
    /// Files read into the page cache.
    pub cache: Kib,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Not started yet, or between steps.
    Enter,
    /// Touching what was committed: `left` KiB at `rate` KiB/s (all threads).
    Alloc {
        left: f64,
        rate: f64,
        nominal_s: f64,
    },
    Sleep {
        until: f64,
    },
    Compute {
        left_s: f64,
        nominal_s: f64,
        dirty: f64,
    },
    Trace {
        pos: f64,
        dirty: f64,
    },
    /// Re-reading a file set: `left` KiB to read; `nominal_s` at memory speed.
    Files {
        set: FileSet,
        left: f64,
        nominal_s: f64,
        warmup: bool,
    },
}

/// One running program.
#[derive(Debug, Clone)]
pub struct Program {
    pub name: String,
    steps: Vec<Step>,
    repeat: bool,
    start_s: f64,
    idx: usize,
    state: State,
    /// Memory it wrote and still holds (in RAM or swap), KiB.
    pub resident: Kib,
    /// Memory it committed and has not written yet.
    pub untouched: Kib,
    /// Killed by the OOM killer.
    pub killed: bool,
    /// Ran its last step (a program that does not repeat).
    pub done: bool,
    /// Seconds spent in steps that are not sleeps.
    pub busy_s: f64,
    /// What those steps would have taken at full speed with memory at hand.
    pub work_s: f64,
    /// Whole passes through the steps.
    pub passes: u64,
    /// When it ran its last step (a program that does not repeat).
    pub finished_at: Option<f64>,
    /// File reads of its `files` steps (warm-ups left out): KiB read, of which page-cache
    /// hits, and the seconds they took.
    pub file_read_kib: f64,
    pub file_hit_kib: f64,
    pub file_read_s: f64,
    /// What its `files` step reads this tick, KiB, of which hits, and the share of the tick
    /// it took (set by [`Program::read_files`], used by [`Program::end_tick`]).
    tick_read: (f64, f64, f64),
    now: f64,
    /// Each sleep's length and each allocation's speed times a factor in [1 − jitter, 1 + jitter].
    jitter: f64,
    rng: Rng,
}

impl Program {
    /// The program of `spec`; `seed` draws its jitter.
    pub fn new(spec: &ProgramSpec, seed: u64) -> Program {
        Program {
            jitter: spec.jitter,
            rng: Rng::new(seed),
            name: spec.name.clone(),
            steps: spec.steps.clone(),
            repeat: spec.repeat,
            start_s: spec.start_s,
            idx: 0,
            state: State::Enter,
            resident: Kib::ZERO,
            untouched: Kib::ZERO,
            killed: false,
            done: false,
            busy_s: 0.0,
            work_s: 0.0,
            passes: 0,
            finished_at: None,
            file_read_kib: 0.0,
            file_hit_kib: 0.0,
            file_read_s: 0.0,
            tick_read: (0.0, 0.0, 0.0),
            now: 0.0,
        }
    }

    pub fn running(&self) -> bool {
        !self.killed && !self.done
    }

    /// Its start time has come.
    pub fn started(&self, now: f64) -> bool {
        now + 1e-9 >= self.start_s
    }

    /// Steps that take no time, from `now`, until one that does. `commit_limit`: the
    /// largest single allocation the guest's overcommit rule allows (none: any).
    pub fn begin_tick(
        &mut self,
        now: f64,
        commit_limit: Option<Kib>,
        touch_default: f64,
        cache_gib_s: f64,
    ) -> Instant {
        let mut out = Instant::default();
        self.now = now;
        if !self.running() || now + 1e-9 < self.start_s {
            return out;
        }
        // At most one pass through the steps per tick, so a program of instant steps
        // cannot spin.
        for _ in 0..=self.steps.len() {
            if self.state != State::Enter {
                break;
            }
            let Some(step) = self.steps.get(self.idx).cloned() else {
                self.done = true;
                self.finished_at = Some(now);
                break;
            };
            match step {
                Step::Alloc {
                    gib: g,
                    threads,
                    touch_gib_s,
                } => {
                    let each = gib(g);
                    let ok = commit_limit.is_none_or(|l| each <= l);
                    if ok {
                        let total = Kib(each.0.saturating_mul(u64::from(threads)));
                        self.untouched = self.untouched.saturating_add(total);
                        out.committed = out.committed.saturating_add(total);
                        let rate = touch_gib_s.unwrap_or(touch_default)
                            * GIB_KIB
                            * f64::from(threads)
                            * self.rng.jitter(1.0, self.jitter);
                        self.state = State::Alloc {
                            left: total.0 as f64,
                            rate,
                            nominal_s: total.0 as f64 / rate,
                        };
                    } else {
                        out.refused += u64::from(threads);
                        self.next();
                    }
                }
                Step::Free { gib: g } => {
                    let amount = g.map_or(Kib::MAX, gib);
                    let r = amount.min(self.resident);
                    let u = amount.saturating_sub(r).min(self.untouched);
                    self.resident = self.resident.saturating_sub(r);
                    self.untouched = self.untouched.saturating_sub(u);
                    out.freed_resident = out.freed_resident.saturating_add(r);
                    out.freed_untouched = out.freed_untouched.saturating_add(u);
                    self.next();
                }
                Step::Sleep { s } => {
                    self.state = State::Sleep {
                        until: now + s * self.rng.jitter(1.0, self.jitter),
                    }
                }
                Step::Compute { s, dirty_gib_s } => {
                    self.state = State::Compute {
                        left_s: s,
                        nominal_s: s,
                        dirty: dirty_gib_s * GIB_KIB,
                    }
                }
                Step::Trace { dirty_gib_s, .. } => {
                    self.state = State::Trace {
                        pos: 0.0,
                        dirty: dirty_gib_s * GIB_KIB,
                    }
                }
                Step::Cache { gib: g } => {
                    out.cache = out.cache.saturating_add(gib(g));
                    self.next();
                }
                Step::Files {
                    gib: g,
                    read_gib,
                    hot_fraction,
                    hot_share,
                    warmup,
                } => {
                    let left = gib(read_gib).0 as f64;
                    if left < 1.0 {
                        self.next();
                    } else {
                        self.state = State::Files {
                            set: FileSet {
                                set: gib(g),
                                hot_fraction,
                                hot_share,
                            },
                            left,
                            nominal_s: read_gib / cache_gib_s.max(1e-12),
                            warmup,
                        };
                    }
                }
            }
        }
        out
    }

    fn next(&mut self) {
        self.state = State::Enter;
        self.idx += 1;
        if self.idx >= self.steps.len() {
            self.passes += 1;
            if self.repeat {
                self.idx = 0;
            } else {
                self.done = true;
                self.finished_at = Some(self.now);
            }
        }
    }

    /// Memory this program wants to write this tick of `dt` at CPU speed `speed` (its
    /// fresh allocations; a trace also commits them), what it could write in the whole tick
    /// (its threads' speed: the time scale of the allocator's costs), and memory it frees
    /// along a trace. A trace writes with one thread at `touch_gib_s` or faster.
    pub fn want(&mut self, dt: f64, speed: f64, touch_gib_s: f64) -> (Kib, Kib, Instant) {
        let mut freed = Instant::default();
        if !self.running() {
            return (Kib::ZERO, Kib::ZERO, freed);
        }
        let one_thread = Kib((touch_gib_s * GIB_KIB * dt * speed).max(0.0) as u64);
        match &self.state {
            State::Alloc { left, rate, .. } => {
                let cap = Kib((rate * dt * speed).max(0.0) as u64);
                (cap.min(Kib(left.max(0.0) as u64)), cap, freed)
            }
            State::Trace { pos, .. } => {
                let Some(Step::Trace { points, .. }) = self.steps.get(self.idx) else {
                    return (Kib::ZERO, Kib::ZERO, freed);
                };
                let goal = gib(interp(points, pos + dt * speed));
                if goal > self.resident {
                    // Committed as it grows: only what is not committed yet is new.
                    let more = goal.saturating_sub(self.resident);
                    let extra = more.saturating_sub(self.untouched);
                    self.untouched = self.untouched.saturating_add(extra);
                    freed.committed = extra;
                    (more, more.max(one_thread), freed)
                } else {
                    freed.freed_resident = self.resident.saturating_sub(goal);
                    freed.freed_untouched = self.untouched;
                    self.resident = goal;
                    self.untouched = Kib::ZERO;
                    (Kib::ZERO, Kib::ZERO, freed)
                }
            }
            _ => (Kib::ZERO, Kib::ZERO, freed),
        }
    }

    /// The file set it re-reads, while a `files` step runs.
    pub fn file_set(&self) -> Option<FileSet> {
        match (&self.state, self.running()) {
            (State::Files { set, .. }, true) => Some(*set),
            _ => None,
        }
    }

    /// Its `files` step reads at `gib_s` (hit rate `hit`) this tick of `dt` at CPU speed
    /// `speed`: returns the KiB it reads and of which misses (what comes into the cache).
    pub fn read_files(&mut self, dt: f64, speed: f64, gib_s: f64, hit: f64) -> (Kib, Kib) {
        let State::Files { left, .. } = &self.state else {
            self.tick_read = (0.0, 0.0, 0.0);
            return (Kib::ZERO, Kib::ZERO);
        };
        let could = (gib_s * GIB_KIB * dt * speed).max(0.0);
        let read = could.min(left.max(0.0));
        let hits = read * hit.clamp(0.0, 1.0);
        let share = if could > 0.0 { read / could } else { 1.0 };
        self.tick_read = (read, hits, share);
        (Kib(read as u64), Kib((read - hits) as u64))
    }

    /// Computing (a `compute` or `trace` step), not allocating or sleeping.
    pub fn computes(&self) -> bool {
        matches!(self.state, State::Compute { .. } | State::Trace { .. })
    }

    /// The dirty rate of its writes to memory it already holds, KiB/s at full speed.
    pub fn dirty_rate(&self) -> f64 {
        match self.state {
            State::Compute { dirty, .. } | State::Trace { dirty, .. } => dirty,
            _ => 0.0,
        }
    }

    /// The tick is over: it got `got` of the `wanted` it asked for, and ran at `speed`.
    pub fn end_tick(&mut self, now: f64, dt: f64, speed: f64, wanted: Kib, got: Kib) {
        if !self.running() || now + 1e-9 < self.start_s {
            return;
        }
        let got = got.min(wanted);
        self.untouched = self.untouched.saturating_sub(got);
        self.resident = self.resident.saturating_add(got);
        let frac = if wanted.0 == 0 {
            1.0
        } else {
            got.0 as f64 / wanted.0 as f64
        };
        // A step that ends in this tick ends at its end.
        self.now = now + dt;
        match &mut self.state {
            State::Alloc {
                left, nominal_s, ..
            } => {
                self.busy_s += dt;
                *left -= got.0 as f64;
                if *left < 1.0 {
                    self.work_s += *nominal_s;
                    self.next();
                }
            }
            State::Sleep { until } => {
                if now + dt + 1e-9 >= *until {
                    self.next();
                }
            }
            State::Compute {
                left_s, nominal_s, ..
            } => {
                self.busy_s += dt;
                *left_s -= dt * speed;
                if *left_s <= 1e-9 {
                    self.work_s += *nominal_s;
                    self.next();
                }
            }
            State::Trace { pos, .. } => {
                self.busy_s += dt;
                *pos += dt * speed * frac;
                let end = match self.steps.get(self.idx) {
                    Some(Step::Trace { points, .. }) => points.last().map_or(0.0, |p| p[0]),
                    _ => 0.0,
                };
                if *pos >= end - 1e-9 {
                    self.work_s += end;
                    self.next();
                }
            }
            State::Files {
                left,
                nominal_s,
                warmup,
                ..
            } => {
                let (read, hits, share) = std::mem::take(&mut self.tick_read);
                // A step that ends in this tick takes its share of it.
                let used = dt * share;
                self.busy_s += used;
                if !*warmup {
                    self.file_read_kib += read;
                    self.file_hit_kib += hits;
                    self.file_read_s += used;
                }
                *left -= read;
                if *left < 1.0 {
                    self.work_s += *nominal_s;
                    self.next();
                }
            }
            State::Enter => {}
        }
    }

    /// The OOM killer chose it: everything it holds is freed; returns (resident, untouched).
    pub fn kill(&mut self) -> (Kib, Kib) {
        self.killed = true;
        let r = (self.resident, self.untouched);
        self.resident = Kib::ZERO;
        self.untouched = Kib::ZERO;
        r
    }
}

/// The trace's GiB at work time `t` (linear between points, flat outside).
pub fn interp(points: &[[f64; 2]], t: f64) -> f64 {
    let Some(first) = points.first() else {
        return 0.0;
    };
    if t <= first[0] {
        return first[1];
    }
    for w in points.windows(2) {
        let ([t0, g0], [t1, g1]) = (w[0], w[1]);
        if t <= t1 {
            return g0 + (g1 - g0) * (t - t0) / (t1 - t0);
        }
    }
    points.last().map_or(0.0, |p| p[1])
}
