//! `--plot F.svg`: the series as an SVG line chart (size, target, anon, footprint per VM,
//! migrations shaded), in the spirit of the seed's Figure 3. No dependencies.

use crate::run::SeriesRow;
use std::fmt::Write as _;

const W: f64 = 960.0;
const H: f64 = 360.0;
const PAD: f64 = 50.0;

/// A line of the chart: its name, the quantity it draws, its colour.
type Line = (&'static str, fn(&SeriesRow) -> f64, &'static str);

/// The chart of `rows` (one or more VMs) titled `title`.
pub fn svg(rows: &[SeriesRow], title: &str) -> String {
    let t_max = rows.iter().map(|r| r.t_s).fold(1.0, f64::max);
    let g_max = rows
        .iter()
        .map(|r| r.size_gib.max(r.target_gib).max(r.footprint_gib))
        .fold(0.001, f64::max)
        * 1.05;
    let x = |t: f64| PAD + (W - 2.0 * PAD) * t / t_max;
    let y = |g: f64| H - PAD - (H - 2.0 * PAD) * g / g_max;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        o,
        r#"<rect width="{W}" height="{H}" fill="white"/><text x="{PAD}" y="20">{}</text>"#,
        escape(title)
    );
    let mut vms: Vec<&str> = rows.iter().map(|r| r.vm.as_str()).collect();
    vms.dedup();
    vms.sort_unstable();
    vms.dedup();
    // Migrations (of the first VM), shaded.
    let mut start: Option<f64> = None;
    for r in rows.iter().filter(|r| vms.first() == Some(&r.vm.as_str())) {
        match (r.migrating, start) {
            (true, None) => start = Some(r.t_s),
            (false, Some(s)) => {
                let _ = writeln!(
                    o,
                    r##"<rect x="{:.1}" y="{PAD}" width="{:.1}" height="{:.1}" fill="#eee"/>"##,
                    x(s),
                    (x(r.t_s) - x(s)).max(1.0),
                    H - 2.0 * PAD
                );
                start = None;
            }
            _ => {}
        }
    }
    // Axes and ticks.
    let _ = writeln!(
        o,
        r#"<line x1="{PAD}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/><line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{0}" stroke="black"/>"#,
        H - PAD,
        W - PAD
    );
    for i in 0..=4 {
        let g = g_max * f64::from(i) / 4.0;
        let t = t_max * f64::from(i) / 4.0;
        let _ = writeln!(
            o,
            r#"<text x="4" y="{:.1}">{g:.0} GiB</text><text x="{:.1}" y="{:.1}">{t:.0} s</text>"#,
            y(g) + 4.0,
            x(t) - 10.0,
            H - PAD + 16.0
        );
    }
    let lines: [Line; 4] = [
        ("size", |r| r.size_gib, "#1f77b4"),
        ("target", |r| r.target_gib, "#ff7f0e"),
        ("anon", |r| r.anon_gib, "#2ca02c"),
        ("host footprint", |r| r.footprint_gib, "#999999"),
    ];
    for (k, vm) in vms.iter().enumerate() {
        for (i, (name, f, color)) in lines.iter().enumerate() {
            let pts: Vec<String> = rows
                .iter()
                .filter(|r| r.vm == *vm)
                .map(|r| format!("{:.1},{:.1}", x(r.t_s), y(f(r))))
                .collect();
            let dash = if *name == "target" {
                r#" stroke-dasharray="4 3""#
            } else {
                ""
            };
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.2"{dash} points="{}"/>"#,
                pts.join(" ")
            );
            if k == 0 {
                let _ = writeln!(
                    o,
                    r#"<text x="{:.1}" y="38" fill="{color}">{name}</text>"#,
                    PAD + 110.0 * i as f64
                );
            }
        }
    }
    o.push_str("</svg>\n");
    o
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
