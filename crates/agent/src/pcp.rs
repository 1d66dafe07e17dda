//! The per-CPU free lists, kept short (`vm.percpu_pagelist_high_fraction`).
//!
//! Each CPU keeps pages it freed on a list of its own, up to the list's `high` mark, to
//! hand them out again without the zone's lock. Those pages are free to the guest and
//! missing from everything that gives free memory back: free page reporting and free page
//! hinting both take pages from the buddy lists only, and the balloon's order-0
//! allocations never reach a 2 MiB page the list holds. Linux 6.1 sizes `high` from the
//! zone's low watermark: 13,971 pages (54 MiB) for a 2 GiB guest's zone, with no decay
//! (from 6.7 an idle list shrinks by itself). A spike that frees its transparent huge pages
//! leaves up to that much on the list, dirty in the host, until the next spike takes it:
//! a migration 4 s after one sent 145-154 MiB where the same guest idle sent 108.
//!
//! At start the agent sets the fraction so that each CPU's `high` is about
//! [`PER_CPU_DEFAULT`] (the kernel keeps it at four batches, about 1 MiB, at least),
//! unless the guest's administrator set a fraction already. The same migration then sent
//! 109.6-111.6 MiB (docs/migration.md, *The per-CPU free lists*). The kernel's sizing
//! returns with `sysctl vm.percpu_pagelist_high_fraction=0`; `--pcp-high-kib 0` leaves it.

use autoballoon_core::units::{Kib, Pages};
use std::path::Path;

/// Each CPU's list in the agent's default, about the kernel's own floor (four batches of
/// 63 pages): a list then holds at most one 2 MiB page and a little more after a spike.
pub const PER_CPU_DEFAULT: Kib = Kib::from_mib_saturating(1);
/// The kernel refuses a smaller fraction (`MIN_PERCPU_PAGELIST_HIGH_FRACTION`): a larger
/// `high` than this cannot be asked for.
pub const MIN_FRACTION: u64 = 8;

/// The fraction of a zone's pages that makes each of `cpus` CPUs' lists about `per_cpu`:
/// the kernel sets `high` to `managed pages / fraction / CPUs`. `total` is the guest's
/// memory (`MemTotal`), an upper bound of any zone's; `None` for no CPU or an empty list.
pub fn fraction_for(total: Kib, cpus: u32, per_cpu: Kib) -> Option<u64> {
    let per_cpu = per_cpu.to_pages_floor().0;
    if cpus == 0 || per_cpu == 0 {
        return None;
    }
    let lists = per_cpu.saturating_mul(u64::from(cpus));
    let fraction = total.to_pages_floor().0.div_ceil(lists);
    Some(fraction.clamp(MIN_FRACTION, i32::MAX as u64))
}

/// The number of CPUs in a kernel CPU list (`/sys/devices/system/cpu/online`: `0-3,6`);
/// `None` if the text is not such a list.
pub fn parse_cpu_list(text: &str) -> Option<u32> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut n = 0u32;
    for part in text.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?),
            None => {
                let c = part.parse::<u32>().ok()?;
                (c, c)
            }
        };
        n = n.checked_add(hi.checked_sub(lo)?.checked_add(1)?)?;
    }
    Some(n)
}

/// What [`bound`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The fraction was written; the kernel's sizing (0) or the value it replaced.
    Set { fraction: u64, was: u64, per_cpu: Pages, cpus: u32 },
    /// The guest's administrator set a fraction: left as it is.
    Kept(u64),
    /// A kernel without the setting (before 5.14).
    Absent,
}

/// Why [`bound`] could not set the fraction.
#[derive(Debug, thiserror::Error)]
pub enum PcpError {
    /// cannot read {0}: {1}
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// {0} does not hold {1}: {2:?}
    #[error("{0} does not hold {1}: {2:?}")]
    Malformed(String, &'static str, String),
    /// cannot write {0}: {1}
    #[error("cannot write {0}: {1}")]
    Write(String, std::io::Error),
}

/// Sets `vm.percpu_pagelist_high_fraction` under `proc` for lists of about `per_cpu` on
/// the CPUs `sys` lists as online, the guest's size read from `proc`'s meminfo.
pub fn bound(proc: &Path, sys: &Path, per_cpu: Kib) -> Result<Outcome, PcpError> {
    let param = proc.join("sys/vm/percpu_pagelist_high_fraction");
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| PcpError::Read(p.display().to_string(), e));
    let was = match std::fs::read_to_string(&param) {
        Ok(t) => t.trim().parse::<u64>().map_err(|_| PcpError::Malformed(param.display().to_string(), "a fraction", t))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Outcome::Absent),
        Err(e) => return Err(PcpError::Read(param.display().to_string(), e)),
    };
    if was != 0 {
        return Ok(Outcome::Kept(was));
    }
    let online = sys.join("devices/system/cpu/online");
    let text = read(&online)?;
    let cpus = parse_cpu_list(&text).ok_or_else(|| PcpError::Malformed(online.display().to_string(), "a CPU list", text.clone()))?;
    let meminfo = proc.join("meminfo");
    let text = read(&meminfo)?;
    let total = autoballoon_core::procfs::parse_meminfo(&text)
        .ok()
        .and_then(|m| m.kib("MemTotal").ok())
        .ok_or_else(|| PcpError::Malformed(meminfo.display().to_string(), "MemTotal", String::new()))?;
    let fraction = fraction_for(total, cpus, per_cpu).ok_or_else(|| PcpError::Malformed(online.display().to_string(), "a CPU", String::new()))?;
    crate::report::write_existing(&param, &format!("{fraction}\n")).map_err(|e| PcpError::Write(param.display().to_string(), e))?;
    Ok(Outcome::Set { fraction, was, per_cpu: per_cpu.to_pages_floor(), cpus })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_counted_or_refused() {
        assert_eq!(parse_cpu_list("0\n"), Some(1));
        assert_eq!(parse_cpu_list("0-3\n"), Some(4));
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(7));
        for bad in ["", "\n", "x", "3-1", "0-", "-1", "0,,1", "0-4294967295,1-4294967295"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_fraction_makes_each_list_about_the_size_asked() {
        // A 2 GiB guest (a MemTotal of the test bed's stock guest), 1 CPU, 1 MiB lists:
        // 503,597 pages / 256 pages, rounded up (the agent's log line in that guest).
        let total = Kib(2_014_388);
        assert_eq!(fraction_for(total, 1, PER_CPU_DEFAULT), Some(1968));
        assert_eq!(fraction_for(total, 2, PER_CPU_DEFAULT), Some(984), "two lists share the zone");
        assert_eq!(fraction_for(Kib::from_gib_saturating(64), 4, PER_CPU_DEFAULT), Some(16_384));
        assert_eq!(fraction_for(Kib::from_mib_saturating(64), 16, PER_CPU_DEFAULT), Some(MIN_FRACTION), "the kernel's minimum");
        assert_eq!(fraction_for(Kib(u64::MAX), 1, Kib(4)), Some(i32::MAX as u64), "an int for the kernel");
        assert_eq!(fraction_for(total, 0, PER_CPU_DEFAULT), None);
        assert_eq!(fraction_for(total, 1, Kib(3)), None, "less than a page");
    }

    fn tree(name: &str, fraction: Option<&str>, online: &str) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("ab-pcp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("proc/sys/vm")).unwrap();
        std::fs::create_dir_all(root.join("sys/devices/system/cpu")).unwrap();
        std::fs::write(root.join("proc/meminfo"), crate::testutil::fixture("linux-6.12-guest-idle", "meminfo")).unwrap();
        std::fs::write(root.join("sys/devices/system/cpu/online"), online).unwrap();
        if let Some(f) = fraction {
            std::fs::write(root.join("proc/sys/vm/percpu_pagelist_high_fraction"), f).unwrap();
        }
        root
    }

    #[test]
    fn the_kernels_sizing_is_replaced_and_an_administrators_kept() {
        let root = tree("set", Some("0\n"), "0-1\n");
        let param = root.join("proc/sys/vm/percpu_pagelist_high_fraction");
        let Ok(Outcome::Set { fraction, was: 0, per_cpu: Pages(256), cpus: 2 }) = bound(&root.join("proc"), &root.join("sys"), PER_CPU_DEFAULT) else { panic!("not set") };
        assert!(fraction > MIN_FRACTION);
        assert_eq!(std::fs::read_to_string(&param).unwrap(), format!("{fraction}\n"));
        // Set once: a second start (the agent restarted) keeps it, as an administrator's.
        assert_eq!(bound(&root.join("proc"), &root.join("sys"), PER_CPU_DEFAULT).unwrap(), Outcome::Kept(fraction));
        let _ = std::fs::remove_dir_all(&root);

        let root = tree("absent", None, "0\n");
        assert_eq!(bound(&root.join("proc"), &root.join("sys"), PER_CPU_DEFAULT).unwrap(), Outcome::Absent);
        let _ = std::fs::remove_dir_all(&root);

        let root = tree("bad", Some("0\n"), "zero\n");
        let e = bound(&root.join("proc"), &root.join("sys"), PER_CPU_DEFAULT).unwrap_err().to_string();
        assert!(e.contains("does not hold a CPU list: \"zero\\n\""), "{e}");
        assert_eq!(std::fs::read_to_string(root.join("proc/sys/vm/percpu_pagelist_high_fraction")).unwrap(), "0\n", "nothing written");
        let _ = std::fs::remove_dir_all(&root);
    }
}
