//! Fine reporting in the guest: core's [`FineReport`] decides, this writes free page
//! reporting's order (`/sys/module/page_reporting/parameters/page_reporting_order`): 0
//! once the guest has settled, so free pieces down to 4 KiB and the balloon's buffer go
//! back to the host, and the order the kernel had at the agent's start while the guest's
//! memory in use grows. With every backend: free page reporting is the guest kernel's, and
//! the device has it or not (`free-page-reporting=on`); without a reporting device the
//! order is never changed.
//!
//! The kernel reports only after a free reaches its free lists at the reporting order or
//! above, and a settled guest frees next to nothing there (its few frees stay on the
//! per-CPU lists): a new order alone reported nothing in 90 s. So on the switch the agent
//! compacts the guest's memory once (`/proc/sys/vm/compact_memory`: movable pieces merge
//! into larger blocks, and the pages moved are freed) and touches and frees [`NUDGE`] of
//! its own, which reaches the free lists. Done by hand 20 s after a spike, a sort and a
//! fill, the host's copy of a lean patched guest fell from 222 to 189 MiB within 60 s;
//! done by the agent at its switch, nothing moved (docs/spikes.md, *Free pieces*).
//!
//! At start the agent also has the patched kernel's balloon tell the host of its units on
//! free page reporting's queue, whole ([`report_whole_units`]).

use crate::logging::{info, Level, RateLimited};
use autoballoon_core::policy::{FineReport, FineReportRule, MemView};
use autoballoon_core::sample::Sample;
use autoballoon_core::Kib;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The order reported down to once the guest has settled: single pages.
pub const FINE_ORDER: u32 = 0;
/// How far the memory in use may grow and still count as steady.
pub const BAND: Kib = Kib::from_mib_saturating(16);
/// Memory the agent touches and frees to start a reporting pass: more than the per-CPU
/// lists hold, so that its frees reach the free lists.
pub const NUDGE: usize = 16 << 20;

/// Writes `text` to a file that must exist (a kernel interface: never created).
pub(crate) fn write_existing(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new().write(true).open(path)?.write_all(text.as_bytes())
}

/// Touches [`NUDGE`] bytes, a page at a time, and frees them.
fn nudge() {
    let mut v = vec![0u8; NUDGE];
    for i in (0..NUDGE).step_by(4096) {
        v[i] = 1;
    }
    std::hint::black_box(&v);
}

/// The parameter's place under `sys`.
pub fn param_path(sys: &Path) -> PathBuf {
    sys.join("module/page_reporting/parameters/page_reporting_order")
}

/// Memory the guest's programs and its page cache hold: what a job's growth raises,
/// whatever the balloon does (`AnonPages + Shmem + Active(file) + Inactive(file)`, else
/// `MemTotal − MemAvailable`).
pub fn in_use(m: &MemView) -> Kib {
    match (m.anon_and_shmem, m.file_cache) {
        (Some(a), Some(f)) => a.saturating_add(f),
        _ => m.total.saturating_sub(m.available),
    }
}

/// The order the kernel had, parsed from the parameter's text: `None` where no reporting
/// device registered (the kernel shows -1) or the text is not an order.
pub fn parse_order(text: &str) -> Option<u32> {
    text.trim().parse::<u32>().ok().filter(|&o| o <= 10)
}

/// Free page reporting's order now, read under `sys`: `None` where the guest has no
/// reporting device (or a kernel without reporting).
pub fn read_order(sys: &Path) -> Option<u32> {
    std::fs::read_to_string(param_path(sys)).ok().and_then(|t| parse_order(&t))
}

/// `virtio_balloon.report_blocks` under `sys`: the kernel series' switch (patch 24) that
/// tells the host of the balloon's 2 MiB units as one range each on free page reporting's
/// queue instead of a page frame number per 4 KiB page on the inflate queue.
pub fn units_param_path(sys: &Path) -> PathBuf {
    sys.join("module/virtio_balloon/parameters/report_blocks")
}

/// What [`report_whole_units`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum UnitsOutcome {
    /// Switched on; it was off (the kernel's default).
    Set,
    /// On already (the guest's command line, its administrator, an earlier start).
    Kept,
    /// A kernel without the switch (a stock kernel, or the series before patch 24).
    Absent,
}

/// Switches the balloon's units to whole ranges where the kernel has the switch.
///
/// QEMU discards each 4 KiB page the inflate queue names on its own, which splits the
/// host's transparent huge page at the first and leaves the unit to fault back 4 KiB at a
/// time when the allocator hook gives it to a program (223,000-247,000 host faults a
/// 1.2 GiB spike); a range on the reporting queue it discards whole, and the unit comes
/// back as one huge page (600-1,800 faults; docs/spikes.md, *Units that come back whole*).
/// The kernel uses the switch only with a device that offers free page reporting and
/// neither `MUST_TELL_HOST` nor a poison value; elsewhere it changes nothing.
pub fn report_whole_units(sys: &Path) -> std::io::Result<UnitsOutcome> {
    let param = units_param_path(sys);
    let text = match std::fs::read_to_string(&param) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(UnitsOutcome::Absent),
        Err(e) => return Err(e),
    };
    // A bool module parameter reads as Y or N.
    if matches!(text.trim(), "Y" | "y" | "1") {
        return Ok(UnitsOutcome::Kept);
    }
    write_existing(&param, "1\n")?;
    Ok(UnitsOutcome::Set)
}

pub struct FineReporting {
    param: PathBuf,
    /// `/proc/sys/vm/compact_memory`.
    compact: PathBuf,
    rule: FineReportRule,
    state: FineReport,
    /// The kernel's own order, restored while the guest grows.
    coarse: u32,
    fine: bool,
    failed: RateLimited,
}

impl FineReporting {
    /// The reporting, or `None` with the reason logged once: off by its flag, no
    /// parameter, or no reporting device.
    pub fn start(sys: &Path, proc: &Path, rule: FineReportRule) -> Option<FineReporting> {
        if rule.is_off() {
            info(format_args!("fine reporting off (--report-pieces-after-s 0)"));
            return None;
        }
        let param = param_path(sys);
        let Some(coarse) = read_order(sys) else {
            info(format_args!("fine reporting off: {} does not hold an order (no free page reporting device, or a kernel without it)", param.display()));
            return None;
        };
        if coarse == FINE_ORDER {
            info(format_args!("fine reporting off: free page reporting already reports down to order {coarse}"));
            return None;
        }
        info(format_args!(
            "fine reporting: free page reporting down to 4 KiB pieces once the memory in use has not grown by {} for {} s, order {coarse} while it grows",
            rule.band,
            rule.after.as_secs()
        ));
        Some(FineReporting { param, compact: proc.join("sys/vm/compact_memory"), rule, state: FineReport::default(), coarse, fine: false, failed: RateLimited::new(Level::Warn, Duration::from_secs(60)) })
    }

    /// Takes a sample; writes the order when it changes (one log line each).
    pub fn after_sample(&mut self, s: &Sample) {
        let Some(m) = &s.mem else { return };
        let used = in_use(m);
        let fine = self.state.observe(&self.rule, used, s.at);
        if fine == self.fine {
            return;
        }
        let order = if fine { FINE_ORDER } else { self.coarse };
        match write_existing(&self.param, &format!("{order}\n")) {
            Ok(()) => {
                self.fine = fine;
                if fine {
                    // A kernel without compaction has no file: the nudge alone then.
                    let compacted = write_existing(&self.compact, "1\n").is_ok();
                    nudge();
                    info(format_args!(
                        "free page reporting down to 4 KiB pieces (order {order}): memory in use steady at {used} for {} s; {}touched and freed {} to start a pass",
                        self.rule.after.as_secs(),
                        if compacted { "memory compacted, " } else { "" },
                        Kib((NUDGE / 1024) as u64)
                    ));
                } else {
                    info(format_args!("free page reporting back to order {order}: memory in use grew to {used}"));
                }
            }
            Err(e) => self.failed.log(Instant::now(), format_args!("cannot write {}: {e}", self.param.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::ProcTree;

    #[test]
    fn the_kernels_order_is_parsed_or_refused() {
        assert_eq!(parse_order("9\n"), Some(9));
        assert_eq!(parse_order("-1\n"), None, "no reporting device registered");
        for bad in ["", "x", "11", "99999999999"] {
            assert_eq!(parse_order(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_balloons_units_go_whole_where_the_kernel_has_the_switch() {
        let t = ProcTree::new("wholeunits", "linux-6.12-guest-idle");
        let sys = t.root.join("sys");
        let param = units_param_path(&sys);
        assert_eq!(report_whole_units(&sys).unwrap(), UnitsOutcome::Absent, "a stock kernel");
        assert!(!param.exists(), "never created");
        std::fs::create_dir_all(param.parent().unwrap()).unwrap();
        std::fs::write(&param, "N\n").unwrap();
        assert_eq!(report_whole_units(&sys).unwrap(), UnitsOutcome::Set);
        assert_eq!(std::fs::read_to_string(&param).unwrap(), "1\n");
        std::fs::write(&param, "Y\n").unwrap();
        assert_eq!(report_whole_units(&sys).unwrap(), UnitsOutcome::Kept, "the administrator's, or an earlier start's");
        assert_eq!(std::fs::read_to_string(&param).unwrap(), "Y\n", "not written again");
    }

    #[test]
    fn the_order_follows_the_guests_use() {
        let t = ProcTree::new("finereport", "linux-6.12-guest-idle");
        let sys = t.root.join("sys");
        let param = param_path(&sys);
        let rule = FineReportRule { after: Duration::from_secs(10), band: BAND };
        let proc = &t.proc;
        assert!(FineReporting::start(&sys, proc, rule).is_none(), "no parameter");
        std::fs::create_dir_all(param.parent().unwrap()).unwrap();
        std::fs::write(&param, "-1\n").unwrap();
        assert!(FineReporting::start(&sys, proc, rule).is_none(), "no reporting device");
        std::fs::write(&param, "9\n").unwrap();
        assert!(FineReporting::start(&sys, proc, FineReportRule::OFF).is_none(), "off");
        let mut f = FineReporting::start(&sys, proc, rule).expect("on");
        let mem = MemView::from_meminfo(&autoballoon_core::procfs::parse_meminfo(&crate::testutil::fixture("linux-6.12-guest-idle", "meminfo")).unwrap()).unwrap();
        let at = |secs: u64, extra_mib: u64| {
            let mut m = mem;
            m.anon_and_shmem = m.anon_and_shmem.map(|a| a.saturating_add(Kib::from_mib_saturating(extra_mib)));
            Sample { at: Duration::from_secs(secs), mem: Some(m), ..Sample::default() }
        };
        let order = || std::fs::read_to_string(&param).unwrap().trim().to_string();
        f.after_sample(&at(0, 0));
        f.after_sample(&at(5, 0));
        assert_eq!(order(), "9", "not settled yet");
        f.after_sample(&at(10, 0));
        assert_eq!(order(), "0", "settled for 10 s: fine");
        assert!(!proc.join("sys/vm/compact_memory").exists(), "no such file in the tree: not created");
        std::fs::create_dir_all(proc.join("sys/vm")).unwrap();
        std::fs::write(proc.join("sys/vm/compact_memory"), "").unwrap();
        f.after_sample(&at(11, 100));
        assert_eq!(order(), "9", "a job grows: the kernel's order again");
        f.after_sample(&at(21, 0));
        assert_eq!(order(), "0", "settled again");
        assert_eq!(std::fs::read_to_string(proc.join("sys/vm/compact_memory")).unwrap(), "1\n", "and compacted");
    }
}
