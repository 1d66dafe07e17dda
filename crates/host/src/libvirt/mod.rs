//! libvirt, through its own library (`libvirt0`, by the `virt` crate): no process is
//! spawned and no QMP command is passed through (libvirt would mark the domain tainted
//! `custom-monitor`). What is used: `virConnectListAllDomains` (discovery),
//! `virDomainGetInfo` (state, configured and present size), `virDomainMemoryStats` (balloon
//! size and guest statistics; `virDomainSetMemoryStatsPeriod` has them refreshed),
//! `virDomainSetMemoryFlags(VIR_DOMAIN_AFFECT_LIVE)` (the balloon), `virDomainGetJobStats`
//! (migrations), `virDomainGetXMLDesc` (the agent channel's socket, the domain type, the
//! balloon device's switches), `virConnectGetVersion` (QEMU's version, asked in the
//! background: [`probe_version`]). What libvirt
//! answers is read by the pure functions of [`parse`].
//!
//! # Connections and blocking
//!
//! Every [`Connection`] is one libvirt connection with a thread of its own that makes its
//! calls, one at a time; the caller waits for the answer at most the connection's
//! deadline ([`LibvirtError::Timeout`]), or until [`Connection::close`]. A call that hangs
//! (a dead or wedged libvirtd, a QEMU that does not answer libvirt's monitor) thus holds up
//! only that connection's thread, never its caller past the deadline: each VM's actor has
//! its own [`Domain`] (so its own connection), and the decider makes no libvirt call.
//!
//! One connection per actor session, not one per URI shared by its VMs: libvirt
//! connections are thread-safe, but libvirtd serves at most `max_client_requests` (5 by
//! default) calls of one client connection at a time, so five calls stuck on wedged
//! domains would stall every other VM on a shared one; and a lost connection ends only its
//! VM's session, which reconnects on its own back-off. The cost is a unix socket and a
//! thread per libvirt VM.
//!
//! What bounds a call inside libvirt: the connection's keepalive
//! (`virConnectSetKeepAlive`, [`KEEPALIVE_INTERVAL_S`] × ([`KEEPALIVE_COUNT`] + 1) = 20 s
//! without an answer from libvirtd closes the connection and fails its calls; it needs
//! the event loop, which [`Connection::open`] starts once, on a thread of its own), and
//! libvirt's QEMU driver, which gives up waiting for a domain's job lock after 30 s. A QEMU
//! whose monitor never answers holds its call as long as libvirtd keeps the job: the
//! connection's thread stays in it, its session having ended at the deadline; such
//! threads are counted per URI, and past [`MAX_STUCK`] no new connection to that URI is
//! opened ([`LibvirtError::Stuck`]) until some return (other URIs are not held up).

pub mod parse;

pub use parse::{DomInfo, JobInfo, MemStats};

use autoballoon_core::Kib;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};
use virt::sys;

/// libvirt's URI of the system QEMU driver, the default of `libvirt_uri`.
pub const DEFAULT_URI: &str = "qemu:///system";

/// Seconds without traffic before libvirt's client sends a keepalive probe.
pub const KEEPALIVE_INTERVAL_S: i32 = 5;
/// Unanswered probes after which the connection is closed.
pub const KEEPALIVE_COUNT: u32 = 3;
/// Connection threads still inside a call whose connection was given up, per URI: past
/// this many, [`Connection::open`] refuses that URI.
pub const MAX_STUCK: usize = 32;

/// Everything that can go wrong talking to libvirt.
#[derive(Debug, thiserror::Error)]
pub enum LibvirtError {
    /// cannot connect to libvirt at {uri}: {message}
    #[error("cannot connect to libvirt at {uri}: {message}")]
    Connect { uri: String, message: String },
    /// libvirt's {call} failed: {message}
    #[error("libvirt's {call} failed: {message}")]
    Failed {
        call: &'static str,
        message: String,
        /// libvirt's `virErrorNumber`.
        code: u32,
    },
    /// libvirt's {call} did not answer within {after:?}
    #[error("libvirt's {call} did not answer within {after:?}")]
    Timeout { call: &'static str, after: Duration },
    /// unexpected answer of libvirt's {call}: {why}
    #[error("unexpected answer of libvirt's {call}: {why}")]
    Unexpected { call: &'static str, why: String },
    /// the domain is {state}
    #[error("the domain is {state}")]
    NotRunning { state: &'static str },
    /// {count} libvirt calls of ended sessions still hang on {uri}; no new connection to it until some return
    #[error("{count} libvirt calls of ended sessions still hang on {uri}; no new connection to it until some return")]
    Stuck { uri: String, count: usize },
    /// {0}
    #[error("{0}")]
    Unsupported(&'static str),
    /// the libvirt session was closed
    #[error("the libvirt session was closed")]
    Closed,
}

/// `VIR_ERR_NO_SUPPORT`: the driver has no such call (the test driver's job statistics).
const ERR_NO_SUPPORT: u32 = 3;
/// `VIR_ERR_NO_DOMAIN`.
const ERR_NO_DOMAIN: u32 = 42;

impl LibvirtError {
    /// libvirt says the domain has no balloon (or the guest no balloon driver).
    /// Not a domain libvirt does not know, though its message (which names the domain) may
    /// say "balloon" too.
    pub fn is_no_balloon(&self) -> bool {
        let says = |m: &str| m.contains("balloon device") || m.contains("balloon driver");
        !self.is_no_domain()
            && (matches!(self, LibvirtError::Failed { message, .. } if says(message))
                || matches!(self, LibvirtError::Unexpected { why, .. } if says(why)))
    }
    /// libvirt does not know the domain (not defined, or a transient one that ended).
    pub fn is_no_domain(&self) -> bool {
        matches!(self, LibvirtError::Failed { code: ERR_NO_DOMAIN, .. })
    }
    fn is_no_support(&self) -> bool {
        matches!(self, LibvirtError::Failed { code: ERR_NO_SUPPORT, .. })
    }
}

/// libvirt's error of a failed `call`.
fn failed(call: &'static str, e: virt::error::Error) -> LibvirtError {
    LibvirtError::Failed { call, message: e.message().to_string(), code: e.code().to_raw() }
}

/// Once per process: libvirt's default error printer off (errors are returned, and logged
/// by the caller), and libvirt's default event loop registered and run on a thread of its
/// own, before any connection opens: keepalive needs it.
fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        virt::error::clear_error_callback();
        if virt::event::event_register_default_impl().is_ok() {
            let spawned = std::thread::Builder::new().name("libvirt-events".into()).spawn(|| loop {
                if virt::event::event_run_default_impl().is_err() {
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
            drop(spawned);
        }
    });
}

/// What a connection's thread holds: the connection and, for a [`Domain`], the domain.
struct Held {
    conn: virt::connect::Connect,
    domain: Option<virt::domain::Domain>,
}

type Job = Box<dyn FnOnce(&mut Held) + Send>;

/// Connection threads inside a call whose connection was dropped or closed, per URI.
static STUCK: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

/// Counts one more (`+1`) or one less (`-1`) stuck thread on `uri`; the count after.
fn count_stuck(uri: &str, by: isize) -> usize {
    let mut m = lock(&STUCK);
    let n = m.entry(uri.to_string()).or_default();
    *n = n.saturating_add_signed(by);
    let after = *n;
    if after == 0 {
        m.remove(uri);
    }
    after
}

/// A connection thread's state, seen by its owner.
struct Busy {
    uri: String,
    /// Inside a call.
    busy: bool,
    /// Counted in [`STUCK`] (given up while busy); the thread uncounts itself when done.
    stuck: bool,
}

/// One libvirt connection and the thread that makes its calls (module docs).
pub struct Connection {
    uri: String,
    timeout: Duration,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    busy: Arc<Mutex<Busy>>,
    closed: AtomicBool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("uri", &self.uri).field("closed", &self.is_closed()).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connection {
    /// Opens `uri` (`virConnectOpen`) with keepalive on; every call, this one too, waits at
    /// most `timeout`.
    pub fn open(uri: &str, timeout: Duration) -> Result<Connection, LibvirtError> {
        init();
        // `virt` would panic on it (a C string cannot hold it).
        if uri.contains('\0') {
            return Err(LibvirtError::Connect { uri: uri.escape_debug().to_string(), message: "a URI cannot contain a NUL byte".into() });
        }
        let stuck = count_stuck(uri, 0);
        if stuck >= MAX_STUCK {
            return Err(LibvirtError::Stuck { uri: uri.into(), count: stuck });
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let busy = Arc::new(Mutex::new(Busy { uri: uri.into(), busy: true, stuck: false }));
        let (opened_tx, opened_rx) = mpsc::channel();
        let (thread_uri, thread_busy) = (uri.to_string(), busy.clone());
        let spawned = std::thread::Builder::new().name("libvirt-conn".into()).spawn(move || {
            let done = |b: &Mutex<Busy>| {
                let mut b = lock(b);
                b.busy = false;
                if std::mem::take(&mut b.stuck) {
                    count_stuck(&b.uri, -1);
                }
            };
            let conn = match virt::connect::Connect::open(Some(&thread_uri)) {
                Ok(c) => c,
                Err(e) => {
                    done(&thread_busy);
                    let _ = opened_tx.send(Err(e.message().to_string()));
                    return;
                }
            };
            // Local drivers (test:///) have no keepalive: nothing to keep alive.
            let _ = conn.set_keep_alive(KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT);
            done(&thread_busy);
            let _ = opened_tx.send(Ok(()));
            let mut held = Held { conn, domain: None };
            while let Ok(job) = rx.recv() {
                lock(&thread_busy).busy = true;
                job(&mut held);
                done(&thread_busy);
            }
        });
        if let Err(e) = spawned {
            return Err(LibvirtError::Connect { uri: uri.into(), message: format!("cannot start its thread: {e}") });
        }
        let c = Connection { uri: uri.into(), timeout, jobs: Mutex::new(Some(tx)), busy, closed: AtomicBool::new(false) };
        match opened_rx.recv_timeout(timeout) {
            Ok(Ok(())) => Ok(c),
            Ok(Err(message)) => Err(LibvirtError::Connect { uri: uri.into(), message }),
            Err(_) => Err(LibvirtError::Connect { uri: uri.into(), message: format!("no answer within {timeout:?}") }),
        }
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Calls fail with [`LibvirtError::Closed`] from now on, a waiting one too (within
    /// [`POLL`]); a call inside libvirt ends on its own, then the connection closes.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        lock(&self.jobs).take();
        let mut b = lock(&self.busy);
        if b.busy && !b.stuck {
            b.stuck = true;
            count_stuck(&b.uri, 1);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// `f` on the connection's thread; its answer, if it comes within the deadline.
    fn call<T: Send + 'static>(&self, call: &'static str, f: impl FnOnce(&mut Held) -> Result<T, LibvirtError> + Send + 'static) -> Result<T, LibvirtError> {
        self.call_within(self.timeout, call, f)
    }

    /// [`Connection::call`] with its own deadline.
    fn call_within<T: Send + 'static>(&self, timeout: Duration, call: &'static str, f: impl FnOnce(&mut Held) -> Result<T, LibvirtError> + Send + 'static) -> Result<T, LibvirtError> {
        if self.is_closed() {
            return Err(LibvirtError::Closed);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |held| {
            let _ = tx.send(f(held));
        });
        match lock(&self.jobs).as_ref() {
            Some(jobs) if jobs.send(job).is_ok() => {}
            _ => return Err(LibvirtError::Closed),
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(POLL)) {
                Ok(answer) => return answer,
                Err(RecvTimeoutError::Disconnected) => return Err(LibvirtError::Closed),
                Err(RecvTimeoutError::Timeout) if self.is_closed() => return Err(LibvirtError::Closed),
                Err(RecvTimeoutError::Timeout) if left.is_zero() => return Err(LibvirtError::Timeout { call, after: timeout }),
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// The names of the active (running or paused) domains: `virConnectListAllDomains`.
    pub fn active_domains(&self) -> Result<Vec<String>, LibvirtError> {
        const CALL: &str = "virConnectListAllDomains";
        self.call(CALL, |h| {
            let domains = h.conn.list_all_domains(sys::VIR_CONNECT_LIST_DOMAINS_ACTIVE).map_err(|e| failed(CALL, e))?;
            Ok(domains.iter().filter_map(|d| d.name().ok()).collect())
        })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

/// `virDomainGetJobStats`, read here rather than by `virt` 0.5.0's `Domain::job_stats`:
/// that one builds a `Vec` from the parameters' pointer, which libvirt leaves NULL when
/// there is no job (undefined behaviour: a debug build aborts), and frees libvirt's memory
/// with Rust's allocator. Only the fields [`parse::job_info`] reads are filled in.
fn job_stats(d: &virt::domain::Domain, flags: u32) -> Result<virt::domain::JobStats, virt::error::Error> {
    use std::os::raw::{c_int, c_ulonglong};
    let mut kind: c_int = 0;
    let mut params: sys::virTypedParameterPtr = std::ptr::null_mut();
    let mut n: c_int = 0;
    // SAFETY: the domain pointer is valid while `d` lives; libvirt fills the three
    // out-parameters (`params` allocated by libvirt, or NULL with `n` 0).
    if unsafe { sys::virDomainGetJobStats(d.as_ptr(), &mut kind, &mut params, &mut n, flags) } < 0 {
        return Err(virt::error::Error::last_error());
    }
    let ull = |name: &std::ffi::CStr| {
        let mut v: c_ulonglong = 0;
        // SAFETY: `params` holds `n` parameters (or is NULL, which libvirt handles); `name`
        // is a NUL-terminated constant.
        (!params.is_null() && unsafe { sys::virTypedParamsGetULLong(params, n, name.as_ptr(), &mut v) } == 1).then_some(v)
    };
    let int = |name: &std::ffi::CStr| {
        let mut v: c_int = 0;
        // SAFETY: as above.
        (!params.is_null() && unsafe { sys::virTypedParamsGetInt(params, n, name.as_ptr(), &mut v) } == 1).then_some(v)
    };
    let stats = virt::domain::JobStats {
        r#type: kind,
        operation: int(sys::VIR_DOMAIN_JOB_OPERATION),
        time_elapsed: ull(sys::VIR_DOMAIN_JOB_TIME_ELAPSED),
        mem_processed: ull(sys::VIR_DOMAIN_JOB_MEMORY_PROCESSED),
        downtime: ull(sys::VIR_DOMAIN_JOB_DOWNTIME),
        ..Default::default()
    };
    // SAFETY: frees what libvirt allocated, once; NULL with 0 is allowed.
    unsafe { sys::virTypedParamsFree(params, n) };
    Ok(stats)
}

/// How long [`probe_version`] waits for libvirt's answer.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a caller waiting for an answer looks whether its connection was closed.
pub const POLL: Duration = Duration::from_millis(20);

/// One libvirt domain, on a connection of its own.
#[derive(Debug)]
pub struct Domain {
    conn: Connection,
    pub name: String,
}

impl Domain {
    /// The domain `name` on `uri` (`virDomainLookupByName`), on a new connection whose
    /// calls wait at most `timeout`; with its info.
    pub fn open(uri: &str, name: &str, timeout: Duration) -> Result<(Domain, DomInfo), LibvirtError> {
        let conn = Connection::open(uri, timeout)?;
        let n = name.to_string();
        conn.call("virDomainLookupByName", move |h| {
            h.domain = Some(h.conn.lookup_domain_by_name(&n).map_err(|e| failed("virDomainLookupByName", e))?);
            Ok(())
        })?;
        let d = Domain { conn, name: name.into() };
        let info = d.info()?;
        Ok((d, info))
    }

    pub fn uri(&self) -> &str {
        self.conn.uri()
    }

    /// Calls fail with [`LibvirtError::Closed`] from now on, a waiting one too.
    pub fn close(&self) {
        self.conn.close()
    }

    pub fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// `f` on the domain, on the connection's thread.
    fn on_domain<T: Send + 'static>(&self, call: &'static str, f: impl FnOnce(&virt::domain::Domain) -> Result<T, virt::error::Error> + Send + 'static) -> Result<T, LibvirtError> {
        self.conn.call(call, move |h| match &h.domain {
            Some(d) => f(d).map_err(|e| failed(call, e)),
            None => Err(LibvirtError::Closed),
        })
    }

    /// `virDomainGetInfo`: state, `<memory>`, `<currentMemory>`.
    pub fn info(&self) -> Result<DomInfo, LibvirtError> {
        let i = self.on_domain("virDomainGetInfo", |d| d.info())?;
        Ok(DomInfo { state: parse::state_name(i.state.to_raw()), max: Kib(i.max_mem), used: Kib(i.memory) })
    }

    /// `virDomainMemoryStats`: the balloon's size and the guest's statistics.
    pub fn memory_stats(&self) -> Result<MemStats, LibvirtError> {
        const CALL: &str = "virDomainMemoryStats";
        let pairs = self.on_domain(CALL, |d| Ok(d.memory_stats(0)?.iter().map(|s| (s.tag, s.val)).collect::<Vec<_>>()))?;
        parse::mem_stats(&pairs).map_err(|why| LibvirtError::Unexpected { call: CALL, why })
    }

    /// Has the guest's balloon driver send statistics every `secs` seconds
    /// (`virDomainSetMemoryStatsPeriod`, live).
    pub fn set_stats_period(&self, secs: u32) -> Result<(), LibvirtError> {
        let secs = i32::try_from(secs).unwrap_or(i32::MAX);
        self.on_domain("virDomainSetMemoryStatsPeriod", move |d| d.set_memory_stats_period(secs, sys::VIR_DOMAIN_MEM_LIVE))
    }

    /// The guest's size (`virDomainSetMemoryFlags`, live): the balloon inflates or
    /// deflates to it. libvirt refuses more than the domain's `<memory>`.
    pub fn set_memory(&self, size: Kib) -> Result<(), LibvirtError> {
        self.on_domain("virDomainSetMemoryFlags", move |d| d.set_memory_flags(size.0, sys::VIR_DOMAIN_MEM_LIVE))
    }

    /// The running job (`virDomainGetJobStats`); with `completed`, the last finished one.
    /// A driver without job statistics has no job.
    pub fn job(&self, completed: bool) -> Result<JobInfo, LibvirtError> {
        let flags = if completed { sys::VIR_DOMAIN_JOB_STATS_COMPLETED } else { 0 };
        match self.on_domain("virDomainGetJobStats", move |d| job_stats(d, flags)) {
            Ok(s) => Ok(parse::job_info(&s)),
            Err(e) if e.is_no_support() => Ok(JobInfo::none()),
            Err(e) => Err(e),
        }
    }

    /// The domain's live XML (`virDomainGetXMLDesc`).
    pub fn xml(&self) -> Result<String, LibvirtError> {
        self.on_domain("virDomainGetXMLDesc", |d| d.xml_desc(0))
    }

    /// Starts a live peer-to-peer migration to the libvirt at `dest_uri`
    /// (`virDomainMigrateToURI3` with `VIR_MIGRATE_LIVE | VIR_MIGRATE_PEER2PEER`, as
    /// `virsh migrate --live --p2p`), capped at `bandwidth_mib_s` if given. The call returns
    /// only when the migration ends, so it runs on a thread and a connection of its own,
    /// with keepalive; its end comes on the returned channel. Its progress is the domain's
    /// job ([`Domain::job`]).
    pub fn start_migration(&self, dest_uri: &str, bandwidth_mib_s: Option<u64>) -> mpsc::Receiver<Result<(), LibvirtError>> {
        const CALL: &str = "virDomainMigrateToURI3";
        init();
        let (tx, rx) = mpsc::channel();
        if dest_uri.contains('\0') {
            let _ = tx.send(Err(LibvirtError::Unexpected { call: CALL, why: "a URI cannot contain a NUL byte".into() }));
            return rx;
        }
        let (uri, name, dest) = (self.conn.uri.clone(), self.name.clone(), dest_uri.to_string());
        let run = move || -> Result<(), LibvirtError> {
            let conn = virt::connect::Connect::open(Some(&uri)).map_err(|e| LibvirtError::Connect { uri: uri.clone(), message: e.message().to_string() })?;
            let _ = conn.set_keep_alive(KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT);
            let d = conn.lookup_domain_by_name(&name).map_err(|e| failed("virDomainLookupByName", e))?;
            let params = virt::domain::MigrateParameters { bandwidth: bandwidth_mib_s, ..Default::default() };
            d.migrate_to_uri3(Some(&dest), params, sys::VIR_MIGRATE_LIVE | sys::VIR_MIGRATE_PEER2PEER).map_err(|e| failed(CALL, e))
        };
        let spawned = std::thread::Builder::new().name("libvirt-migrate".into()).spawn({
            let tx = tx.clone();
            move || {
                let _ = tx.send(run());
            }
        });
        if let Err(e) = spawned {
            let _ = tx.send(Err(LibvirtError::Unexpected { call: CALL, why: format!("cannot start its thread: {e}") }));
        }
        rx
    }
}

/// What is known of a URI's hypervisor version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VersionState {
    /// A probe runs.
    Asking,
    /// libvirt answered.
    Known((u32, u32, u32)),
    /// The last probe failed then; another may start [`VERSION_RETRY`] later.
    Failed(Instant),
}

/// The hypervisor versions of URIs: answers, and probes running or failed.
static VERSIONS: Mutex<BTreeMap<String, VersionState>> = Mutex::new(BTreeMap::new());

/// How long after a failed [`probe_version`] another may start.
pub const VERSION_RETRY: Duration = Duration::from_secs(30);

/// `virConnectGetVersion` on `conn`, waiting up to [`VERSION_TIMEOUT`].
fn version_call(conn: &Connection) -> Result<(u32, u32, u32), LibvirtError> {
    const CALL: &str = "virConnectGetVersion";
    let v = conn.call_within(VERSION_TIMEOUT.max(conn.timeout), CALL, |h| h.conn.hyp_version().map_err(|e| failed(CALL, e)))?;
    Ok(parse::hypervisor_version(u64::from(v)))
}

/// The hypervisor version of `uri`, if libvirt has told it (to [`probe_version`]); never waits.
pub fn known_version(uri: &str) -> Option<(u32, u32, u32)> {
    match lock(&VERSIONS).get(uri) {
        Some(VersionState::Known(v)) => Some(*v),
        _ => None,
    }
}

/// Has the hypervisor version of `uri` asked for in the background, on a connection and a
/// thread of their own (so that no session's calls wait behind it), unless it is known, a
/// probe runs, or one failed less than [`VERSION_RETRY`] ago. Returns at once; the answer
/// is [`known_version`]'s once it comes.
pub fn probe_version(uri: &str) {
    {
        let mut m = lock(&VERSIONS);
        match m.get(uri) {
            Some(VersionState::Known(_) | VersionState::Asking) => return,
            Some(VersionState::Failed(at)) if at.elapsed() < VERSION_RETRY => return,
            _ => {}
        }
        m.insert(uri.to_string(), VersionState::Asking);
    }
    let u = uri.to_string();
    let spawned = std::thread::Builder::new().name("libvirt-version".into()).spawn(move || {
        let answer = Connection::open(&u, VERSION_TIMEOUT).and_then(|c| version_call(&c));
        let state = match answer {
            Ok(v) => VersionState::Known(v),
            Err(_) => VersionState::Failed(Instant::now()),
        };
        lock(&VERSIONS).insert(u, state);
    });
    if spawned.is_err() {
        lock(&VERSIONS).insert(uri.to_string(), VersionState::Failed(Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: u32, message: &str) -> LibvirtError {
        LibvirtError::Failed { call: "virDomainLookupByName", message: message.into(), code }
    }

    #[test]
    fn errors_are_told_apart_by_libvirt_code_and_message() {
        assert!(err(ERR_NO_DOMAIN, "Domain not found: no domain with matching name 'x'").is_no_domain());
        assert!(!err(ERR_NO_DOMAIN, "x").is_no_balloon());
        // A domain named after the product: its name is in every message about it.
        let gone = err(ERR_NO_DOMAIN, "Domain not found: no domain with matching uuid '76fc9d44-e0bd-49e1-bd74-402200000000' (autoballoon-guest)");
        assert!(gone.is_no_domain() && !gone.is_no_balloon());
        assert!(!err(1, "internal error: autoballoon-guest: cannot read the balloon stats period").is_no_balloon());
        let b = err(55, "Requested operation is not valid: Unable to change memory of active domain without the balloon device and guest OS balloon driver");
        assert!(b.is_no_balloon() && !b.is_no_domain());
        assert!(err(ERR_NO_SUPPORT, "this function is not supported by the connection driver: virDomainGetJobStats").is_no_support());
        assert_eq!(err(1, "m").to_string(), "libvirt's virDomainLookupByName failed: m");
    }

    // The test driver (`test:///default`, in libvirt0 itself: no daemon) answers these.

    #[test]
    fn an_unknown_uri_or_domain_fails_to_open() {
        let e = Domain::open("nosuchdriver:///x", "d", Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, LibvirtError::Connect { .. }), "{e}");
        let e = Domain::open("test:///default", "nosuchdom", Duration::from_secs(5)).unwrap_err();
        assert!(e.is_no_domain(), "{e}");
    }

    #[test]
    fn the_test_drivers_domain_through_the_api() {
        let (d, info) = Domain::open("test:///default", "test", Duration::from_secs(5)).unwrap();
        assert_eq!((info.state, info.max), ("running", Kib(8 * 1024 * 1024)));
        let s = d.memory_stats().unwrap();
        assert!(s.actual.is_some() && s.usable.is_some(), "{s:?}");
        assert_eq!(d.job(false).unwrap(), JobInfo::none(), "the test driver has no job statistics: no job");
        let xml = d.xml().unwrap();
        assert!(xml.starts_with("<domain type='test'"), "{xml}");
        assert_eq!(parse::memballoon_in_xml(&xml).unwrap().model, "virtio");
        assert_eq!(version_call(&d.conn).unwrap(), (0, 0, 2));
        d.close();
        assert!(matches!(d.info(), Err(LibvirtError::Closed)));
    }

    #[test]
    fn a_uri_with_too_many_stuck_calls_is_refused_and_others_are_not() {
        let uri = "test:///nosuchfile-stuck-test.xml";
        count_stuck(uri, MAX_STUCK as isize);
        let e = Connection::open(uri, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(&e, LibvirtError::Stuck { count: MAX_STUCK, .. }), "{e}");
        assert!(Connection::open("test:///default", Duration::from_secs(5)).is_ok());
        assert_eq!(count_stuck(uri, -(MAX_STUCK as isize)), 0);
        assert!(matches!(Connection::open(uri, Duration::from_secs(5)), Err(LibvirtError::Connect { .. })));
    }

    #[test]
    fn a_nul_byte_is_an_error_not_a_panic() {
        assert!(matches!(Connection::open("test:///def\0ault", Duration::from_secs(5)), Err(LibvirtError::Connect { .. })));
        assert!(Domain::open("test:///default", "te\0st", Duration::from_secs(5)).is_err());
        let (d, _) = Domain::open("test:///default", "test", Duration::from_secs(5)).unwrap();
        assert!(d.start_migration("qemu+ssh://x\0/system", None).recv().unwrap().is_err());
    }

    #[test]
    fn the_version_is_probed_in_the_background_once_per_uri() {
        // Other tests may have asked test:///default already: the answer is the same.
        let uri = "test:///default";
        probe_version(uri);
        // A second probe while one runs (or after it answered) starts none.
        probe_version(uri);
        let t = Instant::now();
        while known_version(uri).is_none() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(known_version(uri), Some((0, 0, 2)));
        // Nothing known of a URI never asked, and a failed probe is not an answer.
        assert_eq!(known_version("test:///never-asked"), None);
        probe_version("nosuchdriver:///x");
        let t = Instant::now();
        while !matches!(lock(&VERSIONS).get("nosuchdriver:///x"), Some(VersionState::Failed(_))) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(matches!(lock(&VERSIONS).get("nosuchdriver:///x"), Some(VersionState::Failed(_))));
        assert_eq!(known_version("nosuchdriver:///x"), None);
    }

    #[test]
    fn active_domains_are_listed() {
        let c = Connection::open("test:///default", Duration::from_secs(5)).unwrap();
        assert!(c.active_domains().unwrap().contains(&"test".to_string()));
    }

    #[test]
    fn a_call_that_hangs_times_out_and_close_ends_a_wait_at_once() {
        let c = Connection::open("test:///default", Duration::from_millis(200)).unwrap();
        let t = Instant::now();
        let e = c.call("sleep", |_| -> Result<(), LibvirtError> {
            std::thread::sleep(Duration::from_millis(600));
            Ok(())
        });
        assert!(matches!(e, Err(LibvirtError::Timeout { call: "sleep", .. })), "{e:?}");
        assert!(t.elapsed() < Duration::from_millis(500));
        let c = Arc::new(Connection::open("test:///default", Duration::from_secs(30)).unwrap());
        let closer = c.clone();
        let cut = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            closer.close();
        });
        let t = Instant::now();
        let e = c.call("sleep", |_| -> Result<(), LibvirtError> {
            std::thread::sleep(Duration::from_millis(800));
            Ok(())
        });
        assert!(matches!(e, Err(LibvirtError::Closed)), "{e:?}");
        assert!(t.elapsed() < Duration::from_millis(600));
        cut.join().unwrap();
        assert!(matches!(c.active_domains(), Err(LibvirtError::Closed)));
    }
}

