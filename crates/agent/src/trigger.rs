//! A PSI trigger on the guest's memory pressure (`/proc/pressure/memory`): the kernel wakes
//! the agent within tens of milliseconds of tasks stalling on memory — a spike that has used
//! up the guest's free memory is in direct reclaim or deflate-on-oom's rounds — instead of
//! the agent finding out at its next once-a-second sample. It costs nothing while the guest
//! is not short: the kernel polls only while a stall is being accounted.
//!
//! Triggers are `some STALL_US WINDOW_US` written to the file (Documentation/accounting/
//! psi.rst): an event when tasks stalled at least STALL in any WINDOW, at most one per
//! window. The fd signals `POLLPRI`. Kernels without PSI (or booted with `psi=0`) refuse
//! the write: the agent then samples as before.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

/// Stall that counts: 10 ms of some task waiting on memory.
pub const STALL: Duration = Duration::from_millis(10);
/// The smallest window the kernel takes (and so the fastest re-arm): 500 ms.
pub const WINDOW: Duration = Duration::from_millis(500);

/// An armed trigger; dropping it disarms it (closes the fd).
pub struct PressureTrigger {
    file: File,
}

impl PressureTrigger {
    /// Arms a trigger on `<proc_dir>/pressure/memory`.
    pub fn open(proc_dir: &Path, stall: Duration, window: Duration) -> std::io::Result<PressureTrigger> {
        let path = proc_dir.join("pressure/memory");
        let mut file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(&path)?;
        // Only the kernel's file: under a fixture tree (`--proc-dir`) the write would
        // overwrite the fixture.
        if !on_procfs(&file)? {
            return Err(std::io::Error::new(std::io::ErrorKind::Unsupported, format!("{} is not on procfs", path.display())));
        }
        // One write, with its terminating NUL, as the kernel's example does.
        file.write_all(trigger_line(stall, window).as_bytes())?;
        Ok(PressureTrigger { file })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

fn on_procfs(f: &File) -> std::io::Result<bool> {
    // SAFETY: a zeroed statfs is a valid out-parameter; the fd is valid for the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_type == libc::PROC_SUPER_MAGIC)
}

/// The line the kernel takes: `some STALL_US WINDOW_US` and a NUL.
pub fn trigger_line(stall: Duration, window: Duration) -> String {
    format!("some {} {}\0", stall.as_micros(), window.as_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_in_microseconds() {
        assert_eq!(trigger_line(STALL, WINDOW), "some 10000 500000\0");
    }

    #[test]
    fn a_fixture_tree_is_left_alone() {
        // The agent's tests run against fixture trees: no trigger there, and the fixture
        // keeps its text.
        let dir = std::env::temp_dir().join(format!("ab-trigger-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("pressure")).unwrap();
        let text = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        std::fs::write(dir.join("pressure/memory"), text).unwrap();
        let e = PressureTrigger::open(&dir, STALL, WINDOW).err().expect("not procfs");
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
        assert_eq!(std::fs::read_to_string(dir.join("pressure/memory")).unwrap(), text);
        assert!(PressureTrigger::open(&dir.join("missing"), STALL, WINDOW).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
