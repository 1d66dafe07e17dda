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
//!
//! Also [`prom`]: real Prometheus parsers, to check what the metrics endpoint serves.
//!
//! ```
//! use autoballoon_core::units::{Kib, Pages};
//! use autoballoon_fakes::{Fault, FakeAgentPort, FakeQemu, FakeQemuConfig};
//! use std::time::Duration;
//!
//! let qemu = FakeQemu::start(FakeQemuConfig::new(Kib::from_gib_saturating(4)));
//! let port = FakeAgentPort::start();
//! // ... start the daemon's VM worker on qemu.qmp_path() and port.path() ...
//! # let qmp = autoballoon_qmp::Qmp::connect(qemu.qmp_path(), Duration::from_secs(5)).unwrap();
//! # qmp.set_balloon_guest_size(2 << 30).unwrap();
//! # let _daemon = std::os::unix::net::UnixStream::connect(port.path()).unwrap();
//! if port.wait_connected(Duration::from_secs(5)) {
//!     port.send_sample(Kib(4 << 20), Kib(3 << 20), Kib(1 << 20), Pages(0)).unwrap();
//! }
//! assert!(autoballoon_fakes::wait_until(Duration::from_secs(5), || !qemu.balloon_requests().is_empty()));
//! assert_eq!(qemu.actual(), Kib(2 << 20)); // moved at once (BalloonMotion::Instant)
//! qemu.set_fault(Fault::NoBalloonDevice); // the next query-balloon fails with DeviceNotActive
//! ```

#![warn(missing_docs)]

pub mod prom;
mod agent_port;
mod lines;
mod qemu;
mod sync;
mod tempdir;

pub use agent_port::{sample, FakeAgentPort};
pub use qemu::{
    BalloonMotion, FakeGuestStats, FakeQemu, FakeQemuConfig, Fault, MigrationOutcome, BALLOON_PATH,
};
pub use sync::wait_until;
pub use tempdir::TempDir;
