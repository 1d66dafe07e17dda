//! The decider: one thread, no I/O. Each step it reads every VM's latest sample from the
//! actors' mailboxes (the [`World`] of a QEMU host), runs core's [`HostLoop`] — per-VM
//! policy and rails, one balancer over all VMs — and hands each action to its actor's
//! bounded queue without waiting. It logs one line per action, with its reason.

use super::sync::{lock, panic_message};
use super::fleet::Change;
use super::{offer, Bell, Msg, Observation};
use crate::log::{EventKind, Logger, RateLimit};
use autoballoon_core::host::{host_step, Balancer, Claim, HostLoop, HostMemoryUse, HostSample, HostView, ReclaimStep, VmId, World};
use autoballoon_core::policy::SwapFree;
use autoballoon_core::procfs::{parse_meminfo, parse_pressure, parse_vmstat};
use super::status::HostStatus;
use autoballoon_core::sample::SampleSource;
use autoballoon_core::Kib;
use std::path::PathBuf;
use serde_json::json;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One managed VM as the decider sees it.
struct Vm {
    shared: Arc<super::VmShared>,
    tx: SyncSender<Msg>,
    /// The epoch of the last observation used; a new one makes the loop forget its target.
    epoch: u64,
    /// Where the last used sample's view came from, for the action's log line.
    source: SampleSource,
    /// When the last sample used in a step was taken.
    used: Option<Instant>,
    /// That sample's size, and since when the host had its view (a target above the size
    /// is a grow, timed from then).
    size: Kib,
    seen: Option<Instant>,
    refused: RateLimit,
    /// How old its latest sample was when the last step left it out (older than
    /// `max_age`): the balancer then keeps what it was last given out of the capacity.
    left_out: Option<Duration>,
    /// Whether the log says it is left out (one line when it goes, one when it is back).
    logged_left_out: bool,
    stale: RateLimit,
}

/// The balancer, watched for the metrics: what the VMs wanted together at its last call.
/// Every [`Balancer`] method is forwarded (a new one must be added here too).
pub(crate) struct Watched {
    inner: Box<dyn Balancer + Send>,
    wanted: Option<Kib>,
}

impl Watched {
    pub fn new(inner: Box<dyn Balancer + Send>) -> Watched {
        Watched { inner, wanted: None }
    }

    /// The sum of the claims' wants at the last step: each VM's policy inside its own rails
    /// (what it would get with no host limit), or its present target if it was not due.
    pub fn wanted(&self) -> Option<Kib> {
        self.wanted
    }
}

impl Balancer for Watched {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn balance(&mut self, host: &HostView, claims: &[Claim]) -> Vec<Kib> {
        self.wanted = Some(claims.iter().fold(Kib::ZERO, |a, c| a.saturating_add(c.want)));
        self.inner.balance(host, claims)
    }
    fn class(&self, vm: VmId) -> Option<&'static str> {
        self.inner.class(vm)
    }
    fn short(&self) -> Option<Kib> {
        self.inner.short()
    }
    fn reclaim_step(&self) -> Option<ReclaimStep> {
        self.inner.reclaim_step()
    }
}

/// Where the host's own memory figures come from, and what the VMs may have together.
pub(crate) struct HostMemory {
    /// The host's procfs (`/proc`; tests point it at a fixture tree).
    pub proc_dir: PathBuf,
    /// The PSI file of the host's memory pressure; `None`: `proc_dir`'s `pressure/memory`.
    pub pressure_file: Option<PathBuf>,
    /// A fixed capacity; `None`: MemAvailable plus what the VMs hold, less `reserve`
    /// (and at most what `cgroup` leaves them).
    pub capacity: Option<Kib>,
    pub reserve: Kib,
    /// The VMs' memory cgroup (v2 or v1 directory), whose limit bounds the capacity.
    pub cgroup: Option<PathBuf>,
}

/// Reads the first of `files` in `dir` that holds a number of bytes (`max`, v2's
/// "no limit", is none), in KiB.
fn cgroup_kib(dir: &std::path::Path, files: &[&str]) -> Option<Kib> {
    files.iter().find_map(|f| std::fs::read_to_string(dir.join(f)).ok()).and_then(|t| t.trim().parse::<u64>().ok()).map(|b| Kib(b / 1024))
}

/// What a memory cgroup with a limit leaves VMs that hold `held`: `limit − (usage −
/// inactive file cache) + held`, at most the limit. The VMs' memory is counted as if all of
/// it were resident (their QEMUs' resident memory is not known here), so until the guests
/// have touched their memory the QEMUs' own part of the usage counts as theirs. `None`
/// without a limit (v2 `max`, v1's near-`u64::MAX` default) or readable files.
fn cgroup_capacity(dir: &std::path::Path, held: Kib) -> Option<Kib> {
    let limit = cgroup_kib(dir, &["memory.max", "memory.limit_in_bytes"]).filter(|l| l.0 < 1 << 50)?;
    let usage = cgroup_kib(dir, &["memory.current", "memory.usage_in_bytes"])?;
    // Page cache the kernel drops first is room, as in MemAvailable (v2 `inactive_file`,
    // v1's hierarchical `total_inactive_file`). memory.stat is `name value` lines, as
    // /proc/vmstat.
    let stat = std::fs::read_to_string(dir.join("memory.stat")).ok().and_then(|t| parse_vmstat(&t).ok());
    let cache = stat.and_then(|s| s.get("total_inactive_file").or_else(|| s.get("inactive_file"))).map_or(Kib::ZERO, |b| Kib(b / 1024));
    Some(limit.saturating_sub(usage.saturating_sub(cache)).saturating_add(held).min(limit))
}

impl HostMemory {
    /// The host's view at this step: its PSI, its memory (MemTotal, MemAvailable) and the
    /// VMs' capacity.
    /// Reading two small procfs files never blocks; a host without them has no pressure
    /// and no capacity unless one is configured.
    fn view(&self, vms_hold: Kib) -> HostView {
        let read = |f: &str| std::fs::read_to_string(self.proc_dir.join(f)).ok();
        let psi = self.pressure_file.clone().unwrap_or_else(|| self.proc_dir.join("pressure/memory"));
        let pressure = std::fs::read_to_string(psi).ok().and_then(|t| parse_pressure(&t).ok());
        // The host's memory and its use (MemTotal and MemAvailable): for the reclaim mode,
        // and for the capacity below.
        let memory = read("meminfo").and_then(|t| parse_meminfo(&t).ok()).and_then(|m| HostMemoryUse::from_meminfo(&m).ok());
        // Without a configured capacity: what the host has, and what the VMs' cgroup leaves,
        // each plus what the VMs hold (counted as if all of it were resident).
        let host = memory.map(|m| m.available.saturating_add(vms_hold).saturating_sub(self.reserve));
        let group = || self.cgroup.as_deref().and_then(|g| cgroup_capacity(g, vms_hold));
        let capacity = self.capacity.or_else(|| match (host, group()) {
            (Some(h), Some(g)) => Some(h.min(g)),
            (h, g) => h.or(g),
        });
        HostView { capacity, pressure, memory }
    }
}

/// `wanted − capacity` when positive, else 0; unknown without both.
pub(crate) fn shortfall(wanted: Option<Kib>, capacity: Option<Kib>) -> Option<Kib> {
    Some(wanted?.saturating_sub(capacity?))
}

/// The QEMU host as core's host loop sees it: samples from the actors' mailboxes,
/// actions into their queues. Never blocks.
struct QemuHost {
    vms: Vec<Vm>,
    started: Instant,
    /// Samples older than this are not used (the actor is stuck or the VM unreachable).
    max_age: Duration,
    memory: HostMemory,
    /// The host's figures at the last sample, for the metrics.
    look: HostView,
}

impl Vm {
    /// Whether `o` was taken after the last sample a step used.
    fn is_new(&self, o: &Observation) -> bool {
        self.used.is_none_or(|u| o.taken > u)
    }
}

impl QemuHost {
    fn find(&self, id: VmId) -> Option<&Vm> {
        self.vms.iter().find(|v| v.shared.id == id)
    }

    /// Whether every VM that has a sample has a new one since the last step, and no VM
    /// is still waiting for its first during the start-up grace.
    fn all_fresh(&self, starting: bool) -> bool {
        self.vms.iter().all(|vm| match lock(&vm.shared.mailbox).as_ref() {
            Some(o) => vm.is_new(o),
            None => !starting,
        })
    }

    /// Whether a VM published a new sample that says its guest is running short: decide
    /// now, without waiting for the others.
    fn short_fresh(&self) -> bool {
        self.vms.iter().any(|vm| lock(&vm.shared.mailbox).as_ref().is_some_and(|o| o.sample.running_short && vm.is_new(o)))
    }
}

impl World for QemuHost {
    type Error = &'static str;

    fn sample(&mut self) -> HostSample {
        let now = Instant::now();
        let mut s = HostSample { at: now - self.started, host: HostView::default(), vms: Vec::new(), forget: Vec::new() };
        for vm in &mut self.vms {
            let Some(o): Option<Observation> = lock(&vm.shared.mailbox).clone() else { continue };
            let age = now.saturating_duration_since(o.taken);
            vm.left_out = (age > self.max_age).then_some(age);
            if vm.left_out.is_some() {
                continue;
            }
            if o.epoch != vm.epoch {
                vm.epoch = o.epoch;
                s.forget.push(vm.shared.id);
            }
            vm.source = o.source;
            vm.used = Some(o.taken);
            vm.size = o.sample.guest_size;
            vm.seen = Some(o.seen);
            s.vms.push((vm.shared.id, o.sample));
        }
        let hold = s.vms.iter().fold(Kib::ZERO, |a, (_, v)| a.saturating_add(v.guest_size));
        self.look = self.memory.view(hold);
        s.host = self.look;
        s
    }

    fn set_guest_size(&mut self, vm: VmId, guest_size: Kib) -> Result<(), &'static str> {
        let v = self.find(vm).ok_or("the VM is no longer managed")?;
        let grow_seen = v.seen.filter(|_| guest_size > v.size);
        offer(&v.tx, Msg::Set { size: guest_size, grow_seen })
    }

    fn back_ahead(&mut self, vm: VmId, size: Kib) {
        if let Some(v) = self.find(vm) {
            // A full queue drops it: the next running-short sample asks again.
            let _ = offer(&v.tx, Msg::BackAhead { size });
        }
    }
}

pub(crate) struct Decider {
    world: QemuHost,
    /// VMs added and removed, policies and the balancer replaced.
    changes: Receiver<Change>,
    hl: HostLoop<SwapFree, Watched>,
    /// The host at the last step, for the metrics endpoint.
    host: Arc<std::sync::Mutex<HostStatus>>,
    /// The host is short of memory (an episode runs): warned once at its start.
    short: Option<Kib>,
    /// What the `host-need` reclaim mode found at the last step: a line when it changes.
    reclaim: Option<ReclaimStep>,
    interval: Duration,
    log: Logger,
    shutdown: Arc<AtomicBool>,
    bell: Arc<Bell>,
}

impl Decider {
    #[allow(clippy::too_many_arguments)]
    pub fn new(changes: Receiver<Change>, balancer: Box<dyn Balancer + Send>, memory: HostMemory, host: Arc<std::sync::Mutex<HostStatus>>, interval: Duration, started: Instant, log: Logger, shutdown: Arc<AtomicBool>, bell: Arc<Bell>) -> Decider {
        let world = QemuHost { vms: Vec::new(), started, max_age: interval * 3, memory, look: HostView::default() };
        Decider { world, changes, hl: HostLoop::new(Watched::new(balancer)), host, short: None, reclaim: None, interval, log, shutdown, bell }
    }

    /// Takes the changes to the set of VMs made since the last call.
    fn apply_changes(&mut self) {
        while let Ok(c) = self.changes.try_recv() {
            match c {
                Change::Add { shared, tx, policy } => {
                    self.hl.add_vm(shared.id, policy.control_loop(self.interval));
                    self.world.vms.push(Vm { shared, tx, epoch: 0, source: SampleSource::None, used: None, size: Kib::ZERO, seen: None, refused: RateLimit::default(), left_out: None, logged_left_out: false, stale: RateLimit::default() });
                }
                Change::Remove(id) => {
                    self.hl.remove_vm(id);
                    self.world.vms.retain(|v| v.shared.id != id);
                }
                Change::Policy(id, policy) => {
                    // The new loop measures from the VM's next sample.
                    if self.world.find(id).is_some() {
                        self.hl.add_vm(id, policy.control_loop(self.interval));
                    }
                }
                Change::Balancer(b) => {
                    let mut hl = HostLoop::new(Watched::new(b));
                    for v in &self.world.vms {
                        if let Some(lp) = self.hl.remove_vm(v.shared.id) {
                            hl.add_vm(v.shared.id, lp);
                        }
                    }
                    self.hl = hl;
                }
            }
        }
    }

    pub fn run(mut self) {
        while !self.shutdown.load(Ordering::SeqCst) {
            self.apply_changes();
            self.bell.wait(self.interval);
            self.apply_changes();
            // The actors sample on the same tick: give the others a moment to publish, so
            // the balancer decides for every VM in one step. At start-up, wait (up to two
            // intervals) for VMs that have not published at all yet.
            let starting = self.world.started.elapsed() < self.interval * 2;
            let window = if starting { self.interval * 2 } else { self.interval / 4 };
            let until = Instant::now() + window;
            while !self.world.all_fresh(starting) && !self.world.short_fresh() && !self.shutdown.load(Ordering::SeqCst) {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                self.bell.wait(left);
            }
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            self.apply_changes();
            // A bug in a policy must not stop the control of every VM: log and go on.
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.step())) {
                let what = panic_message(&*p);
                self.log.event("-", EventKind::WorkerPanicked, &format!("decision step panicked ({what}); going on"), &[]);
            }
        }
    }

    fn step(&mut self) {
        let step = host_step(&mut self.hl, &mut self.world);
        let reclaim = self.hl.balancer().reclaim_step();
        for t in &step.ticks {
            let Some(vm) = self.world.find(t.vm) else { continue };
            let name = &vm.shared.name;
            let lp = self.hl.vm(t.vm).expect("every VM has a loop");
            let sample = step.sample.vms.iter().find(|(id, _)| *id == t.vm).map(|(_, s)| s);
            let mut st = lock(&vm.shared.status);
            st.metrics = lp.metrics().clone();
            st.class = self.hl.balancer().class(t.vm);
            match &t.tick.outcome {
                Ok(a) => {
                    let source = vm.source;
                    // A shrink in `host-need` mode says why the host took the memory now.
                    let migrating = sample.is_some_and(|s| s.preparing_migration || s.migrating);
                    let note = match reclaim.filter(|_| a.target < a.previous) {
                        Some(_) if migrating => "; reclaim host-need: a migration, shrunk to the estimate whatever the host's use".to_string(),
                        Some(r) => format!("; reclaim host-need: {r}"),
                        None => String::new(),
                    };
                    let msg = format!("set size {} -> {}: {}{}{note} [from {source}]", a.previous, a.target, a.reason, a.limits_note());
                    self.log.event(name, EventKind::SetTarget, &msg, &[
                        ("target_kib", json!(a.target.0)), ("previous_kib", json!(a.previous.0)),
                        ("reason", json!(a.reason.to_string())), ("source", json!(source.to_string())),
                    ]);
                    st.actions += 1;
                    st.last_reason = a.reason.to_string();
                }
                Err(idle) => {
                    // During a migration, what the guest's report said (the hinting hold's
                    // inputs).
                    let seen = sample.filter(|s| s.migrating).and_then(|s| {
                        let m = s.mem.as_ref()?;
                        Some(format!(" (claims {}, its programs {}, running short: {})", m.claimed(), m.demand(), s.running_short))
                    });
                    self.log.debug(name, &format!("size {}: {idle}{}", st.size, seen.unwrap_or_default()));
                    // A migration waits for this decision: tell the actor there is nothing to wait for.
                    if sample.is_some_and(|s| s.preparing_migration) {
                        let _ = offer(&vm.tx, Msg::Held);
                    }
                }
            }
        }
        self.watch_left_out();
        self.watch_short(&step.sample.host);
        self.watch_reclaim(reclaim);
        self.show_host();
        for (id, why) in step.errors {
            let Some(vm) = self.world.vms.iter_mut().find(|v| v.shared.id == id) else { continue };
            lock(&vm.shared.status).errors += 1;
            let name = vm.shared.name.clone();
            self.log.limited(&mut vm.refused, &name, EventKind::ActuatorFailed, &format!("target not applied: {why}"), &[]);
        }
    }

    /// One line when a VM's samples stop coming (its actor stuck behind a slow QEMU, the VM
    /// unreachable) and the step leaves it out, and one when it is back.
    fn watch_left_out(&mut self) {
        let max_age = self.world.max_age;
        for vm in &mut self.world.vms {
            if vm.left_out.is_some() == vm.logged_left_out {
                continue;
            }
            vm.logged_left_out = vm.left_out.is_some();
            let name = vm.shared.name.clone();
            let msg = match vm.left_out {
                Some(age) => format!("left out of the balancer: its latest sample is {:.1} s old (more than {:.1} s); what it was last given stays set aside", age.as_secs_f64(), max_age.as_secs_f64()),
                None => "back in the balancer: a new sample".to_string(),
            };
            self.log.limited(&mut vm.stale, &name, EventKind::SampleStale, &msg, &[("left_out", json!(vm.logged_left_out))]);
        }
    }

    /// One line when the `host-need` mode starts or stops reclaiming for the host (the
    /// host's use passed its target, or fell below it, or its memory became unknown).
    fn watch_reclaim(&mut self, now: Option<ReclaimStep>) {
        let kind = |r: &ReclaimStep| std::mem::discriminant(r);
        if let Some(r) = now.filter(|n| self.reclaim.as_ref().map(kind) != Some(kind(n))) {
            let fields = match r {
                ReclaimStep::Unknown => vec![("reclaiming", json!(true))],
                ReclaimStep::Keep { used, total, .. } => vec![("reclaiming", json!(false)), ("host_used_kib", json!(used.0)), ("host_total_kib", json!(total.0))],
                ReclaimStep::Reclaim { used, total, excess, .. } => vec![("reclaiming", json!(true)), ("host_used_kib", json!(used.0)), ("host_total_kib", json!(total.0)), ("excess_kib", json!(excess.0))],
            };
            self.log.event("-", EventKind::Reclaim, &format!("reclaim host-need: {r}"), &fields);
        }
        self.reclaim = now;
    }

    /// The host's figures at this step, for the metrics endpoint.
    fn show_host(&self) {
        let look = &self.world.look;
        let wanted = self.hl.balancer().wanted();
        let mut h = lock(&self.host);
        h.steps += 1;
        h.mem_total = look.memory.map(|m| m.total);
        h.mem_available = look.memory.map(|m| m.available);
        h.capacity = look.capacity;
        h.pressure = look.pressure;
        h.wanted = wanted;
        h.shortfall = shortfall(wanted, look.capacity);
        h.reclaiming = self.reclaim.map(|r| r.reclaiming());
        h.reclaim_excess = self.reclaim.and_then(|r| r.excess());
    }

    /// One warning when the host starts being short of memory for what the balancer wants
    /// to give, one line when that ends; nothing per tick in between.
    fn watch_short(&mut self, host: &HostView) {
        let now = self.hl.balancer().short();
        match (self.short, now) {
            (None, Some(k)) => {
                let cap = host.capacity.map_or("no limit".to_string(), |c| c.to_string());
                let msg = format!("host short of memory: the VMs need {k} more than the host can give (capacity {cap}, balancer {})", self.hl.balancer().name());
                self.log.event("-", EventKind::HostShort, &msg, &[("short_kib", json!(k.0))]);
            }
            (Some(_), None) => self.log.event("-", EventKind::HostShort, "host no longer short of memory", &[("short_kib", json!(0))]),
            _ => {}
        }
        self.short = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autoballoon_core::policy::MemView;

    #[test]
    fn the_host_view_comes_from_procfs_or_the_configured_capacity() {
        let dir = std::env::temp_dir().join(format!("ab-host-proc-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("pressure")).unwrap();
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/fixtures");
        std::fs::copy(fixtures.join("host-6.18/meminfo"), dir.join("meminfo")).unwrap();
        std::fs::copy(fixtures.join("linux-6.12-guest-idle/pressure-memory"), dir.join("pressure/memory")).unwrap();
        let text = std::fs::read_to_string(dir.join("meminfo")).unwrap();
        let available = MemView::from_meminfo(&parse_meminfo(&text).unwrap()).unwrap().available;
        let mem = HostMemory { proc_dir: dir.clone(), pressure_file: None, capacity: None, reserve: Kib::from_mib_saturating(1024), cgroup: None };
        let v = mem.view(Kib::from_gib_saturating(4));
        assert_eq!(v.capacity, Some(available.saturating_add(Kib::from_gib_saturating(4)).saturating_sub(Kib::from_mib_saturating(1024))));
        assert!(v.pressure.is_some());
        let fixed = HostMemory { capacity: Some(Kib::from_gib_saturating(8)), ..mem };
        assert_eq!(fixed.view(Kib::ZERO).capacity, Some(Kib::from_gib_saturating(8)));
        let none = HostMemory { proc_dir: dir.join("nope"), pressure_file: None, capacity: None, reserve: Kib::ZERO, cgroup: None };
        assert_eq!(none.view(Kib::ZERO), HostView::default(), "no procfs, no limit");
        // A cgroup's memory.pressure instead of the host's (same format).
        std::fs::write(dir.join("cg.pressure"), "some avg10=12.50 avg60=3.00 avg300=1.00 total=99\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        let cg = HostMemory { proc_dir: dir.join("nope"), pressure_file: Some(dir.join("cg.pressure")), capacity: None, reserve: Kib::ZERO, cgroup: None };
        assert_eq!(cg.view(Kib::ZERO).pressure.map(|p| p.some.avg10), Some(12.5));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_host_figures_come_from_the_fixture_of_a_busy_host() {
        let dir = std::env::temp_dir().join(format!("ab-host-look-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("pressure")).unwrap();
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/fixtures/host-6.18-busy");
        std::fs::copy(fixtures.join("meminfo"), dir.join("meminfo")).unwrap();
        std::fs::copy(fixtures.join("pressure-memory"), dir.join("pressure/memory")).unwrap();
        let mem = HostMemory { proc_dir: dir.clone(), pressure_file: None, capacity: Some(Kib::from_gib_saturating(8)), reserve: Kib::ZERO, cgroup: None };
        let look = mem.view(Kib::ZERO);
        assert_eq!(look.memory.map(|m| m.total), Some(Kib(24683656)), "MemTotal, even with a configured capacity");
        assert_eq!(look.memory.map(|m| m.available), Some(Kib(24112124)));
        assert_eq!(look.capacity, Some(Kib::from_gib_saturating(8)));
        let p = look.pressure.unwrap();
        assert_eq!((p.some.avg10, p.full.map(|f| f.avg10)), (2.0, Some(0.85)));
        let gone = HostMemory { proc_dir: dir.join("nope"), ..mem };
        assert_eq!(gone.view(Kib::ZERO).memory, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_shortfall_is_what_the_vms_want_beyond_the_capacity() {
        let mib = Kib::from_mib_saturating;
        assert_eq!(shortfall(Some(mib(6000)), Some(mib(4096))), Some(mib(1904)));
        assert_eq!(shortfall(Some(mib(1000)), Some(mib(4096))), Some(Kib::ZERO));
        assert_eq!(shortfall(Some(mib(1000)), None), None, "no capacity, no shortfall");
        assert_eq!(shortfall(None, Some(mib(1))), None);
    }

    #[test]
    fn the_watched_balancer_sums_the_wants_and_forwards_the_rest() {
        use autoballoon_core::guard::Room;
        use autoballoon_core::host::CapGrowth;
        use autoballoon_core::sample::Sample;
        let mib = Kib::from_mib_saturating;
        let claim = |id, want: Kib| Claim { vm: VmId(id), want, room: Room::fixed(want), sample: Sample { guest_size: want, max: mib(4096), ..Default::default() } };
        let mut w = Watched::new(Box::new(CapGrowth));
        assert_eq!(w.wanted(), None, "nothing before the first step");
        let host = HostView { capacity: Some(mib(1000)), pressure: None, memory: None };
        let got = w.balance(&host, &[claim(1, mib(700)), claim(2, mib(600))]);
        assert_eq!(w.wanted(), Some(mib(1300)));
        assert_eq!(got, CapGrowth.balance(&host, &[claim(1, mib(700)), claim(2, mib(600))]), "the inner balancer decides");
        assert_eq!(w.name(), "cap-growth");
        w.balance(&host, &[]);
        assert_eq!(w.wanted(), Some(Kib::ZERO));
        assert_eq!(w.reclaim_step(), None, "a lean balancer does not reclaim for the host");
        // The host-need mode's step is seen through the wrapper (the reclaim log line).
        let need = autoballoon_core::host::HostNeed::new(CapGrowth, autoballoon_core::Percent::new_checked(80).unwrap(), Default::default());
        let mut w = Watched::new(Box::new(need));
        w.balance(&host, &[claim(1, mib(700))]);
        assert_eq!(w.reclaim_step(), Some(ReclaimStep::Unknown), "no host memory known: reclaim");
    }

    #[test]
    fn a_memory_cgroup_limit_bounds_the_capacity() {
        let dir = std::env::temp_dir().join(format!("ab-host-cgroup-{}", std::process::id()));
        let (v2, v1) = (dir.join("v2"), dir.join("v1"));
        std::fs::create_dir_all(dir.join("pressure")).unwrap();
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/fixtures");
        std::fs::copy(fixtures.join("host-6.18/meminfo"), dir.join("meminfo")).unwrap();
        let mib = |n: u64| Kib::from_mib_saturating(n);
        let hold = mib(1200);
        let hm = |cgroup: Option<PathBuf>, capacity| HostMemory { proc_dir: dir.clone(), pressure_file: None, capacity, reserve: mib(1024), cgroup };
        let mem = hm(Some(v2.clone()), None);
        let from_host = hm(None, None).view(hold).capacity.unwrap();
        assert!(from_host > mib(4096), "the fixture host has more than the group: {from_host}");
        // cgroup v2: 2 GiB limit, 1500 MiB used of which 100 MiB inactive file cache.
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.max"), format!("{}\n", 2048u64 << 20)).unwrap();
        std::fs::write(v2.join("memory.current"), format!("{}\n", 1500u64 << 20)).unwrap();
        std::fs::write(v2.join("memory.stat"), format!("anon 1\nfile 2\ninactive_file {}\nactive_file 0\n", 100u64 << 20)).unwrap();
        assert_eq!(mem.view(hold).capacity, Some(mib(2048 - 1400 + 1200)), "limit − (usage − inactive file) + what the VMs hold");
        // VMs whose guests have not touched their memory: never more than the limit.
        std::fs::write(v2.join("memory.current"), format!("{}\n", 600u64 << 20)).unwrap();
        assert_eq!(mem.view(hold).capacity, Some(mib(2048)));
        std::fs::write(v2.join("memory.current"), format!("{}\n", 1500u64 << 20)).unwrap();
        // No limit: the host's MemAvailable alone.
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        assert_eq!(mem.view(hold).capacity, Some(from_host));
        // cgroup v1 (this test host's memory controller): limit_in_bytes and total_inactive_file.
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), format!("{}\n", 2048u64 << 20)).unwrap();
        std::fs::write(v1.join("memory.usage_in_bytes"), format!("{}\n", 2000u64 << 20)).unwrap();
        std::fs::write(v1.join("memory.stat"), format!("inactive_file 7\ntotal_inactive_file {}\n", 48u64 << 20)).unwrap();
        let v1mem = hm(Some(v1.clone()), None);
        assert_eq!(v1mem.view(hold).capacity, Some(mib(96 + 1200)));
        std::fs::write(v1.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        assert_eq!(v1mem.view(hold).capacity, Some(from_host), "v1's default is no limit");
        // A configured capacity wins; a missing group leaves MemAvailable.
        assert_eq!(hm(Some(v1.clone()), Some(mib(100))).view(hold).capacity, Some(mib(100)));
        assert_eq!(hm(Some(dir.join("nope")), None).view(hold).capacity, Some(from_host));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
