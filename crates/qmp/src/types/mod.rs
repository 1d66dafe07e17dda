//! Typed QMP replies and events, and the pure parsers that build them from
//! `serde_json::Value`s. Nothing here does I/O, so everything is unit-tested
//! against frames captured from QEMU 7.2.
//!
//! Parsers are strict about what a command is documented to always return
//! (e.g. `query-balloon`'s `actual`) and lenient about optional statistics:
//! a missing or non-numeric optional field becomes `None` instead of failing
//! the whole reply.
//!
//! One file per protocol area:
//!
//! * `frame`: classifying a received line (reply, event, other) and the
//!   error-message helpers shared by the parsers;
//! * `greeting`: the QMP greeting ([`Greeting`], [`QemuVersion`]);
//! * `event`: asynchronous events ([`Event`]);
//! * `balloon`: `query-balloon`, `query-memory-size-summary` and the
//!   balloon's `guest-stats` ([`GuestStats`]);
//! * `migration`: `query-migrate` ([`MigrationInfo`], [`MigrationStatus`]);
//! * `status`: `query-status`.
//!
//! Everything public is re-exported here, so `types::X` paths are stable.

mod balloon;
mod event;
mod frame;
mod greeting;
mod migration;
mod status;

#[cfg(test)]
mod samples;

pub use balloon::{parse_balloon_info, parse_guest_stats, parse_memory_size_summary, GuestStats};
pub use event::{parse_event, Event};
pub use greeting::{parse_greeting, parse_query_version, Greeting, QemuVersion};
pub use migration::{parse_migration_info, MigrationInfo, MigrationStatus};
pub use status::{parse_kvm_enabled, parse_status};

pub(crate) use event::queued_size;
pub(crate) use frame::abbreviate_str;
pub use frame::{parse_frame, Frame, Outcome};
