//! A small blocking client for the QEMU Machine Protocol (QMP), as used by
//! the autoballoon host controller to drive virtio-balloon and migration.
//!
//! * One Unix socket per VM, one background reader thread, no async runtime.
//! * [`Qmp`] is `Send + Sync`; commands carry a numeric `"id"` and replies are
//!   routed by it, so several threads may issue commands at once.
//! * Asynchronous events (`BALLOON_CHANGE`, `MIGRATION`, `STOP`, `SHUTDOWN`,
//!   ...) go to a queue that never blocks replies. Drain it each tick with
//!   [`Qmp::poll_events`] or wait with [`Qmp::next_event`]. Events that QEMU
//!   sent before a reply are queued by the time that command returns. The
//!   queue is bounded in count ([`EVENT_QUEUE_CAPACITY`]) and estimated
//!   memory ([`EVENT_QUEUE_BYTES`]); overflow discards the oldest events and
//!   counts them in [`Qmp::dropped_events`].
//! * Every call has a timeout ([`DEFAULT_COMMAND_TIMEOUT`], 10 s, adjustable).
//!   If the socket closes, every waiting caller gets
//!   [`QmpError::Disconnected`] at once.
//! * Typed helpers spell out their units: bytes, seconds, pages. Note that
//!   QMP `balloon` takes the size the **guest** should have, not the size of
//!   the balloon, hence [`Qmp::set_balloon_guest_size`].
//! * Reconnecting: [`Qmp::connect_with_retry`] and the pure [`Backoff`].
//!
//! QEMU facts this crate relies on (checked against QEMU 7.2 and 10.0; the
//! differences are listed in `docs/qemu-versions.md`):
//! `BALLOON_CHANGE` is rate-limited to one per second, so poll
//! [`Qmp::query_balloon`] to time inflation; `MIGRATION` events are only sent
//! after [`Qmp::enable_migration_events`]; guest statistics are read with
//! `qom-get` on the balloon device (e.g. [`BALLOON_DEVICE_PATH`]) and only
//! refresh after [`Qmp::set_stats_polling_interval`].
//!
//! # Example
//!
//! ```no_run
//! use std::path::Path;
//! use std::time::{Duration, Instant};
//! use autoballoon_qmp::{MigrationStatus, Qmp, QmpError, BALLOON_DEVICE_PATH};
//!
//! fn main() -> Result<(), QmpError> {
//!     // QEMU started with `-qmp unix:/run/vm1.qmp,server=on,wait=off
//!     //                   -device virtio-balloon-pci,id=balloon0`.
//!     let deadline = Instant::now() + Duration::from_secs(10);
//!     let qmp = Qmp::connect_with_retry(Path::new("/run/vm1.qmp"), deadline)?;
//!     println!("QEMU {}", qmp.version());
//!
//!     qmp.set_stats_polling_interval(BALLOON_DEVICE_PATH, 2)?;
//!     let stats = qmp.guest_stats(BALLOON_DEVICE_PATH)?;
//!     println!("guest MemAvailable: {:?} bytes", stats.available_memory_bytes);
//!
//!     // Shrink the guest to 1 GiB (the balloon grows to RAM - 1 GiB).
//!     qmp.set_balloon_guest_size(1 << 30)?;
//!     while qmp.query_balloon()? > 1 << 30 {
//!         for ev in qmp.poll_events() {
//!             println!("event {} {}", ev.name, ev.data);
//!         }
//!         std::thread::sleep(Duration::from_millis(50));
//!     }
//!
//!     qmp.enable_migration_events()?;
//!     qmp.migrate_set_max_bandwidth(1 << 30)?;
//!     qmp.migrate("tcp:127.0.0.1:4444")?;
//!     loop {
//!         let info = qmp.query_migrate()?;
//!         if info.status.is_finished() {
//!             assert_eq!(info.status, MigrationStatus::Completed);
//!             println!("sent {:?} bytes in {:?} ms", info.ram_transferred_bytes, info.total_time_ms);
//!             break;
//!         }
//!         qmp.next_event(Duration::from_millis(100))?; // wakes early on MIGRATION events
//!     }
//!     qmp.quit()
//! }
//! ```

#![warn(missing_docs)]

mod backoff;
mod client;
mod error;
pub mod types;
mod write_gate;

pub use backoff::Backoff;
pub use client::{
    EventHook, Qmp, BALLOON_DEVICE_PATH, DEFAULT_COMMAND_TIMEOUT, EVENT_QUEUE_BYTES,
    EVENT_QUEUE_CAPACITY, MAX_FRAME_BYTES,
};
pub use error::QmpError;
pub use types::{Event, Greeting, GuestStats, MigrationInfo, MigrationStatus, QemuVersion};
