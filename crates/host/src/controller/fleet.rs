//! The set of managed VMs, kept in line with the configuration and with what discovery
//! finds: the `[[vm]]` tables, the QMP sockets of `[discovery] socket_dir` (read every
//! [`SOCKET_SCAN`]) and libvirt's active domains (`[discovery] libvirt`, listed every
//! [`LIBVIRT_SCAN`]). One pass ([`Fleet::reconcile`]) compares what should be managed with
//! what is: it stops the actors of VMs that left (one log line each), starts actors for
//! new ones, retargets VMs whose sockets changed and hands the decider changed policies.
//! Passes run after every scan and every reload, one at a time; none waits on a VM.

use super::sync::lock;
use super::{actor, spawn, Bell, Msg, Registry, VmCommand, VmHandle, VmShared, VmStatus, Worker, QUEUE};
use crate::config::{vm_of_socket, BalancerKind, Config, Origin, PolicyConfig, Reclaim, ShrinkSetting, VmConfig, LIBVIRT_SCAN, SOCKET_SCAN};
use crate::log::{EventKind, Logger, RateLimit};
use autoballoon_core::host::{Balancer, SharesConfig, VmId};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What the decider is told when the set of VMs changes.
pub(crate) enum Change {
    /// A new VM: its loop starts with `policy`.
    Add { shared: Arc<VmShared>, tx: std::sync::mpsc::SyncSender<Msg>, policy: PolicyConfig },
    /// The VM left: its loop and mailbox go.
    Remove(VmId),
    /// The VM's policy changed: its loop is replaced by one with the new policy.
    Policy(VmId, PolicyConfig),
    /// The balancer is replaced (the shares balancer, when VMs' shares changed).
    Balancer(Box<dyn Balancer + Send>),
}

/// A socket file's identity (device, inode, change time in ns): a new QEMU on the same path
/// makes a new one (the time tells a new file that got a freed inode number again).
type FileId = (u64, u64, i128);

/// How long one listing of libvirt's domains (or opening its connection) may take.
const LIBVIRT_TIMEOUT: Duration = Duration::from_secs(5);

/// One managed VM.
struct Managed {
    cfg: VmConfig,
    origin: Origin,
    policy: PolicyConfig,
    handle: VmHandle,
    stop: Arc<AtomicBool>,
    worker: Worker,
}

impl Managed {
    fn id(&self) -> VmId {
        self.handle.shared.id
    }
}

struct State {
    /// `[defaults]`, `[[vm]]`, `[[match]]` and `[discovery]` in force; `[controller]` as at start.
    config: Config,
    /// The QMP sockets of the socket directory at its last scan.
    sockets: Vec<(VmConfig, FileId)>,
    /// libvirt's active domains at the last listing.
    domains: Vec<VmConfig>,
    vms: Vec<Managed>,
    next_id: u32,
    /// Actors stopped and not yet ended.
    retired: Vec<Worker>,
    /// Sockets whose QEMU was found gone: left out until another socket takes the path.
    dead: HashMap<PathBuf, FileId>,
    /// The shares balancer's settings in force.
    shares: SharesConfig,
    /// The first pass adds the configured VMs without a log line each (as before discovery).
    first: bool,
    scan_errors: RateLimit,
    libvirt_errors: RateLimit,
    /// The URI libvirt could not be connected to at the last listing (said once, and once
    /// more when it answers).
    libvirt_down: Option<String>,
}

pub(crate) struct Fleet {
    state: Mutex<State>,
    pub registry: Registry,
    changes: Mutex<Sender<Change>>,
    shutdown: Arc<AtomicBool>,
    bell: Arc<Bell>,
    /// Wakes the discovery threads at shutdown.
    pub wake: Wake,
    log: Logger,
    /// Discovery's libvirt connection, kept from listing to listing; dropped when a listing
    /// fails (the next one reconnects) or the URI changes. Only libvirt's thread uses it.
    libvirt: Mutex<Option<crate::libvirt::Connection>>,
    started: Instant,
    interval: Duration,
    shrink: ShrinkSetting,
    balancer: BalancerKind,
    reclaim: Reclaim,
}

/// Wakes every thread sleeping in [`Wake::sleep`].
#[derive(Default)]
pub(crate) struct Wake {
    m: Mutex<()>,
    cv: Condvar,
}

impl Wake {
    pub fn ring(&self) {
        let _g = lock(&self.m);
        self.cv.notify_all();
    }
    /// Sleeps `d`, or until rung while `stop` is set.
    fn sleep(&self, d: Duration, stop: &AtomicBool) {
        let g = lock(&self.m);
        let _ = self.cv.wait_timeout_while(g, d, |_| !stop.load(Ordering::SeqCst));
    }
}

impl Fleet {
    pub fn new(config: &Config, log: Logger, changes: Sender<Change>, shutdown: Arc<AtomicBool>, bell: Arc<Bell>, started: Instant) -> Fleet {
        let state = State {
            config: config.clone(),
            sockets: Vec::new(),
            domains: Vec::new(),
            vms: Vec::new(),
            next_id: 0,
            retired: Vec::new(),
            dead: HashMap::new(),
            shares: SharesConfig::default(),
            first: true,
            scan_errors: RateLimit::default(),
            libvirt_errors: RateLimit::default(),
            libvirt_down: None,
        };
        Fleet {
            state: Mutex::new(state),
            registry: Arc::default(),
            changes: Mutex::new(changes),
            shutdown,
            bell,
            wake: Wake::default(),
            log,
            libvirt: Mutex::new(None),
            started,
            interval: Duration::from_millis(config.controller.interval_ms),
            shrink: config.controller.migration_shrink,
            balancer: config.controller.balancer,
            reclaim: config.controller.reclaim(),
        }
    }

    fn tell(&self, c: Change) {
        // The decider gone means the controller is stopping: nothing to tell.
        let _ = lock(&self.changes).send(c);
        self.bell.ring();
    }

    /// Reads the socket directory once (one `readdir`, a `stat` per `*.qmp`). A missing
    /// directory has no sockets; another error keeps the last scan's.
    pub fn scan_sockets(&self) {
        let dir = lock(&self.state).config.discovery.socket_dir.clone();
        let found = if dir.as_os_str().is_empty() { Ok(Vec::new()) } else { read_sockets(&dir) };
        let mut st = lock(&self.state);
        match found {
            Ok(f) => st.sockets = f,
            Err(e) => {
                let msg = format!("cannot read the socket directory {}: {e}; keeping the VMs found before", dir.display());
                self.log.limited(&mut st.scan_errors, "-", EventKind::Unreachable, &msg, &[]);
            }
        }
    }

    /// Lists libvirt's active domains once, if `[discovery] libvirt` is on. A failed
    /// listing keeps the last one's domains. A libvirt that cannot be connected to (none on
    /// this host, libvirtd not running) is said in one line, and again when it answers:
    /// the daemon runs on meanwhile, trying at every listing.
    fn scan_libvirt(&self) {
        let (on, uri) = {
            let st = lock(&self.state);
            (st.config.discovery.libvirt, st.config.discovery.libvirt_uri.clone())
        };
        if !on {
            lock(&self.state).domains.clear();
            lock(&self.libvirt).take();
            return;
        }
        let listed = {
            let mut conn = lock(&self.libvirt);
            if conn.as_ref().is_some_and(|c| c.uri() != uri) {
                conn.take();
            }
            let listed = match conn.take() {
                Some(c) => Ok(c),
                None => crate::libvirt::Connection::open(&uri, LIBVIRT_TIMEOUT),
            }
            .and_then(|c| c.active_domains().map(|names| (c, names)));
            listed.map(|(c, names)| {
                *conn = Some(c);
                names
            })
        };
        let mut st = lock(&self.state);
        match listed {
            Ok(names) => {
                if st.libvirt_down.take().is_some() {
                    self.log.event("-", EventKind::Connected, &format!("libvirt at {uri} answers: its active domains are managed"), &[]);
                }
                st.domains = names.iter().map(|n| VmConfig { libvirt_uri: uri.clone(), ..VmConfig::libvirt(n, n) }).collect()
            }
            Err(e @ crate::libvirt::LibvirtError::Connect { .. }) => {
                if st.libvirt_down.as_deref() != Some(uri.as_str()) {
                    self.log.event("-", EventKind::Unreachable, &libvirt_down_line(&e), &[]);
                    st.libvirt_down = Some(uri.clone());
                }
            }
            Err(e) => {
                let msg = format!("cannot list libvirt's domains on {uri}: {e}; keeping the domains found before");
                self.log.limited(&mut st.libvirt_errors, "-", EventKind::Unreachable, &msg, &[]);
            }
        }
    }

    /// The socket directory's thread: a scan and a pass every [`SOCKET_SCAN`].
    pub fn watch_sockets(&self) {
        while !self.shutdown.load(Ordering::SeqCst) {
            self.wake.sleep(SOCKET_SCAN, &self.shutdown);
            self.scan_sockets();
            self.reconcile();
        }
    }

    /// libvirt's thread: a listing and a pass every [`LIBVIRT_SCAN`] (a slow libvirt does
    /// not hold up the socket directory; a listing waits at most [`LIBVIRT_TIMEOUT`]).
    pub fn watch_libvirt(&self) {
        while !self.shutdown.load(Ordering::SeqCst) {
            let before = lock(&self.state).domains.len();
            self.scan_libvirt();
            let (on, after) = {
                let st = lock(&self.state);
                (st.config.discovery.libvirt, st.domains.len())
            };
            if on || before != after {
                self.reconcile();
            }
            self.wake.sleep(LIBVIRT_SCAN, &self.shutdown);
        }
    }

    /// A reloaded configuration (its `[controller]` is not taken: those keys need a
    /// restart), applied at once.
    pub fn reconfigure(&self, config: &Config) -> Vec<String> {
        {
            let mut st = lock(&self.state);
            let d = &config.discovery;
            if !d.libvirt || d.libvirt_uri != st.config.discovery.libvirt_uri {
                st.domains.clear();
                st.libvirt_down = None;
            }
            let controller = st.config.controller.clone();
            st.config = Config { controller, ..config.clone() };
        }
        self.scan_sockets();
        self.reconcile()
    }

    /// One pass: the managed VMs made what the configuration and the last scans say.
    /// Returns one phrase per change.
    pub fn reconcile(&self) -> Vec<String> {
        if self.shutdown.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let mut guard = lock(&self.state);
        // Again under the lock: a pass that waited for the controller's stop adds nothing.
        if self.shutdown.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let st = &mut *guard;
        let mut changes = Vec::new();
        // Which VMs' QEMU is gone, read once: an actor may find its QEMU gone while this pass
        // runs, and a VM this pass removed as gone without marking its socket dead would be
        // found again and added back in the same pass. One found gone later leaves next pass.
        let gone: HashSet<String> = st.vms.iter().filter(|m| m.handle.shared.gone.load(Ordering::SeqCst)).map(|m| m.handle.name.clone()).collect();
        // A socket whose QEMU is gone stays out until another socket takes its path.
        for m in st.vms.iter().filter(|m| gone.contains(&m.handle.name)) {
            if let Some((_, id)) = st.sockets.iter().find(|(v, _)| v.qmp == m.cfg.qmp) {
                st.dead.insert(m.cfg.qmp.clone(), *id);
            }
        }
        let sockets = &st.sockets;
        st.dead.retain(|p, id| sockets.iter().any(|(v, f)| v.qmp == *p && f == id));
        // libvirt's domains first: a socket in the socket directory (which more users than
        // root may be able to write, docs/security.md) never takes the name of a domain.
        let found: Vec<(VmConfig, Origin)> = st
            .domains
            .iter()
            .map(|v| (v.clone(), Origin::Libvirt))
            .chain(st.sockets.iter().filter(|(v, f)| st.dead.get(&v.qmp) != Some(f)).map(|(v, _)| (v.clone(), Origin::SocketDir)))
            .collect();
        let want = st.config.managed(&found);
        // VMs that left.
        let mut i = 0;
        while i < st.vms.len() {
            let m = &st.vms[i];
            let gone = gone.contains(&m.handle.name);
            let wanted = want.iter().find(|(v, _)| v.name == m.handle.name);
            // Another origin or another kind of endpoint: the VM starts over.
            let replaced = wanted.filter(|(v, o)| *o != m.origin || v.libvirt_domain != m.cfg.libvirt_domain || v.libvirt_uri != m.cfg.libvirt_uri || v.balloon_device != m.cfg.balloon_device);
            let why = if gone {
                format!("its QEMU is gone (nothing listens on {})", m.cfg.qmp.display())
            } else if replaced.is_some() {
                "its endpoint changed (libvirt_domain, libvirt_uri or balloon_device, or how it is found); starting over".to_string()
            } else if wanted.is_none() {
                match m.origin {
                    Origin::Config => "removed from the configuration".to_string(),
                    Origin::SocketDir => format!("its QMP socket {} is gone", m.cfg.qmp.display()),
                    Origin::Libvirt => format!("libvirt domain {} is no longer active", m.cfg.libvirt_domain.as_deref().unwrap_or("?")),
                }
            } else {
                i += 1;
                continue;
            };
            let m = st.vms.remove(i);
            changes.push(format!("vm {:?} {}", m.handle.name, if replaced.is_some() { "restarted" } else { "removed" }));
            self.remove(st, m, &why);
        }
        // New and changed VMs.
        for (cfg, origin) in want {
            let policy = st.config.policy_for(&cfg);
            let Some(m) = st.vms.iter_mut().find(|m| m.handle.name == cfg.name) else {
                let first = st.first && origin == Origin::Config;
                if !first {
                    changes.push(format!("vm {:?} added", cfg.name));
                }
                self.add(st, cfg, origin, policy, !first);
                continue;
            };
            if m.cfg.qmp != cfg.qmp || m.cfg.agent != cfg.agent {
                // A full queue: left as it is, tried again at the next pass.
                if m.handle.command(VmCommand::Retarget { qmp: cfg.qmp.clone(), agent: cfg.agent.clone() }) {
                    m.cfg.qmp = cfg.qmp.clone();
                    m.cfg.agent = cfg.agent.clone();
                    changes.push(format!("vm {:?} sockets", cfg.name));
                }
            }
            if m.policy != policy {
                m.handle.shared.agent_stale_ms.store(policy.agent_stale_s.saturating_mul(1000), Ordering::Relaxed);
                let _ = lock(&self.changes).send(Change::Policy(m.id(), policy.clone()));
                m.policy = policy;
                changes.push(format!("vm {:?} policy", cfg.name));
            }
            m.cfg.policy = cfg.policy;
            m.cfg.shares = cfg.shares;
        }
        st.first = false;
        self.update_shares(st);
        st.retired.retain(|w| !w.finished());
        changes
    }

    /// The VMs' shares (their policies' `shares` and `max_mib`, or the older
    /// `[vm.shares]` / `[match.shares]`) for the shares balancer and the `host-need`
    /// reclaim mode; when they change the balancer is replaced (its rate state starts over).
    fn update_shares(&self, st: &mut State) {
        if self.balancer != BalancerKind::Shares && self.reclaim == Reclaim::Lean {
            return;
        }
        let by_position = Config { defaults: st.config.defaults.clone(), vms: st.vms.iter().map(|m| m.cfg.clone()).collect(), ..Default::default() }.shares();
        let mut shares = SharesConfig::default();
        for (pos, s) in by_position.vms {
            shares.vms.insert(st.vms[pos.0 as usize].id(), s);
        }
        if shares != st.shares {
            st.shares = shares.clone();
            self.tell(Change::Balancer(self.balancer.build_for(shares, self.reclaim)));
        }
    }

    /// Starts an actor for `cfg` and hands the decider its loop.
    fn add(&self, st: &mut State, cfg: VmConfig, origin: Origin, policy: PolicyConfig, announce: bool) {
        let id = VmId(st.next_id);
        st.next_id += 1;
        let name = cfg.name.clone();
        let shared = Arc::new(VmShared {
            name: name.clone(),
            id,
            origin,
            agent_stale_ms: AtomicU64::new(policy.agent_stale_s.saturating_mul(1000)),
            gone: AtomicBool::new(false),
            status: Mutex::new(VmStatus { name: name.clone(), origin: origin.as_str(), ..Default::default() }),
            history: Mutex::default(),
            mailbox: Mutex::new(None),
            session: Mutex::new(None),
        });
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        if announce {
            self.log.event(&name, EventKind::VmAdded, &format!("added ({origin}): {} (agent {})", cfg.endpoint(), cfg.agent_description()), &[("origin", json!(origin.as_str()))]);
        }
        let a = actor::Actor::new(cfg.clone(), self.interval, self.started, self.log.clone(), (tx.clone(), rx), stop.clone(), self.bell.clone(), shared.clone())
            .with_migration_shrink(self.shrink);
        let worker = spawn(&format!("vm-{name}"), move || a.run());
        let handle = VmHandle { name, shared: shared.clone(), commands: tx.clone() };
        lock(&self.registry).push(handle.clone());
        self.tell(Change::Add { shared, tx, policy: policy.clone() });
        st.vms.push(Managed { cfg, origin, policy, handle, stop, worker });
    }

    /// Stops a VM's actor (without waiting for it), takes it out of the status and the
    /// decider; one log line.
    fn remove(&self, st: &mut State, m: Managed, why: &str) {
        // The line first: whoever sees the VM gone from the status finds it in the log.
        self.log.event(&m.handle.name, EventKind::VmRemoved, &format!("removed: {why}; no longer managed"), &[("origin", json!(m.origin.as_str()))]);
        stop_actor(&m);
        *lock(&m.handle.shared.mailbox) = None;
        lock(&self.registry).retain(|h| h.shared.id != m.id());
        self.tell(Change::Remove(m.id()));
        st.retired.push(m.worker);
    }

    /// Stops every actor (the controller's stop); their threads, to wait for.
    pub fn stop_all(&self) -> Vec<Worker> {
        let mut st = lock(&self.state);
        let vms = std::mem::take(&mut st.vms);
        let mut workers: Vec<Worker> = std::mem::take(&mut st.retired);
        for m in vms {
            stop_actor(&m);
            workers.push(m.worker);
        }
        workers
    }
}

fn stop_actor(m: &Managed) {
    m.stop.store(true, Ordering::SeqCst);
    let _ = m.handle.commands.try_send(Msg::Command(VmCommand::Wake));
    // A worker waiting on a silent QEMU sees its command fail at once.
    if let Some(q) = lock(&m.handle.shared.session).as_ref() {
        q.close();
    }
}

/// The one line of a libvirt that cannot be connected to.
fn libvirt_down_line(e: &crate::libvirt::LibvirtError) -> String {
    format!("{e}: no libvirt domain is discovered until it answers (trying every {} s; on a host without libvirt, `libvirt = false` in [discovery] silences this)", LIBVIRT_SCAN.as_secs())
}

/// The VMs whose QMP sockets are in `dir` (`<name>.qmp`, a socket or a link to one).
fn read_sockets(dir: &Path) -> std::io::Result<Vec<(VmConfig, FileId)>> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e?;
        let Some(vm) = e.file_name().to_str().and_then(|n| vm_of_socket(dir, n)) else { continue };
        // Following a link: what QEMU listens on.
        let Ok(meta) = std::fs::metadata(&vm.qmp) else { continue };
        if meta.file_type().is_socket() {
            out.push((vm, (meta.dev(), meta.ino(), meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128)));
        }
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_libvirt_is_one_clear_line() {
        let e = crate::libvirt::LibvirtError::Connect { uri: "qemu:///system".into(), message: "Failed to connect socket to '/var/run/libvirt/virtqemud-sock': No such file or directory".into() };
        let line = libvirt_down_line(&e);
        assert!(line.starts_with("cannot connect to libvirt at qemu:///system: Failed to connect socket"), "{line}");
        assert!(line.contains("trying every 2 s") && line.contains("`libvirt = false`"), "{line}");
        assert!(!line.contains('\n'));
    }
}
