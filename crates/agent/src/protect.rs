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
/// on demand, so the kernel must not refuse a malloc for lack of present memory. Returns
/// the setting it replaced (`--no-overcommit` skips this).
pub fn allow_overcommit(proc_dir: &std::path::Path) -> io::Result<String> {
    let path = proc_dir.join("sys/vm/overcommit_memory");
    let old = std::fs::read_to_string(&path).map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into());
    std::fs::write(&path, "1")?;
    Ok(old)
}

#[cfg(test)]
mod tests {
    #[test]
    fn overcommit_is_set_to_1_and_the_old_value_returned() {
        let dir = std::env::temp_dir().join(format!("ab-overcommit-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sys/vm")).unwrap();
        std::fs::write(dir.join("sys/vm/overcommit_memory"), "0\n").unwrap();
        assert_eq!(super::allow_overcommit(&dir).unwrap(), "0");
        assert_eq!(std::fs::read_to_string(dir.join("sys/vm/overcommit_memory")).unwrap(), "1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
