//! `make bench-host`: what the host controller costs and what the iBalloon balancer buys.
//!
//! * [`cost`]: the daemon's own CPU time (`/proc/PID/stat` utime + stime over a fixed
//!   window) and memory (VmRSS, VmHWM) while it manages 1, 4 and 16 VMs at the default 1 s
//!   interval (the iBalloon seed: about 1 % CPU at 1 s). The fake QEMUs and agents it
//!   manages for that live in `benches/host.rs` (the fakes are a dev-dependency); one real
//!   guest is measured the same way for comparison ([`cost::real_guest`]).
//! * [`mixed`]: the seed's mixed-workload experiment scaled to this machine.
//! * [`e1`]: the ESX paper's balloon overhead (ballooned against configured, file server).
//! * [`a1`]: the KVM automatic-ballooning seed's overcommitted host with swap, with and
//!   without the pressure balancer.
//!
//! [`report`] writes `bench/host/results.json` and `bench/host/RESULTS.md`.

pub mod a1;
pub mod cost;
pub mod e1;
pub mod mixed;
pub mod report;

use crate::status_kib;
use std::time::Instant;

/// CPU time of a process so far, from `/proc/PID/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    pub utime: u64,
    pub stime: u64,
}

impl CpuTicks {
    /// Reads fields 14 and 15 (utime, stime) of a `/proc/PID/stat` line. The command name
    /// (field 2) is in parentheses and may hold spaces and parentheses itself, so fields
    /// are counted after the last `)`.
    pub fn parse(stat: &str) -> Option<CpuTicks> {
        let rest = &stat[stat.rfind(')')? + 1..];
        // After the name: state (field 3) is the first word, so utime (14) is the 12th.
        let mut w = rest.split_whitespace().skip(11);
        Some(CpuTicks { utime: w.next()?.parse().ok()?, stime: w.next()?.parse().ok()? })
    }

    pub fn read(pid: u32) -> Option<CpuTicks> {
        CpuTicks::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    pub fn total(self) -> u64 {
        self.utime + self.stime
    }
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// What a process cost over a window: CPU as a percentage of one core, and its memory at
/// the end of the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessCost {
    pub window_s: f64,
    pub cpu_s: f64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl ProcessCost {
    pub fn cpu_percent(&self) -> f64 {
        if self.window_s > 0.0 { 100.0 * self.cpu_s / self.window_s } else { 0.0 }
    }

    /// Measures `pid` over `window` (the window's own duration is the measurement, not a
    /// wait for a condition), printing a progress line every 10 s.
    pub fn measure(pid: u32, window: std::time::Duration, what: &str) -> Result<ProcessCost, String> {
        let gone = || format!("process {pid} ({what}) is gone");
        let hz = clock_ticks_per_second() as f64;
        let (t0, c0) = (Instant::now(), CpuTicks::read(pid).ok_or_else(gone)?);
        let mut next = 10;
        while t0.elapsed() < window {
            std::thread::sleep(std::time::Duration::from_millis(250).min(window.saturating_sub(t0.elapsed())));
            if t0.elapsed().as_secs() >= next {
                let c = CpuTicks::read(pid).ok_or_else(gone)?;
                eprintln!("  {what}: {next:>3} s of {:.0} s, cpu {:.2} %", window.as_secs_f64(), 100.0 * (c.total() - c0.total()) as f64 / hz / t0.elapsed().as_secs_f64());
                next += 10;
            }
        }
        let c1 = CpuTicks::read(pid).ok_or_else(gone)?;
        let window_s = t0.elapsed().as_secs_f64();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|_| gone())?;
        Ok(ProcessCost {
            window_s,
            cpu_s: (c1.total().saturating_sub(c0.total())) as f64 / hz,
            rss_kib: status_kib(&status, "VmRSS").unwrap_or(0),
            hwm_kib: status_kib(&status, "VmHWM").unwrap_or(0),
        })
    }
}

/// The ratio `a / b`, or NaN when `b` is 0 (written as `null` in JSON).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { f64::NAN } else { a / b }
}

/// Touches `mib` MiB of fresh anonymous memory in transparent huge pages, as QEMU's guest
/// RAM is mapped, and gives it back; 0 does nothing.
///
/// For hosts that are virtual machines themselves, as this project's test machines are (a
/// Firecracker guest whose free memory its hypervisor takes back by free page reporting,
/// 8 MiB blocks): a host page free for a second or more costs the next process that
/// touches it an exit to that hypervisor, 0.44-1.41 s for 1.2 GiB against 0.12 s for pages
/// just freed. The pages given back here sit at the head of the host's free lists, so the
/// allocations right after it (a spike's) find pages the hypervisor backs, as every page is
/// on a bare-metal host.
pub fn warm_host_memory(mib: u64) -> Result<(), String> {
    let len = mib.checked_mul(1 << 20).and_then(|b| usize::try_from(b).ok()).ok_or(format!("warming the host's memory: {mib} MiB is more than this host can map"))?;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: a new private anonymous mapping, written only inside its `len` bytes and
    // unmapped before return; nothing else refers to it.
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        if p == libc::MAP_FAILED {
            return Err(format!("warming the host's memory: mmap of {mib} MiB failed"));
        }
        libc::madvise(p, len, libc::MADV_HUGEPAGE);
        let bytes = p.cast::<u8>();
        for off in (0..len).step_by(4096) {
            bytes.add(off).write_volatile(1);
        }
        libc::munmap(p, len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_last_parenthesis() {
        // A real line of this machine's /proc/PID/stat (sleep), then a name with ") (".
        let line = "29861 (sleep) S 29850 29861 29850 0 -1 4194304 94 0 0 0 7 3 0 0 20 0 1 0 1234 2146304 128 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(CpuTicks::parse(line), Some(CpuTicks { utime: 7, stime: 3 }));
        let odd = "42 (a) (b c) R 1 42 42 0 -1 0 0 0 0 0 1500 250 0 0 20 0 4 0 99 0 0";
        assert_eq!(CpuTicks::parse(odd).map(CpuTicks::total), Some(1750));
        assert_eq!(CpuTicks::parse("42 (short) S 1 2"), None);
        assert_eq!(CpuTicks::parse("no name here"), None);
    }

    #[test]
    fn cpu_percent_of_a_window() {
        let c = ProcessCost { window_s: 60.0, cpu_s: 0.6, rss_kib: 1, hwm_kib: 1 };
        assert!((c.cpu_percent() - 1.0).abs() < 1e-9);
        assert!(ratio(1.0, 0.0).is_nan());
    }

    #[test]
    fn warming_touches_and_gives_back() {
        assert!(warm_host_memory(8).is_ok());
        assert!(warm_host_memory(0).is_ok());
        assert!(warm_host_memory(u64::MAX).is_err(), "no size that overflows");
    }
}
