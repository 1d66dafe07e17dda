//! The host controller's configuration: a TOML file, with flags for the common case.
//! Every key is documented in docs/configuration.md; unknown keys are errors. The policy
//! keys are core's [`PolicyConfig`], shared with the guest agent.

pub use autoballoon_core::config::{InvalidKey, PolicyConfig, PolicyKind};
pub use autoballoon_core::host::{BalancerKind, Reclaim, ReclaimMode};
pub use autoballoon_core::migration::ShrinkSetting;
use autoballoon_core::host::{SharesConfig, VmId, VmShares};
use autoballoon_core::{Kib, Percent};
pub use crate::log::Level;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub controller: ControllerConfig,
    /// Policy and guard-rail settings applied to every VM unless the VM overrides them.
    #[serde(default)]
    pub defaults: PolicyConfig,
    #[serde(default, rename = "vm")]
    pub vms: Vec<VmConfig>,
    /// Where the daemon finds VMs by itself, besides `[[vm]]` (docs/configuration.md).
    #[serde(default)]
    pub discovery: DiscoveryConfig,
    /// Settings of discovered VMs by name, first match wins.
    #[serde(default, rename = "match")]
    pub matches: Vec<MatchConfig>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControllerConfig {
    /// Milliseconds between two samples of a VM.
    pub interval_ms: u64,
    /// `text` or `json` log lines.
    pub log_format: LogFormat,
    /// The lowest level of log lines written: `error`, `warn`, `info`, `debug`.
    pub log_level: Level,
    /// Log every tick, not only actions: the same as `log_level = "debug"`.
    pub verbose: bool,
    /// The host-wide balancer: `independent`, `cap-growth`, `iballoon`, `pressure`, `shares`.
    pub balancer: BalancerKind,
    /// Memory all VMs may have together, MiB; 0 = the host's MemAvailable plus what the
    /// VMs hold now, less `host_reserve_mib`.
    pub capacity_mib: u64,
    /// Memory kept for the host itself when the capacity comes from MemAvailable, MiB.
    pub host_reserve_mib: u64,
    /// The memory cgroup the VMs run in (its directory, cgroup v2 or v1), if it has a
    /// limit: with `capacity_mib = 0` the capacity is then also at most the group's
    /// limit less what others use in it. Empty = none.
    pub memory_cgroup: PathBuf,
    /// The PSI file whose memory pressure is the host's (`pressure` balancer); empty =
    /// `/proc/pressure/memory`. A cgroup v2's `memory.pressure` watches only the VMs' cgroup.
    pub pressure_file: PathBuf,
    /// `HOST:PORT` of the Prometheus endpoint (`GET /metrics`); empty = off.
    pub metrics_listen: String,
    /// The unix socket `autoballoon status` reads; empty = off.
    pub status_socket: PathBuf,
    /// Shrinking while a migration runs: `auto` (where the hypervisor keeps it correct:
    /// KVM, or QEMU 9.0 or later), `always`, `never` (docs/migration.md).
    pub migration_shrink: ShrinkSetting,
    /// How far guests are shrunk: `lean` (toward each estimate at once) or `host-need`
    /// (guests keep their memory until the host's use passes `host_target_pct`).
    pub reclaim: ReclaimMode,
    /// `host-need`: the share of the host's memory (`MemTotal − MemAvailable` against
    /// `MemTotal`) below which guests keep their memory, percent (1 to 100).
    pub host_target_pct: u64,
}

/// The Prometheus endpoint's default address (loopback only).
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9848";
/// The status socket's default path.
pub const DEFAULT_STATUS_SOCKET: &str = "/run/autoballoon/status.sock";

impl ControllerConfig {
    /// The log level the file asks for (`verbose = true` is `debug`).
    pub fn level(&self) -> Level {
        if self.verbose {
            Level::Debug
        } else {
            self.log_level
        }
    }

    /// The reclaim mode with its target (a target out of range, which `validate` refuses,
    /// is taken as 100 %).
    pub fn reclaim(&self) -> Reclaim {
        match self.reclaim {
            ReclaimMode::Lean => Reclaim::Lean,
            ReclaimMode::HostNeed => Reclaim::HostNeed { target: Percent::new_checked(self.host_target_pct).unwrap_or(Percent::FULL) },
        }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            interval_ms: 1000,
            log_format: LogFormat::Text,
            log_level: Level::Info,
            verbose: false,
            balancer: BalancerKind::Independent,
            capacity_mib: 0,
            host_reserve_mib: 1024,
            memory_cgroup: PathBuf::new(),
            pressure_file: PathBuf::new(),
            metrics_listen: DEFAULT_METRICS_LISTEN.into(),
            status_socket: DEFAULT_STATUS_SOCKET.into(),
            migration_shrink: ShrinkSetting::Auto,
            reclaim: ReclaimMode::Lean,
            host_target_pct: 80,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    /// A name for logs and the status view.
    pub name: String,
    /// The VM's QMP socket (`-qmp unix:PATH,server=on,wait=off`); empty for a libvirt domain.
    #[serde(default)]
    pub qmp: PathBuf,
    /// The libvirt domain, as an alternative to `qmp`: managed through libvirt's API
    /// (its library, `libvirt0`) on `libvirt_uri`.
    #[serde(default)]
    pub libvirt_domain: Option<String>,
    /// libvirt's connection URI for `libvirt_domain`.
    #[serde(default = "default_libvirt_uri")]
    pub libvirt_uri: String,
    /// The host side of the agent's virtio-serial chardev (a unix socket QEMU serves), if
    /// any. For a libvirt domain without it: the `<channel>` named
    /// `org.autoballoon.agent.0` in the domain's XML, if there is one.
    #[serde(default)]
    pub agent: Option<PathBuf>,
    /// QOM path of the virtio-balloon device, for guest-stats.
    #[serde(default = "default_balloon_path")]
    pub balloon_device: String,
    /// The VM's own policy: `[defaults]` with the keys its `[vm.policy]` table sets
    /// replaced, key by key ([`Config::parse`] merges them); `None` = `[defaults]`.
    #[serde(default)]
    pub policy: Option<PolicyConfig>,
    /// The older spelling of the VM's `shares` and `max_mib` (now policy keys, inherited
    /// from `[defaults]` key by key); still read, and it wins over `[defaults]`.
    #[serde(default)]
    pub shares: Option<SharesKeys>,
}

impl VmConfig {
    /// A VM at this QMP socket, with no agent and the defaults for everything else.
    pub fn new(name: &str, qmp: impl Into<PathBuf>) -> VmConfig {
        VmConfig { name: name.into(), qmp: qmp.into(), libvirt_domain: None, libvirt_uri: default_libvirt_uri(), agent: None, balloon_device: default_balloon_path(), policy: None, shares: None }
    }

    /// A libvirt domain on `qemu:///system`, with no agent socket given (it is looked up
    /// in the domain's XML) and the defaults for everything else.
    pub fn libvirt(name: &str, domain: &str) -> VmConfig {
        VmConfig { libvirt_domain: Some(domain.into()), ..VmConfig::new(name, PathBuf::new()) }
    }

    /// The VM's agent socket as a log line names it: configured, read from a libvirt
    /// domain's XML when its session begins, or none.
    pub fn agent_description(&self) -> String {
        match (&self.agent, &self.libvirt_domain) {
            (Some(a), _) => a.display().to_string(),
            (None, Some(_)) => "from the domain's XML, if it has a channel".to_string(),
            (None, None) => "none".to_string(),
        }
    }

    /// How the daemon reaches the VM's QEMU.
    pub fn endpoint(&self) -> Endpoint<'_> {
        match &self.libvirt_domain {
            Some(d) => Endpoint::Libvirt { uri: &self.libvirt_uri, domain: d },
            None => Endpoint::Qmp(&self.qmp),
        }
    }
}

/// A VM's QEMU: its QMP socket, or a libvirt domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint<'a> {
    Qmp(&'a Path),
    Libvirt { uri: &'a str, domain: &'a str },
}

impl std::fmt::Display for Endpoint<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Qmp(p) => write!(f, "qmp={}", p.display()),
            Endpoint::Libvirt { uri, domain } => write!(f, "libvirt={domain} on {uri}"),
        }
    }
}

pub fn default_libvirt_uri() -> String {
    crate::libvirt::DEFAULT_URI.into()
}

/// One VM's `[vm.shares]` table, the older spelling of its policy's `shares` and
/// `max_mib`. Its reservation (never reclaimed below) is the VM's one floor, the policy's
/// `min_mib`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SharesKeys {
    /// Relative entitlement.
    pub shares: u64,
    /// Never given more than this, MiB; 0 = no limit.
    pub max_mib: u64,
}

impl Default for SharesKeys {
    fn default() -> Self {
        let d = VmShares::default();
        SharesKeys { shares: d.shares, max_mib: 0 }
    }
}

pub fn default_balloon_path() -> String {
    "/machine/peripheral/balloon0".into()
}

/// The configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// cannot read {0}: {1}
    #[error("cannot read {0}: {1}")]
    Read(PathBuf, std::io::Error),
    /// {0}: {1}
    #[error("{0}: {1}")]
    Syntax(PathBuf, String),
    /// invalid value for `{key}`: {why}
    #[error("invalid value for `{key}`: {why}")]
    Invalid { key: String, why: String },
}

impl From<InvalidKey> for ConfigError {
    fn from(e: InvalidKey) -> ConfigError {
        ConfigError::Invalid { key: e.key, why: e.why.into() }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.into(), e))?;
        Config::parse(&text).map_err(|e| match e {
            ConfigError::Syntax(_, m) => ConfigError::Syntax(path.into(), m),
            other => other,
        })
    }

    /// Parses and validates a configuration file's text. A `[vm.policy]` table inherits
    /// `[defaults]` key by key: the VM's policy is `[defaults]` with the keys the table
    /// sets replaced (the other keys keep `[defaults]`' values, or the built-in defaults).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let syntax = |e: toml::de::Error| ConfigError::Syntax(PathBuf::from("config"), e.to_string());
        let raw: toml::Table = toml::from_str(text).map_err(syntax)?;
        let raw_vms = raw.get("vm").and_then(toml::Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (i, vm) in raw_vms.iter().enumerate() {
            if vm.get("shares").and_then(|s| s.get("min_mib")).is_some() {
                return Err(ConfigError::Invalid {
                    key: format!("vm[{i}].shares.min_mib"),
                    why: "is no longer a key: a VM has one floor, `min_mib` in its [vm.policy] (or [defaults]), which the shares balancer also reserves".into(),
                });
            }
        }
        let raw_matches = raw.get("match").and_then(toml::Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (table, list) in [("vm", raw_vms), ("match", raw_matches)] {
            for (i, t) in list.iter().enumerate() {
                let own = t.get("policy").and_then(toml::Value::as_table);
                let twice = ["shares", "max_mib"].into_iter().find(|k| t.get("shares").and_then(|s| s.get(k)).is_some() && own.is_some_and(|p| p.contains_key(*k)));
                if let Some(k) = twice {
                    return Err(ConfigError::Invalid {
                        key: format!("{table}[{i}].shares.{k}"),
                        why: "is also in the table's [policy]: give a VM's floor, ceiling and shares in one place, its policy table (`min_mib`, `max_mib`, `shares`)".into(),
                    });
                }
            }
        }
        // Every key and type checked, with the file's line numbers in the errors.
        let mut c: Config = toml::from_str::<Config>(text).map_err(syntax)?.with_match_policies(text)?;
        let defaults = raw.get("defaults").and_then(toml::Value::as_table).cloned().unwrap_or_default();
        for (vm, raw_vm) in c.vms.iter_mut().zip(raw_vms) {
            let Some(own) = raw_vm.get("policy").and_then(toml::Value::as_table) else { continue };
            let mut merged = defaults.clone();
            merged.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
            vm.policy = Some(merged.try_into().map_err(syntax)?);
        }
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.controller.interval_ms < 100 {
            return Err(ConfigError::Invalid { key: "controller.interval_ms".into(), why: "must be at least 100".into() });
        }
        if !self.controller.metrics_listen.is_empty() {
            // Literal addresses only: a host name would need a resolver at start.
            if self.controller.metrics_listen.parse::<std::net::SocketAddr>().is_err() {
                return Err(ConfigError::Invalid { key: "controller.metrics_listen".into(), why: "must be IP:PORT (e.g. \"127.0.0.1:9848\"), or \"\" for off".into() });
            }
        }
        let sock = &self.controller.status_socket;
        if !sock.as_os_str().is_empty() && (!sock.is_absolute() || sock.file_name().is_none()) {
            return Err(ConfigError::Invalid { key: "controller.status_socket".into(), why: "must be an absolute path, or \"\" for off".into() });
        }
        if !(1..=100).contains(&self.controller.host_target_pct) {
            return Err(ConfigError::Invalid { key: "controller.host_target_pct".into(), why: "must be 1 to 100 (percent of the host's memory in use below which guests keep theirs)".into() });
        }
        let cg = &self.controller.memory_cgroup;
        if !cg.as_os_str().is_empty() && !cg.is_absolute() {
            return Err(ConfigError::Invalid { key: "controller.memory_cgroup".into(), why: "must be an absolute path (the cgroup's directory, e.g. \"/sys/fs/cgroup/machine.slice\"), or \"\" for none".into() });
        }
        self.defaults.validate("defaults.")?;
        let mut names = std::collections::HashSet::new();
        for (i, vm) in self.vms.iter().enumerate() {
            if vm.name.is_empty() || !names.insert(vm.name.as_str()) {
                return Err(ConfigError::Invalid { key: format!("vm[{i}].name"), why: "must be non-empty and unique".into() });
            }
            match (&vm.libvirt_domain, vm.qmp.as_os_str().is_empty()) {
                (None, true) => return Err(ConfigError::Invalid { key: format!("vm[{i}].qmp"), why: "a VM needs its QMP socket (`qmp`) or its libvirt domain (`libvirt_domain`)".into() }),
                (Some(_), false) => return Err(ConfigError::Invalid { key: format!("vm[{i}].libvirt_domain"), why: "give either `qmp` or `libvirt_domain`, not both".into() }),
                (Some(d), true) if d.is_empty() => return Err(ConfigError::Invalid { key: format!("vm[{i}].libvirt_domain"), why: "must be a domain name".into() }),
                _ => {}
            }
            if let Some(p) = &vm.policy {
                p.validate(&format!("vm[{i}].policy."))?;
            }
        }
        // No VMs is a valid configuration (a host before its first VM, the package's
        // default file): the daemon runs and manages nothing.
        self.validate_discovery()
    }

    /// The shares of every VM, by its position (the `shares` balancer and the
    /// `host-need` reclaim mode weigh VMs by them): [`Config::vm_shares`].
    pub fn shares(&self) -> SharesConfig {
        let mut c = SharesConfig::default();
        for (i, vm) in self.vms.iter().enumerate() {
            c.vms.insert(VmId(i as u32), self.vm_shares(vm));
        }
        c
    }

    /// One VM's floor, ceiling and shares, from the one place they are set: its policy's
    /// `min_mib`, `max_mib` and `shares` (`[defaults]` with its own table's keys). An
    /// older `[vm.shares]` table's `shares` wins over the policy's (which then comes from
    /// `[defaults]`: both in the VM's own tables are refused), and of two ceilings the
    /// lower holds.
    pub fn vm_shares(&self, vm: &VmConfig) -> VmShares {
        let p = self.policy_for(vm);
        let ceiling = |mib: u64| (mib > 0).then(|| Kib::from_mib_saturating(mib));
        let (shares, old_max) = vm.shares.map_or((p.shares, None), |k| (k.shares, ceiling(k.max_mib)));
        let max = match (p.ceiling(), old_max) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(Kib::MAX),
        };
        VmShares { shares, min: Kib::from_mib_saturating(p.min_mib), max }
    }

    /// The policy settings in force for one VM.
    pub fn policy_for(&self, vm: &VmConfig) -> PolicyConfig {
        vm.policy.clone().unwrap_or_else(|| self.defaults.clone())
    }
}

/// `[discovery]`: where the daemon finds VMs by itself, besides `[[vm]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// A directory of QMP sockets: `<name>.qmp` is a VM's QMP socket, `<name>.agent` its
    /// agent port's (optional). Read every [`SOCKET_SCAN`]; empty = off.
    pub socket_dir: PathBuf,
    /// Manage every running domain of `libvirt_uri` (`virConnectListAllDomains`, every [`LIBVIRT_SCAN`]).
    pub libvirt: bool,
    /// libvirt's connection URI for `libvirt = true`.
    pub libvirt_uri: String,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig { socket_dir: PathBuf::new(), libvirt: false, libvirt_uri: default_libvirt_uri() }
    }
}

/// The socket directory the host package creates (packaging/tmpfiles/autoballoon.conf:
/// mode 1770, root:kvm) and its /etc/autoballoon/host.toml watches.
pub const PACKAGED_SOCKET_DIR: &str = "/run/autoballoon-vms";

/// Why a path is a poor place for a VM's QMP or agent socket (`--check-config` and the
/// daemon's start say so; docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathConcern {
    /// Under a directory every user may write (`/tmp`, `/var/tmp`, `/dev/shm`): anyone may
    /// create the socket first and be taken for the VM's QEMU.
    WorldWritable(&'static str),
    /// Under a directory autoballoon.service hides from the daemon (`ProtectHome=yes`:
    /// `/home`, `/root`, `/run/user`): under the unit the socket is never found.
    HiddenByUnit(&'static str),
}

/// Directories every user may write.
const WORLD_WRITABLE: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];
/// Directories autoballoon.service hides (`ProtectHome=yes`).
const HIDDEN_BY_UNIT: [&str; 3] = ["/home", "/root", "/run/user"];

/// Whether `path` (a socket, or a socket directory) is under one of those directories
/// (by its components, as written: `/tmpfoo` is not under `/tmp`).
pub fn path_concern(path: &Path) -> Option<PathConcern> {
    if let Some(d) = WORLD_WRITABLE.into_iter().find(|d| path.starts_with(d)) {
        return Some(PathConcern::WorldWritable(d));
    }
    HIDDEN_BY_UNIT.into_iter().find(|d| path.starts_with(d)).map(PathConcern::HiddenByUnit)
}

impl PathConcern {
    /// The sentence about `key = path`.
    pub fn explain(self, key: &str, path: &Path) -> String {
        match self {
            PathConcern::WorldWritable(d) => format!(
                "{key} = {}: under {d}, where any user may create a socket first and be taken for the VM's QEMU or agent; use a directory only root or the QEMU user can write, e.g. {PACKAGED_SOCKET_DIR} (docs/security.md)",
                path.display()
            ),
            PathConcern::HiddenByUnit(d) => format!(
                "{key} = {}: under {d}, which autoballoon.service hides from the daemon (ProtectHome=yes): under the unit this socket is never found; move it, e.g. to {PACKAGED_SOCKET_DIR} (docs/security.md)",
                path.display()
            ),
        }
    }
}

impl Config {
    /// One warning per configured socket path (`[[vm]]` `qmp` and `agent`, `[discovery]
    /// socket_dir`) with a [`PathConcern`]. Warnings, not errors: outside the unit a
    /// hidden path works, and a test rig may use /tmp on purpose.
    pub fn path_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |key: String, p: &Path| {
            if let Some(c) = path_concern(p) {
                out.push(c.explain(&key, p));
            }
        };
        for (i, vm) in self.vms.iter().enumerate() {
            if !vm.qmp.as_os_str().is_empty() {
                check(format!("vm[{i}].qmp"), &vm.qmp);
            }
            if let Some(a) = &vm.agent {
                check(format!("vm[{i}].agent"), a);
            }
        }
        if !self.discovery.socket_dir.as_os_str().is_empty() {
            check("discovery.socket_dir".into(), &self.discovery.socket_dir);
        }
        out
    }
}

/// How often `[discovery] socket_dir` is read (one `readdir`).
pub const SOCKET_SCAN: std::time::Duration = std::time::Duration::from_millis(500);
/// How often libvirt's running domains are listed (one `virConnectListAllDomains`).
pub const LIBVIRT_SCAN: std::time::Duration = std::time::Duration::from_secs(2);
/// A discovered VM's QMP socket in `socket_dir`: `<name>` + this.
pub const QMP_SUFFIX: &str = ".qmp";
/// A discovered VM's agent socket in `socket_dir`: `<name>` + this.
pub const AGENT_SUFFIX: &str = ".agent";

/// One `[[match]]` table: settings of the discovered VMs whose name matches `name`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// A glob over VM names: `*` any characters, `?` one.
    pub name: String,
    /// The policy of the VMs it matches: `[defaults]` with the keys this table sets
    /// replaced; `None` = `[defaults]`.
    #[serde(default)]
    pub policy: Option<PolicyConfig>,
    /// Their shares, for `balancer = "shares"`.
    #[serde(default)]
    pub shares: Option<SharesKeys>,
}

/// Whether `name` matches the glob `pattern` (`*` any run of characters, `?` one).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    // Where the last `*` was, and where in `name` it was tried up to.
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// How a managed VM came to be managed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A `[[vm]]` table or a `--vm` flag.
    Config,
    /// A QMP socket in `[discovery] socket_dir`.
    SocketDir,
    /// A running domain of `[discovery] libvirt_uri`.
    Libvirt,
}

impl Origin {
    /// Its name in the status (`origin`).
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Config => "config",
            Origin::SocketDir => "socket_dir",
            Origin::Libvirt => "libvirt",
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Config => "configured",
            Origin::SocketDir => "discovered socket",
            Origin::Libvirt => "discovered libvirt domain",
        })
    }
}

impl Config {
    /// `[[match]]` policies inherit `[defaults]` key by key: each is `[defaults]` with the
    /// keys its table sets replaced.
    fn with_match_policies(mut self, text: &str) -> Result<Config, ConfigError> {
        let syntax = |e: toml::de::Error| ConfigError::Syntax(PathBuf::from("config"), e.to_string());
        let raw: toml::Table = toml::from_str(text).map_err(syntax)?;
        let defaults = raw.get("defaults").and_then(toml::Value::as_table).cloned().unwrap_or_default();
        let raw_matches = raw.get("match").and_then(toml::Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (m, r) in self.matches.iter_mut().zip(raw_matches) {
            let Some(own) = r.get("policy").and_then(toml::Value::as_table) else { continue };
            let mut merged = defaults.clone();
            merged.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
            m.policy = Some(merged.try_into().map_err(syntax)?);
        }
        Ok(self)
    }

    fn validate_discovery(&self) -> Result<(), ConfigError> {
        let dir = &self.discovery.socket_dir;
        if !dir.as_os_str().is_empty() && !dir.is_absolute() {
            return Err(ConfigError::Invalid { key: "discovery.socket_dir".into(), why: "must be an absolute path (e.g. \"/run/autoballoon-vms\"), or \"\" for off".into() });
        }
        if self.discovery.libvirt && self.discovery.libvirt_uri.is_empty() {
            return Err(ConfigError::Invalid { key: "discovery.libvirt_uri".into(), why: "must be a libvirt URI (e.g. \"qemu:///system\")".into() });
        }
        for (i, m) in self.matches.iter().enumerate() {
            if m.name.is_empty() {
                return Err(ConfigError::Invalid { key: format!("match[{i}].name"), why: "must be a non-empty glob (e.g. \"db-*\")".into() });
            }
            if let Some(p) = &m.policy {
                p.validate(&format!("match[{i}].policy."))?;
            }
        }
        Ok(())
    }

    /// The first `[[match]]` whose glob matches `name`.
    pub fn match_for(&self, name: &str) -> Option<&MatchConfig> {
        self.matches.iter().find(|m| glob_match(&m.name, name))
    }

    /// A discovered VM with its settings: the first `[[match]]` for its name, else `[defaults]`.
    pub fn discovered(&self, vm: VmConfig) -> VmConfig {
        match self.match_for(&vm.name) {
            Some(m) => VmConfig { policy: m.policy.clone(), shares: m.shares, ..vm },
            None => vm,
        }
    }

    /// Every VM to manage: the `[[vm]]` tables, then the discovered VMs in `found` that no
    /// `[[vm]]` names or reaches at the same endpoint (the first of a name wins), with the
    /// settings of their `[[match]]`.
    pub fn managed(&self, found: &[(VmConfig, Origin)]) -> Vec<(VmConfig, Origin)> {
        let mut out: Vec<(VmConfig, Origin)> = self.vms.iter().map(|v| (v.clone(), Origin::Config)).collect();
        for (vm, origin) in found {
            if out.iter().any(|(o, _)| o.name == vm.name || o.endpoint() == vm.endpoint()) {
                continue;
            }
            out.push((self.discovered(vm.clone()), *origin));
        }
        out
    }
}

/// The VM a socket `file_name` in `dir` names, by the naming convention: `<name>.qmp` is
/// the QMP socket of the VM `<name>`, whose agent socket is `<name>.agent` beside it.
pub fn vm_of_socket(dir: &Path, file_name: &str) -> Option<VmConfig> {
    let name = file_name.strip_suffix(QMP_SUFFIX).filter(|n| !n.is_empty() && !n.starts_with('.'))?;
    Some(VmConfig { agent: Some(dir.join(format!("{name}{AGENT_SUFFIX}"))), ..VmConfig::new(name, dir.join(file_name)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let text = include_str!("../../../docs/example-host.toml");
        let c = Config::parse(text).unwrap();
        assert_eq!(c.vms.len(), 3);
        assert_eq!(c.discovery, DiscoveryConfig::default());
        assert_eq!(c.policy_for(&c.discovered(VmConfig::new("db-7", "/d/db-7.qmp"))).buffer_mib, 256);
        assert!(c.vms[2].libvirt_domain.is_some());
        assert_eq!(c.vms[0].balloon_device, "/machine/peripheral/balloon0");
        assert_eq!(c.policy_for(&c.vms[1]).buffer_mib, 128);
        assert_eq!(c.policy_for(&c.vms[0]).buffer_mib, 64);
        assert_eq!((c.controller.reclaim, c.controller.host_target_pct), (ReclaimMode::Lean, 80), "every key at its default");
        assert_eq!(c.defaults, PolicyConfig::default(), "every key at its default");
        assert_eq!(c.vm_shares(&c.vms[1]), VmShares { shares: 2000, min: Kib::from_mib_saturating(512), max: Kib::MAX });
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::parse("[controller]\ninterval_ms = 5\n[[vm]]\nname='a'\nqmp='/x'\n").unwrap_err();
        assert!(e.to_string().contains("controller.interval_ms"), "{e}");
        let e = Config::parse("[defaults]\nbufer_mib = 5\n[[vm]]\nname='a'\nqmp='/x'\n").unwrap_err();
        assert!(e.to_string().contains("bufer_mib"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nqmp='/x'\n[[vm]]\nname='a'\nqmp='/y'\n").unwrap_err();
        assert!(e.to_string().contains("vm[1].name"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nqmp='/x'\n[vm.policy]\nalign_mib = 0\n").unwrap_err();
        assert!(e.to_string().contains("vm[0].policy.align_mib"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nqmp='/x'\n[vm.shares]\nmin_mib = 5\n").unwrap_err();
        assert!(e.to_string().contains("vm[0].shares.min_mib") && e.to_string().contains("[vm.policy]"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nqmp='/x'\n[vm.policy]\nbufer_mib = 5\n").unwrap_err();
        assert!(e.to_string().contains("bufer_mib"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\n").unwrap_err();
        assert!(e.to_string().contains("qmp"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nqmp='/x'\nlibvirt_domain='d'\n").unwrap_err();
        assert!(e.to_string().contains("vm[0].libvirt_domain"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nlibvirt_domain=''\n").unwrap_err();
        assert!(e.to_string().contains("vm[0].libvirt_domain"), "{e}");
    }

    #[test]
    fn a_vms_policy_inherits_defaults_key_by_key() {
        let c = Config::parse(
            "[defaults]\nbuffer_mib = 100\nmin_mib = 256\nhold_off_s = 7\n\
             [[vm]]\nname='a'\nqmp='/a'\n[vm.policy]\nbuffer_mib = 32\nspike_hold_s = 0\n\
             [[vm]]\nname='b'\nqmp='/b'\n",
        )
        .unwrap();
        let (a, b) = (c.policy_for(&c.vms[0]), c.policy_for(&c.vms[1]));
        // Its own keys win; [defaults]' keys it does not set stay; the rest are built in.
        assert_eq!((a.buffer_mib, a.spike_hold_s), (32, 0));
        assert_eq!((a.min_mib, a.hold_off_s), (256, 7), "[defaults] kept per key, not replaced wholesale");
        assert_eq!(a.dead_band_mib, PolicyConfig::default().dead_band_mib);
        assert_eq!(b, c.defaults);
        assert_eq!((b.buffer_mib, b.min_mib, b.spike_hold_s), (100, 256, PolicyConfig::default().spike_hold_s));
        // A merged value is validated under the VM's key.
        let e = Config::parse("[defaults]\nmin_mib = 64\n[[vm]]\nname='a'\nqmp='/a'\n[vm.policy]\nalign_mib = 0\n").unwrap_err();
        assert!(e.to_string().contains("vm[0].policy.align_mib"), "{e}");
    }

    #[test]
    fn shares_reserve_the_vms_one_floor() {
        let c = Config::parse(
            "[controller]\nbalancer='shares'\n[defaults]\nmin_mib = 300\n\
             [[vm]]\nname='a'\nqmp='/a'\n[vm.shares]\nshares = 2000\n\
             [[vm]]\nname='b'\nqmp='/b'\n[vm.policy]\nmin_mib = 900\n[vm.shares]\nmax_mib = 4096\n",
        )
        .unwrap();
        let s = c.shares();
        assert_eq!(s.vms[&VmId(0)], VmShares { shares: 2000, min: Kib::from_mib_saturating(300), max: Kib::MAX });
        assert_eq!(s.vms[&VmId(1)], VmShares { shares: 1000, min: Kib::from_mib_saturating(900), max: Kib::from_mib_saturating(4096) });
    }

    #[test]
    fn reclaim_is_lean_unless_asked_and_host_need_has_a_target() {
        let c = Config::parse("").unwrap();
        assert_eq!((c.controller.reclaim, c.controller.host_target_pct, c.controller.reclaim()), (ReclaimMode::Lean, 80, Reclaim::Lean), "existing files: nothing changes");
        let c = Config::parse("[controller]\nreclaim = 'host-need'\n").unwrap();
        assert_eq!(c.controller.reclaim(), Reclaim::HostNeed { target: Percent::new_checked(80).unwrap() }, "Proxmox's 80 % by default");
        let c = Config::parse("[controller]\nreclaim = 'host-need'\nhost_target_pct = 65\n").unwrap();
        assert_eq!(c.controller.reclaim(), Reclaim::HostNeed { target: Percent::new_checked(65).unwrap() });
        // Unknown modes are refused with the valid names; targets outside 1-100 with the key.
        let e = Config::parse("[controller]\nreclaim = 'greedy'\n").unwrap_err().to_string();
        assert!(e.contains("greedy") && e.contains("`lean`") && e.contains("`host-need`"), "{e}");
        let e = Config::parse("[controller]\nreclaim = 'host_need'\n").unwrap_err().to_string();
        assert!(e.contains("`host-need`"), "{e}");
        for bad in ["0", "101", "1000"] {
            let e = Config::parse(&format!("[controller]\nreclaim = 'host-need'\nhost_target_pct = {bad}\n")).unwrap_err().to_string();
            assert!(e.contains("controller.host_target_pct") && e.contains("1 to 100"), "{e}");
        }
        let e = Config::parse("[controller]\nhost_target_pct = -5\n").unwrap_err().to_string();
        assert!(e.contains("host_target_pct"), "{e}");
    }

    #[test]
    fn floor_ceiling_and_shares_are_policy_keys_inherited_from_defaults() {
        let c = Config::parse(
            "[controller]\nreclaim = 'host-need'\n[defaults]\nmin_mib = 256\nmax_mib = 8192\nshares = 500\n\
             [[vm]]\nname='a'\nqmp='/a'\n[vm.policy]\nshares = 2000\n\
             [[vm]]\nname='b'\nqmp='/b'\n[vm.policy]\nmax_mib = 4096\n\
             [[vm]]\nname='c'\nqmp='/c'\n[vm.shares]\nshares = 3000\nmax_mib = 6144\n\
             [[vm]]\nname='d'\nqmp='/d'\n",
        )
        .unwrap();
        let mib = Kib::from_mib_saturating;
        let s = c.shares();
        assert_eq!(s.vms[&VmId(0)], VmShares { shares: 2000, min: mib(256), max: mib(8192) }, "its own shares, [defaults]' floor and ceiling");
        assert_eq!(s.vms[&VmId(1)], VmShares { shares: 500, min: mib(256), max: mib(4096) });
        assert_eq!(s.vms[&VmId(2)], VmShares { shares: 3000, min: mib(256), max: mib(6144) }, "the older [vm.shares] is still read");
        assert_eq!(s.vms[&VmId(3)], VmShares { shares: 500, min: mib(256), max: mib(8192) });
        assert_eq!(c.policy_for(&c.vms[1]).rails().max, mib(4096), "the ceiling is the rails' for every balancer and mode");
        // A discovered VM takes them from its [[match]], key by key.
        let c = Config::parse("[defaults]\nshares = 700\n[[match]]\nname='db-*'\n[match.policy]\nmax_mib = 2048\n").unwrap();
        let db = c.vm_shares(&c.discovered(VmConfig::new("db-1", "/d/db-1.qmp")));
        assert_eq!((db.shares, db.max), (700, mib(2048)));
        assert_eq!(c.vm_shares(&VmConfig::new("x", "/x.qmp")), VmShares { shares: 700, min: mib(128), max: Kib::MAX });
        // Bad values and two places for one key are refused, naming the key.
        let e = Config::parse("[defaults]\nmin_mib = 512\nmax_mib = 256\n").unwrap_err().to_string();
        assert!(e.contains("defaults.max_mib"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nqmp='/a'\n[vm.policy]\nshares = 1\n[vm.shares]\nshares = 2\n").unwrap_err().to_string();
        assert!(e.contains("vm[0].shares.shares") && e.contains("one place"), "{e}");
        let e = Config::parse("[[match]]\nname='*'\n[match.policy]\nmax_mib = 1024\n[match.shares]\nmax_mib = 2048\n").unwrap_err().to_string();
        assert!(e.contains("match[0].shares.max_mib"), "{e}");
        let e = Config::parse("[defaults]\nshares = 'many'\n").unwrap_err().to_string();
        assert!(e.contains("shares"), "{e}");
    }

    #[test]
    fn the_packaged_file_parses_with_and_without_its_commented_examples() {
        let text = include_str!("../../../packaging/host.toml");
        let installed = Config::parse(text).unwrap();
        assert!(installed.vms.is_empty(), "as installed: no [[vm]]");
        // As installed it finds VMs by itself: libvirt's domains, and the sockets of the
        // directory the package creates.
        assert_eq!(installed.discovery, DiscoveryConfig { socket_dir: PACKAGED_SOCKET_DIR.into(), libvirt: true, libvirt_uri: "qemu:///system".into() });
        assert!(installed.path_warnings().is_empty());
        let tmpfiles = include_str!("../../../packaging/tmpfiles/autoballoon.conf");
        assert!(tmpfiles.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["d", PACKAGED_SOCKET_DIR, "1770", "root", "kvm", "-"]), "{tmpfiles}");
        // Every commented setting (`# key = value`, `# [table]`) taken in.
        let on: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(r) if r.starts_with('[') || r.split_once(" = ").is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) => r,
                _ => l,
            })
            .fold(String::new(), |a, l| a + l + "\n");
        let c = Config::parse(&on).unwrap_or_else(|e| panic!("{e}\n{on}"));
        assert_eq!((c.vms.len(), c.matches.len()), (1, 1));
        assert_eq!(c.discovery.socket_dir, Path::new(PACKAGED_SOCKET_DIR));
        assert!(c.discovery.libvirt);
        assert!(c.path_warnings().is_empty(), "{:?}", c.path_warnings());
        assert_eq!(c.controller.reclaim, ReclaimMode::Lean);
        assert_eq!(c.defaults, PolicyConfig::default(), "the commented values are the defaults");
    }

    #[test]
    fn every_toml_example_in_the_configuration_reference_parses() {
        let doc = include_str!("../../../docs/configuration.md");
        let blocks: Vec<&str> = doc.split("```toml\n").skip(1).filter_map(|b| b.split("```").next()).collect();
        assert!(blocks.len() >= 3, "{} blocks", blocks.len());
        for b in blocks {
            Config::parse(b).unwrap_or_else(|e| panic!("{e}\n{b}"));
        }
    }

    #[test]
    fn no_vms_is_a_valid_configuration() {
        let c = Config::parse("").unwrap();
        assert!(c.vms.is_empty());
        assert_eq!(c.controller, ControllerConfig::default());
        assert!(Config::parse("[controller]\ninterval_ms = 500\n").unwrap().vms.is_empty());
    }

    #[test]
    fn a_vm_can_be_a_libvirt_domain() {
        let c = Config::parse("[[vm]]\nname='a'\nlibvirt_domain='web1'\n[[vm]]\nname='b'\nlibvirt_domain='db'\nlibvirt_uri='qemu+ssh://h/system'\nagent='/run/db.agent'\n").unwrap();
        assert_eq!(c.vms[0].endpoint(), Endpoint::Libvirt { uri: "qemu:///system", domain: "web1" });
        assert_eq!(c.vms[1].endpoint(), Endpoint::Libvirt { uri: "qemu+ssh://h/system", domain: "db" });
        assert_eq!(c.vms[0], VmConfig::libvirt("a", "web1"));
        assert_eq!(VmConfig::new("q", "/q.qmp").endpoint(), Endpoint::Qmp(Path::new("/q.qmp")));
        // A libvirt domain's agent comes from its XML unless configured.
        assert_eq!(c.vms[0].agent_description(), "from the domain's XML, if it has a channel");
        assert_eq!(c.vms[1].agent_description(), "/run/db.agent");
        assert_eq!(VmConfig::new("q", "/q.qmp").agent_description(), "none");
    }

    #[test]
    fn globs_match_names() {
        for (p, n) in [("db-*", "db-1"), ("db-*", "db-"), ("*", "x"), ("*", ""), ("web?", "web1"), ("*-prod", "a-b-prod"), ("a*b*c", "aXbYc"), ("exact", "exact"), ("*a*", "banana")] {
            assert!(glob_match(p, n), "{p} ~ {n}");
        }
        for (p, n) in [("db-*", "web-1"), ("web?", "web12"), ("web?", "web"), ("*-prod", "prod-a"), ("exact", "exactly"), ("a*b*c", "aXbY")] {
            assert!(!glob_match(p, n), "{p} !~ {n}");
        }
    }

    #[test]
    fn discovery_and_matches_parse_and_the_first_match_wins() {
        let c = Config::parse(
            "[defaults]\nbuffer_mib = 100\nmin_mib = 256\n[discovery]\nsocket_dir = '/run/autoballoon/vms'\nlibvirt = true\n\
             [[match]]\nname = 'db-*'\n[match.policy]\nbuffer_mib = 512\n[match.shares]\nshares = 3000\n\
             [[match]]\nname = '*'\n[match.policy]\nhold_off_s = 9\n",
        )
        .unwrap();
        assert!(c.vms.is_empty(), "discovery alone: no [[vm]] needed");
        assert_eq!(c.discovery.socket_dir, Path::new("/run/autoballoon/vms"));
        assert_eq!(c.discovery.libvirt_uri, "qemu:///system");
        let db = c.discovered(VmConfig::new("db-1", "/run/autoballoon/vms/db-1.qmp"));
        let p = c.policy_for(&db);
        assert_eq!((p.buffer_mib, p.min_mib, p.hold_off_s), (512, 256, PolicyConfig::default().hold_off_s), "[defaults] per key, the first match's keys");
        assert_eq!(db.shares.map(|s| s.shares), Some(3000));
        let web = c.policy_for(&c.discovered(VmConfig::new("web", "/w.qmp")));
        assert_eq!((web.buffer_mib, web.hold_off_s), (100, 9));
        let none = Config::parse("[defaults]\nbuffer_mib = 100\n").unwrap();
        assert_eq!(none.policy_for(&none.discovered(VmConfig::new("x", "/x.qmp"))), none.defaults);
        let e = Config::parse("[[match]]\nname = 'a'\n[match.policy]\nalign_mib = 0\n").unwrap_err();
        assert!(e.to_string().contains("match[0].policy.align_mib"), "{e}");
        let e = Config::parse("[[match]]\nname = 'a'\n[match.policy]\nbufer_mib = 1\n").unwrap_err();
        assert!(e.to_string().contains("bufer_mib"), "{e}");
        let e = Config::parse("[[match]]\nname = ''\n").unwrap_err();
        assert!(e.to_string().contains("match[0].name"), "{e}");
        let e = Config::parse("[discovery]\nsocket_dir = 'vms'\n").unwrap_err();
        assert!(e.to_string().contains("discovery.socket_dir"), "{e}");
        let e = Config::parse("[discovery]\nsocket_dir = '/x'\nsocket = 1\n").unwrap_err();
        assert!(e.to_string().contains("socket"), "{e}");
    }

    #[test]
    fn configured_vms_win_over_discovered_ones() {
        let c = Config::parse("[[vm]]\nname='a'\nqmp='/other/a.qmp'\n[[vm]]\nname='b'\nqmp='/d/bee.qmp'\n[[vm]]\nname='g'\nlibvirt_domain='guest'\n").unwrap();
        let dir = Path::new("/d");
        let found = vec![
            (vm_of_socket(dir, "a.qmp").unwrap(), Origin::SocketDir),
            (vm_of_socket(dir, "bee.qmp").unwrap(), Origin::SocketDir),
            (vm_of_socket(dir, "c.qmp").unwrap(), Origin::SocketDir),
            (VmConfig::libvirt("guest", "guest"), Origin::Libvirt),
            (VmConfig::libvirt("c", "c"), Origin::Libvirt),
        ];
        let m = c.managed(&found);
        let names: Vec<_> = m.iter().map(|(v, o)| (v.name.as_str(), *o)).collect();
        assert_eq!(names, [("a", Origin::Config), ("b", Origin::Config), ("g", Origin::Config), ("c", Origin::SocketDir)], "same name or same endpoint: the [[vm]]; then the first of a name");
        assert_eq!(m[0].0.qmp, Path::new("/other/a.qmp"));
        assert_eq!(m[3].0.agent.as_deref(), Some(Path::new("/d/c.agent")));
    }

    #[test]
    fn sockets_where_anyone_writes_or_the_unit_hides_are_warned_about() {
        assert_eq!(path_concern(Path::new("/tmp/a.qmp")), Some(PathConcern::WorldWritable("/tmp")));
        assert_eq!(path_concern(Path::new("/var/tmp/vms")), Some(PathConcern::WorldWritable("/var/tmp")));
        assert_eq!(path_concern(Path::new("/dev/shm/x.agent")), Some(PathConcern::WorldWritable("/dev/shm")));
        assert_eq!(path_concern(Path::new("/home/u/vm.qmp")), Some(PathConcern::HiddenByUnit("/home")));
        assert_eq!(path_concern(Path::new("/root/vm.qmp")), Some(PathConcern::HiddenByUnit("/root")));
        assert_eq!(path_concern(Path::new("/run/user/1000/vm.qmp")), Some(PathConcern::HiddenByUnit("/run/user")));
        for fine in ["/run/autoballoon-vms/a.qmp", "/run/autoballoon/a.qmp", "/tmpfoo/a.qmp", "/var/lib/libvirt/qemu/channel/target/a", "/run/qemu/x.qmp", "relative/tmp/x"] {
            assert_eq!(path_concern(Path::new(fine)), None, "{fine}");
        }
        let c = Config::parse("[[vm]]\nname='a'\nqmp='/tmp/a.qmp'\nagent='/home/u/a.agent'\n[[vm]]\nname='b'\nlibvirt_domain='b'\n[[vm]]\nname='c'\nqmp='/run/qemu/c.qmp'\n[discovery]\nsocket_dir='/var/tmp/vms'\n").unwrap();
        let w = c.path_warnings();
        assert_eq!(w.len(), 3, "{w:#?}");
        assert!(w[0].starts_with("vm[0].qmp = /tmp/a.qmp: under /tmp, where any user may create a socket first") && w[0].contains(PACKAGED_SOCKET_DIR), "{}", w[0]);
        assert!(w[1].starts_with("vm[0].agent = /home/u/a.agent: under /home, which autoballoon.service hides") && w[1].contains("ProtectHome=yes"), "{}", w[1]);
        assert!(w[2].starts_with("discovery.socket_dir = /var/tmp/vms: under /var/tmp"), "{}", w[2]);
        assert!(Config::parse("").unwrap().path_warnings().is_empty());
    }

    #[test]
    fn the_socket_naming_convention() {
        let d = Path::new("/run/autoballoon/vms");
        let vm = vm_of_socket(d, "web-1.qmp").unwrap();
        assert_eq!((vm.name.as_str(), vm.qmp.as_path(), vm.agent.as_deref()), ("web-1", d.join("web-1.qmp").as_path(), Some(d.join("web-1.agent").as_path())));
        for bad in ["web-1.agent", ".qmp", ".hidden.qmp", "web", "web.qmp.old"] {
            assert!(vm_of_socket(d, bad).is_none(), "{bad}");
        }
    }
}
