//! The actor's migrations: following one (the hypervisor's phases, the agent's notices,
//! stopping a shrink under way, the report at its end) and preparing one that
//! `autoballoon migrate` asked for (shrink first, then `migrate`). What to do is core's
//! ([`phase_change`], [`Preparation`], [`stop_shrink_at`]); the I/O and the log lines are
//! here.

use super::{Actor, End, Session};
use crate::controller::agent_link::AgentLink;
use crate::controller::status::{MigrationReport, StartedBy, VmState};
use crate::controller::sync::lock;
use crate::hypervisor::{self, Hypervisor, HypervisorError};
use crate::log::EventKind;
use autoballoon_core::migration::{phase_change, request_refused, started_request_survives, stop_shrink_at, MigrationPhase, PhaseChange, Preparation, StartReason, PREPARE_WAIT};
use autoballoon_core::protocol::{HostMessage, MigrationOutcome};
use autoballoon_core::Kib;
use serde_json::json;
use std::time::{Duration, Instant};

/// While a migration is prepared, `actual` is read this often.
const PREPARE_POLL: Duration = Duration::from_millis(100);

/// A `Migrate` request in progress: prepared, then started, until the migration ends.
pub(super) struct Prep {
    uri: String,
    max_bandwidth: Option<u64>,
    /// What the decider and the balloon did since the request (core's).
    pub prep: Preparation,
    /// `migrate` was sent.
    pub started: bool,
}

impl Actor {
    /// This tick's migration phases (events, and a poll while one runs) applied, and the
    /// hypervisor's dropped events reported; `Ok(true)` if the VM has left for the
    /// destination.
    pub(super) fn follow_migration(&mut self, hv: &dyn Hypervisor, s: &mut Session) -> Result<bool, HypervisorError> {
        let mut phases: Vec<MigrationPhase> = hv.migration_events();
        if s.migrating || self.prep.as_ref().is_some_and(|p| p.started) {
            phases.push(hv.migration()?.phase);
        }
        for phase in phases {
            let (was, incoming) = (s.migrating, self.incoming);
            if self.migration_changed(hv, &mut s.migrating, &phase, s.agent.as_mut()) {
                return Ok(true);
            }
            if was && !s.migrating && (incoming || self.balloon.free_page_hint == Some(true)) {
                // What the guest wrote on the source, or while hinting held its free
                // memory, may come in late (on a destination: as the guest resumes).
                s.hold_guest_stats();
            }
        }
        if let Some(p) = self.prep.take_if(|p| s.migrating && !p.started) {
            self.migration_report(|r| r.status = "refused: another migration runs".into());
            self.log.event(&self.shared.name, EventKind::MigrationRequest, &format!("migration to {} refused: another migration of this VM runs", p.uri), &[]);
        }
        let dropped = hv.dropped_events();
        if dropped > s.reported_drops {
            s.reported_drops = dropped;
            lock(&self.shared.status).qmp_events_dropped = dropped;
            self.note(EventKind::EventsDropped, &format!("{dropped} QMP events dropped so far: QEMU sends more than the queue holds"), &[]);
        }
        Ok(false)
    }

    /// Takes a `Migrate` request; false if it cannot be taken now.
    /// `session`: `None` without a session, else whether its hypervisor can migrate.
    pub(super) fn request_migration(&mut self, uri: String, max_bandwidth: Option<u64>, session: Option<Result<(), &'static str>>) -> bool {
        let name = self.shared.name.clone();
        if let Some(why) = request_refused(session, self.prep.is_some()) {
            self.log.event(&name, EventKind::MigrationRequest, &format!("migration to {uri} refused: {why}"), &[]);
            return false;
        }
        let size = lock(&self.shared.status).known_size();
        let shown = size.map_or("unknown".to_string(), |s| s.to_string());
        self.log.event(&name, EventKind::MigrationRequest, &format!("migration to {uri} requested: shrinking from {shown} first (at most {} s)", PREPARE_WAIT.as_secs()), &[("uri", json!(uri))]);
        lock(&self.shared.status).last_migration = Some(MigrationReport {
            started_by: StartedBy::Autoballoon, uri: Some(uri.clone()), status: "preparing".into(), prepare_s: None,
            size_asked: size, size_at_start: None, seconds: None, sent_bytes: None, downtime_ms: None,
        });
        self.prep = Some(Prep { uri, max_bandwidth, prep: Preparation::new(self.now()), started: false });
        true
    }

    /// What the VM's sessions go through, for messages: "libvirt" or "QMP".
    fn session_kind(&self) -> &'static str {
        if self.cfg.libvirt_domain.is_some() { "libvirt" } else { "QMP" }
    }

    /// A request not started yet when its session ended is dropped (and reported). A
    /// started one is kept for the next session, which follows its migration to the end or
    /// finds it gone ([`Actor::end_vanished_request`]).
    pub(super) fn drop_unstarted_request(&mut self) {
        if let Some(p) = self.prep.take_if(|p| !p.started) {
            let session = self.session_kind();
            self.migration_report(|r| r.status = format!("failed: the {session} session ended before the migration started"));
            self.log.event(&self.shared.name, EventKind::MigrationRequest, &format!("migration to {} dropped: the {session} session ended", p.uri), &[]);
        }
    }

    /// A request started in a lost session whose migration the new session's hypervisor
    /// no longer shows (core's [`started_request_survives`]: its QEMU died with it) is over:
    /// reported failed, and normal control resumes.
    pub(super) fn end_vanished_request(&mut self, seen: &MigrationPhase) {
        if started_request_survives(seen) {
            return;
        }
        if let Some(p) = self.prep.take_if(|p| p.started) {
            let session = self.session_kind();
            self.migration_report(|r| r.status = format!("failed: the {session} session was lost during the migration, which the hypervisor no longer shows"));
            self.log.event(&self.shared.name, EventKind::MigrationRequest, &format!("migration to {} failed: the {session} session was lost during it and the hypervisor no longer shows it; normal control resumes", p.uri), &[]);
        }
    }

    /// Waits up to `left` for a prepared migration's balloon, reading `actual` every
    /// [`PREPARE_POLL`] and handling messages; starts the migration once it is ready.
    /// `Ok(None)`: go on with the next sample.
    pub(super) fn prepare(&mut self, hv: &dyn Hypervisor, mut actual: Kib, left: Duration) -> Result<Option<End>, HypervisorError> {
        let until = Instant::now() + left;
        loop {
            let now = self.now();
            let Some(p) = self.prep.as_mut() else { return Ok(None) };
            p.prep.observe(actual, now);
            if p.prep.progress_due(now) {
                let target = p.prep.target().map_or("not set yet".to_string(), |t| t.to_string());
                let msg = format!("preparing migration to {}: size {actual}, target {target}, {:.1} s", p.uri, p.prep.waited(now).as_secs_f64());
                self.log.event(&self.shared.name, EventKind::MigrationRequest, &msg, &[("size_kib", json!(actual.0))]);
            }
            if let Some(why) = self.prep.as_ref().and_then(|p| p.prep.ready(actual, self.paused, now)) {
                self.start_migration(hv, actual, why)?;
                return Ok(None);
            }
            let wall = Instant::now();
            if wall >= until {
                return Ok(None);
            }
            if let Some(end) = self.wait(PREPARE_POLL.min(until.saturating_duration_since(wall)), Some(hv)) {
                return Ok(Some(end));
            }
            if self.prep.is_none() {
                return Ok(None);
            }
            // An impossible `actual` leaves the last good one: not a reason to migrate.
            let configured = lock(&self.shared.status).configured;
            actual = match hypervisor::actual(hv, configured) {
                Ok(a) => self.checked_actual(a).unwrap_or(actual),
                Err(e) if e.is_no_balloon() => actual,
                Err(e) => return Err(e),
            };
        }
    }

    /// Sends `migrate` for the prepared request. A command the hypervisor refuses ends the
    /// request (normal control resumes); a lost session is the caller's error.
    fn start_migration(&mut self, hv: &dyn Hypervisor, actual: Kib, why: StartReason) -> Result<(), HypervisorError> {
        let now = self.now();
        let Some(p) = self.prep.as_mut() else { return Ok(()) };
        p.started = true;
        let (uri, bw, target) = (p.uri.clone(), p.max_bandwidth, p.prep.target());
        let prepare_s = p.prep.waited(now).as_secs_f64();
        // The report first, so whoever sees the migration running also sees its size at start.
        self.migration_report(|r| {
            r.status = "setup".into();
            r.prepare_s = Some(prepare_s);
            r.size_at_start = Some(actual);
        });
        let sent = match bw {
            Some(b) => hv.set_max_bandwidth(b),
            None => Ok(()),
        }
        .and_then(|()| hv.migrate(&uri));
        let name = self.shared.name.clone();
        match sent {
            Ok(()) => {
                let target = target.map_or("none".to_string(), |t| t.to_string());
                let msg = format!("migration to {uri} started after {prepare_s:.1} s of preparation ({why}): size {actual}, target {target}");
                self.log.event(&name, EventKind::MigrationRequest, &msg, &[("prepare_s", json!(prepare_s)), ("size_kib", json!(actual.0))]);
                Ok(())
            }
            Err(e) => {
                self.prep = None;
                self.log.event(&name, EventKind::MigrationRequest, &format!("migration to {uri} failed to start: {e}; normal control resumes"), &[]);
                self.migration_report(|r| {
                    r.status = format!("failed: {e}");
                    r.size_at_start = None;
                });
                if hv.is_connected() {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    fn migration_report(&self, f: impl FnOnce(&mut MigrationReport)) {
        if let Some(r) = lock(&self.shared.status).last_migration.as_mut() {
            f(r);
        }
    }

    /// Applies a migration phase seen; true if the VM has left for the destination.
    fn migration_changed(&mut self, hv: &dyn Hypervisor, migrating: &mut bool, phase: &MigrationPhase, agent: Option<&mut AgentLink>) -> bool {
        let ours = self.prep.as_ref().is_some_and(|p| p.started);
        let notice = match phase_change(*migrating, ours, phase) {
            PhaseChange::Started => {
                *migrating = true;
                // QEMU shows an incoming migration's status on its destination too.
                self.incoming = !ours && hv.run_state().is_ok_and(|s| s == "inmigrate");
                if self.incoming {
                    self.note(EventKind::MigrationStarted, "incoming migration started: this QEMU is its destination; the guest runs here once it completes", &[]);
                } else if self.migration_shrink.allowed() {
                    // A shrink still under way goes on: it is memory the migration need not send.
                    self.note(EventKind::MigrationStarted, &format!("migration started ({})", self.migration_shrink), &[]);
                } else {
                    self.note(EventKind::MigrationStarted, "migration started: no shrinking until it ends", &[]);
                    self.stop_shrink(hv, EventKind::MigrationStarted, "for the migration");
                }
                if ours {
                    self.migration_report(|r| r.status = phase.to_string());
                } else {
                    let size = lock(&self.shared.status).known_size();
                    lock(&self.shared.status).last_migration = Some(MigrationReport {
                        started_by: StartedBy::Other, uri: None, status: phase.to_string(), prepare_s: None,
                        size_asked: None, size_at_start: size, seconds: None, sent_bytes: None, downtime_ms: None,
                    });
                }
                HostMessage::MigrationStarted { shrink_allowed: self.migration_shrink.allowed() }
            }
            PhaseChange::Ended(outcome) => {
                *migrating = false;
                self.migration_ended(hv, phase);
                let then = if self.migration_shrink.allowed() { "normal control resumes" } else { "shrinking resumes" };
                let msg = match (self.incoming, outcome) {
                    (true, MigrationOutcome::Completed) => format!("incoming migration ended ({phase}): the guest runs here now, under control"),
                    (true, _) => format!("incoming migration ended ({phase}): no guest runs here yet"),
                    (false, _) => format!("migration ended ({phase}): {then}"),
                };
                self.note(EventKind::MigrationEnded, &msg, &[("outcome", json!(outcome.to_string()))]);
                HostMessage::MigrationEnded { outcome }
            }
            PhaseChange::Unchanged => return false,
        };
        if let Some(a) = agent {
            if !matches!(a.send(&notice), Ok(true)) {
                self.note(EventKind::NoticeDropped, "the agent is not reading: migration notice dropped", &[]);
            }
        }
        if let MigrationPhase::Ended(outcome) = phase {
            // A completed incoming migration leaves the guest running here.
            if !std::mem::take(&mut self.incoming) && *outcome == MigrationOutcome::Completed {
                self.set_state(VmState::MigratedAway);
                self.log.event(&self.shared.name, EventKind::MigratedAway, "the VM now runs on the destination; leaving this QEMU alone", &[]);
                return true;
            }
        }
        false
    }

    /// A shrink asked before now would go on in the guest (the driver inflates towards the
    /// last target): the balloon is stopped where it is. Used when a migration starts (the
    /// shrink would go on during it) and when the VM is paused (the operator asked for the
    /// balloon to be left where it is); a growth under way completes, the guest may need it.
    pub(super) fn stop_shrink(&mut self, hv: &dyn Hypervisor, kind: EventKind, why: &str) {
        // Paused: the balloon is not ours to touch (and our last target is stale).
        if self.paused {
            return;
        }
        let (target, configured) = {
            let st = lock(&self.shared.status);
            (st.target, st.configured)
        };
        // An impossible `actual` is no size to stop the balloon at: left alone.
        let Ok(Some(actual)) = hypervisor::actual(hv, configured).map(|a| self.checked_actual(a)) else { return };
        let Some(stop) = stop_shrink_at(target, actual) else { return };
        if hv.set_guest_size(stop.at).is_ok() {
            lock(&self.shared.status).target = Some(stop.at);
            // The loop's last target is no longer QEMU's: it measures from the guest again.
            self.epoch += 1;
            self.note(kind, &format!("the balloon was still shrinking towards {}: stopped at {} {why}", stop.towards, stop.at), &[("size_kib", json!(stop.at.0))]);
        }
    }

    /// Records a migration's end in the status (the hypervisor's seconds, bytes and
    /// downtime) with one log line, and ends a `Migrate` request: normal control resumes.
    fn migration_ended(&mut self, hv: &dyn Hypervisor, phase: &MigrationPhase) {
        let info = hv.migration().ok();
        let seconds = info.as_ref().and_then(|i| i.total_time).map(|d| d.as_millis() as f64 / 1000.0);
        let sent = info.as_ref().and_then(|i| i.sent).map(|b| b.0);
        let downtime = info.as_ref().and_then(|i| i.downtime).map(|d| d.as_millis() as u64);
        self.migration_report(|r| {
            r.status = phase.to_string();
            r.seconds = seconds;
            r.sent_bytes = sent;
            r.downtime_ms = downtime;
        });
        let report = lock(&self.shared.status).last_migration.clone();
        let Some(r) = report else { return };
        let f = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.2}{unit}"));
        let mut msg = format!("migration {phase}: {} s, {} MiB sent, downtime {} ms", f(r.seconds, ""), f(r.sent_mib(), ""), r.downtime_ms.map_or("-".into(), |d| d.to_string()));
        if let Some(p) = self.prep.take() {
            msg = format!("{msg}; to {}, prepared in {} s ({} -> {}); normal control resumes", p.uri, f(r.prepare_s, ""),
                r.size_asked.map_or("-".into(), |k| k.to_string()), r.size_at_start.map_or("-".into(), |k| k.to_string()));
        } else {
            msg = format!("{msg} (started by another tool)");
        }
        let fields = [("seconds", json!(r.seconds)), ("sent_bytes", json!(r.sent_bytes)), ("downtime_ms", json!(r.downtime_ms)), ("prepare_s", json!(r.prepare_s))];
        self.log.event(&self.shared.name, EventKind::MigrationRequest, &msg, &fields);
    }
}
