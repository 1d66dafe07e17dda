//! The configuration: the host daemon's TOML file, and the policy keys the host and the
//! guest agent share (core's PolicyConfig, validated as both do).
#![no_main]
use autoballoon::config::Config;
use autoballoon_core::config::PolicyConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(c) = Config::parse(text) {
        for vm in &c.vms {
            let p = c.policy_for(vm);
            let _ = p.validate("");
        }
        let _ = c.shares();
        // [[match]] globs against names from the same input, and discovered VMs' settings.
        for name in text.lines().take(8) {
            if let Some(vm) = autoballoon::config::vm_of_socket(std::path::Path::new("/d"), name) {
                let _ = c.policy_for(&c.discovered(vm));
            }
            for m in &c.matches {
                let _ = autoballoon::config::glob_match(&m.name, name);
            }
        }
    }
    // The glob alone: the input's first line is the pattern, the rest the names.
    let mut lines = text.lines();
    if let Some(pattern) = lines.next() {
        for name in lines.take(8) {
            let _ = autoballoon::config::glob_match(pattern, name);
        }
    }
    if let Ok(p) = toml::from_str::<PolicyConfig>(text) {
        if p.validate("").is_ok() {
            let _ = (p.rails(), p.policy());
        }
    }
});
