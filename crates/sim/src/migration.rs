//! Pre-copy live migration: a first pass over memory, then rounds of what was written
//! meanwhile, until a round leaves little enough (or the round limit), then stop-and-copy.
//! Xen sends every page of the domain and no ballooned page; QEMU sends written pages in
//! full and scans the rest (ballooned, reported, never written) as zero pages at a cost.

use crate::calib::{Calibration, MigrationKind};
use crate::guest::{rate, Guest};
use autoballoon_core::units::Kib;
use serde::Serialize;

/// One finished migration, for the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationRecord {
    pub vm: String,
    /// When it was asked for (the clock of its duration).
    pub start_s: f64,
    pub duration_s: f64,
    pub bytes_sent: u64,
    pub downtime_ms: f64,
    pub rounds: u32,
    /// The guest's size when it was asked for.
    pub size_at_start_bytes: u64,
}

/// What free page hinting misses of a recent free (`hint_miss_mib`).
fn hint_miss(c: &Calibration) -> Kib {
    Kib((c.hint_miss_mib.max(0.0) * 1024.0) as u64)
}

/// Hinted pages cost the guest's report, in zero-scan-equivalent KiB (nothing where the
/// scan is not modelled).
fn hint_scan(c: &Calibration, hinted: f64) -> f64 {
    if c.zero_scan_gib_s > 0.0 {
        hinted * c.zero_scan_gib_s / c.hint_gib_s
    } else {
        0.0
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Waiting for the balloon to reach a size asked for before it (one-shot); gives up
    /// at `deadline`.
    Prepare { deadline: f64, last_size: Kib },
    /// Sending: `to_send` written pages and `zero_left` zero pages of this round.
    Precopy { to_send: f64, zero_left: f64 },
    /// The guest runs on the destination; the source cleans up until `until`.
    Cleanup { until: f64 },
}

/// A running migration of one VM.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    pub vm: usize,
    pub requested_s: f64,
    size_at_start: Kib,
    phase: Phase,
    round: u32,
    /// Pages written during the present round (sent in the next).
    dirtied: f64,
    sent: f64,
    downtime_ms: f64,
    /// This migration's bandwidth as a fraction of the calibrated one (jitter).
    bw_factor: f64,
    /// Of this round's pages to send, recently freed ones free page hinting missed (KiB):
    /// the first a balloon inflating takes.
    missed: f64,
}

impl Migration {
    /// A migration of `vm` asked for at `now`; `prepare` waits for the balloon first.
    pub fn new(
        vm: usize,
        now: f64,
        g: &Guest,
        c: &Calibration,
        prepare: bool,
        hinting: bool,
        bw_factor: f64,
    ) -> Migration {
        let mut m = Migration {
            vm,
            requested_s: now,
            size_at_start: g.size(),
            phase: Phase::Cleanup { until: 0.0 },
            round: 0,
            dirtied: 0.0,
            sent: 0.0,
            downtime_ms: 0.0,
            bw_factor,
            missed: 0.0,
        };
        m.phase = if prepare {
            Phase::Prepare {
                deadline: now + 600.0,
                last_size: g.size(),
            }
        } else {
            m.first_pass(now, g, c, hinting)
        };
        m
    }

    fn first_pass(&mut self, now: f64, g: &Guest, c: &Calibration, hinting: bool) -> Phase {
        self.round = 1;
        match c.migration {
            MigrationKind::Xen => Phase::Precopy {
                to_send: g.size().0 as f64,
                zero_left: 0.0,
            },
            MigrationKind::Qemu => {
                // Free page hinting: the guest's free pages at the start are skipped in the
                // first pass (and at each round's start, in `step`).
                let hinted = if hinting {
                    self.hint_round(now, g, c, g.free_dirty().0 as f64)
                } else {
                    self.missed = 0.0;
                    0.0
                };
                let to_send = (g.written().0 as f64 - hinted).max(0.0);
                // Zero pages cost scanning time, not bytes; the scan goes on while the
                // sender waits for its bandwidth.
                let zero = g.cfg.max.0 as f64 - to_send - hinted;
                let hint = hint_scan(c, hinted);
                let burst = (c.burst_s * rate(c.bandwidth_gib_s * self.bw_factor, 1.0).0 as f64).min(to_send);
                self.sent += burst;
                Phase::Precopy {
                    to_send: to_send - burst,
                    zero_left: if c.zero_scan_gib_s > 0.0 {
                        zero + hint
                    } else {
                        0.0
                    },
                }
            }
        }
    }

    /// Whether the guest is still on the source and sending (the app is slowed, writes are tracked).
    pub fn active(&self) -> bool {
        !matches!(self.phase, Phase::Cleanup { .. })
    }

    /// Waiting for the balloon before sending.
    pub fn preparing(&self) -> bool {
        matches!(self.phase, Phase::Prepare { .. })
    }

    /// The guest wrote `k` KiB (new pages, or pages it holds) while this migration runs.
    pub fn dirty(&mut self, k: f64, g: &Guest) {
        if let Phase::Precopy { .. } = self.phase {
            self.dirtied = (self.dirtied + k).min(g.size().0 as f64);
        }
    }

    /// The balloon or reporting took `k` written pages (QEMU discards them): those not sent
    /// yet are not sent, and those written during this round go in the next as zero pages
    /// (a discarded page reads as zeros), a header each, not a page.
    pub fn discarded(&mut self, k: Kib, g: &Guest) {
        if let Phase::Precopy { to_send, .. } = &mut self.phase {
            let written = g.written().saturating_add(k).0.max(1) as f64;
            let k = k.0 as f64;
            *to_send = (*to_send - k * (*to_send / written)).max(0.0);
            self.dirtied = (self.dirtied - k * (self.dirtied / written).min(1.0)).max(0.0);
        }
    }

    /// A round of free page hinting over `candidates` KiB of free pages that hold data:
    /// returns what it skips, and keeps what it missed (the recently freed pages
    /// [`Guest::free_unhintable`] names) as `missed`.
    fn hint_round(&mut self, now: f64, g: &Guest, c: &Calibration, candidates: f64) -> f64 {
        let unhintable = g.free_unhintable(now, hint_miss(c), c.hint_miss_s).0 as f64;
        let hinted = (candidates - unhintable).max(0.0);
        self.missed = candidates - hinted;
        hinted
    }

    /// The balloon took `k` written pages: the recently freed ones first, so the pages free
    /// page hinting missed go first; the rest as [`Migration::discarded`].
    pub fn ballooned(&mut self, k: Kib, g: &Guest) {
        let mut k = k.0 as f64;
        if let Phase::Precopy { to_send, .. } = &mut self.phase {
            let first = self.missed.min(k).min(*to_send);
            *to_send -= first;
            self.missed -= first;
            k -= first;
        }
        if k >= 1.0 {
            self.discarded(Kib(k as u64), g);
        }
    }

    /// One tick; returns the record once the migration is over.
    pub fn step(
        &mut self,
        now: f64,
        dt: f64,
        g: &Guest,
        c: &Calibration,
        hinting: bool,
        name: &str,
    ) -> Option<MigrationRecord> {
        match self.phase.clone() {
            Phase::Prepare {
                deadline,
                last_size,
            } => {
                let size = g.size();
                let target = g.cfg.max.saturating_sub(g.balloon_target);
                // Started once the balloon is there or stopped moving (the loop asks a second after
                // the request, the balloon moves the tick after), or the deadline passed.
                let asked = now >= self.requested_s + 2.0;
                if (asked && (size <= target.saturating_add(Kib(64 * 1024)) || size >= last_size))
                    || now >= deadline
                {
                    self.phase = self.first_pass(now, g, c, hinting);
                } else {
                    self.phase = Phase::Prepare {
                        deadline,
                        last_size: size,
                    };
                }
                None
            }
            Phase::Precopy {
                mut to_send,
                mut zero_left,
            } => {
                let bw_gib_s = c.bandwidth_gib_s * self.bw_factor;
                let mut budget = rate(bw_gib_s, dt).0 as f64;
                zero_left = (zero_left - rate(c.zero_scan_gib_s, dt).0 as f64).max(0.0);
                let s = to_send.min(budget);
                to_send -= s;
                budget -= s;
                self.sent += s;
                // A round ended with time left in the tick: start the next one (or stop).
                if to_send < 1.0 && zero_left < 1.0 {
                    let stop = rate(c.stop_remaining_mib / 1024.0, 1.0).0 as f64;
                    if self.dirtied <= stop || self.round >= c.max_rounds {
                        let bw = rate(bw_gib_s, 1.0).0 as f64;
                        let pause = self.dirtied / bw;
                        self.sent += self.dirtied;
                        self.downtime_ms = pause * 1000.0 + c.downtime_fixed_ms;
                        let left_in_tick = budget / bw;
                        self.phase = Phase::Cleanup {
                            until: now + dt - left_in_tick
                                + pause
                                + c.downtime_fixed_ms / 1000.0
                                + c.migration_fixed_s,
                        };
                        return None;
                    }
                    self.round += 1;
                    to_send = self.dirtied;
                    self.dirtied = 0.0;
                    if hinting && c.migration == MigrationKind::Qemu {
                        // QEMU starts a round of hints after every bitmap sync while the
                        // guest runs: what the guest wrote and freed since is skipped.
                        let freed = to_send.min(g.free_dirty().0 as f64);
                        let hinted = self.hint_round(now, g, c, freed);
                        to_send -= hinted;
                        zero_left += hint_scan(c, hinted);
                    }
                }
                self.phase = Phase::Precopy { to_send, zero_left };
                None
            }
            Phase::Cleanup { until } => {
                if now + dt + 1e-9 < until {
                    return None;
                }
                Some(MigrationRecord {
                    vm: name.to_string(),
                    start_s: self.requested_s,
                    duration_s: until - self.requested_s,
                    bytes_sent: (self.sent * 1024.0) as u64,
                    downtime_ms: self.downtime_ms,
                    rounds: self.round,
                    size_at_start_bytes: self.size_at_start.to_bytes_saturating().0,
                })
            }
        }
    }
}
