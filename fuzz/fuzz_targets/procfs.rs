//! The guest's and the host's /proc/meminfo, /proc/vmstat and /proc/pressure/memory, and
//! the memory view built from meminfo.
#![no_main]
use autoballoon_core::policy::MemView;
use autoballoon_core::procfs::{parse_meminfo, parse_pressure, parse_vmstat};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(m) = parse_meminfo(text) {
        if let Ok(v) = MemView::from_meminfo(&m) {
            let _ = (v.swapped(), v.overcommitted());
        }
    }
    if let Ok(v) = parse_vmstat(text) {
        let _ = v.oom_kills();
    }
    let _ = parse_pressure(text);
});
