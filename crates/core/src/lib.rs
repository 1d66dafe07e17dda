//! autoballoon-core: everything autoballoon decides, with no I/O.
//!
//! - [`units`]: KiB, bytes and pages as distinct types.
//! - [`procfs`]: pure parsers of /proc/meminfo, /proc/vmstat and /proc/pressure/memory.
//! - [`policy`]: the [`policy::Policy`] interface and the swap-free estimator.
//! - [`guard`], [`outlier`], [`interval`]: guard rails, iBalloon's outlier filter and adaptive interval.
//! - [`sample`]: what a policy sees of one VM, and the rule that merges a host's views of it.
//! - [`control`]: one VM's control loop, sample → policy → guard rails → actuator.
//! - [`host`]: every VM of a host at once: per-VM loops and one balancer, and the `World`
//!   trait a QEMU host, a guest or the simulator implements.
//! - [`migration`]: following and preparing a live migration (its phase, when a prepared
//!   one starts, where a shrink under way stops), and whether a VM may shrink during one (from the
//!   hypervisor's facts).
//! - [`config`]: the policy configuration shared by the agent and the host.
//! - [`lines`]: the one bounded line framer every reader of newline-delimited input uses.
//! - [`protocol`]: the JSON lines the guest agent and the host controller exchange.

pub mod config;
pub mod control;
pub mod guard;
pub mod host;
pub mod interval;
pub mod lines;
pub mod migration;
pub mod outlier;
pub mod policy;
pub mod procfs;
pub mod protocol;
pub mod sample;
pub mod units;

pub use units::{Bytes, Kib, Pages, Percent};
