//! `autoballoon-guest estimate` on meminfo files captured from real guests.
use std::process::Command;

fn fixture(name: &str) -> String {
    format!("{}/../core/fixtures/{name}/meminfo", env!("CARGO_MANIFEST_DIR"))
}

fn estimate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon-guest")).arg("estimate").args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn json_has_the_documented_fields_and_follows_the_formula() {
    let m = fixture("linux-6.1-guest-spike");
    let (code, out, err) = estimate(&["--meminfo", &m, "--current-kb", "1048576", "--max-kb", "2097152", "--buffer-kb", "65536", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let g = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("missing {k}: {out}"));
    assert_eq!(g("current_kb"), 1048576);
    let expected = (1048576 + g("overcommitted_kb") + 65536).saturating_sub(g("available_kb")).clamp(4, 2097152);
    assert_eq!(g("target_kb"), expected);
    let (code, plain, _) = estimate(&["--meminfo", &m, "--current-kb", "1048576", "--max-kb", "2097152", "--buffer-kb", "65536"]);
    assert_eq!(code, 0);
    assert_eq!(plain.trim().parse::<u64>().unwrap(), expected);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let (code, _, err) = estimate(&["--meminfo", "/nonexistent", "--current-kb", "1", "--max-kb", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read /nonexistent"), "{err}");
    let junk = std::env::temp_dir().join(format!("ab-junk-{}", std::process::id()));
    std::fs::write(&junk, "MemTotal: lots\n").unwrap();
    let (code, _, err) = estimate(&["--meminfo", junk.to_str().unwrap(), "--current-kb", "1", "--max-kb", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("line 1"), "{err}");
}
