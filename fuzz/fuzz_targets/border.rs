//! The border: an agent line (JSON), and raw balloon numbers, for a VM of any size. Whatever
//! passes must be within the VM, and nothing panics. The same line as the agent reads it
//! from the host, too.
#![no_main]
use autoballoon_core::protocol::{check_actual, check_balloon_stats, check_sample, decode, AgentMessage, BalloonStats, HostMessage};
use autoballoon_core::{Bytes, Kib};
use libfuzzer_sys::fuzz_target;

fn u64_at(data: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (k, v) in data.iter().skip(i * 8).take(8).enumerate() {
        b[k] = *v;
    }
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    // The first 8 bytes: the VM's size; the next 40: the balloon's numbers; the rest: a line.
    let configured = Kib(u64_at(data, 0));
    let actual = Bytes(u64_at(data, 1));
    if let Ok(k) = check_actual(actual, configured) {
        assert!(k <= configured);
    }
    let opt = |i: usize| Some(Bytes(u64_at(data, i))).filter(|b| b.0 % 7 != 0);
    let stats = BalloonStats { total: opt(2), free: opt(3), available: opt(4), disk_caches: opt(5) };
    if let Ok(Some(v)) = check_balloon_stats(&stats, configured) {
        assert!(v.total <= configured && v.free <= v.total && v.available <= v.total && v.cached <= v.total);
    }
    let line = data.get(48..).unwrap_or_default();
    let Ok(text) = std::str::from_utf8(line) else { return };
    let _ = decode::<HostMessage>(text);
    if let Some(AgentMessage::Sample(s)) = decode::<AgentMessage>(text) {
        if let Ok(v) = check_sample(&s, configured) {
            assert!(v.mem.total <= configured);
            assert!(v.mem.available <= v.mem.total && v.mem.free <= v.mem.total);
            assert!(v.balloon.is_none_or(|b| b.to_kib_checked().is_some_and(|k| k <= configured)));
        }
    }
});
