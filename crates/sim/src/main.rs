//! `autoballoon-sim --scenario NAME|FILE --policy NAME [--seed N] [--json] [--series F.csv]`,
//! fleets (`--hosts N [--vms-per-host M] [--jobs J] [--shard i/n --json]`, `--merge F...`)
//! and `autoballoon-sim --reproduce experiments/REPORT.md`.

use autoballoon_sim::{report, run, Options, PolicyName, Scenario, SimError};
use clap::Parser;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "autoballoon-sim",
    about = "Continuous ballooning on a virtual clock: core's host loop and policies driving a model of guests, balloon and live migration"
)]
struct Cli {
    /// A built-in scenario's name, or a scenario file.
    #[arg(long, required_unless_present_any = ["list", "reproduce", "bench", "calibrate", "calibrate_write", "merge", "merge_dir"])]
    scenario: Option<String>,
    /// static, swapfree, swapfree-fpr, continuous-stock, continuous-stock-fpr, dsb95, one-shot, iballoon, pressure, shares, free-page-reporting, free-page-hinting.
    #[arg(long, default_value = "swapfree")]
    policy: String,
    /// The random seed (jitter of speeds and bandwidth); the same seed gives the same run.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Writes the time series (one row per VM every `series_every_s`) as CSV.
    #[arg(long, value_name = "F.csv")]
    series: Option<String>,
    /// Writes the series as an SVG chart (size, target, anon, host footprint; migrations shaded).
    #[arg(long, value_name = "F.svg")]
    plot: Option<String>,
    /// Leaves out the static run the overhead and speedup figures compare against.
    #[arg(long)]
    no_baseline: bool,
    /// No progress line (there is none either when stderr is not a terminal).
    #[arg(long, short)]
    quiet: bool,
    /// Fleet mode: this many hosts, each the scenario on its own seed (host h on --seed + h);
    /// prints the fleet's figures as JSON, --json or not (failures, migration percentiles).
    #[arg(long, value_name = "N")]
    hosts: Option<u32>,
    /// M VMs on each host: the scenario's VMs copied round (VM i is a copy of VM i mod k,
    /// named NAME-c, with its programs, migrations and events; the host's memory_gib scales
    /// by M/k); fewer than written keeps the first M. In fleet mode and single runs alike.
    #[arg(long, value_name = "M")]
    vms_per_host: Option<u32>,
    /// Fleet mode: threads the hosts run on [default: the cores this process may use].
    #[arg(long, value_name = "J", requires = "hosts")]
    jobs: Option<usize>,
    /// Fleet mode, with --json: runs only shard i of n (hosts h with h mod n = i) and prints
    /// its result (one line of JSON) for --merge.
    #[arg(long, value_name = "i/n", requires_all = ["hosts", "json"])]
    shard: Option<autoballoon_sim::fleet::Shard>,
    /// Merges shard results (--shard i/n --json, every shard of one fleet) into the fleet's
    /// figures, exactly as the unsharded --hosts run prints them.
    #[arg(long, value_name = "F.json", num_args = 1.., conflicts_with_all = ["scenario", "merge_dir"])]
    merge: Option<Vec<String>>,
    /// As --merge, with every *.json file in this directory.
    #[arg(long, value_name = "DIR", conflicts_with = "scenario")]
    merge_dir: Option<String>,
    /// Lists the built-in scenarios and the policies.
    #[arg(long)]
    list: bool,
    /// Runs every experiment and writes the report (the seeds' numbers beside ours) here.
    #[arg(long, value_name = "REPORT.md")]
    reproduce: Option<String>,
    /// make bench's results (bench/results.json): --reproduce adds the conformance table;
    /// alone, prints it.
    #[arg(long, value_name = "results.json")]
    bench: Option<String>,
    /// make bench-host's results (bench/host/results.json): --reproduce adds E1's measured
    /// side; --calibrate fits the page cache's speeds on it.
    #[arg(long, value_name = "results.json")]
    bench_host: Option<String>,
    /// Prints the calibration's fitted values beside calibration.toml's (with --bench, the
    /// qemu-tcg ones too; docs/simulator.md, Calibration).
    #[arg(long)]
    calibrate: bool,
    /// Fits as --calibrate does and writes the values into this calibration file.
    #[arg(long, value_name = "calibration.toml")]
    calibrate_write: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoballoon-sim: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main(cli: &Cli) -> Result<(), SimError> {
    if cli.list {
        for (name, text) in autoballoon_sim::scenario::BUILTIN {
            let s = Scenario::parse(name, text)?;
            println!("{name:14} {:3} {}", s.experiment, s.description);
        }
        println!(
            "policies: {}",
            PolicyName::ALL.map(|p| p.as_str()).join(", ")
        );
        return Ok(());
    }
    // A file named on the command line, read whole.
    let read_opt = |p: &Option<String>| -> Result<Option<String>, SimError> {
        p.as_ref()
            .map(|p| {
                std::fs::read_to_string(p).map_err(|source| SimError::Read {
                    path: p.clone(),
                    source,
                })
            })
            .transpose()
    };
    let bench = read_opt(&cli.bench)?;
    if cli.calibrate || cli.calibrate_write.is_some() {
        let host = read_opt(&cli.bench_host)?;
        let fits = autoballoon_sim::fit::calibrate(bench.as_deref(), host.as_deref())?;
        print!("{}", autoballoon_sim::fit::markdown(&fits));
        if let Some(path) = &cli.calibrate_write {
            let text = std::fs::read_to_string(path).map_err(|source| SimError::Read {
                path: path.clone(),
                source,
            })?;
            std::fs::write(path, autoballoon_sim::fit::write_into(&text, &fits)).map_err(
                |source| SimError::Write {
                    path: path.clone(),
                    source,
                },
            )?;
            eprintln!("wrote {path}");
        }
        return Ok(());
    }
    if let (Some(text), None) = (&bench, &cli.reproduce) {
        print!(
            "{}",
            autoballoon_sim::conformance::markdown(&autoballoon_sim::conformance::conformance(
                text
            )?)
        );
        return Ok(());
    }
    if let Some(path) = &cli.reproduce {
        let host = read_opt(&cli.bench_host)?;
        let md = report::reproduce(
            !cli.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            bench.as_deref(),
            host.as_deref(),
        )?;
        if let Some(dir) = std::path::Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|source| SimError::Write {
                path: path.clone(),
                source,
            })?;
        }
        std::fs::write(path, md).map_err(|source| SimError::Write {
            path: path.clone(),
            source,
        })?;
        eprintln!("wrote {path}");
        return Ok(());
    }
    if cli.merge.is_some() || cli.merge_dir.is_some() {
        return merge(cli);
    }
    let name = cli.scenario.as_deref().unwrap_or_default();
    let mut s = Scenario::load(name)?;
    if let Some(m) = cli.vms_per_host {
        s = s.with_vms_per_host(m)?;
    }
    let policy = PolicyName::parse(&cli.policy)?;
    let started = std::time::Instant::now();
    if let Some(n) = cli.hosts {
        use autoballoon_sim::fleet;
        let o = fleet::FleetOptions {
            hosts: n.max(1),
            first_seed: cli.seed,
            baseline: !cli.no_baseline,
            jobs: cli.jobs.unwrap_or_else(fleet::cores).max(1),
            progress: !cli.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        };
        let sh = cli.shard.unwrap_or(fleet::Shard::ALL);
        let part = fleet::shard(&s, policy, &o, sh)?;
        let hosts = part.host_figures.len();
        if cli.shard.is_some() {
            println!("{}", serde_json::to_string(&part).unwrap_or_default());
        } else {
            let f = fleet::merge(&[part])?;
            println!("{}", serde_json::to_string_pretty(&f).unwrap_or_default());
        }
        if !cli.quiet {
            eprintln!(
                "simulated {hosts} hosts ({} VMs each) on {} threads in {:.2} s of wall time",
                s.vm.len(),
                o.jobs.min(hosts.max(1)),
                started.elapsed().as_secs_f64()
            );
        }
        return Ok(());
    }
    let r = run(
        &s,
        policy,
        Options {
            seed: Some(cli.seed),
            series: cli.series.is_some() || cli.plot.is_some(),
            progress: !cli.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            no_baseline: cli.no_baseline,
        },
    )?;
    if let Some(path) = &cli.series {
        std::fs::write(path, autoballoon_sim::run::csv(&r.series)).map_err(|source| {
            SimError::Write {
                path: path.clone(),
                source,
            }
        })?;
    }
    if let Some(path) = &cli.plot {
        let title = format!("{} under {} (seed {})", s.name, policy.as_str(), cli.seed);
        std::fs::write(path, autoballoon_sim::plot::svg(&r.series, &title)).map_err(|source| {
            SimError::Write {
                path: path.clone(),
                source,
            }
        })?;
    }
    if cli.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r.summary).unwrap_or_default()
        );
    } else {
        print!("{}", autoballoon_sim::run::text(&r.summary));
    }
    if !cli.quiet {
        eprintln!(
            "simulated in {:.2} s of wall time",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// `--merge F...` / `--merge-dir DIR`: the fleet's summary from its shards' results.
fn merge(cli: &Cli) -> Result<(), SimError> {
    let mut files = cli.merge.clone().unwrap_or_default();
    if let Some(dir) = &cli.merge_dir {
        let rd = |source| SimError::Read {
            path: dir.clone(),
            source,
        };
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir).map_err(rd)? {
            let p = e.map_err(rd)?.path();
            if p.extension().is_some_and(|x| x == "json") {
                found.push(p.to_string_lossy().into_owned());
            }
        }
        found.sort();
        files.extend(found);
    }
    let mut shards = Vec::with_capacity(files.len());
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|source| SimError::Read {
            path: f.clone(),
            source,
        })?;
        shards.push(autoballoon_sim::fleet::parse_shard(f, &text)?);
    }
    let summary = autoballoon_sim::fleet::merge(&shards)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    Ok(())
}
