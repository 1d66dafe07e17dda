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
    let expected = (1048576 + g("overcommitted_kb") + g("swapped_kb") + 65536).saturating_sub(g("available_kb")).clamp(4, 2097152);
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

fn agent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon-guest")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A proc tree (meminfo, vmstat, pressure/memory from a captured guest) and a kernel
/// interface of the same 1 GiB guest, under a fresh temporary directory.
fn tree(name: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("ab-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("proc/pressure")).unwrap();
    std::fs::create_dir_all(root.join("kernel")).unwrap();
    let src = format!("{}/../core/fixtures/linux-6.12-guest-idle", env!("CARGO_MANIFEST_DIR"));
    for (to, from) in [("meminfo", "meminfo"), ("vmstat", "vmstat"), ("pressure/memory", "pressure-memory")] {
        std::fs::copy(format!("{src}/{from}"), root.join("proc").join(to)).unwrap();
    }
    std::fs::write(root.join("kernel/max_pages"), "262144\n").unwrap();
    std::fs::write(root.join("kernel/current_pages"), "262144\n").unwrap();
    root
}

#[test]
fn a_bad_policy_value_exits_2_naming_the_key() {
    for (flag, value, key) in [("--min-mib", "0", "min_mib"), ("--align-mib", "0", "align_mib"), ("--buffer-kb", "18446744073709551615", "buffer_mib")] {
        let (code, _, err) = agent(&["run", "--backend", "kernel", "--unprivileged", "--kernel-dir", "/nonexistent", flag, value]);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(&format!("`{key}`")), "{flag} {value}: {err}");
    }
    let (code, _, err) = agent(&["run", "--backend", "kernel", "--unprivileged", "--interval-ms", "5"]);
    assert_eq!(code, 2);
    assert!(err.contains("--interval-ms"), "{err}");
    let (code, _, err) = agent(&["run", "--backend", "kernel", "--buffer-kb", "1024", "--buffer-mib", "1"]);
    assert_eq!(code, 2, "one key, one value: {err}");
    let (code, _, _) = agent(&["run", "--backend", "kernel", "--min-mib", "lots"]);
    assert_eq!(code, 2);
}

#[test]
fn the_kernel_backend_sets_used_plus_buffer_with_the_shared_defaults() {
    let root = tree("kernel");
    let (p, k) = (root.join("proc"), root.join("kernel"));
    let (code, _, err) = agent(&["run", "--backend", "kernel", "--unprivileged", "--proc-dir", p.to_str().unwrap(), "--kernel-dir", k.to_str().unwrap(), "--samples", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("buffer 64 MiB") && err.contains("min 128 MiB") && err.contains("dead band 16 MiB"), "the host's defaults: {err}");
    // 1 GiB − MemAvailable 887420 KiB + overcommitted 844 KiB (Committed_AS 6320 − AnonPages
    // 164 − Shmem 5312) + buffer 64 MiB, up to whole MiB: 223 MiB, written with the balloon
    // (1024 MiB less the target) in whole 2 MiB units: 224 MiB.
    let pages = || std::fs::read_to_string(k.join("target_pages")).unwrap().trim().parse::<u64>().unwrap();
    assert_eq!(pages(), 224 * 256, "{err}");
    assert!(err.contains("target 1024.0 MiB -> 223.0 MiB: size 1024.0 MiB - available 866.6 MiB + overcommitted 0.8 MiB + buffer 64.0 MiB"), "one line per action with its reason: {err}");
    // The old behaviour, asked for explicitly: no buffer, a one-page minimum.
    let (code, _, err) = agent(&["run", "--backend", "kernel", "--unprivileged", "--proc-dir", p.to_str().unwrap(), "--kernel-dir", k.to_str().unwrap(), "--samples", "1",
                                 "--buffer-kb", "0", "--min-mib", "1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(pages(), 160 * 256, "159 MiB, the balloon in whole units: {err}");
    let _ = std::fs::remove_dir_all(root);
}

#[test]
fn the_host_backend_reports_samples_with_pressure() {
    let root = tree("host");
    let port = root.join("port");
    std::fs::write(&port, "").unwrap();
    let p = root.join("proc");
    let (code, _, err) = agent(&["run", "--backend", "host", "--unprivileged", "--proc-dir", p.to_str().unwrap(), "--port", port.to_str().unwrap(), "--samples", "2", "--interval-ms", "10"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&port).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "hello and two samples: {lines:?}");
    assert_eq!((lines[0]["type"].as_str(), lines[0]["backend"].as_str()), (Some("hello"), Some("host")));
    for (i, s) in lines[1..].iter().enumerate() {
        assert_eq!((s["type"].as_str(), s["seq"].as_u64()), (Some("sample"), Some(i as u64 + 1)));
        assert!(s["pressure"]["some"]["avg10"].is_number() && s["mem"]["available"].is_number() && s["oom_kills"].is_number(), "{s}");
        assert!(s.get("target").is_none(), "the host decides: {s}");
    }
    // Without PSI the field is left out, and nothing is logged about it.
    std::fs::remove_file(p.join("pressure/memory")).unwrap();
    std::fs::write(&port, "").unwrap();
    let (code, _, err) = agent(&["run", "--backend", "host", "--unprivileged", "--proc-dir", p.to_str().unwrap(), "--port", port.to_str().unwrap(), "--samples", "1", "--min-mib", "256"]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&port).unwrap();
    let sample: serde_json::Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    assert!(sample.get("pressure").is_none() && !err.contains("pressure"), "{sample} {err}");
    assert!(err.contains("policy flags do nothing with --backend host"), "{err}");
    let _ = std::fs::remove_dir_all(root);
}

#[test]
fn a_runtime_failure_exits_1_and_help_says_so() {
    let (code, _, err) = agent(&["run", "--backend", "host", "--unprivileged", "--port", "/nonexistent/port"]);
    assert_eq!(code, 1, "cannot open the port: a runtime failure: {err}");
    assert!(err.contains("cannot open port /nonexistent/port"), "{err}");
    let (code, _, err) = agent(&["run", "--backend", "host", "--unprivileged"]);
    assert_eq!(code, 2, "no --port: a usage error: {err}");
    let (code, out, _) = agent(&["run", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Exit status: 0 success") && out.contains("1 a runtime failure") && out.contains("2 a usage error"), "{out}");
    assert!(out.contains("--log-level <LEVEL>") && out.contains("--no-overcommit"), "{out}");
}
