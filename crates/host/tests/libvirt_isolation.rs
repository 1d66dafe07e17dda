//! A libvirt that never answers stalls only its own VM: one VM is a domain behind a unix
//! socket that accepts connections and never answers (a wedged libvirtd), the other the
//! test driver's domain (`test:///default`, in libvirt0: no daemon). The live one is
//! managed and ballooned at once; the dead one is unreachable, its connect given up at the
//! deadline, and retried.

mod common;

use autoballoon::config::Config;
use autoballoon_fakes::TempDir;
use common::*;
use std::os::unix::net::UnixListener;
use std::time::Duration;

#[test]
fn a_wedged_libvirt_stalls_only_its_own_vm() {
    let dir = TempDir::new().unwrap();
    let sock = dir.path().join("libvirt-sock");
    let listener = UnixListener::bind(&sock).unwrap();
    // Accept and hold every connection, never reading nor answering.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    let text = format!(
        "[controller]\ninterval_ms = 200\nmetrics_listen = ''\nstatus_socket = ''\n\
         [[vm]]\nname = 'dead'\nlibvirt_domain = 'x'\nlibvirt_uri = 'qemu+unix:///system?socket={}'\n\
         [[vm]]\nname = 'live'\nlibvirt_domain = 'test'\nlibvirt_uri = 'test:///default'\n",
        sock.display()
    );
    let d = Daemon::start_config(Config::parse(&text).unwrap());
    let first = |vm: &str, event: &str| d.log.lines().into_iter().find(|l| l["vm"] == vm && l["event"] == event);
    wait_for(Duration::from_secs(10), "the live VM ballooned", || first("live", "set_target").is_some());
    wait_for(Duration::from_secs(15), "the dead VM given up", || first("dead", "unreachable").is_some());
    let (set, dead) = (first("live", "set_target").unwrap(), first("dead", "unreachable").unwrap());
    assert!(dead["msg"].as_str().unwrap().contains("no answer within 5s"), "{dead}");
    // Timestamps sort as text: the live VM did not wait for the dead one's deadline.
    assert!(set["ts"].as_str() < dead["ts"].as_str(), "live {set} after dead {dead}:\n{}", d.log.text());
    // It goes on being sampled while the other's connects hang (one sample a tick).
    let n = d.status("live").samples;
    d.wait_samples("live", n + 10, Duration::from_secs(10));
    assert_eq!(d.status("dead").samples, 0);
}
