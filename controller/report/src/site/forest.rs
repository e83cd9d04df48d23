//! The site's forest plot: one row per task (its paired difference, candidate − baseline, the
//! repetitions averaged — the numbers the report's `PairedSummary.tasks` holds), then the mean
//! difference with the interval of the gate that reads it, and each such rule's threshold. An
//! SVG written here; no script, no library.

use super::html::{esc, num};
use eval_evidence::gates::{GateResult, Statistic};
use eval_evidence::report::build::{Comparison, SuiteReport};
use std::fmt::Write as _;

/// An interval rule of a gate on this comparison: what the plot marks.
struct GateMark {
    label: String,
    /// The rule's bound as computed (its value).
    value: Option<f64>,
    threshold: Option<f64>,
    passed: bool,
}

/// The interval the gate's method reads, from the summary the report computed: BCa for `bca`
/// (percentile when BCa is undefined), percentile otherwise (v0.4's percentile method draws its
/// own resamples; its bound is the rule's value, marked separately).
fn interval_for(c: &Comparison, method: Option<&str>) -> Option<([f64; 2], String)> {
    let p = c.summary.as_ref()?;
    let level = num(p.ci.level * 100.0);
    Some(match (method, p.ci.bca) {
        (Some("bca") | None, Some(b)) => (b, format!("{level}% BCa interval")),
        _ => (p.ci.percentile, format!("{level}% percentile interval")),
    })
}

fn marks(gates: &[GateResult], suite: &SuiteReport, c: &Comparison) -> Vec<GateMark> {
    if !c.gated {
        return Vec::new();
    }
    let mut out = Vec::new();
    for g in gates
        .iter()
        .filter(|g| g.suite.as_deref() == Some(&suite.id))
    {
        for r in &g.rules {
            let interval = matches!(
                r.statistic,
                Statistic::BootstrapLower | Statistic::BootstrapUpper
            );
            if interval && r.metric.as_deref().is_none_or(|m| m == suite.metric) {
                out.push(GateMark {
                    label: format!("gate {} rule {}", g.id, r.id),
                    value: r.value,
                    threshold: r.threshold,
                    passed: r.verdict == eval_evidence::gates::Verdict::Pass,
                });
            }
        }
    }
    out
}

/// The gate method of the comparison's first interval rule (the one the summary row draws).
fn gate_method(gates: &[GateResult], suite: &SuiteReport) -> Option<String> {
    gates
        .iter()
        .filter(|g| g.suite.as_deref() == Some(&suite.id))
        .flat_map(|g| &g.rules)
        .find(|r| {
            matches!(
                r.statistic,
                Statistic::BootstrapLower | Statistic::BootstrapUpper
            )
        })
        .and_then(|r| r.method.clone())
}

/// Appends the plot of one comparison (nothing when it has no summary).
pub fn plot(o: &mut String, gates: &[GateResult], suite: &SuiteReport, c: &Comparison) {
    let Some(p) = &c.summary else {
        let _ = writeln!(
            o,
            "<p class=\"note\">{} vs {}: no paired summary ({})</p>",
            esc(&c.arm),
            esc(&suite.baseline),
            esc(c.error.as_deref().unwrap_or("no data"))
        );
        return;
    };
    let method = if c.gated {
        gate_method(gates, suite)
    } else {
        None
    };
    let Some((ci, ci_label)) = interval_for(c, method.as_deref()) else {
        return;
    };
    let marks = marks(gates, suite, c);
    let rows = p.tasks.len();
    let (w, left, right, row_h, top) = (760.0, 210.0, 30.0, 18.0, 26.0);
    // Task rows, a gap, the summary row, the axis.
    let h = top + row_h * (rows as f64 + 2.0) + 34.0;
    let mut lo: f64 = 0.0;
    let mut hi: f64 = 0.0;
    let values = p
        .tasks
        .iter()
        .map(|t| t.diff)
        .chain([p.mean_diff, ci[0], ci[1]])
        .chain(marks.iter().flat_map(|m| [m.value, m.threshold]).flatten());
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi - lo < 1e-12 {
        lo -= 1.0;
        hi += 1.0;
    }
    let pad = (hi - lo) * 0.06;
    let (lo, hi) = (lo - pad, hi + pad);
    let x = |v: f64| left + (v.clamp(lo, hi) - lo) / (hi - lo) * (w - left - right);
    let id = format!(
        "forest-{}-{}",
        super::safe_name(&suite.id),
        super::safe_name(&c.arm)
    );
    let _ = writeln!(
        o,
        "<svg class=\"forest\" id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h:.0}\" viewBox=\"0 0 {w} {h:.0}\" role=\"img\" aria-label=\"per-task differences of {} against {}\">",
        esc(&c.arm),
        esc(&suite.baseline)
    );
    let _ = writeln!(
        o,
        "<title>Suite {}: {} − {} in {}, per task, with the {}</title>",
        esc(&suite.id),
        esc(&c.arm),
        esc(&suite.baseline),
        esc(&suite.metric),
        esc(&ci_label)
    );
    let bottom = h - 30.0;
    let _ = writeln!(
        o,
        "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{bottom:.1}\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>",
        x(0.0),
        top - 10.0
    );
    for m in &marks {
        if let Some(t) = m.threshold.filter(|t| t.is_finite()) {
            let _ = writeln!(
                o,
                "<line class=\"threshold\" x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{bottom:.1}\" stroke=\"#b3261e\" stroke-dasharray=\"2 2\"><title>{2}: threshold {3}</title></line>",
                x(t),
                top - 10.0,
                esc(&m.label),
                num(t)
            );
        }
    }
    for (i, t) in p.tasks.iter().enumerate() {
        let y = top + row_h * i as f64 + row_h / 2.0;
        let colour = if t.diff > 0.0 {
            "#1b7f3b"
        } else if t.diff < 0.0 {
            "#b3261e"
        } else {
            "#555"
        };
        let _ = writeln!(
            o,
            "<text x=\"8\" y=\"{:.1}\" font-size=\"12\">{}</text><line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><circle class=\"task-diff\" cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{colour}\"><title>{}: {} − {} = {} (reps {}+{})</title></circle>",
            y + 4.0,
            esc(&clip(&t.task, 30)),
            x(0.0),
            x(t.diff),
            x(t.diff),
            esc(&t.task),
            num(t.candidate),
            num(t.baseline),
            num(t.diff),
            t.reps[0],
            t.reps[1]
        );
    }
    let y = top + row_h * (rows as f64 + 1.0) + row_h / 2.0;
    let _ = writeln!(
        o,
        "<text x=\"8\" y=\"{:.1}\" font-size=\"12\" font-weight=\"bold\">mean ({} tasks)</text><line class=\"gate-interval\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#1f4e9c\" stroke-width=\"4\"><title>{}: [{}, {}]</title></line><rect class=\"estimate\" x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"#1f4e9c\"><title>mean difference {}</title></rect>",
        y + 4.0,
        p.n_tasks,
        x(ci[0]),
        x(ci[1]),
        esc(&ci_label),
        num(ci[0]),
        num(ci[1]),
        x(p.mean_diff) - 5.0,
        y - 5.0,
        num(p.mean_diff)
    );
    for m in &marks {
        if let Some(v) = m.value.filter(|v| v.is_finite()) {
            let _ = writeln!(
                o,
                "<line class=\"gate-bound\" x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" stroke=\"{3}\" stroke-width=\"2\"><title>{4}: bound {5} ({6})</title></line>",
                x(v),
                y - 9.0,
                y + 9.0,
                if m.passed { "#1b7f3b" } else { "#b3261e" },
                esc(&m.label),
                num(v),
                if m.passed { "pass" } else { "not passed" }
            );
        }
    }
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">0</text></svg>",
        x(lo),
        h - 10.0,
        num(lo),
        x(hi),
        h - 10.0,
        num(hi),
        x(0.0),
        h - 10.0
    );
    let _ = writeln!(
        o,
        "<p class=\"note\">Dots: each task's difference {} − {} in <code>{}</code> (repetitions averaged). Bar: the mean difference with its {}{}. Dashed grey: zero{}.</p>",
        esc(&c.arm),
        esc(&suite.baseline),
        esc(&suite.metric),
        esc(&ci_label),
        if marks.is_empty() {
            String::new()
        } else {
            " (the interval the gate's method reads); vertical tick: the rule's computed bound"
                .into()
        },
        if marks.iter().any(|m| m.threshold.is_some()) {
            "; dashed red: the rule's threshold"
        } else {
            ""
        }
    );
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}
