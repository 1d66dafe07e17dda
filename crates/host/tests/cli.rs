//! The `autoballoon` binary's behaviour on bad input: clear errors naming the key, exit 2.
use std::process::Command;

fn autoballoon(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn invalid_config_names_the_key() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let p = dir.join("bad.toml");
    std::fs::write(&p, "[defaults]\nmin_mib = 0\n[[vm]]\nname = 'a'\nqmp = '/nonexistent'\n").unwrap();
    let (code, err) = autoballoon(&["host", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("defaults.min_mib"), "{err}");
    std::fs::write(&p, "[controler]\n").unwrap();
    let (code, err) = autoballoon(&["host", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("controler"), "{err}");
    let (code, err) = autoballoon(&["host", "--config", "/nonexistent.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read /nonexistent.toml"), "{err}");
    let (code, err) = autoballoon(&["host"]);
    assert_eq!(code, 2);
    assert!(err.contains("--vm"), "{err}");
    let (code, err) = autoballoon(&["host", "--vm", "novalue"]);
    assert_eq!(code, 2);
    assert!(err.contains("NAME=QMP_SOCKET"), "{err}");
}

#[test]
fn example_config_is_accepted_by_the_binary_parser() {
    // The docs' example parses (the controller would then start; we only check parsing here).
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/example-host.toml")).unwrap();
    assert!(autoballoon::config::Config::parse(&text).is_ok());
}
