//! docs/proxmox.md's QEMU command line (a VM as `qm showcmd` prints it, with autoballoon's
//! `args`: a second QMP socket and the agent's port in `/run/autoballoon-vms`) runs on the
//! QEMU here, and the daemon, told only that directory, finds the VM by its sockets, hears its
//! agent and balloons it. The doc's block is run as written, daemonized, with only what
//! cannot exist off a PVE node swapped (each named in `runnable`): the `kvm` wrapper, PVE's
//! CPU model, machine suffix and `-id` option (PVE's QEMU build; no KVM here), its run
//! directories (a test's own), and the guest's kernel (the test image instead of a disk).
mod common;

use autoballoon::config::Config;
use autoballoon::controller::Controller;
use autoballoon::log::Logger;
use autoballoon_core::sample::SampleSource;
use autoballoon_core::Kib;
use autoballoon_testbed::{qemu_binary, wait_for};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The code block under "## A QEMU command line" in docs/proxmox.md.
fn documented_command_line() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/proxmox.md")).expect("docs/proxmox.md");
    let section = doc.split_once("## A QEMU command line").expect("the section").1;
    let block = section.split("```").nth(1).expect("its code block");
    block.trim().to_string()
}

/// The documented command line with what only a PVE node has swapped for this machine's.
fn runnable(cmd: &str, dir: &Path, image: &Path) -> String {
    let d = dir.display();
    let swaps = [
        // PVE's wrapper, its named CPU model and machine version: upstream QEMU under TCG.
        ("/usr/bin/kvm", format!("{} -accel tcg -display none -kernel {}/vmlinuz -initrd {}/initrd.img -append 'console=ttyS0 quiet panic=-1 autoballoon.agent=host'", qemu_binary().display(), image.display(), image.display())),
        ("'x86-64-v2-AES,+kvm_pv_eoi,+kvm_pv_unhalt'", "qemu64".to_string()),
        ("'type=pc+pve0'", "'type=pc'".to_string()),
        // An option of PVE's own QEMU build (the VM's id for qmeventd), not upstream's.
        ("  -id 101 \\\n", String::new()),
        // The node's run directories: the test's own.
        ("/var/run/qemu-server/", format!("{d}/qemu-server/")),
        ("/var/run/qmeventd.sock", format!("{d}/qmeventd.sock")),
        ("/run/autoballoon-vms/", format!("{d}/autoballoon-vms/")),
    ];
    swaps.iter().fold(cmd.to_string(), |c, (from, to)| {
        assert!(c.contains(from), "the documented command line has no {from:?} any more: update this test's swaps");
        c.replace(from, to)
    })
}

/// Kills the daemonized QEMU (by its pidfile) when the test ends, passed or not.
struct Daemonized(std::path::PathBuf);

impl Drop for Daemonized {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(&self.0).ok().and_then(|p| p.trim().parse::<i32>().ok()) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

#[test]
fn the_proxmox_guides_command_line_is_found_and_ballooned() {
    let dir = common::vm_dir("proxmox_cmdline", "node");
    for sub in ["qemu-server", "autoballoon-vms"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let image = common::image();
    let cmd = runnable(&documented_command_line(), &dir, &image.dir);
    let _qemu = Daemonized(dir.join("qemu-server/101.pid"));
    let out = Command::new("sh").args(["-c", &cmd]).output().expect("sh");
    assert!(out.status.success(), "QEMU did not start from the documented command line:\n{cmd}\n{}", String::from_utf8_lossy(&out.stderr));

    // The daemon is told only the socket directory, as the packaged host.toml does.
    let text = format!("[controller]\nmetrics_listen = ''\nstatus_socket = ''\n[discovery]\nsocket_dir = {:?}\n", dir.join("autoballoon-vms"));
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let ctl = Controller::start(&config, Logger::new(autoballoon::config::LogFormat::Text, false));
    assert!(wait_for(Duration::from_secs(30), Duration::from_millis(200), || ctl.vm("101").is_some()).is_some(), "VM 101 discovered from its sockets");
    let vm = ctl.vm("101").unwrap();
    assert!(
        wait_for(Duration::from_secs(180), Duration::from_millis(500), || vm.snapshot().source == SampleSource::Agent).is_some(),
        "the guest's agent reports over the documented port: {:?}",
        vm.snapshot()
    );
    // The 4 GiB VM idles: the daemon shrinks it toward what it uses.
    let shrunk = wait_for(Duration::from_secs(180), Duration::from_millis(500), || vm.snapshot().known_size().is_some_and(|s| s < Kib::from_mib_saturating(2048)));
    assert!(shrunk.is_some(), "VM 101 was not ballooned below 2 GiB: {:?}", vm.snapshot());
    // PVE's own monitor is untouched and still answers.
    let pve = autoballoon_qmp::Qmp::connect_with_retry(&dir.join("qemu-server/101.qmp"), std::time::Instant::now() + Duration::from_secs(10)).expect("qemu-server's QMP socket");
    assert!(pve.execute("query-status", None).is_ok());
    ctl.stop();
}
