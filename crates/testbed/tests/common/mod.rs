//! Shared set-up for the integration tests: real QEMU guests (TCG) and a real controller.
#![allow(dead_code)]

pub mod fleet;
pub mod kernel;

use autoballoon::config::{Config, ControllerConfig, LogFormat, PolicyConfig, VmConfig};
use autoballoon::controller::{Controller, VmHandle};
use autoballoon::log::Logger;
use autoballoon_testbed::{GuestImage, Qemu, VmSpec};
use autoballoon_core::Kib;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fresh folder for one VM's sockets and logs (other VMs' folders are left alone).
pub fn vm_dir(test: &str, vm: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(test).join(vm);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn image() -> GuestImage {
    GuestImage::from_env().unwrap_or_else(|e| panic!("{e}"))
}

/// Boots a guest with the agent and deflate-on-oom, and waits for its shell.
pub fn boot(test: &str, name: &str, mib: u64) -> Qemu {
    boot_spec(test, VmSpec::new(name, Kib::from_mib_saturating(mib)))
}

/// Boots the guest `spec` describes (in `test`'s folder for its name) and waits for its shell.
pub fn boot_spec(test: &str, spec: VmSpec) -> Qemu {
    let dir = vm_dir(test, &spec.name);
    let vm = Qemu::start(&image(), spec, &dir).unwrap_or_else(|e| panic!("{e}"));
    vm.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    vm
}

pub fn vm_config(name: &str, q: &Qemu) -> VmConfig {
    VmConfig { agent: Some(q.agent.clone()), ..VmConfig::new(name, q.qmp.clone()) }
}

/// The default configuration with the given VMs, validated.
fn config_of(vms: Vec<VmConfig>) -> Config {
    let config = Config { controller: ControllerConfig::default(), defaults: PolicyConfig::default(), vms, ..Default::default() };
    config.validate().unwrap();
    config
}

/// A controller managing the given VMs, logging to stderr (shown on failure).
pub fn controller(vms: Vec<VmConfig>) -> Controller {
    Controller::start(&config_of(vms), Logger::new(LogFormat::Text, false))
}

/// Starts every guest at once, then waits for each shell (two TCG boots overlap).
pub fn boot_all(test: &str, guests: &[(&str, u64)]) -> Vec<Qemu> {
    let started: Vec<Qemu> = guests.iter().map(|(n, mib)| Qemu::start(&image(), VmSpec::new(n, Kib::from_mib_saturating(*mib)), &vm_dir(test, n)).unwrap_or_else(|e| panic!("{e}"))).collect();
    for q in &started {
        q.wait_booted(Duration::from_secs(180)).unwrap_or_else(|e| panic!("{e}"));
    }
    started
}

/// A controller as [`controller`] that logs JSON lines to `log`, for the test to read.
pub fn controller_logging(vms: Vec<VmConfig>, log: &Path) -> Controller {
    Controller::start(&config_of(vms), Logger::new(LogFormat::Json, false).to_file(log).unwrap())
}

/// The JSON lines of a controller's log (see [`controller_logging`]) whose `event` is `event`.
pub fn log_events(log: &Path, event: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log).unwrap_or_default().lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|v| v["event"] == event).collect()
}

/// What a failed wait on a VM leaves to read: its status, the controller log's last lines
/// and the guest agent's last log lines (if its console answers within a few seconds).
pub fn explain(vm: &VmHandle, log: &Path, q: Option<&Qemu>) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(15)..].join("\n");
    let agent = q.map_or_else(String::new, |q| match q.console.run("tail -n 15 /run/autoballoon-guest.log", Duration::from_secs(10)) {
        Ok(o) => o.text,
        Err(e) => format!("(console: {e})"),
    });
    let run_state = q.map_or_else(String::new, |q| match autoballoon_qmp::Qmp::connect_with_retry(&q.qmp_ctl, std::time::Instant::now() + Duration::from_secs(5)) {
        Ok(c) => format!("{:?}", c.query_status()),
        Err(e) => format!("(QMP: {e})"),
    });
    format!("\nstatus: {:?}\nQEMU run state: {run_state}\ncontroller log:\n{tail}\nguest agent log:\n{agent}", vm.snapshot())
}

/// Whether the VM's worker takes `n` more samples within `timeout` and is running then.
pub fn keeps_ticking(vm: &VmHandle, n: u64, timeout: Duration) -> bool {
    let from = vm.snapshot().samples;
    autoballoon_testbed::wait_for(timeout, Duration::from_millis(200), || vm.snapshot().samples >= from + n).is_some() && vm.snapshot().state == autoballoon::controller::VmState::Running
}

/// The VM's size as the controller last sampled it; unknown reads as huge, so a
/// "shrunk below" condition never holds before the first sample.
pub fn size(vm: &VmHandle) -> Kib {
    vm.snapshot().known_size().unwrap_or(Kib(u64::MAX))
}

/// [`qemu10`], or `None` after printing why `test` is skipped.
/// The QEMU for a test whose migration must leave a healthy destination: QEMU 10 where it
/// is installed (`make test` installs it), else the default, said so. QEMU before 9.0
/// under TCG loses guest writes when a migration ends while the guest is busy (docs/
/// migration.md, "Why destinations crashed"), and a destination so damaged answers neither
/// through its agent nor through its balloon driver.
pub fn qemu_for_migration(test: &str) -> PathBuf {
    qemu10().unwrap_or_else(|why| {
        let q = autoballoon_testbed::qemu_binary();
        eprintln!("{test}: migrating on {} ({why}); before QEMU 9.0, TCG may lose the guest's writes", q.display());
        q
    })
}

pub fn qemu10_or_skip(test: &str) -> Option<PathBuf> {
    qemu10().map_err(|why| eprintln!("SKIPPED {test}: {why}")).ok()
}

/// QEMU 10's binary or wrapper; `Err` (skip) only if it is simply not installed. A set
/// `AUTOBALLOON_QEMU10` that does not run QEMU 10 is a mistake and fails the test.
pub fn qemu10() -> Result<PathBuf, String> {
    let (path, explicit) = match std::env::var_os("AUTOBALLOON_QEMU10").filter(|p| !p.is_empty()) {
        Some(p) => (PathBuf::from(p), true),
        None => {
            let p = cache_dir().ok_or("neither AUTOBALLOON_CACHE nor HOME is set")?.join("qemu/qemu10/bin/qemu-system-x86_64");
            if !p.exists() {
                return Err(format!("QEMU 10 is not installed ({} is missing; run `make qemu10`, or set AUTOBALLOON_QEMU10)", p.display()));
            }
            (p, false)
        }
    };
    let out = std::process::Command::new(&path).arg("--version").output();
    let version = out.as_ref().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    if !version.starts_with("QEMU emulator version 10.") {
        let what = if explicit { "AUTOBALLOON_QEMU10" } else { "the cached install (re-run `make qemu10`)" };
        panic!("{what}: {} does not run QEMU 10: {:?}", path.display(), out.map(|_| version.lines().next().unwrap_or("").to_owned()));
    }
    Ok(path)
}

/// The wrappers of the QEMUs built with the project's balloon patch
/// (`x-populate-on-deflate`): QEMU 10 (`scripts/build-qemu10-populate.sh`,
/// `$AUTOBALLOON_QEMU10_POPULATE` or the wrapper under
/// `${AUTOBALLOON_CACHE:-~/.cache/autoballoon}/qemu/qemu10-populate/`) and the fixed 7.2
/// (`scripts/build-qemu72-fixed.sh`, `$AUTOBALLOON_QEMU72_FIXED` or `.../qemu/qemu72fixed/`).
/// One never built, or cached from before the patch, is left out after printing why `test`
/// skips it; one named by its variable that does not offer the property is a mistake and
/// fails the test.
pub fn populate_qemus(test: &str) -> Vec<PathBuf> {
    qemus_offering(test, "x-populate-on-deflate")
}

/// [`populate_qemus`] for a later patch of the same builds: those whose balloon offers
/// `property` (e.g. `x-zeroed`).
pub fn qemus_offering(test: &str, property: &str) -> Vec<PathBuf> {
    let builds = [
        ("AUTOBALLOON_QEMU10_POPULATE", "qemu/qemu10-populate/bin/qemu-system-x86_64", "make qemu10-populate"),
        ("AUTOBALLOON_QEMU72_FIXED", "qemu/qemu72fixed/bin/qemu-system-x86_64", "scripts/build-qemu72-fixed.sh"),
    ];
    let mut found = Vec::new();
    for (var, cached, build) in builds {
        let explicit = std::env::var_os(var).filter(|p| !p.is_empty()).map(PathBuf::from);
        let path = match explicit.clone().or_else(|| cache_dir().map(|c| c.join(cached))) {
            Some(p) if p.exists() => p,
            p => {
                let p = p.map(|p| p.display().to_string()).unwrap_or_else(|| cached.to_owned());
                eprintln!("SKIPPED {test} on {p}: it is missing (run `{build}`, or set {var})");
                continue;
            }
        };
        let out = std::process::Command::new(&path).args(["-device", "virtio-balloon-pci,help"]).output();
        let text = out.as_ref().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        if !text.contains(property) {
            assert!(explicit.is_none(), "{var}: {} does not offer {property}: {out:?}", path.display());
            eprintln!("SKIPPED {test} on {}: built before {property} (run `{build}` again)", path.display());
            continue;
        }
        found.push(path);
    }
    found
}

/// `${AUTOBALLOON_CACHE:-$HOME/.cache/autoballoon}`, where the scripts cache their builds.
fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("AUTOBALLOON_CACHE").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/autoballoon")))
}
