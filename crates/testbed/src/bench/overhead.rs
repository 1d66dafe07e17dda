//! Overhead inside the guest: memory bandwidth (Debian's `mbw`, memcpy) and memcached
//! (Debian's, on a unix socket) under a load generator (`mcload`, set:get 1:1, 1:10, 10:1),
//! each configuration on its own fresh guest, against no balloon in the same run. The tools
//! come on a disk (`scripts/bench-tools-disk.sh`), so the guest image stays as it is.
//! While one guest is measured the others are stopped (QMP `stop`, their controllers
//! paused first): under TCG their vCPUs, timers and agents would share the host's two
//! cores with it. (It did not narrow the rounds' spread here, 1144-2176 MiB/s of mbw with
//! them running and 1281-2431 stopped, run/ov1 and run/ov2: this host's own speed moves
//! more; docs/migration.md.)

use super::fleet::Fleet;
use super::model::{Config, OverheadRecord};
use super::scenario::qmp;
use crate::guest::health;
use crate::step;
use std::time::Duration;

/// The set:get ratios of the memcached load.
pub const MC_RATIOS: [(u32, u32); 3] = [(1, 1), (1, 10), (10, 1)];

/// How long each memcached load runs, s; the bandwidth's buffer size, MiB (two of them).
const MC_SECONDS: u32 = 10;
const MBW_MIB: u32 = 128;

/// Unpacks the tools disk and starts memcached (once per guest).
const SETUP: &str = "[ -e /sys/block/vda ] || insmod /lib/modules/autoballoon/extra/virtio_blk.ko; \
    cd / && cpio -id < /dev/vda 2>/dev/null; cd /root; \
    [ -S /tmp/mc.sock ] || memcached -d -u root -m 256 -s /tmp/mc.sock -a 0666 -P /tmp/mc.pid; \
    i=0; while [ ! -S /tmp/mc.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; [ -S /tmp/mc.sock ]";

/// `mbw -q -n N -t0 MIB`'s `AVG` line: the mean memcpy bandwidth, MiB/s. Pure.
pub fn parse_mbw(text: &str) -> Option<f64> {
    let avg = text.lines().find(|l| l.starts_with("AVG"))?;
    avg.split("Copy:").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// `mcload`'s line: operations per second, if it ran without errors. Pure.
pub fn parse_mcload(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("MCLOAD "))?;
    let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k));
    if field("errors=")? != "0" {
        return None;
    }
    field("ops_per_s=")?.parse().ok()
}

/// One round of the overhead figures in `c`'s guest, the fleet's other guests stopped.
pub fn measure(fleet: &mut Fleet, c: Config, run: u32) -> Result<OverheadRecord, String> {
    let others: Vec<Config> = fleet.guests.iter().map(|g| g.config).filter(|&o| o != c).collect();
    for &o in &others {
        fleet.pause(o)?;
        vm_command(fleet, o, "stop")?;
    }
    let r = measure_alone(fleet, c, run);
    for &o in &others {
        vm_command(fleet, o, "cont")?;
        fleet.resume(o);
    }
    r
}

/// `stop` or `cont` on `c`'s QEMU.
fn vm_command(fleet: &mut Fleet, c: Config, command: &str) -> Result<(), String> {
    step(command, qmp(&fleet.guest(c).q)?.execute(command, None)).map(|_| ())
}

fn measure_alone(fleet: &mut Fleet, c: Config, run: u32) -> Result<OverheadRecord, String> {
    let line = fleet.line;
    let g = fleet.guest(c);
    let mut rec = OverheadRecord { qemu: line, config: c, run, mbw_mib_s: None, memcached: vec![], oom_kills: 0, completed: false, error: None, measured: None };
    let ok = |cmd: &str, secs: u64| g.q.console.run(cmd, Duration::from_secs(secs)).ok().filter(|o| o.status == 0).map(|o| o.text);
    if ok(SETUP, 120).is_none() {
        rec.error = Some("the tools disk did not unpack or memcached did not start".into());
        return Ok(rec);
    }
    rec.mbw_mib_s = ok(&format!("mbw -q -n 5 -t0 {MBW_MIB}"), 300).and_then(|t| parse_mbw(&t));
    for (sets, gets) in MC_RATIOS {
        let cmd = format!("mcload /tmp/mc.sock {MC_SECONDS} {sets} {gets} 4");
        let ops = ok(&cmd, u64::from(MC_SECONDS) + 120).and_then(|t| parse_mcload(&t));
        rec.memcached.push((sets, gets, ops));
    }
    let (_, _, kills) = g.seen.news(&health(&g.q, Duration::from_secs(30)));
    rec.oom_kills = kills;
    rec.completed = rec.mbw_mib_s.is_some() && rec.memcached.iter().all(|m| m.2.is_some());
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("{}/tests/fixtures/bench/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    #[test]
    fn mbw_and_mcload_outputs_parse() {
        assert_eq!(parse_mbw(&fixture("mbw-debian12-host.txt")), Some(4797.661));
        assert_eq!(parse_mcload(&fixture("mcload-1-10-host.txt")), Some(298893.6));
        assert_eq!(parse_mcload("MCLOAD ops=10 secs=1.000 ops_per_s=10.0 sets=5 gets=5 hits=5 errors=3"), None, "errors: no figure");
        assert_eq!(parse_mbw("mbw: cannot allocate"), None);
    }
}
