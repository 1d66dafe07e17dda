//! autoballoon-guest: the guest agent. Samples /proc/meminfo, vmstat and pressure/memory
//! every second and either runs core's control loop on the balloon itself (patched kernel,
//! Xen) or reports to the host controller, which sets it over QMP (stock kernels).

mod backend;
mod channel;
mod config;
mod estimate_cmd;
mod logging;
mod pcp;
mod procfile;
mod protect;
mod report;
mod run;
mod source;
mod trigger;
mod trim;
mod watch;
#[cfg(test)]
mod loop_tests;
#[cfg(test)]
mod testutil;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "autoballoon-guest", version, about = "Continuous, swap-free self-ballooning from inside the guest", after_help = EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the balloon target the estimator computes from a meminfo file.
    #[command(after_help = EXIT_STATUS)]
    Estimate(estimate_cmd::EstimateArgs),
    /// Run the sampling loop until killed.
    #[command(after_help = EXIT_STATUS)]
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
    /// Without it: the first balloon device's /sys/bus/virtio/drivers/virtio_balloon/virtio*/balloon
    /// (series v3), else /proc/sys/vm/balloon (v1, v2).
    #[arg(long)]
    pub kernel_dir: Option<PathBuf>,
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
    /// No memory-pressure trigger: a stall is seen at the next sample only (by default a
    /// PSI trigger on /proc/pressure/memory wakes the agent within tens of milliseconds of
    /// a stall; the host then grows the guest at once).
    #[arg(long)]
    pub no_pressure_trigger: bool,
    /// No commitment watch: memory programs commit is seen at the next sample only (by
    /// default, while the guest has less than 512 MiB to spare, /proc/meminfo is read every
    /// 100 ms and the agent samples at once when what programs hold or committed grew by
    /// 32 MiB; a guest with a host port and a free page reporting device is watched with
    /// more to spare too, every 250 ms, once the host says it backs reported memory again
    /// ahead of a program (QEMU's `x-populate-reported`, the project's patches); every
    /// 50 ms, whatever the margin, for a minute after that demand last grew, except
    /// every 250 ms from a growth until the demand falls 32 MiB below its peak again).
    #[arg(long)]
    pub no_commit_watch: bool,
    /// Free page reporting reports free pieces down to 4 KiB, not only 2 MiB blocks, once
    /// the guest's memory in use has not grown by 16 MiB for this many seconds (the
    /// kernel's order again while it grows; one compaction and 16 MiB touched and freed at
    /// each switch start a reporting pass), so the host gets back what the guest's jobs
    /// touched and freed in small pieces; 0: off, the kernel's order stays. Needs a
    /// balloon device with free-page-reporting=on. Off by default: measured at 4 MiB less
    /// in a migration of a lean guest, and nothing its balloon had not taken already.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub report_pieces_after_s: u64,
    /// Leave vm.overcommit_memory as the guest has it. By default the agent sets it to 1
    /// at start (and logs the old value), so that a program may allocate beyond the
    /// guest's present size while the balloon gives memory back (docs/guest-agent.md).
    #[arg(long)]
    pub no_overcommit: bool,
    /// Leave virtio_balloon.report_blocks as the guest has it. By default, on the patched
    /// kernel (patch 24 of its series) the agent switches it on at start (and logs it): with
    /// a free page reporting device, the balloon's 2 MiB units go to the host as one range
    /// each, which QEMU discards whole, so a spike the allocator hook serves gets them back
    /// in the host's huge pages, not 4 KiB at a time (docs/guest-agent.md).
    #[arg(long)]
    pub no_whole_unit_reports: bool,
    /// Keep each CPU's list of freed pages to about this many KiB
    /// (vm.percpu_pagelist_high_fraction, set at start and logged; the kernel keeps four
    /// batches, about 1 MiB, at least): pages on those lists are free memory that free
    /// page reporting, free page hinting and the balloon cannot give back, up to 54 MiB of
    /// a 2 GiB guest on Linux 6.1 after a spike. 0, or a fraction already set in the
    /// guest, leaves the kernel's sizing (docs/guest-agent.md).
    #[arg(long, value_name = "KIB", default_value_t = pcp::PER_CPU_DEFAULT.0)]
    pub pcp_high_kib: u64,
    /// The page cache trim (with every backend).
    #[command(flatten)]
    pub trim: trim::TrimArgs,
    /// Skip self-protection (oom_score_adj, mlockall), the overcommit and per-CPU list
    /// sysctls, the balloon's whole-unit reports and the cache trim, for tests on a host.
    #[arg(long)]
    pub unprivileged: bool,
    /// Stop after this many samples (0 = run forever).
    #[arg(long, default_value_t = 0)]
    pub samples: u64,
    /// Write log lines of this level and below: error, warn, info (one line per action),
    /// debug (also every tick and sample).
    #[arg(long, value_enum, default_value = "info", value_name = "LEVEL")]
    pub log_level: logging::Level,
    /// Log every tick, not only actions: --log-level debug.
    #[arg(short, long)]
    pub verbose: bool,
}

/// The exit status of every command, in `--help`.
const EXIT_STATUS: &str = "Exit status: 0 success (run: after --samples N samples); 1 a runtime \
failure (the port, the balloon interface or procfs cannot be opened or used); 2 a usage \
error (a bad flag or policy value: the message names the key and its flag; estimate: an \
unreadable or malformed meminfo file).";

/// Why a command failed; the exit status tells them apart.
#[derive(Debug)]
pub enum Failure {
    /// A bad flag, a bad value, bad input: exit 2.
    Usage(String),
    /// The work could not be done: exit 1.
    Runtime(String),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Estimate(a) => estimate_cmd::run(&a).map_err(Failure::Usage),
        Command::Run(a) => run::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("autoballoon-guest: error: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("autoballoon-guest: error: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod help_tests {
    use super::*;
    use crate::testutil::run_args;
    use autoballoon_core::config::PolicyConfig;
    use clap::CommandFactory;

    /// Every `[default: X]` that `run --help` states is the value the agent uses when the
    /// flag is absent: giving X changes nothing, giving another value changes the
    /// configuration (so the flag is the key the help names). Every policy flag states one,
    /// except the KiB spellings (same key) and the switch `--adaptive`.
    #[test]
    fn run_help_states_the_true_defaults() {
        let cmd = Cli::command();
        let run = cmd.find_subcommand("run").unwrap();
        let base = run_args(&[]);
        let policy_flags = <config::PolicyArgs as clap::Args>::augment_args(clap::Command::new("policy"));
        let mut checked = 0;
        for arg in run.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let stated = help.split("[default: ").nth(1).and_then(|r| r.split(']').next()).map(str::to_string);
            let clap_default = arg.get_default_values().first().map(|v| v.to_string_lossy().into_owned());
            let policy_flag = policy_flags.get_arguments().any(|a| a.get_long() == Some(long));
            if policy_flag && !long.ends_with("-kb") && long != "adaptive" {
                assert!(stated.is_some(), "--{long} states no default: {help:?}");
            }
            if let (Some(s), Some(c)) = (&stated, &clap_default) {
                panic!("--{long}: help says [default: {s}] besides clap's own {c}");
            }
            let Some(value) = stated else { continue };
            let flag = format!("--{long}");
            let same = run_args(&[&flag, &value]);
            assert_eq!(same.policy.config().unwrap(), base.policy.config().unwrap(), "--{long} {value} is not the default");
            let n: u64 = value.parse().unwrap_or_else(|_| panic!("--{long}: default {value:?} is not a number"));
            let other = (n + 1).to_string();
            assert_ne!(run_args(&[&flag, &other]).policy.config().unwrap(), base.policy.config().unwrap(), "--{long} {other} changes nothing");
            checked += 1;
        }
        assert!(checked >= 14, "only {checked} stated defaults checked");
        // Clap's own defaults (shown by clap from the same value) and the shared ones.
        assert_eq!(base.policy.config().unwrap(), PolicyConfig::default());
        assert_eq!((base.interval_ms, base.samples, base.backend), (1000, 0, BackendKind::Host));
        assert!(!base.no_overcommit && !base.no_whole_unit_reports && !base.unprivileged && !base.no_pressure_trigger && !base.no_commit_watch);
    }
}
