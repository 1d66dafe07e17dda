//! The Grafana dashboard (packaging/grafana/autoballoon-dashboard.json) queries only what
//! this module renders: every metric name in its PromQL expressions and its variables'
//! queries is a series [`render`] emits for a VM and a host with every figure known.

use super::tests::full_host;
use super::*;
use autoballoon_core::Kib;
use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../../../../packaging/grafana/autoballoon-dashboard.json");

/// PromQL words that are not metric names when they stand alone.
const KEYWORDS: [&str; 8] = ["and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"];
/// Aggregation operators: their `by (...)` or `without (...)` may come before their
/// parenthesised argument.
const AGGREGATIONS: [&str; 14] = ["sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"];
/// Words followed by a parenthesised list of label names, not of expressions.
const GROUPING: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names a PromQL expression selects: identifiers that are not functions,
/// keywords or label names (inside `{}`, after `by`/`without`/`on`/`ignoring`/
/// `group_left`/`group_right`), with strings, ranges (`[5m]`), numbers, durations and
/// Grafana's variables (`$vm`, `${vm}`, `$__rate_interval`) skipped. Grafana's
/// `label_values(METRIC, LABEL)` gives METRIC; `label_values(LABEL)` none.
fn metric_names(expr: &str) -> Result<Vec<String>, String> {
    let expr = expr.trim();
    if let Some(args) = expr.strip_prefix("label_values(").and_then(|a| a.strip_suffix(')')) {
        return match args.split_once(',') {
            Some((m, _)) => metric_names(m),
            None => Ok(Vec::new()),
        };
    }
    let c: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    // Skips from an opening bracket at `i` to just past its match (strings inside kept whole).
    let skip_group = |mut i: usize, open: char, close: char| -> Result<usize, String> {
        let mut depth = 0;
        while i < c.len() {
            match c[i] {
                q @ ('"' | '\'' | '`') => {
                    i += 1;
                    while i < c.len() && c[i] != q {
                        i += if c[i] == '\\' { 2 } else { 1 };
                    }
                }
                x if x == open => depth += 1,
                x if x == close => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(i + 1);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        Err(format!("unbalanced {open}{close} in {expr:?}"))
    };
    let next_non_space = |mut j: usize| {
        while j < c.len() && c[j].is_whitespace() {
            j += 1;
        }
        j
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '{' {
            i = skip_group(i, '{', '}')?;
        } else if ch == '[' {
            i = skip_group(i, '[', ']')?;
        } else if matches!(ch, '"' | '\'' | '`') {
            i += 1;
            while i < c.len() && c[i] != ch {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ch == '$' {
            // A Grafana variable: `$name` or `${name...}`.
            i += 1;
            if c.get(i) == Some(&'{') {
                i = skip_group(i, '{', '}')?;
            } else {
                while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() || (ch == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            // A number or a duration (`5m`, `1e3`, `0x1f`).
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '.') {
                i += 1;
            }
        } else if ch.is_ascii_alphabetic() || ch == '_' || ch == ':' {
            let start = i;
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_' || c[i] == ':') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let after = next_non_space(i);
            let call = c.get(after) == Some(&'(');
            if GROUPING.contains(&word.as_str()) {
                if call {
                    i = skip_group(after, '(', ')')?;
                }
            } else if !call && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) && !AGGREGATIONS.contains(&word.as_str()) {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    Ok(names)
}

/// Every string under a key named `expr` (panel targets), and every query variable's query.
fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) if m.get("type").and_then(|t| t.as_str()) == Some("query") => out.push(s.clone()),
                    ("query", serde_json::Value::Object(q)) => {
                        if let Some(s) = q.get("query").and_then(|s| s.as_str()) {
                            out.push(s.to_string());
                        }
                    }
                    _ => queries(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
        _ => {}
    }
}

/// The series names rendered for a VM and a host with every value known.
fn emitted() -> BTreeSet<String> {
    let mut a = VmStatus { name: "a".into(), state: VmState::Running, samples: 1, ..Default::default() };
    a.configured = Kib(4 << 20);
    a.size = Kib(1 << 20);
    a.target = Some(a.size);
    a.used = Some(Kib(512 << 10));
    a.class = Some("normal");
    a.guest_oom_kills = Some(0);
    a.agent.hello = Some("0.1.0 (host)".into());
    let text = render(&[a], &full_host());
    text.lines().filter(|l| !l.starts_with('#')).map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string()).collect()
}

#[test]
fn the_extractor_finds_metric_names_only() {
    let n = |e: &str| metric_names(e).unwrap();
    assert_eq!(n("sum by (vm) (rate(autoballoon_vm_actions_total{vm=~\"$vm\", direction=\"grow\"}[$__rate_interval]))"), ["autoballoon_vm_actions_total"]);
    assert_eq!(
        n("histogram_quantile(0.99, sum by (le) (rate(autoballoon_vm_grow_reaction_seconds_bucket{vm=~\"${vm:regex}\"}[5m])))"),
        ["autoballoon_vm_grow_reaction_seconds_bucket"]
    );
    assert_eq!(n("a / on(vm) group_left(state) b offset 1h > bool 0.5e3 and c unless d"), ["a", "b", "c", "d"]);
    assert_eq!(n("sum(x) without (vm) or vector(0)"), ["x"]);
    assert_eq!(n("count without (vm) (y) / topk by (vm) (3, z)"), ["y", "z"]);
    assert_eq!(n("label_values(autoballoon_vm_state, vm)"), ["autoballoon_vm_state"]);
    assert!(n("label_values(vm)").is_empty());
    assert_eq!(n("up{job='a}b'} * 100"), ["up"]);
    assert!(metric_names("sum(x{a=\"b\"").is_err());
}

#[test]
fn every_query_of_the_dashboard_names_only_metrics_the_daemon_exports() {
    let board: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let mut qs = Vec::new();
    queries(&board, &mut qs);
    assert!(qs.len() >= 10, "expected the dashboard's queries, found {qs:?}");
    let emitted = emitted();
    let mut used = BTreeSet::new();
    for q in &qs {
        let names = metric_names(q).unwrap_or_else(|e| panic!("{e}"));
        assert!(!names.is_empty(), "a query with no metric: {q}");
        for name in names {
            assert!(emitted.contains(&name), "the dashboard queries {name}, which the daemon does not export ({q})");
            used.insert(name);
        }
    }
    // The host's figures and the reaction times have panels.
    for name in ["autoballoon_host_shortfall_bytes", "autoballoon_host_memory_pressure_avg10_ratio", "autoballoon_vm_grow_reaction_seconds_bucket", "autoballoon_vm_grow_settle_seconds_bucket"] {
        assert!(used.contains(name), "no panel shows {name}");
    }
}

#[test]
fn the_dashboard_is_importable_grafana_json() {
    let board: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
    assert_eq!(board["uid"], "autoballoon");
    assert!(board["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let panels = board["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().expect("every panel has an id")), "panel ids are unique");
        assert!(p["gridPos"]["w"].as_u64().is_some_and(|w| (1..=24).contains(&w)), "{}", p["title"]);
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}: every panel reads the chosen Prometheus", p["title"]);
            assert!(p["targets"].as_array().is_some_and(|t| !t.is_empty()), "{}", p["title"]);
        }
    }
    let vars = board["templating"]["list"].as_array().unwrap();
    assert!(vars.iter().any(|v| v["name"] == "datasource" && v["type"] == "datasource" && v["query"] == "prometheus"));
    assert!(vars.iter().any(|v| v["name"] == "vm" && v["type"] == "query"));
}
