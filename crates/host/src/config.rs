//! The host controller's configuration: a TOML file, with flags for the common case.
//! Every key is documented in docs/configuration.md; unknown keys are errors. The policy
//! keys are core's [`PolicyConfig`], shared with the guest agent.

pub use autoballoon_core::config::{InvalidKey, PolicyConfig, PolicyKind};
pub use autoballoon_core::host::BalancerKind;
pub use autoballoon_core::migration::ShrinkSetting;
use autoballoon_core::host::{SharesConfig, VmId, VmShares};
use autoballoon_core::Kib;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub controller: ControllerConfig,
    /// Policy and guard-rail settings applied to every VM unless the VM overrides them.
    #[serde(default)]
    pub defaults: PolicyConfig,
    #[serde(default, rename = "vm")]
    pub vms: Vec<VmConfig>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControllerConfig {
    /// Milliseconds between two samples of a VM.
    pub interval_ms: u64,
    /// `text` or `json` log lines.
    pub log_format: LogFormat,
    /// Log every tick, not only actions.
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
}

/// The Prometheus endpoint's default address (loopback only).
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9848";
/// The status socket's default path.
pub const DEFAULT_STATUS_SOCKET: &str = "/run/autoballoon/status.sock";

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            interval_ms: 1000,
            log_format: LogFormat::Text,
            verbose: false,
            balancer: BalancerKind::Independent,
            capacity_mib: 0,
            host_reserve_mib: 1024,
            memory_cgroup: PathBuf::new(),
            pressure_file: PathBuf::new(),
            metrics_listen: DEFAULT_METRICS_LISTEN.into(),
            status_socket: DEFAULT_STATUS_SOCKET.into(),
            migration_shrink: ShrinkSetting::Auto,
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
    /// (`virsh`) on `libvirt_uri`.
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
    /// Per-VM overrides of `[defaults]`.
    #[serde(default)]
    pub policy: Option<PolicyConfig>,
    /// The VM's shares, for `balancer = "shares"`.
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

/// One VM's `[vm.shares]` table (the ESX balancer's proportional shares).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SharesKeys {
    /// Relative entitlement.
    pub shares: u64,
    /// Never reclaimed below this, MiB.
    pub min_mib: u64,
    /// Never given more than this, MiB; 0 = no limit.
    pub max_mib: u64,
}

impl Default for SharesKeys {
    fn default() -> Self {
        let d = VmShares::default();
        SharesKeys { shares: d.shares, min_mib: 0, max_mib: 0 }
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

    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Syntax(PathBuf::from("config"), e.to_string()))?;
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
        if self.vms.is_empty() {
            return Err(ConfigError::Invalid { key: "vm".into(), why: "at least one [[vm]] is needed".into() });
        }
        Ok(())
    }

    /// The `shares` balancer's settings: each VM's `[vm.shares]`, by its position.
    pub fn shares(&self) -> SharesConfig {
        let mut c = SharesConfig::default();
        for (i, vm) in self.vms.iter().enumerate() {
            if let Some(k) = vm.shares {
                let max = if k.max_mib == 0 { Kib::MAX } else { Kib::from_mib_saturating(k.max_mib) };
                c.vms.insert(VmId(i as u32), VmShares { shares: k.shares, min: Kib::from_mib_saturating(k.min_mib), max });
            }
        }
        c
    }

    /// The policy settings in force for one VM.
    pub fn policy_for(&self, vm: &VmConfig) -> PolicyConfig {
        vm.policy.clone().unwrap_or_else(|| self.defaults.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let text = include_str!("../../../docs/example-host.toml");
        let c = Config::parse(text).unwrap();
        assert_eq!(c.vms.len(), 3);
        assert!(c.vms[2].libvirt_domain.is_some());
        assert_eq!(c.vms[0].balloon_device, "/machine/peripheral/balloon0");
        assert_eq!(c.policy_for(&c.vms[1]).buffer_mib, 128);
        assert_eq!(c.policy_for(&c.vms[0]).buffer_mib, 64);
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
        let e = Config::parse("[controller]\n").unwrap_err();
        assert!(e.to_string().contains("`vm`"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\n").unwrap_err();
        assert!(e.to_string().contains("qmp"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nqmp='/x'\nlibvirt_domain='d'\n").unwrap_err();
        assert!(e.to_string().contains("vm[0].libvirt_domain"), "{e}");
        let e = Config::parse("[[vm]]\nname='a'\nlibvirt_domain=''\n").unwrap_err();
        assert!(e.to_string().contains("vm[0].libvirt_domain"), "{e}");
    }

    #[test]
    fn a_vm_can_be_a_libvirt_domain() {
        let c = Config::parse("[[vm]]\nname='a'\nlibvirt_domain='web1'\n[[vm]]\nname='b'\nlibvirt_domain='db'\nlibvirt_uri='qemu+ssh://h/system'\nagent='/run/db.agent'\n").unwrap();
        assert_eq!(c.vms[0].endpoint(), Endpoint::Libvirt { uri: "qemu:///system", domain: "web1" });
        assert_eq!(c.vms[1].endpoint(), Endpoint::Libvirt { uri: "qemu+ssh://h/system", domain: "db" });
        assert_eq!(c.vms[0], VmConfig::libvirt("a", "web1"));
        assert_eq!(VmConfig::new("q", "/q.qmp").endpoint(), Endpoint::Qmp(Path::new("/q.qmp")));
    }
}
