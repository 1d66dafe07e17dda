//! `autoballoon-spikebench`: how fast a spike gets its memory, each configuration side by
//! side against free page reporting alone and no balloon (see
//! [`autoballoon_testbed::spikebench`]).

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "autoballoon-spikebench", version, about = "Spikes at steady state: each configuration's spike time against free page reporting alone and no balloon")]
struct Cli {
    #[command(flatten)]
    args: autoballoon_testbed::spikebench::SpikeArgs,
}

fn main() -> ExitCode {
    match autoballoon_testbed::spikebench::run(Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoballoon-spikebench: error: {e}");
            ExitCode::from(2)
        }
    }
}
