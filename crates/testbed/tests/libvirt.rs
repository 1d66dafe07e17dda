//! A libvirt-managed guest is ballooned like a raw one: a transient TCG domain of the
//! project's guest image (made from docs/examples/autoballoon-guest.xml), the daemon as
//! shipped managing it by domain name only (`libvirt_domain`; the agent's socket comes
//! from the domain's XML), the balloon moved to the daemon's target (as libvirt itself
//! reports it), `autoballoon status` showing it, and a spike in the guest grown into. The
//! daemon calls libvirt's library (no virsh, no QMP passthrough): the domain is never
//! tainted `custom-monitor`.
//!
//! libvirt from Debian (`libvirt-daemon-system`, installed by scripts/install-deps.sh);
//! without systemd the test starts `virtlogd` and `libvirtd` itself. Skipped, with the
//! reason printed, only when libvirt is not installed; installed but broken fails.
mod common;

use autoballoon_testbed::daemon::Daemon;
use autoballoon_testbed::libvirt::{Libvirt, LibvirtError, TransientDomain};
use autoballoon_testbed::{wait_for, Console};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[test]
fn libvirt_domain_is_ballooned_by_name() {
    let t0 = Instant::now();
    let name = format!("autoballoon-test-{}", std::process::id());
    // Under /tmp: libvirt's QEMU user must reach the image and the sockets.
    let dir = PathBuf::from("/tmp").join(&name);
    let _lv = match Libvirt::ensure(&common::vm_dir("libvirt", "libvirtd")) {
        Ok(lv) => lv,
        Err(LibvirtError::Unavailable(why)) => {
            eprintln!("SKIPPED libvirt_domain_is_ballooned_by_name: {why}");
            return;
        }
        Err(LibvirtError::Broken(why)) => panic!("libvirt is installed but does not work: {why}"),
    };
    let dom = TransientDomain::create(&name, 768, &common::image(), &dir).unwrap_or_else(|e| panic!("virsh create: {e}"));
    eprintln!("domain {name} created in {:.1} s", t0.elapsed().as_secs_f64());
    let console = Console::connect(&dom.serial, &dir.join("console.log")).unwrap_or_else(|e| panic!("console: {e}"));
    assert!(console.wait_for_text("AUTOBALLOON-GUEST BOOTED", Duration::from_secs(180)).is_some(), "boot: {}", console.transcript());

    let config = format!("[controller]\ninterval_ms = 1000\n\n[[vm]]\nname = \"lv\"\nlibvirt_domain = \"{name}\"\n");
    let d = Daemon::start(&common::vm_dir("libvirt", "daemon"), &config).unwrap_or_else(|e| panic!("{e}"));
    let managing = format!("managing libvirt={name} on qemu:///system");
    assert!(wait_for(Duration::from_secs(20), Duration::from_millis(200), || !d.log_lines(&managing).is_empty()).is_some(), "log: {}", d.log_text());
    // The hypervisor is read through libvirt's API (the domain type at once;
    // virConnectGetVersion in the background, libvirtd taking seconds to answer it): the
    // migration rule names it instead of "not known", in the `managing` line or, once the
    // version comes, a `now known` line.
    let named = || d.log_lines("[lv] ").into_iter().filter(|l| l.contains("managing") || l.contains("now known")).collect::<Vec<_>>();
    let told = wait_for(Duration::from_secs(40), Duration::from_millis(200), || named().iter().any(|l| l.contains("TCG on QEMU") || l.contains("KVM")));
    assert!(told.is_some(), "the hypervisor read through libvirt: {:#?}", named());

    // The agent (found through the domain's XML) reports, and the idle guest shrinks.
    let shrunk = wait_for(Duration::from_secs(90), Duration::from_millis(250), || {
        d.vm("lv").is_some_and(|v| v["source"] == "agent") && d.size_mib("lv").is_some_and(|s| s <= 400)
    });
    assert!(shrunk.is_some(), "agent reports and the guest shrinks below 400 MiB: {:?}\n{}", d.vm("lv"), d.log_text());
    eprintln!("shrunk to {:?} MiB in {:.1} s after the daemon started", d.size_mib("lv"), shrunk.unwrap().as_secs_f64());

    // The balloon is where the daemon asked it to be, as libvirt itself reports it.
    let at_target = wait_for(Duration::from_secs(30), Duration::from_millis(250), || {
        let v = d.vm("lv").unwrap_or_default();
        let (target, actual) = (v["target"].as_u64(), dom.actual_kib());
        matches!((target, actual), (Some(t), Some(a)) if a.abs_diff(t) <= 2048)
    });
    assert!(at_target.is_some(), "libvirt's actual {:?} KiB vs target {:?}", dom.actual_kib(), d.vm("lv").map(|v| v["target"].clone()));

    // `autoballoon status` shows it.
    let table = d.status_table().unwrap_or_else(|e| panic!("autoballoon status: {e}"));
    eprintln!("{table}");
    let row = table.lines().find(|l| l.starts_with("lv ")).unwrap_or_else(|| panic!("no row for lv:\n{table}"));
    assert!(row.contains("running") && row.contains("agent"), "{row}");

    // A spike in the guest is grown into (through virDomainSetMemoryFlags), and completes.
    let before = d.size_mib("lv").unwrap();
    let out = console.run("spike 2 200 2 0 1", Duration::from_secs(180)).expect("spike finishes");
    assert_eq!(out.status, 0, "spike: {}", out.text);
    assert!(out.text.contains("SPIKE done cycles=1 failed=0"), "{}", out.text);
    let grew = d.log_lines("set size").iter().any(|l| {
        let sizes: Vec<f64> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        sizes.len() >= 2 && sizes[1] >= before as f64 + 200.0
    });
    assert!(grew, "the daemon grew the guest by 200 MiB or more from {before} MiB:\n{}", d.log_lines("set size").join("\n"));
    assert_eq!(console.oom_kills(), 0, "OOM kills");
    // No QMP passed through libvirt: libvirt logs a taint in the domain's log otherwise.
    let qemu_log = std::fs::read_to_string(format!("/var/log/libvirt/qemu/{name}.log")).unwrap_or_default();
    assert!(!qemu_log.contains("custom-monitor"), "the domain was tainted:\n{qemu_log}");
    eprintln!("libvirt_domain_is_ballooned_by_name: {:.1} s in all", t0.elapsed().as_secs_f64());
}
