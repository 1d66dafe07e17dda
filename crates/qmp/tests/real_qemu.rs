//! Integration test against a real `qemu-system-x86_64` (TCG, paused with
//! `-S`, so no guest kernel is needed). Skipped when QEMU is not on PATH.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use autoballoon_qmp::{GuestStats, MigrationStatus, Qmp, QmpError, BALLOON_DEVICE_PATH};
use common::TempDir;
use serde_json::json;

const QEMU: &str = "qemu-system-x86_64";
const MIB: u64 = 1 << 20;

fn find_on_path(exe: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(exe))
            .find(|p| p.is_file())
    })
}

/// Kills QEMU if the test fails before it exits on its own.
struct QemuGuard {
    child: Child,
}

impl QemuGuard {
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for QemuGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until QEMU has created its socket, failing early if QEMU exits.
fn wait_for_socket(qemu: &mut QemuGuard, sock: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !sock.exists() {
        if let Some(status) = qemu.child.try_wait().expect("try_wait") {
            let mut stderr = String::new();
            if let Some(mut e) = qemu.child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut stderr);
            }
            panic!("QEMU exited early with {status}: {stderr}");
        }
        assert!(
            Instant::now() < deadline,
            "QMP socket {} did not appear within {timeout:?}",
            sock.display()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// The system's QEMU (7.2 on Debian 12), or `$AUTOBALLOON_QEMU` as for the test bed
/// (`autoballoon_testbed::qemu_binary`, which this crate cannot depend on).
#[test]
fn real_qemu_prelaunch_session() {
    let qemu = match std::env::var_os("AUTOBALLOON_QEMU").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => match find_on_path(QEMU) {
            Some(p) => p,
            None => {
                eprintln!("skipping real_qemu_prelaunch_session: {QEMU} is not on PATH");
                return;
            }
        },
    };
    prelaunch_session(&qemu);
}

/// The same session on QEMU 10 where `scripts/install-qemu10.sh` installed it (or
/// `$AUTOBALLOON_QEMU10`); skipped otherwise.
#[test]
fn real_qemu10_prelaunch_session() {
    let qemu = match std::env::var_os("AUTOBALLOON_QEMU10").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let cache = std::env::var_os("AUTOBALLOON_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/autoballoon"))
                });
            match cache.map(|c| c.join("qemu/qemu10/bin/qemu-system-x86_64")) {
                Some(p) if p.exists() => p,
                _ => {
                    eprintln!("skipping real_qemu10_prelaunch_session: QEMU 10 is not installed (make qemu10)");
                    return;
                }
            }
        }
    };
    let v = prelaunch_session(&qemu);
    assert_eq!(v.0, 10, "{} is not QEMU 10", qemu.display());
}

/// Returns the version triple QEMU greeted with.
fn prelaunch_session(qemu_bin: &Path) -> (u32, u32, u32) {
    let dir = TempDir::new();
    let sock = dir.path().join("qmp.sock");
    let child = Command::new(qemu_bin)
        .args([
            "-accel",
            "tcg",
            "-machine",
            "pc",
            "-m",
            "256M",
            "-nodefaults",
        ])
        .args(["-display", "none", "-S", "-qmp"])
        .arg(format!("unix:{},server=on,wait=off", sock.display()))
        .args(["-device", "virtio-balloon-pci,id=balloon0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn qemu");
    let mut qemu = QemuGuard { child };
    wait_for_socket(&mut qemu, &sock, Duration::from_secs(30));

    // The socket file appears at bind(), a moment before QEMU listen()s on
    // it, so the first connect may be refused: retry with back-off.
    let qmp =
        Qmp::connect_with_retry(&sock, Instant::now() + Duration::from_secs(30)).expect("connect");
    let v = qmp.version();
    assert!(v.major >= 7, "QEMU {v}");

    assert_eq!(qmp.query_status().unwrap(), "prelaunch");
    assert_eq!(qmp.query_balloon().unwrap(), 256 * MIB);
    assert_eq!(qmp.query_memory_size_bytes().unwrap(), 256 * MIB);
    // Accepted even though no guest driver will act on it while paused.
    qmp.set_balloon_guest_size(128 * MIB).unwrap();
    assert_eq!(qmp.query_balloon().unwrap(), 256 * MIB);
    assert!(matches!(
        qmp.set_balloon_guest_size(0),
        Err(QmpError::CommandFailed { .. })
    ));

    qmp.set_stats_polling_interval(BALLOON_DEVICE_PATH, 2)
        .unwrap();
    assert_eq!(
        qmp.qom_get(BALLOON_DEVICE_PATH, "guest-stats-polling-interval")
            .unwrap(),
        json!(2)
    );
    // No guest driver has reported anything yet.
    assert_eq!(
        qmp.guest_stats(BALLOON_DEVICE_PATH).unwrap(),
        GuestStats::default()
    );

    qmp.enable_migration_events().unwrap();
    let caps = qmp.execute("query-migrate-capabilities", None).unwrap();
    assert!(
        caps.as_array()
            .unwrap()
            .contains(&json!({"capability": "events", "state": true})),
        "{caps}"
    );
    qmp.migrate_set_max_bandwidth(1 << 30).unwrap();
    let params = qmp.execute("query-migrate-parameters", None).unwrap();
    assert_eq!(params["max-bandwidth"], json!(1u64 << 30));
    assert_eq!(qmp.query_migrate().unwrap().status, MigrationStatus::None);

    match qmp.execute("no-such-command", None) {
        Err(QmpError::CommandFailed { class, .. }) => assert_eq!(class, "CommandNotFound"),
        other => panic!("expected CommandFailed, got {other:?}"),
    }

    qmp.quit().unwrap();
    let shutdown = qmp
        .poll_events()
        .into_iter()
        .find(|e| e.name == "SHUTDOWN")
        .expect("SHUTDOWN event before the quit reply");
    assert_eq!(shutdown.data["reason"], "host-qmp-quit");
    assert!(shutdown.timestamp.is_some());

    let status = qemu
        .wait_exit(Duration::from_secs(30))
        .expect("QEMU exits after quit");
    assert!(status.success(), "QEMU exit status {status}");
    assert!(matches!(
        qmp.next_event(Duration::from_secs(10)),
        Err(QmpError::Disconnected)
    ));
    qmp.version().triple()
}
