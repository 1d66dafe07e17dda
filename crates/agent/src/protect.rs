//! The agent must never be the OOM victim nor be paged out: it is what gives memory back.

use std::io;

/// Exempts this process from the OOM killer and locks its memory.
pub fn protect_self() -> io::Result<()> {
    std::fs::write("/proc/self/oom_score_adj", "-1000")?;
    // SAFETY: mlockall has no memory-safety preconditions. The agent is single-threaded,
    // so MCL_FUTURE does not pin 8 MiB thread stacks.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Lets programs allocate beyond the guest's current size: the balloon gives memory back
/// on demand, so the kernel must not refuse a malloc for lack of present memory.
pub fn allow_overcommit(proc_dir: &std::path::Path) -> io::Result<()> {
    std::fs::write(proc_dir.join("sys/vm/overcommit_memory"), "1")
}
