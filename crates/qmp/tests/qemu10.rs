//! The client against transcripts captured from QEMU 10.0.2 (Debian's bookworm-backports
//! build, TCG; `tests/fixtures/*-qemu10.qmp.log`, see the fixtures README), replayed by the
//! fake server. What changed since QEMU 7.2 and is checked here:
//! * guest stats: six new `stat-*` keys (`oom-kills`, `alloc-stalls`, `async-scans`,
//!   `direct-scans`, `async-reclaims`, `direct-reclaims`), `u64::MAX` when the guest kernel
//!   (6.1 here) does not report them;
//! * `query-status` lost `singlestep`;
//! * `query-migrate`'s `ram` lost `skipped` (and the reply `compression`/`disk`);
//! * `query-migrate-parameters` lost the `compress-*`/`block-incremental` parameters and
//!   gained `zero-page-detection` (default `multifd`), `mode`, `direct-io` and others;
//! * `migrate` emits `MIGRATION {"status": "setup"}` *before* its reply;
//! * a new status, `postcopy-recover-setup` (not seen in a plain migration).

mod common;

use autoballoon_qmp::types::{parse_guest_stats, parse_migration_info};
use autoballoon_qmp::{MigrationStatus, QemuVersion, QmpError, BALLOON_DEVICE_PATH};
use common::{assert_clean, connect, fixture, names, FakeServer, Script};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const PACKAGE: &str = "Debian 1:10.0.2+ds-2+deb13u1~bpo12+1";




/// The `return` values of every `<-` reply in a fixture that has `key` at its top level.
fn returns_with(name: &str, key: &str) -> Vec<Value> {
    fixture(name)
        .lines()
        .filter_map(|l| l.strip_prefix("<- "))
        .map(|l| serde_json::from_str::<Value>(l).expect("<- line is JSON"))
        .filter_map(|v| v.get("return").cloned())
        .filter(|r| r.get(key).is_some())
        .collect()
}

#[test]
fn qemu10_greeting_version() {
    for name in [
        "balloon-stats-qemu10.qmp.log",
        "migration-source-qemu10.qmp.log",
        "migration-destination-qemu10.qmp.log",
        "no-balloon-device-qemu10.qmp.log",
    ] {
        let server = FakeServer::start(Script::from_fixture(name));
        let qmp = connect(&server);
        assert_eq!(qmp.version().triple(), (10, 0, 2), "{name}");
        assert_eq!(
            *qmp.version(),
            QemuVersion {
                major: 10,
                minor: 0,
                micro: 2,
                package: PACKAGE.into()
            }
        );
        assert!(qmp.version().triple() > (7, 2, 22));
        assert_eq!(qmp.greeting().capabilities, vec!["oob".to_string()]);
        drop(qmp); // the server then reports the rest of the script as not replayed
        let _ = server.finish();
    }
}

/// A booted 512 MiB guest with deflate-on-oom and free page reporting: balloon, guest
/// stats (with QEMU 10's new keys) and BALLOON_CHANGE events.
#[test]
fn qemu10_replay_balloon_stats() {
    let server = FakeServer::start(Script::from_fixture("balloon-stats-qemu10.qmp.log"));
    let qmp = connect(&server);
    let dev = BALLOON_DEVICE_PATH;

    assert_eq!(qmp.query_balloon().unwrap(), 512 * MIB);
    assert_eq!(
        qmp.qom_get(dev, "guest-stats-polling-interval").unwrap(),
        json!(0)
    );
    qmp.set_stats_polling_interval(dev, 1).unwrap();
    let s = qmp.guest_stats(dev).unwrap();
    assert_eq!(s.total_memory_bytes, Some(479657984));
    assert_eq!(s.available_memory_bytes, Some(445018112));
    assert_eq!(s.free_memory_bytes, Some(445370368));
    assert_eq!(s.disk_caches_bytes, Some(5529600));
    assert_eq!(s.minor_faults, Some(1976));
    assert_eq!(
        (s.swap_in_bytes, s.swap_out_bytes, s.major_faults),
        (Some(0), Some(0), Some(0))
    );
    assert_eq!(s.last_update_epoch_secs, Some(1795480195));
    // QEMU 10's new stats, not reported by the guest's 6.1 kernel: u64::MAX -> None.
    assert_eq!(
        (
            s.oom_kills,
            s.alloc_stalls,
            s.async_scans,
            s.direct_scans,
            s.async_reclaims,
            s.direct_reclaims
        ),
        (None, None, None, None, None, None)
    );
    assert_eq!(qmp.qom_get(dev, "deflate-on-oom").unwrap(), json!(true));
    assert_eq!(
        qmp.qom_get(dev, "free-page-reporting").unwrap(),
        json!(true)
    );
    assert_eq!(qmp.qom_get(dev, "free-page-hint").unwrap(), json!(false));
    assert!(qmp.poll_events().is_empty());

    qmp.set_balloon_guest_size(384 * MIB).unwrap();
    assert_eq!(qmp.query_balloon().unwrap(), 384 * MIB);
    let ev = qmp.poll_events();
    assert_eq!(names(&ev), vec!["BALLOON_CHANGE"; 2]);
    let actual: Vec<u64> = ev.iter().filter_map(|e| e.balloon_actual_bytes()).collect();
    assert_eq!(actual, vec![535822336, 384 * MIB]);
    assert_eq!(ev[0].timestamp, Some((1795480195, 547897)));

    qmp.set_balloon_guest_size(512 * MIB).unwrap();
    assert_eq!(qmp.query_balloon().unwrap(), 512 * MIB);
    let actual: Vec<u64> = qmp
        .poll_events()
        .iter()
        .filter_map(|e| e.balloon_actual_bytes())
        .collect();
    assert_eq!(actual, vec![403701760, 512 * MIB]);

    assert_eq!(qmp.query_memory_size_bytes().unwrap(), 512 * MIB);
    // `singlestep` is gone from query-status in QEMU 10; the helper only reads `status`.
    assert_eq!(qmp.query_status().unwrap(), "running");
    let none = qmp.query_migrate().unwrap();
    assert_eq!(none.status, MigrationStatus::None);
    assert!(!none.status.is_active());
    // The transcript ends without quit: the session was closed by the client.
    drop(qmp);
    assert_clean(server);
}

/// A stat QEMU 10 added, with a value (a 6.12 guest reports them): parsed, not dropped.
#[test]
fn qemu10_new_guest_stats_parse() {
    let mut ret = returns_with("balloon-stats-qemu10.qmp.log", "stats").remove(0);
    let stats = ret["stats"].as_object_mut().unwrap();
    for (k, n) in [
        ("stat-oom-kills", 3),
        ("stat-alloc-stalls", 5),
        ("stat-async-scans", 7),
        ("stat-direct-scans", 11),
        ("stat-async-reclaims", 13),
        ("stat-direct-reclaims", 17),
    ] {
        assert!(stats.contains_key(k), "QEMU 10 reports {k}");
        stats.insert(k.into(), json!(n));
    }
    let s = parse_guest_stats(&ret).unwrap();
    assert_eq!(
        (
            s.oom_kills,
            s.alloc_stalls,
            s.async_scans,
            s.direct_scans,
            s.async_reclaims,
            s.direct_reclaims
        ),
        (Some(3), Some(5), Some(7), Some(11), Some(13), Some(17))
    );
    // QEMU 7.2's frames have none of them.
    let old = returns_with("balloon-stats-stock.qmp.log", "stats").remove(0);
    assert!(!old["stats"]
        .as_object()
        .unwrap()
        .contains_key("stat-oom-kills"));
    assert_eq!(parse_guest_stats(&old).unwrap().oom_kills, None);
}

/// The source of a migration to a second QEMU 10, `query-migrate` polled every 0.5 s at a
/// 32 MiB/s cap, with `events` on: MIGRATION and MIGRATION_PASS events, active then
/// completed.
#[test]
fn qemu10_replay_migration_source() {
    let server = FakeServer::start(Script::from_fixture("migration-source-qemu10.qmp.log"));
    let qmp = connect(&server);
    qmp.enable_migration_events().unwrap();
    qmp.migrate_set_max_bandwidth(32 * MIB).unwrap();
    let params = qmp.execute("query-migrate-parameters", None).unwrap();
    assert_eq!(params["max-bandwidth"], json!(32 * MIB));
    // New in 10.0 (zero pages are detected in the multifd threads by default) ...
    assert_eq!(params["zero-page-detection"], json!("multifd"));
    assert_eq!(params["mode"], json!("normal"));
    // ... and gone since 7.2.
    for gone in [
        "compress-level",
        "compress-threads",
        "decompress-threads",
        "block-incremental",
    ] {
        assert!(params.get(gone).is_none(), "{gone}");
    }
    let caps = qmp.execute("query-migrate-capabilities", None).unwrap();
    assert!(caps
        .as_array()
        .unwrap()
        .contains(&json!({"state": true, "capability": "events"})));

    let port = fixture("migration-source-qemu10.qmp.log")
        .lines()
        .find_map(|l| {
            l.split("tcp:127.0.0.1:")
                .nth(1)
                .map(|p| p.trim_end_matches("\"}}").to_owned())
        })
        .unwrap();
    qmp.migrate(&format!("tcp:127.0.0.1:{port}")).unwrap();
    let mut polls = Vec::new();
    loop {
        let m = qmp.query_migrate().unwrap();
        let done = !m.status.is_active();
        polls.push(m);
        if done {
            break;
        }
    }
    let statuses: Vec<&MigrationStatus> = polls.iter().map(|m| &m.status).collect();
    assert_eq!(
        statuses,
        [
            &MigrationStatus::Active,
            &MigrationStatus::Active,
            &MigrationStatus::Active,
            &MigrationStatus::Completed
        ]
    );
    let active = &polls[0];
    assert_eq!(active.total_time_ms, Some(501));
    assert_eq!(active.expected_downtime_ms, Some(300));
    assert_eq!(active.ram_transferred_bytes, Some(17355998));
    assert!(active.ram_remaining_bytes.unwrap() > 0);
    assert_eq!(active.downtime_ms, None);
    let done = polls.last().unwrap();
    assert_eq!(done.total_time_ms, Some(2010));
    assert_eq!(done.setup_time_ms, Some(0));
    assert_eq!(done.downtime_ms, Some(8));
    assert_eq!(done.ram_transferred_bytes, Some(75884772));
    assert_eq!(done.ram_remaining_bytes, Some(0));
    assert_eq!(done.ram_total_bytes, Some(537403392));
    assert_eq!(done.ram_duplicate_pages, Some(113089));
    assert_eq!(done.ram_normal_pages, Some(18192));
    assert_eq!(done.ram_normal_bytes, Some(74514432));
    assert_eq!(done.ram_page_size_bytes, Some(4096));
    assert_eq!(done.ram_dirty_sync_count, Some(3));
    assert_eq!(done.ram_precopy_bytes, Some(68491949));
    assert_eq!(done.ram_downtime_bytes, Some(7186071));
    assert_eq!(done.ram_postcopy_bytes, Some(0));
    assert!((done.ram_throughput_mbit_per_sec.unwrap() - 302.03).abs() < 0.01);
    // `ram.skipped` (always 0 in 7.2) is gone in 10.0.
    assert!(done.raw["ram"].get("skipped").is_none());

    // Every event the migration sent, in order; the first MIGRATION (setup) came before
    // `migrate`'s reply.
    let ev = qmp.poll_events();
    assert_eq!(
        names(&ev),
        [
            "MIGRATION",
            "MIGRATION_PASS",
            "MIGRATION",
            "MIGRATION_PASS",
            "STOP",
            "MIGRATION",
            "MIGRATION_PASS",
            "MIGRATION"
        ]
    );
    let migration: Vec<MigrationStatus> = ev.iter().filter_map(|e| e.migration_status()).collect();
    assert_eq!(
        migration,
        [
            MigrationStatus::Setup,
            MigrationStatus::Active,
            MigrationStatus::Device,
            MigrationStatus::Completed
        ]
    );
    let passes: Vec<u64> = ev
        .iter()
        .filter(|e| e.name == "MIGRATION_PASS")
        .filter_map(|e| e.data["pass"].as_u64())
        .collect();
    assert_eq!(passes, [1, 2, 3]);

    assert_eq!(qmp.query_status().unwrap(), "postmigrate");
    qmp.quit().unwrap();
    assert_eq!(names(&qmp.poll_events()), vec!["SHUTDOWN"]);
    assert_clean(server);
}

/// Every `query-migrate` reply in the QEMU 10 fixtures parses, and none has a status the
/// client does not know.
#[test]
fn qemu10_every_query_migrate_reply_parses() {
    let mut n = 0;
    for name in [
        "migration-source-qemu10.qmp.log",
        "migration-destination-qemu10.qmp.log",
    ] {
        for ret in returns_with(name, "status") {
            if ret.get("running").is_some() {
                continue; // query-status
            }
            let m = parse_migration_info(&ret).unwrap();
            assert!(
                !matches!(m.status, MigrationStatus::Unknown(_)),
                "{name}: {ret}"
            );
            n += 1;
        }
    }
    assert_eq!(n, 5, "4 polls on the source, 1 on the destination");
    // The status QEMU 9.1 added is known too.
    assert_eq!(
        MigrationStatus::parse("postcopy-recover-setup"),
        MigrationStatus::PostcopyRecoverSetup
    );
    assert!(MigrationStatus::PostcopyRecoverSetup.is_active());
}

#[test]
fn qemu10_replay_migration_destination() {
    let server = FakeServer::start(Script::from_fixture("migration-destination-qemu10.qmp.log"));
    let qmp = connect(&server);
    qmp.enable_migration_events().unwrap();
    assert_eq!(qmp.query_status().unwrap(), "inmigrate");
    assert_eq!(qmp.query_status().unwrap(), "running");
    let ev = qmp.poll_events();
    assert_eq!(names(&ev), ["MIGRATION", "RESUME", "MIGRATION"]);
    assert_eq!(ev[0].migration_status(), Some(MigrationStatus::Active));
    assert_eq!(ev[2].migration_status(), Some(MigrationStatus::Completed));
    assert_eq!(qmp.query_balloon().unwrap(), 512 * MIB);
    // The destination's own view: just the status.
    let m = qmp.query_migrate().unwrap();
    assert_eq!(m.status, MigrationStatus::Completed);
    assert_eq!(m.ram_transferred_bytes, None);
    qmp.quit().unwrap();
    assert_eq!(names(&qmp.poll_events()), vec!["SHUTDOWN"]);
    assert_clean(server);
}

/// No balloon device: the same DeviceNotActive error as 7.2, and the defaults of the
/// migration parameters (max-bandwidth still 128 MiB/s).
#[test]
fn qemu10_replay_no_balloon_device() {
    let server = FakeServer::start(Script::from_fixture("no-balloon-device-qemu10.qmp.log"));
    let qmp = connect(&server);
    let e = qmp.query_balloon().unwrap_err();
    assert!(e.is_device_not_active(), "{e}");
    assert_eq!(
        e.to_string(),
        "QMP command query-balloon failed: DeviceNotActive: No balloon device has been activated"
    );
    assert!(matches!(
        qmp.set_balloon_guest_size(128 * MIB),
        Err(ref e @ QmpError::CommandFailed { .. }) if e.is_device_not_active()
    ));
    assert_eq!(qmp.query_status().unwrap(), "prelaunch");
    assert_eq!(qmp.query_migrate().unwrap().status, MigrationStatus::None);
    let params = qmp.execute("query-migrate-parameters", None).unwrap();
    assert_eq!(params["max-bandwidth"], json!(128 * MIB));
    assert_eq!(params["zero-page-detection"], json!("multifd"));
    qmp.quit().unwrap();
    assert_eq!(names(&qmp.poll_events()), vec!["SHUTDOWN"]);
    assert_clean(server);
}
