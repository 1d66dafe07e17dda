use super::{malformed, ParseError};

/// One line of a PSI file: the share of wall time (percent) that tasks were stalled on
/// memory, averaged over 10, 60 and 300 s, and the total stall time in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PressureLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

/// /proc/pressure/memory. `full` is absent on kernels before 5.13 for some resources
/// and always present for memory since PSI was introduced, but we don't rely on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pressure {
    pub some: PressureLine,
    pub full: Option<PressureLine>,
}

/// Parses /proc/pressure/memory: `some avg10=… avg60=… avg300=… total=…` and optionally
/// the same for `full`. Unknown `key=value` pairs are ignored.
pub fn parse_pressure(text: &str) -> Result<Pressure, ParseError> {
    let mut some = None;
    let mut full = None;
    for (n, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        let slot = match words.next() {
            None => continue,
            Some("some") => &mut some,
            Some("full") => &mut full,
            Some(_) => return Err(malformed(n, "`some` or `full`", line)),
        };
        let mut p = PressureLine::default();
        let mut seen = 0;
        for word in words {
            let (k, v) = word.split_once('=').ok_or_else(|| malformed(n, "key=value", line))?;
            let bad = || malformed(n, "a number", line);
            match k {
                "avg10" => p.avg10 = v.parse().map_err(|_| bad())?,
                "avg60" => p.avg60 = v.parse().map_err(|_| bad())?,
                "avg300" => p.avg300 = v.parse().map_err(|_| bad())?,
                "total" => p.total_us = v.parse().map_err(|_| bad())?,
                _ => continue,
            }
            seen += 1;
        }
        if seen != 4 {
            return Err(malformed(n, "avg10, avg60, avg300 and total", line));
        }
        *slot = Some(p);
    }
    let some = some.ok_or(ParseError::Empty)?;
    Ok(Pressure { some, full })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::fixtures;
    use proptest::prelude::*;

    #[test]
    fn parses_both_lines() {
        let p = parse_pressure("some avg10=1.50 avg60=0.20 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n").unwrap();
        assert_eq!(p.some.avg10, 1.5);
        assert_eq!(p.some.total_us, 12345);
        assert_eq!(p.full.unwrap().total_us, 7);
        let only_some = parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0 extra=1\n").unwrap();
        assert_eq!(only_some.full, None);
        assert!(parse_pressure("some avg10=0.00 total=0\n").is_err());
        assert!(parse_pressure("other avg10=0.00\n").is_err());
        assert!(parse_pressure("").is_err());
    }

    #[test]
    fn every_fixture_parses() {
        let all = fixtures::all("pressure-memory");
        assert!(!all.is_empty(), "expected at least one PSI fixture");
        for (source, text) in all {
            let p = parse_pressure(&text).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert!(p.some.avg10 >= 0.0 && p.full.is_some(), "{source}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_pressure(&s);
        }
    }
}
