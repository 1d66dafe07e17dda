//! The one-number files the balloons expose, read and written with their path in every
//! error. A number too large for its unit is an error, not a wrap: the guest's kernel is
//! trusted less than the agent's arithmetic.

use autoballoon_core::{Kib, Pages};
use std::path::{Path, PathBuf};

/// A balloon file could not be read as a number.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} does not hold a number: {text:?}")]
    NotANumber { path: PathBuf, text: String },
    #[error("{path}: {pages} pages do not fit in a KiB count")]
    TooLarge { path: PathBuf, pages: u64 },
}

impl FileError {
    /// Whether the file is not there (a kernel without it, or nothing written yet).
    pub fn is_missing(&self) -> bool {
        matches!(self, FileError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// A target could not be set.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot write {path}: {source}")]
    File { path: PathBuf, source: std::io::Error },
    /// The host owns this balloon: the agent runs no loop on it.
    #[error("the host sets this balloon: the guest takes no target")]
    HostOwned,
}

fn read_text(path: &Path) -> Result<String, FileError> {
    std::fs::read_to_string(path).map_err(|source| FileError::Read { path: path.into(), source })
}

pub fn read_number(path: &Path) -> Result<u64, FileError> {
    let text = read_text(path)?;
    text.trim().parse().map_err(|_| FileError::NotANumber { path: path.into(), text: text.chars().take(40).collect() })
}

/// A count of 4 KiB pages, in KiB.
pub fn read_pages(path: &Path) -> Result<Kib, FileError> {
    let pages = read_number(path)?;
    Pages(pages).to_kib_checked().ok_or(FileError::TooLarge { path: path.into(), pages })
}

/// `Ok(None)` for a file that is not there.
pub fn optional(r: Result<Kib, FileError>) -> Result<Option<Kib>, FileError> {
    match r {
        Err(e) if e.is_missing() => Ok(None),
        r => r.map(Some),
    }
}

pub fn write_number(path: &Path, v: u64) -> Result<(), WriteError> {
    std::fs::write(path, format!("{v}\n")).map_err(|source| WriteError::File { path: path.into(), source })
}
