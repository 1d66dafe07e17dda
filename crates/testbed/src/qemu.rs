use super::console::Console;
use super::wait_for_path;
use autoballoon_core::Kib;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A guest kernel and initramfs built by `guest/build-image.sh`.
#[derive(Debug, Clone)]
pub struct GuestImage {
    pub dir: PathBuf,
}

impl GuestImage {
    /// The image in `dir`, checked for its two files.
    pub fn at(dir: &Path) -> Result<GuestImage, QemuError> {
        for f in ["vmlinuz", "initrd.img"] {
            if !dir.join(f).is_file() {
                return Err(QemuError::Image(dir.join(f)));
            }
        }
        Ok(GuestImage { dir: dir.to_path_buf() })
    }

    /// The image named by `$AUTOBALLOON_IMAGE` (set by `make test`).
    pub fn from_env() -> Result<GuestImage, QemuError> {
        let dir = std::env::var_os("AUTOBALLOON_IMAGE").ok_or(QemuError::NoImageEnv)?;
        GuestImage::at(Path::new(&dir))
    }

    /// The image in `dir` if a command line gave one, else [`GuestImage::from_env`]'s.
    pub fn given_or_env(dir: Option<&Path>) -> Result<GuestImage, QemuError> {
        match dir {
            Some(d) => GuestImage::at(d),
            None => GuestImage::from_env(),
        }
    }
}

/// The agent the guest runs (`autoballoon.agent=` on the kernel command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestAgent {
    /// No agent.
    None,
    /// Reports samples over virtio-serial; the host controller sets the balloon.
    Host,
    /// Sets the patched kernel's own target (`target_pages` in the balloon device's sysfs directory).
    Kernel,
}

/// The environment variable naming the QEMU binary the test bed runs.
pub const QEMU_ENV: &str = "AUTOBALLOON_QEMU";

/// The QEMU the test bed runs unless a [`VmSpec`] names another: `$AUTOBALLOON_QEMU` if set
/// and not empty (e.g. the wrapper `scripts/install-qemu10.sh` prints), else
/// `qemu-system-x86_64` from `PATH` (Debian 12's QEMU 7.2). The one place this is read.
pub fn qemu_binary() -> PathBuf {
    match std::env::var_os(QEMU_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("qemu-system-x86_64"),
    }
}

/// How to start one VM.
#[derive(Debug, Clone)]
pub struct VmSpec {
    /// The QEMU binary (or wrapper) to run; default [`qemu_binary`]. Both QEMU 7.2 and 10.0
    /// accept every flag the test bed passes.
    pub qemu: PathBuf,
    pub name: String,
    pub memory: Kib,
    pub cpus: u32,
    /// virtio-balloon deflate-on-oom: the driver gives pages back before the OOM killer runs.
    pub deflate_on_oom: bool,
    /// Which agent the guest's init starts.
    pub agent: GuestAgent,
    /// Extra kernel command line words.
    pub append: String,
    /// Wait for an incoming migration on this TCP port of 127.0.0.1 instead of booting.
    pub incoming_port: Option<u16>,
    /// virtio-balloon free-page-reporting: the guest reports free 2 MiB blocks and QEMU
    /// discards them. A migration's destination needs the same setting as its source.
    pub free_page_reporting: bool,
    /// virtio-balloon free-page-hint: QEMU asks the guest for free pages when a migration
    /// starts and skips them.
    pub free_page_hint: bool,
    /// Guest NUMA nodes, memory and vCPUs split evenly between them (0: no NUMA topology).
    pub numa_nodes: u32,
    /// A cold-plugged pc-dimm of this size besides `memory` (`-m MEM,slots=2,maxmem=2×MEM`):
    /// an ACPI memory device the guest adds at boot and leaves offline
    /// (`/sys/devices/system/memory`), for memory hotplug tests.
    pub dimm: Option<Kib>,
    /// A virtio-mem device (`virtio-mem-pci`, id `vmem0`) of this size besides `memory`
    /// (`-m MEM,maxmem=MEM+SIZE`), none of it plugged at boot: the host resizes it with
    /// [`crate::guest::virtio_mem_resize`]. Needs a guest kernel with `CONFIG_VIRTIO_MEM`
    /// (`kernel/build.sh vmem`).
    pub virtio_mem: Option<Kib>,
    /// The vCPU has 1 GiB pages (`pdpe1gb`), so the guest has a gigantic hugetlb size.
    pub gigantic_pages: bool,
    /// TCG's threading (`-accel tcg,thread=...`); `None`: QEMU's default (multi-threaded
    /// for a guest whose architecture allows it). [`VmSpec::new`] reads
    /// `$AUTOBALLOON_TCG_THREAD` (`single` or `multi`) for it.
    pub tcg_thread: Option<TcgThread>,
    /// A raw disk image for the guest (`-device virtio-blk-pci`, `/dev/vda` once the guest
    /// loads `virtio_blk` from its extra modules), host page cache on (`cache=writeback`).
    pub disk: Option<PathBuf>,
}

/// Creates (or truncates) a sparse file of zeros of `size` at `path`, for [`VmSpec::disk`]:
/// it costs the host nothing until the guest writes to it.
pub fn sparse_disk(path: &Path, size: Kib) -> Result<PathBuf, String> {
    std::fs::File::create(path).and_then(|f| f.set_len(size.to_bytes_saturating().0)).map_err(|e| format!("cannot create the disk {}: {e}", path.display()))?;
    Ok(path.to_path_buf())
}

/// Creates (or truncates) a file of `size` at `path` whose every block holds data (a
/// pseudo-random stream, no holes and no zero blocks), for [`VmSpec::disk`]: written here
/// on the host in a second or two, where the guest's own `dd` through TCG and virtio-blk
/// (with an fsync that waits for the host's disk) took 20-30 s, and once in CI over 600 s.
pub fn filled_disk(path: &Path, size: Kib) -> Result<PathBuf, String> {
    use std::io::Write;
    let err = |e: std::io::Error| format!("cannot write the disk {}: {e}", path.display());
    let mut f = std::fs::File::create(path).map_err(err)?;
    let mut left = size.to_bytes_saturating().0;
    let mut block = vec![0u8; 1 << 20];
    // xorshift64: any data will do, as long as none of it is a hole.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while left > 0 {
        for word in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(block.len() as u64);
        f.write_all(&block[..n as usize]).map_err(err)?;
        left -= n;
    }
    // No fsync: the host's page cache is where QEMU reads it from, and a slow host disk
    // would make this wait for nothing.
    Ok(path.to_path_buf())
}

/// QEMU's TCG threading: one host thread for all vCPUs, or one per vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcgThread {
    Single,
    Multi,
}

impl TcgThread {
    /// `single` or `multi`, as `-accel tcg,thread=` and `$AUTOBALLOON_TCG_THREAD` spell it.
    pub fn parse(s: &str) -> Option<TcgThread> {
        match s {
            "single" => Some(TcgThread::Single),
            "multi" => Some(TcgThread::Multi),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TcgThread::Single => "single",
            TcgThread::Multi => "multi",
        }
    }

    /// `$AUTOBALLOON_TCG_THREAD`, if set to a known value.
    pub fn from_env() -> Option<TcgThread> {
        std::env::var("AUTOBALLOON_TCG_THREAD").ok().and_then(|t| TcgThread::parse(&t))
    }
}

impl VmSpec {
    pub fn new(name: &str, memory: Kib) -> VmSpec {
        VmSpec { qemu: qemu_binary(), name: name.into(), memory, cpus: 1, deflate_on_oom: true, agent: GuestAgent::Host, append: String::new(), incoming_port: None, free_page_reporting: false, free_page_hint: false, numa_nodes: 0, dimm: None, virtio_mem: None, gigantic_pages: false, tcg_thread: TcgThread::from_env(), disk: None }
    }
}

/// A QEMU process and its sockets; killed on drop.
pub struct Qemu {
    pub spec: VmSpec,
    child: Child,
    /// The QMP socket the controller uses.
    pub qmp: PathBuf,
    /// A second QMP socket for whoever drives the VM (tests, the demo).
    pub qmp_ctl: PathBuf,
    /// The host side of the agent's virtio-serial port.
    pub agent: PathBuf,
    pub console: Console,
}

/// Starting or talking to QEMU failed.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    /// guest image file {0} is missing: run `make image` (or `make test`) first
    #[error("guest image file {0} is missing: run `make image` (or `make test`) first")]
    Image(PathBuf),
    /// AUTOBALLOON_IMAGE is not set: run the tests with `make test`, or set it to the directory `guest/build-image.sh` prints
    #[error("AUTOBALLOON_IMAGE is not set: run the tests with `make test`, or set it to the directory `guest/build-image.sh --print-dir` prints")]
    NoImageEnv,
    /// cannot start {0}: {1} (is the qemu-system-x86 package installed, or AUTOBALLOON_QEMU right?)
    #[error("cannot start {0}: {1} (is the qemu-system-x86 package installed, or AUTOBALLOON_QEMU right?)")]
    Spawn(PathBuf, std::io::Error),
    /// cannot create {0}: {1}
    #[error("cannot create {0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// QEMU did not create {0} in time; see {1}
    #[error("QEMU did not create {0} in time; see {1}")]
    NoSocket(PathBuf, PathBuf),
    /// QEMU's QMP socket {0} did not answer: {1}; see {2}
    #[error("QEMU's QMP socket {0} did not answer: {1}; see {2}")]
    Qmp(PathBuf, autoballoon_qmp::QmpError, PathBuf),
    /// the guest did not boot to a shell within {0:?}; console log: {1}
    #[error("the guest did not boot to a shell within {0:?}; console log: {1}")]
    Boot(Duration, PathBuf),
    #[error("console: {0}")]
    Console(#[from] super::ConsoleError),
}

impl QemuError {
    /// QEMU's own log, where the error has one.
    pub fn log(&self) -> Option<&Path> {
        match self {
            QemuError::NoSocket(_, log) | QemuError::Qmp(_, _, log) => Some(log),
            _ => None,
        }
    }
}

impl Qemu {
    /// Starts QEMU under TCG and connects to its console. `run_dir` holds the sockets and logs.
    /// Does not wait for the guest to boot; see [`Qemu::wait_booted`].
    pub fn start(image: &GuestImage, spec: VmSpec, run_dir: &Path) -> Result<Qemu, QemuError> {
        std::fs::create_dir_all(run_dir).map_err(|e| QemuError::Io(run_dir.to_path_buf(), e))?;
        let p = |suffix: &str| run_dir.join(format!("{}.{suffix}", spec.name));
        let (qmp, qmp_ctl, agent, serial, log) = (p("qmp"), p("qmp-ctl"), p("agent"), p("serial"), p("qemu.log"));
        for s in [&qmp, &qmp_ctl, &agent, &serial] {
            let _ = std::fs::remove_file(s);
        }
        // `no_timer_check`: a guest booting under TCG on a loaded host can miss the timer
        // interrupts the kernel's IO-APIC check waits for and panic ("IO-APIC + timer
        // doesn't work!": the patched 6.12 guest, one of ten booting at once for make bench).
        let mut append = String::from("console=ttyS0 quiet panic=-1 init_on_alloc=0 no_timer_check");
        append.push_str(match spec.agent {
            GuestAgent::None => " autoballoon.agent=none",
            GuestAgent::Host => " autoballoon.agent=host",
            GuestAgent::Kernel => " autoballoon.agent=kernel",
        });
        if !spec.append.is_empty() {
            append.push(' ');
            append.push_str(&spec.append);
        }
        let balloon = format!(
            "virtio-balloon-pci,id=balloon0{}{}{}",
            if spec.deflate_on_oom { ",deflate-on-oom=on" } else { "" },
            if spec.free_page_reporting { ",free-page-reporting=on" } else { "" },
            // QEMU hints free pages from an iothread (a must for free-page-hint).
            if spec.free_page_hint { ",free-page-hint=on,iothread=iothread0" } else { "" }
        );
        // The flags below work unchanged on QEMU 7.2 and 10.0 (docs/qemu-versions.md).
        let mut cmd = Command::new(&spec.qemu);
        let accel = match spec.tcg_thread {
            Some(t) => format!("tcg,thread={}", t.as_str()),
            None => "tcg".to_string(),
        };
        cmd.args(["-accel", &accel, "-machine", "pc", "-cpu", if spec.gigantic_pages { "qemu64,+pdpe1gb" } else { "qemu64" }, "-nodefaults", "-display", "none", "-no-reboot"])
            // Named threads ("CPU 0/TCG", "balloon-fill"), so that the benches can tell
            // the vCPUs' page faults and CPU time from the rest of QEMU's (`threads_of`).
            .args(["-name", &format!("{},debug-threads=on", spec.name)])
            .args(["-m", &memory_arg(&spec), "-smp", &smp_arg(&spec)])
            .arg("-kernel").arg(image.dir.join("vmlinuz"))
            .arg("-initrd").arg(image.dir.join("initrd.img"))
            .args(["-append", &append])
            .arg("-chardev").arg(format!("socket,id=ser0,path={},server=on,wait=off", serial.display()))
            .args(["-serial", "chardev:ser0"])
            .arg("-qmp").arg(format!("unix:{},server=on,wait=off", qmp.display()))
            .arg("-qmp").arg(format!("unix:{},server=on,wait=off", qmp_ctl.display()))
            .args(["-device", &balloon])
            .args(["-device", "virtio-serial-pci,id=vser0"])
            .arg("-chardev").arg(format!("socket,id=agent0,path={},server=on,wait=off", agent.display()))
            .args(["-device", &format!("virtserialport,chardev=agent0,name={}", autoballoon_core::protocol::PORT_NAME)]);
        if spec.free_page_hint {
            cmd.args(["-object", "iothread,id=iothread0"]);
        }
        for n in 0..spec.numa_nodes {
            let mib = spec.memory.0 / 1024 / u64::from(spec.numa_nodes);
            cmd.args(["-object", &format!("memory-backend-ram,id=numa{n},size={mib}M")]);
            // One socket per node (see `smp_arg`): node n has the n-th run of vCPUs.
            let per_node = (spec.cpus / spec.numa_nodes).max(1);
            let cpus = (n * per_node..(n + 1) * per_node).filter(|c| *c < spec.cpus).map(|c| format!(",cpus={c}")).collect::<String>();
            cmd.args(["-numa", &format!("node,nodeid={n},memdev=numa{n}{cpus}")]);
        }
        if let Some(dimm) = spec.dimm {
            cmd.args(["-object", &format!("memory-backend-ram,id=dimm0-mem,size={}M", dimm.0 / 1024)])
                .args(["-device", "pc-dimm,id=dimm0,memdev=dimm0-mem"]);
        }
        if let Some(size) = spec.virtio_mem {
            cmd.args(["-object", &format!("memory-backend-ram,id=vmem0-mem,size={}M", size.0 / 1024)])
                .args(["-device", "virtio-mem-pci,id=vmem0,memdev=vmem0-mem,requested-size=0"]);
        }
        if let Some(disk) = &spec.disk {
            // An I/O error (the host's disk full) goes to the guest, which reports it, instead
            // of pausing the VM (QEMU's default for ENOSPC), where a test would wait out
            // its timeout with no word why.
            cmd.arg("-drive").arg(format!("file={},format=raw,if=none,id=disk0,cache=writeback,werror=report,rerror=report", disk.display())).args(["-device", "virtio-blk-pci,drive=disk0"]);
        }
        if let Some(port) = spec.incoming_port {
            cmd.args(["-incoming", &format!("tcp:127.0.0.1:{port}")]);
        }
        let logf = std::fs::File::create(&log).map_err(|e| QemuError::Io(log.clone(), e))?;
        let logf2 = logf.try_clone().map_err(|e| QemuError::Io(log.clone(), e))?;
        let child = cmd.stdin(Stdio::null()).stdout(logf2).stderr(logf).spawn().map_err(|e| QemuError::Spawn(spec.qemu.clone(), e))?;
        let mut guard = KillOnDrop(Some(child));
        for s in [&serial, &qmp, &qmp_ctl] {
            if !wait_for_path(s, Duration::from_secs(60)) {
                return Err(QemuError::NoSocket(s.clone(), log));
            }
        }
        // Connect at once: with wait=off QEMU drops console output while no client listens.
        let console = Console::connect(&serial, &p("console.log"))?;
        // QMP greets only once QEMU's main loop runs, and by then `-incoming` listens too.
        autoballoon_qmp::Qmp::connect_with_retry(&qmp_ctl, std::time::Instant::now() + Duration::from_secs(60))
            .map_err(|e| QemuError::Qmp(qmp_ctl.clone(), e, log.clone()))?;
        let child = guard.0.take().expect("child present");
        Ok(Qemu { spec, child, qmp, qmp_ctl, agent, console })
    }

    /// Starts a destination QEMU that waits for an incoming migration on a free local
    /// port, and returns it with that port (for [`super::migrate`]). The port is free
    /// when picked but may be taken before QEMU binds it: then another one is tried.
    pub fn start_incoming(image: &GuestImage, spec: VmSpec, run_dir: &Path) -> Result<(Qemu, u16), QemuError> {
        let mut tries = 0;
        loop {
            let port = super::free_port().map_err(|e| QemuError::Io("a TCP port on 127.0.0.1".into(), e))?;
            match Qemu::start(image, VmSpec { incoming_port: Some(port), ..spec.clone() }, run_dir) {
                Ok(q) => return Ok((q, port)),
                Err(e) if tries < 3 && e.log().is_some_and(|log| std::fs::read_to_string(log).unwrap_or_default().contains("Address already in use")) => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until the guest's shell answers on the console.
    pub fn wait_booted(&self, timeout: Duration) -> Result<Duration, QemuError> {
        let t = self.console.wait_for_text("AUTOBALLOON-GUEST BOOTED", timeout).ok_or_else(|| QemuError::Boot(timeout, self.console.log_path()))?;
        self.console.run("true", timeout).map_err(|_| QemuError::Boot(timeout, self.console.log_path()))?;
        Ok(t)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the QEMU process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills QEMU at once (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// QEMU's resident memory in KiB (what the host really pays for the VM).
    pub fn rss(&self) -> Option<Kib> {
        rss_of(self.child.id())
    }
}

/// QEMU's `-smp`: with NUMA nodes, one socket per node, so that no cache is shared across
/// nodes (the guest kernel warns about such a topology).
fn smp_arg(spec: &VmSpec) -> String {
    match spec.numa_nodes {
        0 | 1 => spec.cpus.to_string(),
        n => format!("{},sockets={n},cores={},threads=1", spec.cpus, (spec.cpus / n).max(1)),
    }
}

/// QEMU's `-m`: the boot memory; with a dimm two slots and room for it, with a virtio-mem
/// device room for it. A size that is not whole MiB goes in KiB (QEMU rounds it up to 8 KiB).
fn memory_arg(spec: &VmSpec) -> String {
    let mib = spec.memory.0 / 1024;
    let boot = if spec.memory.0.is_multiple_of(1024) { format!("{mib}M") } else { format!("{}K", spec.memory.0) };
    let device_mib = |d: Option<Kib>| d.map_or(0, |d| d.0 / 1024);
    let maxmem = mib + device_mib(spec.dimm) + device_mib(spec.virtio_mem);
    match spec.dimm {
        Some(_) => format!("{boot},slots=2,maxmem={}M", (2 * mib).max(maxmem)),
        None if maxmem > mib => format!("{boot},maxmem={maxmem}M"),
        None => boot,
    }
}

/// A process' resident memory (VmRSS), for a thread that only has its pid.
pub fn rss_of(pid: u32) -> Option<Kib> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_kib(&s, "VmRSS").map(Kib)
}

/// The resident part of a QEMU's guest RAM block: the anonymous mappings of exactly `ram`
/// (QEMU maps a guest's memory as one block of its size), apart from QEMU's own memory and
/// TCG's code buffer, which a TCG guest grows when it runs code at new addresses (a
/// guest that re-reads its binaries after evicting them) and which KVM does not have.
pub fn guest_ram_rss_of(pid: u32, ram: Kib) -> Option<Kib> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    smaps_rss_of_size(&s, ram)
}

/// The summed `Rss` of the mappings whose `Size` is exactly `size` in a `/proc/PID/smaps`
/// text; `None` if there is no such mapping. Pure.
pub fn smaps_rss_of_size(smaps: &str, size: Kib) -> Option<Kib> {
    smaps_field_of_size(smaps, size, "Rss")
}

/// The summed `field` (a `kB` line: `Rss`, `AnonHugePages`, ...) of the mappings whose
/// `Size` is exactly `size` in a `/proc/PID/smaps` text; `None` if there is no such
/// mapping. Pure.
pub fn smaps_field_of_size(smaps: &str, size: Kib, field: &str) -> Option<Kib> {
    let mut found = None;
    let mut this_size = None;
    for l in smaps.lines() {
        if let Some(v) = status_kib(l, "Size") {
            this_size = Some(v);
        } else if let Some(v) = status_kib(l, field) {
            if this_size == Some(size.0) {
                found = Some(Kib(found.map_or(0, |k: Kib| k.0).saturating_add(v)));
            }
        }
    }
    found
}

/// A process' page faults so far, all its threads together: (minor, major), from a
/// `/proc/PID/stat` text. The command name may hold spaces and parentheses, so the fields
/// are counted after its last `)`. Pure.
pub fn proc_stat_faults(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt.
    Some((f.get(7)?.parse().ok()?, f.get(9)?.parse().ok()?))
}

/// One thread of a process at one moment: its name, minor page faults and CPU time so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadUsage {
    pub tid: u32,
    pub name: String,
    pub minflt: u64,
    pub cpu_ns: u64,
}

/// A thread's id, name and minor faults from its `/proc/PID/task/TID/stat` text and its CPU
/// time from its `schedstat` text (nanoseconds on the CPU, first field). Pure.
pub fn thread_usage(stat: &str, schedstat: &str) -> Option<ThreadUsage> {
    let name = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?;
    let tid = stat.split_whitespace().next()?.parse().ok()?;
    Some(ThreadUsage { tid, name: name.to_string(), minflt: proc_stat_faults(stat)?.0, cpu_ns: schedstat.split_whitespace().next()?.parse().ok()? })
}

/// Every thread of process `pid` now (a thread that ends while it is read is left out);
/// `None` if the process is gone.
pub fn threads_of(pid: u32) -> Option<Vec<ThreadUsage>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        dir.flatten()
            .filter_map(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let schedstat = std::fs::read_to_string(e.path().join("schedstat")).ok()?;
                thread_usage(&stat, &schedstat)
            })
            .collect(),
    )
}

/// QEMU's host-side memory of one guest at one moment: what the host did for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostMemory {
    /// QEMU's page faults so far (minor, major).
    pub faults: (u64, u64),
    /// The guest RAM block's resident memory and the part of it in transparent huge pages.
    pub ram_rss: Kib,
    pub ram_huge: Kib,
}

/// QEMU `pid`'s host-side memory now, its guest RAM block being `ram` (see
/// [`guest_ram_rss_of`]); `None` if the process is gone.
pub fn host_memory_of(pid: u32, ram: Kib) -> Option<HostMemory> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    Some(HostMemory {
        faults: proc_stat_faults(&stat)?,
        ram_rss: smaps_rss_of_size(&smaps, ram)?,
        ram_huge: smaps_field_of_size(&smaps, ram, "AnonHugePages")?,
    })
}

/// The resident memory of some processes (QEMUs), each on its own and, given the guests'
/// RAM size, that of their guest RAM, sampled every 0.5 s on a thread of its own until
/// [`RssSampler::finish`].
pub struct RssSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<RssSample>>,
}

/// One sample: seconds since the start, and each process's RSS in MiB (`None`: gone), and
/// with a RAM size, each process's guest RAM RSS.
#[derive(Debug, Clone, PartialEq)]
pub struct RssSample {
    pub t_s: f64,
    pub each_mib: Vec<Option<f64>>,
    pub ram_mib: Vec<Option<f64>>,
}

impl RssSample {
    /// The sum over the processes that had an RSS.
    pub fn total_mib(&self) -> f64 {
        self.each_mib.iter().flatten().sum()
    }

    /// The sum of the guest RAM RSS over the processes that had one.
    pub fn ram_total_mib(&self) -> f64 {
        self.ram_mib.iter().flatten().sum()
    }
}

impl RssSampler {
    /// Starts sampling `pids`; a sample is taken when at least one of them has an RSS.
    pub fn start(pids: Vec<u32>) -> RssSampler {
        RssSampler::start_with_ram(pids, None)
    }

    /// [`RssSampler::start`], and each guest's RAM RSS where its RAM is `ram`.
    pub fn start_with_ram(pids: Vec<u32>, ram: Option<Kib>) -> RssSampler {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let each: Vec<Option<f64>> = pids.iter().map(|&p| rss_of(p).map(|k| k.mib_f64())).collect();
                let ram_mib = match ram {
                    Some(r) => pids.iter().map(|&p| guest_ram_rss_of(p, r).map(|k| k.mib_f64())).collect(),
                    None => Vec::new(),
                };
                if each.iter().any(Option::is_some) {
                    samples.push(RssSample { t_s: t0.elapsed().as_secs_f64(), each_mib: each, ram_mib });
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            samples
        });
        RssSampler { stop, thread }
    }

    /// Stops sampling: (seconds since the start, MiB summed over the processes) samples.
    pub fn finish(self) -> Vec<(f64, f64)> {
        self.finish_each().iter().map(|s| (s.t_s, s.total_mib())).collect()
    }

    /// Stops sampling: every sample with each process's RSS.
    pub fn finish_each(self) -> Vec<RssSample> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// A `Key:   N kB` line of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?;
        let mut w = v.split_whitespace();
        let n = w.next()?.parse().ok()?;
        (w.next() == Some("kB")).then_some(n)
    })
}

impl Drop for Qemu {
    fn drop(&mut self) {
        self.kill();
    }
}

struct KillOnDrop(Option<Child>);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read_in_kib() {
        let s = "Name:\tautoballoon\nVmPeak:\t  100 kB\nVmHWM:\t    9876 kB\nVmRSS:\t    5432 kB\nThreads:\t7\n";
        assert_eq!(status_kib(s, "VmRSS"), Some(5432));
        assert_eq!(status_kib(s, "VmHWM"), Some(9876));
        assert_eq!(status_kib(s, "Threads"), None, "no kB unit");
        assert_eq!(status_kib(s, "VmRS"), None, "the whole key");
    }

    #[test]
    fn the_guest_ram_block_is_told_apart_from_tcgs_code_buffer() {
        // A QEMU 10 with `-m 2048 -accel tcg -S` (a part of its smaps): the guest's RAM
        // not touched yet, TCG's 1 GiB code buffer 2 MiB in.
        let smaps = include_str!("../fixtures/qemu10-2g-tcg.smaps");
        assert_eq!(smaps_rss_of_size(smaps, Kib(2 << 20)), Some(Kib(0)));
        assert_eq!(smaps_rss_of_size(smaps, Kib(1_048_572)), Some(Kib(2048)), "the code buffer");
        assert_eq!(smaps_rss_of_size(smaps, Kib(1 << 20)), None, "no guest of 1 GiB here");
        assert_eq!(smaps_rss_of_size("", Kib(2 << 20)), None);
    }

    #[test]
    fn the_guest_rams_huge_pages_and_qemus_faults_parse() {
        let smaps = include_str!("../fixtures/qemu10-2g-tcg.smaps");
        assert_eq!(smaps_field_of_size(smaps, Kib(2 << 20), "AnonHugePages"), Some(Kib(0)));
        let one = "7f0-7f1 rw-p 0 00:00 0\nSize: 4096 kB\nRss: 4096 kB\nAnonHugePages: 2048 kB\n7f2-7f3 rw-p 0 00:00 0\nSize: 8 kB\nRss: 8 kB\nAnonHugePages: 0 kB\n";
        assert_eq!(smaps_field_of_size(one, Kib(4096), "AnonHugePages"), Some(Kib(2048)), "each mapping's own field");
        // A QEMU 10 started with `-accel tcg -m 256 -S`: 4,886 minor and 35 major faults.
        assert_eq!(proc_stat_faults(include_str!("../fixtures/qemu10-tcg.stat")), Some((4886, 35)));
        assert_eq!(proc_stat_faults("1 (a) b) S 0 0 0 0 -1 0 7 0 9 0"), Some((7, 9)), "a name with a parenthesis");
        assert_eq!(proc_stat_faults("1 (a) S 0"), None);
    }

    #[test]
    fn reads_a_threads_name_faults_and_cpu_time() {
        let stat = "4242 (CPU 0/TCG) S 1 4200 4200 0 -1 4194368 31337 0 0 0 1200 300 0 0 20 0 3 0 99 0 0";
        assert_eq!(thread_usage(stat, "15000000000 2000 900\n"), Some(ThreadUsage { tid: 4242, name: "CPU 0/TCG".into(), minflt: 31337, cpu_ns: 15_000_000_000 }));
        assert_eq!(thread_usage(stat, ""), None, "no CPU time");
        assert_eq!(thread_usage("1 )a( S", "5"), None, "no name: not a panic");
    }

    #[test]
    fn memory_goes_in_mib_or_else_kib() {
        let spec = |kib| VmSpec::new("m", Kib(kib));
        assert_eq!(memory_arg(&spec(2 << 20)), "2048M");
        // 2 GiB - 8 KiB: not a multiple of 256 KiB (docs/migration.md, "Why destinations crashed").
        assert_eq!(memory_arg(&spec((2 << 20) - 8)), "2097144K");
    }

    #[test]
    fn memory_devices_get_room_above_the_boot_memory() {
        let mib = Kib::from_mib_saturating;
        let vmem = VmSpec { virtio_mem: Some(mib(1792)), ..VmSpec::new("v", mib(256)) };
        assert_eq!(memory_arg(&vmem), "256M,maxmem=2048M");
        let dimm = VmSpec { dimm: Some(mib(512)), ..VmSpec::new("d", mib(2048)) };
        assert_eq!(memory_arg(&dimm), "2048M,slots=2,maxmem=4096M");
        let both = VmSpec { virtio_mem: Some(mib(4096)), ..dimm };
        assert_eq!(memory_arg(&both), "2048M,slots=2,maxmem=6656M");
    }
}
