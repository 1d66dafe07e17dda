//! [`FakeQemu`]: a stateful QMP server on a unix socket, shaped after QEMU 7.2.

mod commands;
mod config;
mod fault;
mod server;
mod state;
pub(crate) mod wire;

pub use config::{BalloonMotion, FakeGuestStats, FakeQemuConfig, MigrationOutcome};
pub use fault::Fault;

use crate::sync::lock;
use crate::tempdir::TempDir;
use autoballoon_core::units::{Bytes, Kib};
use serde_json::Value;
use server::Shared;
use state::VmState;
use std::collections::BTreeMap;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// QOM path of the balloon device the fake has (`-device virtio-balloon-pci,id=balloon0`).
pub const BALLOON_PATH: &str = "/machine/peripheral/balloon0";

/// How long drop waits for the server thread before leaving it behind (it never blocks exit).
const STOP_WAIT: Duration = Duration::from_secs(2);

/// A fake QEMU serving QMP on a unix socket in a private temp dir; stopped and removed on drop.
pub struct FakeQemu {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    done: Receiver<()>,
    path: PathBuf,
    _dir: TempDir,
}

impl std::fmt::Debug for FakeQemu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeQemu")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Sends on drop, so the handle learns the thread ended even if it panicked.
struct DoneGuard(mpsc::Sender<()>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

impl FakeQemu {
    /// Starts a fake QEMU; panics if the socket cannot be created (a test setup failure).
    pub fn start(cfg: FakeQemuConfig) -> FakeQemu {
        FakeQemu::try_start(cfg).expect("cannot start FakeQemu")
    }

    /// Starts a fake QEMU listening at `<private temp dir>/qmp.sock`.
    pub fn try_start(cfg: FakeQemuConfig) -> std::io::Result<FakeQemu> {
        let dir = TempDir::new()?;
        let path = dir.path().join("qmp.sock");
        let listener = UnixListener::bind(&path)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(VmState::new(&cfg)),
            stop: AtomicBool::new(false),
            conn: Mutex::new(None),
        });
        let (tx, done) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fake-qemu".into())
            .spawn(move || {
                let _done = DoneGuard(tx);
                server::accept_loop(listener, &thread_shared);
            })?;
        Ok(FakeQemu {
            shared,
            thread: Some(thread),
            done,
            path,
            _dir: dir,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, VmState> {
        lock(&self.shared.state)
    }

    /// The QMP socket path (what `-qmp unix:PATH,server=on` would be).
    pub fn qmp_path(&self) -> &Path {
        &self.path
    }

    /// The VM's RAM size (`query-memory-size-summary`).
    pub fn configured(&self) -> Kib {
        self.state().configured
    }

    /// Changes the RAM size (as after memory hot-plug); later requests are clamped to it.
    pub fn set_configured(&self, configured: Kib) {
        self.state().configured = configured;
    }

    /// The guest's logical size now (`query-balloon` `actual` without faults), floored to KiB.
    pub fn actual(&self) -> Kib {
        Bytes(self.actual_bytes()).to_kib_floor()
    }

    /// The guest's logical size now, in bytes.
    pub fn actual_bytes(&self) -> u64 {
        self.state().balloon.actual(Instant::now())
    }

    /// Puts the guest at `actual` (as if its driver moved the balloon); it stays there until the next request.
    pub fn set_actual(&self, actual: Kib) {
        self.state()
            .balloon
            .set_actual(actual.to_bytes_saturating().0, Instant::now());
    }

    /// The size the last `balloon` request asked for (clamped to the RAM size).
    pub fn target(&self) -> Kib {
        Bytes(self.state().balloon.target()).to_kib_floor()
    }

    /// Changes how `actual` follows requests from now on.
    pub fn set_motion(&self, motion: BalloonMotion) {
        self.state().balloon.set_motion(motion, Instant::now());
    }

    /// Every `balloon` value received (well-typed ones, even if refused), oldest first, in KiB (floored).
    pub fn balloon_requests(&self) -> Vec<Kib> {
        self.state()
            .balloon_requests
            .iter()
            .map(|&b| Bytes(b).to_kib_floor())
            .collect()
    }

    /// Every `balloon` value received, in bytes as sent.
    pub fn balloon_requests_bytes(&self) -> Vec<u64> {
        self.state().balloon_requests.clone()
    }

    /// How many commands named `name` were received (input without an `execute` name counts as `(invalid)`).
    pub fn command_count(&self, name: &str) -> u64 {
        self.state().counts.get(name).copied().unwrap_or(0)
    }

    /// Received command counts by name.
    pub fn command_counts(&self) -> BTreeMap<String, u64> {
        self.state().counts.clone()
    }

    /// What `qom-get ... guest-stats` returns.
    pub fn guest_stats(&self) -> FakeGuestStats {
        self.state().guest_stats
    }

    /// Every value written to `x-populate-reported` ([`FakeQemuConfig::backs_reported`]),
    /// in bytes, oldest first.
    pub fn populate_requests(&self) -> Vec<u64> {
        self.state().populate_requests.clone()
    }

    /// Changes what `qom-get ... guest-stats` returns.
    pub fn set_guest_stats(&self, stats: FakeGuestStats) {
        self.state().guest_stats = stats;
    }

    /// The last `guest-stats-polling-interval` set by a client (0 at start).
    pub fn stats_polling_interval(&self) -> u64 {
        self.state().polling_interval
    }

    /// Whether a client turned on the `events` migration capability.
    pub fn migration_events_enabled(&self) -> bool {
        self.state().migration_events
    }

    /// Starts an outgoing migration (`query-migrate`: active; events `setup`, `active` if enabled).
    pub fn start_migration(&self) {
        self.state().start_migration(Instant::now());
    }

    /// Starts an incoming migration: run state `inmigrate`, `query-migrate` active (QEMU
    /// shows the incoming migration's status on its destination); events as an outgoing one.
    pub fn start_incoming_migration(&self) {
        self.state().start_incoming_migration(Instant::now());
    }

    /// Ends the migration; `Completed` also emits `STOP` and makes the run state `postmigrate`
    /// (on an incoming migration's destination: `RESUME`, `running`).
    pub fn finish_migration(&self, outcome: MigrationOutcome) {
        self.state().finish_migration(outcome);
    }

    /// The migration status as `query-migrate` reports it (`none` before any).
    pub fn migration_status(&self) -> &'static str {
        self.state().migration_status()
    }

    /// The run state `query-status` reports.
    pub fn run_state(&self) -> String {
        self.state().run_state.clone()
    }

    /// Changes the run state `query-status` reports (`running` means `"running": true`).
    pub fn set_run_state(&self, state: &str) {
        self.state().run_state = state.to_owned();
    }

    /// Sends an event to the client (data `Null`: none); false if no client has negotiated.
    pub fn emit_event(&self, name: &str, data: Value) -> bool {
        self.state().emit(name, data)
    }

    /// Injects a fault, replacing any other; it applies from the next command (or tick) on.
    pub fn set_fault(&self, fault: Fault) {
        self.state().fault = Some(fault);
    }

    /// Removes the fault: the fake behaves like QEMU again.
    pub fn clear_fault(&self) {
        self.state().fault = None;
    }

    /// The current fault.
    pub fn fault(&self) -> Option<Fault> {
        self.state().fault.clone()
    }

    /// How many times a client connected.
    pub fn connections(&self) -> u64 {
        self.state().connections
    }

    /// Whether a client is connected and has sent `qmp_capabilities`.
    pub fn is_negotiated(&self) -> bool {
        self.state().negotiated
    }

    /// Cuts the current client off (as if QEMU restarted); it may reconnect.
    pub fn disconnect(&self) {
        self.shared.cut();
    }
}

impl Drop for FakeQemu {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cut();
        if self.done.recv_timeout(STOP_WAIT).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}
