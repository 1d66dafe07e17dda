//! Where the agent's target goes, and where it reads the guest's present size from.

use autoballoon_core::{Kib, Pages};
use std::path::{Path, PathBuf};

/// A backend's file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// cannot read {path}: {source}
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// cannot write {path}: {source}
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    /// {path} does not hold a number: {text:?}
    #[error("{path} does not hold a number: {text:?}")]
    NotANumber { path: PathBuf, text: String },
}

/// The guest's size as a backend sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub current: Kib,
    pub max: Kib,
}

pub enum Backend {
    /// The host sets the balloon; the agent only reports.
    Host,
    /// The patched kernel: `max_pages`, `current_pages` (the guest's present size) and
    /// `target_pages` (the size it should have), all in 4 KiB pages.
    Kernel { dir: PathBuf },
    /// Xen: `target_kb` and `info/current_kb`; the maximum is fixed when the agent starts.
    Xen { dir: PathBuf, max: Kib },
}

fn read_u64(path: &Path) -> Result<u64, BackendError> {
    let text = std::fs::read_to_string(path).map_err(|source| BackendError::Read { path: path.into(), source })?;
    text.trim().parse().map_err(|_| BackendError::NotANumber { path: path.into(), text: text.chars().take(40).collect() })
}

fn write_u64(path: &Path, v: u64) -> Result<(), BackendError> {
    std::fs::write(path, format!("{v}\n")).map_err(|source| BackendError::Write { path: path.into(), source })
}

impl Backend {
    pub fn xen(dir: PathBuf, max: Option<Kib>) -> Result<Backend, BackendError> {
        let max = match max {
            Some(m) => m,
            None => Kib(read_u64(&dir.join("info/current_kb"))?),
        };
        Ok(Backend::Xen { dir, max })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Host => "host",
            Backend::Kernel { .. } => "kernel",
            Backend::Xen { .. } => "xen",
        }
    }

    /// The guest's present and maximum size; `None` when the host owns the balloon.
    pub fn size(&self) -> Result<Option<Size>, BackendError> {
        match self {
            Backend::Host => Ok(None),
            Backend::Kernel { dir } => Ok(Some(Size {
                current: Pages(read_u64(&dir.join("current_pages"))?).to_kib_saturating(),
                max: Pages(read_u64(&dir.join("max_pages"))?).to_kib_saturating(),
            })),
            Backend::Xen { dir, max } => Ok(Some(Size { current: Kib(read_u64(&dir.join("info/current_kb"))?), max: *max })),
        }
    }

    /// Asks for the guest's size to become `size`. Returns at once: the balloon moves on its own.
    pub fn set_guest_size(&self, size: Kib) -> Result<(), BackendError> {
        match self {
            Backend::Host => Ok(()),
            Backend::Kernel { dir } => write_u64(&dir.join("target_pages"), size.to_pages_floor().0.max(1)),
            Backend::Xen { dir, .. } => write_u64(&dir.join("target_kb"), size.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ab-backend-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("info")).unwrap();
        d
    }

    #[test]
    fn kernel_backend_speaks_pages() {
        let d = tempdir("kernel");
        std::fs::write(d.join("max_pages"), "524288\n").unwrap();
        std::fs::write(d.join("current_pages"), "65536\n").unwrap();
        let b = Backend::Kernel { dir: d.clone() };
        assert_eq!(b.size().unwrap(), Some(Size { current: Kib::from_mib_saturating(256), max: Kib::from_gib_saturating(2) }));
        b.set_guest_size(Kib::from_mib_saturating(300)).unwrap();
        assert_eq!(std::fs::read_to_string(d.join("target_pages")).unwrap(), "76800\n");
        b.set_guest_size(Kib(1)).unwrap();
        assert_eq!(std::fs::read_to_string(d.join("target_pages")).unwrap(), "1\n", "never zero pages");
        std::fs::write(d.join("current_pages"), "junk").unwrap();
        assert!(matches!(b.size(), Err(BackendError::NotANumber { .. })));
    }

    #[test]
    fn xen_backend_speaks_kib() {
        let d = tempdir("xen");
        std::fs::write(d.join("info/current_kb"), "1048576\n").unwrap();
        let b = Backend::xen(d.clone(), None).unwrap();
        assert_eq!(b.size().unwrap(), Some(Size { current: Kib::from_gib_saturating(1), max: Kib::from_gib_saturating(1) }));
        b.set_guest_size(Kib(123)).unwrap();
        assert_eq!(std::fs::read_to_string(d.join("target_kb")).unwrap(), "123\n");
        assert!(matches!(Backend::xen(d.join("nope"), None), Err(BackendError::Read { .. })));
    }
}
