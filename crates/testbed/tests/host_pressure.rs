//! Host memory pressure makes guests inflate (KVM automatic ballooning): three idle guests
//! in one memory cgroup with a zram swap device, the daemon with `balancer = "pressure"`
//! reading that cgroup's PSI (`pressure_file`). A host-side program in the same cgroup
//! thrashes: it keeps sweeping a buffer that cannot fit beside the guests, so the group
//! reclaims and refaults for as long as it runs and its PSI stays high. The guests'
//! balloons inflate in steps below what their policies want; once the program ends and the
//! pressure fades they return to their wants.
//!
//! Why it thrashes and why zram: a program that touches its memory once and holds it
//! causes one burst of reclaim, whose PSI depends on how fast the swap device takes it
//! (30 % avg10 in one run, 1.6 % in another with a swap file). A sweep that never fits
//! stalls in reclaim on every pass; with compressed RAM as swap that stall is CPU in the
//! reclaiming task rather than the disk's speed, and reclaim always makes progress.
mod common;

use autoballoon_core::host::LevelThresholds;
use autoballoon::config::PolicyConfig;
use autoballoon_testbed::fleet::Row;
use common::fleet::{Fleet, Recorder};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GUESTS: [&str; 3] = ["a", "b", "c"];
const LIMIT_MIB: u64 = 800;

/// A host program that sweeps `mib` of its own memory, one byte a page, until killed (or
/// its parent, this test, is gone). It starts when told, after it was moved into the group.
struct Hog(Child);

impl Hog {
    fn start(mib: u64, limit: &autoballoon_testbed::hostlimit::HostLimit) -> Hog {
        let code = format!(
            "import os, sys\nsys.stdin.readline()\nn = {mib} << 20\nb = bytearray(n)\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for i in range(0, n, 4096):\n        b[i] = (b[i] + 1) & 255\n"
        );
        let mut child = Command::new("python3").args(["-c", &code]).stdin(Stdio::piped()).spawn().expect("python3");
        limit.add(child.id()).unwrap_or_else(|e| panic!("the program into the group: {e}"));
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        Hog(child)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How far (MiB) a guest's size is below what its policy wants, `used + buffer` (idle
/// guests here: nothing overcommitted, no swap); negative above it.
fn below_want(r: &Row, vm: &str) -> i64 {
    let (Some(&used), Some(&size)) = (r.used.get(vm), r.sizes.get(vm)) else { return 0 };
    (used + PolicyConfig::default().buffer_mib) as i64 - size as i64
}

#[test]
fn host_pressure_inflates_the_guests() {
    let t0 = Instant::now();
    let dead_band = PolicyConfig::default().dead_band_mib as i64;
    let mut fleet = Fleet::boot("host_pressure", &GUESTS, 512, LIMIT_MIB, Some(1024));
    let psi = fleet.limit.pressure_file();
    // `min_mib` below the default 128 leaves room for the balloons to take the guests well
    // below their wants (about 150 MiB each here) under pressure.
    let d = fleet.daemon(&format!("balancer = \"pressure\"\npressure_file = {:?}", psi.display().to_string()), "min_mib = 64", |_| String::new());
    let rec = Recorder::start(&d.status_socket, &fleet.limit);
    let settled = autoballoon_testbed::wait_for(Duration::from_secs(120), Duration::from_millis(500), || {
        let r = rec.rows();
        r.len() >= 12 && r[r.len() - 12..].iter().all(|r| r.sizes.len() == 3) && GUESTS.iter().all(|n| {
            let s: Vec<u64> = r[r.len() - 12..].iter().map(|r| r.sizes[*n]).collect();
            s.iter().max().unwrap() - s.iter().min().unwrap() <= 8
        })
    });
    assert!(settled.is_some(), "the idle guests settle:\n{}\n{}", rec.table(2.0), d.log_text());
    let before = rec.rows().last().unwrap().clone();
    let group = before.group_mib.expect("the group's memory use");
    eprintln!("settled: {:?}, used {:?}, group {group} MiB of {LIMIT_MIB}", before.sizes, before.used);

    // The program's sweep is the whole limit: it never fits, whatever the guests give. It
    // runs until every balloon holds its guest 1.5 dead bands below its want.
    let hog_mib = LIMIT_MIB;
    let t_hog = rec.now();
    let hog = Hog::start(hog_mib, &fleet.limit);
    let inflated = autoballoon_testbed::wait_for(Duration::from_secs(90), Duration::from_millis(500), || {
        let now = rec.rows().last().cloned().unwrap();
        GUESTS.iter().all(|n| below_want(&now, n) >= dead_band + dead_band / 2)
    });
    drop(hog);
    let t_end = rec.now();
    let during = rec.since(t_hog);
    let peak_psi = during.iter().filter_map(|r| r.psi_some10).fold(0.0, f64::max);
    // What the balancer reacts to: the host's PSI at its Low level or above.
    let levels = LevelThresholds::default();
    assert!(peak_psi >= levels.low_some, "the group's PSI reached the balancer's Low level, some avg10 {} % (peak {peak_psi:.1} %)", levels.low_some);
    assert!(inflated.is_some(), "every guest held 1.5 dead bands below its want under host pressure:\n{}\n{}", rec.table(2.0), d.log_lines("set size").join("\n"));
    // Below its want, never below what it uses: that is what would run its OOM killer (the
    // rails' floor; a dead band for a use that moved since the target was set).
    let under: Vec<String> = during.iter().flat_map(|r| GUESTS.iter().filter_map(move |n| {
        let (t, u) = (*r.targets.get(*n)?, *r.used.get(*n)?);
        (t + (dead_band as u64) < u).then(|| format!("{n} at {:.0} s: target {t} MiB, using {u} MiB", r.t))
    })).collect();
    assert!(under.is_empty(), "targets below the memory in use: {under:?}");

    // The program is gone, the pressure fades: back to what the policies want (within
    // the dead band, inside which the rails keep a size).
    let back = autoballoon_testbed::wait_for(Duration::from_secs(120), Duration::from_millis(500), || {
        let now = rec.rows().last().cloned().unwrap();
        GUESTS.iter().all(|n| below_want(&now, n) < dead_band)
    });
    eprintln!("{}", rec.table(2.0));
    assert!(back.is_some(), "back to their wants once the pressure ended: {:?}", rec.rows().last().map(|r| GUESTS.map(|n| below_want(r, n))));
    fleet.assert_all_alive();
    assert_eq!(fleet.guest_oom_kills(), 0, "OOM kills in the guests");
    let after = rec.rows().last().unwrap().clone();
    let lows: Vec<u64> = GUESTS.iter().map(|n| rec.since(t_hog).iter().filter_map(|r| r.sizes.get(*n).copied()).min().unwrap()).collect();
    eprintln!(
        "settled {:?} -> 1.5 dead bands below their wants after {:.0} s of a {hog_mib} MiB sweep (PSI some avg10 peak {peak_psi:.1} %), lowest {lows:?} while the PSI faded, back at {:?} {:.0} s after it ended; {:.0} s in all",
        before.sizes.values().collect::<Vec<_>>(),
        inflated.unwrap().as_secs_f64(),
        after.sizes.values().collect::<Vec<_>>(),
        rec.now() - t_end,
        t0.elapsed().as_secs_f64()
    );
}
