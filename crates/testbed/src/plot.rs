//! A small SVG line chart of a VM's size, target and used memory over time, with marked
//! phases. Hand-written SVG: no fonts or system libraries needed.

use std::fmt::Write;

pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    /// (seconds, MiB) points in time order; a NaN value breaks the line (no data there).
    pub points: Vec<(f64, f64)>,
}

/// A shaded time span with a label (a spike, a migration).
pub struct Span<'a> {
    pub from: f64,
    pub to: f64,
    pub label: &'a str,
}

const W: f64 = 900.0;
const H: f64 = 420.0;
const L: f64 = 70.0;
const R: f64 = 20.0;
const T: f64 = 40.0;
const B: f64 = 50.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Renders the chart. `y_max` is the top of the axis in MiB (the VM's configured size).
pub fn svg(title: &str, series: &[Series], spans: &[Span], y_max: f64) -> String {
    let t_max = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0f64, f64::max);
    let y_max = y_max.max(1.0);
    let x = |t: f64| L + (W - L - R) * t / t_max;
    let y = |v: f64| H - B - (H - T - B) * v.min(y_max) / y_max;
    let mut o = String::new();
    let _ = writeln!(o, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(o, r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#, W / 2.0, esc(title));
    for sp in spans {
        let (x0, x1) = (x(sp.from), x(sp.to.max(sp.from)));
        let _ = writeln!(o, r##"<rect x="{x0:.1}" y="{T}" width="{:.1}" height="{:.1}" fill="#f0e6c8" opacity="0.7"/>"##, (x1 - x0).max(1.5), H - T - B);
        // Labels of spans near the right edge end at the span's end, so they stay inside.
        let (lx, anchor) = if x0 > W * 0.6 { (x1.max(x0 + 1.5), "end") } else { (x0, "start") };
        let _ = writeln!(o, r##"<text x="{lx:.1}" y="{:.1}" fill="#806020" text-anchor="{anchor}">{}</text>"##, T + 12.0, esc(sp.label));
    }
    // Axes with ticks.
    let _ = writeln!(o, r#"<line x1="{L}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, H - B, W - R, H - B);
    let _ = writeln!(o, r#"<line x1="{L}" y1="{T}" x2="{L}" y2="{}" stroke="black"/>"#, H - B);
    for i in 0..=4 {
        let v = y_max * i as f64 / 4.0;
        let _ = writeln!(o, r##"<line x1="{L}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4:.0}</text>"##, y(v), W - R, L - 6.0, y(v) + 4.0, v);
        let tv = t_max * i as f64 / 4.0;
        let _ = writeln!(o, r#"<text x="{:.1}" y="{}" text-anchor="middle">{tv:.0}</text>"#, x(tv), H - B + 18.0);
    }
    let _ = writeln!(o, r#"<text x="{}" y="{}" text-anchor="middle">seconds</text>"#, (L + W - R) / 2.0, H - 10.0);
    let _ = writeln!(o, r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">MiB</text>"#, (T + H - B) / 2.0, (T + H - B) / 2.0);
    for (i, s) in series.iter().enumerate() {
        if s.points.is_empty() {
            continue;
        }
        for run in s.points.split(|p| p.1.is_nan()).filter(|r| !r.is_empty()) {
            let pts: Vec<String> = run.iter().map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v))).collect();
            let _ = writeln!(o, r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#, s.color, pts.join(" "));
        }
        let lx = L + 10.0 + 150.0 * i as f64;
        let _ = writeln!(o, r#"<line x1="{lx}" y1="{0}" x2="{1}" y2="{0}" stroke="{2}" stroke-width="3"/><text x="{3}" y="{4}">{5}</text>"#, H - B + 34.0, lx + 20.0, s.color, lx + 25.0, H - B + 38.0, esc(s.name));
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_series_spans_and_escapes() {
        let s = svg("a <b>", &[Series { name: "size", color: "#1f77b4", points: vec![(0.0, 2048.0), (10.0, 300.0)] }], &[Span { from: 2.0, to: 4.0, label: "spike" }], 2048.0);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("a &lt;b&gt;"));
        assert!(s.contains("<polyline") && s.contains(">spike<") && s.contains(">size<"));
        let gap = svg("t", &[Series { name: "target", color: "red", points: vec![(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0), (3.0, 3.0)] }], &[], 10.0);
        assert_eq!(gap.matches("<polyline").count(), 2, "a NaN splits the line");
    }
}
