//! A migration as the host controller follows it, whatever the hypervisor: its phase (QMP's
//! `MIGRATION` events and `query-migrate`, libvirt's migration job), what the hypervisor
//! reports at its end, and the rule that turns a phase seen into a start or an end.

use crate::protocol::MigrationOutcome;
use crate::Bytes;
use std::fmt;
use std::time::Duration;

/// Where a VM's outgoing migration is, in any hypervisor's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationPhase {
    /// No migration (none started, or the hypervisor no longer shows the last one).
    Idle,
    /// Under way. `stage` is the hypervisor's own word for it (QMP's `setup`, `active`,
    /// `postcopy-active`, ..., or a word this side does not know), shown in logs and the
    /// status as it came.
    Running { stage: String },
    /// Over: completed, failed or cancelled.
    Ended(MigrationOutcome),
}

impl MigrationPhase {
    /// A running migration in the hypervisor's own word.
    pub fn running(stage: impl Into<String>) -> MigrationPhase {
        MigrationPhase::Running { stage: stage.into() }
    }

    pub fn is_running(&self) -> bool {
        matches!(self, MigrationPhase::Running { .. })
    }
}

impl fmt::Display for MigrationPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MigrationPhase::Idle => f.write_str("none"),
            MigrationPhase::Running { stage } => f.write_str(stage),
            MigrationPhase::Ended(o) => o.fmt(f),
        }
    }
}

/// A migration's phase, with what the report shows at its end (each `None` where the
/// hypervisor did not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationProgress {
    pub phase: MigrationPhase,
    /// Since the migration was started (set-up included).
    pub total_time: Option<Duration>,
    /// Guest memory sent so far.
    pub sent: Option<Bytes>,
    /// How long the guest was stopped for the switch-over.
    pub downtime: Option<Duration>,
}

impl MigrationProgress {
    /// Only the phase known.
    pub fn of(phase: MigrationPhase) -> MigrationProgress {
        MigrationProgress { phase, total_time: None, sent: None, downtime: None }
    }
}

/// What a phase seen means for the VM's actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseChange {
    /// A migration has started (ours, or another tool's).
    Started,
    /// The migration ended so: normal control resumes. `Completed`: the VM has left for
    /// the destination.
    Ended(MigrationOutcome),
    /// Nothing new.
    Unchanged,
}

/// The rule: `running` is whether a migration was under way before `seen`; `ours` whether
/// this controller sent `migrate` for a request it is following (its end shows as
/// [`MigrationPhase::Ended`] even if the start was never seen running).
pub fn phase_change(running: bool, ours: bool, seen: &MigrationPhase) -> PhaseChange {
    match seen {
        MigrationPhase::Running { .. } if !running => PhaseChange::Started,
        MigrationPhase::Running { .. } => PhaseChange::Unchanged,
        MigrationPhase::Ended(o) if running || ours => PhaseChange::Ended(*o),
        // The hypervisor no longer shows the migration that ran: not completed.
        MigrationPhase::Idle if running => PhaseChange::Ended(MigrationOutcome::Failed),
        _ => PhaseChange::Unchanged,
    }
}

/// Whether a migration this controller started (`migrate` sent) in a session since lost is
/// still to be followed by the next session, which finds the hypervisor at `seen`: yes while
/// it runs or shows how it ended; not if it shows no migration at all, for then the migration
/// went with the lost session (its QEMU died and a new one took the socket), and the request
/// is over, failed.
pub fn started_request_survives(seen: &MigrationPhase) -> bool {
    !matches!(seen, MigrationPhase::Idle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_request_outlives_its_session_only_if_the_hypervisor_still_shows_it() {
        assert!(started_request_survives(&MigrationPhase::running("active")));
        assert!(started_request_survives(&MigrationPhase::Ended(MigrationOutcome::Completed)));
        assert!(started_request_survives(&MigrationPhase::Ended(MigrationOutcome::Failed)));
        assert!(!started_request_survives(&MigrationPhase::Idle), "a new QEMU: no migration");
    }

    #[test]
    fn a_running_phase_starts_a_migration_once() {
        let active = MigrationPhase::running("active");
        assert_eq!(phase_change(false, false, &active), PhaseChange::Started);
        assert_eq!(phase_change(true, false, &active), PhaseChange::Unchanged);
        assert_eq!(phase_change(false, true, &MigrationPhase::running("setup")), PhaseChange::Started);
    }

    #[test]
    fn an_end_counts_while_running_or_for_our_own_request() {
        let done = MigrationPhase::Ended(MigrationOutcome::Completed);
        assert_eq!(phase_change(true, false, &done), PhaseChange::Ended(MigrationOutcome::Completed));
        // Ours went from `migrate` to its end between two polls.
        assert_eq!(phase_change(false, true, &done), PhaseChange::Ended(MigrationOutcome::Completed));
        // Someone else's old migration, never seen running: nothing to do.
        assert_eq!(phase_change(false, false, &done), PhaseChange::Unchanged);
        let cancelled = MigrationPhase::Ended(MigrationOutcome::Cancelled);
        assert_eq!(phase_change(true, false, &cancelled), PhaseChange::Ended(MigrationOutcome::Cancelled));
    }

    #[test]
    fn a_migration_that_vanishes_failed() {
        assert_eq!(phase_change(true, false, &MigrationPhase::Idle), PhaseChange::Ended(MigrationOutcome::Failed));
        assert_eq!(phase_change(false, true, &MigrationPhase::Idle), PhaseChange::Unchanged);
        assert_eq!(phase_change(false, false, &MigrationPhase::Idle), PhaseChange::Unchanged);
    }

    #[test]
    fn phases_show_in_the_hypervisor_s_words() {
        assert_eq!(MigrationPhase::running("postcopy-active").to_string(), "postcopy-active");
        assert_eq!(MigrationPhase::Ended(MigrationOutcome::Completed).to_string(), "completed");
        assert_eq!(MigrationPhase::Idle.to_string(), "none");
        assert!(MigrationPhase::running("x").is_running() && !MigrationPhase::Idle.is_running());
    }
}
