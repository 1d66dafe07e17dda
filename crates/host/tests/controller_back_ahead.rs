//! Backing reported memory ahead of a spike (core's `host::back_ahead`; docs/spikes.md): on
//! a QEMU whose balloon offers `x-populate-reported` (the project's QEMU patches), a sample
//! that says the guest runs short because its programs committed memory they have not
//! touched makes the controller ask QEMU at once to back that much of what free page
//! reporting gave back; on QEMU as it is, nothing is asked. The agent hears which it is, so
//! that it watches its programs' commitments at any margin only where that helps.
mod common;

use autoballoon_core::protocol::{AgentMessage, HostMessage};
use autoballoon_core::units::{Kib, Pages};
use autoballoon_fakes::{sample, FakeQemuConfig};
use common::*;
use std::time::Duration;

/// A guest of 4 GiB using 300 MiB with 3.5 GiB free, whose program has just mapped
/// `committed_mib` more; `short`: its agent's commitment watch says it runs short.
fn send(f: &Fakes, committed_mib: u64, short: bool) {
    let p = f.p();
    let mut s = sample(configured(), mib(3600), mib(300 + committed_mib), Pages(0));
    // Its programs hold 300 MiB (the sample's LRU lists also hold page cache).
    s.mem.anon_and_shmem = Some(mib(300));
    s.running_short = short;
    s.seq = 1 + committed_mib + u64::from(short);
    p.send(&AgentMessage::Sample(s)).unwrap();
}

fn start(backs_reported: bool) -> (std::sync::Arc<Fakes>, Daemon) {
    let f = Fakes::start_with(FakeQemuConfig { backs_reported, ..FakeQemuConfig::new(configured()) });
    let d = Daemon::start(vec![f.vm("a", Some(quick_policy()))], 200);
    f.wait_agent_connected();
    send(&f, 0, false);
    wait_for(Duration::from_secs(10), "a first target", || f.last_request().is_some());
    (f, d)
}

#[test]
fn a_program_that_committed_memory_has_it_backed_ahead_where_qemu_can() {
    let (f, d) = start(true);
    assert!(d.log.text().contains("x-populate-reported on"), "the managing line names the switch: {}", d.log.text());
    // A routine sample asks nothing, however much was committed: once the growth it asked
    // for is applied, nothing else was (the actor takes its messages in order, and a
    // step hands a request to back memory over before its target).
    send(&f, 1200, false);
    wait_for(Duration::from_secs(5), "the growth", || f.last_request().is_some_and(|r| r >= mib(1500)));
    assert_eq!(f.q().populate_requests(), Vec::<u64>::new());
    // The agent's watch saw the commitment: QEMU is asked for it at once.
    send(&f, 1200, true);
    wait_for(Duration::from_secs(5), "a request to back reported memory", || !f.q().populate_requests().is_empty());
    assert_eq!(f.q().populate_requests(), vec![Kib::from_mib_saturating(1200).to_bytes_saturating().0]);
    wait_for(Duration::from_secs(5), "the request counted", || d.status("a").backed_ahead == 1);
}

#[test]
fn qemu_as_it_is_is_not_asked() {
    let (f, d) = start(false);
    send(&f, 1200, true);
    wait_for(Duration::from_secs(5), "the growth", || f.last_request().is_some_and(|r| r >= mib(1500)));
    assert_eq!(f.q().command_count("qom-set"), 1, "only the statistics interval was set");
    assert_eq!(d.status("a").backed_ahead, 0);
}

#[test]
fn the_agent_hears_whether_its_reported_memory_is_backed_ahead() {
    for backs_reported in [true, false] {
        let (f, _d) = start(backs_reported);
        wait_for(Duration::from_secs(5), "the agent told", || f.p().received().first() == Some(&HostMessage::Abilities { backs_reported }));
        assert_eq!(f.p().received().len(), 1, "once a link: {:?}", f.p().received());
    }
    // An agent that starts again while the link stays up says hello, and hears it again.
    let (f, _d) = start(true);
    wait_for(Duration::from_secs(5), "the agent told", || f.p().received().len() == 1);
    f.p().send(&AgentMessage::Hello { version: "0".into(), backend: "host".into() }).unwrap();
    wait_for(Duration::from_secs(5), "told again", || f.p().received() == vec![HostMessage::Abilities { backs_reported: true }; 2]);
}
