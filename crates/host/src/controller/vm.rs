//! One VM's worker: connect (with back-off), then each tick sample → policy → guard rails →
//! QMP `balloon`. Watches migration: no shrinking while one runs, and tells the agent.

use super::agent_link::AgentLink;
use super::status::{Point, VmState, VmStatus};
use crate::config::{PolicyConfig, VmConfig};
use crate::log::Logger;
use autoballoon_core::control::ControlLoop;
use autoballoon_core::interval::Interval;
use autoballoon_core::policy::{MemView, Sample, SwapFree};
use autoballoon_core::protocol::HostMessage;
use autoballoon_core::{Bytes, Kib};
use autoballoon_qmp::{Backoff, MigrationStatus, Qmp, QmpError};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Commands from whoever embeds the controller (the demo, tests).
#[derive(Debug, Clone)]
pub enum VmCommand {
    /// The VM now lives behind these sockets (e.g. after a migration to a new QEMU).
    Retarget { qmp: PathBuf, agent: Option<PathBuf> },
    /// Leave the balloon alone until `Resume`.
    Pause,
    Resume,
    /// Just wake the worker (shutdown).
    Wake,
}

pub struct VmWorker {
    cfg: VmConfig,
    policy: PolicyConfig,
    interval: Duration,
    log: Logger,
    commands: Receiver<VmCommand>,
    shutdown: Arc<AtomicBool>,
    status: Arc<Mutex<VmStatus>>,
    started: Instant,
    paused: bool,
}

/// Why a session with one QEMU ended.
enum End {
    Shutdown,
    Retarget,
    Error(QmpError),
}

impl VmWorker {
    pub fn new(cfg: VmConfig, policy: PolicyConfig, interval: Duration, log: Logger, commands: Receiver<VmCommand>, shutdown: Arc<AtomicBool>) -> VmWorker {
        let status = VmStatus { name: cfg.name.clone(), source: "none", ..Default::default() };
        VmWorker { cfg, policy, interval, log, commands, shutdown, status: Arc::new(Mutex::new(status)), started: Instant::now(), paused: false }
    }

    pub fn status(&self) -> Arc<Mutex<VmStatus>> {
        self.status.clone()
    }

    fn set_state(&self, s: VmState) {
        self.status.lock().unwrap().state = s;
    }

    pub fn run(mut self) {
        let mut backoff = Backoff::default();
        let mut failing = false;
        while !self.shutdown.load(Ordering::SeqCst) {
            let qmp = match Qmp::connect(&self.cfg.qmp, Duration::from_secs(5)) {
                Ok(q) => q,
                Err(e) => {
                    if !failing {
                        self.log.event(&self.cfg.name, "unreachable", &format!("cannot reach QMP at {}: {e}; retrying", self.cfg.qmp.display()), &[]);
                        failing = true;
                    }
                    self.set_state(VmState::Unreachable);
                    let d = backoff.next_delay();
                    if let Some(End::Shutdown) = self.idle(d) {
                        return;
                    }
                    continue;
                }
            };
            backoff.reset();
            failing = false;
            match self.session(qmp) {
                End::Shutdown => return,
                End::Retarget => continue,
                End::Error(e) => {
                    self.log.event(&self.cfg.name, "disconnected", &format!("lost QMP: {e}; retrying"), &[]);
                    self.status.lock().unwrap().errors += 1;
                    self.set_state(VmState::Unreachable);
                }
            }
        }
    }

    /// Waits `d` while handling commands; `Some` if the session must end (retarget, shutdown).
    fn idle(&mut self, d: Duration) -> Option<End> {
        let deadline = Instant::now() + d;
        loop {
            if self.shutdown.load(Ordering::SeqCst) {
                return Some(End::Shutdown);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.commands.recv_timeout(left) {
                Ok(VmCommand::Retarget { qmp, agent }) => {
                    self.log.event(&self.cfg.name, "retarget", &format!("now managing QMP {}", qmp.display()), &[]);
                    self.cfg.qmp = qmp;
                    self.cfg.agent = agent;
                    return Some(End::Retarget);
                }
                Ok(VmCommand::Pause) => {
                    self.paused = true;
                    self.log.event(&self.cfg.name, "pause", "paused: the balloon is left alone", &[]);
                }
                Ok(VmCommand::Resume) => {
                    self.paused = false;
                    self.log.event(&self.cfg.name, "resume", "resumed", &[]);
                }
                Ok(VmCommand::Wake) => {}
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => {
                    // Nobody can steer us any more; just let the time pass.
                    std::thread::sleep(left);
                    return None;
                }
            }
        }
    }

    fn session(&mut self, qmp: Qmp) -> End {
        let name = self.cfg.name.clone();
        let configured = match qmp.query_memory_size_bytes() {
            Ok(b) => Bytes(b).to_kib_floor(),
            Err(e) => return End::Error(e),
        };
        // Events are off by default; while a migration already runs QEMU refuses, and
        // polling query-migrate covers it.
        let _ = qmp.enable_migration_events();
        let _ = qmp.set_stats_polling_interval(&self.cfg.balloon_device, 1);
        let mut migrating = match qmp.query_migrate() {
            Ok(m) => m.status.is_active(),
            Err(e) => return End::Error(e),
        };
        let mut agent: Option<AgentLink> = None;
        let mut lp = ControlLoop::new(SwapFree { buffer: Kib::from_mib_saturating(self.policy.buffer_mib), cache_buffer: Kib::from_mib_saturating(self.policy.cache_buffer_mib) }, self.policy.rails(), Interval::Fixed(self.interval));
        {
            let mut st = self.status.lock().unwrap();
            st.configured = configured;
            st.state = if migrating { VmState::Migrating } else { VmState::Running };
        }
        self.log.event(&name, "connected", &format!("managing {} (QEMU {}), configured {configured}", self.cfg.qmp.display(), qmp.version()), &[("configured_kib", json!(configured.0))]);
        let stale = Duration::from_secs(self.policy.agent_stale_s);
        let mut prev_size: Option<Kib> = None;
        loop {
            // 1. Migration events (and a poll while one runs, in case events are off).
            for ev in qmp.poll_events() {
                if let Some(status) = ev.migration_status() {
                    if self.migration_changed(&name, &mut migrating, &status, agent.as_mut()) {
                        return self.wait_gone(&qmp);
                    }
                }
            }
            if migrating {
                match qmp.query_migrate() {
                    Ok(m) => {
                        if self.migration_changed(&name, &mut migrating, &m.status, agent.as_mut()) {
                            return self.wait_gone(&qmp);
                        }
                    }
                    Err(e) => return End::Error(e),
                }
            }
            // 2. Sample: the balloon's `actual` and the guest's view.
            let size = match qmp.query_balloon() {
                Ok(b) => Bytes(b).to_kib_floor(),
                Err(e) => return End::Error(e),
            };
            if agent.as_ref().is_some_and(|a| a.closed()) {
                self.log.event(&name, "agent_lost", "agent channel closed; using guest-stats until it is back", &[]);
                agent = None;
            }
            if agent.is_none() {
                if let Some(p) = &self.cfg.agent {
                    agent = AgentLink::connect(p).ok();
                }
            }
            let now = Instant::now();
            // The estimator needs the size MemAvailable was measured at. The agent's report
            // may be a second older than `actual`; its own balloon count is consistent with
            // it, whereas mixing a fresh `actual` with a stale MemAvailable double-counts
            // whatever the balloon moved in between.
            let (mem, sampled_size, source, ooms) = match agent.as_ref().and_then(|a| a.latest()) {
                Some((at, s)) if now.duration_since(at) <= stale => {
                    let sized = s.balloon.map(|b| configured.saturating_sub(b.to_kib_saturating())).unwrap_or(size);
                    (Some(s.mem), sized, "agent", s.oom_kills)
                }
                // guest-stats carry no balloon count and refresh once a second: while the
                // balloon moves they describe a size that is gone, so decide nothing then.
                _ => match qmp.guest_stats(&self.cfg.balloon_device) {
                    Ok(_) if prev_size.is_some_and(|p| p != size) => (None, size, "guest-stats", None),
                    Ok(gs) => (guest_stats_view(&gs), size, "guest-stats", None),
                    Err(e) => return End::Error(e),
                },
            };
            prev_size = Some(size);
            let sample = Sample { at: now - self.started, vm_size: sampled_size, max: configured, mem, migrating };
            // 3. Policy and guard rails; 4. actuator.
            let tick = lp.tick(&sample);
            let mut target = lp.last_target();
            if self.paused {
                lp.forget_target();
                target = None;
            } else {
                match &tick.outcome {
                    Ok(a) => {
                        if let Err(e) = qmp.set_balloon_guest_size(a.target.to_bytes_saturating().0) {
                            lp.forget_target();
                            return End::Error(e);
                        }
                        let msg = format!("set size {} -> {}: {}{} [from {source}]", a.previous, a.target, a.reason, a.limits_note());
                        self.log.event(&name, "set_target", &msg, &[
                            ("target_kib", json!(a.target.0)), ("previous_kib", json!(a.previous.0)),
                            ("reason", json!(a.reason.to_string())), ("source", json!(source)),
                        ]);
                        let mut st = self.status.lock().unwrap();
                        st.actions += 1;
                        st.last_reason = a.reason.to_string();
                    }
                    Err(idle) => self.log.debug(&name, &format!("size {size}: {idle}")),
                }
            }
            {
                let used = mem.map(|m: MemView| sampled_size.saturating_sub(m.available));
                let mut st = self.status.lock().unwrap();
                st.size = size;
                st.target = target;
                st.used = used;
                st.source = source;
                if ooms.is_some() {
                    st.guest_oom_kills = ooms;
                }
                st.state = if self.paused { VmState::Paused } else if migrating { VmState::Migrating } else { VmState::Running };
                st.push(Point { t: sample.at.as_secs_f64(), size, target, used });
            }
            // 5. Wait for the next tick, handling commands meanwhile.
            if let Some(end) = self.idle(tick.next_in) {
                return end;
            }
        }
    }

    /// Applies a migration status change; true if the VM has left for the destination.
    fn migration_changed(&mut self, name: &str, migrating: &mut bool, status: &MigrationStatus, agent: Option<&mut AgentLink>) -> bool {
        let now_active = status.is_active();
        if now_active && !*migrating {
            *migrating = true;
            self.log.event(name, "migration_started", "migration started: no shrinking until it ends", &[]);
            if let Some(a) = agent {
                let _ = a.send(&HostMessage::MigrationStarted);
            }
        } else if !now_active && *migrating {
            *migrating = false;
            let outcome = status.to_string();
            self.log.event(name, "migration_ended", &format!("migration ended ({outcome}): shrinking resumes"), &[("outcome", json!(outcome))]);
            if let Some(a) = agent {
                let _ = a.send(&HostMessage::MigrationEnded { outcome: outcome.clone() });
            }
            if *status == MigrationStatus::Completed {
                self.set_state(VmState::MigratedAway);
                self.log.event(name, "migrated_away", "the VM now runs on the destination; leaving this QEMU alone", &[]);
                return true;
            }
        }
        false
    }

    /// This QEMU is a stopped husk after an outgoing migration: wait until it goes away
    /// (then reconnect, in case a new QEMU takes the socket) or we are retargeted.
    fn wait_gone(&mut self, qmp: &Qmp) -> End {
        loop {
            if let Some(end) = self.idle(self.interval) {
                return end;
            }
            if let Err(e) = qmp.query_status() {
                return End::Error(e);
            }
        }
    }
}

/// The guest's memory view from virtio-balloon statistics, when no agent reports. The
/// balloon device knows no Committed_AS, so `overcommitted` reads as zero.
fn guest_stats_view(gs: &autoballoon_qmp::GuestStats) -> Option<MemView> {
    let kib = |b: Option<u64>| b.map(|b| Bytes(b).to_kib_floor());
    Some(MemView {
        total: kib(gs.total_memory_bytes)?,
        free: kib(gs.free_memory_bytes)?,
        available: kib(gs.available_memory_bytes)?,
        cached: kib(gs.disk_caches_bytes).unwrap_or_default(),
        ..Default::default()
    })
}
