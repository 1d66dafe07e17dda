//! Discovery and reloads: VMs whose QMP socket appears in `[discovery] socket_dir` come
//! under control and leave when it goes (or their QEMU does); `[[match]]` gives them their
//! policy; a reload adds, removes and changes VMs without a restart.

mod common;

use autoballoon::config::Config;
use autoballoon_fakes::TempDir;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// The policy keys of `quick_policy`, as a `[defaults]` table.
const QUICK_DEFAULTS: &str = "[defaults]\nhold_off_s = 1\nspike_hold_s = 0\nspike_fade_s = 0\n";

fn config(text: &str) -> Config {
    Config::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `[controller]` at `interval_ms`, no endpoints, quick defaults, and `rest`.
fn config_text(interval_ms: u64, rest: &str) -> String {
    format!("[controller]\ninterval_ms = {interval_ms}\nmetrics_listen = ''\nstatus_socket = ''\n{QUICK_DEFAULTS}{rest}")
}

/// Puts a VM's sockets into `dir` by the naming convention (links to the fakes' sockets).
fn plug(dir: &Path, name: &str, fakes: &Fakes) {
    std::os::unix::fs::symlink(fakes.p().path(), dir.join(format!("{name}.agent"))).unwrap();
    std::os::unix::fs::symlink(fakes.q().qmp_path(), dir.join(format!("{name}.qmp"))).unwrap();
}

fn unplug(dir: &Path, name: &str) {
    std::fs::remove_file(dir.join(format!("{name}.qmp"))).unwrap();
    std::fs::remove_file(dir.join(format!("{name}.agent"))).unwrap();
}

/// A guest using `used_mib`, with its balloon driver's stats on (a view from the first sample).
fn guest(used_mib: u64) -> Guest {
    let g = Guest::start(Fakes::start(), used_mib);
    g.set_stats(true);
    g
}

fn events_of(d: &Daemon, vm: &str, event: &str) -> Vec<String> {
    d.log.lines().iter().filter(|l| l["vm"] == vm && l["event"] == event).map(|l| l["msg"].as_str().unwrap_or_default().to_string()).collect()
}

#[test]
fn a_socket_that_appears_is_managed_within_two_seconds_and_leaves_with_it() {
    let dir = TempDir::new().unwrap();
    let d = Daemon::start_config(config(&config_text(1000, &format!("[discovery]\nsocket_dir = {:?}\n", dir.path()))));
    assert!(d.ctl().vms().is_empty(), "no VM yet: a valid running state");
    let (a, b) = (guest(1000), guest(1500));
    plug(dir.path(), "b", &b.fakes);
    wait_for(Duration::from_secs(10), "b managed", || !b.fakes.requests().is_empty());
    // The VM whose socket appears now: a balloon request within 2 s.
    let t = Instant::now();
    plug(dir.path(), "a", &a.fakes);
    wait_for(Duration::from_secs(10), "a balloon request", || !a.fakes.requests().is_empty());
    assert!(t.elapsed() <= Duration::from_secs(2), "first request {:?} after the socket appeared", t.elapsed());
    wait_for(Duration::from_secs(10), "a's estimate", || a.fakes.last_request() == Some(expected_target(1000)));
    assert_eq!(events_of(&d, "a", "vm_added").len(), 1, "{}", d.log.text());
    assert_eq!(d.status("a").origin, "socket_dir");
    wait_for(Duration::from_secs(5), "a's agent", || a.p().is_connected());

    // Its socket goes: out of the status at once, its actor stopped.
    let old = d.ctl().vm("a").unwrap();
    unplug(dir.path(), "a");
    wait_for(Duration::from_secs(3), "a removed", || d.ctl().vm("a").is_none());
    wait_for(Duration::from_secs(5), "a's QMP and agent sockets closed", || !a.q().is_negotiated() && !a.p().is_connected());
    let removed = events_of(&d, "a", "vm_removed");
    assert_eq!(removed.len(), 1, "{}", d.log.text());
    assert!(removed[0].contains("socket") && removed[0].contains("gone"), "{removed:?}");
    // No more control: b goes on being sampled, a is asked nothing more.
    let (requests, connections, samples) = (a.fakes.requests().len(), a.q().connections(), old.snapshot().samples);
    a.set_used(3000);
    d.wait_samples("b", 4, Duration::from_secs(15));
    assert_eq!((a.fakes.requests().len(), a.q().connections(), old.snapshot().samples), (requests, connections, samples));
    assert!(d.ctl().vms().iter().map(|v| v.name.clone()).eq(["b".to_string()]));
    let served: Vec<String> = autoballoon::metrics::snapshots_of(d.ctl())().into_iter().map(|v| v.name).collect();
    assert_eq!(served, ["b"], "a's status and metrics are gone");
    assert!(!autoballoon::metrics::render(&autoballoon::metrics::snapshots_of(d.ctl())(), &d.ctl().host_status()).contains("vm=\"a\""));
    // Only the leave line: no "lost QMP" or "cannot reach" for a VM that left.
    for e in ["disconnected", "unreachable"] {
        assert!(events_of(&d, "a", e).is_empty(), "{e}: {}", d.log.text());
    }
}

#[test]
fn a_socket_nobody_listens_on_leaves_once_and_stays_out() {
    let dir = TempDir::new().unwrap();
    // What a killed QEMU leaves behind: the socket file, refusing connections.
    drop(std::os::unix::net::UnixListener::bind(dir.path().join("ghost.qmp")).unwrap());
    let live = guest(1000);
    plug(dir.path(), "live", &live.fakes);
    let d = Daemon::start_config(config(&config_text(200, &format!("[discovery]\nsocket_dir = {:?}\n", dir.path()))));
    // The leave line is written before the VM leaves the registry: wait for both.
    wait_for(Duration::from_secs(10), "ghost removed", || !events_of(&d, "ghost", "vm_removed").is_empty() && d.ctl().vm("ghost").is_none());
    let removed = events_of(&d, "ghost", "vm_removed");
    assert!(removed[0].contains("QEMU is gone"), "{removed:?}");
    // Not taken again while the same dead socket is there.
    d.wait_samples("live", 10, Duration::from_secs(15));
    assert_eq!(events_of(&d, "ghost", "vm_removed").len(), 1, "{}", d.log.text());
    assert!(d.ctl().vm("ghost").is_none());
    for e in ["disconnected", "unreachable"] {
        assert!(events_of(&d, "ghost", e).is_empty(), "{e}: {}", d.log.text());
    }
    // A new QEMU on that path: managed again.
    std::fs::remove_file(dir.path().join("ghost.qmp")).unwrap();
    let back = guest(700);
    plug(dir.path(), "ghost", &back.fakes);
    wait_for(Duration::from_secs(10), "ghost's new QEMU managed", || back.fakes.last_request() == Some(expected_target(700)));
}

#[test]
fn the_first_matching_policy_applies_to_discovered_vms() {
    let dir = TempDir::new().unwrap();
    let rest = format!(
        "[discovery]\nsocket_dir = {:?}\n[[match]]\nname = 'db-*'\n[match.policy]\nbuffer_mib = 512\n[[match]]\nname = 'db-*'\n[match.policy]\nbuffer_mib = 8\n",
        dir.path()
    );
    let d = Daemon::start_config(config(&config_text(200, &rest)));
    let (db, web) = (guest(1000), guest(1000));
    plug(dir.path(), "db-1", &db.fakes);
    plug(dir.path(), "web-1", &web.fakes);
    wait_for(Duration::from_secs(10), "db-1 at used + its match's 512 MiB", || db.fakes.last_request() == Some(mib(1000 + 512)));
    wait_for(Duration::from_secs(10), "web-1 at used + the default 64 MiB", || web.fakes.last_request() == Some(expected_target(1000)));
    assert_eq!(d.ctl().vms().len(), 2);
}

#[test]
fn a_configured_vm_wins_over_a_discovered_one_of_its_name() {
    let dir = TempDir::new().unwrap();
    let (mine, other) = (guest(1000), guest(2000));
    plug(dir.path(), "a", &other.fakes);
    let rest = format!("[discovery]\nsocket_dir = {:?}\n[[vm]]\nname = 'a'\nqmp = {:?}\nagent = {:?}\n", dir.path(), mine.q().qmp_path(), mine.p().path());
    let d = Daemon::start_config(config(&config_text(200, &rest)));
    wait_for(Duration::from_secs(10), "the [[vm]] managed", || mine.fakes.last_request() == Some(expected_target(1000)));
    d.wait_samples("a", 5, Duration::from_secs(10));
    assert_eq!(other.q().connections(), 0, "the discovered socket of the same name is left alone");
    assert_eq!(d.ctl().vms().len(), 1);
}

#[test]
fn a_reload_adds_changes_and_removes_vms() {
    let d = Daemon::start_config(config(&config_text(200, "")));
    assert!(d.ctl().vms().is_empty());
    let g = guest(1000);
    let vm = |extra: &str| format!("[[vm]]\nname = 'a'\nqmp = {:?}\nagent = {:?}\n{extra}", g.q().qmp_path(), g.p().path());
    // Added: started at once.
    let changes = d.ctl().reconfigure(&config(&config_text(200, &vm(""))));
    assert_eq!(changes, ["vm \"a\" added"]);
    assert_eq!(d.status("a").origin, "config");
    wait_for(Duration::from_secs(10), "a at its estimate", || g.fakes.last_request() == Some(expected_target(1000)));
    // Its policy changed: applied from the next sample, the VM kept.
    let connections = g.q().connections();
    let changes = d.ctl().reconfigure(&config(&config_text(200, &vm("[vm.policy]\nbuffer_mib = 256\n"))));
    assert_eq!(changes, ["vm \"a\" policy"]);
    wait_for(Duration::from_secs(10), "a at used + 256 MiB", || g.fakes.last_request() == Some(mib(1000 + 256)));
    assert_eq!(g.q().connections(), connections, "the same session");
    // The same file again: nothing to do.
    assert!(d.ctl().reconfigure(&config(&config_text(200, &vm("[vm.policy]\nbuffer_mib = 256\n")))).is_empty());
    // Removed: stopped.
    let changes = d.ctl().reconfigure(&config(&config_text(200, "")));
    assert_eq!(changes, ["vm \"a\" removed"]);
    assert!(d.ctl().vm("a").is_none());
    wait_for(Duration::from_secs(5), "a's sockets closed", || !g.q().is_negotiated() && !g.p().is_connected());
    let removed = events_of(&d, "a", "vm_removed");
    assert!(removed.len() == 1 && removed[0].contains("removed from the configuration"), "{removed:?}");
}

#[test]
fn a_reload_turns_discovery_on() {
    let dir = TempDir::new().unwrap();
    let g = guest(1200);
    plug(dir.path(), "found", &g.fakes);
    let d = Daemon::start_config(config(&config_text(200, "")));
    let changes = d.ctl().reconfigure(&config(&config_text(200, &format!("[discovery]\nsocket_dir = {:?}\n", dir.path()))));
    assert_eq!(changes, ["vm \"found\" added"]);
    wait_for(Duration::from_secs(10), "found at its estimate", || g.fakes.last_request() == Some(expected_target(1200)));
}
