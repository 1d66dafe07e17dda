//! Shared setup of the controller tests: a controller on fake QEMUs and fake agent ports,
//! a JSON log in a file the test reads back, and a simulated guest that keeps the agent's
//! reports and QEMU's guest-stats consistent with the balloon's size.
#![allow(dead_code)]

use autoballoon::config::{Config, ControllerConfig, LogFormat, PolicyConfig, VmConfig};
use autoballoon::controller::{Controller, VmStatus};
use autoballoon::log::Logger;
use autoballoon_core::units::{Kib, Pages};
use autoballoon_fakes::{FakeAgentPort, FakeGuestStats, FakeQemu, FakeQemuConfig, TempDir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The VMs of these tests are 4 GiB.
pub const CONFIGURED_MIB: u64 = 4096;
/// Core's defaults: 64 MiB buffer, 128 MiB minimum.
pub const BUFFER_MIB: u64 = 64;
pub const MIN_MIB: u64 = 128;

pub fn mib(n: u64) -> Kib {
    Kib::from_mib_saturating(n)
}

pub fn configured() -> Kib {
    mib(CONFIGURED_MIB)
}

/// What the swap-free estimator asks for a guest using `used_mib` (no overcommit, no cache
/// buffer): used + the buffer, never below the minimum, never above the VM.
pub fn expected_target(used_mib: u64) -> Kib {
    mib((used_mib + BUFFER_MIB).clamp(MIN_MIB, CONFIGURED_MIB))
}

/// Waits for `cond` up to `timeout`; panics naming `what` (and the last `show`) otherwise.
pub fn wait_for(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    assert!(autoballoon_fakes::wait_until(timeout, &mut cond), "timed out after {timeout:?} waiting for {what}");
}

pub fn fake_qemu() -> FakeQemu {
    FakeQemu::start(FakeQemuConfig::new(configured()))
}

pub fn vm(name: &str, qemu: &FakeQemu, agent: Option<&Path>, policy: Option<PolicyConfig>) -> VmConfig {
    VmConfig { agent: agent.map(Into::into), policy, ..VmConfig::new(name, qemu.qmp_path()) }
}

/// Defaults, with a short hold-off after growth so tests need not wait 5 s to see a shrink.
/// A short hold-off and no spike headroom: the tests watch the estimate itself (the
/// headroom has its own test).
pub fn quick_policy() -> PolicyConfig {
    PolicyConfig { hold_off_s: 1, spike_hold_s: 0, spike_fade_s: 0, ..Default::default() }
}

/// The controller's JSON log, in a private temp dir.
pub struct LogFile {
    _dir: TempDir,
    pub path: PathBuf,
}

impl LogFile {
    pub fn new() -> (LogFile, Logger) {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("controller.log");
        let logger = Logger::new(LogFormat::Json, false).to_file(&path).unwrap();
        (LogFile { _dir: dir, path }, logger)
    }

    pub fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("log line is not JSON ({e}): {l}"))).collect()
    }

    pub fn count(&self, event: &str) -> usize {
        self.lines().iter().filter(|l| l["event"] == event).count()
    }

    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }
}

/// A running controller with its log.
pub struct Daemon {
    pub ctl: Option<Controller>,
    pub log: LogFile,
}

impl Daemon {
    pub fn start(vms: Vec<VmConfig>, interval_ms: u64) -> Daemon {
        Daemon::start_with(ControllerConfig { interval_ms, ..ControllerConfig::default() }, vms)
    }

    /// With these controller settings (the log is always JSON, to a file).
    pub fn start_with(controller: ControllerConfig, vms: Vec<VmConfig>) -> Daemon {
        let config = Config { controller: ControllerConfig { log_format: LogFormat::Json, ..controller }, defaults: PolicyConfig::default(), vms, ..Default::default() };
        config.validate().unwrap();
        let (log, logger) = LogFile::new();
        Daemon { ctl: Some(Controller::start(&config, logger)), log }
    }

    /// With this whole configuration (the log is always JSON, to a file).
    pub fn start_config(mut config: Config) -> Daemon {
        config.controller.log_format = LogFormat::Json;
        config.validate().unwrap();
        let (log, logger) = LogFile::new();
        Daemon { ctl: Some(Controller::start(&config, logger)), log }
    }

    pub fn ctl(&self) -> &Controller {
        self.ctl.as_ref().unwrap()
    }

    pub fn status(&self, name: &str) -> VmStatus {
        self.ctl().vm(name).unwrap_or_else(|| panic!("no VM {name}")).snapshot()
    }

    /// Stops the controller; returns how long that took.
    pub fn stop(&mut self) -> Duration {
        let t = Instant::now();
        if let Some(c) = self.ctl.take() {
            c.stop();
        }
        t.elapsed()
    }

    /// Waits until the VM's worker has taken `n` more samples than now.
    pub fn wait_samples(&self, name: &str, n: u64, timeout: Duration) {
        let start = self.status(name).samples;
        wait_for(timeout, &format!("{n} more samples of {name}"), || self.status(name).samples >= start + n);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Stop the workers on failure too; the stop time is bounded by the controller.
        self.stop();
    }
}

/// A fake QEMU and its agent port, to be shared with a thread. (The fakes are `Send` but
/// not `Sync`, hence the locks; each call locks only for that call.)
pub struct Fakes {
    qemu: Mutex<FakeQemu>,
    port: Mutex<FakeAgentPort>,
}

impl Fakes {
    pub fn start() -> Arc<Fakes> {
        Fakes::start_with(FakeQemuConfig::new(configured()))
    }
    pub fn start_with(config: FakeQemuConfig) -> Arc<Fakes> {
        Arc::new(Fakes { qemu: Mutex::new(FakeQemu::start(config)), port: Mutex::new(FakeAgentPort::start()) })
    }
    pub fn q(&self) -> MutexGuard<'_, FakeQemu> {
        self.qemu.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn p(&self) -> MutexGuard<'_, FakeAgentPort> {
        self.port.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// The VM's configuration, with its agent port.
    pub fn vm(&self, name: &str, policy: Option<PolicyConfig>) -> VmConfig {
        vm(name, &self.q(), Some(self.p().path()), policy)
    }
    pub fn last_request(&self) -> Option<Kib> {
        last_request(&self.q())
    }
    pub fn requests(&self) -> Vec<Kib> {
        self.q().balloon_requests()
    }
    pub fn wait_agent_connected(&self) {
        wait_for(Duration::from_secs(10), "the controller on the agent port", || self.p().is_connected());
    }
}

/// A simulated guest behind a fake QEMU and agent port: it uses `used` MiB, and its agent
/// (when on) reports every 250 ms with the balloon count matching QEMU's `actual`; its
/// balloon driver's guest-stats (when on) follow `actual` too. Its Committed_AS is `used`,
/// so a guest that wants more than its present size says so through `overcommitted`: the
/// estimator's target is `used + buffer` whatever size the balloon has.
pub struct Guest {
    pub fakes: Arc<Fakes>,
    used_mib: Arc<AtomicU64>,
    agent_on: Arc<AtomicBool>,
    stats_on: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Guest {
    /// A guest of 1900 MiB used on a fake QEMU whose balloon moves at 600 MiB/s (like a
    /// guest under TCG), controlled by a daemon ticking every 200 ms with `quick_policy`.
    pub fn slow_balloon() -> (Guest, Daemon) {
        use autoballoon_fakes::BalloonMotion;
        let g = Guest::start(Fakes::start_with(FakeQemuConfig { motion: BalloonMotion::PerSecond(mib(600)), ..FakeQemuConfig::new(configured()) }), 1900);
        let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
        (g, d)
    }

    /// On a [`Guest::slow_balloon`]: waits for the balloon at about 1964 MiB, then frees the
    /// guest's memory and waits for the shrink to be asked; returns the size asked, with
    /// the balloon still on its way there.
    pub fn shrink_in_flight(&self) -> Kib {
        let t = Duration::from_secs(10);
        // About 1964 MiB (a report taken while the balloon moves is off by a MiB or so).
        wait_for(t, "the balloon at about 1964 MiB", || self.fakes.last_request().is_some_and(|r| r.abs_diff(expected_target(1900)) <= mib(8) && self.q().actual() == r));
        self.set_used(100);
        wait_for(t, "a shrink asked", || self.fakes.last_request().is_some_and(|r| r < mib(1500)));
        assert!(self.q().actual() > mib(1500), "still in flight");
        self.fakes.last_request().unwrap()
    }

    pub fn start(fakes: Arc<Fakes>, used_mib: u64) -> Guest {
        let used = Arc::new(AtomicU64::new(used_mib));
        let agent_on = Arc::new(AtomicBool::new(true));
        let stats_on = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (f, used, agent_on, stats_on, rounds, stop) = (fakes.clone(), used.clone(), agent_on.clone(), stats_on.clone(), rounds.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last_sent = Instant::now() - Duration::from_secs(10);
                while !stop.load(Ordering::SeqCst) {
                    let used_mib = used.load(Ordering::SeqCst);
                    let (total, avail, balloon) = Guest::view(&f.q(), used_mib);
                    if stats_on.load(Ordering::SeqCst) {
                        f.q().set_guest_stats(FakeGuestStats::plausible(total, avail));
                    }
                    if agent_on.load(Ordering::SeqCst) && last_sent.elapsed() >= Duration::from_millis(250) {
                        let p = f.p();
                        if p.is_connected() {
                            let _ = p.send_sample(total, avail, mib(used_mib), balloon);
                            last_sent = Instant::now();
                        }
                    }
                    rounds.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Guest { fakes, used_mib: used, agent_on, stats_on, rounds, stop, thread: Some(thread) }
    }

    /// MemTotal, MemAvailable and the balloon's pages of a guest using `used_mib` at QEMU's size now.
    fn view(qemu: &FakeQemu, used_mib: u64) -> (Kib, Kib, Pages) {
        let size = qemu.actual();
        let balloon = qemu.configured().saturating_sub(size).to_pages_floor();
        (size, size.saturating_sub(mib(used_mib)), balloon)
    }

    pub fn q(&self) -> MutexGuard<'_, FakeQemu> {
        self.fakes.q()
    }
    pub fn p(&self) -> MutexGuard<'_, FakeAgentPort> {
        self.fakes.p()
    }
    pub fn set_used(&self, used_mib: u64) {
        self.used_mib.store(used_mib, Ordering::SeqCst);
    }
    /// Turns the agent's reports on or off (once off, no further report is sent).
    pub fn set_agent(&self, on: bool) {
        self.agent_on.store(on, Ordering::SeqCst);
        self.settle();
    }
    /// Turns the balloon driver's stats on (they follow the guest) or off (`NO_DRIVER`,
    /// until the test sets others).
    pub fn set_stats(&self, on: bool) {
        self.stats_on.store(on, Ordering::SeqCst);
        if !on {
            self.settle();
            self.q().set_guest_stats(FakeGuestStats::NO_DRIVER);
        }
    }
    /// Waits until the simulation has gone round twice (so a change of its knobs is seen).
    pub fn settle(&self) {
        let r = self.rounds.load(Ordering::SeqCst);
        wait_for(Duration::from_secs(5), "the simulated guest", || self.rounds.load(Ordering::SeqCst) >= r + 2);
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The last balloon request, in KiB.
pub fn last_request(q: &FakeQemu) -> Option<Kib> {
    q.balloon_requests().last().copied()
}

/// Every balloon request was within [min, configured].
pub fn assert_requests_in_bounds(q: &FakeQemu) {
    for r in q.balloon_requests() {
        assert!(r >= mib(MIN_MIB) && r <= configured(), "balloon request {r} outside [{}, {}]: {:?}", mib(MIN_MIB), configured(), q.balloon_requests());
    }
}

/// The resident set of this test process, from /proc/self/status.
pub fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
