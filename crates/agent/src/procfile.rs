//! A procfs file kept open and read whole from its start each time.
//!
//! Why: each read of `/proc/meminfo` by `std::fs::read_to_string` is about a dozen system
//! calls (open, statx, reads from 32 bytes up, doubling, to the end, close), since procfs
//! gives no size. Inside a TCG guest whose kernel isolates page tables (`pti`), each system
//! call switches page tables twice, and each switch empties TCG's cache of address
//! translations (the vCPU has no PCID): a read took the agent about 650 µs of its vCPU, the
//! commitment watch 20 of them a second while the guest is busy (docs/spikes.md, *The
//! watch's own cost*). Kept open and read with `pread` from offset 0 into a buffer that has
//! room for the whole file, it is two (the file, then the end), three for a file longer
//! than one page (`/proc/vmstat`), whose records the kernel hands out a page at a time.
//!
//! procfs regenerates such a file at every read from offset 0, as `top` relies on. A file
//! removed or replaced while open is not seen: procfs files stay while the kernel runs.

use crate::backend::FileError;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The largest file read: a file that does not end within it is an error, not an endless
/// read (a kernel's `/proc/vmstat` is about 5 KiB, `/proc/meminfo` 1.5 KiB).
pub const MAX_BYTES: usize = 1 << 20;
/// The buffer a file starts with: every file the agent reads fits.
const START_BYTES: usize = 16 << 10;

pub struct ProcFile {
    path: PathBuf,
    file: Option<File>,
    buf: Vec<u8>,
}

impl ProcFile {
    /// The file at `path`, opened at its first read.
    pub fn new(path: PathBuf) -> ProcFile {
        ProcFile { path, file: None, buf: Vec::new() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's text now. A file that could not be opened is tried again at the next read;
    /// one that fails after it was opened is opened again once.
    pub fn read(&mut self) -> Result<String, FileError> {
        let err = |path: &Path, source| FileError::Read { path: path.into(), source };
        if self.file.is_some() {
            match self.read_open() {
                Ok(text) => return Ok(text),
                Err(_) => self.file = None,
            }
        }
        self.file = Some(File::open(&self.path).map_err(|e| err(&self.path, e))?);
        self.read_open().map_err(|e| err(&self.path, e))
    }

    /// The file's text, or `None` if the kernel has no such file.
    pub fn read_optional(&mut self) -> Result<Option<String>, FileError> {
        match self.read() {
            Ok(text) => Ok(Some(text)),
            Err(FileError::Read { source, .. }) if matches!(source.kind(), ErrorKind::NotFound | ErrorKind::Unsupported) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read_open(&mut self) -> std::io::Result<String> {
        let Some(file) = &self.file else { return Err(ErrorKind::NotFound.into()) };
        if self.buf.len() < START_BYTES {
            self.buf.resize(START_BYTES, 0);
        }
        let mut len = 0;
        loop {
            if len == self.buf.len() {
                if len >= MAX_BYTES {
                    return Err(std::io::Error::new(ErrorKind::InvalidData, format!("longer than {MAX_BYTES} bytes")));
                }
                self.buf.resize((len * 2).min(MAX_BYTES), 0);
            }
            match file.read_at(&mut self.buf[len..], len as u64) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        String::from_utf8(self.buf[..len].to_vec()).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("autoballoon-procfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn each_read_is_the_whole_file_as_it_is_now() {
        let p = dir("whole").join("meminfo");
        std::fs::write(&p, "MemTotal: 5 kB\n").unwrap();
        let mut f = ProcFile::new(p.clone());
        assert_eq!(f.read().unwrap(), "MemTotal: 5 kB\n");
        std::fs::write(&p, "MemTotal: 6 kB\nMemFree: 1 kB\n").unwrap();
        assert_eq!(f.read().unwrap(), "MemTotal: 6 kB\nMemFree: 1 kB\n", "rewritten in place: read again from the start");
        std::fs::write(&p, "x").unwrap();
        assert_eq!(f.read().unwrap(), "x", "shorter: nothing of the old text left");
        let long = "nr_free_pages 1\n".repeat(5000);
        std::fs::write(&p, &long).unwrap();
        assert_eq!(f.read().unwrap(), long, "longer than the first buffer");
    }

    #[test]
    fn the_real_procfs_reads_as_read_to_string_does() {
        for name in ["meminfo", "pressure/memory", "buddyinfo", "self/stat"] {
            let path = Path::new("/proc").join(name);
            let Ok(want) = std::fs::read_to_string(&path) else { continue };
            let got = ProcFile::new(path).read().unwrap();
            assert_eq!(got.lines().next().map(|l| l.split(':').next()), want.lines().next().map(|l| l.split(':').next()), "{name}");
            assert_eq!(got.lines().count(), want.lines().count(), "{name}");
        }
        let mut vmstat = ProcFile::new("/proc/vmstat".into());
        let (a, b) = (vmstat.read().unwrap(), vmstat.read().unwrap());
        assert!(a.starts_with("nr_free_pages ") && a.lines().count() == b.lines().count(), "twice the same records:\n{a}\n{b}");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it_and_is_tried_again() {
        let d = dir("missing");
        let p = d.join("pressure");
        let mut f = ProcFile::new(p.clone());
        let e = f.read().unwrap_err();
        assert!(e.is_missing() && e.to_string().contains("pressure"), "{e}");
        assert_eq!(f.read_optional().unwrap(), None);
        std::fs::write(&p, "some avg10=0.00\n").unwrap();
        assert_eq!(f.read_optional().unwrap().as_deref(), Some("some avg10=0.00\n"), "there now");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(matches!(f.read(), Err(FileError::Read { .. })), "not text");
    }
}
