//! QMP frames from QEMU: a line classified, and every reply parser and the event parser on
//! what it holds. Errors are fine; panics are not.
#![no_main]
use autoballoon_qmp::types::{self, Frame, Outcome};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = types::parse_frame(data) else { return };
    match frame {
        Frame::Reply { outcome: Outcome::Return(v), .. } => {
            let _ = types::parse_balloon_info(&v);
            let _ = types::parse_memory_size_summary(&v);
            let _ = types::parse_guest_stats(&v);
            let _ = types::parse_migration_info(&v);
            let _ = types::parse_status(&v);
            let _ = types::parse_kvm_enabled(&v);
            let _ = types::parse_query_version(&v);
        }
        Frame::Reply { .. } => {}
        Frame::Event(ev) => {
            let _ = ev.migration_status();
        }
        Frame::Other(v) => {
            if let Ok(g) = types::parse_greeting(&v) {
                let _ = g.version.triple();
            }
            let _ = types::parse_event(&v);
        }
    }
});
