//! `autoballoon`: the host controller daemon (`autoballoon host`). The demo is
//! `autoballoon-demo`, in the `autoballoon-testbed` crate.

use autoballoon::config::{Config, ControllerConfig, LogFormat, PolicyConfig, VmConfig};
use autoballoon::controller::Controller;
use autoballoon::log::Logger;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "autoballoon", version, about = "Continuous, swap-free memory ballooning for QEMU VMs")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Manage the balloons of QEMU VMs over QMP until interrupted.
    Host(HostArgs),
}

#[derive(clap::Args)]
struct HostArgs {
    /// A TOML configuration file (see docs/configuration.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A VM to manage, as NAME=QMP_SOCKET[,agent=AGENT_SOCKET]; repeatable. Used when no --config is given.
    #[arg(long = "vm", value_name = "NAME=QMP[,agent=PATH]")]
    vms: Vec<String>,
    /// Log one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Also log ticks that change nothing.
    #[arg(short, long)]
    verbose: bool,
    /// Print a status table every this many seconds (0 = never).
    #[arg(long, default_value_t = 0)]
    status_every: u64,
}

fn parse_vm_flag(s: &str) -> Result<VmConfig, String> {
    let (name, rest) = s.split_once('=').ok_or_else(|| format!("--vm {s:?}: expected NAME=QMP_SOCKET[,agent=PATH]"))?;
    let mut parts = rest.split(',');
    let qmp = PathBuf::from(parts.next().unwrap_or_default());
    let mut agent = None;
    for p in parts {
        match p.split_once('=') {
            Some(("agent", path)) => agent = Some(PathBuf::from(path)),
            _ => return Err(format!("--vm {s:?}: unknown option {p:?} (expected agent=PATH)")),
        }
    }
    Ok(VmConfig { agent, ..VmConfig::new(name, qmp) })
}

fn host(a: HostArgs) -> Result<(), String> {
    let mut config = match &a.config {
        Some(p) => Config::load(p).map_err(|e| e.to_string())?,
        None => {
            let vms = a.vms.iter().map(|s| parse_vm_flag(s)).collect::<Result<Vec<_>, _>>()?;
            let c = Config { controller: ControllerConfig::default(), defaults: PolicyConfig::default(), vms };
            c.validate().map_err(|e| format!("{e} (give --config FILE or --vm NAME=QMP_SOCKET)"))?;
            c
        }
    };
    if a.json {
        config.controller.log_format = LogFormat::Json;
    }
    config.controller.verbose |= a.verbose;
    autoballoon::signals::install();
    let logger = Logger::new(config.controller.log_format, config.controller.verbose);
    let ctl = Controller::start(&config, logger);
    let mut since_status = Duration::ZERO;
    while !autoballoon::signals::stop_requested() {
        std::thread::sleep(Duration::from_millis(200));
        since_status += Duration::from_millis(200);
        if a.status_every > 0 && since_status >= Duration::from_secs(a.status_every) {
            since_status = Duration::ZERO;
            let rows: Vec<_> = ctl.vms.iter().map(|v| v.snapshot()).collect();
            eprint!("{}", autoballoon::status_table(&rows));
        }
    }
    ctl.shutdown_flag().store(true, Ordering::SeqCst);
    ctl.stop();
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Cmd::Host(a) => host(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoballoon: error: {e}");
            ExitCode::from(2)
        }
    }
}
