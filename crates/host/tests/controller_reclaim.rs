//! `reclaim = "host-need"` on a fake host: a guest keeps its memory while the host's use
//! is below its target, and gives the excess back once the host's use passes it.
mod common;

use autoballoon::config::{Config, ControllerConfig, LogFormat, ReclaimMode};
use autoballoon::controller::Controller;
use autoballoon_core::units::Kib;
use autoballoon_fakes::TempDir;
use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const T: Duration = Duration::from_secs(15);

/// A host of `TOTAL_MIB` whose /proc/meminfo (in a directory of its own) says it uses
/// `others` MiB besides the guest's present size (QEMU's `actual`, as if all of it were
/// resident), rewritten every 20 ms: the balloon's shrink lowers the host's use.
struct FakeHost {
    dir: TempDir,
    others_mib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const TOTAL_MIB: u64 = 20000;

impl FakeHost {
    fn start(guest: Arc<Fakes>, others_mib: u64) -> FakeHost {
        let dir = TempDir::new().unwrap();
        let others = Arc::new(AtomicU64::new(others_mib));
        let stop = Arc::new(AtomicBool::new(false));
        let write = {
            let (path, others) = (dir.path().to_path_buf(), others.clone());
            move |guest: &Fakes| {
                let used = mib(others.load(Ordering::SeqCst)).saturating_add(guest.q().actual());
                let available = mib(TOTAL_MIB).saturating_sub(used);
                let text = format!("MemTotal: {} kB\nMemFree: {} kB\nMemAvailable: {} kB\n", mib(TOTAL_MIB).0, available.0, available.0);
                // Whole files only: the decider never reads half of one.
                std::fs::write(path.join("meminfo.new"), text).unwrap();
                std::fs::rename(path.join("meminfo.new"), path.join("meminfo")).unwrap();
            }
        };
        write(&guest);
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    write(&guest);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        FakeHost { dir, others_mib: others, stop, thread: Some(thread) }
    }

    fn set_others(&self, mib: u64) {
        self.others_mib.store(mib, Ordering::SeqCst);
    }
}

impl Drop for FakeHost {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn host_need_keeps_a_guests_memory_below_the_target_and_reclaims_above_it() {
    // A 4 GiB guest using 1000 MiB: lean would shrink it to 1064 MiB at once.
    let g = Guest::start(Fakes::start(), 1000);
    // 20000 MiB host, target 80 % = 16000 MiB; others use 4000 and the guest 4096: 40 %.
    let host = FakeHost::start(g.fakes.clone(), 4000);
    let controller = ControllerConfig { interval_ms: 200, reclaim: ReclaimMode::HostNeed, log_format: LogFormat::Json, ..Default::default() };
    let config = Config { controller, vms: vec![g.fakes.vm("a", Some(quick_policy()))], ..Default::default() };
    config.validate().unwrap();
    let (log, logger) = LogFile::new();
    let d = Daemon { ctl: Some(Controller::start_with_proc_dir(&config, logger, host.dir.path().to_path_buf())), log };
    g.fakes.wait_agent_connected();
    d.wait_samples("a", 10, T);
    assert_eq!(g.fakes.requests(), Vec::<Kib>::new(), "below the target: the guest keeps its 4096 MiB");
    assert_eq!(g.q().actual(), configured());
    let keep = d.log.lines().into_iter().find(|l| l["event"] == "reclaim").expect("a reclaim line");
    assert_eq!(keep["reclaiming"], false, "{keep}");
    assert!(keep["msg"].as_str().unwrap().contains("not above the target 80 %: guests keep their memory"), "{keep}");
    let h = d.ctl().host_status();
    assert_eq!((h.reclaim_mode, h.reclaim_target_pct, h.reclaiming, h.reclaim_excess), ("host-need", Some(80), Some(false), Some(Kib::ZERO)), "the status and metrics say so");

    // Others now use 13000 MiB: 17096 in all, 1096 above the target. The guest gives that
    // much (in two steps: the 1024 MiB shrink step), down to 3000 MiB, not to its estimate.
    host.set_others(13000);
    wait_for(T, "a shrink to about 3000 MiB", || g.fakes.last_request().is_some_and(|r| r.abs_diff(mib(3000)) <= mib(16)));
    d.wait_samples("a", 10, T);
    let lowest = g.fakes.requests().into_iter().min().unwrap();
    assert!(lowest >= mib(3000 - 16), "never toward the estimate (1064 MiB) while the host needs only 1096: {:?}", g.fakes.requests());
    assert!(g.fakes.last_request().unwrap().abs_diff(mib(3000)) <= mib(16), "settled where the host is at its target: {:?}", g.fakes.requests());
    let lines = d.log.lines();
    assert!(lines.iter().any(|l| l["event"] == "reclaim" && l["reclaiming"] == true), "{}", d.log.text());
    let shrink = lines.iter().find(|l| l["event"] == "set_target").unwrap();
    assert!(shrink["msg"].as_str().unwrap().contains("reclaim host-need: host use"), "{shrink}");
    assert_requests_in_bounds(&g.q());
    // Settled at the target: nothing above it is left to ask for.
    wait_for(T, "the excess reaches 0 in the status", || d.ctl().host_status().reclaim_excess.is_some_and(|e| e <= mib(16)));
}
