//! What libvirt's API answers that we read: a domain's XML (the agent's channel, the domain
//! type, the balloon device) and memory statistics' tagged values.
#![no_main]
use autoballoon::libvirt::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let pairs: Vec<(u32, u64)> = data.chunks_exact(12).map(|c| (u32::from_le_bytes([c[0], c[1], c[2], c[3]]), u64::from_le_bytes([c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11]]))).collect();
    let _ = parse::mem_stats(&pairs);
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse::agent_socket_in_xml(text, "org.autoballoon.agent.0");
    let _ = parse::domain_accel_in_xml(text);
    let _ = parse::memballoon_in_xml(text);
});
