use super::wait_for;
use autoballoon_qmp::{MigrationInfo, MigrationStatus, Qmp, QmpError};
use crate::Qemu;
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 for `-incoming` (bound, read, released).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A finished migration: QEMU's report and the time we measured ourselves.
#[derive(Debug, Clone)]
pub struct Migrated {
    pub info: MigrationInfo,
    /// From the `migrate` command to the first `completed` seen (polled every 100 ms).
    pub wall: Duration,
}

impl Migrated {
    /// QEMU's `total-time`, or our own measure where QEMU reported none (it sometimes
    /// answers a completed migration with `total-time` 0).
    pub fn seconds(&self) -> f64 {
        match self.info.total_time_ms {
            Some(ms) if ms > 0 => ms as f64 / 1000.0,
            _ => self.wall.as_secs_f64(),
        }
    }
    pub fn bytes_sent(&self) -> u64 {
        self.info.ram_transferred_bytes.unwrap_or(0)
    }
}

/// Migrates the VM behind `source` to `dest` (a QEMU started with
/// [`crate::Qemu::start_incoming`]), with the bandwidth cap given (bytes/s), and waits until
/// it completes or fails, and then until `dest` has loaded it (see [`wait_migration`]).
pub fn migrate(source: &Qmp, dest: &Qemu, max_bandwidth: u64, timeout: Duration) -> Result<Migrated, QmpError> {
    let start = start_migration(source, dest, max_bandwidth)?;
    wait_migration(source, dest, start, timeout)
}

/// The first half of [`migrate`]: sets the bandwidth cap and sends `migrate` to `dest`'s
/// incoming port; returns when it was sent, for [`wait_migration`]. Between the two the
/// caller may act on the guest (a spike during the migration).
pub fn start_migration(source: &Qmp, dest: &Qemu, max_bandwidth: u64) -> Result<Instant, QmpError> {
    let port = dest.spec.incoming_port.ok_or_else(|| QmpError::Protocol(format!("{} was not started with -incoming", dest.spec.name)))?;
    source.migrate_set_max_bandwidth(max_bandwidth)?;
    let start = Instant::now();
    source.migrate(&format!("tcp:127.0.0.1:{port}"))?;
    Ok(start)
}

/// The second half of [`migrate`]: waits until the migration sent at `start` completes
/// (`Ok`) or fails, polling `query-migrate` every 100 ms; after a completed one, waits until
/// `dest` has left `inmigrate`. The source reports `completed` while the last of the stream
/// may still be in the destination's socket: a source killed then can reset the connection
/// before the destination has read it all, and the destination exits.
pub fn wait_migration(source: &Qmp, dest: &Qemu, start: Instant, timeout: Duration) -> Result<Migrated, QmpError> {
    let deadline = start + timeout;
    let migrated = wait_source(source, start, timeout)?;
    let d = Qmp::connect_with_retry(&dest.qmp_ctl, deadline)?;
    let mut status = None;
    wait_for(deadline.saturating_duration_since(Instant::now()), Duration::from_millis(50), || {
        status = Some(d.query_status());
        !matches!(&status, Some(Ok(s)) if s == "inmigrate")
    });
    match status {
        Some(Ok(s)) if s != "inmigrate" => Ok(migrated),
        Some(Ok(_)) | None => Err(QmpError::Protocol(format!("{} still loads the migration after {timeout:?}", dest.spec.name))),
        Some(Err(e)) => Err(e),
    }
}

/// Polls the source until the migration is no longer active.
fn wait_source(source: &Qmp, start: Instant, timeout: Duration) -> Result<Migrated, QmpError> {
    let mut last = None;
    let mut err = None;
    wait_for(timeout, Duration::from_millis(100), || match source.query_migrate() {
        Ok(m) => {
            let done = !m.status.is_active() && m.status != MigrationStatus::None;
            last = Some(m);
            done
        }
        Err(e) => {
            err = Some(e);
            true
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    match last {
        Some(m) if m.status == MigrationStatus::Completed => Ok(Migrated { info: m, wall: start.elapsed() }),
        Some(m) => Err(QmpError::Protocol(format!("migration ended as {}", m.status))),
        None => Err(QmpError::Protocol("no migration status".into())),
    }
}
