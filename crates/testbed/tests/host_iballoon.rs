//! iBalloon's balancer on a host that really is short: four guests in one memory cgroup,
//! the daemon with `balancer = "iballoon"` and a capacity below what the guests could
//! take. Idle guests keep a large buffer (Normal class); when one guest's workload grows
//! past what it has, the balancer moves memory to it and takes it from the idle ones, and
//! the guests' targets together stay within the capacity. `autoballoon status` and the
//! metrics endpoint show the four guests with their classes; the endpoint's text is
//! accepted by `promtool check metrics` and the Python client's parser.
mod common;

use common::fleet::{Fleet, Recorder};
use std::time::{Duration, Instant};

const CAPACITY: u64 = 1450;
const GUESTS: [&str; 4] = ["busy", "idle1", "idle2", "idle3"];
/// The per-VM dead band: a VM whose target would move less keeps the old one.
const DEAD_BAND: u64 = 16;

#[test]
fn iballoon_moves_memory_to_the_growing_guest() {
    let t0 = Instant::now();
    // What the cgroup allows: the capacity plus each QEMU's own memory (TCG code cache,
    // device state), measured at about 60-90 MiB here.
    let mut fleet = Fleet::boot("host_iballoon", &GUESTS, 768, CAPACITY + 4 * 150, None);
    let d = fleet.daemon(&format!("balancer = \"iballoon\"\ncapacity_mib = {CAPACITY}"), "buffer_mib = 192", |_| String::new());
    let rec = Recorder::start(&d.status_socket, &fleet.limit);

    // Settled, idle: every guest at about its use plus the buffer, all Normal, in the capacity.
    let settled = autoballoon_testbed::wait_for(Duration::from_secs(120), Duration::from_millis(500), || {
        let r = rec.rows();
        r.len() >= 12 && r[r.len() - 12..].iter().all(|r| r.sizes.len() == 4 && r.total() <= CAPACITY) && {
            let w = &r[r.len() - 12..];
            w.iter().map(|r| r.total()).max().unwrap_or(0) - w.iter().map(|r| r.total()).min().unwrap_or(0) <= 24
        }
    });
    assert!(settled.is_some(), "the idle guests settle within the capacity:\n{}\n{}", rec.table(2.0), d.log_text());
    let before = rec.rows().last().unwrap().clone();
    eprintln!("settled: {:?} (sum {}), classes {:?}", before.sizes, before.total(), before.classes);

    // The busy guest's workload holds 420 MiB for 40 s.
    let t_spike = rec.now();
    fleet.guest("busy").console.spawn("spike 1 420 40 0 1").unwrap();
    let moved = autoballoon_testbed::wait_for(Duration::from_secs(120), Duration::from_millis(500), || {
        rec.since(t_spike).iter().any(|r| r.sizes["busy"] >= before.sizes["busy"] + 250)
    });
    // Let the balancer finish the move while the workload holds its memory.
    std::thread::sleep(Duration::from_secs(10));
    let during = rec.since(t_spike);
    eprintln!("{}", rec.table(2.0));
    assert!(moved.is_some(), "the busy guest grew by 250 MiB or more from {}:\n{}", before.sizes["busy"], d.log_text());
    let peak_busy = during.iter().map(|r| r.sizes["busy"]).max().unwrap();
    for &idle in &GUESTS[1..] {
        let low = during.iter().map(|r| r.sizes[idle]).min().unwrap();
        assert!(low + 48 <= before.sizes[idle], "{idle} gave memory: from {} to at least {low}", before.sizes[idle]);
    }
    // The targets stay within the capacity. (The sizes may not, for a moment: with
    // deflate-on-oom a squeezed guest takes pages back from its balloon itself.)
    // A VM whose target would move less than the dead band keeps the old one. The status
    // shows each target once its VM's actor has set it, and the actors set one step's
    // targets each in its own time: a row may catch a growth set before the shrinks that
    // pay for it, but the next row must not.
    let over_at = |r: &autoballoon_testbed::fleet::Row| r.targets.len() == 4 && r.targets_total() > CAPACITY + 4 * DEAD_BAND;
    let over: Vec<_> = during.windows(2).filter(|w| over_at(&w[0]) && over_at(&w[1])).map(|w| (w[0].t, w[0].targets_total(), w[1].targets_total())).collect();
    assert!(over.is_empty(), "the targets together stayed within the capacity {CAPACITY} (+ dead bands): over in two rows running at {over:?}\n{}", d.log_text());
    // The classifier follows an EWMA of the free fraction (α = 0.125 a sample), so when the
    // balancer grows the busy guest fast its class crosses 30 % free some samples after its
    // size moved: watch for it while the workload still holds its memory (40 s).
    let left_normal = |r: &autoballoon_testbed::fleet::Row| r.classes.get("busy").is_some_and(|c| c == "critical" || c == "warn");
    let classed = autoballoon_testbed::wait_for(Duration::from_secs(25), Duration::from_millis(500), || rec.since(t_spike).iter().any(left_normal));
    let busy: Vec<_> = rec.since(t_spike).iter().map(|r| (r.t, r.sizes.get("busy").copied(), r.used.get("busy").copied(), r.classes.get("busy").cloned())).collect();
    assert!(classed.is_some(), "the busy guest left the Normal class while its workload held 420 MiB; (t, size, used, class): {busy:?}");

    // The workload ends; the status and the metrics show every guest with its class.
    assert!(fleet.guest("busy").console.wait_for_text("SPIKE done cycles=1 failed=0", Duration::from_secs(120)).is_some(), "spike completes");
    let table = d.status_table().unwrap();
    eprintln!("{table}");
    for n in GUESTS {
        let row = table.lines().find(|l| l.starts_with(&format!("{n} "))).unwrap_or_else(|| panic!("{n} in:\n{table}"));
        assert!(row.contains("running") && ["critical", "warn", "normal"].iter().any(|c| row.contains(c)), "{row}");
    }
    // The endpoint: every guest, its class, and text real parsers accept.
    let text = d.metrics_text().unwrap();
    for n in GUESTS {
        assert!(text.contains(&format!("autoballoon_vm_state{{vm=\"{n}\",state=\"running\"}} 1")), "{n} running in:\n{text}");
        assert!(text.lines().any(|l| l.starts_with(&format!("autoballoon_vm_class{{vm=\"{n}\"")) && l.ends_with(" 1")), "{n}'s class in:\n{text}");
    }
    match autoballoon_fakes::prom::promtool_check(&text) {
        Ok(Some(said)) => eprintln!("promtool check metrics: ok {said}"),
        // Like crates/host/tests/metrics.rs: the Python parser below is always required.
        Ok(None) => eprintln!("promtool check metrics: skipped, promtool not installed (apt-get install prometheus adds it)"),
        Err(e) => panic!("{e}\n--- text ---\n{text}"),
    }
    let parsed = autoballoon_fakes::prom::python_parse(&text).unwrap_or_else(|e| panic!("{e}\n--- text ---\n{text}"));
    assert_eq!(parsed["autoballoon_vm_actions"]["type"], "counter", "{parsed}");
    fleet.assert_all_alive();
    assert_eq!(fleet.guest_oom_kills(), 0, "OOM kills in the guests");
    let lows: Vec<u64> = GUESTS[1..].iter().map(|n| during.iter().map(|r| r.sizes[*n]).min().unwrap()).collect();
    eprintln!("busy {} -> peak {peak_busy} MiB; idle before {:?}, lowest during {lows:?}; {:.0} s in all", before.sizes["busy"], &GUESTS[1..].iter().map(|n| before.sizes[*n]).collect::<Vec<_>>(), t0.elapsed().as_secs_f64());
}
