//! autoballoon's host side: the controller daemon (QMP + agent channel), its configuration,
//! logging and signal handling. The QEMU test bed and the demo are in `autoballoon-testbed`.

pub mod config;
pub mod controller;
pub mod histogram;
pub(crate) mod hypervisor;
pub mod libvirt;
pub mod log;
pub mod metrics;
pub mod notify;
pub mod ops;
pub mod server_thread;
pub mod signals;
pub mod status_socket;

use controller::VmStatus;

/// A status table of VMs, one line each.
pub fn status_table(rows: &[VmStatus]) -> String {
    let mut s = format!("{:<12} {:<14} {:>10} {:>10} {:>10} {:>11} {:>8} {:>7}\n", "VM", "STATE", "SIZE MiB", "TARGET", "USED", "SOURCE", "CLASS", "ACTIONS");
    for r in rows {
        let opt = |k: Option<autoballoon_core::Kib>| k.map(|k| format!("{:.0}", k.mib_f64())).unwrap_or_else(|| "-".into());
        s.push_str(&format!(
            "{:<12} {:<14} {:>10.0} {:>10} {:>10} {:>11} {:>8} {:>7}\n",
            r.name, r.state.to_string(), r.size.mib_f64(), opt(r.target), opt(r.used), r.source.to_string(), r.class.unwrap_or("-"), r.actions
        ));
    }
    s
}
