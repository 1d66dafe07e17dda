//! Choosing a balancer by name, for configuration files.

use super::{Balancer, CapGrowth, HostNeed, IBalloon, Independent, PressureBalancer, Reclaim, Shares, SharesConfig};
use serde::Deserialize;

/// The balancers there are, by their configuration name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BalancerKind {
    /// Every VM gets its policy's wish (`independent`).
    #[default]
    Independent,
    /// Growth cut in proportion to fit the capacity (`cap-growth`).
    CapGrowth,
    /// iBalloon's classifier and Algorithm 2 (`iballoon`).
    Iballoon,
    /// Host memory pressure inflates guests in steps (`pressure`).
    Pressure,
    /// ESX proportional shares with an idle-memory tax (`shares`).
    Shares,
}

impl BalancerKind {
    /// A balancer of this kind with its default parameters (`shares` for [`Shares`]).
    pub fn build(self, shares: SharesConfig) -> Box<dyn Balancer + Send> {
        self.build_for(shares, Reclaim::Lean)
    }

    /// A balancer of this kind inside the reclaim mode `reclaim` (`host-need` weighs the
    /// VMs by the shares of `shares`, whatever the balancer).
    pub fn build_for(self, shares: SharesConfig, reclaim: Reclaim) -> Box<dyn Balancer + Send> {
        match reclaim {
            Reclaim::Lean => self.inner(shares),
            Reclaim::HostNeed { target } => Box::new(HostNeed::new(self.inner(shares.clone()), target, shares)),
        }
    }

    fn inner(self, shares: SharesConfig) -> Box<dyn Balancer + Send> {
        match self {
            BalancerKind::Independent => Box::new(Independent),
            BalancerKind::CapGrowth => Box::new(CapGrowth),
            BalancerKind::Iballoon => Box::new(IBalloon::default()),
            BalancerKind::Pressure => Box::new(PressureBalancer::default()),
            BalancerKind::Shares => Box::new(Shares::new(shares)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_under_its_own_name() {
        for (kind, name) in [(BalancerKind::Independent, "independent"), (BalancerKind::CapGrowth, "cap-growth"), (BalancerKind::Iballoon, "iballoon"),
                             (BalancerKind::Pressure, "pressure"), (BalancerKind::Shares, "shares")] {
            assert_eq!(kind.build(SharesConfig::default()).name(), name);
            let parsed: BalancerKind = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(parsed, kind);
            let target = crate::units::Percent::new_checked(80).unwrap();
            let wrapped = kind.build_for(SharesConfig::default(), Reclaim::HostNeed { target });
            assert_eq!(wrapped.name(), name, "host-need keeps the balancer's name");
            assert_eq!(kind.build_for(SharesConfig::default(), Reclaim::Lean).reclaim_step(), None);
        }
    }
}
