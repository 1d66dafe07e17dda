//! One VM's I/O actor: the loop that ties its parts together. Each tick it follows the
//! VM's migration ([`migration`]), samples the VM ([`sampling`]: the balloon's `actual`,
//! the agent's report, guest-stats; merged by core's rule) and publishes the sample to its
//! mailbox; between ticks it applies the decider's targets and handles commands. Its
//! session with the hypervisor and the agent link are kept up by [`connection`]. It never
//! blocks on the guest.
//!
//! The decisions themselves are core's: the sample merge (`sample::merge`), when a
//! prepared migration starts and where a shrink stops (`migration::Preparation`,
//! `migration::stop_shrink_at`), what a migration phase seen means
//! (`migration::phase_change`).

mod connection;
mod migration;
mod sampling;

use super::agent_link::AgentLink;
use super::status::VmState;
use super::sync::{lock, panic_message};
use super::{Bell, Msg, PendingGrows, VmCommand, VmShared};
use crate::config::VmConfig;
use crate::hypervisor::{BalloonFeatures, Hypervisor, HypervisorError};
use crate::log::{EventKind, Logger, RateLimit};
use autoballoon_core::migration::{MigrationShrink, ShrinkSetting};
use autoballoon_core::Kib;
use autoballoon_qmp::Backoff;
use migration::Prep;
use sampling::Read;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a session with one hypervisor ended.
enum End {
    Shutdown,
    Retarget,
    Error(HypervisorError),
}

pub(crate) struct Actor {
    cfg: VmConfig,
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
    /// QEMU's switches on this session's balloon device (read once at connect; device
    /// properties are fixed for QEMU's life): samples carry free page reporting and
    /// hinting to the policy and the rails.
    balloon: BalloonFeatures,
    /// Grows accepted whose targets no sample has shown yet (the settle histogram).
    grows: PendingGrows,
    /// The migration that runs came in: this QEMU is its destination (it waited in
    /// `inmigrate`), and the guest runs here once it completes.
    incoming: bool,
    /// A migration of this VM runs (the session's, as of its last look): a report of
    /// memory freed ([`Msg::Freed`]) is then worth a sample at once.
    migrating: bool,
}

/// What one session with the hypervisor keeps from tick to tick.
struct Session {
    /// The VM's configured size: the balloon's ceiling.
    configured: Kib,
    /// A migration runs.
    migrating: bool,
    agent: Option<AgentLink>,
    /// When the agent's socket was last tried.
    agent_tried: Option<Instant>,
    /// Silent agent links closed in a row ([`connection::SILENT_CLOSES`]).
    silent_closes: u32,
    /// The balloon's `actual` at the last sample.
    prev_actual: Option<Kib>,
    /// The hypervisor's dropped events already reported.
    reported_drops: u64,
    /// Guest-stats count only if written after this (host epoch seconds,
    /// [`BalloonStats::written_after`]): a second past the end of an incoming migration
    /// (also one that had completed when the session began), so not what the destination
    /// got from the guest as it resumed (the guest wrote them on the source); and a second
    /// past every sample of a migration with free page hinting, so not what the guest
    /// wrote while hinting held its free memory (`stat-available-memory` 0 in a guest that
    /// needs nothing). 0 otherwise: any statistics QEMU has.
    ///
    /// [`BalloonStats::written_after`]: autoballoon_core::protocol::BalloonStats::written_after
    stats_after: u64,
}

impl Session {
    /// Guest-stats received from now until a second past now are not read: what the guest
    /// wrote before (on a migration's source, or while hinting held its memory) may still
    /// come in, stamped when QEMU got it.
    fn hold_guest_stats(&mut self) {
        self.stats_after = epoch_secs() + 1;
    }
}

/// Host time in seconds since the epoch, the clock of QEMU's and libvirt's `last-update`
/// (the daemon runs on the VM's host: a libvirt URI of another host, whose clock may be
/// off, would see guest-stats too late or too early).
fn epoch_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Actor {
    #[allow(clippy::too_many_arguments)]
    /// `shutdown` stops this actor (the controller's stop sets it, and so does the VM's
    /// removal); its agent staleness is the shared one ([`VmShared::agent_stale`]).
    pub fn new(cfg: VmConfig, interval: Duration, started: Instant, log: Logger, (wake, inbox): (SyncSender<Msg>, Receiver<Msg>), shutdown: Arc<AtomicBool>, bell: Arc<Bell>, shared: Arc<VmShared>) -> Actor {
        Actor { cfg, interval, started, log, inbox, wake, shutdown, bell, shared, paused: false, epoch: 0, limits: HashMap::new(), prep: None, resample: false, agent_path: None, shrink_setting: ShrinkSetting::Auto, migration_shrink: MigrationShrink::HeldUnknown, balloon: BalloonFeatures::default(), grows: PendingGrows::default(), incoming: false, migrating: false }
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

    /// The time on the actor's clock: since the controller started.
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// One session with the VM's hypervisor, tick after tick, until it ends.
    fn session(&mut self, hv: &dyn Hypervisor) -> End {
        let (configured, migrating, arrived) = match self.begin_session(hv) {
            Ok(s) => s,
            Err(e) => return End::Error(e),
        };
        let mut s = Session { configured, migrating, agent: None, agent_tried: None, silent_closes: 0, prev_actual: None, reported_drops: 0, stats_after: 0 };
        if arrived {
            s.hold_guest_stats();
        }
        loop {
            // 1. Migration: events, and a poll while one runs (in case events are off).
            match self.follow_migration(hv, &mut s) {
                Ok(false) => {}
                Ok(true) => return self.wait_gone(hv),
                Err(e) => return End::Error(e),
            }
            // 2. Sample: the balloon's `actual`, the agent's report, guest-stats if no
            //    fresh report; 3. publish it for the decider and show it.
            let actual = match self.read_actual(hv, s.configured) {
                Read::Actual(a) => a,
                Read::NoBalloon => {
                    if let Some(end) = self.wait(sampling::NO_BALLOON_RETRY, Some(hv)) {
                        return end;
                    }
                    continue;
                }
                Read::Lost(e) => return End::Error(e),
            };
            self.tend_agent(&mut s);
            self.migrating = s.migrating;
            self.refresh_migration_shrink(hv, s.migrating);
            self.sample(hv, &mut s, actual);
            // 4. Wait for the next tick, applying the decider's targets meanwhile. Ticks
            //    fall on multiples of the interval since the controller started, so all
            //    VMs are sampled together and the decider balances them in one step.
            if std::mem::take(&mut self.resample) {
                continue;
            }
            let next = sampling::until_next_tick(self.started.elapsed(), self.interval);
            if self.prep.as_ref().is_some_and(|p| !p.started) {
                match self.prepare(hv, actual, next) {
                    Ok(Some(end)) => return end,
                    Ok(None) => continue,
                    Err(e) => return End::Error(e),
                }
            }
            if let Some(end) = self.wait(next, Some(hv)) {
                return end;
            }
        }
    }

    /// Waits `d` while handling messages; `Some` if the session must end. `hv` applies
    /// the decider's targets; without one they are dropped (nothing to apply them to).
    fn wait(&mut self, d: Duration, hv: Option<&dyn Hypervisor>) -> Option<End> {
        let deadline = Instant::now() + d;
        loop {
            if self.shutdown.load(Ordering::SeqCst) {
                return Some(End::Shutdown);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(Msg::Set { size, grow_seen }) => {
                    if let (Some(h), false) = (hv, self.paused) {
                        if let Err(e) = self.apply(h, size, grow_seen) {
                            return Some(End::Error(e));
                        }
                        if let Some(p) = self.prep.as_mut().filter(|p| !p.started) {
                            p.prep.target_set(size);
                        }
                    }
                }
                Ok(Msg::BackAhead { size }) => {
                    if let (Some(h), false) = (hv, self.paused) {
                        self.back_ahead(h, size);
                    }
                }
                // Sample now (with a session to sample; paused VMs are left alone).
                Ok(Msg::Short | Msg::Migration) if hv.is_some() && !self.paused => return None,
                Ok(Msg::Freed) if hv.is_some() && !self.paused && self.migrating => return None,
                Ok(Msg::Short | Msg::Migration | Msg::Freed) => {}
                Ok(Msg::Held) => {
                    if let Some(p) = self.prep.as_mut().filter(|p| !p.started) {
                        p.prep.held();
                    }
                }
                Ok(Msg::Command(VmCommand::Migrate { uri, max_bandwidth })) => {
                    if self.request_migration(uri, max_bandwidth, hv.map(|h| h.can_migrate())) {
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
                    self.log.event(&self.shared.name, EventKind::Retarget, &format!("now managing {} (agent {})", self.cfg.endpoint(), self.cfg.agent_description()), &[]);
                    return Some(End::Retarget);
                }
                Ok(Msg::Command(VmCommand::Pause)) => {
                    if let Some(h) = hv {
                        self.stop_shrink(h, EventKind::Pause, "for the pause");
                    }
                    self.paused = true;
                    self.grows.clear();
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

    /// Has QEMU back `size` of the guest's reported memory again: one line (rate-limited,
    /// the guest's programs cause it), counted in the status.
    fn back_ahead(&mut self, hv: &dyn Hypervisor, size: Kib) {
        match hv.back_reported(size) {
            Ok(()) => {
                lock(&self.shared.status).backed_ahead += 1;
                self.note(EventKind::BackAhead, &format!("backing up to {size} of reported memory again: the guest's programs committed it and have not touched it yet"), &[("size_kib", serde_json::json!(size.0))]);
            }
            Err(e) => self.note(EventKind::BackAhead, &format!("could not back reported memory ahead ({e}); the guest faults it in itself"), &[]),
        }
    }

    /// Applies a target: the guest's size. A grow (`grow_seen`: since when the host had
    /// the sample it was decided on) is timed: its reaction now, its settling from now on.
    fn apply(&mut self, hv: &dyn Hypervisor, size: Kib, grow_seen: Option<Instant>) -> Result<(), HypervisorError> {
        match hv.set_guest_size(size) {
            Ok(()) => {
                let now = Instant::now();
                self.grows.accepted(size, grow_seen.is_some(), now);
                let mut st = lock(&self.shared.status);
                st.target = Some(size);
                if let Some(seen) = grow_seen {
                    st.grow_times.reaction.observe(now.saturating_duration_since(seen));
                }
                Ok(())
            }
            Err(e) if e.is_no_balloon() => {
                self.no_balloon(&e);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
