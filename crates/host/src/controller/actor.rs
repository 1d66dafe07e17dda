//! One VM's I/O actor: connects to QEMU (with back-off), samples the VM every interval
//! (QMP `query-balloon`, the agent's report, guest-stats; merged by core's rule),
//! publishes the sample to its mailbox, and applies the decider's targets with QMP
//! `balloon`. Watches migration, tells the agent, and never blocks on the guest.

use super::agent_link::AgentLink;
use crate::hypervisor::{self, Checked, Hypervisor, HypervisorError};
use super::status::{MigrationReport, Point, StartedBy, VmState, VmStatus};
use super::sync::{lock, panic_message};
use super::{Bell, Msg, Observation, VmCommand, VmShared, PREPARE_WAIT};
use crate::config::VmConfig;
use crate::log::{EventKind, Logger, RateLimit};
use autoballoon_core::migration::{phase_change, MigrationPhase, MigrationShrink, PhaseChange, ShrinkSetting};
use autoballoon_core::policy::MemView;
use autoballoon_core::protocol::{HostMessage, MigrationOutcome, Rejected};
use autoballoon_core::sample::{merge, SizeViews};
use autoballoon_core::Kib;
use autoballoon_qmp::Backoff;
use std::path::PathBuf;
use serde_json::json;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one QMP command may take before the session is given up.
const QMP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a VM without an active balloon device is checked again.
const NO_BALLOON_RETRY: Duration = Duration::from_secs(30);
/// A session that lasted this long was healthy: the reconnect back-off starts over.
const HEALTHY_SESSION: Duration = Duration::from_secs(30);
/// How often a missing agent socket is tried again.
const AGENT_RETRY: Duration = Duration::from_secs(5);
/// While a migration is prepared, `actual` is read this often.
const PREPARE_POLL: Duration = Duration::from_millis(100);
/// The balloon is where it is going once `actual` is this close to the target.
const PREPARE_SLACK: Kib = Kib(2 * 1024);
/// The balloon has stopped (deflate-on-oom pushes back, the guest cannot give more) once
/// `actual` has not moved for this long.
const PREPARE_STALL: Duration = Duration::from_millis(1500);
/// With neither a target nor a decision this long after the request, the decider is not
/// deciding (e.g. no fresh sample): migrate as the guest is.
const PREPARE_NOTHING: Duration = Duration::from_millis(2500);

/// A `Migrate` request in progress: prepared, then started, until the migration ends.
struct Prep {
    uri: String,
    max_bandwidth: Option<u64>,
    asked: Instant,
    /// The last target applied since the request.
    target: Option<Kib>,
    /// The last `actual` read and when it last changed.
    actual: Option<(Kib, Instant)>,
    logged: Instant,
    /// The decider decided on a preparing sample and changed nothing.
    held: bool,
    /// `migrate` was sent.
    started: bool,
}

/// Why a prepared migration starts now.
fn prep_ready(p: &Prep, actual: Kib, paused: bool, now: Instant) -> Option<&'static str> {
    if paused {
        return Some("autoballoon is paused for this VM: the balloon is left alone");
    }
    let waited = now.saturating_duration_since(p.asked);
    match p.target {
        Some(t) if actual <= t.saturating_add(PREPARE_SLACK) => Some("the balloon reached the target"),
        Some(_) if p.actual.is_some_and(|(_, since)| now.saturating_duration_since(since) >= PREPARE_STALL) => Some("the balloon stopped short of the target"),
        None if p.held => Some("nothing to shrink"),
        None if waited >= PREPARE_NOTHING => Some("no decision came: migrating as the guest is"),
        _ if waited >= PREPARE_WAIT => Some("timed out waiting for the balloon"),
        _ => None,
    }
}

/// Why a session with one QEMU ended.
enum End {
    Shutdown,
    Retarget,
    Error(HypervisorError),
}

pub(crate) struct Actor {
    cfg: VmConfig,
    agent_stale: Duration,
    interval: Duration,
    started: Instant,
    log: Logger,
    inbox: Receiver<Msg>,
    /// The inbox's own sender, for the agent link to wake the actor with [`Msg::Short`].
    wake: SyncSender<Msg>,
    shutdown: Arc<AtomicBool>,
    bell: Arc<Bell>,
    shared: Arc<VmShared>,
    paused: bool,
    epoch: u64,
    limits: HashMap<EventKind, RateLimit>,
    /// A `Migrate` request being prepared or running.
    prep: Option<Prep>,
    /// Sample at once rather than at the next tick (a request just came).
    resample: bool,
    /// The agent's socket in this session: configured, or from the libvirt domain's XML.
    agent_path: Option<PathBuf>,
    /// The operator's `migration_shrink`.
    shrink_setting: ShrinkSetting,
    /// Whether this session's hypervisor (or the setting) lets the balloon shrink during a
    /// migration.
    migration_shrink: MigrationShrink,
}

impl Actor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(cfg: VmConfig, agent_stale_s: u64, interval: Duration, started: Instant, log: Logger, (wake, inbox): (SyncSender<Msg>, Receiver<Msg>), shutdown: Arc<AtomicBool>, bell: Arc<Bell>, shared: Arc<VmShared>) -> Actor {
        Actor { cfg, agent_stale: Duration::from_secs(agent_stale_s), interval, started, log, inbox, wake, shutdown, bell, shared, paused: false, epoch: 0, limits: HashMap::new(), prep: None, resample: false, agent_path: None, shrink_setting: ShrinkSetting::Auto, migration_shrink: MigrationShrink::HeldUnknown }
    }

    pub fn with_migration_shrink(mut self, setting: ShrinkSetting) -> Actor {
        self.shrink_setting = setting;
        self
    }

    /// Runs until shutdown. A panic inside is caught, logged, and the actor starts over
    /// after a back-off: one VM's bug never stops the others.
    pub fn run(mut self) {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        loop {
            match catch_unwind(AssertUnwindSafe(|| self.serve())) {
                Ok(()) => return,
                Err(p) => {
                    let what = panic_message(&*p);
                    self.note(EventKind::WorkerPanicked, &format!("worker panicked ({what}); restarting"), &[]);
                    lock(&self.shared.status).errors += 1;
                    *lock(&self.shared.mailbox) = None;
                    if let Some(End::Shutdown) = self.idle(backoff.next_delay()) {
                        return;
                    }
                }
            }
        }
    }

    /// A rate-limited log line of this VM (anything QEMU or the guest can trigger).
    fn note(&mut self, kind: EventKind, msg: &str, fields: &[(&str, serde_json::Value)]) {
        let limit = self.limits.entry(kind).or_default();
        self.log.limited(limit, &self.shared.name, kind, msg, fields);
    }

    fn set_state(&self, s: VmState) {
        lock(&self.shared.status).state = s;
    }

    /// A session with the VM's hypervisor (and the agent's socket it names).
    fn connect(&mut self) -> Result<Arc<dyn Hypervisor>, HypervisorError> {
        let c = hypervisor::connect(&self.cfg, QMP_TIMEOUT)?;
        self.agent_path = c.agent;
        Ok(c.hypervisor)
    }

    fn serve(&mut self) {
        let mut backoff = Backoff::default();
        while !self.shutdown.load(Ordering::SeqCst) {
            let qmp = match self.connect() {
                Ok(q) => q,
                Err(e) => {
                    let msg = format!("cannot reach {}: {e}; retrying", self.cfg.endpoint());
                    self.note(EventKind::Unreachable, &msg, &[]);
                    self.set_state(VmState::Unreachable);
                    if let Some(End::Shutdown) = self.idle(backoff.next_delay()) {
                        return;
                    }
                    continue;
                }
            };
            *lock(&self.shared.session) = Some(qmp.clone());
            // `stop` may have looked for the session just before it was published.
            if self.shutdown.load(Ordering::SeqCst) {
                qmp.close();
            }
            let began = Instant::now();
            let end = self.session(&*qmp);
            if let Some(p) = self.prep.take() {
                if !p.started {
                    self.migration_report(|r| r.status = "failed: the QMP session ended before the migration started".into());
                    self.log.event(&self.shared.name, EventKind::MigrationRequest, &format!("migration to {} dropped: the QMP session ended", p.uri), &[]);
                }
            }
            *lock(&self.shared.session) = None;
            *lock(&self.shared.mailbox) = None;
            match end {
                // Cut by `stop`: not a lost session.
                End::Shutdown | End::Error(_) if self.shutdown.load(Ordering::SeqCst) => return,
                End::Shutdown => return,
                End::Retarget => backoff.reset(),
                End::Error(e) => {
                    self.note(EventKind::Disconnected, &format!("lost QMP: {e}; retrying"), &[]);
                    lock(&self.shared.status).errors += 1;
                    self.set_state(VmState::Unreachable);
                    // Every reconnect backs off, after a failed session too; a session
                    // that ran well for a while starts the back-off over.
                    if began.elapsed() >= HEALTHY_SESSION {
                        backoff.reset();
                    }
                    if let Some(End::Shutdown) = self.idle(backoff.next_delay()) {
                        return;
                    }
                }
            }
        }
    }

    /// Waits `d` while handling messages; `Some` if the session must end. `qmp` applies
    /// the decider's targets; without one they are dropped (nothing to apply them to).
    fn wait(&mut self, d: Duration, qmp: Option<&dyn Hypervisor>) -> Option<End> {
        let deadline = Instant::now() + d;
        loop {
            if self.shutdown.load(Ordering::SeqCst) {
                return Some(End::Shutdown);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(Msg::Set(size)) => {
                    if let (Some(q), false) = (qmp, self.paused) {
                        if let Err(e) = self.apply(q, size) {
                            return Some(End::Error(e));
                        }
                        if let Some(p) = self.prep.as_mut().filter(|p| !p.started) {
                            p.target = Some(size);
                            // The balloon has not had time to move towards it yet.
                            p.actual = None;
                        }
                    }
                }
                // Sample now (with a session to sample; paused VMs are left alone).
                Ok(Msg::Short) if qmp.is_some() && !self.paused => return None,
                Ok(Msg::Short) => {}
                Ok(Msg::Held) => {
                    if let Some(p) = self.prep.as_mut().filter(|p| !p.started) {
                        p.held = true;
                    }
                }
                Ok(Msg::Command(VmCommand::Migrate { uri, max_bandwidth })) => {
                    if self.request_migration(uri, max_bandwidth, qmp.map(|q| q.can_migrate())) {
                        // Sample now: the decider shrinks the VM on this sample.
                        self.resample = true;
                        return None;
                    }
                }
                Ok(Msg::Command(VmCommand::Retarget { qmp, agent })) => {
                    if self.cfg.libvirt_domain.is_none() {
                        self.cfg.qmp = qmp;
                    }
                    self.cfg.agent = agent;
                    let agent = self.cfg.agent.as_ref().map_or("none".to_string(), |a| a.display().to_string());
                    self.log.event(&self.shared.name, EventKind::Retarget, &format!("now managing {} (agent {agent})", self.cfg.endpoint()), &[]);
                    return Some(End::Retarget);
                }
                Ok(Msg::Command(VmCommand::Pause)) => {
                    self.paused = true;
                    *lock(&self.shared.mailbox) = None;
                    self.set_state(VmState::Paused);
                    self.log.event(&self.shared.name, EventKind::Pause, "paused: the balloon is left alone", &[]);
                }
                Ok(Msg::Command(VmCommand::Resume)) => {
                    self.paused = false;
                    self.epoch += 1;
                    self.log.event(&self.shared.name, EventKind::Resume, "resumed", &[]);
                }
                Ok(Msg::Command(VmCommand::Wake)) => {}
                Err(RecvTimeoutError::Timeout) => return None,
                // The controller is gone: nobody can steer us; just let the time pass.
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(left);
                    return None;
                }
            }
        }
    }

    fn idle(&mut self, d: Duration) -> Option<End> {
        self.wait(d, None)
    }

    /// Applies a target: QMP `balloon` takes the guest's logical size in bytes.
    fn apply(&mut self, qmp: &dyn Hypervisor, size: Kib) -> Result<(), HypervisorError> {
        match qmp.set_guest_size(size) {
            Ok(()) => {
                lock(&self.shared.status).target = Some(size);
                Ok(())
            }
            Err(e) if e.is_no_balloon() => {
                self.no_balloon(&e);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn no_balloon(&mut self, e: &HypervisorError) {
        self.set_state(VmState::NoBalloon);
        *lock(&self.shared.mailbox) = None;
        let msg = format!("cannot balloon this VM ({e}): QEMU has no balloon device for it; checking again every {} s", NO_BALLOON_RETRY.as_secs());
        self.note(EventKind::NoBalloon, &msg, &[]);
    }

    fn session(&mut self, qmp: &dyn Hypervisor) -> End {
        let configured = match qmp.configured() {
            Ok(c) => c,
            Err(e) => return End::Error(e),
        };
        // Events are off by default; while a migration already runs QEMU refuses, and
        // polling query-migrate covers it.
        let _ = qmp.enable_migration_events();
        let _ = qmp.set_stats_period(1);
        let mut migrating = match qmp.migration() {
            Ok(m) => m.phase.is_running(),
            Err(e) => return End::Error(e),
        };
        self.migration_shrink = MigrationShrink::decide(self.shrink_setting, &qmp.facts());
        self.epoch += 1;
        {
            let mut st = lock(&self.shared.status);
            st.configured = configured;
            st.state = if migrating { VmState::Migrating } else { VmState::Running };
            st.migration_shrink = Some(self.migration_shrink.to_string());
        }
        let features = qmp.balloon_features();
        let missing = features.missing();
        let advice = if missing.is_empty() { String::new() } else { format!(" ({} off: turning on QEMU's own switches makes spikes and migrations cheaper, docs/migration.md)", missing.join(" and ")) };
        lock(&self.shared.status).balloon_features = Some(features);
        let msg = format!("managing {} ({}), configured {configured}; {}; balloon: {features}{advice}", self.cfg.endpoint(), qmp.describe(), self.migration_shrink);
        // Rate-limited too: a QEMU that drops every session right after the handshake
        // would otherwise log one line per reconnect.
        self.note(EventKind::Connected, &msg, &[("configured_kib", json!(configured.0))]);
        let mut agent: Option<AgentLink> = None;
        let mut agent_tried: Option<Instant> = None;
        let mut prev_actual: Option<Kib> = None;
        let mut reported_drops = 0;
        loop {
            // 1. Migration: events, and a poll while one runs (in case events are off).
            let mut phases: Vec<MigrationPhase> = qmp.migration_events();
            if migrating || self.prep.as_ref().is_some_and(|p| p.started) {
                match qmp.migration() {
                    Ok(m) => phases.push(m.phase),
                    Err(e) => return End::Error(e),
                }
            }
            for phase in phases {
                if self.migration_changed(qmp, &mut migrating, &phase, agent.as_mut()) {
                    return self.wait_gone(qmp);
                }
            }
            if migrating && self.prep.as_ref().is_some_and(|p| !p.started) {
                let p = self.prep.take().expect("checked");
                self.migration_report(|r| r.status = "refused: another migration runs".into());
                self.log.event(&self.shared.name, EventKind::MigrationRequest, &format!("migration to {} refused: another migration of this VM runs", p.uri), &[]);
            }
            let dropped = qmp.dropped_events();
            if dropped > reported_drops {
                reported_drops = dropped;
                lock(&self.shared.status).qmp_events_dropped = dropped;
                self.note(EventKind::EventsDropped, &format!("{dropped} QMP events dropped so far: QEMU sends more than the queue holds"), &[]);
            }
            // 2. Sample: the balloon's `actual` (through the border: an impossible one counts
            //    as the configured size, the balloon empty), the agent's report,
            //    guest-stats if no fresh report.
            let actual = match hypervisor::actual(qmp, configured) {
                Ok(a) => self.checked_actual(a).unwrap_or(configured),
                Err(e) if e.is_no_balloon() => {
                    self.no_balloon(&e);
                    if let Some(end) = self.wait(NO_BALLOON_RETRY, Some(qmp)) {
                        return end;
                    }
                    continue;
                }
                Err(e) => return End::Error(e),
            };
            self.tend_agent(&mut agent, &mut agent_tried, configured);
            let report = agent.as_ref().and_then(|a| a.latest());
            let now = Instant::now();
            let mut views = SizeViews {
                configured,
                actual,
                previous_actual: prev_actual,
                agent: report.as_ref().map(|(at, v)| (now.saturating_duration_since(*at), v)),
                agent_stale_after: self.agent_stale,
                guest_stats: None,
            };
            if views.wants_guest_stats() {
                views.guest_stats = match hypervisor::balloon_view(qmp, configured) {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        self.rejected(EventKind::GuestStatsRejected, "guest-stats", &e, |st| st.guest_stats_rejected += 1);
                        None
                    }
                    Err(_) => None,
                };
            }
            let merged = merge(&views);
            prev_actual = Some(actual);
            let mut sample = merged.sample(now - self.started, configured, migrating);
            sample.preparing_migration = self.prep.is_some();
            sample.shrink_while_migrating = self.migration_shrink.allowed();
            // 3. Publish for the decider (not while paused), and show it.
            if !self.paused {
                *lock(&self.shared.mailbox) = Some(Observation { sample: sample.clone(), source: merged.source, epoch: self.epoch, taken: now });
                self.bell.ring();
            }
            let used = merged.mem.map(|m: MemView| merged.guest_size.saturating_sub(m.available));
            {
                let mut st = lock(&self.shared.status);
                st.size = actual;
                st.used = used;
                st.source = merged.source;
                st.samples += 1;
                if merged.oom_kills.is_some() {
                    st.guest_oom_kills = merged.oom_kills;
                }
                if let Some(a) = &agent {
                    st.agent = a.stats();
                }
                st.state = if self.paused { VmState::Paused } else if migrating { VmState::Migrating } else { VmState::Running };
                let target = st.target;
                drop(st);
                lock(&self.shared.history).push(Point { t: sample.at.as_secs_f64(), size: actual, target, used });
            }
            // 4. Wait for the next tick, applying the decider's targets meanwhile. Ticks
            //    fall on multiples of the interval since the controller started, so all
            //    VMs are sampled together and the decider balances them in one step.
            if std::mem::take(&mut self.resample) {
                continue;
            }
            let next = until_next_tick(self.started.elapsed(), self.interval);
            if self.prep.as_ref().is_some_and(|p| !p.started) {
                match self.prepare(qmp, actual, next) {
                    Ok(Some(end)) => return end,
                    Ok(None) => continue,
                    Err(e) => return End::Error(e),
                }
            }
            if let Some(end) = self.wait(next, Some(qmp)) {
                return end;
            }
        }
    }

    /// The balloon's `actual` once through the border: an impossible one is counted and
    /// noted (rate-limited: the guest makes it) and gives `None`.
    fn checked_actual(&mut self, a: Checked<Kib>) -> Option<Kib> {
        a.map_err(|e| self.rejected(EventKind::ActualRejected, "QEMU's balloon size", &e, |st| st.actual_rejected += 1)).ok()
    }

    /// A guest's number refused at the border: counted in the status, noted rate-limited.
    fn rejected(&mut self, kind: EventKind, what: &str, e: &Rejected, count: impl FnOnce(&mut VmStatus)) {
        count(&mut lock(&self.shared.status));
        self.note(kind, &format!("{what} refused: {e}"), &[]);
    }

    /// Takes a `Migrate` request; false if it cannot be taken now.
    /// `session`: `None` without a session, else whether its monitor can migrate.
    fn request_migration(&mut self, uri: String, max_bandwidth: Option<u64>, session: Option<Result<(), &'static str>>) -> bool {
        let refuse = if session.is_none() {
            Some("no QMP session to this VM")
        } else if let Some(Err(why)) = session {
            Some(why)
        } else if self.prep.is_some() {
            Some("a migration requested earlier is still being prepared or runs")
        } else {
            None
        };
        let name = self.shared.name.clone();
        if let Some(why) = refuse {
            self.log.event(&name, EventKind::MigrationRequest, &format!("migration to {uri} refused: {why}"), &[]);
            return false;
        }
        let now = Instant::now();
        let size = lock(&self.shared.status).known_size();
        let shown = size.map_or("unknown".to_string(), |s| s.to_string());
        self.log.event(&name, EventKind::MigrationRequest, &format!("migration to {uri} requested: shrinking from {shown} first (at most {} s)", PREPARE_WAIT.as_secs()), &[("uri", json!(uri))]);
        lock(&self.shared.status).last_migration = Some(MigrationReport {
            started_by: StartedBy::Autoballoon, uri: Some(uri.clone()), status: "preparing".into(), prepare_s: None,
            size_asked: size, size_at_start: None, seconds: None, sent_bytes: None, downtime_ms: None,
        });
        self.prep = Some(Prep { uri, max_bandwidth, asked: now, target: None, actual: None, logged: now, held: false, started: false });
        true
    }

    /// Waits up to `left` for a prepared migration's balloon, reading `actual` every
    /// [`PREPARE_POLL`] and handling messages; starts the migration once it is ready.
    /// `Ok(None)`: go on with the next sample.
    fn prepare(&mut self, qmp: &dyn Hypervisor, mut actual: Kib, left: Duration) -> Result<Option<End>, HypervisorError> {
        let until = Instant::now() + left;
        loop {
            let now = Instant::now();
            let p = self.prep.as_mut().expect("preparing");
            match p.actual {
                Some((a, _)) if a == actual => {}
                _ => p.actual = Some((actual, now)),
            }
            if now.saturating_duration_since(p.logged) >= Duration::from_secs(1) {
                p.logged = now;
                let target = p.target.map_or("not set yet".to_string(), |t| t.to_string());
                let msg = format!("preparing migration to {}: size {actual}, target {target}, {:.1} s", p.uri, now.saturating_duration_since(p.asked).as_secs_f64());
                self.log.event(&self.shared.name, EventKind::MigrationRequest, &msg, &[("size_kib", json!(actual.0))]);
            }
            let p = self.prep.as_ref().expect("preparing");
            if let Some(why) = prep_ready(p, actual, self.paused, now) {
                self.start_migration(qmp, actual, why)?;
                return Ok(None);
            }
            if now >= until {
                return Ok(None);
            }
            if let Some(end) = self.wait(PREPARE_POLL.min(until.saturating_duration_since(now)), Some(qmp)) {
                return Ok(Some(end));
            }
            if self.prep.is_none() {
                return Ok(None);
            }
            // An impossible `actual` leaves the last good one: not a reason to migrate.
            let configured = lock(&self.shared.status).configured;
            actual = match hypervisor::actual(qmp, configured) {
                Ok(a) => self.checked_actual(a).unwrap_or(actual),
                Err(e) if e.is_no_balloon() => actual,
                Err(e) => return Err(e),
            };
        }
    }

    /// Sends `migrate` for the prepared request. A command QEMU refuses ends the request
    /// (normal control resumes); a lost session is the caller's error.
    fn start_migration(&mut self, qmp: &dyn Hypervisor, actual: Kib, why: &str) -> Result<(), HypervisorError> {
        let p = self.prep.as_mut().expect("preparing");
        p.started = true;
        let (uri, bw, asked, target) = (p.uri.clone(), p.max_bandwidth, p.asked, p.target);
        let prepare_s = asked.elapsed().as_secs_f64();
        // The report first, so whoever sees the migration running also sees its size at start.
        self.migration_report(|r| {
            r.status = "setup".into();
            r.prepare_s = Some(prepare_s);
            r.size_at_start = Some(actual);
        });
        let sent = match bw {
            Some(b) => qmp.set_max_bandwidth(b),
            None => Ok(()),
        }
        .and_then(|()| qmp.migrate(&uri));
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
                if qmp.is_connected() {
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

    /// Keeps the agent link up: drops a closed one, connects (at most every AGENT_RETRY).
    fn tend_agent(&mut self, agent: &mut Option<AgentLink>, tried: &mut Option<Instant>, configured: Kib) {
        if agent.as_ref().is_some_and(|a| a.closed()) {
            self.note(EventKind::AgentLost, "agent channel closed; using guest-stats until it is back", &[]);
            *agent = None;
        }
        let Some(path) = &self.agent_path else { return };
        if agent.is_some() || tried.is_some_and(|t| t.elapsed() < AGENT_RETRY) {
            return;
        }
        *tried = Some(Instant::now());
        let wake = self.wake.clone();
        let on_short = move || {
            // Never blocks: a full queue already holds a reason to wake.
            let _ = wake.try_send(Msg::Short);
        };
        if let Ok(link) = AgentLink::connect_waking(path, configured, on_short) {
            *agent = Some(link);
        }
    }

    /// Applies a migration phase seen; true if the VM has left for the destination.
    fn migration_changed(&mut self, qmp: &dyn Hypervisor, migrating: &mut bool, phase: &MigrationPhase, agent: Option<&mut AgentLink>) -> bool {
        let ours = self.prep.as_ref().is_some_and(|p| p.started);
        let notice = match phase_change(*migrating, ours, phase) {
            PhaseChange::Started => {
                *migrating = true;
                if self.migration_shrink.allowed() {
                    // A shrink still under way goes on: it is memory the migration need not send.
                    self.note(EventKind::MigrationStarted, &format!("migration started ({})", self.migration_shrink), &[]);
                } else {
                    self.note(EventKind::MigrationStarted, "migration started: no shrinking until it ends", &[]);
                    self.freeze_shrink(qmp);
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
                self.migration_ended(qmp, phase);
                let then = if self.migration_shrink.allowed() { "normal control resumes" } else { "shrinking resumes" };
                self.note(EventKind::MigrationEnded, &format!("migration ended ({phase}): {then}"), &[("outcome", json!(outcome.to_string()))]);
                HostMessage::MigrationEnded { outcome }
            }
            PhaseChange::Unchanged => return false,
        };
        if let Some(a) = agent {
            if !matches!(a.send(&notice), Ok(true)) {
                self.note(EventKind::NoticeDropped, "the agent is not reading: migration notice dropped", &[]);
            }
        }
        if *phase == MigrationPhase::Ended(MigrationOutcome::Completed) {
            self.set_state(VmState::MigratedAway);
            self.log.event(&self.shared.name, EventKind::MigratedAway, "the VM now runs on the destination; leaving this QEMU alone", &[]);
            return true;
        }
        false
    }

    /// A shrink asked before the migration started would go on in the guest during it
    /// (the driver inflates towards the last target): the balloon is stopped where it is.
    fn freeze_shrink(&mut self, qmp: &dyn Hypervisor) {
        // Paused: the balloon is not ours to touch (and our last target is stale).
        if self.paused {
            return;
        }
        let (target, configured) = {
            let st = lock(&self.shared.status);
            (st.target, st.configured)
        };
        // An impossible `actual` is no size to stop the balloon at: left alone.
        let Ok(Some(actual)) = hypervisor::actual(qmp, configured).map(|a| self.checked_actual(a)) else { return };
        let Some(t) = target.filter(|t| t.saturating_add(PREPARE_SLACK) < actual) else { return };
        if qmp.set_guest_size(actual).is_ok() {
            lock(&self.shared.status).target = Some(actual);
            // The loop's last target is no longer QEMU's: it measures from the guest again.
            self.epoch += 1;
            self.note(EventKind::MigrationStarted, &format!("the balloon was still shrinking towards {t}: stopped at {actual} for the migration"), &[("size_kib", json!(actual.0))]);
        }
    }

    /// Records a migration's end in the status (QEMU's seconds, bytes and downtime) with
    /// one log line, and ends a `Migrate` request: normal control resumes.
    fn migration_ended(&mut self, qmp: &dyn Hypervisor, status: &MigrationPhase) {
        let info = qmp.migration().ok();
        let seconds = info.as_ref().and_then(|i| i.total_time).map(|d| d.as_millis() as f64 / 1000.0);
        let sent = info.as_ref().and_then(|i| i.sent).map(|b| b.0);
        let downtime = info.as_ref().and_then(|i| i.downtime).map(|d| d.as_millis() as u64);
        self.migration_report(|r| {
            r.status = status.to_string();
            r.seconds = seconds;
            r.sent_bytes = sent;
            r.downtime_ms = downtime;
        });
        let report = lock(&self.shared.status).last_migration.clone();
        let Some(r) = report else { return };
        let f = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.2}{unit}"));
        let mut msg = format!("migration {status}: {} s, {} MiB sent, downtime {} ms", f(r.seconds, ""), f(r.sent_mib(), ""), r.downtime_ms.map_or("-".into(), |d| d.to_string()));
        if let Some(p) = self.prep.take() {
            msg = format!("{msg}; to {}, prepared in {} s ({} -> {}); normal control resumes", p.uri, f(r.prepare_s, ""),
                r.size_asked.map_or("-".into(), |k| k.to_string()), r.size_at_start.map_or("-".into(), |k| k.to_string()));
        } else {
            msg = format!("{msg} (started by another tool)");
        }
        let fields = [("seconds", json!(r.seconds)), ("sent_bytes", json!(r.sent_bytes)), ("downtime_ms", json!(r.downtime_ms)), ("prepare_s", json!(r.prepare_s))];
        self.log.event(&self.shared.name, EventKind::MigrationRequest, &msg, &fields);
    }

    /// This QEMU is a stopped husk after an outgoing migration: wait until it goes away
    /// (then reconnect, in case a new QEMU takes the socket) or we are retargeted.
    fn wait_gone(&mut self, qmp: &dyn Hypervisor) -> End {
        *lock(&self.shared.mailbox) = None;
        loop {
            if let Some(end) = self.idle(self.interval) {
                return end;
            }
            if let Err(e) = qmp.run_state() {
                return End::Error(e);
            }
        }
    }
}

/// Time left until the next multiple of `interval` (a whole interval if exactly on one).
fn until_next_tick(elapsed: Duration, interval: Duration) -> Duration {
    let i = interval.as_nanos().max(1);
    Duration::from_nanos((i - elapsed.as_nanos() % i) as u64)
}

#[cfg(test)]
mod tests {
    use super::until_next_tick;
    use std::time::Duration;

    #[test]
    fn ticks_fall_on_multiples_of_the_interval() {
        let ms = Duration::from_millis;
        assert_eq!(until_next_tick(ms(0), ms(1000)), ms(1000));
        assert_eq!(until_next_tick(ms(2300), ms(1000)), ms(700));
        assert_eq!(until_next_tick(ms(2999), ms(1000)), ms(1));
    }
}
