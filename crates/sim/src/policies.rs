//! The policies a scenario runs under: core's own (the swap-free estimator through the host
//! loop, with each of core's balancers) and the baselines the seeds compare against. Each
//! name fixes the guest side too: which kernel (patched with the hook, or stock), the
//! overcommit setting, free page reporting and hinting.

use crate::error::SimError;
use autoballoon_core::config::PolicyConfig;
use autoballoon_core::host::{Balancer, BalancerKind, HostLoop, SharesConfig};
use autoballoon_core::policy::{estimate, Decision, Policy, Reason, Sample, SwapFree};
use autoballoon_core::units::Kib;
use std::time::Duration;

/// The policies by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyName {
    /// No balloon at all: the VM keeps its configured size.
    Static,
    /// Ours: the swap-free estimator on the patched kernel (hook, transparent, overcommit on).
    Swapfree,
    /// The same with free page reporting on: make bench's `ab-patched-fpr`.
    SwapfreeFpr,
    /// Our targets on a stock balloon without the hook.
    ContinuousStock,
    /// The same with free page reporting on: make bench's `ab-stock` (the host controller
    /// on a stock kernel, QEMU's `free-page-reporting=on`).
    ContinuousStockFpr,
    /// Dynamic self-ballooning (Hines and Gopalan): balloon 95 % of free memory, stock balloon.
    Dsb95,
    /// One balloon inflation right before each migration, back to full after it.
    OneShot,
    /// The swap-free estimator with iBalloon's balancer, over QMP on a stock kernel.
    Iballoon,
    /// The swap-free estimator with pressure-driven automatic ballooning, stock kernel.
    Pressure,
    /// The swap-free estimator with ESX proportional shares, stock kernel.
    Shares,
    /// No balloon; free page reporting on.
    FreePageReporting,
    /// No balloon; free page hinting at each migration.
    FreePageHinting,
}

impl PolicyName {
    pub const ALL: [PolicyName; 12] = [
        PolicyName::Static,
        PolicyName::Swapfree,
        PolicyName::SwapfreeFpr,
        PolicyName::ContinuousStock,
        PolicyName::ContinuousStockFpr,
        PolicyName::Dsb95,
        PolicyName::OneShot,
        PolicyName::Iballoon,
        PolicyName::Pressure,
        PolicyName::Shares,
        PolicyName::FreePageReporting,
        PolicyName::FreePageHinting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::Static => "static",
            PolicyName::Swapfree => "swapfree",
            PolicyName::SwapfreeFpr => "swapfree-fpr",
            PolicyName::ContinuousStock => "continuous-stock",
            PolicyName::ContinuousStockFpr => "continuous-stock-fpr",
            PolicyName::Dsb95 => "dsb95",
            PolicyName::OneShot => "one-shot",
            PolicyName::Iballoon => "iballoon",
            PolicyName::Pressure => "pressure",
            PolicyName::Shares => "shares",
            PolicyName::FreePageReporting => "free-page-reporting",
            PolicyName::FreePageHinting => "free-page-hinting",
        }
    }

    pub fn parse(s: &str) -> Result<PolicyName, SimError> {
        PolicyName::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                SimError::UnknownPolicy(
                    s.to_string(),
                    PolicyName::ALL.map(|p| p.as_str()).join(", "),
                )
            })
    }

    /// The guest side of this policy.
    pub fn guest(self) -> GuestSide {
        let stock = GuestSide {
            agent: false,
            patched: false,
            overcommit_always: false,
            transparent: false,
            fpr: false,
            hinting: false,
            prepare_migration: false,
            target_in_force: false,
        };
        match self {
            PolicyName::Swapfree => GuestSide {
                agent: true,
                patched: true,
                overcommit_always: true,
                transparent: true,
                target_in_force: true,
                ..stock
            },
            PolicyName::ContinuousStock
            | PolicyName::Iballoon
            | PolicyName::Pressure
            | PolicyName::Shares => GuestSide {
                agent: true,
                overcommit_always: true,
                ..stock
            },
            PolicyName::SwapfreeFpr => GuestSide {
                fpr: true,
                ..PolicyName::Swapfree.guest()
            },
            PolicyName::ContinuousStockFpr => GuestSide {
                agent: true,
                overcommit_always: true,
                fpr: true,
                ..stock
            },
            PolicyName::OneShot => GuestSide {
                agent: true,
                prepare_migration: true,
                ..stock
            },
            PolicyName::FreePageReporting => GuestSide { fpr: true, ..stock },
            PolicyName::FreePageHinting => GuestSide {
                hinting: true,
                ..stock
            },
            PolicyName::Dsb95 => GuestSide {
                agent: true,
                ..stock
            },
            PolicyName::Static => stock,
        }
    }

    fn balancer(self) -> BalancerKind {
        match self {
            PolicyName::Iballoon => BalancerKind::Iballoon,
            PolicyName::Pressure => BalancerKind::Pressure,
            PolicyName::Shares => BalancerKind::Shares,
            _ => BalancerKind::Independent,
        }
    }

    /// The host loop this policy runs: one control loop per VM (core's rails from
    /// `cfg`, a 1 s interval) and core's balancer.
    pub fn host_loop(
        self,
        cfg: &PolicyConfig,
        vms: usize,
    ) -> HostLoop<SimPolicy, Box<dyn Balancer + Send>> {
        let mut hl = HostLoop::new(self.balancer().build(SharesConfig::default()));
        for i in 0..vms {
            let policy = match self {
                PolicyName::Swapfree
                | PolicyName::SwapfreeFpr
                | PolicyName::ContinuousStock
                | PolicyName::ContinuousStockFpr
                | PolicyName::Iballoon
                | PolicyName::Pressure
                | PolicyName::Shares => SimPolicy::SwapFree(Box::new(cfg.policy())),
                PolicyName::Dsb95 => SimPolicy::Dsb95,
                PolicyName::OneShot => SimPolicy::OneShot {
                    buffer: Kib::from_mib_saturating(cfg.buffer_mib),
                },
                PolicyName::Static
                | PolicyName::FreePageReporting
                | PolicyName::FreePageHinting => SimPolicy::Static,
            };
            let lp = cfg.control_loop_of(policy, Duration::from_secs(1));
            hl.add_vm(autoballoon_core::host::VmId(i as u32), lp);
        }
        hl
    }
}

/// What a policy needs of the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestSide {
    /// A self-ballooning agent or host controller samples the guest every second (CPU).
    pub agent: bool,
    /// The patched kernel: the allocator's last-resort hook.
    pub patched: bool,
    pub overcommit_always: bool,
    pub transparent: bool,
    pub fpr: bool,
    pub hinting: bool,
    /// Migrations wait for the balloon to reach the policy's pre-migration size.
    pub prepare_migration: bool,
    /// The loop reads the balloon's target back (the patched kernel's `target_pages`).
    pub target_in_force: bool,
}

/// The per-VM policy of a run: core's swap-free estimator, or a baseline.
#[derive(Debug, Clone, PartialEq)]
pub enum SimPolicy {
    SwapFree(Box<SwapFree>),
    /// Never an opinion: the balloon is never moved.
    Static,
    /// `size − 0.95 · MemFree`.
    Dsb95,
    /// The estimate while a migration is prepared; the full size otherwise.
    OneShot {
        buffer: Kib,
    },
}

impl Policy for SimPolicy {
    fn name(&self) -> &'static str {
        match self {
            SimPolicy::SwapFree(p) => p.name(),
            SimPolicy::Static => "static",
            SimPolicy::Dsb95 => "dsb95",
            SimPolicy::OneShot { .. } => "one-shot",
        }
    }

    fn decide(&mut self, s: &Sample) -> Option<Decision> {
        match self {
            SimPolicy::SwapFree(p) => p.decide(s),
            SimPolicy::Static => None,
            SimPolicy::Dsb95 => {
                let mem = s.mem.as_ref()?;
                let take = Kib((mem.free.0 as f64 * 0.95) as u64);
                Some(Decision {
                    target: s
                        .guest_size
                        .saturating_sub(take)
                        .clamp(Kib::ONE_PAGE, s.max),
                    reason: Reason::Fixed,
                })
            }
            SimPolicy::OneShot { buffer } => {
                if s.preparing_migration {
                    let mem = s.mem.as_ref()?;
                    let e = estimate(mem, s.guest_size, s.max, *buffer);
                    Some(Decision {
                        target: e.target,
                        reason: Reason::Estimate(e),
                    })
                } else if s.migrating {
                    None
                } else {
                    Some(Decision {
                        target: s.max,
                        reason: Reason::Fixed,
                    })
                }
            }
        }
    }
}
