//! The Prometheus endpoint: `GET /metrics` in the text exposition format 0.0.4, one
//! series per VM and the host's own figures. Every metric is documented in
//! docs/metrics.md, and every metric the Grafana dashboard
//! (packaging/grafana/autoballoon-dashboard.json) queries is rendered here (tests in
//! `dashboard`).
//!
//! The server is one thread with a plain `TcpListener`: one connection at a time, a
//! bounded request (8 KiB of headers) and a whole-request deadline ([`DEADLINE`]), so a
//! slow or hostile client costs that thread only, for that long at most, and never holds
//! up shutdown (crate::server_thread). It reads status snapshots (a short lock on each VM's
//! status, the same the decider takes) and never waits on a control thread.

use crate::controller::{HostStatus, VmState, VmStatus};
use crate::histogram::Histogram;
use crate::log::Logger;
use crate::server_thread::{Bounded, Limits, ServerThread};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Where the servers get the VMs' status from: a fresh snapshot of every VM per call.
pub type Snapshots = Arc<dyn Fn() -> Vec<VmStatus> + Send + Sync>;

/// Where the metrics endpoint gets the host's figures from: the decider's last step.
pub type HostSnapshot = Arc<dyn Fn() -> HostStatus + Send + Sync>;

/// The host's figures of a running controller (for [`MetricsServer`]).
pub fn host_of(ctl: &crate::controller::Controller) -> HostSnapshot {
    let host = ctl.host_view();
    Arc::new(move || crate::controller::lock(&host).clone())
}

/// Snapshots of a running controller's VMs (for [`MetricsServer`] and the status socket):
/// the VMs managed at each call (a VM that left has no series any more).
pub fn snapshots_of(ctl: &crate::controller::Controller) -> Snapshots {
    let registry = ctl.registry();
    Arc::new(move || {
        let vms = crate::controller::lock(&registry).clone();
        vms.iter().map(|v| v.snapshot()).collect()
    })
}

/// The content type of the text exposition format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every [`VmState`], in the order `autoballoon_vm_state` lists them.
pub const STATES: [VmState; 7] =
    [VmState::Connecting, VmState::Running, VmState::Migrating, VmState::MigratedAway, VmState::Paused, VmState::Unreachable, VmState::NoBalloon];

// A new VmState must be added to STATES (and docs/metrics.md): this match stops compiling.
const _: fn(VmState) = |s| match s {
    VmState::Connecting | VmState::Running | VmState::Migrating | VmState::MigratedAway | VmState::Paused | VmState::Unreachable | VmState::NoBalloon => {}
};

/// A label value escaped for the text format: `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    /// One sample: `name{labels} value`; `labels` are (name, unescaped value). Values are
    /// integers or finite floats (Rust writes those without an exponent).
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

fn family<'a>(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
    // HELP text escapes backslash and newline (ours have neither; kept for safety).
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    Family { out }
}

/// A histogram's series for one VM: `_bucket` per upper bound (cumulative, `+Inf` last),
/// `_sum` in seconds, `_count`.
fn histogram(f: &mut Family<'_>, name: &str, vm: &str, h: &Histogram) {
    for (le, n) in h.cumulative() {
        let le = if le.is_finite() { le.to_string() } else { "+Inf".to_string() };
        f.sample(&format!("{name}_bucket"), &[("vm", vm), ("le", &le)], n);
    }
    f.sample(&format!("{name}_sum"), &[("vm", vm)], h.sum().as_secs_f64());
    f.sample(&format!("{name}_count"), &[("vm", vm)], h.count());
}

/// The exposition text for these VMs and the host. A value the controller does not know
/// yet (a size before the first sample, no target set, no guest view, no OOM count
/// reported, a host figure it could not read) has no sample rather than a made-up 0.
pub fn render(vms: &[VmStatus], host: &HostStatus) -> String {
    let mut out = String::new();
    let bytes = |k: autoballoon_core::Kib| k.0.saturating_mul(1024);
    type Get = fn(&VmStatus) -> Option<u64>;
    let gauges: [(&str, &str, Get); 5] = [
        ("autoballoon_vm_configured_bytes", "Memory the VM was started with (QEMU -m), in bytes.", |v| (v.configured.0 > 0).then_some(v.configured.0)),
        ("autoballoon_vm_size_bytes", "The VM's measured logical size (configured minus balloon, QMP query-balloon actual), in bytes.", |v| v.known_size().map(|k| k.0)),
        ("autoballoon_vm_target_bytes", "The last balloon target autoballoon set, in bytes.", |v| v.target.map(|k| k.0)),
        ("autoballoon_vm_used_bytes", "Guest memory in use (size minus MemAvailable), in bytes.", |v| v.used.map(|k| k.0)),
        (
            "autoballoon_vm_balloon_bytes",
            "Memory held by the balloon (configured minus size), in bytes.",
            |v| v.known_size().filter(|_| v.configured.0 > 0).map(|s| v.configured.0.saturating_sub(s.0)),
        ),
    ];
    for (name, help, get) in gauges {
        let mut f = family(&mut out, name, "gauge", help);
        for v in vms {
            if let Some(kib) = get(v) {
                f.sample(name, &[("vm", &v.name)], bytes(autoballoon_core::Kib(kib)));
            }
        }
    }

    let mut f = family(&mut out, "autoballoon_vm_state", "gauge", "1 for the VM's present state, 0 for the others.");
    for v in vms {
        for s in STATES {
            f.sample("autoballoon_vm_state", &[("vm", &v.name), ("state", &s.to_string())], u64::from(v.state == s));
        }
    }

    let mut f = family(&mut out, "autoballoon_vm_class", "gauge", "1 for the class the host-wide balancer put the VM in (iBalloon: critical, warn, normal); absent when the balancer has no classes.");
    for v in vms {
        if let Some(c) = v.class {
            f.sample("autoballoon_vm_class", &[("vm", &v.name), ("class", c)], 1);
        }
    }

    let mut f = family(&mut out, "autoballoon_vm_actions_total", "counter", "Balloon targets set, by direction (grow deflates the balloon, shrink inflates it).");
    for v in vms {
        f.sample("autoballoon_vm_actions_total", &[("vm", &v.name), ("direction", "grow")], v.metrics.grows);
        f.sample("autoballoon_vm_actions_total", &[("vm", &v.name), ("direction", "shrink")], v.metrics.shrinks);
    }

    let mut f = family(&mut out, "autoballoon_vm_agent_info", "gauge", "1 once the VM's guest agent said hello; the label is its hello (version and backend).");
    for v in vms {
        if let Some(h) = &v.agent.hello {
            f.sample("autoballoon_vm_agent_info", &[("vm", &v.name), ("hello", h)], 1);
        }
    }

    let counters: &[(&str, &str, Get)] = &[
        ("autoballoon_vm_samples_total", "Samples taken of the VM since the daemon started.", |v| Some(v.samples)),
        ("autoballoon_vm_ticks_total", "Decisions the VM's control loop made (including no change).", |v| Some(v.metrics.ticks)),
        ("autoballoon_vm_held_for_migration_total", "Shrinks withheld because a live migration was running.", |v| Some(v.metrics.held_for_migration)),
        ("autoballoon_vm_unconfirmed_total", "Ticks on which a large change was held by the outlier filter, awaiting confirmation.", |v| Some(v.metrics.unconfirmed)),
        ("autoballoon_vm_no_decision_total", "Ticks on which the policy made no decision (no usable view of the guest).", |v| Some(v.metrics.no_decision)),
        ("autoballoon_vm_actuator_errors_total", "Targets the actuator (QMP balloon) refused or could not deliver.", |v| Some(v.metrics.actuator_errors)),
        ("autoballoon_vm_errors_total", "Errors on this VM: lost QMP sessions, worker panics, targets not handed to its worker.", |v| Some(v.errors)),
        ("autoballoon_vm_guest_oom_kills_total", "OOM kills inside the guest (its /proc/vmstat oom_kill), as its agent reports them.", |v| v.guest_oom_kills),
        ("autoballoon_vm_agent_rejected_total", "Agent samples refused at the border (impossible values).", |v| Some(v.agent.rejected)),
        ("autoballoon_vm_agent_garbage_total", "Lines from the agent that were not valid messages.", |v| Some(v.agent.garbage)),
        ("autoballoon_vm_actual_rejected_total", "Balloon sizes (QMP actual) refused at the border: larger than the VM.", |v| Some(v.actual_rejected)),
        ("autoballoon_vm_backed_ahead_total", "Requests QEMU took to back reported memory again ahead of a program's allocation (x-populate-reported).", |v| Some(v.backed_ahead)),
        ("autoballoon_vm_agent_silent_reconnects_total", "Agent links closed and connected again because nothing came over them for 10 s since they connected.", |v| Some(v.agent_reconnects)),
        ("autoballoon_vm_guest_stats_rejected_total", "Balloon-driver statistics (guest-stats, libvirt's memory stats) refused at the border (impossible values).", |v| Some(v.guest_stats_rejected)),
        ("autoballoon_vm_agent_overlong_total", "Lines from the agent longer than the protocol's bound, dropped whole.", |v| Some(v.agent.overlong)),
        ("autoballoon_vm_agent_flooded_total", "Agent samples dropped for exceeding the rate limit.", |v| Some(v.agent.flooded)),
        ("autoballoon_vm_agent_short_total", "Agent samples that said the guest ran short of memory (each decided at once).", |v| Some(v.agent.short)),
        ("autoballoon_vm_agent_notices_dropped_total", "Notices (a migration's start or end, what the host does for the VM) the agent could not be sent (it was not reading).", |v| Some(v.agent.notices_dropped)),
    ];
    for (name, help, get) in counters {
        let mut f = family(&mut out, name, "counter", help);
        for v in vms {
            if let Some(n) = get(v) {
                f.sample(name, &[("vm", &v.name)], n);
            }
        }
    }
    let mut f = family(&mut out, "autoballoon_vm_qmp_events_dropped_total", "counter", "QMP events from QEMU dropped because the event queue was full.");
    for v in vms {
        f.sample("autoballoon_vm_qmp_events_dropped_total", &[("vm", &v.name)], v.qmp_events_dropped);
    }

    type GetHistogram = fn(&VmStatus) -> &Histogram;
    let histograms: [(&str, &str, GetHistogram); 2] = [
        (
            "autoballoon_vm_grow_reaction_seconds",
            "From the host having the sample a grow was decided on to the hypervisor accepting the grow, in seconds.",
            |v| &v.grow_times.reaction,
        ),
        (
            "autoballoon_vm_grow_settle_seconds",
            "From a grow accepted to the first sample showing the balloon at its target, in seconds (the sample interval's resolution).",
            |v| &v.grow_times.settle,
        ),
    ];
    for (name, help, get) in histograms {
        let mut f = family(&mut out, name, "histogram", help);
        for v in vms {
            histogram(&mut f, name, &v.name, get(v));
        }
    }

    let host_gauges: [(&str, &str, Option<autoballoon_core::Kib>); 5] = [
        ("autoballoon_host_memory_total_bytes", "The host's MemTotal (/proc/meminfo), in bytes.", host.mem_total),
        ("autoballoon_host_memory_available_bytes", "The host's MemAvailable (/proc/meminfo), in bytes.", host.mem_available),
        ("autoballoon_host_capacity_bytes", "Memory the VMs may have together, as the balancers see it, in bytes.", host.capacity),
        ("autoballoon_host_wanted_bytes", "Memory the VMs wanted together at the last step (each VM's policy inside its own rails), in bytes.", host.wanted),
        ("autoballoon_host_shortfall_bytes", "Memory the VMs wanted beyond the capacity at the last step (wanted minus capacity, at least 0), in bytes.", host.shortfall),
    ];
    for (name, help, v) in host_gauges {
        let mut f = family(&mut out, name, "gauge", help);
        if let Some(k) = v {
            f.sample(name, &[], bytes(k));
        }
    }
    // PSI's lines (`full` where the kernel has it); an avg10 that is not a finite number
    // (a `pressure_file` is any file) has no sample: the text format has no `inf`.
    let psi: Vec<(&str, autoballoon_core::procfs::PressureLine)> = host.pressure.map(|p| std::iter::once(("some", p.some)).chain(p.full.map(|f| ("full", f))).collect()).unwrap_or_default();
    let name = "autoballoon_host_memory_pressure_avg10_ratio";
    let mut f = family(&mut out, name, "gauge", "Share of the last 10 s in which tasks stalled on memory (PSI avg10 / 100); some: at least one task, full: all non-idle tasks.");
    for (kind, l) in psi.iter().filter(|(_, l)| l.avg10.is_finite()) {
        f.sample(name, &[("kind", kind)], l.avg10 / 100.0);
    }
    let name = "autoballoon_host_memory_pressure_stalled_seconds_total";
    let mut f = family(&mut out, name, "counter", "Time tasks stalled on memory since the host booted (PSI total), in seconds.");
    for (kind, l) in &psi {
        f.sample(name, &[("kind", kind)], l.total_us as f64 / 1e6);
    }
    let name = "autoballoon_host_reclaim_mode";
    let mut f = family(&mut out, name, "gauge", "Always 1; the label is the reclaim mode ([controller] reclaim: lean, host-need).");
    if !host.reclaim_mode.is_empty() {
        f.sample(name, &[("mode", host.reclaim_mode)], 1);
    }
    let name = "autoballoon_host_reclaim_target_ratio";
    let mut f = family(&mut out, name, "gauge", "host-need: the share of MemTotal the host may use before guests give memory back (host_target_pct / 100).");
    if let Some(p) = host.reclaim_target_pct {
        f.sample(name, &[], f64::from(p) / 100.0);
    }
    let name = "autoballoon_host_reclaiming";
    let mut f = family(&mut out, name, "gauge", "host-need: 1 when memory was reclaimed for the host at the last step (its use passed the target, or its memory was unknown), else 0.");
    if let Some(r) = host.reclaiming {
        f.sample(name, &[], u64::from(r));
    }
    let name = "autoballoon_host_reclaim_excess_bytes";
    let mut f = family(&mut out, name, "gauge", "host-need: the host's use (with what growing VMs asked for) above its target at the last step, in bytes; 0 below it.");
    if let Some(k) = host.reclaim_excess {
        f.sample(name, &[], bytes(k));
    }
    let mut f = family(&mut out, "autoballoon_host_steps_total", "counter", "Decision steps the host loop took (one per tick for all VMs).");
    f.sample("autoballoon_host_steps_total", &[], host.steps);

    let mut f = family(&mut out, "autoballoon_vms", "gauge", "VMs the daemon manages.");
    f.sample("autoballoon_vms", &[], vms.len() as u64);
    let mut f = family(&mut out, "autoballoon_build_info", "gauge", "Always 1; the label is the daemon's version.");
    f.sample("autoballoon_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1);
    out
}

/// Longest request head read (request line and headers).
const MAX_REQUEST: usize = 8 * 1024;
/// How long a client may take to send its request and read the answer, in all.
pub const DEADLINE: Duration = Duration::from_secs(5);
/// The running endpoint; stops when dropped or `stop`ped.
pub struct MetricsServer {
    addr: SocketAddr,
    thread: ServerThread,
}

impl MetricsServer {
    /// Binds `listen` (`IP:PORT`; port 0 picks a free one) and serves from a thread.
    pub fn start(listen: &str, snapshots: Snapshots, host: HostSnapshot, log: Logger) -> std::io::Result<MetricsServer> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let limits = Limits { deadline: DEADLINE, idle: DEADLINE };
        let thread = ServerThread::spawn("metrics", "metrics", log, limits, move || listener.accept().map(|(c, _)| c), move |c| serve(c, &snapshots, &host))?;
        Ok(MetricsServer { addr, thread })
    }

    /// The bound address (the port chosen for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stop(mut self) {
        self.thread.halt();
    }
}


/// Reads a request head of at most [`MAX_REQUEST`] bytes: `Ok(None)` if it was longer.
fn read_head(conn: &mut impl Read) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n").or_else(|| buf.windows(2).position(|w| w == b"\n\n")) {
            buf.truncate(end);
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
        if buf.len() > MAX_REQUEST {
            return Ok(None);
        }
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "client closed before the end of its request"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn respond(conn: &mut impl Write, status: &str, content_type: &str, body: &str, head_only: bool) -> std::io::Result<()> {
    let mut r = format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    if !head_only {
        r.push_str(body);
    }
    conn.write_all(r.as_bytes())?;
    conn.flush()
}

fn serve(mut conn: Bounded<TcpStream>, snapshots: &Snapshots, host: &HostSnapshot) -> std::io::Result<()> {
    let text = "text/plain; charset=utf-8";
    let Some(head) = read_head(&mut conn)? else {
        return respond(&mut conn, "431 Request Header Fields Too Large", text, "request too large\n", false);
    };
    let mut words = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, target) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => respond(&mut conn, "200 OK", CONTENT_TYPE, &render(&snapshots(), &host()), method == "HEAD"),
        ("GET" | "HEAD", _) => respond(&mut conn, "404 Not Found", text, "not found: the metrics are at /metrics\n", method == "HEAD"),
        _ => respond(&mut conn, "405 Method Not Allowed", text, "only GET /metrics\n", false),
    }
}

#[cfg(test)]
mod dashboard;

#[cfg(test)]
mod tests {
    use super::*;
    use autoballoon_core::procfs::parse_pressure;
    use autoballoon_core::Kib;
    use std::time::Duration;

    fn vm(name: &str) -> VmStatus {
        VmStatus { name: name.into(), ..Default::default() }
    }

    fn lines_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} "))).collect()
    }

    #[test]
    fn a_client_dripping_its_request_delays_shutdown_by_less_than_a_second() {
        use crate::config::LogFormat;
        let snapshots: Snapshots = std::sync::Arc::new(Vec::new);
        let server = MetricsServer::start("127.0.0.1:0", snapshots, std::sync::Arc::new(HostStatus::default), crate::log::Logger::new(LogFormat::Json, false)).unwrap();
        let addr = server.local_addr();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            let _ = tx.send(());
            // A byte every 0.5 s, for longer than the whole-request deadline.
            for b in b"GET /metrics HTTP/1.1\r\n".iter().cycle().take(40) {
                if c.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(1200));
        let asked = std::time::Instant::now();
        server.stop();
        assert!(asked.elapsed() < Duration::from_secs(1), "shutdown took {:?}", asked.elapsed());
    }

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_label("plain-vm_1"), "plain-vm_1");
    }

    #[test]
    fn sizes_are_bytes_and_unknown_values_have_no_sample() {
        let mut a = vm("a");
        a.configured = Kib(4 * 1024 * 1024);
        a.size = Kib(1024 * 1024);
        a.samples = 3;
        a.target = Some(Kib(1024 * 1024));
        a.used = Some(Kib(512 * 1024));
        a.state = VmState::Running;
        let b = vm("b"); // never sampled
        let t = render(&[a, b], &HostStatus::default());
        assert_eq!(lines_of(&t, "autoballoon_vm_configured_bytes"), ["autoballoon_vm_configured_bytes{vm=\"a\"} 4294967296"]);
        assert_eq!(lines_of(&t, "autoballoon_vm_size_bytes"), ["autoballoon_vm_size_bytes{vm=\"a\"} 1073741824"]);
        assert_eq!(lines_of(&t, "autoballoon_vm_balloon_bytes"), ["autoballoon_vm_balloon_bytes{vm=\"a\"} 3221225472"]);
        assert_eq!(lines_of(&t, "autoballoon_vm_target_bytes"), ["autoballoon_vm_target_bytes{vm=\"a\"} 1073741824"]);
        assert_eq!(lines_of(&t, "autoballoon_vm_used_bytes"), ["autoballoon_vm_used_bytes{vm=\"a\"} 536870912"]);
        assert!(lines_of(&t, "autoballoon_vm_guest_oom_kills_total").is_empty());
        assert!(t.contains("autoballoon_vm_samples_total{vm=\"b\"} 0\n"));
        assert!(t.contains("autoballoon_vms 2\n"));
    }

    #[test]
    fn state_is_one_hot() {
        let mut a = vm("a");
        a.state = VmState::Unreachable;
        let t = render(&[a], &HostStatus::default());
        let s = lines_of(&t, "autoballoon_vm_state");
        assert_eq!(s.len(), STATES.len());
        assert_eq!(s.iter().filter(|l| l.ends_with(" 1")).collect::<Vec<_>>(), [&"autoballoon_vm_state{vm=\"a\",state=\"unreachable\"} 1"]);
    }

    #[test]
    fn counters_and_directions() {
        let mut a = vm("a");
        a.metrics.grows = 5;
        a.metrics.shrinks = 7;
        a.metrics.held_for_migration = 2;
        a.errors = 1;
        a.guest_oom_kills = Some(0);
        a.agent.rejected = 3;
        a.agent.garbage = 4;
        a.agent.overlong = 5;
        a.agent.flooded = 6;
        a.agent.notices_dropped = 8;
        a.qmp_events_dropped = 9;
        a.actual_rejected = 10;
        a.guest_stats_rejected = 11;
        a.agent.hello = Some("0.1.0 (host)".into());
        let t = render(&[a], &HostStatus::default());
        for want in [
            "autoballoon_vm_actions_total{vm=\"a\",direction=\"grow\"} 5",
            "autoballoon_vm_actions_total{vm=\"a\",direction=\"shrink\"} 7",
            "autoballoon_vm_held_for_migration_total{vm=\"a\"} 2",
            "autoballoon_vm_errors_total{vm=\"a\"} 1",
            "autoballoon_vm_guest_oom_kills_total{vm=\"a\"} 0",
            "autoballoon_vm_agent_rejected_total{vm=\"a\"} 3",
            "autoballoon_vm_agent_garbage_total{vm=\"a\"} 4",
            "autoballoon_vm_agent_overlong_total{vm=\"a\"} 5",
            "autoballoon_vm_agent_flooded_total{vm=\"a\"} 6",
            "autoballoon_vm_agent_notices_dropped_total{vm=\"a\"} 8",
            "autoballoon_vm_qmp_events_dropped_total{vm=\"a\"} 9",
            "autoballoon_vm_actual_rejected_total{vm=\"a\"} 10",
            "autoballoon_vm_guest_stats_rejected_total{vm=\"a\"} 11",
            "autoballoon_vm_agent_info{vm=\"a\",hello=\"0.1.0 (host)\"} 1",
        ] {
            assert!(t.lines().any(|l| l == want), "missing {want}:\n{t}");
        }
    }

    #[test]
    fn every_family_has_help_and_type_once_and_names_are_valid() {
        let t = render(&[vm("a\"b\\c\nd"), vm("e")], &HostStatus::default());
        let mut typed = std::collections::HashSet::new();
        let mut helped = std::collections::HashSet::new();
        for l in t.lines() {
            if let Some(r) = l.strip_prefix("# TYPE ") {
                let (name, kind) = r.split_once(' ').unwrap();
                assert!(["gauge", "counter", "histogram"].contains(&kind));
                assert!(typed.insert(name.to_string()), "TYPE twice for {name}");
                assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                assert_eq!(kind == "counter", name.ends_with("_total"), "{name}");
                assert_eq!(kind == "histogram", name.ends_with("_seconds") && name.contains("_grow_"), "{name}");
            } else if let Some(r) = l.strip_prefix("# HELP ") {
                assert!(helped.insert(r.split_once(' ').unwrap().0.to_string()));
            } else {
                let name = l.split(['{', ' ']).next().unwrap();
                let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).filter(|f| typed.contains(*f)).unwrap_or(name);
                assert!(typed.contains(family), "sample before its TYPE: {l}");
            }
        }
        assert_eq!(typed, helped);
        assert!(t.contains("{vm=\"a\\\"b\\\\c\\nd\"}"), "{t}");
        // Every documented metric is rendered, and every rendered one is documented.
        let doc = include_str!("../../../docs/metrics.md");
        for name in &typed {
            assert!(doc.contains(&format!("`{name}`")), "{name} is not in docs/metrics.md");
        }
    }

    /// A host with every figure known, from the fixture files of this development host.
    pub(super) fn full_host() -> HostStatus {
        let fixture = |f: &str| std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/fixtures/host-6.18-busy").join(f)).unwrap();
        let mem = autoballoon_core::policy::MemView::from_meminfo(&autoballoon_core::procfs::parse_meminfo(&fixture("meminfo")).unwrap()).unwrap();
        HostStatus {
            steps: 7,
            mem_total: Some(mem.total),
            mem_available: Some(mem.available),
            capacity: Some(Kib::from_gib_saturating(8)),
            wanted: Some(Kib::from_gib_saturating(9)),
            shortfall: Some(Kib::from_gib_saturating(1)),
            pressure: Some(parse_pressure(&fixture("pressure-memory")).unwrap()),
            reclaim_mode: "host-need",
            reclaim_target_pct: Some(80),
            reclaiming: Some(true),
            reclaim_excess: Some(Kib::from_mib_saturating(512)),
        }
    }

    #[test]
    fn host_figures_are_bytes_ratios_and_seconds() {
        let h = full_host();
        let t = render(&[], &h);
        assert!(t.contains(&format!("autoballoon_host_memory_total_bytes {}\n", h.mem_total.unwrap().0 * 1024)), "{t}");
        assert!(t.contains(&format!("autoballoon_host_memory_available_bytes {}\n", h.mem_available.unwrap().0 * 1024)));
        assert!(t.contains("autoballoon_host_capacity_bytes 8589934592\n"));
        assert!(t.contains("autoballoon_host_wanted_bytes 9663676416\n"));
        assert!(t.contains("autoballoon_host_shortfall_bytes 1073741824\n"));
        assert!(t.contains("autoballoon_host_steps_total 7\n"));
        assert!(t.contains("autoballoon_host_reclaim_mode{mode=\"host-need\"} 1\n"), "{t}");
        assert!(t.contains("autoballoon_host_reclaim_target_ratio 0.8\n"));
        assert!(t.contains("autoballoon_host_reclaiming 1\n"));
        assert!(t.contains("autoballoon_host_reclaim_excess_bytes 536870912\n"));
        let p = h.pressure.unwrap();
        let ratio = |kind| lines_of(&t, "autoballoon_host_memory_pressure_avg10_ratio").into_iter().find(|l| l.contains(kind)).unwrap().rsplit(' ').next().unwrap().parse::<f64>().unwrap();
        assert!((ratio("some") - p.some.avg10 / 100.0).abs() < 1e-12);
        assert!((ratio("full") - p.full.unwrap().avg10 / 100.0).abs() < 1e-12);
        assert!(p.some.avg10 > 0.0, "the fixture was captured under pressure");
        let stalled = lines_of(&t, "autoballoon_host_memory_pressure_stalled_seconds_total");
        assert_eq!(stalled[0], format!("autoballoon_host_memory_pressure_stalled_seconds_total{{kind=\"some\"}} {}", p.some.total_us as f64 / 1e6));
        // Nothing known: no made-up zeros.
        let none = render(&[], &HostStatus::default());
        for name in ["autoballoon_host_memory_total_bytes", "autoballoon_host_shortfall_bytes", "autoballoon_host_memory_pressure_avg10_ratio", "autoballoon_host_reclaim_mode", "autoballoon_host_reclaiming"] {
            assert!(lines_of(&none, name).is_empty(), "{name}");
        }
        // A kernel without the `full` line has the `some` one only.
        let some_only = HostStatus { pressure: Some(parse_pressure("some avg10=1.00 avg60=0.00 avg300=0.00 total=5\n").unwrap()), ..Default::default() };
        assert_eq!(lines_of(&render(&[], &some_only), "autoballoon_host_memory_pressure_avg10_ratio"), ["autoballoon_host_memory_pressure_avg10_ratio{kind=\"some\"} 0.01"]);
        // A pressure file with `inf` in it: no sample, rather than text Prometheus refuses.
        let odd = HostStatus { pressure: Some(parse_pressure("some avg10=inf avg60=0.00 avg300=0.00 total=5\n").unwrap()), ..Default::default() };
        assert!(lines_of(&render(&[], &odd), "autoballoon_host_memory_pressure_avg10_ratio").is_empty());
    }

    #[test]
    fn reaction_histograms_are_cumulative_with_sum_and_count() {
        let mut a = vm("a");
        a.grow_times.reaction.observe(Duration::from_millis(3));
        a.grow_times.reaction.observe(Duration::from_millis(40));
        a.grow_times.settle.observe(Duration::from_millis(1500));
        let t = render(&[a], &HostStatus::default());
        let r = lines_of(&t, "autoballoon_vm_grow_reaction_seconds_bucket");
        assert_eq!(r.len(), crate::histogram::REACTION_BOUNDS.len() + 1);
        assert!(r.contains(&"autoballoon_vm_grow_reaction_seconds_bucket{vm=\"a\",le=\"0.0025\"} 0"), "{r:?}");
        assert!(r.contains(&"autoballoon_vm_grow_reaction_seconds_bucket{vm=\"a\",le=\"0.005\"} 1"));
        assert!(r.contains(&"autoballoon_vm_grow_reaction_seconds_bucket{vm=\"a\",le=\"0.05\"} 2"));
        assert_eq!(r.last(), Some(&"autoballoon_vm_grow_reaction_seconds_bucket{vm=\"a\",le=\"+Inf\"} 2"));
        assert_eq!(lines_of(&t, "autoballoon_vm_grow_reaction_seconds_sum"), ["autoballoon_vm_grow_reaction_seconds_sum{vm=\"a\"} 0.043"]);
        assert_eq!(lines_of(&t, "autoballoon_vm_grow_reaction_seconds_count"), ["autoballoon_vm_grow_reaction_seconds_count{vm=\"a\"} 2"]);
        assert!(t.contains("autoballoon_vm_grow_settle_seconds_bucket{vm=\"a\",le=\"1\"} 0\n"));
        assert!(t.contains("autoballoon_vm_grow_settle_seconds_bucket{vm=\"a\",le=\"2\"} 1\n"));
        assert!(t.contains("autoballoon_vm_grow_settle_seconds_count{vm=\"a\"} 1\n"));
    }
}
