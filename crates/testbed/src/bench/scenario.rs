//! One migration at one moment of a guest's life: bring the guest to the moment, migrate it
//! by plain QMP (as another tool would), and check the destination.

use super::fleet::{Fleet, Images};
use super::model::{Config, CrashRecord, MigrationRecord, Moment};
use crate::guest::{balloon_to, fill, health, watch_balloon, SpikeRun};
use super::model::SourceHost;
use crate::hostbench::{clock_ticks_per_second, CpuTicks};
use crate::{host_memory_of, HostMemory};
use crate::{start_migration, step, wait_for, wait_migration, wait_settled, wait_vm_settled, Migrated};
use autoballoon_core::Kib;
use autoballoon_qmp::{MigrationStatus, Qmp};
use std::time::{Duration, Instant};

/// The workload and link settings shared by every point.
#[derive(Debug, Clone)]
pub struct Setup {
    /// What the idle moment writes and frees, MiB, for the run's main guest size; other
    /// sizes (the sweep) write the same share of their memory.
    pub fill_mib: u64,
    /// The run's main guest size, MiB.
    pub memory_mib: u64,
    pub idle_s: u64,
    pub spike_threads: u32,
    pub spike_mib: u64,
    pub spike_hold_s: u64,
    /// The link for the idle and after-spike moments, and the slow one for the spike
    /// during a migration, MiB/s.
    pub bandwidth_mib: u64,
    pub slow_mib: u64,
    /// The fixed balloon size of [`Config::DooFixed`], MiB.
    pub fixed_mib: u64,
    /// Host memory touched right before a migration with a spike during it, MiB
    /// ([`crate::hostbench::warm_host_memory`]); 0: none.
    pub warm_host_mib: u64,
}

impl Setup {
    /// What the idle moment writes and frees in a guest of `memory`.
    pub fn fill_mib(&self, memory: Kib) -> u64 {
        let m = memory.0 / 1024;
        if m == self.memory_mib || self.memory_mib == 0 {
            self.fill_mib
        } else {
            self.fill_mib * m / self.memory_mib
        }
    }

    fn spike_cmd(&self) -> String {
        format!("spike {} {} {} 0 1", self.spike_threads, self.spike_mib, self.spike_hold_s)
    }
}

/// The guest's counters read before and after the spike during a migration: direct
/// reclaim and its stalls, kswapd and the shrinkers (which give free page hinting's held
/// pages back), compaction, huge pages and their fallbacks, refaults, deflate-on-oom, and
/// where the guest's CPU time went (`cpu_*`: /proc/stat's first line, in USER_HZ ticks).
pub const SPIKE_VMSTAT: [&str; 18] = [
    "allocstall_normal", "allocstall_movable", "pgscan_direct", "pgscan_kswapd", "pgsteal_direct", "compact_stall", "thp_fault_alloc", "thp_fault_fallback", "pgmajfault",
    "workingset_refault_file", "slabs_scanned", "pageoutrun", "balloon_deflate", "pgfault", "cpu_user", "cpu_system", "cpu_idle", "cpu_softirq",
];

/// `cmd` run between two readings of [`SPIKE_VMSTAT`]'s counters, printed as `vmstat0 NAME
/// N` and `vmstat1 NAME N` lines around its output; exits with `cmd`'s status.
fn with_vmstat(cmd: &str) -> String {
    let pat = SPIKE_VMSTAT.iter().filter(|k| !k.starts_with("cpu_")).copied().collect::<Vec<_>>().join("|");
    let cpu = "read -r _ u _ s i _ _ q _ < /proc/stat; printf 'cpu_user %s\\ncpu_system %s\\ncpu_idle %s\\ncpu_softirq %s\\n' $u $s $i $q";
    let read = |tag: &str| format!("{{ grep -E '^({pat}) ' /proc/vmstat; {cpu}; }} | sed 's/^/{tag} /'");
    format!("({}; {cmd}; r=$?; {}; exit $r)", read("vmstat0"), read("vmstat1"))
}

/// How much each counter rose between the `vmstat0` and `vmstat1` lines of `text`
/// ([`with_vmstat`]), in [`SPIKE_VMSTAT`]'s order; a counter missing from either reading
/// (a kernel without it, output cut short) is left out.
pub fn vmstat_rise(text: &str) -> Vec<(String, u64)> {
    let reading = |tag: &str| -> std::collections::HashMap<&str, u64> {
        text.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some(tag)).then_some(())?;
                Some((w.next()?, w.next()?.parse().ok()?))
            })
            .collect()
    };
    let (before, after) = (reading("vmstat0"), reading("vmstat1"));
    SPIKE_VMSTAT.iter().filter_map(|&k| Some((k.to_string(), after.get(k)?.saturating_sub(*before.get(k)?)))).collect()
}

/// Where the spike started during a migration writes its output in the guest.
const DURING_LOG: &str = "/tmp/bench-spike.log";
const DURING_RC: &str = "/tmp/bench-spike.rc";

/// A QMP session on `q`'s second socket (the one whoever drives the VM uses).
pub(super) fn qmp(q: &crate::Qemu) -> Result<Qmp, String> {
    step("QMP", Qmp::connect_with_retry(&q.qmp_ctl, Instant::now() + Duration::from_secs(10)))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// Waits until the balloon stops moving, for the configurations that move it; a guest that
/// does not settle is measured anyway (with a note).
pub(crate) fn settle(fleet: &Fleet, c: Config, ctl: &Qmp) {
    let r = match fleet.vm(c) {
        Some(vm) => wait_vm_settled(&vm, Duration::from_secs(90)).map(|_| ()),
        None if c.ballooning() => wait_settled(Duration::from_secs(90), || Kib(ctl.query_balloon().unwrap_or(0) / 1024)).map(|_| ()).ok_or_else(|| "did not settle in 90 s".to_string()),
        None => Ok(()),
    };
    if let Err(e) = r {
        println!("[bench]   note: {}: {e}; measuring anyway", c.key());
    }
}

/// The fixed size of [`Config::DooFixed`], asked for again (deflate-on-oom gave pages back).
fn fixed_size(setup: &Setup, ctl: &Qmp) -> Result<(), String> {
    let r = step("balloon", balloon_to(ctl, Kib::from_mib_saturating(setup.fixed_mib), Duration::from_secs(60)))?;
    if r.is_none() {
        println!("[bench]   note: doo: the balloon did not reach {} MiB in 60 s", setup.fixed_mib);
    }
    Ok(())
}

fn run_spike(q: &crate::Qemu, setup: &Setup) -> Result<SpikeRun, String> {
    let o = step("spike", q.console.run(&setup.spike_cmd(), Duration::from_secs(300)))?;
    Ok(SpikeRun::parse(&o.text, o.status))
}

/// A spike's run and the guest's sizes during it: (seconds since its start, MiB).
type WatchedSpike = (SpikeRun, Vec<(f64, f64)>);

/// [`run_spike`], with the guest's size (QMP `actual`) sampled every 100 ms meanwhile:
/// (seconds since the spike started, MiB), for the reaction time.
fn run_spike_watched(q: &crate::Qemu, setup: &Setup, ctl: &Qmp) -> Result<WatchedSpike, String> {
    let (s, sizes) = watch_balloon(ctl, Duration::from_millis(100), || run_spike(q, setup));
    s.map(|s| (s, sizes.into_iter().map(|(t, b)| (t, mib(b))).collect()))
}

/// Brings `c`'s guest to moment `m` (for [`Moment::DuringSpike`]: settled, the spike comes
/// later; `spiked`: a spike ran in the guest before). Returns the spike's run and the
/// guest's sizes during it, if one ran.
fn reach(fleet: &Fleet, c: Config, m: Moment, setup: &Setup, ctl: &Qmp, q: &crate::Qemu, spiked: bool) -> Result<Option<WatchedSpike>, String> {
    if c == Config::DooFixed {
        fixed_size(setup, ctl)?;
    }
    match m {
        Moment::Idle | Moment::LongIdle => {
            // Host-controlled guests run the fill settled, their controller running, as a
            // deployed guest would: the controller grows the guest for it and keeps the
            // headroom a recent need earns. (With the controller paused for the fill, its
            // first sample after resuming came from before or after the free by chance:
            // the guest then kept a 1.5 GiB headroom or none, 111-123 MiB sent or 100.)
            settle(fleet, c, ctl);
            fill(q, setup.fill_mib(fleet.memory))?;
            let idle = if m == Moment::LongIdle { super::model::LONG_IDLE_S } else { setup.idle_s };
            std::thread::sleep(Duration::from_secs(idle));
            Ok(None)
        }
        Moment::AfterSpike(ms) => {
            settle(fleet, c, ctl);
            let s = run_spike_watched(q, setup, ctl)?;
            // The moment itself: a deliberate delay after the spike's free.
            std::thread::sleep(Duration::from_millis(u64::from(ms)));
            Ok(Some(s))
        }
        Moment::DuringSpike => {
            settle(fleet, c, ctl);
            if !spiked {
                // A whole run's guests come to this moment after the after-spike moments'
                // spikes (the stock default keeping the headroom they earned); a fresh one
                // (a resumed run measuring this moment again, a reboot) would come lean.
                // So it runs the spike first and rests until free page reporting drained.
                run_spike(q, setup)?;
                std::thread::sleep(Duration::from_secs(super::model::LONG_IDLE_S));
                settle(fleet, c, ctl);
            }
            Ok(None)
        }
    }
}

/// Starts the migration, and for [`Moment::DuringSpike`] the spike once it is under way.
fn migrate_at(m: Moment, setup: &Setup, ctl: &Qmp, q: &crate::Qemu, dest: &crate::Qemu) -> Result<Migrated, String> {
    let bw = if m == Moment::DuringSpike { setup.slow_mib } else { setup.bandwidth_mib } << 20;
    let spike = (m == Moment::DuringSpike).then(|| with_vmstat(&setup.spike_cmd()));
    if spike.is_some() {
        crate::hostbench::warm_host_memory(setup.warm_host_mib)?;
    }
    migrate_with_spike(ctl, q, dest, bw, spike.as_deref(), Duration::from_secs(900))
}

/// Migrates `q`'s guest to `dest` at `bandwidth` bytes/s; with `spike`, that command
/// starts in the guest's background once the migration is active (its output and exit
/// status go to files the destination reads back: [`during_spike_output`]).
pub(crate) fn migrate_with_spike(ctl: &Qmp, q: &crate::Qemu, dest: &crate::Qemu, bandwidth: u64, spike: Option<&str>, timeout: Duration) -> Result<Migrated, String> {
    let Some(spike) = spike else {
        return step("migration", crate::migrate(ctl, dest, bandwidth, timeout));
    };
    step("spike files", q.console.run(&format!("rm -f {DURING_LOG} {DURING_RC}"), Duration::from_secs(30)))?;
    let start = step("migration", start_migration(ctl, dest, bandwidth))?;
    wait_for(Duration::from_secs(30), Duration::from_millis(50), || ctl.query_migrate().is_ok_and(|i| i.status == MigrationStatus::Active)).ok_or("the migration did not become active in 30 s")?;
    step("spike", q.console.spawn(&format!("{spike} > {DURING_LOG} 2>&1; echo $? > {DURING_RC}")))?;
    step("migration", wait_migration(ctl, dest, start, timeout))
}

/// The source QEMU's host-side counters at one moment ([`SourceHost`]'s two ends).
struct SourceReading {
    memory: HostMemory,
    cpu: CpuTicks,
}

impl SourceReading {
    fn take(q: &crate::Qemu) -> Option<SourceReading> {
        let pid = q.pid();
        Some(SourceReading { memory: host_memory_of(pid, q.spec.memory)?, cpu: CpuTicks::read(pid)? })
    }

    /// What the host did for the source between `earlier` and this reading.
    fn since(&self, earlier: &SourceReading) -> SourceHost {
        let ticks = clock_ticks_per_second() as f64;
        SourceHost {
            minor_faults: self.memory.faults.0.saturating_sub(earlier.memory.faults.0),
            user_s: self.cpu.utime.saturating_sub(earlier.cpu.utime) as f64 / ticks,
            system_s: self.cpu.stime.saturating_sub(earlier.cpu.stime) as f64 / ticks,
            huge_mib: (earlier.memory.ram_huge.mib_f64(), self.memory.ram_huge.mib_f64()),
            rss_mib: (earlier.memory.ram_rss.mib_f64(), self.memory.ram_rss.mib_f64()),
        }
    }
}

/// The spike started during the migration, read on the destination once it ended; `None`
/// if the destination's shell does not answer (a crashed guest: no long wait).
fn during_spike(dest: &crate::Qemu) -> Option<(SpikeRun, Vec<(String, u64)>)> {
    during_spike_output(dest, Duration::from_secs(180)).map(|(text, status)| (SpikeRun::parse(&text, status), vmstat_rise(&text)))
}

/// What the spike [`migrate_with_spike`] started printed, and its exit status, once it
/// ended (waiting up to `timeout`); `None` if the destination's shell does not answer.
pub(crate) fn during_spike_output(dest: &crate::Qemu, timeout: Duration) -> Option<(String, i32)> {
    dest.console.run("true", Duration::from_secs(20)).ok()?;
    let cmd = format!("(while [ ! -e {DURING_RC} ]; do sleep 0.2; done; cat {DURING_LOG}; exit $(cat {DURING_RC}))");
    dest.console.run(&cmd, timeout).ok().map(|o| (o.text, o.status))
}

/// If `c`'s guest died since its last measurement (its QEMU exited: `panic=-1`,
/// `-no-reboot`), a record of it, charged to that measurement, and a fresh boot.
pub fn crashed(fleet: &mut Fleet, images: &Images, c: Config) -> Result<Option<CrashRecord>, String> {
    let line = fleet.line;
    let g = fleet.guest(c);
    if g.q.alive() {
        return Ok(None);
    }
    let h = health(&g.q, Duration::from_secs(1));
    let (kernel_errors, _, _) = g.seen.news(&h);
    let rec = CrashRecord { qemu: line, config: c, after: g.last, kernel_errors };
    fleet.reboot(c, images)?;
    Ok(Some(rec))
}

/// One migration of `c`'s guest at moment `m`. Failures become records (not completed,
/// with the error); a guest left unhealthy is replaced by a fresh boot.
pub fn point(fleet: &mut Fleet, images: &Images, setup: &Setup, c: Config, m: Moment, run: u32) -> Result<MigrationRecord, String> {
    let bandwidth_mib = if m == Moment::DuringSpike { setup.slow_mib } else { setup.bandwidth_mib };
    let mut rec = MigrationRecord {
        qemu: fleet.line, qemu_version: fleet.version.clone(), config: c, moment: m, run, bandwidth_mib, completed: false, error: None,
        sent_mib: f64::NAN, total_s: f64::NAN, downtime_ms: None, normal_mib: None, zero_pages: None, size_mib: f64::NAN, rss_mib: None, spike_alloc_s: None, spike_completed: None, spike_sizes: vec![], spike_vmstat: vec![], source_host: None, memory_mib: None,
        oom_kills: 0, shell: false, kernel_errors: vec![], tainted: None, measured: None,
    };
    let (dest, _) = fleet.destination(c, images)?;
    let outcome = (|| -> Result<Migrated, String> {
        let g = fleet.guests.iter().find(|g| g.config == c).expect("a guest per configuration");
        let ctl = qmp(&g.q)?;
        let spike = reach(fleet, c, m, setup, &ctl, &g.q, g.spiked)?;
        if let Some((s, sizes)) = spike {
            rec.spike_alloc_s = s.alloc_s;
            rec.spike_completed = Some(s.completed);
            rec.spike_sizes = sizes;
        }
        rec.size_mib = mib(ctl.query_balloon().unwrap_or(0));
        rec.rss_mib = g.q.rss().map(|k| k.mib_f64());
        let before = SourceReading::take(&g.q);
        let done = migrate_at(m, setup, &ctl, &g.q, &dest)?;
        rec.source_host = before.zip(SourceReading::take(&g.q)).map(|(a, b)| b.since(&a));
        Ok(done)
    })();
    fleet.resume(c);
    fleet.guest(c).last = Some((m, run));
    // Every moment but the idle ones ran a spike (or reached the during moment's own).
    fleet.guest(c).spiked |= !matches!(m, Moment::Idle | Moment::LongIdle);
    match outcome {
        Ok(done) => {
            rec.completed = true;
            rec.sent_mib = mib(done.bytes_sent());
            rec.total_s = done.seconds();
            rec.downtime_ms = done.info.downtime_ms;
            rec.normal_mib = done.info.ram_normal_bytes.map(mib);
            rec.zero_pages = done.info.ram_duplicate_pages;
            if m == Moment::DuringSpike {
                let s = during_spike(&dest);
                rec.spike_alloc_s = s.as_ref().and_then(|(s, _)| s.alloc_s);
                rec.spike_completed = Some(s.as_ref().is_some_and(|(s, _)| s.completed));
                rec.spike_vmstat = s.map(|(_, v)| v).unwrap_or_default();
            }
            let h = health(&dest, Duration::from_secs(30));
            fleet.moved(c, dest);
            rec.shell = h.shell;
            (rec.kernel_errors, rec.tainted, rec.oom_kills) = fleet.guest(c).seen.news(&h);
            if !rec.healthy() {
                fleet.reboot(c, images)?;
            }
        }
        Err(e) => {
            rec.error = Some(e);
            drop(dest);
            let h = health(&fleet.guest(c).q, Duration::from_secs(30));
            rec.shell = h.shell;
            (rec.kernel_errors, rec.tainted, rec.oom_kills) = fleet.guest(c).seen.news(&h);
            // The source may still be mid-migration or hurt: start over from a fresh boot.
            fleet.reboot(c, images)?;
        }
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spike_command_is_read_between_two_vmstat_readings() {
        let c = with_vmstat("spike 3 400 2 0 1");
        assert!(c.starts_with("({ grep -E '^(allocstall_normal|allocstall_movable|") && c.contains("sed 's/^/vmstat0 /'; spike 3 400 2 0 1; r=$?; { grep"), "{c}");
        assert!(c.contains("|pgfault) ' /proc/vmstat; read -r _ u _ s i _ _ q _ < /proc/stat;"), "the cpu_* counters come from /proc/stat, not /proc/vmstat: {c}");
        assert!(c.ends_with("sed 's/^/vmstat1 /'; exit $r)"), "{c}");
    }

    #[test]
    fn vmstat_rises_from_a_real_reading() {
        // The two readings around a 300 MiB touch on this machine's host (6.18), the
        // command's own output.
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/spike-vmstat.txt")).unwrap();
        let r = vmstat_rise(&text);
        assert_eq!(r.len(), SPIKE_VMSTAT.len(), "{r:?}");
        assert_eq!(r[0], ("allocstall_normal".to_string(), 0), "in SPIKE_VMSTAT's order, not the file's");
        assert!(r.contains(&("thp_fault_alloc".to_string(), 25)) && r.contains(&("pgfault".to_string(), 87_659)), "{r:?}");
        assert!(r.contains(&("cpu_system".to_string(), 41)) && r.contains(&("cpu_user".to_string(), 30)), "{r:?}");
        // A reading cut short leaves its counters out; a counter never goes down.
        let cut: String = text.lines().filter(|l| !l.starts_with("vmstat1 pgfault")).map(|l| format!("{l}\n")).collect();
        assert!(!vmstat_rise(&cut).iter().any(|(k, _)| k == "pgfault"));
        assert_eq!(vmstat_rise("vmstat0 pgmajfault 9\nvmstat1 pgmajfault 3\n"), vec![("pgmajfault".to_string(), 0)]);
        assert!(vmstat_rise("SPIKE done cycles=1 failed=0").is_empty());
    }
}
