//! Fleet mode: several VMs per host, hosts on threads, shards that merge into exactly the
//! summary of the whole fleet.

use autoballoon_sim::fleet::{self, FleetOptions, FleetShard, Shard};
use autoballoon_sim::{PolicyName, Scenario};

fn tiny() -> Scenario {
    Scenario::load("tiny").unwrap()
}

fn opts(hosts: u32, first_seed: u64, jobs: usize) -> FleetOptions {
    FleetOptions {
        jobs,
        ..FleetOptions::new(hosts, first_seed, true)
    }
}

/// Every shard of `n`, each through its JSON and back, as --merge reads them.
fn shards(s: &Scenario, o: &FleetOptions, n: u32) -> Vec<FleetShard> {
    (0..n)
        .rev()
        .map(|index| {
            let sh = fleet::shard(s, PolicyName::Swapfree, o, Shard { index, count: n }).unwrap();
            let text = serde_json::to_string(&sh).unwrap();
            let back = fleet::parse_shard("t", &text).unwrap();
            assert_eq!(back, sh, "a shard reads back bit for bit");
            back
        })
        .collect()
}

#[test]
fn merged_shards_give_exactly_the_unsharded_summary() {
    // Three VMs per host: each copy migrates twice, its times varying with the jitter.
    let s = tiny().with_vms_per_host(3).unwrap();
    let o = opts(7, 11, 2);
    let whole = fleet::fleet_with(&s, PolicyName::Swapfree, &o).unwrap();
    assert_eq!(
        (whole.hosts, whole.vms_per_host, whole.first_seed),
        (7, 3, 11)
    );
    assert_eq!(whole.migrations, 7 * 3 * 2);
    assert!(whole.avg_migration_speedup_pct.is_some() && whole.avg_overhead_pct.is_some());
    for n in [1, 2, 3, 4, 9] {
        assert_eq!(
            fleet::merge(&shards(&s, &o, n)).unwrap(),
            whole,
            "{n} shards"
        );
    }
    // The threads change nothing.
    assert_eq!(
        fleet::fleet_with(&s, PolicyName::Swapfree, &opts(7, 11, 1)).unwrap(),
        whole
    );
}

#[test]
fn a_shard_holds_its_hosts_by_index() {
    let sh = Shard { index: 1, count: 3 };
    assert_eq!(sh.hosts(8).collect::<Vec<_>>(), [1, 4, 7]);
    assert_eq!(
        "2/5".parse::<Shard>().unwrap(),
        Shard { index: 2, count: 5 }
    );
    for bad in ["5/5", "1/0", "1", "a/2", "-1/2"] {
        assert!(bad.parse::<Shard>().is_err(), "{bad}");
    }
    let part = fleet::shard(&tiny(), PolicyName::Swapfree, &opts(8, 0, 2), sh).unwrap();
    let hosts: Vec<(u32, u64)> = part.host_figures.iter().map(|h| (h.host, h.seed)).collect();
    assert_eq!(hosts, [(1, 1), (4, 4), (7, 7)]);
    assert_eq!(part.migration_ms.iter().map(|(_, c)| c).sum::<u64>(), 6);
}

#[test]
fn shards_that_are_not_one_fleet_do_not_merge() {
    let s = tiny();
    let o = opts(4, 0, 2);
    let all = shards(&s, &o, 2);
    let err = |x: &[FleetShard]| fleet::merge(x).unwrap_err().to_string();
    assert!(err(&all[..1]).contains("missing: 0/2"));
    assert!(err(&[all[0].clone(), all[0].clone()]).contains("given twice"));
    let mut other = all.clone();
    other[0].first_seed = 9;
    assert!(err(&other).contains("another fleet"));
    let mut lost = all.clone();
    lost[0].host_figures.pop();
    assert!(err(&lost).contains("host results"));
    assert!(err(&[]).contains("no shards"));
    assert!(fleet::parse_shard("x.json", "{}")
        .unwrap_err()
        .to_string()
        .contains("x.json"));
    let mut old = all;
    old[1].format = "something else".into();
    assert!(err(&old).contains("format"));
}

#[test]
fn vms_per_host_copies_the_scenario_s_vms_round() {
    let s = Scenario::load("host-pressure").unwrap();
    assert_eq!(s.vm.len(), 4);
    let big = s.with_vms_per_host(10).unwrap();
    let names: Vec<&str> = big.vm.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        ["a", "b", "c", "d", "a-1", "b-1", "c-1", "d-1", "a-2", "b-2"]
    );
    assert_eq!(big.host.memory_gib, Some(9.0 * 10.0 / 4.0));
    assert_eq!(big.vm[9].program[0].start_s, s.vm[1].program[0].start_s);
    let small = s.with_vms_per_host(2).unwrap();
    assert_eq!(small.vm.len(), 2);
    assert_eq!(small.host.memory_gib, Some(4.5));
    assert!(s.with_vms_per_host(0).is_err());
    // The migration plans follow their VMs' copies.
    let t = tiny().with_vms_per_host(3).unwrap();
    let plans: Vec<Option<&str>> = t.migration.iter().map(|m| m.vm.as_deref()).collect();
    assert_eq!(plans, [Some("vm0"), Some("vm0-1"), Some("vm0-2")]);
    let r = autoballoon_sim::run(
        &t,
        PolicyName::Swapfree,
        autoballoon_sim::Options {
            no_baseline: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.summary.vms.len(), 3);
    assert_eq!(r.summary.migrations.len(), 6);
    assert_eq!(r.summary.oom_kills, 0);
}

/// The binary: shards printed with --json and merged with --merge print, byte for byte, what
/// the unsharded run prints.
#[test]
fn the_cli_merges_its_shards_into_the_unsharded_output() {
    let bin = env!("CARGO_BIN_EXE_autoballoon-sim");
    let sim = |args: &[&str]| {
        let o = std::process::Command::new(bin).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let base = [
        "--scenario",
        "tiny",
        "--policy",
        "swapfree",
        "--hosts",
        "5",
        "--vms-per-host",
        "2",
        "--seed",
        "3",
        "-q",
    ];
    let whole = sim(&[&base[..], &["--json"]].concat());
    let dir = std::env::temp_dir().join(format!("autoballoon-sim-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for i in 0..3 {
        let shard = format!("{i}/3");
        let text = sim(&[&base[..], &["--json", "--shard", &shard, "--jobs", "1"]].concat());
        let f = dir.join(format!("shard-{i}.json"));
        std::fs::write(&f, text).unwrap();
        files.push(f.to_string_lossy().into_owned());
    }
    let merged = sim(&[
        &["--merge"][..],
        &files.iter().map(String::as_str).collect::<Vec<_>>(),
    ]
    .concat());
    assert_eq!(merged, whole);
    let merged_dir = sim(&["--merge-dir", &dir.to_string_lossy()]);
    assert_eq!(merged_dir, whole);
    std::fs::remove_dir_all(&dir).unwrap();
}
