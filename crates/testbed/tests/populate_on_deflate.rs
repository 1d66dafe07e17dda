//! The project's QEMU changes (scripts/qemu10/ and scripts/qemu72/, built by
//! `scripts/build-qemu10-populate.sh` (`make qemu10-populate`) and
//! `scripts/build-qemu72-fixed.sh`; docs/spikes.md): with `x-populate-on-deflate` on, QEMU
//! backs the memory the guest deflated before the guest writes to it ("Backing deflated
//! memory off the vCPU's thread"); off, the same build leaves it to the guest's faults, as
//! QEMU does. With it on, `x-populate-reported` backs again, on request, what free page
//! reporting gave back ("Backing reported memory ahead of a spike"), and gives back what the
//! guest did not write within `x-populate-reported-hold-ms`, recording it again for the
//! next request ("What the hold's page-out leaves behind"), which backs it in huge pages
//! ("Backing again in huge pages"). The guest's memory is intact either way. Run on each of
//! the two builds that is built, and skipped with a printed reason for one that is not (or
//! that was built before a patch).
mod common;

use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use autoballoon_testbed::{migrate, wait_for, GuestAgent, Qemu, VmSpec};
use std::path::Path;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn rss_mib(q: &Qemu) -> u64 {
    q.rss().expect("QEMU's VmRSS").0 / 1024
}

/// Whether the QEMU at `qemu` has the trace event `event`: which of the project's patches a
/// cached build carries.
fn has_trace_event(qemu: &Path, event: &str) -> bool {
    std::process::Command::new(qemu).args(["-trace", "help"]).output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(event))
}

/// Runs `check` on each build that is built (`off`: its wrapper with the properties off).
fn on_each_build(test: &str, check: fn(&str, &Path)) {
    for (i, off) in common::populate_qemus(test).iter().enumerate() {
        eprintln!("{}:", off.display());
        check(&format!("{test}-{i}"), off);
    }
}

#[test]
fn qemu_backs_what_the_guest_deflated_before_the_guest_touches_it() {
    on_each_build("populate_on_deflate", backs_deflated_memory);
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

/// `x-populate-reported` (scripts/qemu*/virtio-balloon-populate-reported.patch): with
/// `x-populate-on-deflate` on, QEMU remembers what free page reporting discarded and backs
/// as much of it again as it is asked to, before the guest touches it; an inflation forgets
/// it. The guest's memory is intact.
#[test]
fn qemu_backs_reported_memory_again_on_request() {
    on_each_build("populate_reported", backs_reported_memory);
}

fn backs_reported_memory(test: &str, off: &Path) {
    let on = off.with_file_name("qemu-system-x86_64-populate");
    let spec = VmSpec { qemu: on, agent: GuestAgent::None, free_page_reporting: true, ..VmSpec::new("on", Kib::from_mib_saturating(1024)) };
    let vm = Qemu::start(&common::image(), spec, &common::vm_dir(test, "on")).unwrap_or_else(|e| panic!("{e}"));
    vm.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let q = Qmp::connect_with_retry(&vm.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
    let dev = autoballoon_qmp::BALLOON_DEVICE_PATH;
    let recorded = || q.qom_get(dev, "x-populate-reported").ok().and_then(|v| v.as_u64());
    if recorded().is_none() {
        eprintln!("SKIPPED {test} on {}: no x-populate-reported (built before that patch: build it again)", off.display());
        return;
    }

    // 600 MiB written and freed: free page reporting gives it back to the host, and QEMU
    // remembers the ranges.
    let r = vm.console.run("spike 2 300 0.5 0 1", Duration::from_secs(180)).unwrap();
    assert_eq!(r.status, 0, "{}", r.text);
    let enough = wait_for(Duration::from_secs(60), Duration::from_millis(200), || recorded().is_some_and(|b| b >= 512 * MIB));
    assert!(enough.is_some(), "free page reporting gave back {:?} bytes", recorded());
    let reported = recorded().unwrap();
    let before = rss_mib(&vm);
    eprintln!("reported {} MiB; QEMU resident {before} MiB", reported / MIB);

    // Asked for 400 MiB, QEMU backs at least that much before the guest touches any.
    q.qom_set(dev, "x-populate-reported", serde_json::json!(400 * MIB)).unwrap();
    let backed = wait_for(Duration::from_secs(60), Duration::from_millis(100), || rss_mib(&vm) >= before + 384);
    let after = rss_mib(&vm);
    eprintln!("asked for 400 MiB: QEMU resident {after} MiB (+{}), {} MiB still recorded", after.saturating_sub(before), recorded().unwrap_or(0) / MIB);
    assert!(backed.is_some(), "QEMU backed {} MiB of the 400 MiB asked", after.saturating_sub(before));
    assert!(recorded().unwrap_or(u64::MAX) <= reported - 400 * MIB, "what was backed is no longer recorded");

    // The guest took none of it: once the hold is over (x-populate-reported-hold-ms, 5 s by
    // default), QEMU gives it back. A build from before that patch keeps it.
    let given_back = wait_for(Duration::from_secs(30), Duration::from_millis(200), || rss_mib(&vm) <= before + 64);
    eprintln!("after the hold: QEMU resident {} MiB", rss_mib(&vm));
    if q.qom_get(dev, "x-populate-reported-hold-ms").is_ok() {
        assert!(given_back.is_some(), "QEMU kept {} MiB the guest did not take", rss_mib(&vm).saturating_sub(before));
    }
    // What it paged out is in the record again, so that the next request backs it before
    // the guest touches it (the page-out leaves a page table where the huge page was). A
    // build from before that (the trace event of the same patch tells) leaves it out.
    if has_trace_event(&vm.spec.qemu, "virtio_balloon_reported_kept") {
        let again = wait_for(Duration::from_secs(10), Duration::from_millis(100), || recorded().is_some_and(|b| b + 64 * MIB >= reported));
        eprintln!("recorded again: {} MiB of {} MiB", recorded().unwrap_or(0) / MIB, reported / MIB);
        assert!(again.is_some(), "QEMU recorded {:?} bytes again of the {reported} it had before the request", recorded());
        backs_paged_out_memory_in_huge_pages(&vm, &q, off);
    } else {
        eprintln!("SKIPPED the record's check on {}: built before the hold kept what the guest wrote (build it again)", off.display());
    }

    // Backed again and written while held, past the hold: QEMU keeps what the guest wrote,
    // every word read back.
    let r = vm.console.run("spike 2 300 0.5 0 1", Duration::from_secs(180)).unwrap();
    assert_eq!(r.status, 0, "{}", r.text);
    let enough = wait_for(Duration::from_secs(60), Duration::from_millis(200), || recorded().is_some_and(|b| b >= 400 * MIB));
    assert!(enough.is_some(), "free page reporting gave back {:?} bytes", recorded());
    q.qom_set(dev, "x-populate-reported", serde_json::json!(400 * MIB)).unwrap();
    let r = vm.console.run("spike 2 200 8 0 1 verify", Duration::from_secs(180)).unwrap();
    assert_eq!(r.status, 0, "{}", r.text);

    // An inflation forgets the rest: reported pages may be in the balloon now.
    q.set_balloon_guest_size(768 * MIB).unwrap();
    let forgot = wait_for(Duration::from_secs(60), Duration::from_millis(100), || q.query_balloon().unwrap() == 768 * MIB);
    assert!(forgot.is_some(), "the balloon did not reach 768 MiB");
    assert_eq!(recorded(), Some(0), "an inflation forgets the reported ranges");

    // The memory backed again holds what the guest writes: every word read back.
    let r = vm.console.run("spike 2 200 0.5 0 1 verify", Duration::from_secs(180)).unwrap();
    assert_eq!(r.status, 0, "{}", r.text);
}

/// Asked again after the hold paged 400 MiB out, QEMU backs it in huge pages: the page-out
/// left a page table where each huge page was, which `MADV_POPULATE_WRITE` would fill 4 KiB
/// at a time, and the thread collapses each chunk instead
/// (scripts/qemu*/virtio-balloon-populate-collapse.patch, "Backing again in huge pages" in
/// docs/spikes.md). Skipped, saying why, on a build from before that patch (its trace event
/// tells) and on a host whose anonymous memory gets no 2 MiB huge pages.
fn backs_paged_out_memory_in_huge_pages(vm: &Qemu, q: &Qmp, off: &Path) {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let size = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").unwrap_or_default();
    if thp.contains("[never]") || size.trim() != (2 * MIB).to_string() {
        eprintln!("SKIPPED the huge pages' check: this host's transparent huge pages are {:?}, {:?} bytes", thp.trim(), size.trim());
        return;
    }
    if !has_trace_event(&vm.spec.qemu, "virtio_balloon_populate_collapsed") {
        eprintln!("SKIPPED the huge pages' check on {}: built before the thread collapsed chunks (build it again)", off.display());
        return;
    }
    let ram = || autoballoon_testbed::host_memory_of(vm.pid(), vm.spec.memory).expect("QEMU's guest RAM in smaps");
    let before = ram();
    q.qom_set(autoballoon_qmp::BALLOON_DEVICE_PATH, "x-populate-reported", serde_json::json!(400 * MIB)).unwrap();
    // Read when it has grown, before its own hold pages it out again. Some of what the
    // request takes may still be held from the first one, so not all 400 MiB are new.
    let mut at = before;
    let backed = wait_for(Duration::from_secs(30), Duration::from_millis(50), || {
        at = ram();
        at.ram_rss.0 >= before.ram_rss.0 + 256 * 1024
    });
    let (grew, huge) = (at.ram_rss.0.saturating_sub(before.ram_rss.0) / 1024, at.ram_huge.0.saturating_sub(before.ram_huge.0) / 1024);
    eprintln!("asked again for 400 MiB: guest RAM +{grew} MiB resident, +{huge} MiB in huge pages");
    assert!(backed.is_some(), "QEMU backed {grew} MiB of the 400 MiB asked again");
    assert!(huge + 32 >= grew, "of the {grew} MiB QEMU backed again, only {huge} MiB are in huge pages");
}

/// `x-migrate-skip-ballooned` (scripts/qemu*/virtio-balloon-migrate-skip-ballooned.patch; on
/// in the `-populate` wrapper): a migration skips the pages in the balloon instead of sending
/// each as a zero page, and the guest gets them back on the destination intact. The same
/// guest, ballooned from 1 GiB to 256 MiB, migrated by each wrapper: with the property on,
/// at least 150,000 fewer zero pages (768 MiB ballooned are 196,608 pages).
#[test]
fn qemu_migration_skips_ballooned_pages() {
    on_each_build("skip_ballooned", skips_ballooned_pages);
}

fn skips_ballooned_pages(test: &str, off: &Path) {
    let on = off.with_file_name("qemu-system-x86_64-populate");
    let mut zero_pages = Vec::new();
    for (name, qemu) in [("off", off.to_path_buf()), ("on", on)] {
        let spec = VmSpec { qemu, agent: GuestAgent::None, ..VmSpec::new(name, Kib::from_mib_saturating(1024)) };
        let vm = Qemu::start(&common::image(), spec.clone(), &common::vm_dir(test, name)).unwrap_or_else(|e| panic!("{e}"));
        vm.wait_booted(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
        let q = Qmp::connect_with_retry(&vm.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
        let skips = q.qom_get(autoballoon_qmp::BALLOON_DEVICE_PATH, "x-migrate-skip-ballooned").ok().and_then(|v| v.as_bool());
        if name == "on" && skips != Some(true) {
            eprintln!("SKIPPED {test} on {}: no x-migrate-skip-ballooned (built before that patch: build it again)", off.display());
            return;
        }
        q.set_balloon_guest_size(256 * MIB).unwrap();
        let shrunk = wait_for(Duration::from_secs(120), Duration::from_millis(200), || q.query_balloon().unwrap() == 256 * MIB);
        assert!(shrunk.is_some(), "{name}: the balloon did not reach 256 MiB: {}", q.query_balloon().unwrap() / MIB);

        let dst = format!("{name}-dst");
        let (dest, _) = Qemu::start_incoming(&common::image(), VmSpec { name: dst.clone(), ..spec }, &common::vm_dir(test, &dst)).unwrap_or_else(|e| panic!("{e}"));
        let m = migrate(&q, &dest, 1 << 30, Duration::from_secs(240)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let zeros = m.info.ram_duplicate_pages.unwrap_or(0);
        eprintln!("{name}: {} MiB sent, {zeros} zero pages", m.bytes_sent() / MIB);
        zero_pages.push(zeros);

        // On the destination the guest takes its memory back and every word reads back.
        let qd = Qmp::connect_with_retry(&dest.qmp_ctl, Instant::now() + Duration::from_secs(10)).unwrap();
        qd.set_balloon_guest_size(1024 * MIB).unwrap();
        let grown = wait_for(Duration::from_secs(120), Duration::from_millis(200), || qd.query_balloon().unwrap() == 1024 * MIB);
        assert!(grown.is_some(), "{name}: the destination's balloon did not deflate");
        let r = dest.console.run("spike 2 350 0.5 0 1 verify", Duration::from_secs(180)).unwrap();
        assert_eq!(r.status, 0, "{name}: {}", r.text);
    }
    assert!(zero_pages[1] + 150_000 <= zero_pages[0], "zero pages sent: {} with the property, {} without", zero_pages[1], zero_pages[0]);
}
