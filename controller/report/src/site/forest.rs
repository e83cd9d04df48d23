//! The site's forest plot of one comparison: one row per task (its paired difference, candidate −
//! baseline, the repetitions averaged — the numbers the report's `PairedSummary.tasks` holds),
//! then the mean difference with the interval of the gate that reads it, and each such rule's
//! threshold. What the rows are is decided here; the SVG is drawn by the shared
//! [`eval_evidence::html::forest`].

use super::names::safe_name;
use eval_evidence::gates::{GateResult, Statistic};
use eval_evidence::html::forest::{Mark, Plot, Point, Row, Shape, Span};
use eval_evidence::html::{esc, num};
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
    let mut rows: Vec<Row> = p.tasks.iter().map(task_row).collect();
    rows.push(Row {
        label: format!("mean ({} tasks)", p.n_tasks),
        bold: true,
        gap_before: true,
        spans: vec![Span {
            class: Some("gate-interval"),
            from: ci[0],
            to: ci[1],
            colour: "#1f4e9c",
            width: 4,
            title: Some(format!("{ci_label}: [{}, {}]", num(ci[0]), num(ci[1]))),
        }],
        point: Point {
            class: "estimate",
            at: p.mean_diff,
            shape: Shape::Square(10),
            colour: "#1f4e9c",
            title: format!("mean difference {}", num(p.mean_diff)),
        },
        ticks: marks.iter().filter_map(bound_tick).collect(),
    });
    let rules = marks
        .iter()
        .filter_map(|m| {
            let t = m.threshold?;
            Some(Mark {
                class: "threshold",
                at: t,
                colour: "#b3261e",
                title: format!("{}: threshold {}", m.label, num(t)),
            })
        })
        .collect();
    eval_evidence::html::forest::draw(
        o,
        &Plot {
            id: format!("forest-{}-{}", safe_name(&suite.id), safe_name(&c.arm)),
            label: format!(
                "per-task differences of {} against {}",
                c.arm, suite.baseline
            ),
            title: format!(
                "Suite {}: {} − {} in {}, per task, with the {}",
                suite.id, c.arm, suite.baseline, suite.metric, ci_label
            ),
            row_height: 18.0,
            rows,
            rules,
        },
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

/// A task's row: its paired difference as a dot (green above zero, red below), with a grey
/// guide from zero.
fn task_row(t: &eval_evidence::stats::paired::TaskRow) -> Row {
    let colour = if t.diff > 0.0 {
        "#1b7f3b"
    } else if t.diff < 0.0 {
        "#b3261e"
    } else {
        "#555"
    };
    Row {
        label: clip(&t.task, 30),
        bold: false,
        gap_before: false,
        spans: vec![Span {
            class: None,
            from: 0.0,
            to: t.diff,
            colour: "#ddd",
            width: 1,
            title: None,
        }],
        point: Point {
            class: "task-diff",
            at: t.diff,
            shape: Shape::Dot(4),
            colour,
            title: format!(
                "{}: {} − {} = {} (reps {}+{})",
                t.task,
                num(t.candidate),
                num(t.baseline),
                num(t.diff),
                t.reps[0],
                t.reps[1]
            ),
        },
        ticks: Vec::new(),
    }
}

/// A rule's computed bound as a tick on the summary row (green when the rule passed).
fn bound_tick(m: &GateMark) -> Option<Mark> {
    let v = m.value.filter(|v| v.is_finite())?;
    Some(Mark {
        class: "gate-bound",
        at: v,
        colour: if m.passed { "#1b7f3b" } else { "#b3261e" },
        title: format!(
            "{}: bound {} ({})",
            m.label,
            num(v),
            if m.passed { "pass" } else { "not passed" }
        ),
    })
}
