use autoballoon_core::policy::{estimate, MemView};
use autoballoon_core::procfs::parse_meminfo;
use autoballoon_core::Kib;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct EstimateArgs {
    /// A /proc/meminfo file.
    #[arg(long)]
    meminfo: PathBuf,
    /// The guest's current size in KiB.
    #[arg(long)]
    current_kb: u64,
    /// The guest's maximum size in KiB.
    #[arg(long)]
    max_kb: u64,
    /// Memory kept free on top of the estimate, KiB.
    #[arg(long, default_value_t = 0)]
    buffer_kb: u64,
    /// Print one JSON object instead of the bare target.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &EstimateArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&a.meminfo).map_err(|e| format!("cannot read {}: {e}", a.meminfo.display()))?;
    let m = parse_meminfo(&text).map_err(|e| format!("{}: {e}", a.meminfo.display()))?;
    let view = MemView::from_meminfo(&m).map_err(|e| format!("{}: {e}", a.meminfo.display()))?;
    let e = estimate(&view, Kib(a.current_kb), Kib(a.max_kb), Kib(a.buffer_kb));
    if a.json {
        let obj = serde_json::json!({
            "target_kb": e.target.0,
            "overcommitted_kb": e.overcommitted.0,
            "swapped_kb": e.swapped.0,
            "available_kb": e.available.0,
            "current_kb": e.current.0,
            "buffer_kb": e.buffer.0,
            "max_kb": a.max_kb,
        });
        println!("{obj}");
    } else {
        println!("{}", e.target.0);
    }
    Ok(())
}
