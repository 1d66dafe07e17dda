//! Floods and garbage: from the agent (sample bursts, endless lines, invalid UTF-8) and
//! from QEMU (event floods, sessions that die at once). Counted and dropped; memory and the
//! log stay bounded; control goes on.
mod common;

use autoballoon::controller::VmState;
use autoballoon_core::protocol::{encode, AgentMessage, MAX_LINE};
use autoballoon_fakes::{sample, Fault};
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
/// Slack for the test process's resident set (fakes' buffers, allocator behaviour).
const RSS_SLACK_KIB: u64 = 64 << 10;

#[test]
fn agent_floods_and_garbage_are_counted_and_control_goes_on() {
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    let rss0 = rss_kib();

    // 10,000 samples in one burst (the guest's present numbers).
    let one = encode(&AgentMessage::Sample(sample(mib(1064), mib(64), mib(1000), mib(4096 - 1064).to_pages_floor())));
    let burst = one.repeat(10_000);
    g.p().send_raw(burst.as_bytes()).unwrap();
    wait_for(T, "the burst counted as a flood", || d.status("a").agent.flooded > 9_000);

    // 1 MB without a newline, then lines longer than MAX_LINE, then invalid UTF-8. A long
    // line is dropped whole up to its newline and counted once: its tail is no line.
    let (garbage0, overlong0) = (d.status("a").agent.garbage, d.status("a").agent.overlong);
    // One send: the guest's sample thread could otherwise end the megabyte with its own
    // line, and the lone newline would then be an empty (garbage) line.
    let mut megabyte = vec![b'x'; 1 << 20];
    megabyte.push(b'\n');
    g.p().send_raw(&megabyte).unwrap();
    wait_for(T, "the megabyte counted as one overlong line", || d.status("a").agent.overlong == overlong0 + 1);
    let mut long = vec![b'{'; MAX_LINE * 3];
    long.push(b'\n');
    for _ in 0..10 {
        g.p().send_raw(&long).unwrap();
    }
    for _ in 0..10 {
        g.p().send_raw(b"{\"type\":\"sample\",\xff\xfe\xc0\xaf}\n").unwrap();
    }
    wait_for(T, "long lines and invalid UTF-8 counted", || d.status("a").agent.garbage >= garbage0 + 10);
    let s = d.status("a");
    assert_eq!((s.agent.overlong, s.agent.garbage), (overlong0 + 11, garbage0 + 10), "each long line once, never its pieces");

    let rss1 = rss_kib();
    assert!(rss1 < rss0 + RSS_SLACK_KIB, "resident set grew from {rss0} to {rss1} KiB");
    let s = d.status("a");
    assert_eq!((s.state, s.errors), (VmState::Running, 0), "{s:?}");
    g.set_used(1500);
    wait_for(T, "control goes on: target 1564 MiB", || g.fakes.last_request() == Some(expected_target(1500)));
    assert_requests_in_bounds(&g.q());
    // The link's counters are the record; the log is not flooded.
    assert!(d.log.lines().len() < 50, "{}", d.log.text());
}

#[test]
fn a_qmp_event_flood_is_bounded_and_control_goes_on() {
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", Some(quick_policy()))], 200);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    let rss0 = rss_kib();
    g.q().set_fault(Fault::EventFlood { size_bytes: 16 << 10, count: 100 });
    wait_for(Duration::from_secs(20), "dropped events reported", || d.status("a").qmp_events_dropped > 0);
    g.set_used(1500);
    wait_for(Duration::from_secs(20), "control goes on: target 1564 MiB", || g.fakes.last_request() == Some(expected_target(1500)));
    let rss1 = rss_kib();
    assert!(rss1 < rss0 + RSS_SLACK_KIB, "resident set grew from {rss0} to {rss1} KiB");
    g.q().clear_fault();
    assert!(d.log.count("events_dropped") <= 6, "{}", d.log.text());
}

/// Runs `fault` against a fresh controller for 5 s; returns (log lines, connections).
fn sessions_that_fail(arm: impl Fn(&Fakes) + Send + 'static, rearm: bool) -> (usize, u64, String) {
    let f = Fakes::start();
    arm(&f);
    let stop = Arc::new(AtomicBool::new(false));
    // CloseAfter clears itself when it fires: put it back at once, every time.
    let rearmer = rearm.then(|| {
        let (f, stop) = (f.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if f.q().fault().is_none() {
                    arm(&f);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    });
    let mut d = Daemon::start(vec![vm("a", &f.q(), None, None)], 100);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (lines, connections) = (d.log.lines().len(), f.q().connections());
    assert!(d.stop() < Duration::from_secs(3));
    stop.store(true, Ordering::SeqCst);
    if let Some(r) = rearmer {
        r.join().unwrap();
    }
    (lines, connections, d.log.text())
}

fn backs_off_and_logs_little(what: &str, arm: impl Fn(&Fakes) + Send + 'static, rearm: bool) {
    let (lines, connections, log) = sessions_that_fail(arm, rearm);
    eprintln!("{what}: {lines} log lines, {connections} connections in 5 s");
    assert!(lines <= 15, "{what}: {lines} log lines in 5 s:\n{log}");
    assert!(connections <= 12, "{what}: {connections} connections in 5 s (no back-off?)\n{log}");
    assert!(connections >= 2, "{what}: {connections} connections: the controller retries");
}

#[test]
fn qemu_sending_half_replies_backs_off_and_logs_little() {
    backs_off_and_logs_little("half replies", |f| f.q().set_fault(Fault::HalfReply), false);
}

#[test]
fn qemu_sending_garbage_backs_off_and_logs_little() {
    backs_off_and_logs_little("garbage replies", |f| f.q().set_fault(Fault::Garbage), false);
}

#[test]
fn qemu_closing_before_the_handshake_backs_off_and_logs_little() {
    backs_off_and_logs_little("closed before the handshake", |f| f.q().set_fault(Fault::CloseAfter(0)), true);
}

#[test]
fn qemu_closing_after_a_few_commands_backs_off_and_logs_little() {
    backs_off_and_logs_little("closed after the handshake and a few commands", |f| f.q().set_fault(Fault::CloseAfter(6)), true);
}

#[test]
fn a_vm_without_balloon_device_is_reported_once_and_not_hammered() {
    let g = Guest::start(Fakes::start(), 1000);
    g.q().set_fault(Fault::NoBalloonDevice);
    let mut d = Daemon::start(vec![g.fakes.vm("a", None)], 100);
    wait_for(T, "state no balloon", || d.status("a").state == VmState::NoBalloon);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(4) {
        assert_eq!(d.status("a").state, VmState::NoBalloon);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(d.log.count("no_balloon"), 1, "{}", d.log.text());
    let polls = g.q().command_count("query-balloon");
    assert!(polls <= 4, "{polls} query-balloon in 4 s: it should retry every 2 s");
    assert!(g.q().command_count("balloon") <= 1, "{:?}", g.q().command_counts());
    // The device becomes active (the guest's driver loaded late): controlled again within
    // a probe or two, with one line saying so.
    g.q().clear_fault();
    let t = Instant::now();
    wait_for(T, "controlled again", || d.status("a").state == VmState::Running && g.fakes.last_request() == Some(expected_target(1000)));
    assert!(t.elapsed() < Duration::from_secs(5), "back after {:?}", t.elapsed());
    assert_eq!(d.log.count("no_balloon"), 2, "{}", d.log.text());
    assert!(d.stop() < Duration::from_secs(2), "stop returns at once");
}

#[test]
fn a_balloon_device_that_goes_away_is_reported_once_and_not_hammered() {
    let g = Guest::start(Fakes::start(), 1000);
    let d = Daemon::start(vec![g.fakes.vm("a", None)], 100);
    wait_for(T, "target 1064 MiB", || g.fakes.last_request() == Some(expected_target(1000)));
    g.q().set_fault(Fault::NoBalloonDevice);
    g.set_used(2000); // a request would be tried now, and refused
    wait_for(T, "state no balloon", || d.status("a").state == VmState::NoBalloon);
    let polls = g.q().command_count("query-balloon");
    let sets = g.q().command_count("balloon");
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(4) {
        assert_eq!(d.status("a").state, VmState::NoBalloon);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(d.log.count("no_balloon"), 1, "{}", d.log.text());
    assert!(g.q().command_count("query-balloon") <= polls + 2, "{:?}", g.q().command_counts());
    assert!(g.q().command_count("balloon") <= sets + 2, "{:?}", g.q().command_counts());
}
