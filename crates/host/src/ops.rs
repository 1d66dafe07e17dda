//! Operations around the daemon: `--check-config`'s summary, and what a SIGHUP reload can
//! apply to a running controller and what needs a restart (docs/configuration.md,
//! "Reloading").

use crate::config::{Config, Level, LogFormat};
use crate::controller::Controller;

/// One line per VM: what the daemon would manage and with which settings.
pub fn summary(config: &Config) -> Vec<String> {
    config
        .vms
        .iter()
        .map(|vm| {
            let p = config.policy_for(vm);
            let agent = match (&vm.agent, &vm.libvirt_domain) {
                (Some(a), _) => a.display().to_string(),
                (None, Some(_)) => "from the domain XML".into(),
                (None, None) => "none (guest-stats)".into(),
            };
            let from = if vm.policy.is_some() { "[defaults] with its [vm.policy]" } else { "[defaults]" };
            let limits = config.vm_shares(vm);
            let ceiling = if limits.max == autoballoon_core::Kib::MAX { "configured size".to_string() } else { format!("{} MiB", limits.max.0 / 1024) };
            format!(
                "{}: {} agent={} policy={} buffer={} MiB min={} MiB ({from}) max={ceiling} shares={}",
                vm.name,
                vm.endpoint(),
                agent,
                format!("{:?}", p.policy).to_lowercase(),
                p.buffer_mib,
                p.min_mib,
                limits.shares
            )
        })
        .collect()
}

/// The controller-wide lines of `--check-config`.
pub fn summary_controller(config: &Config) -> String {
    let c = &config.controller;
    let off = |s: &str| if s.is_empty() { "off".to_string() } else { s.to_string() };
    format!(
        "controller: interval_ms={} log_format={} log_level={} metrics_listen={} status_socket={} reclaim={}{}",
        c.interval_ms,
        match c.log_format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        },
        c.level(),
        off(&c.metrics_listen),
        off(&c.status_socket.display().to_string()),
        c.reclaim,
        match c.reclaim {
            crate::config::ReclaimMode::Lean => String::new(),
            crate::config::ReclaimMode::HostNeed => format!(" host_target_pct={}", c.host_target_pct),
        }
    )
}

/// The `--check-config` line of `[discovery]` and `[[match]]`, if discovery is on.
pub fn summary_discovery(config: &Config) -> Option<String> {
    let d = &config.discovery;
    let mut parts = Vec::new();
    if !d.socket_dir.as_os_str().is_empty() {
        parts.push(format!("socket_dir={} (<name>{} and <name>{})", d.socket_dir.display(), crate::config::QMP_SUFFIX, crate::config::AGENT_SUFFIX));
    }
    if d.libvirt {
        parts.push(format!("libvirt={}", d.libvirt_uri));
    }
    if parts.is_empty() && config.matches.is_empty() {
        return None;
    }
    if parts.is_empty() {
        parts.push("off".into());
    }
    let matches: Vec<String> = config.matches.iter().map(|m| format!("{:?}", m.name)).collect();
    Some(format!("discovery: {}; matches (first wins): {}", parts.join(" "), if matches.is_empty() { "none".into() } else { matches.join(", ") }))
}

/// What a reload found: changes it applies, and keys whose change needs a restart.
#[derive(Debug, Default, PartialEq)]
pub struct ReloadPlan {
    /// Log format and level, as the running logger should now have them.
    pub log: Option<(LogFormat, Level)>,
    /// Changed keys that take effect only after a restart, one phrase each.
    pub restart_needed: Vec<String>,
}

/// Compares the running configuration with a freshly loaded, valid one. `cli_json` and
/// `cli_level` are the command line's `--json` and `--log-level` (or `-v`), which win over
/// the file. `[defaults]`, `[[vm]]`, `[[match]]` and `[discovery]` are not in the plan:
/// the controller applies them whatever changed ([`Controller::reconfigure`]).
pub fn plan_reload(old: &Config, new: &Config, cli_json: bool, cli_level: Option<Level>) -> ReloadPlan {
    let mut plan = ReloadPlan::default();
    let effective = |c: &Config| (if cli_json { LogFormat::Json } else { c.controller.log_format }, cli_level.unwrap_or(c.controller.level()));
    if effective(old) != effective(new) {
        plan.log = Some(effective(new));
    }
    let (o, n) = (&old.controller, &new.controller);
    if o.interval_ms != n.interval_ms {
        plan.restart_needed.push("controller.interval_ms".into());
    }
    if o.metrics_listen != n.metrics_listen {
        plan.restart_needed.push("controller.metrics_listen".into());
    }
    if o.status_socket != n.status_socket {
        plan.restart_needed.push("controller.status_socket".into());
    }
    if o.migration_shrink != n.migration_shrink {
        plan.restart_needed.push("controller.migration_shrink".into());
    }
    // The host's memory and the balancer are set up once, at start.
    for (key, changed) in [
        ("balancer", o.balancer != n.balancer),
        ("capacity_mib", o.capacity_mib != n.capacity_mib),
        ("host_reserve_mib", o.host_reserve_mib != n.host_reserve_mib),
        ("pressure_file", o.pressure_file != n.pressure_file),
        ("memory_cgroup", o.memory_cgroup != n.memory_cgroup),
        ("reclaim", o.reclaim != n.reclaim),
        ("host_target_pct", o.host_target_pct != n.host_target_pct),
    ] {
        if changed {
            plan.restart_needed.push(format!("controller.{key}"));
        }
    }
    plan
}

/// Applies a reload to a running controller: the log settings of `plan`, and `new`'s VMs,
/// policies, matches and discovery ([`Controller::reconfigure`]). Returns the changes to
/// the VMs, one phrase each (`vm "c" added`, `vm "a" policy`, ...).
pub fn apply_reload(plan: &ReloadPlan, new: &Config, ctl: &Controller, log: &crate::log::Logger) -> Vec<String> {
    if let Some((format, level)) = plan.log {
        log.reconfigure(format, level);
    }
    ctl.reconfigure(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> Config {
        Config::parse(&format!("{extra}\n[[vm]]\nname='a'\nqmp='/a.qmp'\n[[vm]]\nname='b'\nqmp='/b.qmp'\n")).unwrap()
    }

    #[test]
    fn nothing_changed_is_an_empty_plan() {
        assert_eq!(plan_reload(&cfg(""), &cfg(""), false, None), ReloadPlan::default());
    }

    #[test]
    fn log_settings_apply_unless_the_command_line_set_them() {
        let new = cfg("[controller]\nlog_format='json'\nverbose=true");
        assert_eq!(plan_reload(&cfg(""), &new, false, None).log, Some((LogFormat::Json, Level::Debug)));
        assert_eq!(plan_reload(&cfg(""), &new, true, Some(Level::Debug)).log, None, "--json -v already in force");
        assert!(plan_reload(&cfg(""), &new, false, None).restart_needed.is_empty());
        let warn = cfg("[controller]\nlog_level='warn'");
        assert_eq!(plan_reload(&cfg(""), &warn, false, None).log, Some((LogFormat::Text, Level::Warn)));
        assert_eq!(plan_reload(&cfg(""), &warn, false, Some(Level::Info)).log, None, "--log-level info wins");
    }

    #[test]
    fn vms_policies_and_discovery_are_no_restart() {
        let old = cfg("");
        let new = Config::parse(
            "[controller]\ninterval_ms=500\nmetrics_listen=''\n[defaults]\nbuffer_mib=32\n[discovery]\nsocket_dir='/run/vms'\n\
             [[match]]\nname='*'\n[[vm]]\nname='a'\nqmp='/a2.qmp'\nagent='/a.agent'\n[[vm]]\nname='c'\nqmp='/c.qmp'\n",
        )
        .unwrap();
        let p = plan_reload(&old, &new, false, None);
        assert_eq!(p.restart_needed, ["controller.interval_ms", "controller.metrics_listen"]);
    }

    #[test]
    fn the_balancer_and_the_hosts_memory_need_a_restart() {
        let new = cfg("[controller]\nbalancer='iballoon'\ncapacity_mib=2048\nhost_reserve_mib=0\npressure_file='/p'\nmemory_cgroup='/sys/fs/cgroup/machine.slice'\nreclaim='host-need'\nhost_target_pct=70");
        let p = plan_reload(&cfg(""), &new, false, None);
        assert_eq!(
            p.restart_needed,
            ["controller.balancer", "controller.capacity_mib", "controller.host_reserve_mib", "controller.pressure_file", "controller.memory_cgroup", "controller.reclaim", "controller.host_target_pct"]
        );
        assert!(summary_controller(&new).ends_with(" reclaim=host-need host_target_pct=70"), "{}", summary_controller(&new));
        assert!(summary_controller(&cfg("")).ends_with(" reclaim=lean"));
        assert!(Config::parse("[controller]\nmemory_cgroup='machine.slice'\n[[vm]]\nname='a'\nqmp='/a.qmp'\n").and_then(|c| c.validate()).is_err(), "a relative memory_cgroup");
    }

    #[test]
    fn check_config_names_discovery_and_matches() {
        assert_eq!(summary_discovery(&cfg("")), None);
        let c = Config::parse("[discovery]\nsocket_dir='/run/vms'\nlibvirt=true\n[[match]]\nname='db-*'\n[[match]]\nname='*'\n").unwrap();
        assert_eq!(summary_discovery(&c).unwrap(), "discovery: socket_dir=/run/vms (<name>.qmp and <name>.agent) libvirt=qemu:///system; matches (first wins): \"db-*\", \"*\"");
    }

    #[test]
    fn summary_has_one_line_per_vm() {
        let c = cfg("");
        let s = summary(&c);
        assert_eq!(s.len(), 2);
        assert!(s[0].starts_with("a: qmp=/a.qmp agent=none (guest-stats) policy="), "{}", s[0]);
        assert!(summary_controller(&c).contains("metrics_listen=127.0.0.1:9848 status_socket=/run/autoballoon/status.sock"));
    }
}
