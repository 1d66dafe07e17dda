//! autoballoon-sim: continuous ballooning on a virtual clock.
//!
//! The simulated host is one more core [`autoballoon_core::host::World`]: core's
//! [`autoballoon_core::host::HostLoop`] with the real policy, rails and balancers samples it
//! and sets guest sizes; the model ([`guest`], [`workload`], [`migration`]) moves memory in
//! between, one tick at a time, deterministically for a seed. docs/simulator.md describes
//! the model, its limits and its calibration.
//!
//! - [`scenario`]: the TOML scenarios (built-in ones embedded).
//! - [`calib`]: the calibration profiles.
//! - [`policies`]: the policies by name and what each needs of the guest.
//! - [`world`]: the world the host loop drives.
//! - [`run`]: a run, its summary and series; [`report`]: the experiments' report.
//! - [`fit`]: the calibration's fitted values (`--calibrate`); [`conformance`]: the model
//!   against make bench's QEMU measurements.

pub mod calib;
pub mod conformance;
pub mod error;
pub mod fit;
pub mod fleet;
pub mod guest;
pub mod migration;
pub mod plot;
pub mod policies;
pub mod report;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod workload;
pub mod world;

pub use error::SimError;
pub use policies::PolicyName;
pub use run::{run, Options, Run, Summary};
pub use scenario::Scenario;
