//! Fixture trees for the unit tests: a proc directory, a kernel interface and a Xen
//! directory under a fresh temporary directory.

use std::path::PathBuf;

/// A file of one of core's fixtures (captured from real kernels).
pub fn fixture(dir: &str, file: &str) -> String {
    fixture_result(dir, file).unwrap_or_else(|(p, e)| panic!("{p}: {e}"))
}

/// A file of one of core's fixtures, `None` where that fixture has no such file.
pub fn fixture_if_any(dir: &str, file: &str) -> Option<String> {
    fixture_result(dir, file).ok()
}

fn fixture_result(dir: &str, file: &str) -> Result<String, (String, std::io::Error)> {
    let p = format!("{}/../core/fixtures/{dir}/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).map_err(|e| (p, e))
}

/// `autoballoon-guest run` with `extra` arguments, parsed as the command line would be.
pub fn run_args(extra: &[&str]) -> crate::RunArgs {
    use clap::Parser;
    let mut argv = vec!["autoballoon-guest", "run"];
    argv.extend_from_slice(extra);
    match crate::Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{extra:?}: {e}")).command {
        crate::Command::Run(a) => *a,
        crate::Command::Estimate(_) => unreachable!(),
    }
}

pub struct ProcTree {
    pub root: PathBuf,
    /// meminfo, vmstat and pressure/memory.
    pub proc: PathBuf,
    /// The patched kernel's interface: current_pages, max_pages, target_pages.
    pub kernel: PathBuf,
    /// Xen: info/current_kb, target_kb.
    pub xen: PathBuf,
}

impl ProcTree {
    /// A tree whose proc files are copies of core's fixture `from`.
    pub fn new(name: &str, from: &str) -> ProcTree {
        let root = std::env::temp_dir().join(format!("ab-agent-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let t = ProcTree { proc: root.join("proc"), kernel: root.join("kernel"), xen: root.join("xen"), root };
        for d in [t.proc.join("pressure"), t.kernel.clone(), t.xen.join("info")] {
            std::fs::create_dir_all(d).unwrap();
        }
        for (file, src) in [("meminfo", "meminfo"), ("vmstat", "vmstat"), ("pressure/memory", "pressure-memory")] {
            std::fs::write(t.proc.join(file), fixture(from, src)).unwrap();
        }
        // Not every fixture has it (nor every kernel: the agent reads it where it is).
        if let Some(text) = fixture_if_any(from, "buddyinfo") {
            std::fs::write(t.proc.join("buddyinfo"), text).unwrap();
        }
        t
    }

    pub fn set_kernel(&self, current_pages: u64, max_pages: u64) {
        std::fs::write(self.kernel.join("current_pages"), format!("{current_pages}\n")).unwrap();
        std::fs::write(self.kernel.join("max_pages"), format!("{max_pages}\n")).unwrap();
    }

    pub fn read(&self, path: &PathBuf) -> u64 {
        std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
    }
}

impl Drop for ProcTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
