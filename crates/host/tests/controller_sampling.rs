//! Where a VM's view comes from (agent, guest-stats, none), when an agent report goes
//! stale, and that the target QEMU receives is the estimator's: used + 64 MiB, never
//! below 128 MiB, never above the VM.
mod common;

use autoballoon::controller::VmState;
use autoballoon_core::sample::SampleSource;
use autoballoon_core::units::Kib;
use autoballoon_fakes::FakeGuestStats;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

#[test]
fn the_agents_balloon_count_not_qmp_actual_gives_the_size() {
    let f = Fakes::start();
    let d = Daemon::start(vec![f.vm("a", None)], 200);
    f.wait_agent_connected();
    // The guest says: 1 GiB ballooned, so 3 GiB present, 2 GiB of it available: 1 GiB used.
    // QEMU's actual says 4 GiB (and later whatever was asked): it must not be the size.
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let (f, stop) = (f.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let _ = f.p().send_sample(mib(3072), mib(2048), Kib(0), mib(1024).to_pages_floor());
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    wait_for(T, "source agent, used 1 GiB", || {
        let s = d.status("a");
        s.source == SampleSource::Agent && s.used == Some(mib(1024))
    });
    wait_for(T, "the estimator's target 1088 MiB at QEMU", || f.last_request() == Some(expected_target(1024)));
    assert_eq!(f.q().actual(), mib(1088));
    // QEMU has the request before the controller, which records it once QEMU answered.
    wait_for(T, "the controller's target 1088 MiB", || d.status("a").target == Some(mib(1088)));
    let s = d.status("a");
    assert_eq!(s.state, VmState::Running);
    assert!(s.actions >= 1 && s.agent.rejected == 0 && s.agent.garbage == 0, "{s:?}");
    assert_requests_in_bounds(&f.q());
    stop.store(true, Ordering::SeqCst);
    feeder.join().unwrap();
}

#[test]
fn agent_then_guest_stats_after_agent_stale_s_then_nothing() {
    let g = Guest::start(Fakes::start(), 1000);
    g.set_stats(true);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);

    // 1. The agent reports: its numbers drive the target.
    wait_for(T, "target 1064 MiB from the agent", || g.fakes.last_request() == Some(expected_target(1000)));
    assert_eq!(d.status("a").source, SampleSource::Agent);
    wait_for(T, "used shown as 1000 MiB", || d.status("a").used == Some(mib(1000)));

    // 2. The agent falls silent; guest-stats (which say 1500 MiB used) take over only once
    //    its last report is older than agent_stale_s (3 s).
    g.set_used(1500);
    let silent = Instant::now(); // the last report was sent at most 250 ms before this
    g.set_agent(false);
    while silent.elapsed() < Duration::from_secs(2) {
        let s = d.status("a");
        assert_eq!(s.source, SampleSource::Agent, "the agent's report is younger than 3 s ({:?})", silent.elapsed());
        assert_eq!(g.fakes.last_request(), Some(expected_target(1000)));
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for(T, "source guest-stats", || d.status("a").source == SampleSource::GuestStats);
    assert!(silent.elapsed() >= Duration::from_millis(2700), "guest-stats used after {:?}, before the agent was stale", silent.elapsed());
    wait_for(T, "target 1564 MiB from guest-stats", || g.fakes.last_request() == Some(expected_target(1500)));
    assert_eq!(d.status("a").used, Some(mib(1500)));

    // 3. Neither: no view, no action, whatever the guest does.
    g.set_stats(false);
    wait_for(T, "source none", || d.status("a").source == SampleSource::None);
    g.set_used(40);
    let n = g.fakes.requests().len();
    let actions = d.status("a").actions;
    d.wait_samples("a", 10, T);
    assert_eq!(g.fakes.requests().len(), n, "no request without a view: {:?}", g.fakes.requests());
    assert_eq!(d.status("a").actions, actions);
    assert_eq!(d.status("a").used, None);

    // 4. The agent is back: control resumes, and the floor holds (40 + 64 < 128).
    g.set_agent(true);
    wait_for(T, "target at the 128 MiB floor", || g.fakes.last_request() == Some(mib(MIN_MIB)));
    assert_eq!(d.status("a").source, SampleSource::Agent);
    assert_requests_in_bounds(&g.q());
}

#[test]
fn growth_follows_the_agent_at_once_and_never_exceeds_the_vm() {
    let g = Guest::start(Fakes::start(), 500);
    let d = Daemon::start(vec![g.fakes.vm("a", None)], 200);
    wait_for(T, "target 564 MiB", || g.fakes.last_request() == Some(expected_target(500)));
    // A spike: the guest now uses 2 GiB; growth is not rate-limited nor held.
    let t = Instant::now();
    g.set_used(2048);
    wait_for(T, "target 2112 MiB", || g.fakes.last_request() == Some(expected_target(2048)));
    assert!(t.elapsed() < Duration::from_secs(3), "growth took {:?}", t.elapsed());
    // More than the VM has: the target stops at the configured size.
    g.set_used(CONFIGURED_MIB);
    wait_for(T, "target at the configured size", || g.fakes.last_request() == Some(configured()));
    assert_requests_in_bounds(&g.q());
    // QEMU has the request before the controller counts it (CI saw grows 1 here once).
    wait_for(T, "both grows counted", || d.status("a").metrics.grows >= 2);
    // Each grow was timed from its sample to QEMU's answer (recorded once QEMU answered),
    // and to the balloon there.
    wait_for(T, "both grows timed", || d.status("a").grow_times.reaction.count() >= 2);
    let times = &d.status("a").grow_times;
    assert!(times.reaction.sum() < Duration::from_secs(3) * times.reaction.count() as u32, "{times:?}");
    wait_for(T, "a grow seen settled", || d.status("a").grow_times.settle.count() >= 1);
}

#[test]
fn guest_stats_alone_drive_a_vm_without_agent() {
    // No agent socket configured at all: guest-stats from the start.
    let g = Guest::start(Fakes::start(), 700);
    g.set_agent(false);
    g.set_stats(true);
    let d = Daemon::start(vec![vm("a", &g.q(), None, None)], 200);
    wait_for(T, "target 764 MiB from guest-stats", || g.fakes.last_request() == Some(expected_target(700)));
    assert_eq!(d.status("a").source, SampleSource::GuestStats);
    assert!(g.q().stats_polling_interval() > 0, "the controller turns on guest-stats polling");
    // Stats from a guest whose driver reports impossible values are not used.
    g.set_stats(false);
    let avail_above_total = FakeGuestStats { available_bytes: 8 << 30, ..FakeGuestStats::plausible(mib(1024), mib(512)) };
    g.q().set_guest_stats(avail_above_total);
    wait_for(T, "source none", || d.status("a").source == SampleSource::None);
    assert_requests_in_bounds(&g.q());
}

#[test]
fn an_agent_link_that_carries_nothing_is_closed_and_connected_again() {
    // The port accepts the controller but no line ever comes (QEMU can hold a port's output
    // after a migration): the link is closed after 10 s and connected again.
    let g = Guest::start(Fakes::start(), 1000);
    g.set_stats(true);
    g.set_agent(false);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    g.fakes.wait_agent_connected();
    let connected = Instant::now();
    wait_for(Duration::from_secs(20), "a silent link closed", || d.status("a").agent_reconnects == 1);
    assert!(connected.elapsed() >= Duration::from_secs(9), "closed after {:?}, before 10 s of silence", connected.elapsed());
    wait_for(T, "connected again", || g.fakes.p().connections() == 2 && g.fakes.p().is_connected());
    assert_eq!(d.log.count("agent_silent"), 1, "{}", d.log.text());
    assert_eq!(d.status("a").source, SampleSource::GuestStats, "guest-stats meanwhile");
    // Once the agent speaks the link stays: control by its reports.
    g.set_agent(true);
    wait_for(T, "source agent", || d.status("a").source == SampleSource::Agent);
    d.wait_samples("a", 60, Duration::from_secs(30));
    assert_eq!((g.fakes.p().connections(), d.status("a").agent_reconnects), (2, 1), "a link that carried lines is kept");
}
