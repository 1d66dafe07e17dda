//! E1, the ESX paper's balloon-overhead experiment (OSDI'02 §3.2, Figure 2): a guest
//! ballooned down to a size against the same guest configured with that size, both running
//! a file-server-like workload whose throughput depends on the page cache it can keep. The
//! seed (dbench, 40 clients): 1.4 % (32 MB balloon) to 4.4 % (128 MB balloon) lower
//! throughput for the ballooned VM, from guest data structures sized by its configured
//! memory (struct pages, hash tables).
//!
//! Here each pair is booted at once and runs at once, side by side on the same loaded
//! cores: *ballooned*, configured with [`Setup::big_mib`] and ballooned over QMP to the
//! size (no agent, no daemon: the balloon holds still), and *native*, configured with the
//! size. Each has its own raw disk (a sparse host file, `/dev/vda` in the guest) holding
//! `nfiles` files of `file_kib` KiB; the guest's `work files` reads and writes whole files
//! through the guest's page cache (80 % of operations on a fifth of the files), warms
//! uncounted, then counts. The guest image has no file system driver, so the files are
//! extents of the block device: the same page cache, without metadata traffic. Which
//! guest boots first alternates between runs.
//!
//! Per pair: `ratio = ballooned MiB/s ÷ native MiB/s`; per size the mean ratio over the
//! runs, `overhead = 1 − mean ratio`.

use crate::fleet::Fleet;
use crate::guest::balloon_to;
use crate::hostlimit::HostLimit;
use crate::{GuestAgent, GuestImage, VmSpec};
use autoballoon_core::Kib;
use std::path::Path;
use std::time::{Duration, Instant};

/// The experiment's sizes and workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// The ballooned guest's configured size.
    pub big_mib: u64,
    /// The sizes compared (the ballooned guest's size and the native guest's).
    pub sizes: Vec<u64>,
    /// Pairs per size.
    pub runs: usize,
    /// `work files /dev/vda NFILES KIB WARM SECS WRITE_PCT`.
    pub nfiles: u64,
    pub file_kib: u64,
    pub warm_s: u64,
    pub secs: u64,
    pub write_pct: u64,
}

impl Default for Setup {
    /// 1 GiB of files (4096 × 256 KiB, a hot set of 205 MiB) against guests of 256, 384 and
    /// 512 MiB: the page cache holds less than the hot set at 256 MiB, it and some of the
    /// rest at 512. `AUTOBALLOON_BENCH_E1_SECS` sets the counted seconds,
    /// `AUTOBALLOON_BENCH_E1_RUNS` the pairs per size, `AUTOBALLOON_BENCH_E1_SIZES` (e.g.
    /// `256,512`) the sizes.
    fn default() -> Self {
        let env = |k: &str| std::env::var(k).ok();
        Setup {
            big_mib: 1024,
            sizes: env("AUTOBALLOON_BENCH_E1_SIZES").map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect()).filter(|v: &Vec<u64>| !v.is_empty()).unwrap_or_else(|| vec![256, 384, 512]),
            runs: env("AUTOBALLOON_BENCH_E1_RUNS").and_then(|v| v.parse().ok()).unwrap_or(2),
            nfiles: 4096,
            file_kib: 256,
            warm_s: 20,
            secs: env("AUTOBALLOON_BENCH_E1_SECS").and_then(|v| v.parse().ok()).unwrap_or(40),
            write_pct: 10,
        }
    }
}

impl Setup {
    pub fn command(&self) -> String {
        format!("work files /dev/vda {} {} {} {} {}", self.nfiles, self.file_kib, self.warm_s, self.secs, self.write_pct)
    }

    pub fn disk_mib(&self) -> u64 {
        (self.nfiles * self.file_kib).div_ceil(1024)
    }
}

/// One `WORK kind=files ...` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FilesLine {
    pub ops: u64,
    pub secs: f64,
    pub mib_per_s: f64,
    pub ops_per_s: f64,
}

impl FilesLine {
    pub fn parse(text: &str) -> Option<FilesLine> {
        let line = text.lines().find(|l| l.trim_start().starts_with("WORK kind=files "))?;
        let get = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)?.strip_prefix('=')).map(str::to_string);
        Some(FilesLine { ops: get("ops")?.parse().ok()?, secs: get("secs")?.parse().ok()?, mib_per_s: get("mib_per_s")?.parse().ok()?, ops_per_s: get("ops_per_s")?.parse().ok()? })
    }
}

/// One guest of a pair.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestE1 {
    /// Configured memory and the size it ran at (MiB).
    pub configured_mib: u64,
    pub size_mib: u64,
    /// `MemTotal` and `MemAvailable` in the guest before the workload (MiB).
    pub mem_total_mib: u64,
    pub mem_available_mib: u64,
    /// The guest's whole /proc/meminfo before the workload (where the MiB went).
    pub meminfo: String,
    pub result: FilesLine,
}

/// One pair, side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub size_mib: u64,
    pub run: usize,
    pub ballooned_first: bool,
    pub ballooned: GuestE1,
    pub native: GuestE1,
}

impl Pair {
    /// Ballooned throughput over native throughput.
    pub fn ratio(&self) -> f64 {
        super::ratio(self.ballooned.result.mib_per_s, self.native.result.mib_per_s)
    }
}

/// Per size: (size, mean ratio, overhead = 1 − mean ratio, the pairs' ratios).
pub fn summary(pairs: &[Pair]) -> Vec<(u64, f64, f64, Vec<f64>)> {
    let mut sizes: Vec<u64> = pairs.iter().map(|p| p.size_mib).collect();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|s| {
            let r: Vec<f64> = pairs.iter().filter(|p| p.size_mib == s).map(Pair::ratio).collect();
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            (s, mean, 1.0 - mean, r)
        })
        .collect()
}

fn meminfo_mib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.split_whitespace().next()?.parse::<u64>().ok()).map(|k| k / 1024)
}

/// Runs every size `runs` times, in `dir`.
pub fn run(image: &GuestImage, dir: &Path, setup: &Setup) -> Result<Vec<Pair>, String> {
    let mut pairs = Vec::new();
    for run in 0..setup.runs {
        for (i, &size) in setup.sizes.iter().enumerate() {
            // Alternate the boot order between runs and sizes.
            let ballooned_first = (run + i) % 2 == 0;
            let p = pair(image, &dir.join(format!("{size}-{run}")), setup, size, run, ballooned_first)?;
            eprintln!(
                "hostbench: e1: {size} MiB run {run}: ballooned {:.2} MiB/s, native {:.2} MiB/s, ratio {:.3}",
                p.ballooned.result.mib_per_s, p.native.result.mib_per_s, p.ratio()
            );
            pairs.push(p);
        }
    }
    pairs.sort_by_key(|p| (p.size_mib, p.run));
    Ok(pairs)
}

fn pair(image: &GuestImage, dir: &Path, setup: &Setup, size: u64, run: usize, ballooned_first: bool) -> Result<Pair, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let disk = |n: &str| crate::sparse_disk(&dir.join(format!("{n}.disk")), Kib::from_mib_saturating(setup.disk_mib()));
    let spec = |n: &str, mib: u64| Ok::<_, String>(VmSpec { agent: GuestAgent::None, disk: Some(disk(n)?), ..VmSpec::new(n, Kib::from_mib_saturating(mib)) });
    let (b, n) = (spec("ballooned", setup.big_mib)?, spec("native", size)?);
    let specs = if ballooned_first { vec![b, n] } else { vec![n, b] };
    // A limit far above both guests and their disks' host page cache: E1 has no host shortage.
    let limit = HostLimit::new("autoballoon-bench-host-e1", 4 * (setup.big_mib + setup.disk_mib())).map_err(|e| format!("host limit: {e}"))?;
    let t = Instant::now();
    let mut fleet = Fleet::start(image, &dir.join("vms"), specs, limit)?;
    let q_b = fleet.guest("ballooned");
    let qmp = autoballoon_qmp::Qmp::connect(&q_b.qmp_ctl, Duration::from_secs(10)).map_err(|e| format!("ballooned: QMP: {e}"))?;
    let took = balloon_to(&qmp, Kib::from_mib_saturating(size), Duration::from_secs(180)).map_err(|e| format!("ballooned: balloon: {e}"))?;
    if took.is_none() {
        return Err(format!("ballooned: the balloon did not reach {size} MiB within 180 s (QEMU reports {} MiB)", qmp.query_balloon().unwrap_or(0) >> 20));
    }
    eprintln!("hostbench: e1: {size} MiB run {run}: booted and ballooned in {:.0} s", t.elapsed().as_secs_f64());
    let mut mem = Vec::new();
    for name in ["ballooned", "native"] {
        let q = fleet.guest(name);
        let out = q
            .console
            .run("[ -e /sys/block/vda ] || insmod /lib/modules/autoballoon/extra/virtio_blk.ko; echo 3 > /proc/sys/vm/drop_caches; cat /sys/block/vda/size; cat /proc/meminfo", Duration::from_secs(60))
            .map_err(|e| format!("{name}: disk: {e}"))?;
        let sectors: u64 = out.text.lines().find_map(|l| l.trim().parse().ok()).unwrap_or(0);
        if out.status != 0 || sectors * 512 < setup.disk_mib() << 20 {
            return Err(format!("{name}: no /dev/vda of {} MiB (exit {}): {}", setup.disk_mib(), out.status, out.text.trim()));
        }
        let meminfo: String = out.text.lines().filter(|l| l.contains(" kB")).map(|l| format!("{}\n", l.trim_end())).collect();
        mem.push((meminfo_mib(&out.text, "MemTotal").unwrap_or(0), meminfo_mib(&out.text, "MemAvailable").unwrap_or(0), meminfo));
    }
    let cmd = setup.command();
    let timeout = Duration::from_secs(setup.warm_s + setup.secs + 600);
    let texts: Vec<Result<String, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = ["ballooned", "native"]
            .iter()
            .map(|name| {
                let (q, cmd) = (fleet.guest(name), cmd.clone());
                s.spawn(move || q.console.run(&cmd, timeout).map(|o| o.text).map_err(|e| format!("{name}: {cmd}: {e}")))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a workload thread panicked".into()))).collect()
    });
    fleet.check_alive()?;
    let mut guests = Vec::new();
    for ((name, text), (total, avail, meminfo)) in ["ballooned", "native"].iter().zip(texts).zip(mem) {
        let text = text?;
        let result = FilesLine::parse(&text).ok_or_else(|| format!("{name}: no WORK kind=files line:\n{text}"))?;
        let configured_mib = if *name == "ballooned" { setup.big_mib } else { size };
        guests.push(GuestE1 { configured_mib, size_mib: size, mem_total_mib: total, mem_available_mib: avail, meminfo, result });
    }
    let native = guests.pop().expect("two guests");
    let ballooned = guests.pop().expect("two guests");
    drop(fleet);
    let _ = std::fs::remove_dir_all(dir);
    Ok(Pair { size_mib: size, run, ballooned_first, ballooned, native })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_lines_are_read() {
        let text = "noise\r\nWORK kind=files files=4096 kib=256 write_pct=10 ops=5000 reads=4500 writes=500 mib=1250.0 secs=40.00 ops_per_s=125.0 mib_per_s=31.25 sum=ab\r\n";
        assert_eq!(FilesLine::parse(text), Some(FilesLine { ops: 5000, secs: 40.0, mib_per_s: 31.25, ops_per_s: 125.0 }));
        assert_eq!(FilesLine::parse("WORK kind=files files=1 error=open"), None);
        assert_eq!(FilesLine::parse("WORK kind=mem mib=1 secs=1"), None);
    }

    #[test]
    fn overhead_per_size() {
        let g = |mib_per_s: f64| GuestE1 { configured_mib: 0, size_mib: 0, mem_total_mib: 0, mem_available_mib: 0, meminfo: String::new(), result: FilesLine { ops: 1, secs: 1.0, mib_per_s, ops_per_s: 1.0 } };
        let p = |size_mib, run, b, n| Pair { size_mib, run, ballooned_first: run % 2 == 0, ballooned: g(b), native: g(n) };
        let s = summary(&[p(256, 0, 9.0, 10.0), p(256, 1, 9.8, 10.0), p(512, 0, 20.0, 20.0)]);
        assert_eq!(s.len(), 2);
        assert!((s[0].1 - 0.94).abs() < 1e-9 && (s[0].2 - 0.06).abs() < 1e-9, "{s:?}");
        assert_eq!(s[1].3, vec![1.0]);
        let d = Setup::default();
        assert_eq!(d.disk_mib(), 1024);
        assert!(d.command().starts_with("work files /dev/vda 4096 256 20 "));
    }
}
