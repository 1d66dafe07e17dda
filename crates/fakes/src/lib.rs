//! Fakes for testing the autoballoon host daemon without QEMU.
//!
//! Both fakes listen on real unix sockets in a private temporary directory, speak the
//! real wire protocols, run in their own threads, and stop and clean up when dropped.
//!
//! - [`FakeQemu`]: a stateful QMP server shaped after QEMU 7.2 (balloon, guest-stats,
//!   migration, events) with injectable [`Fault`]s (hostile and broken peers).
//! - [`FakeAgentPort`]: the host end of the guest agent's virtio-serial port (QEMU's
//!   `-chardev socket,server=on`): the daemon connects, the test plays the guest agent.
//!
//! Server threads never panic on what a client sends: bad input ends that connection.

#![warn(missing_docs)]

mod agent_port;
mod lines;
mod qemu;
mod sync;
mod tempdir;

pub use agent_port::{sample, FakeAgentPort};
pub use qemu::{BalloonMotion, Fault, FakeGuestStats, FakeQemu, FakeQemuConfig, MigrationOutcome, BALLOON_PATH};
pub use sync::wait_until;
pub use tempdir::TempDir;
