//! The Prometheus endpoint end to end: a real controller (its VMs' QMP sockets do not
//! exist, so they show `unreachable`), the endpoint on an ephemeral loopback port, a scrape
//! over TCP, and the text checked by real Prometheus parsers: `promtool check metrics`
//! (Debian's `prometheus`) and the Python client's parser (`python3-prometheus-client`).
//! Both are installed by scripts/install-deps.sh; a missing one is installed here when
//! running as root.

use autoballoon::config::{Config, ControllerConfig, LogFormat, PolicyConfig, VmConfig};
use autoballoon::controller::{Controller, HostStatus, VmState, VmStatus};
use autoballoon::log::Logger;
use autoballoon::metrics::{host_of, render, snapshots_of, MetricsServer};
use autoballoon_fakes::prom;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("metrics-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn vm(name: &str, qmp: std::path::PathBuf) -> VmConfig {
    VmConfig::new(name, qmp)
}

fn controller(dir: &std::path::Path, names: &[&str]) -> Controller {
    let vms = names.iter().map(|n| vm(n, dir.join(format!("{n}.qmp")))).collect();
    let config = Config { controller: ControllerConfig { interval_ms: 100, log_format: LogFormat::Json, ..Default::default() }, defaults: PolicyConfig::default(), vms, ..Default::default() };
    let logger = Logger::new(LogFormat::Json, false).to_file(&dir.join("log")).unwrap();
    Controller::start(&config, logger)
}

/// (status line, headers, body) of one request.
fn request(addr: SocketAddr, raw: &[u8]) -> (String, String, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(raw).unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

fn get(addr: SocketAddr, path: &str) -> (String, String, String) {
    request(addr, format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n").as_bytes())
}

fn installed(check: &mut Command) -> bool {
    check.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Makes sure a Debian package's tool is there: installs the package if we are root.
fn ensure(package: &str, check: impl Fn() -> bool) -> Result<(), String> {
    if check() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!("{package} is not installed and this test is not root: run scripts/install-deps.sh"));
    }
    let out = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("apt-get: {e}"))?;
    if !check() {
        return Err(format!("apt-get install {package} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// `promtool check metrics`, where Debian's `prometheus` package is installed. It is not
/// installed for the test: that package is the whole Prometheus server, which would start
/// on a machine with an init system. The Python parser below is always required.
fn promtool(text: &str) -> Result<String, String> {
    match prom::promtool_check(text) {
        Ok(Some(said)) => Ok(said),
        Ok(None) => Ok("skipped: promtool not installed (apt-get install prometheus to add it)".into()),
        Err(e) => Err(format!("{e}\n--- text ---\n{text}")),
    }
}

/// The Python client's parse (Debian's python3, which has python3-prometheus-client,
/// installed here if missing): {family: {type, samples: [[name, labels, value]]}}.
fn python_parse(text: &str) -> Result<serde_json::Value, String> {
    ensure("python3-prometheus-client", || installed(Command::new("/usr/bin/python3").args(["-c", "import prometheus_client.parser"])))?;
    prom::python_parse(text).map_err(|e| format!("{e}\n--- text ---\n{text}"))
}

#[test]
fn a_live_scrape_of_a_real_controller_is_valid_exposition_text() {
    let dir = tmp("live");
    let ctl = controller(&dir, &["web1", "db \"1\"\\x"]);
    let server = MetricsServer::start("127.0.0.1:0", snapshots_of(&ctl), host_of(&ctl), Logger::new(LogFormat::Json, false)).unwrap();
    let addr = server.local_addr();
    assert!(addr.ip().is_loopback() && addr.port() != 0);

    // The VMs' QMP sockets do not exist: both become unreachable.
    let t = Instant::now();
    while !ctl.vms().iter().all(|v| v.snapshot().state == VmState::Unreachable) {
        assert!(t.elapsed() < Duration::from_secs(20), "VMs never became unreachable");
        std::thread::sleep(Duration::from_millis(50));
    }
    // And the decider has looked at the host once.
    while ctl.host_status().steps == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "the decider never stepped");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, headers, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"), "{headers}");
    assert!(body.contains("autoballoon_vm_state{vm=\"web1\",state=\"unreachable\"} 1\n"), "{body}");
    assert!(body.contains("autoballoon_vm_state{vm=\"db \\\"1\\\"\\\\x\",state=\"unreachable\"} 1\n"), "{body}");
    assert!(body.contains("autoballoon_vms 2\n"));
    // The host's own figures, read from this machine's /proc by the decider.
    assert!(body.lines().any(|l| l.starts_with("autoballoon_host_memory_total_bytes ")), "{body}");
    assert!(body.contains("autoballoon_vm_grow_reaction_seconds_bucket{vm=\"web1\",le=\"+Inf\"} 0\n"), "{body}");

    let said = promtool(&body).unwrap();
    eprintln!("promtool check metrics: ok {said}");
    let parsed = python_parse(&body).unwrap();
    // The Python client strips `_total` from counter family names.
    assert_eq!(parsed["autoballoon_vm_actions"]["type"], "counter", "{parsed}");
    assert_eq!(parsed["autoballoon_vm_state"]["type"], "gauge");
    assert_eq!(parsed["autoballoon_vm_grow_reaction_seconds"]["type"], "histogram", "{parsed}");
    let unreachable: Vec<_> = parsed["autoballoon_vm_state"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[1]["state"] == "unreachable" && s[2] == 1.0)
        .map(|s| s[1]["vm"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(unreachable, ["web1", "db \"1\"\\x"], "label values round-trip through the parser");

    // Other paths and methods, and an oversized request.
    assert_eq!(get(addr, "/").0, "HTTP/1.1 404 Not Found");
    assert_eq!(get(addr, "/metricsx").0, "HTTP/1.1 404 Not Found");
    assert_eq!(get(addr, "/metrics?name[]=x").0, "HTTP/1.1 200 OK");
    assert_eq!(request(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").0, "HTTP/1.1 405 Method Not Allowed");
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Junk: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 64 * 1024));
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = c.write_all(&big); // the server may close before reading it all
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.200}");

    // A client that connects and says nothing holds the server for at most its timeout,
    // and the control threads not at all.
    let silent = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    for v in &ctl.vms() {
        assert_eq!(v.snapshot().state, VmState::Unreachable);
    }
    assert!(t.elapsed() < Duration::from_millis(500), "the VMs' status is not held by a stuck scrape");
    let t = Instant::now();
    assert_eq!(get(addr, "/metrics").0, "HTTP/1.1 200 OK");
    assert!(t.elapsed() < Duration::from_secs(8), "served after the silent client's timeout");
    drop(silent);

    server.stop();
    assert!(TcpStream::connect(addr).is_err(), "the port is closed after stop");
    ctl.stop();
}

#[test]
fn rendered_statuses_with_every_field_set_pass_promtool_and_the_python_parser() {
    let mut a = VmStatus { name: "a\nb".into(), state: VmState::Running, ..Default::default() };
    a.configured = autoballoon_core::Kib(4 << 20);
    a.size = autoballoon_core::Kib(1 << 20);
    a.samples = 10;
    a.target = Some(a.size);
    a.used = Some(autoballoon_core::Kib(700 << 10));
    a.guest_oom_kills = Some(0);
    a.metrics.grows = 2;
    a.metrics.shrinks = 3;
    a.agent.hello = Some("0.1.0 (host)".into());
    a.grow_times.reaction.observe(Duration::from_micros(1234));
    a.grow_times.settle.observe(Duration::from_millis(2500));
    let k = autoballoon_core::Kib::from_gib_saturating;
    let pressure = autoballoon_core::procfs::parse_pressure(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../core/fixtures/host-6.18-busy/pressure-memory")).unwrap()).unwrap();
    let host = HostStatus { steps: 3, mem_total: Some(k(24)), mem_available: Some(k(20)), capacity: Some(k(8)), wanted: Some(k(9)), shortfall: Some(k(1)), pressure: Some(pressure), reclaim_mode: "host-need", reclaim_target_pct: Some(80), reclaiming: Some(false), reclaim_excess: Some(k(0)) };
    let text = render(&[a, VmStatus { name: "idle".into(), ..Default::default() }], &host);
    promtool(&text).unwrap();
    let parsed = python_parse(&text).unwrap();
    let size = &parsed["autoballoon_vm_size_bytes"]["samples"][0];
    assert_eq!(size[1]["vm"], "a\nb");
    assert_eq!(size[2], 1073741824.0);
    assert_eq!(parsed["autoballoon_vm_balloon_bytes"]["samples"][0][2], 3.0 * 1073741824.0);
    assert_eq!(parsed["autoballoon_host_shortfall_bytes"]["samples"][0][2], 1073741824.0);
    assert_eq!(parsed["autoballoon_host_memory_pressure_avg10_ratio"]["samples"][0][2], 0.02);
    let reaction = &parsed["autoballoon_vm_grow_reaction_seconds"];
    assert_eq!(reaction["type"], "histogram");
    let sum = reaction["samples"].as_array().unwrap().iter().find(|s| s[0] == "autoballoon_vm_grow_reaction_seconds_sum" && s[1]["vm"] == "a\nb").unwrap();
    assert_eq!(sum[2], 0.001234);
}
