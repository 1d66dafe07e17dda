//! A probe for docs/spikes.md: does a spike run faster on memory kept backed inside the guest
//! (lazily freed, so free page reporting leaves it alone) than on memory FPR gave back?
//!
//! One guest with free page reporting and no agent, the balloon set by hand. Per round, in
//! an order that rotates: `fpr` (the spike into free memory FPR has reported), `reclaim` (the
//! same room held by `hold`, which the kernel reclaims during the spike), `release` (`hold`
//! exits just before the spike), `warm` (the spike right after the previous one, before FPR
//! reported its memory). Prints one line per spike and the medians.
//!
//! cargo run --release -p autoballoon-testbed --example hold_probe -- IMAGE_DIR QEMU ROUNDS GUEST_MIB MODES
//! (GUEST_MIB: the guest's size set over QMP, 2048 for none; MODES: e.g. fpr,reclaim,release,warm)
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use autoballoon_testbed::guest::{balloon_to, SpikeRun};
use autoballoon_testbed::{wait_for, GuestAgent, GuestImage, Qemu, TcgThread, VmSpec};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn spike(q: &Qemu) -> f64 {
    let out = q.console.run("spike 3 400 1 0 1", Duration::from_secs(120)).expect("spike");
    SpikeRun::parse(&out.text, out.status).alloc_s.unwrap_or_else(|| panic!("no spike line: {}", out.text))
}

/// Ends `hold` (SIGTERM unmaps its memory) and waits until it has exited.
fn stop_hold(q: &Qemu) {
    let _ = q.console.run("kill $(pidof hold) 2>/dev/null; while pidof hold >/dev/null; do :; done", Duration::from_secs(30));
}

fn wait_free_reported(q: &Qemu) {
    // FPR reports 2 s after a free, in batches: give it the 8 s the spike bench gives.
    let _ = q.console.run("sleep 8", Duration::from_secs(30));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let image = GuestImage::at(Path::new(&args[1])).expect("image");
    let rounds: usize = args[3].parse().expect("rounds");
    let guest_mib: u64 = args[4].parse().expect("guest MiB");
    let modes: Vec<&str> = args[5].split(',').collect();
    let mut spec = VmSpec::new("hold", Kib::from_mib_saturating(2048));
    spec.qemu = PathBuf::from(&args[2]);
    spec.agent = GuestAgent::None;
    spec.free_page_reporting = true;
    spec.tcg_thread = Some(TcgThread::Single);
    let run = PathBuf::from("run/hold-probe");
    autoballoon_testbed::hostbench::warm_host_memory(1536).expect("warm");
    let q = Qemu::start(&image, spec, &run).expect("qemu");
    q.wait_booted(Duration::from_secs(120)).expect("boot");
    let qmp = Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)).expect("qmp");
    // Room for the spike and a little: what the stock default's headroom keeps.
    if guest_mib < 2048 {
        balloon_to(&qmp, Kib::from_mib_saturating(guest_mib), Duration::from_secs(60)).expect("balloon");
    }
    let _ = q.console.run("free -m", Duration::from_secs(10)).map(|o| println!("{}", o.text));
    for _ in 0..2 {
        spike(&q);
        wait_free_reported(&q);
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for r in 0..rounds {
        for k in 0..modes.len() {
            let m = (r + k) % modes.len();
            let t = match modes[m] {
                "fpr" => {
                    wait_free_reported(&q);
                    spike(&q)
                }
                "warm" => {
                    wait_free_reported(&q);
                    spike(&q);
                    spike(&q)
                }
                mode => {
                    q.console.spawn("hold 1150 > /tmp/hold.out 2>&1").expect("hold");
                    let ready = wait_for(Duration::from_secs(120), Duration::from_millis(200), || {
                        q.console.run("cat /tmp/hold.out", Duration::from_secs(10)).is_ok_and(|o| o.text.contains("HOLD ready"))
                    });
                    assert!(ready.is_some(), "hold never ready");
                    let o = q.console.run("cat /tmp/hold.out; grep -E 'MemFree|LazyFree|AnonHuge' /proc/meminfo", Duration::from_secs(10)).unwrap();
                    println!("{}", o.text.trim());
                    wait_free_reported(&q);
                    if mode == "release" {
                        stop_hold(&q);
                        spike(&q)
                    } else {
                        let t = spike(&q);
                        stop_hold(&q);
                        t
                    }
                }
            };
            println!("round {r} {}: {t:.2} s", modes[m]);
            times[m].push(t);
        }
    }
    let _ = q.console.run("dmesg | grep -ci 'out of memory'", Duration::from_secs(10)).map(|o| println!("oom lines: {}", o.text.trim()));
    for (m, ts) in modes.iter().zip(times.iter_mut()) {
        ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{m}: median {:.2} s of {:?}", ts[ts.len() / 2], ts);
    }
}
