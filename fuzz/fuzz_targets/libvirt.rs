//! virsh's output (dominfo, dommemstat, domjobinfo, domstate, list --name, dumpxml, and QMP through
//! qemu-monitor-command).
#![no_main]
use autoballoon::libvirt::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse::parse_dominfo(text);
    let _ = parse::parse_dommemstat(text);
    if let Ok(j) = parse::parse_domjobinfo(text) {
        let _ = (j.is_migration(), j.is_running());
    }
    let _ = parse::parse_domstate(text);
    let _ = parse::parse_domain_names(text);
    let _ = parse::agent_socket_in_xml(text, "org.autoballoon.agent.0");
    let _ = parse::parse_query_version(text);
    let _ = parse::parse_query_kvm(text);
});
