//! `autoballoon-bench` (`make bench`): migrations at every moment and the memory footprint,
//! each configuration side by side; writes `bench/RESULTS.md` (see
//! [`autoballoon_testbed::bench`]).

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "autoballoon-bench", version, about = "Migrations at every moment and the footprint, autoballoon against free page reporting and no balloon; writes bench/RESULTS.md")]
struct Cli {
    #[command(flatten)]
    args: autoballoon_testbed::bench::BenchArgs,
}

fn main() -> ExitCode {
    match autoballoon_testbed::bench::run(Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoballoon-bench: error: {e}");
            ExitCode::from(2)
        }
    }
}
