//! `autoballoon-migbench`: migrations at the moments one can start, autoballoon's ways
//! side by side with free page reporting (see [`autoballoon_testbed::migbench`]).

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "autoballoon-migbench", version, about = "Migrate guests idle and after a spike: autoballoon (plain QMP and orchestrated) against free page reporting")]
struct Cli {
    #[command(flatten)]
    args: autoballoon_testbed::migbench::BenchArgs,
}

fn main() -> ExitCode {
    match autoballoon_testbed::migbench::run(Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoballoon-migbench: error: {e}");
            ExitCode::from(2)
        }
    }
}
