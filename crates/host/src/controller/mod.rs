//! The host controller: one I/O actor per QEMU VM and one decision step for all of them.
//!
//! ```text
//!  actor (thread per VM)                         decider (one thread)
//!  QMP query-balloon ─┐
//!  agent link report ─┼─ merge (core) ─► Sample ─► mailbox ─► HostLoop::tick
//!  guest-stats ───────┘                                        (policy, rails, balancer)
//!  QMP balloon ◄──────────── Msg::Set (bounded queue) ◄───────── action
//! ```
//!
//! Actors own all I/O and never wait on each other; the decider never does I/O (it reads
//! mailboxes and `try_send`s), so one VM's broken QEMU or guest cannot stall another's
//! control. A VM whose QEMU dies is logged and retried with back-off; a panic in one
//! actor is caught, logged and the actor restarted.

mod actor;
mod agent_link;
mod decider;
mod fleet;
mod reaction;
mod status;
mod sync;

pub use agent_link::{AgentLink, MAX_SAMPLES_PER_SEC};
pub use reaction::{GrowTimes, PendingGrows, SETTLE_SLACK};
pub use status::{History, HostStatus, LinkStats, MigrationReport, Point, StartedBy, VmState, VmStatus, HISTORY};
pub use sync::lock;

use crate::config::{Config, Origin};
use crate::log::Logger;
use autoballoon_core::host::VmId;
use autoballoon_core::Kib;
use autoballoon_core::sample::{Sample, SampleSource};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Commands from whoever embeds the controller (the demo, tests, the daemon's main).
#[derive(Debug, Clone)]
pub enum VmCommand {
    /// The VM now lives behind these sockets (e.g. after a migration to a new QEMU).
    Retarget { qmp: PathBuf, agent: Option<PathBuf> },
    /// Leave the balloon alone until `Resume`.
    Pause,
    Resume,
    /// Just wake the worker (shutdown).
    Wake,
    /// Migrate the VM: shrink it at once to the policy's estimate with
    /// `migration_buffer_mib` (no shrink step, no hold-off), wait until QMP `actual`
    /// reaches the target (at most [`PREPARE_WAIT`]), then `migrate` to `uri` (with
    /// `max_bandwidth` bytes/s if given), watch it to the end and report it in the status
    /// (`last_migration`) and one log line. Normal control resumes after success or failure.
    Migrate { uri: String, max_bandwidth: Option<u64> },
}

/// The longest a `Migrate` waits for the balloon before it migrates anyway (core's).
pub use autoballoon_core::migration::PREPARE_WAIT;

/// What reaches a VM's actor: a decision, or a command from outside.
#[derive(Debug, Clone)]
pub(crate) enum Msg {
    /// A target. `grow_seen`: the target is above the VM's size in the sample it was
    /// decided on, and the host had that sample since this instant (for the reaction-time
    /// histograms; `None` for other targets).
    Set { size: autoballoon_core::Kib, grow_seen: Option<Instant> },
    /// The decider decided on a sample that prepares a migration and changed nothing.
    Held,
    /// Back again this much of what free page reporting gave back of the guest's memory
    /// (core's `back_ahead`): a program committed it and has not touched it yet.
    BackAhead { size: autoballoon_core::Kib },
    /// The agent reports its guest running short of memory: sample now, so the decider
    /// can grow the VM without waiting for the next tick.
    Short,
    /// The agent reports its guest freed memory: while a migration runs, sample now, so
    /// the decider can shed it before the migration sends it; otherwise nothing is due.
    Freed,
    /// QEMU sent a migration event: look now, so a migration that another tool started
    /// is followed (and the VM shrunk, where that is allowed) before free page hinting
    /// takes the guest's free memory, not at the next tick.
    Migration,
    Command(VmCommand),
}

/// Messages an actor may have queued; beyond this the sender's message is dropped.
pub(crate) const QUEUE: usize = 16;

/// The latest sample an actor took, for the decider.
#[derive(Debug, Clone)]
pub(crate) struct Observation {
    pub sample: Sample,
    pub source: SampleSource,
    /// Changes whenever the VM's balloon may have been moved by someone else (a new QMP
    /// session, a retarget, a resume): the loop then forgets its last target.
    pub epoch: u64,
    pub taken: Instant,
    /// Since when the host has had this sample's view of the guest: the agent's report
    /// arriving when the view is the agent's, else `taken`.
    pub seen: Instant,
}

/// What an actor and the decider share about one VM.
pub(crate) struct VmShared {
    pub name: String,
    pub id: VmId,
    /// How the VM came to be managed.
    pub origin: Origin,
    /// The policy's `agent_stale_s`, in ms (a reload may change it).
    pub agent_stale_ms: AtomicU64,
    /// A discovered VM's QEMU is gone (its socket refuses connections): the controller
    /// removes the VM.
    pub gone: AtomicBool,
    pub status: Mutex<VmStatus>,
    pub history: Mutex<History>,
    pub mailbox: Mutex<Option<Observation>>,
    /// The actor's QMP session while it has one, so `stop` can cut a command QEMU never
    /// answers instead of waiting out its timeout.
    pub session: Mutex<Option<Arc<dyn crate::hypervisor::Hypervisor>>>,
}

impl VmShared {
    pub fn agent_stale(&self) -> Duration {
        Duration::from_millis(self.agent_stale_ms.load(Ordering::Relaxed))
    }
}

/// Wakes the decider when an actor has published a sample.
#[derive(Default)]
pub(crate) struct Bell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Bell {
    pub fn ring(&self) {
        *lock(&self.rung) = true;
        self.cv.notify_one();
    }
    /// Waits until rung or `timeout`; clears the bell.
    pub fn wait(&self, timeout: Duration) {
        let g = lock(&self.rung);
        let (mut g, _) = self.cv.wait_timeout_while(g, timeout, |r| !*r).unwrap_or_else(|e| e.into_inner());
        *g = false;
    }
}

/// A running VM, as seen from outside: its status and a way to steer it.
#[derive(Clone)]
pub struct VmHandle {
    pub name: String,
    shared: Arc<VmShared>,
    commands: SyncSender<Msg>,
}

/// A read-only view of one VM's status that can be handed to another thread.
#[derive(Clone)]
pub struct StatusView(Arc<VmShared>);

impl StatusView {
    /// The VM's status, without its time series.
    pub fn snapshot(&self) -> VmStatus {
        lock(&self.0.status).clone()
    }
}

impl VmHandle {
    /// A view of the status for another thread (a live display, a watcher).
    pub fn status_view(&self) -> StatusView {
        StatusView(self.shared.clone())
    }
    /// The VM's status, without its time series.
    pub fn snapshot(&self) -> VmStatus {
        lock(&self.shared.status).clone()
    }
    /// The VM's time series (one point per sample, at most [`HISTORY`]).
    pub fn history(&self) -> Vec<Point> {
        lock(&self.shared.history).to_vec()
    }
    /// Sends a command without blocking; false if the worker is gone or its queue is full.
    pub fn command(&self, c: VmCommand) -> bool {
        self.commands.try_send(Msg::Command(c)).is_ok()
    }
    /// A handle that sends this VM commands from another thread (the status socket).
    pub fn commander(&self) -> VmCommander {
        VmCommander(self.commands.clone())
    }
}

/// Sends one VM commands; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct VmCommander(SyncSender<Msg>);

impl VmCommander {
    /// As [`VmHandle::command`].
    pub fn command(&self, c: VmCommand) -> bool {
        self.0.try_send(Msg::Command(c)).is_ok()
    }
}

struct Worker {
    thread: JoinHandle<()>,
    done: Receiver<()>,
}

impl Worker {
    /// Whether the thread has ended.
    fn finished(&self) -> bool {
        matches!(self.done.try_recv(), Err(std::sync::mpsc::TryRecvError::Disconnected))
    }

    /// Waits for the thread until `deadline`; a thread still running then is left behind.
    fn wait(self, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        // `done`'s sender is dropped when the thread ends.
        if let Err(std::sync::mpsc::RecvTimeoutError::Disconnected) = self.done.recv_timeout(left) {
            let _ = self.thread.join();
        }
    }
}

/// The VMs managed now, as the status socket and the metrics endpoint read them.
pub type Registry = Arc<Mutex<Vec<VmHandle>>>;

/// The host controller: one actor per managed VM, the decider, and the threads that keep
/// the set of VMs in line with the configuration and what discovery finds.
pub struct Controller {
    fleet: Arc<fleet::Fleet>,
    /// The host as the decider saw it at its last step.
    host: Arc<Mutex<HostStatus>>,
    shutdown: Arc<AtomicBool>,
    bell: Arc<Bell>,
    workers: Vec<Worker>,
}

/// How long `stop` waits for each thread before leaving it behind.
const STOP_WAIT: Duration = Duration::from_secs(15);

impl Controller {
    /// Starts one actor per configured VM (and per VM `[discovery]` finds, from its first
    /// scan on), the decider, and discovery.
    pub fn start(config: &Config, logger: Logger) -> Controller {
        Controller::start_with_proc_dir(config, logger, PathBuf::from("/proc"))
    }

    /// As [`Controller::start`], with the host's own memory figures (`meminfo`,
    /// `pressure/memory`) read from `proc_dir` instead of `/proc`: tests give it a
    /// directory whose `meminfo` they rewrite, a fake host.
    pub fn start_with_proc_dir(config: &Config, logger: Logger, proc_dir: PathBuf) -> Controller {
        let shutdown = Arc::new(AtomicBool::new(false));
        let bell = Arc::new(Bell::default());
        let started = Instant::now();
        let interval = Duration::from_millis(config.controller.interval_ms);
        let (changes_tx, changes) = std::sync::mpsc::channel();
        let fleet = Arc::new(fleet::Fleet::new(config, logger.clone(), changes_tx, shutdown.clone(), bell.clone(), started));
        // The configured VMs, and the socket directory as it is now, before the decider's
        // first step.
        fleet.scan_sockets();
        fleet.reconcile();
        let c = &config.controller;
        let memory = decider::HostMemory {
            proc_dir,
            pressure_file: (!c.pressure_file.as_os_str().is_empty()).then(|| c.pressure_file.clone()),
            capacity: (c.capacity_mib > 0).then(|| Kib::from_mib_saturating(c.capacity_mib)),
            reserve: Kib::from_mib_saturating(c.host_reserve_mib),
            cgroup: (!c.memory_cgroup.as_os_str().is_empty()).then(|| c.memory_cgroup.clone()),
        };
        let target = c.reclaim().target().map(|t| t.get());
        let host = Arc::new(Mutex::new(HostStatus { reclaim_mode: c.reclaim.as_str(), reclaim_target_pct: target, ..Default::default() }));
        let d = decider::Decider::new(changes, c.balancer.build_for(Default::default(), c.reclaim()), memory, host.clone(), interval, started, logger, shutdown.clone(), bell.clone());
        let mut workers = vec![spawn("decider", move || d.run())];
        let f = fleet.clone();
        workers.push(spawn("discovery", move || f.watch_sockets()));
        let f = fleet.clone();
        workers.push(spawn("discovery-libvirt", move || f.watch_libvirt()));
        Controller { fleet, host, shutdown, bell, workers }
    }

    /// The VMs managed now, in the order they were added.
    pub fn vms(&self) -> Vec<VmHandle> {
        lock(&self.fleet.registry).clone()
    }

    /// How many VMs are managed now, without copying their handles.
    pub fn vm_count(&self) -> usize {
        lock(&self.fleet.registry).len()
    }

    pub fn vm(&self, name: &str) -> Option<VmHandle> {
        lock(&self.fleet.registry).iter().find(|v| v.name == name).cloned()
    }

    /// The host as the decider saw it at its last step (for the metrics endpoint).
    pub fn host_status(&self) -> HostStatus {
        lock(&self.host).clone()
    }

    /// A view of the host's status for another thread (the metrics endpoint).
    pub fn host_view(&self) -> Arc<Mutex<HostStatus>> {
        self.host.clone()
    }

    /// The managed VMs, as they change (for the status socket and the metrics endpoint).
    pub fn registry(&self) -> Registry {
        self.fleet.registry.clone()
    }

    /// Applies a reloaded configuration's `[defaults]`, `[[vm]]`, `[[match]]` and
    /// `[discovery]` at once: removed VMs are stopped, new ones started, changed ones
    /// updated (sockets retargeted, policies replaced; a VM whose libvirt domain, URI or
    /// balloon device changed is restarted). The `[controller]` keys stay as they were
    /// at start. Returns one phrase per change.
    pub fn reconfigure(&self, config: &Config) -> Vec<String> {
        self.fleet.reconfigure(config)
    }

    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    /// Stops every thread and waits for them, at most [`STOP_WAIT`] each: a thread stuck
    /// in a system call is left behind rather than hang the daemon's exit.
    pub fn stop(self) {
        self.shutdown.store(true, Ordering::SeqCst);
        let vm_workers = self.fleet.stop_all();
        self.bell.ring();
        self.fleet.wake.ring();
        let deadline = Instant::now() + STOP_WAIT;
        for w in vm_workers.into_iter().chain(self.workers) {
            w.wait(deadline);
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Worker {
    let (tx, done) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _alive = tx;
            f()
        })
        .expect("spawning a thread");
    Worker { thread, done }
}

/// `try_send` with the reason it failed, for the decider's logs.
pub(crate) fn offer(tx: &SyncSender<Msg>, m: Msg) -> Result<(), &'static str> {
    tx.try_send(m).map_err(|e| match e {
        TrySendError::Full(_) => "the VM's worker is busy (queue full)",
        TrySendError::Disconnected(_) => "the VM's worker is gone",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BalancerKind, LogFormat};

    /// A host with no VMs yet (the packaged default configuration): the controller runs,
    /// every balancer steps over nothing, and it stops promptly.
    #[test]
    fn a_controller_with_no_vms_runs_and_stops() {
        for balancer in [BalancerKind::Independent, BalancerKind::CapGrowth, BalancerKind::Iballoon, BalancerKind::Pressure, BalancerKind::Shares] {
            let mut config = Config::parse("[controller]\ninterval_ms = 100\n").unwrap();
            config.controller.balancer = balancer;
            let ctl = Controller::start(&config, Logger::new(LogFormat::Json, false));
            assert!(ctl.vms().is_empty());
            std::thread::sleep(Duration::from_millis(350));
            let asked = Instant::now();
            ctl.stop();
            assert!(asked.elapsed() < Duration::from_secs(2), "{balancer:?}: stop took {:?}", asked.elapsed());
        }
    }
}
