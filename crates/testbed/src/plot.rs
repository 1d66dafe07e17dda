//! A small SVG line chart of a VM's size, target and used memory over time, with marked
//! phases. Hand-written SVG: no fonts or system libraries needed.
//!
//! Span labels sit in a band above the plot, each joined to its span by a thin leader
//! line; a label that would run into another (or into another label's leader) goes one
//! row down. The layout is computed first ([`layout`]) so the tests can check that no two
//! texts overlap.

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
/// Height of the plot area itself (between its top and the x axis).
const PLOT_H: f64 = 330.0;
const L: f64 = 70.0;
const R: f64 = 20.0;
const B: f64 = 50.0;
/// Where the band of span labels starts (below the title).
const BAND_TOP: f64 = 32.0;
/// One row of span labels.
const ROW_H: f64 = 16.0;
/// Width of one character at 12 px sans-serif, on the generous side (DejaVu Sans averages
/// about 6.5 px), so estimated boxes are never narrower than the rendered text.
const CHAR_W: f64 = 7.2;
/// Free space kept between two labels in a row, and around a leader line.
const GAP: f64 = 8.0;
/// A label's text starts this far right of its leader line.
const LEADER_PAD: f64 = 5.0;

/// A text's (or a leader line's) box in SVG coordinates: top-left corner, width, height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextBox {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl TextBox {
    /// Whether the two boxes share any area (touching edges do not count).
    pub fn overlaps(&self, o: &TextBox) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }
}

/// One span's label: its box (text starts at `bx.x`, baseline 11 px below `bx.y`) and its
/// leader line from the label down to the top of the plot at `leader_x`.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanLabel {
    pub bx: TextBox,
    pub leader_x: f64,
    pub leader: TextBox,
}

/// Where everything goes; [`svg`] draws it.
#[derive(Debug, Clone)]
pub struct Layout {
    pub height: f64,
    /// Top of the plot area.
    pub top: f64,
    pub t_max: f64,
    pub title: TextBox,
    pub labels: Vec<SpanLabel>,
    /// One box per series: swatch and name.
    pub legend: Vec<TextBox>,
    /// The x axis' "seconds".
    pub x_title: TextBox,
}

impl Layout {
    fn x(&self, t: f64) -> f64 {
        L + (W - L - R) * t / self.t_max
    }

    /// Every text and leader line, named; none may overlap another (leaders of spans that
    /// start at the same moment coincide, which is fine).
    pub fn boxes(&self) -> Vec<(String, TextBox)> {
        let mut v = vec![("title".to_string(), self.title), ("x title".to_string(), self.x_title)];
        for (i, l) in self.labels.iter().enumerate() {
            v.push((format!("label {i}"), l.bx));
            v.push((format!("leader {i}"), l.leader));
        }
        v.extend(self.legend.iter().enumerate().map(|(i, b)| (format!("legend {i}"), *b)));
        v
    }
}

fn text_w(s: &str, char_w: f64) -> f64 {
    s.chars().count() as f64 * char_w
}

/// Lays out the chart: time axis, span label rows, legend.
pub fn layout(title: &str, series: &[Series], spans: &[Span]) -> Layout {
    let t_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(spans.iter().map(|s| s.to.max(s.from)))
        .fold(1.0f64, f64::max);
    let x = |t: f64| L + (W - L - R) * t / t_max;
    // Place labels in rows counted from the top of the band: row 0 is the highest. A
    // label's leader runs down from it through every lower row to the plot, so a label
    // must not cover the leader of a label above it, and its own leader must not cross a
    // label below it. Spans come in time order and labels start just right of their
    // leader, so a later label that would collide mostly just goes one row lower.
    let items: Vec<(f64, f64)> = spans.iter().map(|sp| (x(sp.from.max(0.0)).clamp(L, W - R - 1.0), text_w(sp.label, CHAR_W))).collect();
    // In time order first; if a label found no clear place, right to left (which suits
    // spans crowding the right edge, whose labels end at their leader), and keep the
    // layout with fewer collisions, then fewer rows.
    let forward = place(&items, 0..items.len());
    let placed = if forward.1 == 0 {
        forward.0
    } else {
        let backward = place(&items, (0..items.len()).rev());
        let rows = |p: &[Placed]| p.iter().map(|p| p.row).max().unwrap_or(0);
        if (backward.1, rows(&backward.0)) < (forward.1, rows(&forward.0)) { backward.0 } else { forward.0 }
    };
    let rows = placed.iter().map(|p| p.row + 1).max().unwrap_or(0);
    let top = BAND_TOP + rows as f64 * ROW_H + 6.0;
    let height = top + PLOT_H + B;
    let labels = placed
        .iter()
        .map(|p| {
            let y = BAND_TOP + p.row as f64 * ROW_H;
            let bx = TextBox { x: p.x0, y, w: p.x1 - p.x0, h: ROW_H - 2.0 };
            // The leader starts beside its text, or under it where the edge pushed it left.
            let beside = p.x0 >= p.leader_x || p.x1 <= p.leader_x;
            let from = if beside { y + bx.h / 2.0 } else { y + bx.h };
            let leader = TextBox { x: p.leader_x - 0.5, y: from, w: 1.0, h: top - from };
            SpanLabel { bx, leader_x: p.leader_x, leader }
        })
        .collect();
    let title_w = text_w(title, CHAR_W * 15.0 / 12.0);
    let title = TextBox { x: W / 2.0 - title_w / 2.0, y: 8.0, w: title_w, h: 19.0 };
    // The legend: one row under the axis' tick labels, from the left; "seconds" at the right.
    let row_y = height - 22.0;
    let mut lx = L;
    let legend = series
        .iter()
        .map(|s| {
            let b = TextBox { x: lx, y: row_y, w: 25.0 + text_w(s.name, CHAR_W), h: 14.0 };
            lx = b.x + b.w + 24.0;
            b
        })
        .collect();
    let xw = text_w("seconds", CHAR_W);
    let x_title = TextBox { x: W - R - xw, y: row_y, w: xw, h: 14.0 };
    Layout { height, top, t_max, title, labels, legend, x_title }
}

/// A span label's place: text from `x0` to `x1` in `row` (0 = the top of the band).
struct Placed {
    x0: f64,
    x1: f64,
    row: usize,
    leader_x: f64,
}

/// Places labels (leader x, text width), in span order, visiting them in `order`; returns
/// them and how many found no place clear of the others.
fn place(items: &[(f64, f64)], order: impl Iterator<Item = usize>) -> (Vec<Placed>, usize) {
    let mut placed: Vec<(usize, Placed)> = Vec::new();
    let mut collisions = 0;
    for i in order {
        let (leader_x, w) = items[i];
        // Where the text may start: just right of the leader, else ending just left of it,
        // else (a label wider than either side) ending at the right edge.
        let mut candidates: Vec<f64> = [leader_x + LEADER_PAD, leader_x - LEADER_PAD - w]
            .into_iter()
            .filter(|&x0| x0 >= L && x0 + w <= W - R)
            .collect();
        if candidates.is_empty() {
            candidates.push((W - R - w).max(L));
        }
        let fits = |row: usize, x0: f64| {
            let x1 = x0 + w;
            placed.iter().all(|(_, p)| {
                let same_row_clear = p.row != row || x1 + GAP <= p.x0 || p.x1 + GAP <= x0;
                // A leader runs from the middle of its label's row down to the plot.
                let their_leader_clear = p.row > row || leader_x_clear(p.leader_x, x0, x1);
                let my_leader_clear = p.row < row || leader_x_clear(leader_x, p.x0, p.x1);
                same_row_clear && their_leader_clear && my_leader_clear
            })
        };
        // Else a new row above all others (its leader must miss every label below), else a
        // new row below all others, colliding.
        let found = (0..=placed.len()).find_map(|r| candidates.iter().find(|&&x0| fits(r, x0)).map(|&x0| (r, x0)));
        let (row, x0) = match found {
            Some(f) => f,
            None if placed.iter().all(|(_, p)| leader_x_clear(leader_x, p.x0, p.x1)) => {
                placed.iter_mut().for_each(|(_, p)| p.row += 1);
                (0, candidates[0])
            }
            None => {
                collisions += 1;
                (placed.iter().map(|(_, p)| p.row + 1).max().unwrap_or(0), candidates[0])
            }
        };
        placed.push((i, Placed { x0, x1: x0 + w, row, leader_x }));
    }
    placed.sort_by_key(|(i, _)| *i);
    (placed.into_iter().map(|(_, p)| p).collect(), collisions)
}

/// Whether a leader line at `lx` keeps clear of the text from `x0` to `x1`.
fn leader_x_clear(lx: f64, x0: f64, x1: f64) -> bool {
    lx + GAP / 2.0 <= x0 || x1 + GAP / 2.0 <= lx
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Renders the chart. `y_max` is the top of the axis in MiB (the VM's configured size).
pub fn svg(title: &str, series: &[Series], spans: &[Span], y_max: f64) -> String {
    let lay = layout(title, series, spans);
    let (h, t) = (lay.height, lay.top);
    let y_max = y_max.max(1.0);
    let x = |v: f64| lay.x(v);
    let y = |v: f64| h - B - (h - t - B) * v.min(y_max) / y_max;
    let mut o = String::new();
    let _ = writeln!(o, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(o, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(o, r#"<text x="{}" y="{:.1}" font-size="15" text-anchor="middle">{}</text>"#, W / 2.0, lay.title.y + 15.0, esc(title));
    for (sp, lb) in spans.iter().zip(&lay.labels) {
        let (x0, x1) = (x(sp.from), x(sp.to.max(sp.from)));
        let _ = writeln!(o, r##"<rect x="{x0:.1}" y="{t}" width="{:.1}" height="{:.1}" fill="#f0e6c8" opacity="0.7"/>"##, (x1 - x0).max(1.5), h - t - B);
        let _ = writeln!(o, r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{t}" stroke="#b09050" stroke-width="1"/>"##, lb.leader_x, lb.leader.y);
        let _ = writeln!(o, r##"<text x="{:.1}" y="{:.1}" fill="#806020">{}</text>"##, lb.bx.x, lb.bx.y + 11.0, esc(sp.label));
    }
    // Axes with ticks.
    let _ = writeln!(o, r#"<line x1="{L}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, h - B, W - R, h - B);
    let _ = writeln!(o, r#"<line x1="{L}" y1="{t}" x2="{L}" y2="{}" stroke="black"/>"#, h - B);
    for i in 0..=4 {
        let v = y_max * i as f64 / 4.0;
        let _ = writeln!(o, r##"<line x1="{L}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4:.0}</text>"##, y(v), W - R, L - 6.0, y(v) + 4.0, v);
        let tv = lay.t_max * i as f64 / 4.0;
        let _ = writeln!(o, r#"<text x="{:.1}" y="{}" text-anchor="middle">{tv:.0}</text>"#, x(tv), h - B + 18.0);
    }
    let _ = writeln!(o, r#"<text x="{:.1}" y="{:.1}">seconds</text>"#, lay.x_title.x, lay.x_title.y + 11.0);
    let _ = writeln!(o, r#"<text x="16" y="{0}" transform="rotate(-90 16 {0})" text-anchor="middle">MiB</text>"#, (t + h - B) / 2.0);
    for (s, lb) in series.iter().zip(&lay.legend) {
        for run in s.points.split(|p| p.1.is_nan()).filter(|r| !r.is_empty()) {
            let pts: Vec<String> = run.iter().map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v))).collect();
            let _ = writeln!(o, r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#, s.color, pts.join(" "));
        }
        let _ = writeln!(o, r#"<line x1="{0}" y1="{1:.1}" x2="{2}" y2="{1:.1}" stroke="{3}" stroke-width="3"/><text x="{4}" y="{5:.1}">{6}</text>"#,
            lb.x, lb.y + 7.0, lb.x + 20.0, s.color, lb.x + 25.0, lb.y + 11.0, esc(s.name));
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

    fn assert_disjoint(lay: &Layout) {
        let b = lay.boxes();
        for (i, (na, a)) in b.iter().enumerate() {
            assert!(a.x >= 0.0 && a.x + a.w <= W && a.y >= 0.0 && a.y + a.h <= lay.height, "{na} {a:?} leaves the picture");
            for (nb, c) in &b[i + 1..] {
                // Leaders of spans that start together are one line; that is fine.
                let leaders = na.starts_with("leader ") && nb.starts_with("leader ");
                assert!(leaders || !a.overlaps(c), "{na} {a:?} overlaps {nb} {c:?}");
            }
        }
        for l in &lay.labels {
            assert!(l.leader.y + l.leader.h <= lay.top + 1e-9 && l.leader.h >= 0.0, "the leader ends at the plot's top");
            assert!(l.leader_x >= l.bx.x - LEADER_PAD - 1e-9 && l.leader_x <= l.bx.x + l.bx.w + LEADER_PAD + 1e-9, "the leader starts beside or under its label");
        }
    }

    fn series(t_max: f64) -> Vec<Series<'static>> {
        ["guest size", "target", "used", "source QEMU RSS"]
            .iter()
            .map(|n| Series { name: n, color: "black", points: vec![(0.0, 1.0), (t_max, 2.0)] })
            .collect()
    }

    #[test]
    fn labels_of_close_spans_do_not_overlap() {
        // The demo's spans: a spike, then three migrations a few seconds to half a minute apart.
        let spans = [
            Span { from: 40.0, to: 55.0, label: "spike: 3 threads x 400 MiB" },
            Span { from: 95.0, to: 110.0, label: "migration without autoballoon" },
            Span { from: 135.0, to: 136.0, label: "migration with autoballoon" },
            Span { from: 190.0, to: 191.0, label: "migration with free page reporting (its own guest)" },
        ];
        let lay = layout("autoballoon demo: guest size, target and used memory", &series(195.0), &spans);
        assert_disjoint(&lay);
        assert!(lay.labels.iter().any(|l| l.bx.y != lay.labels[0].bx.y), "some labels were staggered");
        // A demo run whose last span sat at the right edge, under the label before it.
        let edge = [
            Span { from: 6.0, to: 21.0, label: "spike: 3 threads x 400 MiB" },
            Span { from: 40.0, to: 55.0, label: "migration without autoballoon" },
            Span { from: 64.0, to: 65.0, label: "migration with autoballoon" },
            Span { from: 82.5, to: 84.0, label: "migration with free page reporting" },
        ];
        assert_disjoint(&layout("autoballoon demo: guest size, target, used memory and host RSS", &series(84.0), &edge));
        // Identical spans, spans at both edges and past the end of the data.
        let same: Vec<Span> = (0..5).map(|i| Span { from: 10.0, to: 11.0, label: ["a", "bb", "a long label", "x", "yy"][i] }).collect();
        assert_disjoint(&layout("t", &series(20.0), &same));
        let edges = [
            Span { from: 0.0, to: 1.0, label: "at the start of the chart" },
            Span { from: 19.5, to: 20.0, label: "right at the end of the chart" },
            Span { from: 19.9, to: 25.0, label: "past the end" },
        ];
        assert_disjoint(&layout("t", &series(20.0), &edges));
        assert_disjoint(&layout("t", &series(20.0), &[]));
    }

    #[test]
    fn svg_uses_the_layout() {
        let spans = [Span { from: 1.0, to: 2.0, label: "one" }, Span { from: 1.1, to: 2.0, label: "two" }];
        let lay = layout("t", &series(10.0), &spans);
        let s = svg("t", &series(10.0), &spans, 4.0);
        assert!(s.contains(&format!(r#"height="{}""#, lay.height)));
        for l in &lay.labels {
            assert!(s.contains(&format!(r#"<text x="{:.1}" y="{:.1}""#, l.bx.x, l.bx.y + 11.0)), "label drawn where laid out");
        }
    }
}
