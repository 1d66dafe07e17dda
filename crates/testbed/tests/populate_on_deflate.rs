//! The project's QEMU change, `x-populate-on-deflate` (scripts/qemu10/ and scripts/qemu72/,
//! built by `scripts/build-qemu10-populate.sh` (`make qemu10-populate`) and
//! `scripts/build-qemu72-fixed.sh`; docs/spikes.md, "Backing deflated memory off the
//! vCPU's thread"): with it on, QEMU backs the memory the guest deflated before the guest
//! writes to it; off, the same build leaves it to the guest's faults, as QEMU does. The
//! guest's memory is intact either way. Run on each of the two builds that is built, and
//! skipped with a printed reason for one that is not.
mod common;

use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use autoballoon_testbed::{wait_for, GuestAgent, Qemu, VmSpec};
use std::path::Path;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn rss_mib(q: &Qemu) -> u64 {
    q.rss().expect("QEMU's VmRSS").0 / 1024
}

#[test]
fn qemu_backs_what_the_guest_deflated_before_the_guest_touches_it() {
    let test = "populate_on_deflate";
    for (i, off) in common::populate_qemus(test).iter().enumerate() {
        eprintln!("{}:", off.display());
        backs_deflated_memory(&format!("{test}-{i}"), off);
    }
}

fn backs_deflated_memory(test: &str, off: &Path) {
    let on = off.with_file_name("qemu-system-x86_64-populate");
    let spec = |name: &str, qemu: &Path| VmSpec { qemu: qemu.to_path_buf(), agent: GuestAgent::None, ..VmSpec::new(name, Kib::from_mib_saturating(1024)) };
    let vms: Vec<Qemu> = [("on", on.as_path()), ("off", off)]
        .iter()
        .map(|(name, qemu)| Qemu::start(&common::image(), spec(name, qemu), &common::vm_dir(test, name)).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let qmps: Vec<Qmp> = vms
        .iter()
        .map(|vm| {
            vm.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
            Qmp::connect_with_retry(&vm.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap()
        })
        .collect();

    // Shrink both to 384 MiB: the balloon takes 640 MiB the guest never wrote, so the host
    // never backed them.
    let set_all = |mib: u64| {
        for q in &qmps {
            q.set_balloon_guest_size(mib * MIB).unwrap();
        }
        for q in &qmps {
            let reached = wait_for(Duration::from_secs(120), Duration::from_millis(100), || q.query_balloon().unwrap() == mib * MIB);
            assert!(reached.is_some(), "the balloon did not reach {mib} MiB: {}", q.query_balloon().unwrap());
        }
    };
    set_all(384);
    let before: Vec<u64> = vms.iter().map(rss_mib).collect();
    eprintln!("shrunk to 384 MiB: QEMU resident on {} MiB, off {} MiB", before[0], before[1]);

    // Grow both back to 1024 MiB. With the property on, QEMU backs the 640 MiB the guest
    // got back while the guest leaves it untouched; off, nothing backs it yet.
    set_all(1024);
    let backed = wait_for(Duration::from_secs(60), Duration::from_millis(100), || rss_mib(&vms[0]) >= before[0] + 512);
    let after: Vec<u64> = vms.iter().map(rss_mib).collect();
    eprintln!("grown to 1024 MiB: QEMU resident on {} MiB (+{}), off {} MiB (+{})", after[0], after[0].saturating_sub(before[0]), after[1], after[1].saturating_sub(before[1]));
    assert!(backed.is_some(), "with x-populate-on-deflate on, QEMU backed {} MiB of the 640 MiB deflated", after[0].saturating_sub(before[0]));
    assert!(after[1] < before[1] + 128, "off, QEMU backed {} MiB the guest did not touch", after[1] - before[1]);

    // The memory the thread backed holds what the guest writes: every word read back.
    for vm in &vms {
        let r = vm.console.run("spike 2 300 0.5 0 1 verify", Duration::from_secs(180)).unwrap();
        assert_eq!(r.status, 0, "{}", r.text);
    }
}
