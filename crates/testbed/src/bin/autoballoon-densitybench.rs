//! `autoballoon-densitybench`: host memory of several guests over a job sequence, each
//! configuration against free page reporting alone and no balloon (see
//! [`autoballoon_testbed::densitybench`]).

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "autoballoon-densitybench", version, about = "Density: the host memory of several guests over a job sequence, against free page reporting alone")]
struct Cli {
    #[command(flatten)]
    args: autoballoon_testbed::densitybench::DensityArgs,
}

fn main() -> ExitCode {
    match autoballoon_testbed::densitybench::run(Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoballoon-densitybench: error: {e}");
            ExitCode::from(2)
        }
    }
}
