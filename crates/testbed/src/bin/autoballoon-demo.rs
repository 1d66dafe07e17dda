//! `autoballoon-demo`: boots a guest, shrinks it, spikes it and migrates it with and
//! without autoballoon (see [`autoballoon_testbed::demo`]).

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "autoballoon-demo", version, about = "Boot a guest, shrink it, spike it, and migrate it without autoballoon, with it, and with free page reporting")]
struct Cli {
    #[command(flatten)]
    args: autoballoon_testbed::demo::DemoArgs,
}

fn main() -> ExitCode {
    match autoballoon_testbed::demo::run(Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoballoon-demo: error: {e}");
            ExitCode::from(2)
        }
    }
}
