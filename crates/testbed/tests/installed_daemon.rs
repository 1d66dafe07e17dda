//! The product as an operator gets it (issue 20, "tests on the real thing"): the host .deb
//! (packaging/build-host-deb.sh) installed with `dpkg -i`, the daemon started as its
//! installed unit starts it (the unit's ExecStartPre and ExecStart, with the runtime
//! directory, umask and sd_notify socket systemd would give it: no systemd runs here, so
//! not its sandbox), on the installed /etc/autoballoon/host.toml as packaged, unedited: it
//! discovers libvirt's domains on qemu:///system and the sockets of /run/autoballoon-vms,
//! which the package's postinst creates (tmpfiles.d, mode 1770 root:kvm). Then, booted
//! together, three transient TCG libvirt domains of the guest image and one plain QEMU
//! whose sockets are in that directory (`NAME.qmp`, `NAME.agent`), none of them named in
//! the configuration. Checked:
//!
//! - the package made the socket directory, 1770 root:kvm;
//! - each VM is in the daemon's status soon after it starts (the socket directory is read
//!   every 0.5 s, libvirt listed every 2 s), and its session (`managing` line, state
//!   `running`) begins within 2 s of the daemon adding it, or for a libvirt domain
//!   `LIBVIRT_SESSION_BOUND_S` (no wait for libvirt's slow `virConnectGetVersion`: it is
//!   asked in the background);
//! - libvirt logs no taint for any domain (`Domain id=N is tainted` in
//!   /var/log/libvirt/qemu/NAME.log);
//! - libvirt's view of each balloon (`virsh domstats --balloon`, `balloon.current`) agrees
//!   with the daemon's status (`size` and `target`) within 2 MiB once settled;
//! - a reload (SIGHUP, as `ExecReload=`) with a floor raised by a `[[match]]` (appended to
//!   the packaged file) is honoured:
//!   every target, and libvirt's balloons, go to the new floor;
//! - a destroyed domain, and a plain QEMU killed, leave the status;
//! - the daemon says READY=1 (and RELOADING=1/READY=1 around the reload, WATCHDOG=1 while it
//!   runs, STOPPING=1) and exits 0 on SIGTERM.
//!
//! The .deb is built by the test from the daemon binary cargo built (as `make
//! packaging-test` does) into ~/.cache/autoballoon/deb-e2e; `AUTOBALLOON_DEB=FILE` tests a
//! given one instead (e.g. `make deb`'s release package). The package is purged, the
//! domains destroyed and the daemon stopped at the end, failed or not. This installs into
//! the machine (root, Debian 12: this project's disposable test machines). Skipped, with
//! the reason printed, only when libvirt is not installed.
mod common;

use autoballoon_core::Kib;
use autoballoon_testbed::daemon::daemon_binary;
use autoballoon_testbed::libvirt::{Libvirt, LibvirtError, TransientDomain, URI};
use autoballoon_testbed::{wait_for, Qemu, VmSpec};
use serde_json::Value;
use std::collections::HashMap;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

const PKG: &str = "autoballoon";
/// Each guest's size (1 vCPU, TCG).
const GUEST_MIB: u64 = 512;
/// The floor the reload sets, above where the idle guests settle.
const FLOOR_MIB: u64 = 448;
/// The unit's RuntimeDirectory (the status socket), made here as systemd would.
const RUN_DIR: &str = "/run/autoballoon";
/// The socket directory the packaged host.toml watches, made by the package.
const SOCKET_DIR: &str = "/run/autoballoon-vms";
/// How long after the daemon adds a VM (and libvirt answers) its session must have begun:
/// 2 s for the plain QEMU. A libvirt domain's session no longer waits for
/// `virConnectGetVersion` (libvirtd here answers it by probing QEMU's capabilities again:
/// 4 s alone, 8-35 s measured while three guests boot on two cores): it opens the domain
/// and reads its XML, info, job and statistics, each within 5 s, and a session whose call
/// timed out while libvirtd is busy is retried after its back-off. 12 s: one timed-out
/// call, its retry and the calls of the next session.
const SESSION_BOUND_S: f64 = 2.0;
/// How long after libvirt answers a domain must be in the status: the listing's period (2 s)
/// and one listing that timed out (5 s), as libvirtd still busy with its probes makes it.
const LIBVIRT_FOUND_BOUND_S: f64 = 7.5;
const LIBVIRT_SESSION_BOUND_S: f64 = 12.0;
/// The packaged configuration's status socket (its default).
const STATUS_SOCKET: &str = "/run/autoballoon/status.sock";

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.env("LC_ALL", "C").stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{cmd:?}: {}: {}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

fn virsh(args: &[&str]) -> Result<String, String> {
    run(Command::new("virsh").arg("-c").arg(URI).args(args))
}

/// libvirt's own view of the balloon: `virsh domstats --balloon`'s `balloon.current`, KiB.
fn balloon_current_kib(domain: &str) -> Option<u64> {
    let out = virsh(&["domstats", "--balloon", domain]).ok()?;
    out.lines().find_map(|l| l.trim().strip_prefix("balloon.current=")).and_then(|v| v.trim().parse().ok())
}

/// The package to install: `$AUTOBALLOON_DEB`, else built by packaging/build-host-deb.sh
/// from the daemon binary cargo built, into the cache (never into the repository):
/// `~/.cache/autoballoon/deb-e2e/KEY/`, KEY the SHA-256 of the binary and of everything
/// under packaging/ and Cargo.toml, so that an unchanged daemon is not packaged again (xz
/// of the 50 MB debug binary takes 20-30 s here).
fn host_deb() -> PathBuf {
    if let Some(p) = std::env::var_os("AUTOBALLOON_DEB").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let bin = daemon_binary().unwrap_or_else(|e| panic!("{e}"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cache = std::env::var_os("AUTOBALLOON_CACHE").filter(|c| !c.is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/autoballoon"));
    let sums = run(Command::new("sh").arg("-c").arg("sha256sum \"$1\" Cargo.toml $(find packaging -type f | sort) | cut -d' ' -f1 | sha256sum").arg("sh").arg(&bin).current_dir(&root)).unwrap_or_else(|e| panic!("{e}"));
    let key = &sums[..16];
    let out = cache.join("deb-e2e").join(key);
    let cached = std::fs::read_dir(&out).into_iter().flatten().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "deb"));
    if let Some(deb) = cached {
        return deb;
    }
    // Older keys' packages go.
    let _ = std::fs::remove_dir_all(cache.join("deb-e2e"));
    // Built beside, then renamed: an interrupted build is never taken for a package.
    let tmp = out.with_extension("tmp");
    let built = run(Command::new(root.join("packaging/build-host-deb.sh")).arg("--host").arg(&bin).arg("--out").arg(&tmp)).unwrap_or_else(|e| panic!("building the host .deb: {e}"));
    let file = PathBuf::from(built.lines().last().unwrap_or_default().trim());
    std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("{} -> {}: {e}", tmp.display(), out.display()));
    out.join(file.file_name().expect("a file name"))
}

/// The package, installed with dpkg; purged on drop (its conffile with it).
struct Installed;

impl Installed {
    fn install(deb: &Path) -> Installed {
        if run(Command::new("dpkg-query").args(["-W", "-f", "${Status}", PKG])).is_ok_and(|s| s.contains("installed")) {
            eprintln!("note: {PKG} was installed on this machine already: purged first");
        }
        let _ = dpkg_purge();
        let out = run(Command::new("dpkg").arg("-i").arg(deb)).unwrap_or_else(|e| panic!("dpkg -i: {e}"));
        eprint!("{out}");
        Installed
    }

    /// Where the package put a file ending in `suffix` (`dpkg -L`).
    fn file(&self, suffix: &str) -> PathBuf {
        let list = run(Command::new("dpkg").args(["-L", PKG])).unwrap_or_else(|e| panic!("{e}"));
        list.lines().find(|l| l.ends_with(suffix)).map(PathBuf::from).unwrap_or_else(|| panic!("the package has no {suffix}:\n{list}"))
    }

    /// Purges the package and checks it left nothing enabled behind (postinst enables the unit
    /// even without a running systemd, so prerm must disable it the same way).
    fn purge(self) {
        std::mem::forget(self);
        dpkg_purge().unwrap_or_else(|e| panic!("dpkg --purge {PKG}: {e}"));
        assert!(Path::new(WANTS_LINK).symlink_metadata().is_err(), "the purged package left {WANTS_LINK} behind");
    }
}

/// The link `systemctl enable` makes for the packaged unit.
const WANTS_LINK: &str = "/etc/systemd/system/multi-user.target.wants/autoballoon.service";

fn dpkg_purge() -> Result<String, String> {
    run(Command::new("dpkg").args(["--purge", PKG]))
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Err(e) = dpkg_purge() {
            eprintln!("dpkg --purge {PKG}: {e}");
        }
    }
}

/// The values of `KEY=` in a unit file's lines.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines().filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('=')).map(|v| v.trim().to_string()).collect()
}

/// A unit's command line as argv (no quoting in this unit), its prefixes (`-`, `@`, ...) off.
fn argv(line: &str) -> Vec<String> {
    line.trim_start_matches(['-', '@', '+', '!', ':']).split_whitespace().map(str::to_string).collect()
}

/// The daemon as the unit runs it; SIGTERM (then SIGKILL) on drop.
struct Service {
    child: Child,
    log: PathBuf,
    /// What it sent to `$NOTIFY_SOCKET`, in order.
    notes: Arc<Mutex<Vec<String>>>,
    stop_notes: Arc<AtomicBool>,
}

impl Service {
    /// `exec` with `$NOTIFY_SOCKET` (a datagram socket in `dir`) and `$WATCHDOG_USEC`, umask
    /// 0077, stdout and stderr into `dir/daemon.log` (the journal).
    fn start(exec: &[String], watchdog_usec: u64, dir: &Path) -> Service {
        let notify = dir.join("notify.sock");
        let _ = std::fs::remove_file(&notify);
        let sock = UnixDatagram::bind(&notify).unwrap_or_else(|e| panic!("{}: {e}", notify.display()));
        sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let notes = Arc::new(Mutex::new(Vec::new()));
        let stop_notes = Arc::new(AtomicBool::new(false));
        {
            let (notes, stop) = (notes.clone(), stop_notes.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(n) = sock.recv(&mut buf) {
                        notes.lock().unwrap().push(String::from_utf8_lossy(&buf[..n]).into_owned());
                    }
                }
            });
        }
        let log = dir.join("daemon.log");
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(&exec[0]);
        cmd.args(&exec[1..]).env("NOTIFY_SOCKET", &notify).env("WATCHDOG_USEC", watchdog_usec.to_string()).stdin(Stdio::null()).stdout(logf.try_clone().unwrap()).stderr(logf);
        // SAFETY: umask(2) only, between fork and exec (UMask=0077).
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o077);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("{exec:?}: {e}"));
        Service { child, log, notes, stop_notes }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_lines(&self, what: &str) -> Vec<String> {
        self.log_text().lines().filter(|l| l.contains(what)).map(str::to_string).collect()
    }

    fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap().clone()
    }

    fn notes_with(&self, what: &str) -> usize {
        self.notes().iter().filter(|n| n.lines().any(|l| l == what)).count()
    }

    /// SIGTERM, then SIGKILL after 10 s; the exit status.
    fn stop(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(s)) = self.child.try_wait() {
            return Some(s);
        }
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let mut status = None;
        wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        status
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
        self.stop_notes.store(true, Ordering::Relaxed);
    }
}

/// When each VM was first in the status, first `running`, and gone after being there.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    first: Option<SystemTime>,
    running: Option<SystemTime>,
    gone: Option<SystemTime>,
}

/// Reads the status socket every 100 ms on a thread of its own, recording [`Seen`].
struct Watch {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    last: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
}

impl Watch {
    fn start(socket: &Path) -> Watch {
        let w = Watch { seen: Default::default(), last: Default::default(), stop: Default::default() };
        let (seen, last, stop, socket) = (w.seen.clone(), w.last.clone(), w.stop.clone(), socket.to_path_buf());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(doc) = autoballoon::status_socket::query(&socket) {
                    let vms = doc["vms"].as_array().cloned().unwrap_or_default();
                    let now = SystemTime::now();
                    let mut seen = seen.lock().unwrap();
                    for v in &vms {
                        let s = seen.entry(v["name"].as_str().unwrap_or_default().to_string()).or_default();
                        s.first.get_or_insert(now);
                        if v["state"] == "running" {
                            s.running.get_or_insert(now);
                        }
                        s.gone = None;
                    }
                    for (name, s) in seen.iter_mut() {
                        if s.gone.is_none() && !vms.iter().any(|v| v["name"] == name.as_str()) {
                            s.gone = Some(now);
                        }
                    }
                    *last.lock().unwrap() = vms;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        w
    }

    fn seen(&self, name: &str) -> Seen {
        self.seen.lock().unwrap().get(name).copied().unwrap_or_default()
    }

    /// A VM's status as last read.
    fn vm(&self, name: &str) -> Option<Value> {
        self.last.lock().unwrap().iter().find(|v| v["name"] == name).cloned()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn kib(v: &Value, key: &str) -> Option<u64> {
    v[key].as_u64()
}

fn secs(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from).map(|d| d.as_secs_f64()).unwrap_or_else(|e| -e.duration().as_secs_f64())
}

/// Removes the test's files from the socket directory (a plain QEMU leaves its logs there).
struct SocketFiles(String);

impl Drop for SocketFiles {
    fn drop(&mut self) {
        for e in std::fs::read_dir(SOCKET_DIR).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(&self.0) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        // The runtime directory goes if nothing else is in it (as systemd removes
        // RuntimeDirectory); the socket directory is the package's (tmpfiles.d) and stays.
        let _ = std::fs::remove_dir(RUN_DIR);
    }
}

#[test]
fn installed_package_manages_discovered_vms() {
    let t0 = Instant::now();
    let _lv = match Libvirt::ensure(&common::vm_dir("installed_daemon", "libvirtd")) {
        Ok(lv) => lv,
        Err(LibvirtError::Unavailable(why)) => {
            eprintln!("SKIPPED installed_package_manages_discovered_vms: {why}");
            return;
        }
        Err(LibvirtError::Broken(why)) => panic!("libvirt is installed but does not work: {why}"),
    };
    let image = common::image();
    let dir = common::vm_dir("installed_daemon", "daemon");
    // Checks that do not stop the test: all reported at the end.
    let mut failures: Vec<String> = Vec::new();

    // 1. The package, installed.
    let deb = host_deb();
    let pkg = Installed::install(&deb);
    let unit_path = pkg.file("/autoballoon.service");
    // postinst enables the unit with or without a running systemd (an image built offline).
    assert!(Path::new(WANTS_LINK).symlink_metadata().is_ok() || !Path::new("/usr/bin/systemctl").exists() && !Path::new("/bin/systemctl").exists(), "postinst did not enable the unit ({WANTS_LINK} missing)");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    eprintln!("installed {} in {:.1} s; unit {}", deb.display(), t0.elapsed().as_secs_f64(), unit_path.display());

    // 2. The service as its unit starts it.
    let exec = argv(unit_values(&unit, "ExecStart").first().unwrap_or_else(|| panic!("no ExecStart in {}", unit_path.display())));
    let config = exec.iter().position(|a| a == "--config").and_then(|i| exec.get(i + 1)).map(PathBuf::from).unwrap_or_else(|| panic!("no --config in ExecStart {exec:?}"));
    let packaged = std::fs::read_to_string(&config).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
    // Used as packaged: it discovers by itself, in the directory the package made.
    let parsed = autoballoon::config::Config::parse(&packaged).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
    assert_eq!((parsed.discovery.socket_dir.as_path(), parsed.discovery.libvirt, parsed.discovery.libvirt_uri.as_str()), (Path::new(SOCKET_DIR), true, URI), "the packaged {}", config.display());
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(SOCKET_DIR).unwrap_or_else(|e| panic!("{SOCKET_DIR}, which the package's postinst creates: {e}"));
        let kvm = run(Command::new("getent").args(["group", "kvm"])).ok().and_then(|l| l.split(':').nth(2).and_then(|g| g.trim().parse::<u32>().ok()));
        let got = (m.is_dir(), m.mode() & 0o7777, m.uid(), Some(m.gid()));
        if got != (true, 0o1770, 0, kvm) {
            failures.push(format!("{SOCKET_DIR}: (dir, mode, uid, gid) {got:?}, expected a directory 1770 root:kvm ({kvm:?})"));
        }
    }
    let prefix = format!("e2e-{}-", std::process::id());
    // RuntimeDirectory=autoballoon, RuntimeDirectoryMode=0700 (the status socket).
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(RUN_DIR).unwrap();
    std::fs::set_permissions(RUN_DIR, std::fs::Permissions::from_mode(0o700)).unwrap();
    let _socket_files = SocketFiles(prefix.clone());
    for pre in unit_values(&unit, "ExecStartPre") {
        let a = argv(&pre);
        let out = run(Command::new(&a[0]).args(&a[1..]));
        assert!(out.is_ok(), "ExecStartPre {pre}: {}", out.unwrap_err());
    }
    let watchdog_usec = unit_values(&unit, "WatchdogSec").first().and_then(|w| w.trim_end_matches('s').parse::<u64>().ok()).map_or(0, |s| s * 1_000_000);
    let mut svc = Service::start(&exec, watchdog_usec, &dir);
    let ready = wait_for(Duration::from_secs(30), Duration::from_millis(50), || svc.notes_with("READY=1") > 0);
    assert!(ready.is_some(), "no READY=1 within 30 s; notes {:?}; log:\n{}", svc.notes(), svc.log_text());
    eprintln!("{exec:?}: READY=1 in {:.2} s", ready.unwrap().as_secs_f64());
    let watch = Watch::start(Path::new(STATUS_SOCKET));
    let bin = PathBuf::from(&exec[0]);

    // 3. Three libvirt domains and one plain QEMU, booted together.
    let domain_names: Vec<String> = (1..=3).map(|i| format!("{prefix}lv{i}")).collect();
    let qemu_name = format!("{prefix}qemu");
    let t_boot = Instant::now();
    let (domains, qemu) = std::thread::scope(|s| {
        let handles: Vec<_> = domain_names
            .iter()
            .map(|n| {
                let image = &image;
                // Under /tmp: libvirt's QEMU user must reach the image and the sockets.
                s.spawn(move || (TransientDomain::create(n, GUEST_MIB, image, &PathBuf::from("/tmp").join(n)), SystemTime::now()))
            })
            .collect();
        let q = s.spawn(|| Qemu::start(&image, VmSpec::new(&qemu_name, Kib::from_mib_saturating(GUEST_MIB)), Path::new(SOCKET_DIR)));
        let q = q.join().unwrap();
        (handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>(), q)
    });
    let mut qemu = qemu.unwrap_or_else(|e| panic!("plain QEMU: {e}"));
    let domains: Vec<(TransientDomain, SystemTime)> = domains.into_iter().map(|(d, t)| (d.unwrap_or_else(|e| panic!("virsh create: {e}")), t)).collect();
    eprintln!("3 domains and a plain QEMU started in {:.1} s", t_boot.elapsed().as_secs_f64());
    // A plain QEMU starts when its QMP socket appears.
    let q_started = std::fs::metadata(&qemu.qmp).and_then(|m| m.modified()).unwrap_or_else(|_| SystemTime::now());

    // 4a. Each VM managed soon after it starts: in the status (the socket directory is read
    // every 0.5 s, libvirt listed every 2 s), then its session up (see SESSION_BOUND_S). While libvirtd
    // creates a domain it may not answer for tens of seconds here (it probes QEMU's
    // capabilities again at every start, docs/libvirt.md): the daemon's listings and calls
    // then time out (5 s) and are retried, so a domain's clock starts at the later of its
    // own start and the last `virsh create` returning (libvirtd answering again).
    let all_created = domains.iter().map(|(_, t)| *t).max().expect("three domains");
    let mut starts: Vec<(String, SystemTime, SystemTime, f64, f64)> = domains.iter().map(|(d, t)| (d.name.clone(), *t, all_created, LIBVIRT_FOUND_BOUND_S, LIBVIRT_SESSION_BOUND_S)).collect();
    starts.push((qemu_name.clone(), q_started, q_started, 0.5 + 2.0, SESSION_BOUND_S));
    let all_running = wait_for(Duration::from_secs(60), Duration::from_millis(100), || starts.iter().all(|(n, ..)| watch.seen(n).running.is_some()));
    for (name, started, answering, bound, session_bound) in &starts {
        let s = watch.seen(name);
        let (Some(first), Some(running)) = (s.first, s.running) else {
            failures.push(format!("{name}: not managed within 60 s of all VMs starting ({s:?})"));
            continue;
        };
        let (found, session) = (secs(*started, first), secs(first, running));
        let clock = (*started).max(*answering);
        let (found_fair, session_fair) = (secs(clock, first), secs(first.max(clock), running));
        eprintln!("{name}: in the status {found:.2} s after it started, running {session:.2} s later; from libvirt answering: {found_fair:.2} s, {session_fair:.2} s");
        if found_fair > *bound {
            failures.push(format!("{name}: in the status {found_fair:.2} s after it started and libvirt answered (bound {bound} s)"));
        }
        if session_fair > *session_bound {
            failures.push(format!("{name}: its session began {session_fair:.2} s after the daemon added it and libvirt answered (bound {session_bound} s)"));
        }
    }
    let timeouts = svc.log_lines("did not answer within");
    if !timeouts.is_empty() {
        eprintln!("note: {} libvirt call(s) of the daemon timed out while libvirtd created domains", timeouts.len());
    }
    if all_running.is_none() {
        panic!("not every VM is managed; failures so far: {failures:#?}\nlog:\n{}", svc.log_text());
    }
    for (d, _) in &domains {
        let line = svc.log_lines(&format!("managing libvirt={}", d.name));
        if line.is_empty() {
            failures.push(format!("{}: no `managing libvirt=` line", d.name));
        }
    }

    // 4b. Agents report, the idle guests shrink below the floor to come, and libvirt's
    // balloon agrees with the daemon's status within 2 MiB.
    let names: Vec<String> = starts.iter().map(|(n, ..)| n.clone()).collect();
    let shrunk = wait_for(Duration::from_secs(150), Duration::from_millis(250), || {
        names.iter().all(|n| watch.vm(n).is_some_and(|v| v["source"] == "agent" && kib(&v, "target").is_some_and(|t| t < (FLOOR_MIB - 32) << 10)))
    });
    let statuses: Vec<_> = names.iter().map(|n| (n, watch.vm(n).map(|v| (v["source"].clone(), v["size"].clone(), v["target"].clone())))).collect();
    assert!(shrunk.is_some(), "every agent reports and every guest shrinks below {} MiB: {statuses:?}\nlog:\n{}", FLOOR_MIB - 32, svc.log_text());
    eprintln!("agents report and the guests shrank, {:.1} s after they started: {statuses:?}", t_boot.elapsed().as_secs_f64());
    let agree = |floor_kib: u64| {
        domains.iter().all(|(d, _)| {
            let (Some(v), Some(cur)) = (watch.vm(&d.name), balloon_current_kib(&d.name)) else { return false };
            matches!((kib(&v, "size"), kib(&v, "target")), (Some(s), Some(t)) if cur.abs_diff(s) <= 2048 && cur.abs_diff(t) <= 2048 && t >= floor_kib)
        })
    };
    let views = || domains.iter().map(|(d, _)| format!("{}: libvirt {:?} KiB, status {:?}", d.name, balloon_current_kib(&d.name), watch.vm(&d.name).map(|v| (v["size"].clone(), v["target"].clone())))).collect::<Vec<_>>();
    match wait_for(Duration::from_secs(60), Duration::from_millis(250), || agree(0)) {
        Some(t) => eprintln!("libvirt's balloons agree with the status within 2 MiB ({:.1} s): {:#?}", t.as_secs_f64(), views()),
        None => failures.push(format!("libvirt's balloon.current vs the daemon's size and target, not within 2 MiB in 60 s: {:#?}", views())),
    }
    match Command::new(&bin).arg("status").output() {
        Ok(out) if out.status.success() => {
            let table = String::from_utf8_lossy(&out.stdout).into_owned();
            eprintln!("{} status:\n{table}", bin.display());
            for n in &names {
                if !table.lines().any(|l| l.starts_with(n.as_str()) && l.contains("running")) {
                    failures.push(format!("`autoballoon status` has no running row for {n}:\n{table}"));
                }
            }
        }
        Ok(out) => failures.push(format!("`autoballoon status`: {}: {}", out.status, String::from_utf8_lossy(&out.stderr))),
        Err(e) => failures.push(format!("`autoballoon status`: {e}")),
    }

    // 4c. No taint: no QMP passed through libvirt, nothing else libvirt frowns on.
    for (d, _) in &domains {
        let log = std::fs::read_to_string(format!("/var/log/libvirt/qemu/{}.log", d.name)).unwrap_or_default();
        let taints: Vec<&str> = log.lines().filter(|l| l.contains("is tainted")).collect();
        if !taints.is_empty() {
            failures.push(format!("{}: libvirt tainted the domain: {taints:?}", d.name));
        }
    }

    // 4d. A reload with a floor raised for these VMs ([[match]], as a discovered VM takes its
    // policy), sent as ExecReload= sends it.
    let reloads_before = svc.notes_with("RELOADING=1");
    let matched = format!("\n# added by crates/testbed/tests/installed_daemon.rs\n[[match]]\nname = \"{prefix}*\"\n[match.policy]\nmin_mib = {FLOOR_MIB}\n");
    std::fs::write(&config, format!("{packaged}{matched}")).unwrap();
    let t_reload = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(svc.pid(), libc::SIGHUP) };
    let reloaded = wait_for(Duration::from_secs(10), Duration::from_millis(50), || !svc.log_lines("reloaded").is_empty());
    if reloaded.is_none() {
        failures.push(format!("no `reloaded` line within 10 s of SIGHUP: {:?}", svc.log_lines("reload")));
    }
    if svc.notes_with("RELOADING=1") <= reloads_before {
        failures.push(format!("no RELOADING=1 around the reload: {:?}", svc.notes()));
    }
    let floored = wait_for(Duration::from_secs(30), Duration::from_millis(250), || {
        names.iter().all(|n| watch.vm(n).and_then(|v| kib(&v, "target")).is_some_and(|t| t >= FLOOR_MIB << 10)) && agree(FLOOR_MIB << 10)
    });
    let targets: Vec<_> = names.iter().map(|n| (n, watch.vm(n).map(|v| v["target"].clone()))).collect();
    match floored {
        Some(t) => eprintln!("the new floor of {FLOOR_MIB} MiB honoured {:.1} s after SIGHUP: {targets:?}", t.as_secs_f64()),
        None => failures.push(format!("the floor of {FLOOR_MIB} MiB not honoured within 30 s of SIGHUP ({:?}): targets {targets:?}, {:#?}\nreload lines: {:?}", t_reload.elapsed(), views(), svc.log_lines("reload"))),
    }

    // 4e. A destroyed domain, and a plain QEMU that exits, leave the status.
    let (gone_dom, _) = &domains[2];
    virsh(&["destroy", &gone_dom.name]).unwrap_or_else(|e| panic!("{e}"));
    let destroyed = SystemTime::now();
    qemu.kill();
    let killed = SystemTime::now();
    let left = wait_for(Duration::from_secs(10), Duration::from_millis(100), || watch.seen(&gone_dom.name).gone.is_some() && watch.seen(&qemu_name).gone.is_some());
    for (n, t) in [(&gone_dom.name, destroyed), (&qemu_name, killed)] {
        match watch.seen(n).gone {
            Some(g) => eprintln!("{n} left the status {:.2} s after it stopped", secs(t, g)),
            None => failures.push(format!("{n} still in the status 10 s after it stopped: {:?}", watch.vm(n))),
        }
    }
    if left.is_some() {
        for n in [&gone_dom.name, &qemu_name] {
            if !svc.log_lines(&format!("[{n}] removed: ")).iter().any(|l| l.contains("no longer managed")) {
                failures.push(format!("{n}: no `removed: ...; no longer managed` line"));
            }
        }
    }
    for (d, _) in &domains[..2] {
        if watch.vm(&d.name).is_none_or(|v| v["state"] != "running") {
            failures.push(format!("{} is no longer running in the status: {:?}", d.name, watch.vm(&d.name)));
        }
    }

    // The daemon stops cleanly, as systemctl stop stops it.
    let ran = t_boot.elapsed();
    let status = svc.stop();
    if !status.is_some_and(|s| s.success()) {
        failures.push(format!("the daemon's exit on SIGTERM: {status:?}"));
    }
    let notes = svc.notes();
    if ran > Duration::from_micros(watchdog_usec / 2) && watchdog_usec > 0 && svc.notes_with("WATCHDOG=1") == 0 {
        failures.push(format!("no WATCHDOG=1 in {:.0} s (WatchdogSec {} s): {notes:?}", ran.as_secs_f64(), watchdog_usec / 1_000_000));
    }
    if wait_for(Duration::from_secs(2), Duration::from_millis(50), || svc.notes_with("STOPPING=1") > 0).is_none() {
        failures.push(format!("no STOPPING=1: {notes:?}"));
    }
    let errors = svc.log_lines(" ERROR ");
    eprintln!("daemon log: {} lines, {} at error level{}", svc.log_text().lines().count(), errors.len(), if errors.is_empty() { String::new() } else { format!(":\n{}", errors.join("\n")) });
    eprintln!("installed_package_manages_discovered_vms: {:.1} s in all", t0.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "{} check(s) failed:\n{}\n\ndaemon log:\n{}", failures.len(), failures.join("\n"), svc.log_text());
    pkg.purge();
}
