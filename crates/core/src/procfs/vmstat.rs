use super::{malformed, ParseError};
use crate::units::Pages;
use std::collections::BTreeMap;

/// /proc/vmstat: event counters and page counts, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vmstat {
    counters: BTreeMap<String, u64>,
}

impl Vmstat {
    /// The counters the methods below read: what a sample needs of the report.
    pub const SAMPLED: &'static [&'static str] = &["oom_kill", "workingset_refault_file", "workingset_refault", "pswpin", "pswpout", "balloon_inflate", "balloon_deflate"];

    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters.get(name).copied()
    }
    /// OOM kills since boot (`oom_kill`, absent on old kernels).
    pub fn oom_kills(&self) -> Option<u64> {
        self.get("oom_kill")
    }
    /// File pages read again after they were evicted, since boot: `workingset_refault_file`
    /// (Linux 5.9 on), else `workingset_refault` (file pages only before 5.9).
    pub fn file_refaults(&self) -> Option<u64> {
        self.get("workingset_refault_file").or_else(|| self.get("workingset_refault"))
    }
    /// Pages swapped in and out since boot.
    pub fn swap_ins(&self) -> Option<u64> {
        self.get("pswpin")
    }
    pub fn swap_outs(&self) -> Option<u64> {
        self.get("pswpout")
    }
    /// Pages the balloon took and gave back since boot (CONFIG_MEMORY_BALLOON).
    pub fn balloon_inflated(&self) -> Option<u64> {
        self.get("balloon_inflate")
    }
    pub fn balloon_deflated(&self) -> Option<u64> {
        self.get("balloon_deflate")
    }
    /// Pages in the balloon now, as the guest counts them: inflated minus deflated since
    /// boot. Read together with /proc/meminfo it gives the guest size that MemAvailable
    /// belongs to, unlike the host's `actual`, which may be newer.
    pub fn balloon_pages(&self) -> Option<Pages> {
        Some(Pages(self.balloon_inflated()?.saturating_sub(self.balloon_deflated()?)))
    }
    pub fn len(&self) -> usize {
        self.counters.len()
    }
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }
}

/// Parses the text of /proc/vmstat: lines of `name value`.
pub fn parse_vmstat(text: &str) -> Result<Vmstat, ParseError> {
    parse_vmstat_keeping(text, |_| true)
}

/// [`parse_vmstat`] keeping only the counters named in `names`: every line is checked as
/// there, but a reader that samples several times a second (the guest agent) does not
/// allocate for the ~170 counters it does not read.
pub fn parse_vmstat_only(text: &str, names: &[&str]) -> Result<Vmstat, ParseError> {
    parse_vmstat_keeping(text, |name| names.contains(&name))
}

fn parse_vmstat_keeping(text: &str, keep: impl Fn(&str) -> bool) -> Result<Vmstat, ParseError> {
    let mut counters = BTreeMap::new();
    let mut any = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(value), None) = (words.next(), words.next(), words.next()) else {
            return Err(malformed(n, "name value", line));
        };
        // Some counters are signed internally and can transiently read negative.
        let value = match value.parse::<u64>() {
            Ok(v) => v,
            Err(_) if value.parse::<i64>().is_ok() => 0,
            Err(_) => return Err(malformed(n, "a number", line)),
        };
        any = true;
        if keep(name) {
            counters.insert(name.to_string(), value);
        }
    }
    if !any {
        return Err(ParseError::Empty);
    }
    Ok(Vmstat { counters })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::fixtures;
    use proptest::prelude::*;

    #[test]
    fn parses_counters() {
        let v = parse_vmstat("nr_free_pages 100\noom_kill 2\nfuture_counter 9\nnr_weird -3\n").unwrap();
        assert_eq!(v.get("nr_free_pages"), Some(100));
        assert_eq!(v.oom_kills(), Some(2));
        assert_eq!(v.get("future_counter"), Some(9));
        assert_eq!(v.get("nr_weird"), Some(0));
        assert_eq!(v.swap_ins(), None);
        assert_eq!(v.balloon_pages(), None);
        let b = parse_vmstat("balloon_inflate 190464\nballoon_deflate 14080\n").unwrap();
        assert_eq!(b.balloon_pages(), Some(Pages(176384)));
        assert!(parse_vmstat("oom_kill\n").is_err());
        assert!(parse_vmstat("oom_kill x\n").is_err());
        assert!(parse_vmstat("oom_kill 1 2\n").is_err());
        assert!(parse_vmstat("\n").is_err());
    }

    #[test]
    fn a_sample_keeps_only_the_counters_it_reads() {
        for (source, text) in fixtures::all("vmstat") {
            let all = parse_vmstat(&text).unwrap();
            let some = parse_vmstat_only(&text, Vmstat::SAMPLED).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert!(some.len() <= Vmstat::SAMPLED.len() && some.len() < all.len(), "{source}");
            assert_eq!((some.oom_kills(), some.file_refaults(), some.swap_ins(), some.swap_outs(), some.balloon_pages()), (all.oom_kills(), all.file_refaults(), all.swap_ins(), all.swap_outs(), all.balloon_pages()), "{source}");
        }
        assert!(parse_vmstat_only("oom_kill 1\nnr_free_pages x\n", Vmstat::SAMPLED).is_err(), "every line is checked");
        assert!(parse_vmstat_only("nr_free_pages 5\n", Vmstat::SAMPLED).unwrap().is_empty(), "a report without them parses");
        assert!(parse_vmstat_only("\n", Vmstat::SAMPLED).is_err());
    }

    #[test]
    fn every_fixture_parses() {
        let all = fixtures::all("vmstat");
        assert!(all.len() >= 3, "expected fixtures from 6.1, 6.12 and the host, found {}", all.len());
        for (source, text) in all {
            let v = parse_vmstat(&text).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert!(v.get("nr_free_pages").is_some(), "{source}");
            assert!(v.oom_kills().is_some(), "{source}: oom_kill exists since 4.13");
            if source.contains("guest") {
                assert!(v.balloon_pages().is_some(), "{source}: guests have CONFIG_MEMORY_BALLOON");
            }
            if source == "linux-6.1-guest-pressure" {
                // 1 GiB guest whose QMP `actual` read ~335 MiB when captured.
                assert_eq!(v.balloon_pages().unwrap().to_kib_saturating(), crate::Kib::from_mib_saturating(1024 - 335));
            }
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_vmstat(&s);
        }
    }
}
