//! The actor's connections: its session with the VM's hypervisor (connect, reconnect with
//! back-off, the session's set-up, waiting out a husk after an outgoing migration) and the
//! agent link (reconnected at most every [`AGENT_RETRY`]).

use super::{Actor, End, Session};
use crate::controller::agent_link::{AgentLink, Wake};
use crate::controller::status::VmState;
use crate::controller::sync::lock;
use crate::config::Origin;
use crate::controller::Msg;
use crate::hypervisor::{self, Hypervisor, HypervisorError};
use crate::log::EventKind;
use autoballoon_core::migration::{MigrationPhase, MigrationShrink};
use autoballoon_core::protocol::{HostMessage, MigrationOutcome};
use autoballoon_core::Kib;
use autoballoon_qmp::Backoff;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one hypervisor command may take before the session is given up.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// A session that lasted this long was healthy: the reconnect back-off starts over.
const HEALTHY_SESSION: Duration = Duration::from_secs(30);
/// How often a missing agent socket is tried again.
const AGENT_RETRY: Duration = Duration::from_secs(5);
/// A link that has not carried a single line from the guest for this long since it
/// connected (an agent reports every second) is closed and connected again. QEMU (7.2 and
/// upstream alike, as read in hw/char/virtio-serial-bus.c and virtio-console.c) can keep a
/// port's output held after a migration: if the source held a half-sent line, the
/// destination flushes it while no client is connected yet, the write fails and the port
/// stays throttled with nothing to release it, so the guest's writes queue up unread;
/// closing the socket releases the port (the guest sees its host leave and come back).
const SILENT_LINK: Duration = Duration::from_secs(10);
/// Silent links closed in a row at most, so a guest without a running agent is not
/// disconnected every few seconds for good; a line that comes in starts the count over.
const SILENT_CLOSES: u32 = 3;
/// A VM found in the socket directory whose QMP socket has refused connections (or is
/// missing) for this long is gone: its QEMU ended and left the socket file behind.
pub(crate) const GONE_AFTER: Duration = Duration::from_secs(1);

impl Actor {
    /// A session with the VM's hypervisor (and the agent's socket it names).
    fn connect(&mut self) -> Result<Arc<dyn Hypervisor>, HypervisorError> {
        let c = hypervisor::connect(&self.cfg, COMMAND_TIMEOUT)?;
        self.agent_path = c.agent;
        Ok(c.hypervisor)
    }

    /// Sessions, one after the other, until shutdown: every reconnect backs off.
    ///
    /// A VM found in the socket directory leaves when its QEMU is gone: once nothing has
    /// listened on its QMP socket for [`GONE_AFTER`], the actor says so in
    /// [`VmShared::gone`](crate::controller::VmShared) and the controller removes the VM
    /// with one log line; until then the actor logs nothing about the lost session.
    pub(super) fn serve(&mut self) {
        let mut backoff = Backoff::default();
        let leaves = self.shared.origin == Origin::SocketDir;
        // A lost session's line, held back while the QEMU may be gone (a leaving VM).
        let mut lost: Option<String> = None;
        let mut refused_since: Option<Instant> = None;
        while !self.shutdown.load(Ordering::SeqCst) {
            let hv = match self.connect() {
                Ok(h) => h,
                Err(e) => {
                    if leaves && e.nobody_listens() {
                        let since = *refused_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= GONE_AFTER {
                            self.shared.gone.store(true, Ordering::SeqCst);
                        }
                        self.set_state(VmState::Unreachable);
                    } else {
                        refused_since = None;
                        if let Some(m) = lost.take() {
                            self.note(EventKind::Disconnected, &m, &[]);
                        }
                        let msg = format!("cannot reach {}: {e}; retrying", self.cfg.endpoint());
                        self.note(EventKind::Unreachable, &msg, &[]);
                        self.set_state(VmState::Unreachable);
                    }
                    if let Some(End::Shutdown) = self.idle(backoff.next_delay()) {
                        return;
                    }
                    continue;
                }
            };
            refused_since = None;
            self.shared.gone.store(false, Ordering::SeqCst);
            if let Some(m) = lost.take() {
                self.note(EventKind::Disconnected, &m, &[]);
            }
            *lock(&self.shared.session) = Some(hv.clone());
            // `stop` may have looked for the session just before it was published.
            if self.shutdown.load(Ordering::SeqCst) {
                hv.close();
            }
            let began = Instant::now();
            let end = self.session(&*hv);
            self.drop_unstarted_request();
            *lock(&self.shared.session) = None;
            *lock(&self.shared.mailbox) = None;
            match end {
                // Cut by `stop`: not a lost session.
                End::Shutdown | End::Error(_) if self.shutdown.load(Ordering::SeqCst) => return,
                End::Shutdown => return,
                // The VM now lives elsewhere: a request started here is not followed there.
                End::Retarget => {
                    self.prep = None;
                    backoff.reset();
                }
                End::Error(e) => {
                    let session = if self.cfg.libvirt_domain.is_some() { "the libvirt session" } else { "QMP" };
                    let msg = format!("lost {session}: {e}; retrying");
                    if leaves {
                        lost = Some(msg);
                    } else {
                        self.note(EventKind::Disconnected, &msg, &[]);
                    }
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

    /// A new session's set-up: the VM's configured size, migration events, the balloon
    /// driver's statistics period, whether a migration runs, whether the balloon may
    /// shrink during one; one log line. Also whether this QEMU is the destination of a
    /// migration that completed before the session began (it shows that migration
    /// completed and runs): its first guest-stats are the ones the guest wrote on the source.
    pub(super) fn begin_session(&mut self, hv: &dyn Hypervisor) -> Result<(Kib, bool, bool), HypervisorError> {
        let configured = hv.configured()?;
        // Events are off by default; while a migration already runs QEMU refuses, and
        // polling query-migrate covers it. An event wakes the actor (never blocking: a
        // full queue already holds a reason to wake).
        let wake = self.wake.clone();
        let _ = hv.enable_migration_events(Box::new(move || {
            let _ = wake.try_send(Msg::Migration);
        }));
        let _ = hv.set_stats_period(1);
        let phase = hv.migration()?.phase;
        let migrating = phase.is_running();
        // A QEMU waiting in `inmigrate` shows the incoming migration's status: it is the
        // destination, and when that migration completes the guest runs here.
        let run_state = hv.run_state().ok();
        self.incoming = migrating && run_state.as_deref() == Some("inmigrate");
        let arrived = phase == MigrationPhase::Ended(MigrationOutcome::Completed) && run_state.as_deref() == Some("running");
        self.end_vanished_request(&phase);
        self.migration_shrink = MigrationShrink::decide(self.shrink_setting, &hv.facts());
        self.epoch += 1;
        // A grow of a past session is not timed across sessions.
        self.grows.clear();
        {
            let mut st = lock(&self.shared.status);
            st.configured = configured;
            st.state = if migrating { VmState::Migrating } else { VmState::Running };
            st.migration_shrink = Some(self.migration_shrink.to_string());
        }
        let features = hv.balloon_features();
        let missing = features.missing();
        let advice = if missing.is_empty() { String::new() } else { format!(" ({} off: turning on QEMU's own switches makes spikes and migrations cheaper, docs/migration.md)", missing.join(" and ")) };
        self.balloon = features;
        lock(&self.shared.status).balloon_features = Some(features);
        let waiting = if self.incoming { "; waiting for an incoming migration (the guest runs here once it completes)" } else { "" };
        let msg = format!("managing {} ({}), configured {configured}; {}; balloon: {features}{advice}{waiting}", self.cfg.endpoint(), hv.describe(), self.migration_shrink);
        // Rate-limited too: a QEMU that drops every session right after the handshake
        // would otherwise log one line per reconnect.
        self.note(EventKind::Connected, &msg, &[("configured_kib", json!(configured.0))]);
        Ok((configured, migrating, arrived))
    }

    /// Decides again whether the balloon may shrink during a migration when what is known
    /// of the hypervisor changed since the session began (libvirt's QEMU version comes in
    /// the background: [`crate::libvirt::probe_version`]); between migrations only, with
    /// one log line.
    pub(super) fn refresh_migration_shrink(&mut self, hv: &dyn Hypervisor, migrating: bool) {
        if migrating || self.prep.is_some() {
            return;
        }
        let now = MigrationShrink::decide(self.shrink_setting, &hv.facts());
        if now == self.migration_shrink {
            return;
        }
        self.migration_shrink = now;
        lock(&self.shared.status).migration_shrink = Some(now.to_string());
        let msg = format!("now known: {}; {now}", hv.describe());
        self.note(EventKind::Connected, &msg, &[]);
    }

    /// Keeps the agent link up: sends a dropped notice again, drops a closed link, connects
    /// (at most every AGENT_RETRY).
    pub(super) fn tend_agent(&mut self, s: &mut Session) {
        let abilities = HostMessage::Abilities { backs_reported: self.balloon.backs_reported == Some(true) };
        if let Some(a) = s.agent.as_mut() {
            // An agent that started again while the link stayed up hears it again.
            if a.greeted() {
                let _ = a.send(&abilities);
            }
            // A notice the guest did not take: again, now that it may read.
            let _ = a.resend_dropped();
        }
        if s.agent.as_ref().is_some_and(|a| a.closed()) {
            self.note(EventKind::AgentLost, "agent channel closed; using guest-stats until it is back", &[]);
            s.agent = None;
        }
        match s.agent.as_ref().map(|a| a.silent_for()) {
            Some(None) => s.silent_closes = 0,
            // Not while a migration runs: the destination's device is loading.
            Some(Some(d)) if d >= SILENT_LINK && s.silent_closes < SILENT_CLOSES && !s.migrating => {
                s.silent_closes += 1;
                let msg = format!("agent channel silent for {} s since it connected: closing it and connecting again (QEMU may hold the port's output after a migration)", d.as_secs());
                self.note(EventKind::AgentSilent, &msg, &[]);
                lock(&self.shared.status).agent_reconnects += 1;
                s.agent = None;
                s.agent_tried = None;
            }
            _ => {}
        }
        let Some(path) = &self.agent_path else { return };
        if s.agent.is_some() || s.agent_tried.is_some_and(|t| t.elapsed() < AGENT_RETRY) {
            return;
        }
        s.agent_tried = Some(Instant::now());
        let wake = self.wake.clone();
        let on_wake = move |w: Wake| {
            // Never blocks: a full queue already holds a reason to wake.
            let _ = wake.try_send(match w {
                Wake::Short => Msg::Short,
                Wake::Freed => Msg::Freed,
            });
        };
        if let Ok(mut link) = AgentLink::connect_waking(path, s.configured, on_wake) {
            // What the agent's own work depends on, told on every new link (this session's
            // QEMU may differ from the last one's: a migration, an upgrade) and each time
            // the agent says hello. Dropped, it is owed as a migration notice is.
            let _ = link.send(&abilities);
            s.agent = Some(link);
        }
    }

    /// This QEMU is a stopped husk after an outgoing migration: wait until it goes away
    /// (then reconnect, in case a new QEMU takes the socket) or we are retargeted.
    pub(super) fn wait_gone(&mut self, hv: &dyn Hypervisor) -> End {
        *lock(&self.shared.mailbox) = None;
        loop {
            if let Some(end) = self.idle(self.interval) {
                return end;
            }
            if let Err(e) = hv.run_state() {
                return End::Error(e);
            }
        }
    }
}
