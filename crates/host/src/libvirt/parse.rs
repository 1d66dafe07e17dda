//! Pure readers of what libvirt's API answers: the domain's XML (`virDomainGetXMLDesc`,
//! scanned for the agent's channel, the domain type and the balloon device), the memory
//! statistics' tagged values (`virDomainMemoryStats`), a job's statistics
//! (`virDomainGetJobStats`), a domain state's number and the hypervisor's version number
//! (`virConnectGetVersion`). No I/O: [`super`] makes the calls. The XML readers are tested
//! on a domain's XML captured from libvirt 9.0 (`crates/host/fixtures/libvirt/`), and never
//! panic on any input (`make fuzz`, target `libvirt`).

use autoballoon_core::migration::Accel;
use autoballoon_core::Kib;

/// What `virDomainGetInfo` says that we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomInfo {
    /// The state's name, as virsh prints it ([`state_name`]).
    pub state: &'static str,
    /// `maxMem` — the domain's `<memory>`: the balloon's ceiling, the configured size.
    pub max: Kib,
    /// `memory` — the domain's `<currentMemory>`: the balloon's size as libvirt last heard of it.
    pub used: Kib,
}

/// A `virDomainState` as virsh names it (`running`, `paused`, `shut off`, ...).
pub fn state_name(state: u32) -> &'static str {
    match state {
        0 => "no state",
        1 => "running",
        2 => "idle",
        3 => "paused",
        4 => "in shutdown",
        5 => "shut off",
        6 => "crashed",
        7 => "pmsuspended",
        _ => "unknown",
    }
}

/// libvirt's memory statistics, values in KiB except `last_update` (seconds since the
/// epoch). libvirt's names: `actual` (the balloon's size), `unused` (MemFree), `available`
/// (MemTotal), `usable` (MemAvailable), `disk_caches`, `rss` (QEMU's resident memory).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemStats {
    pub actual: Option<Kib>,
    pub unused: Option<Kib>,
    pub available: Option<Kib>,
    pub usable: Option<Kib>,
    pub disk_caches: Option<Kib>,
    pub rss: Option<Kib>,
    pub last_update: Option<u64>,
}

/// `virDomainMemoryStats`' `(tag, value)` pairs (`VIR_DOMAIN_MEMORY_STAT_*`); unknown tags
/// are skipped, and there must be an `actual` (the balloon's size).
pub fn mem_stats(pairs: &[(u32, u64)]) -> Result<MemStats, String> {
    let mut s = MemStats::default();
    for &(tag, n) in pairs {
        match tag {
            4 => s.unused = Some(Kib(n)),
            5 => s.available = Some(Kib(n)),
            6 => s.actual = Some(Kib(n)),
            7 => s.rss = Some(Kib(n)),
            8 => s.usable = Some(Kib(n)),
            9 => s.last_update = Some(n),
            10 => s.disk_caches = Some(Kib(n)),
            _ => {}
        }
    }
    if s.actual.is_none() {
        return Err("no `actual` (is there a balloon device?)".into());
    }
    Ok(s)
}

/// A job's `virDomainJobType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobType {
    None,
    Bounded,
    Unbounded,
    Completed,
    Failed,
    Cancelled,
    /// A type this libvirt does not know yet.
    Other(i32),
}

impl JobType {
    pub fn of(raw: i32) -> JobType {
        match raw {
            0 => JobType::None,
            1 => JobType::Bounded,
            2 => JobType::Unbounded,
            3 => JobType::Completed,
            4 => JobType::Failed,
            5 => JobType::Cancelled,
            n => JobType::Other(n),
        }
    }
}

/// `VIR_DOMAIN_JOB_OPERATION_MIGRATION_OUT`.
pub const OPERATION_MIGRATION_OUT: i32 = 5;

/// A domain's job, from `virDomainGetJobStats` (the running one, or with
/// `VIR_DOMAIN_JOB_STATS_COMPLETED` the last finished one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub kind: JobType,
    /// `VIR_DOMAIN_JOB_OPERATION`: e.g. [`OPERATION_MIGRATION_OUT`]; absent without a job.
    pub operation: Option<i32>,
    /// `VIR_DOMAIN_JOB_TIME_ELAPSED`, ms.
    pub elapsed_ms: Option<u64>,
    /// `VIR_DOMAIN_JOB_MEMORY_PROCESSED`, bytes (what was sent of the guest's memory).
    pub memory_processed: Option<u64>,
    /// `VIR_DOMAIN_JOB_DOWNTIME`, ms (once completed).
    pub downtime_ms: Option<u64>,
}

impl JobInfo {
    /// No job: what a driver without job statistics is taken to have.
    pub fn none() -> JobInfo {
        JobInfo { kind: JobType::None, operation: None, elapsed_ms: None, memory_processed: None, downtime_ms: None }
    }
    /// An outgoing migration's job (not a dump or save).
    pub fn is_migration(&self) -> bool {
        self.operation == Some(OPERATION_MIGRATION_OUT)
    }
    /// The job runs (`Bounded` or `Unbounded`).
    pub fn is_running(&self) -> bool {
        matches!(self.kind, JobType::Bounded | JobType::Unbounded)
    }
}

/// What we use of `virDomainGetJobStats`' answer.
pub fn job_info(s: &virt::domain::JobStats) -> JobInfo {
    JobInfo { kind: JobType::of(s.r#type), operation: s.operation, elapsed_ms: s.time_elapsed, memory_processed: s.mem_processed, downtime_ms: s.downtime }
}

/// QEMU's `(major, minor, micro)` from libvirt's version number of the hypervisor
/// (`virConnectGetVersion`: major * 1,000,000 + minor * 1,000 + micro).
pub fn hypervisor_version(v: u64) -> (u32, u32, u32) {
    let part = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    (part(v / 1_000_000), part(v / 1000 % 1000), part(v % 1000))
}

/// The accelerator a domain's XML asks for: `<domain type='kvm'>` is KVM, `type='qemu'`
/// TCG; anything else is unknown.
pub fn domain_accel_in_xml(xml: &str) -> Accel {
    let Some(start) = xml.find("<domain ") else { return Accel::Unknown };
    let rest = &xml[start..];
    let head = &rest[..rest.find('>').unwrap_or(rest.len())];
    match attr(head, "type").as_deref() {
        Some("kvm") => Accel::Kvm,
        Some("qemu") => Accel::Tcg,
        _ => Accel::Unknown,
    }
}

/// The `<memballoon>` of a domain's XML.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memballoon {
    /// `model` (`virtio`, `none`, ...).
    pub model: String,
    /// `autodeflate` (QEMU's `deflate-on-oom`); libvirt writes it only when set.
    pub autodeflate: bool,
    /// `freePageReporting`; libvirt writes it only when set.
    pub free_page_reporting: bool,
}

/// The domain's `<memballoon>` element, if it has one.
pub fn memballoon_in_xml(xml: &str) -> Option<Memballoon> {
    let start = xml.find("<memballoon ")?;
    let rest = &xml[start..];
    let head = &rest[..rest.find('>').unwrap_or(rest.len())];
    let on = |name: &str| attr(head, name).as_deref() == Some("on");
    Some(Memballoon { model: attr(head, "model").unwrap_or_default(), autodeflate: on("autodeflate"), free_page_reporting: on("freePageReporting") })
}

/// The host end of the agent's channel in a domain's XML: the `path` of the
/// `<source mode='bind'>` of the unix `<channel>` whose virtio target is named `port`.
/// A plain scan of libvirt's own formatting (one element a line, single quotes), not a
/// general XML parser.
pub fn agent_socket_in_xml(xml: &str, port: &str) -> Option<String> {
    let mut rest = xml;
    while let Some(open) = rest.find("<channel ") {
        let body = &rest[open..];
        let close = body.find("</channel>")?;
        let channel = &body[..close];
        rest = &body[close..];
        if !channel.lines().next().is_some_and(|l| l.contains("type='unix'")) {
            continue;
        }
        let target = channel.lines().find(|l| l.trim_start().starts_with("<target "));
        if !target.is_some_and(|t| t.contains("type='virtio'") && attr(t, "name").as_deref() == Some(port)) {
            continue;
        }
        let source = channel.lines().find(|l| l.trim_start().starts_with("<source "))?;
        if attr(source, "mode").as_deref() != Some("bind") {
            continue;
        }
        return attr(source, "path");
    }
    None
}

/// The value of ` name='...'` in `element` (libvirt quotes with single quotes), unescaped.
fn attr(element: &str, name: &str) -> Option<String> {
    let key = format!(" {name}='");
    let start = element.find(&key)? + key.len();
    let end = element[start..].find('\'')?;
    Some(xml_unescape(&element[start..start + end]))
}

fn xml_unescape(s: &str) -> String {
    s.replace("&apos;", "'").replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/libvirt").join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn memory_stats_map_libvirt_tags() {
        // What virDomainMemoryStats answered for a running 1 GiB guest (the numbers virsh
        // dommemstat printed, libvirt 9.0): swap_in 0, ..., actual, unused, available, usable,
        // last_update, disk_caches, rss.
        let pairs = [(0, 0), (1, 0), (2, 515), (3, 97366), (6, 1048576), (4, 942468), (5, 983872), (8, 875556), (9, 1795486876), (10, 5408), (11, 0), (12, 0), (7, 239704)];
        let s = mem_stats(&pairs).unwrap();
        assert_eq!(s.actual, Some(Kib(1048576)));
        assert_eq!(s.unused, Some(Kib(942468)));
        assert_eq!(s.available, Some(Kib(983872)));
        assert_eq!(s.usable, Some(Kib(875556)));
        assert_eq!(s.disk_caches, Some(Kib(5408)));
        assert_eq!(s.rss, Some(Kib(239704)));
        assert_eq!(s.last_update, Some(1795486876));
        // Without a balloon driver: only `actual` and `rss`; no `actual` at all is refused.
        assert_eq!(mem_stats(&[(6, 400000), (7, 1)]).unwrap().unused, None);
        assert!(mem_stats(&[(7, 5)]).is_err());
        assert!(mem_stats(&[]).is_err());
        // A tag from a newer libvirt is skipped.
        assert_eq!(mem_stats(&[(6, 1), (99, 7)]).unwrap().actual, Some(Kib(1)));
    }

    #[test]
    fn job_stats_tell_jobs_apart() {
        use virt::domain::JobStats;
        let none = job_info(&JobStats::default());
        assert_eq!(none, JobInfo::none());
        assert!(!none.is_running() && !none.is_migration());
        // A dump is a job, but no migration.
        let dump = job_info(&JobStats { r#type: 2, operation: Some(8), time_elapsed: Some(22), mem_processed: Some(1_048_434), ..Default::default() });
        assert!(dump.is_running() && !dump.is_migration());
        assert_eq!((dump.elapsed_ms, dump.memory_processed), (Some(22), Some(1_048_434)));
        let mig = job_info(&JobStats { r#type: 2, operation: Some(OPERATION_MIGRATION_OUT), ..Default::default() });
        assert!(mig.is_running() && mig.is_migration());
        let done = job_info(&JobStats { r#type: 3, operation: Some(OPERATION_MIGRATION_OUT), downtime: Some(105), ..Default::default() });
        assert_eq!((done.kind, done.downtime_ms), (JobType::Completed, Some(105)));
        assert!(!done.is_running() && done.is_migration());
        assert_eq!(JobType::of(1), JobType::Bounded);
        assert_eq!(JobType::of(4), JobType::Failed);
        assert_eq!(JobType::of(5), JobType::Cancelled);
        assert_eq!(JobType::of(-3), JobType::Other(-3));
    }

    #[test]
    fn states_and_versions() {
        assert_eq!(state_name(1), "running");
        assert_eq!(state_name(3), "paused");
        assert_eq!(state_name(5), "shut off");
        assert_eq!(state_name(1000), "unknown");
        assert_eq!(hypervisor_version(7_002_022), (7, 2, 22));
        assert_eq!(hypervisor_version(10_000_000), (10, 0, 0));
        assert_eq!(hypervisor_version(2), (0, 0, 2));
        assert_eq!(hypervisor_version(u64::MAX).0, u32::MAX);
    }

    #[test]
    fn the_domain_type_gives_the_accelerator() {
        assert_eq!(domain_accel_in_xml(&fixture("dumpxml-running.xml")), Accel::Tcg);
        assert_eq!(domain_accel_in_xml("<domain type='kvm' id='3'>\n<name>x</name>\n</domain>"), Accel::Kvm);
        assert_eq!(domain_accel_in_xml("<domain type='test' id='1'>"), Accel::Unknown);
        assert_eq!(domain_accel_in_xml("<domain type='kvm"), Accel::Unknown);
        assert_eq!(domain_accel_in_xml(""), Accel::Unknown);
    }

    #[test]
    fn the_balloon_device_is_read_from_the_xml() {
        let b = memballoon_in_xml(&fixture("dumpxml-running.xml")).unwrap();
        assert_eq!(b, Memballoon { model: "virtio".into(), autodeflate: true, free_page_reporting: false });
        let b = memballoon_in_xml("<memballoon model='virtio' freePageReporting='on'>").unwrap();
        assert!(b.free_page_reporting && !b.autodeflate);
        assert_eq!(memballoon_in_xml("<memballoon model='none'/>").unwrap().model, "none");
        assert_eq!(memballoon_in_xml("<domain type='kvm'>\n</domain>"), None);
        assert_eq!(memballoon_in_xml("<memballoon model='vir").unwrap().model, "");
    }

    #[test]
    fn the_agent_socket_is_found_in_the_domain_xml() {
        let xml = fixture("dumpxml-running.xml");
        assert_eq!(agent_socket_in_xml(&xml, "org.autoballoon.agent.0").as_deref(), Some("/tmp/ablv/sock/autoballoon-guest.agent"));
        assert_eq!(agent_socket_in_xml(&xml, "org.qemu.guest_agent.0"), None);
        // The serial console is a unix socket too, but no channel.
        assert_eq!(agent_socket_in_xml("<serial type='unix'>\n<source mode='bind' path='/x'/>\n</serial>", "org.autoballoon.agent.0"), None);
        // A connect-mode channel has no socket for us to connect to.
        let connect = "<channel type='unix'>\n  <source mode='connect' path='/y'/>\n  <target type='virtio' name='org.autoballoon.agent.0'/>\n</channel>";
        assert_eq!(agent_socket_in_xml(connect, "org.autoballoon.agent.0"), None);
        let escaped = "<channel type='unix'>\n  <source mode='bind' path='/a&apos;b'/>\n  <target type='virtio' name='p'/>\n</channel>";
        assert_eq!(agent_socket_in_xml(escaped, "p").as_deref(), Some("/a'b"));
        assert_eq!(agent_socket_in_xml("<channel type='unix'>", "p"), None);
    }
}
