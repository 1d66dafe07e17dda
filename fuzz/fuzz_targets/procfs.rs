//! The guest's and the host's /proc/meminfo, /proc/vmstat, /proc/pressure/memory and
//! /proc/buddyinfo, and the memory view built from meminfo and buddyinfo.
#![no_main]
use autoballoon_core::policy::MemView;
use autoballoon_core::procfs::{parse_buddyinfo, parse_meminfo, parse_pressure, parse_vmstat, Buddyinfo};
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
    if let Ok(b) = parse_buddyinfo(text) {
        let whole = b.free_in_blocks_saturating(Buddyinfo::HINT_ORDER);
        assert!(whole <= b.free_in_blocks_saturating(0), "blocks of an order and above are among all free blocks");
        let _ = MemView::default().with_buddyinfo(&b);
    }
});
