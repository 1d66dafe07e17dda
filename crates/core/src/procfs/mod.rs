//! Pure parsers for the kernel's memory reports: /proc/meminfo, /proc/vmstat,
//! /proc/pressure/memory and /proc/buddyinfo. Each takes the file's text and returns a typed value or a
//! [`ParseError`] naming the offending line; none reads a file or panics on bad input.
//! Fixtures captured from real kernels live in `crates/core/fixtures/`.

mod buddyinfo;
mod meminfo;
mod psi;
mod vmstat;

pub use buddyinfo::{parse_buddyinfo, Buddyinfo, Zone};
pub use meminfo::{parse_meminfo, parse_meminfo_only, Meminfo, MissingField};
pub use psi::{parse_pressure, Pressure, PressureLine};
pub use vmstat::{parse_vmstat, parse_vmstat_only, Vmstat};

/// Why a procfs text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// line {line}: expected `{expected}`, found {found:?}
    #[error("line {line}: expected {expected}, found {found:?}")]
    Malformed { line: usize, expected: &'static str, found: String },
    /// the text is empty
    #[error("the text is empty")]
    Empty,
}

pub(crate) fn malformed(line: usize, expected: &'static str, found: &str) -> ParseError {
    // At most 80 characters (not bytes: a byte cut could split a character).
    let found = found.chars().take(80).collect();
    ParseError::Malformed { line: line + 1, expected, found }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_lines_are_cut_at_a_character() {
        let line = "𝕆".repeat(100);
        let super::ParseError::Malformed { found, .. } = super::malformed(0, "x", &line) else { unreachable!() };
        assert_eq!(found.chars().count(), 80);
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use std::path::PathBuf;

    /// All fixture files named `name` under crates/core/fixtures/*/, with their source folder.
    pub fn all(name: &str) -> Vec<(String, String)> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut out = Vec::new();
        let Ok(dirs) = std::fs::read_dir(&root) else { return out };
        for d in dirs.flatten() {
            let p = d.path().join(name);
            if let Ok(text) = std::fs::read_to_string(&p) {
                out.push((d.file_name().to_string_lossy().into_owned(), text));
            }
        }
        out.sort();
        out
    }

    /// The fixture file `name` of crates/core/fixtures/`dir`/; panics (tests only) if missing.
    pub fn read(dir: &str, name: &str) -> String {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(dir).join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }
}
