//! The one forest plot: rows of a point estimate with horizontal intervals, against a dashed line
//! at zero, with optional vertical reference lines (a rule's threshold) and short ticks on a row
//! (a rule's computed bound). An inline SVG; no script, no library.
//!
//! What the rows are is the caller's choice: the one-page report draws one row per compared arm
//! (its BCa and percentile intervals), the site one row per task and a summary row with the
//! gate's interval. The geometry, the scale and the escaping are decided here, once.

use super::{esc, num};
use std::fmt::Write as _;

/// A plot.
pub struct Plot {
    /// The SVG element's id (escaped here).
    pub id: String,
    /// Its accessible label (plain text).
    pub label: String,
    /// Its tooltip title (plain text).
    pub title: String,
    /// Pixels per row: roomy for a few arms, compact for one row per task.
    pub row_height: f64,
    /// The rows, top to bottom.
    pub rows: Vec<Row>,
    /// Vertical reference lines across every row (a rule's threshold).
    pub rules: Vec<Mark>,
}

/// One row: a label at the left, then its spans, its point, its ticks (drawn in that order).
pub struct Row {
    /// The text at the left (plain text).
    pub label: String,
    /// Whether the label is bold (a summary row).
    pub bold: bool,
    /// Leave an empty row above this one (the summary row after the task rows).
    pub gap_before: bool,
    /// Horizontal lines under the point (intervals, or a guide from zero).
    pub spans: Vec<Span>,
    /// The estimate.
    pub point: Point,
    /// Short vertical ticks on this row (a rule's computed bound).
    pub ticks: Vec<Mark>,
}

/// A horizontal line from `from` to `to` on its row.
pub struct Span {
    /// The element's class (what tests and readers select), if any.
    pub class: Option<&'static str>,
    /// Where it starts, in the plot's units.
    pub from: f64,
    /// Where it ends.
    pub to: f64,
    /// Its stroke colour.
    pub colour: &'static str,
    /// Its stroke width in pixels.
    pub width: u32,
    /// Its tooltip (plain text), if any.
    pub title: Option<String>,
}

/// How a point is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A square of this side (an estimate).
    Square(u32),
    /// A dot of this radius (one task's value).
    Dot(u32),
}

/// The row's point estimate.
pub struct Point {
    /// The element's class.
    pub class: &'static str,
    /// Its value.
    pub at: f64,
    /// How it is drawn.
    pub shape: Shape,
    /// Its fill colour.
    pub colour: &'static str,
    /// Its tooltip (plain text).
    pub title: String,
}

/// A vertical mark at `at`: across the plot in [`Plot::rules`], a short tick in [`Row::ticks`].
pub struct Mark {
    /// The element's class.
    pub class: &'static str,
    /// Its value (a non-finite value is not drawn).
    pub at: f64,
    /// Its stroke colour.
    pub colour: &'static str,
    /// Its tooltip (plain text).
    pub title: String,
}

const WIDTH: f64 = 760.0;
const LEFT: f64 = 210.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 26.0;

/// The horizontal scale: every finite value shown, and zero, with a margin.
struct Scale {
    lo: f64,
    hi: f64,
}

impl Scale {
    fn of(plot: &Plot) -> Scale {
        let mut lo: f64 = 0.0;
        let mut hi: f64 = 0.0;
        let values = plot.rows.iter().flat_map(|r| {
            r.spans
                .iter()
                .flat_map(|s| [s.from, s.to])
                .chain([r.point.at])
                .chain(r.ticks.iter().map(|t| t.at))
        });
        for v in values
            .chain(plot.rules.iter().map(|m| m.at))
            .filter(|v| v.is_finite())
        {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if hi - lo < 1e-12 {
            lo -= 1.0;
            hi += 1.0;
        }
        let pad = (hi - lo) * 0.06;
        Scale {
            lo: lo - pad,
            hi: hi + pad,
        }
    }

    fn x(&self, v: f64) -> f64 {
        LEFT + (v.clamp(self.lo, self.hi) - self.lo) / (self.hi - self.lo) * (WIDTH - LEFT - RIGHT)
    }
}

/// Appends the plot's SVG to `o`.
pub fn draw(o: &mut String, plot: &Plot) {
    let slots = plot.rows.len() + plot.rows.iter().filter(|r| r.gap_before).count();
    let h = TOP + plot.row_height * slots.max(1) as f64 + 34.0;
    let s = Scale::of(plot);
    let _ = writeln!(
        o,
        "<svg class=\"forest\" id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h:.0}\" viewBox=\"0 0 {WIDTH} {h:.0}\" role=\"img\" aria-label=\"{}\">",
        esc(&plot.id),
        esc(&plot.label)
    );
    let _ = writeln!(o, "<title>{}</title>", esc(&plot.title));
    let bottom = h - 30.0;
    let _ = writeln!(
        o,
        "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{bottom:.1}\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>",
        s.x(0.0),
        TOP - 10.0
    );
    for m in plot.rules.iter().filter(|m| m.at.is_finite()) {
        let _ = writeln!(
            o,
            "<line class=\"{0}\" x1=\"{2:.1}\" y1=\"{3}\" x2=\"{2:.1}\" y2=\"{bottom:.1}\" stroke=\"{1}\" stroke-dasharray=\"2 2\"><title>{4}</title></line>",
            m.class,
            m.colour,
            s.x(m.at),
            TOP - 10.0,
            esc(&m.title)
        );
    }
    let mut slot = 0;
    for r in &plot.rows {
        if r.gap_before {
            slot += 1;
        }
        let y = TOP + plot.row_height * slot as f64 + plot.row_height / 2.0;
        row(o, &s, r, y);
        slot += 1;
    }
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">0</text></svg>",
        s.x(s.lo),
        h - 10.0,
        num(s.lo),
        s.x(s.hi),
        h - 10.0,
        num(s.hi),
        s.x(0.0),
        h - 10.0
    );
}

fn row(o: &mut String, s: &Scale, r: &Row, y: f64) {
    let _ = write!(
        o,
        "<text x=\"8\" y=\"{:.1}\" font-size=\"12\"{}>{}</text>",
        y + 4.0,
        if r.bold { " font-weight=\"bold\"" } else { "" },
        esc(&r.label)
    );
    for sp in &r.spans {
        let class = sp
            .class
            .map(|c| format!(" class=\"{c}\""))
            .unwrap_or_default();
        let _ = write!(
            o,
            "<line{class} x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"{}\"",
            s.x(sp.from),
            s.x(sp.to),
            sp.colour,
            sp.width
        );
        match &sp.title {
            Some(t) => {
                let _ = write!(o, "><title>{}</title></line>", esc(t));
            }
            None => o.push_str("/>"),
        }
    }
    let p = &r.point;
    match p.shape {
        Shape::Square(side) => {
            let half = f64::from(side) / 2.0;
            let _ = write!(
                o,
                "<rect class=\"{}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{side}\" height=\"{side}\" fill=\"{}\"><title>{}</title></rect>",
                p.class,
                s.x(p.at) - half,
                y - half,
                p.colour,
                esc(&p.title)
            );
        }
        Shape::Dot(radius) => {
            let _ = write!(
                o,
                "<circle class=\"{}\" cx=\"{:.1}\" cy=\"{y:.1}\" r=\"{radius}\" fill=\"{}\"><title>{}</title></circle>",
                p.class,
                s.x(p.at),
                p.colour,
                esc(&p.title)
            );
        }
    }
    for t in r.ticks.iter().filter(|t| t.at.is_finite()) {
        let _ = write!(
            o,
            "<line class=\"{0}\" x1=\"{1:.1}\" y1=\"{2:.1}\" x2=\"{1:.1}\" y2=\"{3:.1}\" stroke=\"{4}\" stroke-width=\"2\"><title>{5}</title></line>",
            t.class,
            s.x(t.at),
            y - 9.0,
            y + 9.0,
            t.colour,
            esc(&t.title)
        );
    }
    o.push('\n');
}
