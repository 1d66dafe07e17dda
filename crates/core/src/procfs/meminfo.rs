use super::{malformed, ParseError};
use crate::units::Kib;
use std::collections::BTreeMap;

/// /proc/meminfo as a map from field name to value. Values with a `kB` unit are KiB;
/// unit-less fields (`HugePages_Total`, …) are plain counts. Fields this crate does not
/// know are kept, so a newer kernel's report parses too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meminfo {
    fields: BTreeMap<String, u64>,
}

/// A field the caller needs is absent from the report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("/proc/meminfo has no {0} field")]
pub struct MissingField(pub &'static str);

impl Meminfo {
    /// The raw value of any field, by its exact name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.fields.get(name).copied()
    }
    /// A KiB field, or an error naming it.
    pub fn kib(&self, name: &'static str) -> Result<Kib, MissingField> {
        self.get(name).map(Kib).ok_or(MissingField(name))
    }
    pub fn len(&self) -> usize {
        self.fields.len()
    }
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

/// Parses the text of /proc/meminfo: lines of `Name:   value [kB]`. Blank lines are
/// skipped; a line in any other shape is an error.
pub fn parse_meminfo(text: &str) -> Result<Meminfo, ParseError> {
    parse_meminfo_keeping(text, |_| true)
}

/// [`parse_meminfo`] keeping only the fields named in `names`: every line is checked as
/// there, but a reader that samples several times a second (the guest agent's commitment
/// watch) does not allocate for the fields it does not read.
pub fn parse_meminfo_only(text: &str, names: &[&str]) -> Result<Meminfo, ParseError> {
    parse_meminfo_keeping(text, |name| names.contains(&name))
}

fn parse_meminfo_keeping(text: &str, keep: impl Fn(&str) -> bool) -> Result<Meminfo, ParseError> {
    let mut fields = BTreeMap::new();
    let mut any = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (name, rest) = line.split_once(':').ok_or_else(|| malformed(n, "Name: value", line))?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(malformed(n, "a field name", line));
        }
        let mut words = rest.split_whitespace();
        let value: u64 = words
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| malformed(n, "an unsigned number", line))?;
        match (words.next(), words.next()) {
            (None, None) | (Some("kB"), None) => {}
            _ => return Err(malformed(n, "an optional `kB` unit", line)),
        }
        any = true;
        if keep(name) {
            fields.insert(name.to_string(), value);
        }
    }
    if !any {
        return Err(ParseError::Empty);
    }
    Ok(Meminfo { fields })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::fixtures;
    use proptest::prelude::*;

    #[test]
    fn a_reader_keeps_only_the_fields_it_names() {
        let m = parse_meminfo_only("MemTotal:        2014400 kB\nHugePages_Total:       0\nFutureField: 7 kB\n", &["MemTotal", "MemFree"]).unwrap();
        assert_eq!((m.len(), m.kib("MemTotal")), (1, Ok(Kib(2014400))));
        assert_eq!(m.kib("MemFree"), Err(MissingField("MemFree")));
        assert!(parse_meminfo_only("MemTotal: 1 kB\nBroken 3\n", &["MemTotal"]).is_err(), "every line is checked");
        assert!(parse_meminfo_only("FutureField: 7 kB\n", &["MemTotal"]).unwrap().is_empty(), "a report without them parses");
        assert!(parse_meminfo_only("\n", &["MemTotal"]).is_err(), "an empty report does not");
    }

    #[test]
    fn parses_units_and_counts() {
        let m = parse_meminfo("MemTotal:        2014400 kB\nHugePages_Total:       0\nFutureField: 7 kB\n").unwrap();
        assert_eq!(m.kib("MemTotal"), Ok(Kib(2014400)));
        assert_eq!(m.get("HugePages_Total"), Some(0));
        assert_eq!(m.get("FutureField"), Some(7), "unknown fields are kept");
        assert_eq!(m.kib("MemAvailable"), Err(MissingField("MemAvailable")));
    }

    #[test]
    fn rejects_garbage_with_line_number() {
        let e = parse_meminfo("MemTotal: 1 kB\nMemFree: lots kB\n").unwrap_err();
        assert_eq!(e, ParseError::Malformed { line: 2, expected: "an unsigned number", found: "MemFree: lots kB".into() });
        assert!(parse_meminfo("").is_err());
        assert!(parse_meminfo("MemTotal 12 kB").is_err());
        assert!(parse_meminfo("MemTotal: 12 MB").is_err());
        assert!(parse_meminfo("MemTotal: -12 kB").is_err());
    }

    #[test]
    fn every_fixture_parses_with_the_fields_the_estimator_needs() {
        let all = fixtures::all("meminfo");
        assert!(all.len() >= 3, "expected fixtures from 6.1, 6.12 and the host, found {}", all.len());
        for (source, text) in all {
            let m = parse_meminfo(&text).unwrap_or_else(|e| panic!("{source}: {e}"));
            for f in ["MemTotal", "MemFree", "MemAvailable", "Committed_AS", "Active", "Inactive", "SwapTotal", "SwapFree"] {
                assert!(m.get(f).is_some(), "{source}: missing {f}");
            }
            assert!(m.get("MemAvailable") <= m.get("MemTotal"), "{source}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_meminfo(&s);
        }
        #[test]
        fn roundtrips_well_formed(fields in proptest::collection::btree_map("[A-Za-z_()]{1,16}", 0u64..u64::MAX / 2, 1..20)) {
            let text: String = fields.iter().map(|(k, v)| format!("{k}: {v:>10} kB\n")).collect();
            let m = parse_meminfo(&text).unwrap();
            for (k, v) in &fields {
                prop_assert_eq!(m.get(k), Some(*v));
            }
        }
    }
}
