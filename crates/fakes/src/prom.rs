//! Real Prometheus parsers for the metrics endpoint's text: `promtool check metrics`
//! (Debian's `prometheus`) and the Python client's parser (`python3-prometheus-client`,
//! installed by scripts/install-deps.sh). Used by crates/host/tests/metrics.rs (a scrape
//! of VMs without QEMU) and by the test bed's host tests (a scrape of real guests).

use std::io::Write;
use std::process::{Command, Stdio};

fn pipe(program: &str, args: &[&str], text: &str) -> Result<(bool, String, String), String> {
    let mut child = Command::new(program).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("{program}: {e}"))?;
    child.stdin.take().ok_or("no stdin")?.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    Ok((out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

/// `promtool check metrics` on the text: `Ok(None)` if promtool is not installed.
pub fn promtool_check(text: &str) -> Result<Option<String>, String> {
    if Command::new("promtool").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return Ok(None);
    }
    let (ok, out, err) = pipe("promtool", &["check", "metrics"], text)?;
    if ok { Ok(Some(format!("{out}{err}"))) } else { Err(format!("promtool check metrics refused the text:\n{out}{err}")) }
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    out[f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
"#;

/// The Python client's parse of the text: `{family: {type, samples: [[name, labels, value]]}}`.
pub fn python_parse(text: &str) -> Result<serde_json::Value, String> {
    // Debian's python3 (a pyenv one on PATH lacks the Debian package).
    let (ok, out, err) = pipe("/usr/bin/python3", &["-c", PARSE], text)?;
    if !ok {
        return Err(format!("the Python parser refused the text: {err}"));
    }
    serde_json::from_str(&out).map_err(|e| e.to_string())
}
