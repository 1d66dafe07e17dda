//! `autoballoon-soak` (`make soak`): spike cycles of varied shapes with live migrations in
//! between, on the patched and the stock arm, checking that nothing was lost (see
//! [`autoballoon_testbed::soak`]).

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "autoballoon-soak",
    version,
    about = "Soak: verified spike cycles of varied shapes with live migrations in between, on the patched kernel (agent --backend kernel) and the stock kernel (host controller, FPR on)",
    after_help = "Exit status: 0 if no OOM kill, failed allocation, bad page, kernel warning, size disagreement, failed migration or failed spike was seen; 1 if one was (see OUT/REPORT.md); 2 if the run could not be done or stopped early."
)]
struct Cli {
    #[command(flatten)]
    args: autoballoon_testbed::soak::SoakArgs,
}

fn main() -> ExitCode {
    match autoballoon_testbed::soak::run(Cli::parse().args) {
        Ok(o) if o.clean() => ExitCode::SUCCESS,
        Ok(o) => {
            eprintln!("autoballoon-soak: problems found; see {}", o.report.display());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("autoballoon-soak: error: {e}");
            ExitCode::from(2)
        }
    }
}
