//! The fake VM's state, shared by the server thread and the test: balloon, guest stats,
//! migration, counters, fault, and the events waiting for the connected client.

use super::config::{BalloonMotion, FakeGuestStats, FakeQemuConfig, MigrationOutcome};
use super::fault::Fault;
use super::wire;
use autoballoon_core::units::Kib;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// The guest's logical size moving towards the last request.
#[derive(Debug, Clone)]
pub(crate) struct Balloon {
    from: u64,
    target: u64,
    since: Instant,
    motion: BalloonMotion,
}

impl Balloon {
    fn new(actual: u64, motion: BalloonMotion) -> Balloon {
        Balloon {
            from: actual,
            target: actual,
            since: Instant::now(),
            motion,
        }
    }

    /// `actual` in bytes at `now`.
    pub(crate) fn actual(&self, now: Instant) -> u64 {
        match self.motion {
            BalloonMotion::Instant => self.target,
            BalloonMotion::Never => self.from,
            BalloonMotion::PerSecond(rate) => {
                let nanos = now.saturating_duration_since(self.since).as_nanos();
                let moved =
                    (rate.to_bytes_saturating().0 as u128).saturating_mul(nanos) / 1_000_000_000;
                let moved = u64::try_from(moved).unwrap_or(u64::MAX);
                if self.target >= self.from {
                    self.from.saturating_add(moved).min(self.target)
                } else {
                    self.from.saturating_sub(moved).max(self.target)
                }
            }
        }
    }

    /// The size the last request asked for (clamped to the configured size), in bytes.
    pub(crate) fn target(&self) -> u64 {
        self.target
    }

    /// A `balloon` request for `target` bytes.
    pub(crate) fn request(&mut self, target: u64, now: Instant) {
        self.from = self.actual(now);
        self.target = target;
        self.since = now;
    }

    /// The guest is now at `actual` and stays there until the next request.
    pub(crate) fn set_actual(&mut self, actual: u64, now: Instant) {
        *self = Balloon {
            from: actual,
            target: actual,
            since: now,
            motion: self.motion,
        };
    }

    /// Changes how `actual` follows requests from now on.
    pub(crate) fn set_motion(&mut self, motion: BalloonMotion, now: Instant) {
        self.from = self.actual(now);
        self.since = now;
        self.motion = motion;
    }
}

/// Where the (single, simulated) outgoing migration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Migration {
    None,
    Active { since: Instant },
    Finished(MigrationOutcome),
}

pub(crate) struct VmState {
    pub configured: Kib,
    pub balloon: Balloon,
    pub balloon_requests: Vec<u64>,
    pub counts: BTreeMap<String, u64>,
    pub guest_stats: FakeGuestStats,
    pub polling_interval: u64,
    pub migration: Migration,
    /// The migration that runs or ran last came in: this QEMU is its destination.
    pub incoming: bool,
    pub migration_events: bool,
    pub run_state: String,
    pub fault: Option<Fault>,
    pub connections: u64,
    /// A client is connected.
    pub connected: bool,
    /// The connected client sent `qmp_capabilities` (QEMU sends events only then).
    pub negotiated: bool,
    /// Events for the connected client, sent before the next reply or within a tick.
    pub outbox: VecDeque<Value>,
    last_balloon_event: (u64, Option<Instant>),
    pub balloon_event_interval: Duration,
    pub write_timeout: Duration,
    pub version: Option<(u32, u32, u32)>,
    pub kvm: Option<bool>,
    pub backs_reported: bool,
    /// Every `x-populate-reported` value written, in bytes.
    pub populate_requests: Vec<u64>,
}

impl VmState {
    pub(crate) fn new(cfg: &FakeQemuConfig) -> VmState {
        let actual = cfg
            .actual
            .unwrap_or(cfg.configured)
            .min(cfg.configured)
            .to_bytes_saturating()
            .0;
        VmState {
            configured: cfg.configured,
            balloon: Balloon::new(actual, cfg.motion),
            balloon_requests: Vec::new(),
            counts: BTreeMap::new(),
            guest_stats: cfg.guest_stats,
            polling_interval: 0,
            migration: Migration::None,
            incoming: false,
            migration_events: false,
            run_state: cfg.run_state.clone(),
            fault: None,
            connections: 0,
            connected: false,
            negotiated: false,
            outbox: VecDeque::new(),
            last_balloon_event: (actual, None),
            balloon_event_interval: cfg.balloon_event_interval,
            write_timeout: cfg.write_timeout,
            version: cfg.version,
            kvm: cfg.kvm,
            backs_reported: cfg.backs_reported,
            populate_requests: Vec::new(),
        }
    }

    pub(crate) fn configured_bytes(&self) -> u64 {
        self.configured.to_bytes_saturating().0
    }

    /// Queues an event for the client if one has negotiated; false if nobody would see it.
    pub(crate) fn emit(&mut self, name: &str, data: Value) -> bool {
        if !self.negotiated {
            return false;
        }
        self.outbox.push_back(wire::event(name, data));
        true
    }

    /// A session begins or ends: nothing carries over to the next client but QEMU's state.
    pub(crate) fn set_connected(&mut self, connected: bool) {
        self.connected = connected;
        self.negotiated = false;
        self.outbox.clear();
        if connected {
            self.connections += 1;
        }
    }

    /// A client just negotiated: moves while nobody listened are not reported later.
    pub(crate) fn negotiate(&mut self, now: Instant) {
        self.negotiated = true;
        self.last_balloon_event.0 = self.balloon.actual(now);
    }

    /// Emits `BALLOON_CHANGE` when `actual` moved, at most once per `balloon_event_interval`.
    pub(crate) fn balloon_tick(&mut self, now: Instant) {
        let actual = self.balloon.actual(now);
        let (last, at) = self.last_balloon_event;
        if actual == last
            || at.is_some_and(|t| now.saturating_duration_since(t) < self.balloon_event_interval)
        {
            return;
        }
        self.last_balloon_event = (actual, Some(now));
        self.emit("BALLOON_CHANGE", json!({"actual": actual}));
    }

    /// A migration starts (`setup`, then `active`); no-op if one already runs.
    pub(crate) fn start_migration(&mut self, now: Instant) {
        if matches!(self.migration, Migration::Active { .. }) {
            return;
        }
        self.migration = Migration::Active { since: now };
        self.incoming = false;
        if self.migration_events {
            self.emit("MIGRATION", json!({"status": "setup"}));
            self.emit("MIGRATION", json!({"status": "active"}));
        }
    }

    /// An incoming migration starts: this QEMU waits in `inmigrate` as its destination and
    /// reports it (`setup`, then `active`) as QEMU's `query-migrate` does on the destination.
    pub(crate) fn start_incoming_migration(&mut self, now: Instant) {
        self.start_migration(now);
        self.incoming = true;
        self.run_state = "inmigrate".into();
    }

    /// The migration ends; a completed one stops this VM (`STOP`, run state `postmigrate`),
    /// or on its destination starts it (`RESUME`, `running`).
    pub(crate) fn finish_migration(&mut self, outcome: MigrationOutcome) {
        self.migration = Migration::Finished(outcome);
        if outcome == MigrationOutcome::Completed && self.incoming {
            self.run_state = "running".into();
            self.emit("RESUME", Value::Null);
        } else if outcome == MigrationOutcome::Completed {
            self.run_state = "postmigrate".into();
            self.emit("STOP", Value::Null);
        }
        if self.migration_events {
            self.emit("MIGRATION", json!({"status": outcome.as_str()}));
        }
    }

    /// QEMU's status string of the migration (`none` before any).
    pub(crate) fn migration_status(&self) -> &'static str {
        match self.migration {
            Migration::None => "none",
            Migration::Active { .. } => "active",
            Migration::Finished(o) => o.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn balloon_moves_at_its_rate() {
        let t0 = Instant::now();
        let mut b = Balloon::new(4 * GIB, BalloonMotion::PerSecond(Kib(1 << 20)));
        b.request(2 * GIB, t0);
        assert_eq!(b.actual(t0), 4 * GIB);
        assert_eq!(b.actual(t0 + Duration::from_millis(500)), 4 * GIB - GIB / 2);
        assert_eq!(b.actual(t0 + Duration::from_secs(5)), 2 * GIB);
        b.request(3 * GIB, t0 + Duration::from_secs(5));
        assert_eq!(b.actual(t0 + Duration::from_secs(50)), 3 * GIB);
        b.set_motion(BalloonMotion::Never, t0 + Duration::from_secs(50));
        b.request(GIB, t0 + Duration::from_secs(50));
        assert_eq!(b.actual(t0 + Duration::from_secs(99)), 3 * GIB);
        assert_eq!(b.target(), GIB);
        b.set_actual(5, t0);
        assert_eq!((b.actual(t0), b.target()), (5, 5));
        let huge = Balloon {
            from: 0,
            target: u64::MAX,
            since: t0,
            motion: BalloonMotion::PerSecond(Kib::MAX),
        };
        assert_eq!(huge.actual(t0 + Duration::from_secs(1 << 40)), u64::MAX);
    }

    #[test]
    fn events_only_to_a_negotiated_client() {
        let mut st = VmState::new(&FakeQemuConfig::default());
        assert!(!st.emit("X", Value::Null));
        st.set_connected(true);
        st.negotiated = true;
        st.migration_events = true;
        st.start_migration(Instant::now());
        st.finish_migration(MigrationOutcome::Completed);
        let names: Vec<String> = st.outbox.iter().map(|e| e["event"].to_string()).collect();
        assert_eq!(
            names,
            [
                "\"MIGRATION\"",
                "\"MIGRATION\"",
                "\"STOP\"",
                "\"MIGRATION\""
            ]
        );
        assert_eq!(
            (st.migration_status(), st.run_state.as_str()),
            ("completed", "postmigrate")
        );
        st.set_connected(false);
        assert!(st.outbox.is_empty() && st.connections == 1);
    }
}
