//! The agent channel: newline-delimited JSON between the guest agent and the host
//! controller over a virtio-serial port. One message per line, each at most
//! [`MAX_LINE`] bytes; unknown fields are ignored so either side may be newer.

mod border;

pub use border::{check_actual, check_balloon_stats, check_sample, BalloonStats, Rejected};

use crate::policy::MemView;
use crate::procfs::Pressure;
use crate::units::{Kib, Pages};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest line either side accepts; longer ones are dropped as garbage.
pub const MAX_LINE: usize = 4096;

/// The virtio-serial port name the agent and the controller meet on.
pub const PORT_NAME: &str = "org.autoballoon.agent.0";

/// Guest → host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// Sent once when the agent starts.
    Hello { version: String, backend: String },
    /// One sample of the guest's memory.
    Sample(AgentSample),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSample {
    pub seq: u64,
    /// Guest uptime at the sample, in milliseconds.
    pub uptime_ms: u64,
    pub mem: MemView,
    /// OOM kills in the guest since boot (/proc/vmstat `oom_kill`), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kills: Option<u64>,
    /// File pages read again after eviction since boot (/proc/vmstat
    /// `workingset_refault_file`), if known. An older agent does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_refaults: Option<u64>,
    /// Pages in the balloon when the sample was taken (guest /proc/vmstat), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balloon: Option<Pages>,
    /// The agent's own estimate, when it knows its current size (kernel or Xen backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Kib>,
    /// The guest's /proc/pressure/memory, if the kernel has PSI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<Pressure>,
    /// The guest is running short of memory now: its memory-pressure trigger fired (tasks
    /// stalled on memory) within the last second. The host decides on this sample at once
    /// instead of at its next tick; it can only make a decision come sooner, never a
    /// larger one. An older agent does not say: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub running_short: bool,
}

/// Host → guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostMessage {
    /// A live migration of this VM started. The agent lowers its target during it only if
    /// `shrink_allowed`: the host found that its hypervisor keeps a migration correct while
    /// the balloon shrinks ([`crate::migration::MigrationShrink`]). A host that does not
    /// say (an older one) means no.
    MigrationStarted {
        #[serde(default)]
        shrink_allowed: bool,
    },
    /// The migration ended (completed or failed): shrinking may resume.
    MigrationEnded { outcome: MigrationOutcome },
    /// What the host does for this VM that decides some of the agent's own work; sent
    /// each time the link to the agent connects (a new QEMU after a migration may differ).
    /// An older host never sends it: the agent then counts on none of it.
    Abilities {
        /// The host backs memory that free page reporting gave back again as soon as it
        /// hears that a program committed memory (QEMU's `x-populate-reported`, the
        /// project's QEMU patches): only then is a commitment worth telling the host at
        /// once while the guest has room for it.
        #[serde(default)]
        backs_reported: bool,
    },
}

/// How a migration ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationOutcome {
    Completed,
    Failed,
    Cancelled,
    /// An outcome this side does not know (a newer peer).
    #[serde(other)]
    Unknown,
}

impl fmt::Display for MigrationOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MigrationOutcome::Completed => "completed",
            MigrationOutcome::Failed => "failed",
            MigrationOutcome::Cancelled => "cancelled",
            MigrationOutcome::Unknown => "unknown",
        })
    }
}

/// Serialises one message as a line (with its trailing newline).
pub fn encode<T: Serialize>(msg: &T) -> String {
    let mut s = serde_json::to_string(msg).expect("protocol types always serialise");
    s.push('\n');
    s
}

/// Parses one line; `None` for garbage, oversized or unknown messages.
pub fn decode<'a, T: Deserialize<'a>>(line: &'a str) -> Option<T> {
    if line.len() > MAX_LINE {
        return None;
    }
    serde_json::from_str(line.trim_end()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_garbage() {
        let m = AgentMessage::Sample(AgentSample { seq: 3, uptime_ms: 10, mem: MemView { available: Kib(5), ..Default::default() }, oom_kills: Some(0), file_refaults: Some(9), balloon: Some(Pages(7)), target: None, pressure: None, running_short: true });
        let line = encode(&m);
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        assert_eq!(decode::<AgentMessage>(&line), Some(m));
        assert_eq!(decode::<HostMessage>("{\"type\":\"migration_started\"}"), Some(HostMessage::MigrationStarted { shrink_allowed: false }), "an older host: no shrinking");
        assert_eq!(decode::<HostMessage>("{\"type\":\"migration_started\",\"shrink_allowed\":true}"), Some(HostMessage::MigrationStarted { shrink_allowed: true }));
        assert_eq!(decode::<HostMessage>("{\"type\":\"migration_ended\",\"outcome\":\"completed\",\"new\":1}"),
                   Some(HostMessage::MigrationEnded { outcome: MigrationOutcome::Completed }));
        assert_eq!(decode::<HostMessage>("{\"type\":\"migration_ended\",\"outcome\":\"teleported\"}"),
                   Some(HostMessage::MigrationEnded { outcome: MigrationOutcome::Unknown }));
        let abilities = HostMessage::Abilities { backs_reported: true };
        assert_eq!(encode(&abilities), "{\"type\":\"abilities\",\"backs_reported\":true}\n");
        assert_eq!(decode::<HostMessage>(&encode(&abilities)), Some(abilities));
        assert_eq!(decode::<HostMessage>("{\"type\":\"abilities\",\"new\":1}"), Some(HostMessage::Abilities { backs_reported: false }), "a newer host's other abilities");
        assert_eq!(decode::<AgentMessage>("{\"type\":\"bogus\"}"), None);
        assert_eq!(decode::<AgentMessage>("\u{0}\u{1}garbage"), None);
        assert_eq!(decode::<AgentMessage>(&"x".repeat(MAX_LINE + 1)), None);
    }
}
