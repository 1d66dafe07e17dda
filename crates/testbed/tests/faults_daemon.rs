//! The controller's own faults on real QEMU: restarted while its VM runs, it goes on from
//! the balloon's present size; the daemon writing its log to a full filesystem keeps
//! controlling its VM.
mod common;

use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use autoballoon_testbed::daemon::Daemon;
use autoballoon_testbed::{wait_for, wait_settled, wait_vm_settled};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[test]
fn a_restarted_controller_starts_from_the_present_balloon_size() {
    let q = common::boot("faults_restart", "r", 768);
    let dir = q.qmp.parent().unwrap().to_path_buf();
    let qmp = Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();

    // The first controller shrinks the idle guest and stops.
    let first = common::controller_logging(vec![common::vm_config("r", &q)], &dir.join("first.log"));
    let vm = first.vm("r").unwrap();
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(&vm) <= Kib::from_mib_saturating(400)).is_some(), "shrinks: {}", common::size(&vm));
    wait_vm_settled(&vm, Duration::from_secs(60)).unwrap();
    first.stop();
    let left = wait_settled(Duration::from_secs(30), || Kib(qmp.query_balloon().unwrap() >> 10)).expect("the balloon settles");
    // While no controller runs, the balloon is moved to X, 100 MiB above where the first one
    // left it: the second one must start from X (and shrink from there), not from 768 MiB.
    let x = left.saturating_add(Kib::from_mib_saturating(100));
    autoballoon_testbed::guest::balloon_to(&qmp, x, Duration::from_secs(30)).unwrap().expect("the balloon at X");
    let x = wait_settled(Duration::from_secs(30), || Kib(qmp.query_balloon().unwrap() >> 10)).expect("the balloon settles");
    eprintln!("the first controller left the guest at {left}; X = {x}");

    // A second controller, its QEMU's balloon watched every 20 ms from before it starts.
    let log = dir.join("second.log");
    let (second, watched) = autoballoon_testbed::guest::watch_balloon(&qmp, Duration::from_millis(20), || {
        let c = common::controller_logging(vec![common::vm_config("r", &q)], &log);
        let vm = c.vm("r").unwrap();
        assert!(wait_for(Duration::from_secs(30), Duration::from_millis(100), || vm.snapshot().samples >= 8 && vm.snapshot().actions >= 1).is_some(), "the second controller samples and acts: {:?}", vm.snapshot());
        c
    });
    let vm = second.vm("r").unwrap();
    let first_size = vm.history().first().map(|p| p.size).expect("a sample");
    assert!(first_size.abs_diff(x) <= Kib::from_mib_saturating(1), "its first sample {first_size}, the balloon at {x}");
    let highest = watched.iter().map(|(_, b)| b / MIB).max().unwrap_or(0);
    assert!(highest <= x.0 / 1024 + 8, "the balloon went up to {highest} MiB from {x} after the restart: {:?}", watched.iter().map(|(_, b)| b / MIB).collect::<Vec<_>>());
    // Its first action is measured from X and shrinks from there.
    let sets = common::log_events(&log, "set_target");
    let s = sets.first().expect("a set_target line");
    let (previous, target) = (Kib(s["previous_kib"].as_u64().unwrap()), Kib(s["target_kib"].as_u64().unwrap()));
    assert!(previous.abs_diff(x) <= Kib::from_mib_saturating(8) && target < x, "its first action: {s}");
    assert!(vm.snapshot().target.is_some_and(|t| t < x), "target {:?}", vm.snapshot().target);
    second.stop();
}

/// A 1 MiB tmpfs mounted at `path` and filled to the last page; unmounted on drop.
struct FullDisk(PathBuf);

impl FullDisk {
    fn mount(path: &Path) -> FullDisk {
        std::fs::create_dir_all(path).unwrap();
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "autoballoon-full"]).arg(path).status().unwrap();
        assert!(ok.success(), "mount a tmpfs at {} (the test needs root)", path.display());
        let disk = FullDisk(path.to_path_buf());
        let fill = Command::new("dd").args(["if=/dev/zero", "bs=4096"]).arg(format!("of={}", path.join("filler").display())).output().unwrap();
        assert!(String::from_utf8_lossy(&fill.stderr).contains("No space left"), "dd: {}", String::from_utf8_lossy(&fill.stderr));
        disk
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn the_daemon_logging_to_a_full_disk_keeps_controlling() {
    let q = common::boot("faults_full_disk", "f", 768);
    let dir = common::vm_dir("faults_full_disk", "daemon");
    let disk = FullDisk::mount(&dir.join("full"));
    let log = disk.0.join("daemon.log");
    let config = format!("[[vm]]\nname = \"f\"\nqmp = {:?}\nagent = {:?}\n", q.qmp.display().to_string(), q.agent.display().to_string());
    let mut d = Daemon::start_with_log(&dir, &config, &log).unwrap_or_else(|e| panic!("{e}"));

    // Every line the daemon writes fails (ENOSPC), from its first; it still shrinks the guest.
    let qmp = Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || qmp.query_balloon().unwrap() <= 400 * MIB).is_some(), "the daemon shrinks the guest: {} MiB; status {:?}", qmp.query_balloon().unwrap() / MIB, d.vm("f"));
    let v = d.vm("f").unwrap();
    assert!(v["actions"].as_u64().unwrap() >= 1 && v["state"] == "running", "{v}");
    // And goes on: samples keep coming, the process lives, nothing reached the log.
    let samples = v["samples"].as_u64().unwrap();
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(200), || d.vm("f").is_some_and(|v| v["samples"].as_u64().unwrap() >= samples + 5)).is_some(), "the daemon still samples: {:?}", d.vm("f"));
    assert!(d.alive(), "the daemon exited");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 0, "the full disk took a line");
    d.stop();
}
