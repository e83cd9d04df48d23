//! Rendering a [`Report`] as text, JSON, Markdown or one self-contained HTML file (inline CSS and
//! SVG; no scripts, no network).

use eval_core::fault::FaultCode;
use std::fmt::Write as _;

use super::build::{Report, ReportError, SuiteReport, verdict_text};
use crate::gates::evaluate::op_text;
use crate::gates::{GateResult, Verdict};
pub use crate::html::esc;
use crate::html::forest::{Plot, Point, Row, Shape, Span};
use crate::html::{BASE_CSS, document, num, pass_class, table_head};

/// The line every format shows for evidence from the model-free upstream.
pub const MODEL_FREE_NOTE: &str = "MODEL-FREE EVIDENCE: this run used the model-free upstream (a plain stop to every request); it measures only what the harness sent";

/// An output format of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Plain text for a terminal.
    Text,
    /// The report as pretty-printed JSON (the machine-readable form).
    Json,
    /// Markdown.
    Md,
    /// A self-contained HTML page.
    Html,
}

/// Renders `report` in `format`; fails only if JSON serialisation fails.
pub fn render(report: &Report, format: Format) -> Result<String, ReportError> {
    Ok(match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(report)?;
            s.push('\n');
            s
        }
        Format::Text => text(report),
        Format::Md => markdown(report),
        Format::Html => html(report),
    })
}

fn verdict_line(r: &Report) -> String {
    r.verdict_line()
}

fn outcomes_text(a: &super::build::ArmAccounting) -> String {
    a.outcomes
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A rule's cell as every report format shows it (the site's rule tables too).
pub fn rule_value(r: &crate::gates::RuleResult) -> String {
    let v = r.value.map_or_else(|| r.value_text.clone(), num);
    match &r.binomial {
        // The exact interval of the rate beside the point value (for a count, of its rate).
        Some(b) => format!(
            "{v} ({}/{}; exact {}% interval of the rate [{}, {}])",
            b.successes,
            b.trials,
            num(b.level * 100.0),
            num(b.lower),
            num(b.upper)
        ),
        None => v,
    }
}

/// A rule's cell as every report format shows it (the site's rule tables too).
pub fn rule_cond(r: &crate::gates::RuleResult) -> String {
    match r.threshold {
        Some(t) => format!("{} {}", op_text(r.op), num(t)),
        None => op_text(r.op).into(),
    }
}

/// A metric's name as a report shows it: an oracle metric (`eval_core::budget::ORACLE_METRICS`)
/// is counted from the oracle model's own record of each question, which the agent's questions
/// can steer (bounded by the suite's `oracle_guard`), so it says it is model-judged.
pub fn metric_label(m: &str) -> String {
    if eval_core::budget::ORACLE_METRICS.contains(&m) {
        format!("{m} (model-judged)")
    } else {
        m.to_owned()
    }
}

/// A rule's cell as every report format shows it (the site's rule tables too).
pub fn rule_subject(r: &crate::gates::RuleResult) -> String {
    let mut s = r.statistic.name();
    if let Some(m) = &r.metric {
        let _ = write!(s, "({})", metric_label(m));
    }
    if let Some(a) = r.arm {
        let _ = write!(s, " [{a:?}]");
    }
    s
}

fn text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", verdict_line(r));
    for reason in &r.reasons {
        let _ = writeln!(o, "  - {reason}");
    }
    if !r.anomalies.is_empty() {
        let _ = writeln!(o, "Anomalies:");
        for a in &r.anomalies {
            let _ = writeln!(o, "  ! {a}");
        }
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "Warnings:");
        for w in &r.warnings {
            let _ = writeln!(o, "  ~ {w}");
        }
    }
    let _ = writeln!(
        o,
        "\nmatrix {}  protocol {}  identity {}",
        r.matrix, r.protocol, r.identity
    );
    let _ = writeln!(
        o,
        "driver {}  ledger head {}:{}",
        r.driver_digest, r.ledger_head.seq, r.ledger_head.hash
    );
    if r.checks.fixture_upstream {
        let _ = writeln!(o, "FIXTURE EVIDENCE: this run used the fixture upstream");
    }
    if r.checks.model_free_upstream {
        let _ = writeln!(o, "{MODEL_FREE_NOTE}");
    }
    for p in &r.unlocked_by {
        let _ = writeln!(
            o,
            "unlocked by precondition {} identity {} (registry report entry {}:{}{})",
            p.protocol,
            p.identity,
            p.report_seq,
            p.report_entry_hash,
            p.report_digest
                .as_ref()
                .map(|d| format!(", report {d}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(o, "\nGates");
    for g in &r.gates {
        let _ = writeln!(
            o,
            "  [{}] {}{}",
            if g.passed { "PASS" } else { "FAIL" },
            g.id,
            g.suite
                .as_ref()
                .map(|s| format!(" (suite {s})"))
                .unwrap_or_default()
        );
        for rule in &g.rules {
            let _ = writeln!(
                o,
                "      {:<18} {} = {} {}  -> {}{}",
                rule.id,
                rule_subject(rule),
                rule_value(rule),
                rule_cond(rule),
                verdict_text(rule.verdict),
                rule.reason
                    .as_ref()
                    .map(|x| format!(" ({x})"))
                    .unwrap_or_default()
            );
        }
    }
    for s in &r.suites {
        let _ = writeln!(
            o,
            "\nSuite {} — metric {}, {} tasks{}",
            s.id,
            metric_label(&s.metric),
            s.n_tasks,
            if s.robustness_check {
                " (robustness check)"
            } else {
                ""
            }
        );
        for c in &s.comparisons {
            match &c.summary {
                Some(p) => {
                    let _ = writeln!(
                        o,
                        "  {} vs {}{}: mean diff {} BCa [{}, {}] percentile [{}, {}] ({}), sign-flip p = {} ({})",
                        c.arm,
                        s.baseline,
                        if c.gated { " (gated)" } else { "" },
                        num(p.mean_diff),
                        num(p.ci.bca.map_or(f64::NAN, |x| x[0])),
                        num(p.ci.bca.map_or(f64::NAN, |x| x[1])),
                        num(p.ci.percentile[0]),
                        num(p.ci.percentile[1]),
                        kind_text(p.method),
                        num(p.sign_flip_p),
                        p.sign_flip.method
                    );
                    for n in &p.notes {
                        let _ = writeln!(o, "      note: {n}");
                    }
                }
                None => {
                    let _ = writeln!(
                        o,
                        "  {} vs {}: {}",
                        c.arm,
                        s.baseline,
                        c.error.as_deref().unwrap_or("no data")
                    );
                }
            }
        }
        if !s.reliability.is_empty() {
            let _ = writeln!(o, "  reliability ({}):", reliability_basis(s));
            for x in &s.reliability {
                let _ = writeln!(o, "    {}: {}", x.arm, reliability_text(x));
            }
        }
    }
    if let Some(q) = &r.sequential {
        let _ = writeln!(o, "\n{}", sequential_head(q));
        for t in &q.looks {
            let _ = writeln!(o, "  {}", super::looks::look_line(t));
        }
    }
    let _ = writeln!(o, "\nAccounting per arm (all attempts)");
    for a in &r.accounting {
        let _ = writeln!(
            o,
            "  {}/{}: {} attempts ({}), {} turns, {} in + {} out tokens, ${}, {} oracle calls, {}",
            a.suite,
            a.arm,
            a.attempts,
            outcomes_text(a),
            a.model_turns,
            a.input_tokens,
            a.output_tokens,
            num(a.spend_usd),
            a.oracle_calls,
            duration_text(a)
        );
        for x in &a.anomalies {
            let _ = writeln!(o, "      ! {x}");
        }
    }
    if !r.power.is_empty() {
        let _ = writeln!(o, "\nPower (the frozen design, as eval freeze printed it):");
        for p in &r.power {
            let _ = writeln!(o, "  power: {}", p.line());
        }
    }
    if !r.grader_validity.is_empty() {
        let _ = writeln!(o, "\nGrader validity (task × control arm → score):");
        for c in &r.grader_validity {
            let _ = writeln!(
                o,
                "  {}/{} {} [{}]: {} (expected {}) {}{}",
                c.suite,
                c.task,
                c.arm,
                c.grading,
                cell_score(c),
                c.expected,
                if c.ok { "ok" } else { "INVALID" },
                if c.problem.is_empty() {
                    String::new()
                } else {
                    format!(" — {}", c.problem)
                }
            );
        }
    }
    let _ = writeln!(
        o,
        "\nInfra faults: {}  reruns: {}",
        r.infra_faults.len(),
        r.reruns.len()
    );
    for f in &r.infra_faults {
        let _ = writeln!(
            o,
            "  {} #{}: {}{}",
            f.slot,
            f.attempt,
            f.code.map_or("?", FaultCode::as_str),
            if f.rerun { " (rerun)" } else { "" }
        );
    }
    o.push_str(&super::sensitivity::text(&r.sensitivity));
    o
}

fn markdown(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# {}\n", verdict_line(r));
    for reason in &r.reasons {
        let _ = writeln!(o, "- {}", md_escape(reason));
    }
    if !r.anomalies.is_empty() {
        let _ = writeln!(o, "\n**Anomalies**\n");
        for a in &r.anomalies {
            let _ = writeln!(o, "- ⚠ {}", md_escape(a));
        }
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "\n**Warnings**\n");
        for w in &r.warnings {
            let _ = writeln!(o, "- {}", md_escape(w));
        }
    }
    let _ = writeln!(
        o,
        "\n| | |\n|---|---|\n| matrix | `{}` |\n| protocol | `{}` |\n| identity | `{}` |\n| driver | `{}` |\n| ledger head | `{}:{}` |\n| fixture upstream | {} |\n| model-free upstream | {} |",
        r.matrix,
        r.protocol,
        r.identity,
        r.driver_digest,
        r.ledger_head.seq,
        r.ledger_head.hash,
        r.checks.fixture_upstream,
        r.checks.model_free_upstream
    );
    if r.checks.model_free_upstream {
        let _ = writeln!(o, "\n**{MODEL_FREE_NOTE}**");
    }
    for p in &r.unlocked_by {
        let _ = writeln!(
            o,
            "| unlocked by | precondition `{}` identity `{}`, registry report entry `{}:{}` |",
            md_escape(&p.protocol),
            p.identity,
            p.report_seq,
            p.report_entry_hash
        );
    }
    let _ = writeln!(
        o,
        "\n## Gates\n\n| gate | rule | statistic | value | condition | verdict | reason |\n|---|---|---|---|---|---|---|"
    );
    for g in &r.gates {
        for rule in &g.rules {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} |",
                g.id,
                rule.id,
                rule_subject(rule),
                rule_value(rule),
                md_escape(&rule_cond(rule)),
                verdict_text(rule.verdict),
                md_escape(rule.reason.as_deref().unwrap_or(""))
            );
        }
    }
    for s in &r.suites {
        let _ = writeln!(
            o,
            "\n## Suite `{}` ({}, {} tasks{})\n",
            s.id,
            metric_label(&s.metric),
            s.n_tasks,
            if s.robustness_check {
                ", robustness check"
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "| arm vs {} | mean diff | BCa | percentile | sign-flip p | method |\n|---|---|---|---|---|---|",
            s.baseline
        );
        for c in &s.comparisons {
            if let Some(p) = &c.summary {
                let bca = p.ci.bca.unwrap_or([f64::NAN; 2]);
                let _ = writeln!(
                    o,
                    "| {}{} | {} | [{}, {}] | [{}, {}] | {} ({}) | {} |",
                    c.arm,
                    if c.gated { " (gated)" } else { "" },
                    num(p.mean_diff),
                    num(bca[0]),
                    num(bca[1]),
                    num(p.ci.percentile[0]),
                    num(p.ci.percentile[1]),
                    num(p.sign_flip_p),
                    p.sign_flip.method,
                    kind_text(p.method)
                );
            }
        }
        if !s.reliability.is_empty() {
            let _ = writeln!(
                o,
                "\nReliability ({}):\n\n| arm | tasks | pass@k | pass^k | flipping tasks |\n|---|---|---|---|---|",
                md_escape(&reliability_basis(s))
            );
            for x in &s.reliability {
                let cells: Vec<String> =
                    reliability_cells(x).iter().map(|c| md_escape(c)).collect();
                let _ = writeln!(o, "| {} |", cells.join(" | "));
            }
        }
    }
    if let Some(q) = &r.sequential {
        let _ = writeln!(
            o,
            "\n## Interim looks\n\n{}\n",
            md_escape(&sequential_head(q))
        );
        for t in &q.looks {
            let _ = writeln!(o, "- {}", md_escape(&super::looks::look_line(t)));
        }
    }
    let _ = writeln!(
        o,
        "\n## Accounting\n\n| suite | arm | attempts | outcomes | turns | input tokens | output tokens | spend (USD) | oracle calls | duration | anomalies |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for a in &r.accounting {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            a.suite,
            a.arm,
            a.attempts,
            outcomes_text(a),
            a.model_turns,
            a.input_tokens,
            a.output_tokens,
            num(a.spend_usd),
            a.oracle_calls,
            duration_text(a),
            md_escape(&a.anomalies.join("; "))
        );
    }
    if !r.power.is_empty() {
        let _ = writeln!(
            o,
            "\n## Power\n\nThe frozen design, as `eval freeze` printed it:\n"
        );
        for p in &r.power {
            let _ = writeln!(o, "- power: {}", md_escape(&p.line()));
        }
    }
    if !r.grader_validity.is_empty() {
        let _ = writeln!(
            o,
            "\n## Grader validity\n\n| suite | task | control arm | grading | score | expected | valid | problem |\n|---|---|---|---|---|---|---|---|"
        );
        for c in &r.grader_validity {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                c.suite,
                c.task,
                md_escape(&c.arm),
                c.grading,
                cell_score(c),
                md_escape(&c.expected),
                if c.ok { "yes" } else { "**no**" },
                md_escape(&c.problem)
            );
        }
    }
    let _ = writeln!(
        o,
        "\n## Infra faults and reruns\n\n{} faults, {} reruns.",
        r.infra_faults.len(),
        r.reruns.len()
    );
    o.push_str(&super::sensitivity::markdown(&r.sensitivity, md_escape));
    o
}

/// A control cell's score as the tables show it.
fn cell_score(c: &crate::gates::controls::ControlCell) -> String {
    c.score.map_or_else(|| "—".to_owned(), num)
}

fn kind_text(k: crate::stats::ResampleKind) -> &'static str {
    match k {
        crate::stats::ResampleKind::Sampled => "sampled",
        crate::stats::ResampleKind::Exact => "exact",
    }
}

/// An arm's wall time beside the part of it that excludes waiting on the upstream.
pub fn duration_text(a: &super::build::ArmAccounting) -> String {
    format!(
        "{}s ({}s excluding the upstream)",
        num(a.duration_seconds),
        num(a.harness_seconds)
    )
}

/// The interim-look design and where it stands, on one line.
pub fn sequential_head(q: &super::looks::SequentialReport) -> String {
    format!(
        "Interim looks ({}, gate {}, looks at {:?} of the slots, boundaries {}): {}",
        q.plan.spending.name(),
        q.plan.gate,
        q.plan.looks,
        q.boundaries.as_ref().map_or("—".into(), |b| b
            .z
            .iter()
            .map(|z| format!("{z:.3}"))
            .collect::<Vec<_>>()
            .join(", ")),
        q.summary
    )
}

/// The interim looks as HTML.
pub fn sequential_html(q: &super::looks::SequentialReport) -> String {
    let mut o = format!(
        "<h2>Interim looks</h2><p>{}</p><ul>",
        esc(&sequential_head(q))
    );
    for t in &q.looks {
        let _ = write!(o, "<li>{}</li>", esc(&super::looks::look_line(t)));
    }
    o.push_str("</ul>\n");
    o
}

/// What a pass is in a suite's reliability figures.
pub fn reliability_basis(s: &SuiteReport) -> String {
    format!(
        "a repetition passes when {} >= {}; pass@k = 1 - C(n-c,k)/C(n,k), pass^k = C(c,k)/C(n,k), averaged over tasks",
        s.metric,
        num(s.pass_mark.unwrap_or(f64::NAN))
    )
}

/// `pass@1 0.5, pass@2 0.8333`.
fn at_k_text(name: &str, v: &[crate::stats::reliability::AtK]) -> String {
    v.iter()
        .map(|x| format!("{name}{} {}", x.k, num(x.value)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `1 of 2 repeated tasks (0.5)`.
fn flips_text(x: &crate::stats::reliability::Reliability) -> String {
    format!(
        "{} of {} repeated tasks ({})",
        x.flipping_tasks,
        x.repeated_tasks,
        x.flip_share.map_or("—".into(), num)
    )
}

/// One arm's reliability as table cells: arm, tasks, pass@k, pass^k, flipping tasks.
fn reliability_cells(x: &crate::stats::reliability::Reliability) -> [String; 5] {
    [
        x.arm.clone(),
        x.tasks.to_string(),
        at_k_text("pass@", &x.pass_at_k),
        at_k_text("pass^", &x.pass_hat_k),
        flips_text(x),
    ]
}

/// One arm's reliability on one line.
pub fn reliability_text(x: &crate::stats::reliability::Reliability) -> String {
    format!(
        "{} tasks, {}/{} repetitions passed; {}; {}; flips: {}",
        x.tasks,
        x.passes,
        x.trials,
        at_k_text("pass@", &x.pass_at_k),
        at_k_text("pass^", &x.pass_hat_k),
        flips_text(x)
    )
}

/// A suite's reliability table as HTML (the report's page and the site show the same one).
pub fn reliability_html(s: &SuiteReport) -> String {
    if s.reliability.is_empty() {
        return String::new();
    }
    let mut o = format!(
        "<table class=\"reliability\"><caption>Reliability: {}</caption><tr><th>arm</th><th>tasks</th><th>pass@k</th><th>pass^k</th><th>flipping tasks</th></tr>\n",
        esc(&reliability_basis(s))
    );
    for x in &s.reliability {
        let cells: String = reliability_cells(x)
            .iter()
            .map(|c| format!("<td>{}</td>", esc(c)))
            .collect();
        let _ = writeln!(o, "<tr>{cells}</tr>");
    }
    o.push_str("</table>\n");
    o
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The report page's own layout; the rest of its style is the shared [`BASE_CSS`].
const CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}";

fn html(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<h1 id=\"verdict\" class=\"verdict {}\" data-release-allowed=\"{}\">{}</h1>",
        if r.release_allowed {
            "allowed"
        } else {
            "blocked"
        },
        r.release_allowed,
        esc(&verdict_line(r))
    );
    if !r.reasons.is_empty() {
        let _ = writeln!(o, "<ul id=\"reasons\">");
        for reason in &r.reasons {
            let _ = writeln!(o, "<li>{}</li>", esc(reason));
        }
        let _ = writeln!(o, "</ul>");
    }
    if !r.anomalies.is_empty() {
        let _ = writeln!(o, "<h2>Anomalies</h2><ul id=\"anomalies\">");
        for a in &r.anomalies {
            let _ = writeln!(o, "<li>{}</li>", esc(a));
        }
        let _ = writeln!(o, "</ul>");
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "<h2>Warnings</h2><ul id=\"warnings\">");
        for w in &r.warnings {
            let _ = writeln!(o, "<li>{}</li>", esc(w));
        }
        let _ = writeln!(o, "</ul>");
    }
    if r.checks.fixture_upstream {
        let _ = writeln!(
            o,
            "<p class=\"fixture\">Fixture evidence: this run used the embedded fixture upstream.</p>"
        );
    }
    if r.checks.model_free_upstream {
        let _ = writeln!(
            o,
            "<p class=\"fixture\" id=\"model-free\">{}</p>",
            esc(MODEL_FREE_NOTE)
        );
    }
    for p in &r.unlocked_by {
        let _ = writeln!(
            o,
            "<p class=\"unlocked\">Unlocked by precondition {} identity <code>{}</code> (registry report entry {}:<code>{}</code>)</p>",
            esc(&p.protocol),
            esc(&p.identity),
            p.report_seq,
            esc(&p.report_entry_hash)
        );
    }
    let _ = writeln!(
        o,
        "<table><tr><th>matrix</th><td><code>{}</code></td></tr><tr><th>protocol</th><td><code>{}</code></td></tr><tr><th>identity</th><td><code>{}</code></td></tr><tr><th>driver</th><td><code>{}</code></td></tr><tr><th>ledger head</th><td><code>{}:{}</code></td></tr><tr><th>complete</th><td>{} / {} statistical, {} / {} infrastructure</td></tr></table>",
        esc(&r.matrix),
        esc(&r.protocol),
        esc(&r.identity),
        esc(&r.driver_digest),
        r.ledger_head.seq,
        esc(&r.ledger_head.hash),
        r.completeness.statistical_resolved,
        r.completeness.statistical_total,
        r.completeness.infrastructure_completed,
        r.completeness.infrastructure_total
    );
    let _ = writeln!(o, "<h2>Gates</h2>");
    gates_table(&mut o, &r.gates);
    for s in &r.suites {
        suite_html(&mut o, s);
    }
    if let Some(q) = &r.sequential {
        o.push_str(&sequential_html(q));
    }
    let _ = writeln!(
        o,
        "<h2>Token and turn accounting per arm</h2><table><tr><th>suite</th><th>arm</th><th>attempts</th><th>model turns</th><th>input tokens</th><th>output tokens</th><th>cached</th><th>reasoning</th><th>oracle calls</th><th>duration (s)</th><th>outcomes</th><th>spend (USD)</th><th>anomalies</th></tr>"
    );
    for a in &r.accounting {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&a.suite),
            esc(&a.arm),
            a.attempts,
            a.model_turns,
            a.input_tokens,
            a.output_tokens,
            a.cached_tokens,
            a.reasoning_tokens,
            a.oracle_calls,
            esc(&duration_text(a)),
            esc(&outcomes_text(a)),
            num(a.spend_usd),
            esc(&a.anomalies.join("; "))
        );
    }
    let _ = writeln!(o, "</table>");
    if !r.power.is_empty() {
        let _ = writeln!(
            o,
            "<h2>Power</h2><p>The frozen design, as <code>eval freeze</code> printed it:</p><ul>"
        );
        for p in &r.power {
            let _ = writeln!(o, "<li>power: {}</li>", esc(&p.line()));
        }
        let _ = writeln!(o, "</ul>");
    }
    if !r.grader_validity.is_empty() {
        let _ = writeln!(
            o,
            "<h2>Grader validity</h2><table><tr><th>suite</th><th>task</th><th>control arm</th><th>grading</th><th>score</th><th>expected</th><th>valid</th><th>problem</th></tr>"
        );
        for c in &r.grader_validity {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.suite),
                esc(&c.task),
                esc(&c.arm),
                esc(&c.grading),
                esc(&cell_score(c)),
                esc(&c.expected),
                if c.ok { "yes" } else { "<strong>no</strong>" },
                esc(&c.problem)
            );
        }
        let _ = writeln!(o, "</table>");
    }
    let _ = writeln!(o, "<h2>Infrastructure faults and reruns</h2>");
    if r.infra_faults.is_empty() && r.reruns.is_empty() {
        let _ = writeln!(o, "<p>None.</p>");
    } else {
        let _ = writeln!(
            o,
            "<table><tr><th>slot</th><th>attempt</th><th>fault code</th><th>rerun</th></tr>"
        );
        for f in &r.infra_faults {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&f.slot),
                f.attempt,
                esc(f.code.map_or("?", FaultCode::as_str)),
                if f.rerun { "yes" } else { "no" }
            );
        }
        let _ = writeln!(
            o,
            "</table><table><tr><th>rerun</th><th>attempt</th><th>reruns</th><th>outcome</th></tr>"
        );
        for x in &r.reruns {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&x.slot),
                x.attempt,
                x.rerun_of.map_or("—".into(), |a| format!("#{a}")),
                esc(&format!("{:?}", x.outcome))
            );
        }
        let _ = writeln!(o, "</table>");
    }
    o.push_str(&super::sensitivity::html(&r.sensitivity, esc));
    let _ = writeln!(
        o,
        "<p class=\"note\">Report schema {}. Intervals: {} resamples, seed {}, confidence {}, default method {}.</p>",
        esc(&r.schema),
        r.plan.resamples,
        r.plan.seed,
        r.plan.confidence,
        esc(&r.plan.method)
    );
    document(
        &format!("eval report: {}", r.matrix),
        &format!("<style>{CSS}{BASE_CSS}</style>"),
        &o,
    )
}

fn gates_table(o: &mut String, gates: &[GateResult]) {
    table_head(
        o,
        " id=\"gates\"",
        &[
            "gate",
            "rule",
            "statistic",
            "value",
            "condition",
            "verdict",
            "reason",
        ],
    );
    for g in gates {
        for rule in &g.rules {
            let class = pass_class(rule.verdict == Verdict::Pass);
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td><td>{}</td></tr>",
                esc(&g.id),
                esc(&rule.id),
                esc(&rule_subject(rule)),
                esc(&rule_value(rule)),
                esc(&rule_cond(rule)),
                verdict_text(rule.verdict),
                esc(rule.reason.as_deref().unwrap_or(""))
            );
        }
    }
    let _ = writeln!(o, "</table>");
}

fn suite_html(o: &mut String, s: &SuiteReport) {
    let _ = writeln!(
        o,
        "<h2>Suite <code>{}</code></h2><p>Metric <code>{}</code>, {} tasks, baseline <code>{}</code>, gated candidate <code>{}</code>.{}</p>",
        esc(&s.id),
        esc(&metric_label(&s.metric)),
        s.n_tasks,
        esc(&s.baseline),
        esc(&s.candidate),
        if s.robustness_check {
            " <strong>Robustness check</strong>: fewer tasks than the protocol's minimum; not population-calibrated evidence."
        } else {
            ""
        }
    );
    forest_plot(o, s);
    o.push_str(&reliability_html(s));
    for c in &s.comparisons {
        if let Some(p) = &c.summary {
            for n in &p.notes {
                let _ = writeln!(o, "<p class=\"note\">{}: {}</p>", esc(&c.arm), esc(n));
            }
        } else if let Some(e) = &c.error {
            let _ = writeln!(o, "<p class=\"note\">{}: {}</p>", esc(&c.arm), esc(e));
        }
    }
    let arms: Vec<&String> = s
        .tasks
        .first()
        .map(|t| t.arms.keys().collect())
        .unwrap_or_default();
    let mut ordered: Vec<&String> = Vec::new();
    for a in std::iter::once(&s.baseline).chain(s.comparisons.iter().map(|c| &c.arm)) {
        if arms.contains(&a) && !ordered.contains(&a) {
            ordered.push(a);
        }
    }
    let _ = write!(o, "<table class=\"tasks\"><tr><th>task</th>");
    for a in &ordered {
        let _ = write!(o, "<th>{}</th>", esc(a));
    }
    let _ = writeln!(o, "</tr>");
    for t in &s.tasks {
        let _ = write!(o, "<tr><td>{}</td>", esc(&t.task));
        for a in &ordered {
            let cells = t.arms.get(*a).map(|c| {
                c.iter()
                    .map(|x| format!("r{}: {}", x.rep, x.value.map_or("—".into(), num)))
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            let _ = write!(o, "<td>{}</td>", esc(&cells.unwrap_or_default()));
        }
        let _ = writeln!(o, "</tr>");
    }
    let _ = writeln!(o, "</table>");
}

/// One plot per suite: a row per compared arm with its mean difference against the baseline,
/// its BCa interval (thick) and percentile interval (thin).
fn forest_plot(o: &mut String, s: &SuiteReport) {
    let rows = s
        .comparisons
        .iter()
        .filter_map(|c| c.summary.as_ref().map(|p| (c, p)))
        .map(|(c, p)| {
            let bca = p.ci.bca.unwrap_or(p.ci.percentile);
            let colour = if c.gated { "#1f4e9c" } else { "#777" };
            let span = |class, [from, to]: [f64; 2], width| Span {
                class: Some(class),
                from,
                to,
                colour,
                width,
                title: None,
            };
            Row {
                label: format!("{}{}", c.arm, if c.gated { " (gated)" } else { "" }),
                bold: false,
                gap_before: false,
                spans: vec![
                    span("ci-percentile", p.ci.percentile, 1),
                    span("ci-bca", bca, 4),
                ],
                point: Point {
                    class: "estimate",
                    at: p.mean_diff,
                    shape: Shape::Square(9),
                    colour,
                    title: format!(
                        "{}: {} [{}, {}]",
                        c.arm,
                        num(p.mean_diff),
                        num(bca[0]),
                        num(bca[1])
                    ),
                },
                ticks: Vec::new(),
            }
        })
        .collect();
    crate::html::forest::draw(
        o,
        &Plot {
            id: format!("forest-{}", s.id),
            label: format!("forest plot of suite {}", s.id),
            title: format!(
                "Suite {}: mean difference in {} against {} with intervals",
                s.id, s.metric, s.baseline
            ),
            row_height: 34.0,
            rows,
            rules: Vec::new(),
        },
    );
    let _ = writeln!(
        o,
        "<p class=\"note\">Square: mean task-level difference against <code>{}</code>; thick line: {}% BCa interval; thin line: percentile interval; dashed line: zero.</p>",
        esc(&s.baseline),
        s.comparisons
            .iter()
            .find_map(|c| c.summary.as_ref().map(|p| num(p.ci.level * 100.0)))
            .unwrap_or_else(|| "—".into())
    );
}
