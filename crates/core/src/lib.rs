//! autoballoon-core: everything autoballoon decides, with no I/O.
//!
//! - [`units`]: KiB, bytes and pages as distinct types.
//! - [`procfs`]: pure parsers of /proc/meminfo, /proc/vmstat and /proc/pressure/memory.
//! - [`policy`]: the [`policy::Policy`] interface and the swap-free estimator.
//! - [`guard`], [`outlier`], [`interval`]: guard rails, iBalloon's outlier filter and adaptive interval.
//! - [`control`]: the control loop, sample → policy → guard rails → actuator.
//! - [`protocol`]: the JSON lines the guest agent and the host controller exchange.

pub mod control;
pub mod guard;
pub mod interval;
pub mod outlier;
pub mod policy;
pub mod procfs;
pub mod protocol;
pub mod units;

pub use units::{Bytes, Kib, Pages};
