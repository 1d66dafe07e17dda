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
    }
    if let Ok(p) = toml::from_str::<PolicyConfig>(text) {
        if p.validate("").is_ok() {
            let _ = (p.rails(), p.policy());
        }
    }
});
