//! A private temporary directory (mode 0700), removed on drop.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix socket paths must fit in `sun_path` (108 bytes); leave room for the file name.
const MAX_DIR_LEN: usize = 80;

/// A fresh private directory for sockets; deleted with its contents when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `autoballoon-fakes-<pid>-<n>-<nanos>` under `$TMPDIR` (or `/tmp` if that is too long).
    pub fn new() -> std::io::Result<TempDir> {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "autoballoon-fakes-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let mut base = std::env::temp_dir();
        if base.join(&name).as_os_str().len() > MAX_DIR_LEN {
            base = PathBuf::from("/tmp");
        }
        let path = base.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(TempDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let d = TempDir::new().unwrap();
        let p = d.path().to_owned();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::write(p.join("x"), b"y").unwrap();
        assert_ne!(TempDir::new().unwrap().path(), p);
        drop(d);
        assert!(!p.exists());
    }
}
