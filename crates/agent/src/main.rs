//! autoballoon-guest: the guest agent. Samples /proc/meminfo, vmstat and pressure/memory
//! every second and either runs core's control loop on the balloon itself (patched kernel,
//! Xen) or reports to the host controller, which sets it over QMP (stock kernels).

mod backend;
mod channel;
mod config;
mod estimate_cmd;
mod logging;
mod protect;
mod run;
mod source;
mod trigger;
#[cfg(test)]
mod loop_tests;
#[cfg(test)]
mod testutil;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "autoballoon-guest", version, about = "Continuous, swap-free self-ballooning from inside the guest")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the balloon target the estimator computes from a meminfo file.
    Estimate(estimate_cmd::EstimateArgs),
    /// Run the sampling loop until killed.
    Run(Box<RunArgs>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// Report samples to the host controller over a virtio-serial port; the host sets the balloon.
    Host,
    /// Write the target to Xen's balloon (target_kb in sysfs).
    Xen,
    /// Write the target to the patched kernel's balloon interface (target_pages).
    Kernel,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Xen => "xen",
            BackendKind::Kernel => "kernel",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Where the target goes.
    #[arg(long, value_enum, default_value = "host")]
    pub backend: BackendKind,
    /// The virtio-serial port to the host controller (required for --backend host;
    /// optional otherwise, to receive migration notices).
    #[arg(long)]
    pub port: Option<PathBuf>,
    /// Directory of the patched kernel's interface (max_pages, current_pages, target_pages).
    #[arg(long, default_value = "/proc/sys/vm/balloon")]
    pub kernel_dir: PathBuf,
    /// Xen's balloon sysfs directory (target_kb, info/current_kb).
    #[arg(long, default_value = "/sys/devices/system/xen_memory/xen_memory0")]
    pub xen_dir: PathBuf,
    /// The VM's maximum size in KiB for the Xen backend (default: its size when the agent starts).
    #[arg(long)]
    pub max_kb: Option<u64>,
    /// Sampling interval τ in milliseconds (at least 10).
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
    /// The policy and its guard rails (kernel and Xen backends): the keys of the host's
    /// configuration, with the host's defaults.
    #[command(flatten)]
    pub policy: config::PolicyArgs,
    /// Where to read procfs from (tests point this at a fixture tree).
    #[arg(long, default_value = "/proc")]
    pub proc_dir: PathBuf,
    /// No memory-pressure trigger: the guest running short is seen at the next sample
    /// only (by default a PSI trigger on /proc/pressure/memory wakes the agent within tens
    /// of milliseconds of a stall; the host then grows the guest at once).
    #[arg(long)]
    pub no_pressure_trigger: bool,
    /// Skip self-protection (oom_score_adj, mlockall) and the overcommit sysctl, for tests on a host.
    #[arg(long)]
    pub unprivileged: bool,
    /// Stop after this many samples (0 = run forever).
    #[arg(long, default_value_t = 0)]
    pub samples: u64,
    /// Log every tick, not only actions.
    #[arg(short, long)]
    pub verbose: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Estimate(a) => estimate_cmd::run(&a),
        Command::Run(a) => run::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoballoon-guest: error: {e}");
            ExitCode::from(2)
        }
    }
}
