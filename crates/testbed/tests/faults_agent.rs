//! The guest agent's faults on real QEMU: stopped (SIGSTOP, SIGCONT) and killed (init
//! starts it again) during a live migration, which then completes (on QEMU 10 where
//! installed: [`common::qemu_for_migration`]); stopped for long while
//! the host writes it the notices of a burst of migrations, until its port is full. The
//! controller falls back to guest-stats, takes the agent's samples again once it is back,
//! and keeps controlling the VM throughout.
mod common;

use autoballoon::config::PolicyConfig;
use autoballoon::controller::{VmCommand, VmHandle, VmState};
use autoballoon_core::sample::SampleSource;
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use autoballoon_testbed::{free_port, start_migration, wait_for, wait_migration, wait_vm_settled, Qemu, VmSpec};
use std::time::{Duration, Instant};

fn source_becomes(vm: &VmHandle, s: SampleSource, within: Duration) -> bool {
    wait_for(within, Duration::from_millis(100), || vm.snapshot().source == s).is_some()
}

fn sh(q: &Qemu, cmd: &str) -> String {
    let out = q.console.run(cmd, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert_eq!(out.status, 0, "{cmd}: {}", out.text);
    out.text.trim().to_string()
}

/// Boots a 512 MiB guest on `qemu` under a controller logging to `log`; returns once the
/// agent reports and the guest is shrunk and settled, with its settled size.
fn shrunk(test: &str, name: &str, qemu: &std::path::Path) -> (Qemu, autoballoon::controller::Controller, VmHandle, Kib, std::path::PathBuf) {
    let q = common::boot_spec(test, VmSpec { qemu: qemu.to_path_buf(), ..VmSpec::new(name, Kib::from_mib_saturating(512)) });
    let log = q.qmp.parent().unwrap().join("controller.log");
    let ctl = common::controller_logging(vec![common::vm_config(name, &q)], &log);
    let vm = ctl.vm(name).unwrap();
    assert!(source_becomes(&vm, SampleSource::Agent, Duration::from_secs(30)), "the agent reports: {}", vm.snapshot().source);
    assert!(wait_for(Duration::from_secs(60), Duration::from_millis(200), || common::size(&vm) <= Kib::from_mib_saturating(320)).is_some(), "shrinks: {}", common::size(&vm));
    let settled = wait_vm_settled(&vm, Duration::from_secs(60)).unwrap();
    (q, ctl, vm, settled, log)
}

/// A spike of 200 MiB held 3 s: the controller grows the VM (its own target), then shrinks
/// it back to about where it was once the spike's headroom has faded (the default policy
/// keeps a recent need whole for `spike_hold_s`, these guests having no free page
/// reporting, then fades it over `spike_fade_s` in four steps; within 96 MiB of `settled`
/// takes half the fade or more, so the wait allows all of it and a margin: it ends as soon
/// as the size is there).
fn grows_and_shrinks_back(q: &Qemu, vm: &VmHandle, settled: Kib) {
    let out = q.console.run("spike 1 200 3 0 1", Duration::from_secs(180)).expect("spike finishes");
    assert_eq!(out.status, 0, "{}", out.text);
    let grown = vm.snapshot().target.expect("a target");
    assert!(grown >= settled.saturating_add(Kib::from_mib_saturating(100)), "the controller grew {} from {settled} only to {grown}", vm.name);
    let p = PolicyConfig::default();
    let faded = Duration::from_secs(p.spike_hold_s + p.spike_fade_s + 30);
    assert!(wait_for(faded, Duration::from_millis(200), || common::size(vm) <= settled.saturating_add(Kib::from_mib_saturating(96))).is_some(), "shrinks back to about {settled} within {faded:?}: {}", common::size(vm));
}

fn no_panics(log: &std::path::Path) {
    let p = common::log_events(log, "worker_panicked");
    assert!(p.is_empty(), "a worker panicked: {p:?}");
}

#[test]
fn agent_stopped_and_killed_during_a_migration_that_then_completes() {
    let qemu = common::qemu_for_migration("faults_agent_mig");
    let (mut a, ctl, va, settled, log) = shrunk("faults_agent_mig", "a", &qemu);
    let (dst, _) = Qemu::start_incoming(&common::image(), VmSpec { qemu, ..VmSpec::new("a-dst", Kib::from_mib_saturating(512)) }, &common::vm_dir("faults_agent_mig", "a-dst")).unwrap();
    let qa = Qmp::connect_with_retry(&a.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    let started = start_migration(&qa, &dst, 1 << 20).unwrap();
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(100), || va.snapshot().state == VmState::Migrating).is_some(), "{:?}", va.snapshot().state);

    // Stopped: its reports go stale and the controller samples guest-stats; continued: its
    // samples again.
    sh(&a, "kill -STOP $(pidof autoballoon-guest)");
    assert!(source_becomes(&va, SampleSource::GuestStats, Duration::from_secs(20)), "falls back: {}", va.snapshot().source);
    assert_eq!(va.snapshot().state, VmState::Migrating);
    let n = va.snapshot().samples;
    assert!(wait_for(Duration::from_secs(10), Duration::from_millis(100), || va.snapshot().samples >= n + 3).is_some(), "samples without the agent");
    sh(&a, "kill -CONT $(pidof autoballoon-guest)");
    assert!(source_becomes(&va, SampleSource::Agent, Duration::from_secs(20)), "the agent's samples again: {}", va.snapshot().source);

    // Killed: init starts a new agent, whose samples the controller takes. Its wrapper
    // (which init respawns) is held stopped meanwhile, or the new agent would report
    // within the 3 s after which a report is stale and the fallback would not show.
    let pid = sh(&a, "pidof autoballoon-guest");
    let wrapper = sh(&a, &format!("awk '/^PPid/ {{print $2}}' /proc/{pid}/status"));
    sh(&a, &format!("kill -STOP {wrapper}; kill -9 {pid}"));
    assert!(source_becomes(&va, SampleSource::GuestStats, Duration::from_secs(20)), "falls back: {}", va.snapshot().source);
    sh(&a, &format!("kill -CONT {wrapper}"));
    assert!(source_becomes(&va, SampleSource::Agent, Duration::from_secs(30)), "the new agent's samples: {}", va.snapshot().source);
    let again = sh(&a, "pidof autoballoon-guest");
    assert!(!again.is_empty() && again != pid, "a new agent: {again} (was {pid})");
    assert_eq!(va.snapshot().state, VmState::Migrating);
    assert!(qa.query_migrate().unwrap().status.is_active(), "the migration still runs");

    // Let it go fast: it completes, and the controller leaves the source for the destination.
    qa.migrate_set_max_bandwidth(1 << 30).unwrap();
    let m = wait_migration(&qa, &dst, started, Duration::from_secs(240)).expect("the migration completes");
    eprintln!("migrated: {} bytes in {:.1} s", m.bytes_sent(), m.seconds());
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(100), || va.snapshot().state == VmState::MigratedAway).is_some(), "{:?}", va.snapshot().state);
    drop(qa);
    a.kill();
    assert!(va.command(VmCommand::Retarget { qmp: dst.qmp.clone(), agent: Some(dst.agent.clone()) }));
    assert!(wait_for(Duration::from_secs(30), Duration::from_millis(100), || va.snapshot().state == VmState::Running).is_some(), "on the destination: {:?}", va.snapshot().state);
    assert!(source_becomes(&va, SampleSource::Agent, Duration::from_secs(30)), "the agent reports from the destination: {}{}", va.snapshot().source, common::explain(&va, &log, Some(&dst)));
    // A destination port whose output QEMU held would have needed its link closed once.
    eprintln!("silent agent links closed: {}", common::log_events(&log, "agent_silent").len());
    // Nothing frozen on the destination.
    grows_and_shrinks_back(&dst, &va, settled);
    no_panics(&log);
    ctl.stop();
}

#[test]
fn an_agent_that_stops_reading_while_notices_fill_its_port_does_not_stall_the_controller() {
    let (q, ctl, vm, settled, log) = shrunk("faults_agent_stopped", "s", &autoballoon_testbed::qemu_binary());
    let qmp = Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    sh(&q, "kill -STOP $(pidof autoballoon-guest)");
    assert!(source_becomes(&vm, SampleSource::GuestStats, Duration::from_secs(20)), "falls back: {}", vm.snapshot().source);
    let from = vm.history().last().map_or(0.0, |p| p.t);

    // A burst of migrations that fail at once (nobody listens): the controller writes each
    // a started and an ended notice the stopped agent does not read.
    const MIGRATIONS: usize = 300;
    let burst = Instant::now();
    for i in 0..MIGRATIONS {
        qmp.migrate(&format!("tcp:127.0.0.1:{}", free_port().unwrap())).unwrap();
        assert!(wait_for(Duration::from_secs(10), Duration::from_millis(5), || qmp.query_migrate().unwrap().status.as_str() == "failed").is_some(), "migration {i} fails");
    }
    let n = vm.snapshot().samples;
    assert!(wait_for(Duration::from_secs(10), Duration::from_millis(50), || vm.snapshot().samples >= n + 2).is_some(), "the controller samples after the burst");
    eprintln!("{MIGRATIONS} migrations in {:.1} s", burst.elapsed().as_secs_f64());
    assert_eq!(vm.snapshot().state, VmState::Running);
    assert!(vm.snapshot().last_migration.is_some_and(|r| r.status == "failed"), "{:?}", vm.snapshot().last_migration);
    // Still controlled without its agent: a spike grows the guest, which is shrunk back.
    grows_and_shrinks_back(&q, &vm, settled);
    // No sample was late while the agent slept (ticks every second).
    let times: Vec<f64> = vm.history().iter().map(|p| p.t).filter(|t| *t >= from).collect();
    let gap = times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    eprintln!("{} samples while the agent was stopped, longest gap {gap:.2} s", times.len());
    assert!(times.len() >= 8 && gap <= 2.5, "{} samples, longest gap {gap:.1} s", times.len());
    // The guest's buffers filled up: later notices were dropped, not waited on, and said
    // in a few log lines only.
    let link = vm.snapshot().agent;
    eprintln!("notices dropped: {}", link.notices_dropped);
    assert!(link.notices_dropped > 0, "the agent port never filled up: {link:?}");
    assert!(common::log_events(&log, "notice_dropped").len() <= 6, "{:?}", common::log_events(&log, "notice_dropped"));

    // Continued, the agent reads the notices that got through and reports again.
    sh(&q, "kill -CONT $(pidof autoballoon-guest)");
    assert!(source_becomes(&vm, SampleSource::Agent, Duration::from_secs(20)), "the agent's samples again: {}", vm.snapshot().source);
    // The count is the output's last number (a kernel line may share the console).
    let ended = || sh(&q, "grep -c 'migration ended (failed)' /run/autoballoon-guest.log || true").lines().rev().find_map(|l| l.trim().parse::<usize>().ok()).unwrap_or(0);
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(500), || ended() >= 50).is_some(), "the agent logged {} ends of {MIGRATIONS} migrations", ended());
    eprintln!("the agent read {} ends of {MIGRATIONS} migrations", ended());
    // And the last notice, dropped while the port was full, is sent again: the agent does
    // not think a migration still runs.
    let last = || sh(&q, "grep 'migration' /run/autoballoon-guest.log | tail -1");
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(500), || last().contains("migration ended (failed)")).is_some(), "the agent's last notice: {}", last());
    no_panics(&log);
    ctl.stop();
}
