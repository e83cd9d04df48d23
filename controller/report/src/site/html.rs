//! The site's pages. Every string that reaches a page goes through [`esc`] (text and attribute
//! values alike); names in links are [`super::safe_name`]s, never the raw ids. No page has a
//! script, a form, an external resource or an inline event handler.

use super::detail::AttemptDetail;
use super::names::{Names, safe_name};
use super::outcome::{MARKER, SiteError, SiteSummary};
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::gates::{RuleResult, Verdict};
use eval_evidence::ledger::Digest;
use eval_evidence::report::build::{SuiteReport, verdict_text};
use eval_evidence::report::{AttemptData, Report, RunData};
use eval_runlog::events;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The most of one text artifact shown inline on an attempt page (the rest is named by size;
/// the whole is in the artifact store under its digest).
pub const INLINE_BYTES: usize = 64 * 1024;

pub use eval_evidence::html::{esc, num};

/// The site's own layout and classes; the rest of its style is the shared
/// [`eval_evidence::html::BASE_CSS`] (written together as `site.css`).
const SITE_CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#222}\
main{max-width:1200px;margin:1em auto;padding:0 1em}nav{background:#f3f3f3;padding:.5em 1em;border-bottom:1px solid #ddd}\
nav a{margin-right:.3em}.o-completed{color:#1b7f3b;font-weight:600}.o-agent_error,.o-timeout,.o-contract_violation,.o-budget_exhausted,.o-accounting_mismatch{color:#b3261e;font-weight:600}\
.o-infra_fault,.o-interrupted,.o-open{color:#8a5a00;font-weight:600}pre{white-space:pre-wrap;word-break:break-word;background:#fafafa;border:1px solid #eee;padding:.5em;font-size:12px;max-height:40em;overflow:auto}\
.arms{display:grid;grid-template-columns:repeat(auto-fit,minmax(260px,1fr));gap:1em;align-items:start}\
.card{border:1px solid #ccc;border-radius:6px;padding:.4em .7em;margin-bottom:.7em}.card.superseded{opacity:.7}\
.msg{border-left:4px solid #ccc;padding:.2em .7em;margin:.5em 0}.msg.user{border-color:#1f4e9c}.msg.assistant{border-color:#1b7f3b}\
.msg.tool{border-color:#8a5a00}.msg.system{border-color:#777}.cell a{margin-right:.4em}\
section.call{border-top:1px solid #eee;margin-top:.8em}section.call h3{font-size:14px;margin:.4em 0}";

/// A site page: the shared shell with the site's stylesheet and its navigation bar.
fn page(title: &str, root: &str, crumbs: &[(String, String)], body: &str) -> String {
    let mut o = String::with_capacity(body.len() + 1024);
    let _ = write!(o, "<nav><a href=\"{root}index.html\">report</a>");
    for (href, label) in crumbs {
        let _ = write!(o, " › <a href=\"{root}{href}\">{}</a>", esc(label));
    }
    let _ = write!(
        o,
        " · <a href=\"{root}attempts.html\">all attempts</a> · <a href=\"{root}report.json\">report.json</a> · <a href=\"{root}report.html\">one-page report</a></nav>\n<main>\n{body}</main>"
    );
    eval_evidence::html::document(
        title,
        &format!("<link rel=\"stylesheet\" href=\"{root}site.css\">"),
        &o,
    )
}

fn outcome_span(o: Option<Outcome>) -> String {
    let s = o.map_or("open", Outcome::as_str);
    format!("<span class=\"o-{s}\">{s}</span>")
}

fn phase_text(p: Phase) -> &'static str {
    p.as_str()
}

/// The attempt id the ledger uses: `<slot>#<n>`.
pub fn attempt_id(a: &AttemptData) -> String {
    format!("{}#{}", a.slot, a.attempt)
}

fn task_href(suite: &str, task: &str) -> String {
    format!("suites/{}/{}.html", safe_name(suite), safe_name(task))
}

/// What an attempt page found that the task pages and the index show beside the attempt.
#[derive(Default, Clone)]
struct Card {
    /// Passed / total of the grader's first check list.
    checks: Option<(usize, usize)>,
    calls: usize,
}

/// The inputs of one site.
pub struct Site<'a> {
    data: &'a RunData,
    report: &'a Report,
    details: &'a BTreeMap<String, AttemptDetail>,
    store: Option<&'a ArtifactStore>,
    names: BTreeMap<String, String>,
    finals: BTreeMap<&'a str, &'a AttemptData>,
}

impl<'a> Site<'a> {
    pub fn new(
        data: &'a RunData,
        report: &'a Report,
        details: &'a BTreeMap<String, AttemptDetail>,
        store: Option<&'a ArtifactStore>,
    ) -> Self {
        let mut n = Names::default();
        let names = data
            .attempts
            .iter()
            .map(|a| {
                let id = attempt_id(a);
                let name = n.attempt(&id);
                (id, name)
            })
            .collect();
        Self {
            data,
            report,
            details,
            store,
            names,
            finals: eval_evidence::gates::pairs::final_attempts(data),
        }
    }

    fn attempt_href(&self, id: &str) -> String {
        let name = self.names.get(id).cloned().unwrap_or_else(|| safe_name(id));
        format!("attempts/{name}.html")
    }

    /// Writes every page into `dir` (created).
    pub fn write_all(&self, dir: &Path) -> Result<SiteSummary, SiteError> {
        let mut sum = SiteSummary {
            pages: 0,
            attempts: 0,
            bytes: 0,
        };
        for sub in ["attempts", "suites"] {
            mkdir(&dir.join(sub))?;
        }
        for s in &self.data.suites {
            mkdir(&dir.join("suites").join(safe_name(&s.id)))?;
        }
        let css = format!("{SITE_CSS}{}", eval_evidence::html::BASE_CSS);
        put(dir, "site.css", css.as_bytes(), &mut sum)?;
        let json = eval_evidence::canonical::to_vec(self.report).map_err(|e| SiteError::Write {
            path: dir.join("report.json"),
            source: std::io::Error::other(e),
        })?;
        put(dir, "report.json", &json, &mut sum)?;
        let one_page =
            eval_evidence::report::render(self.report, eval_evidence::report::Format::Html)
                .map_err(|e| SiteError::Write {
                    path: dir.join("report.html"),
                    source: std::io::Error::other(e.to_string()),
                })?;
        put(dir, "report.html", one_page.as_bytes(), &mut sum)?;
        let mut cards: BTreeMap<String, Card> = BTreeMap::new();
        for a in &self.data.attempts {
            let id = attempt_id(a);
            let (body, card) = self.attempt_page(a, &id)?;
            put(dir, &self.attempt_href(&id), body.as_bytes(), &mut sum)?;
            sum.pages += 1;
            sum.attempts += 1;
            cards.insert(id, card);
        }
        for s in &self.report.suites {
            for t in &s.tasks {
                let body = self.task_page(s, &t.task, &cards);
                put(dir, &task_href(&s.id, &t.task), body.as_bytes(), &mut sum)?;
                sum.pages += 1;
            }
        }
        put(
            dir,
            "attempts.html",
            self.attempts_page(&cards).as_bytes(),
            &mut sum,
        )?;
        put(dir, "index.html", self.index_page().as_bytes(), &mut sum)?;
        sum.pages += 2;
        let marker = serde_json::json!({
            "schema": "eval.site/1",
            "matrix": self.report.matrix,
            "identity": self.report.identity,
            "ledger_head": self.report.ledger_head,
            "report_digest": Digest::of(&json).to_string(),
            "release_allowed": self.report.release_allowed,
            "pages": sum.pages,
            "attempts": sum.attempts,
        });
        let marker = serde_json::to_vec_pretty(&marker).unwrap_or_default();
        put(dir, MARKER, &marker, &mut sum)?;
        Ok(sum)
    }

    // ----- the index -----

    fn index_page(&self) -> String {
        let r = self.report;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "<h1 id=\"verdict\" class=\"verdict {}\" data-release-allowed=\"{}\" data-exit-status=\"{}\">{}</h1>",
            if r.release_allowed {
                "allowed"
            } else {
                "blocked"
            },
            r.release_allowed,
            r.exit_status(),
            esc(&r.verdict_line())
        );
        if !r.reasons.is_empty() {
            let _ = writeln!(o, "<ul id=\"reasons\">");
            for x in &r.reasons {
                long_item(&mut o, x);
            }
            let _ = writeln!(o, "</ul>");
        }
        if !r.anomalies.is_empty() {
            let _ = writeln!(o, "<h2>Anomalies</h2><ul id=\"anomalies\">");
            for x in &r.anomalies {
                long_item(&mut o, x);
            }
            let _ = writeln!(o, "</ul>");
        }
        // What protects a result but was switched off by the protocol (a suite without control
        // arms): not a reason, since the protocol said so before the run, but shown on the front
        // page as the report's text and Markdown show it.
        if !r.warnings.is_empty() {
            let _ = writeln!(o, "<h2>Warnings</h2><ul id=\"warnings\">");
            for x in &r.warnings {
                long_item(&mut o, x);
            }
            let _ = writeln!(o, "</ul>");
        }
        if r.checks.fixture_upstream {
            let _ = writeln!(
                o,
                "<p class=\"fixture\">Fixture evidence: this run used the embedded fixture upstream; it never allows a release.</p>"
            );
        }
        let _ = writeln!(
            o,
            "<table id=\"identity\"><tr><th>matrix</th><td><code>{}</code></td></tr><tr><th>protocol</th><td><code>{}</code></td></tr><tr><th>identity</th><td><code>{}</code></td></tr><tr><th>driver</th><td><code>{}</code></td></tr><tr><th>ledger head</th><td><code>{}:{}</code></td></tr><tr><th>evidence</th><td>{}</td></tr><tr><th>complete</th><td>{} / {} statistical, {} / {} infrastructure</td></tr><tr><th>attempts</th><td><a href=\"attempts.html\">{}</a></td></tr></table>",
            esc(&r.matrix),
            esc(&r.protocol),
            esc(&r.identity),
            esc(&r.driver_digest),
            r.ledger_head.seq,
            esc(&r.ledger_head.hash),
            esc(&evidence_text(r)),
            r.completeness.statistical_resolved,
            r.completeness.statistical_total,
            r.completeness.infrastructure_completed,
            r.completeness.infrastructure_total,
            self.data.attempts.len()
        );
        let _ = writeln!(o, "<h2 id=\"gates\">Gates</h2>");
        for g in &r.gates {
            let _ = writeln!(
                o,
                "<section class=\"gate\" id=\"gate-{}\"><h3><span class=\"{}\">{}</span> gate <code>{}</code>{}</h3>",
                safe_name(&g.id),
                if g.passed { "pass" } else { "fail" },
                if g.passed { "PASS" } else { "FAIL" },
                esc(&g.id),
                g.suite
                    .as_ref()
                    .map(|s| format!(
                        " on suite <a href=\"#suite-{}\">{}</a>",
                        safe_name(s),
                        esc(s)
                    ))
                    .unwrap_or_default()
            );
            if let Some(d) = &g.description {
                let _ = writeln!(o, "<p>{}</p>", esc(d));
            }
            rules_table(&mut o, &g.rules);
            let _ = writeln!(o, "</section>");
        }
        let _ = writeln!(o, "<h2>Suites</h2>");
        for s in &r.suites {
            self.suite_section(&mut o, s);
        }
        if let Some(q) = &r.sequential {
            o.push_str(&eval_evidence::report::render::sequential_html(q));
        }
        // `eval regrade`'s results, labelled, after everything the verdict rests on.
        o.push_str(&eval_evidence::report::sensitivity::html(
            &r.sensitivity,
            esc,
        ));
        self.accounting(&mut o);
        self.controls_and_faults(&mut o);
        let _ = writeln!(
            o,
            "<p class=\"note\">Report schema {}. Intervals: {} resamples, seed {}, confidence {}, default method {}. Every number here is the report's (<a href=\"report.json\">report.json</a>, recorded in the ledger as its digest).</p>",
            esc(&r.schema),
            r.plan.resamples,
            r.plan.seed,
            r.plan.confidence,
            esc(&r.plan.method)
        );
        page(&format!("eval report: {}", r.matrix), "", &[], &o)
    }

    fn suite_section(&self, o: &mut String, s: &SuiteReport) {
        let _ = writeln!(
            o,
            "<section class=\"suite\" id=\"suite-{}\"><h3>Suite <code>{}</code></h3><p>Metric <code>{}</code>, {} tasks, baseline <code>{}</code>, gated candidate <code>{}</code>.{}</p>",
            safe_name(&s.id),
            esc(&s.id),
            esc(&eval_evidence::report::render::metric_label(&s.metric)),
            s.n_tasks,
            esc(&s.baseline),
            esc(&s.candidate),
            if s.robustness_check {
                " <strong>Robustness check</strong>: fewer tasks than the protocol's minimum; not population-calibrated evidence."
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "<table class=\"comparisons\"><tr><th>arm vs {}</th><th>tasks</th><th>mean diff</th><th>BCa</th><th>percentile</th><th>sign-flip p</th><th>method</th></tr>",
            esc(&s.baseline)
        );
        for c in &s.comparisons {
            match &c.summary {
                Some(p) => {
                    let bca = p.ci.bca.unwrap_or([f64::NAN; 2]);
                    let _ = writeln!(
                        o,
                        "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>[{}, {}]</td><td>[{}, {}]</td><td>{} ({})</td><td>{}</td></tr>",
                        esc(&c.arm),
                        if c.gated { " (gated)" } else { "" },
                        p.n_tasks,
                        num(p.mean_diff),
                        num(bca[0]),
                        num(bca[1]),
                        num(p.ci.percentile[0]),
                        num(p.ci.percentile[1]),
                        num(p.sign_flip_p),
                        esc(&p.sign_flip.method),
                        esc(&p.interval_method)
                    );
                }
                None => {
                    let _ = writeln!(
                        o,
                        "<tr><td>{}</td><td colspan=\"6\">{}</td></tr>",
                        esc(&c.arm),
                        esc(c.error.as_deref().unwrap_or("no data"))
                    );
                }
            }
        }
        let _ = writeln!(o, "</table>");
        for c in &s.comparisons {
            super::forest::plot(o, &self.report.gates, s, c);
        }
        o.push_str(&eval_evidence::report::render::reliability_html(s));
        // The task × arm table: each repetition's value, linked to the attempt it came from.
        let arms = suite_arms(s);
        let _ = write!(
            o,
            "<table class=\"tasks\" id=\"tasks-{}\"><tr><th>task</th>",
            safe_name(&s.id)
        );
        for a in &arms {
            let _ = write!(o, "<th>{}</th>", esc(a));
        }
        let _ = writeln!(o, "</tr>");
        for t in &s.tasks {
            let _ = write!(
                o,
                "<tr><td><a href=\"{}\">{}</a></td>",
                task_href(&s.id, &t.task),
                esc(&t.task)
            );
            for arm in &arms {
                let _ = write!(o, "<td class=\"cell\">");
                for cell in t.arms.get(*arm).map(Vec::as_slice).unwrap_or_default() {
                    let value = cell.value.map_or("—".into(), num);
                    let slot = self.data.slots.iter().find(|x| {
                        x.phase == Phase::Statistical
                            && x.suite == s.id
                            && x.task == t.task
                            && x.arm == **arm
                            && x.rep == cell.rep
                    });
                    let fin = slot.and_then(|x| self.finals.get(x.id.as_str()));
                    let outcome = cell.outcome.map_or("open", Outcome::as_str);
                    match fin {
                        Some(a) => {
                            let _ = write!(
                                o,
                                "<a class=\"o-{outcome}\" href=\"{}\" title=\"r{} {}\">{}</a>",
                                self.attempt_href(&attempt_id(a)),
                                cell.rep,
                                outcome,
                                esc(&value)
                            );
                        }
                        None => {
                            let _ =
                                write!(o, "<span class=\"o-{outcome}\">{}</span> ", esc(&value));
                        }
                    }
                }
                let _ = write!(o, "</td>");
            }
            let _ = writeln!(o, "</tr>");
        }
        let _ = writeln!(o, "</table></section>");
    }

    fn accounting(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "<h2 id=\"accounting\">Accounting per arm</h2><table><tr><th>suite</th><th>arm</th><th>attempts</th><th>outcomes</th><th>model turns</th><th>input tokens</th><th>output tokens</th><th>cached</th><th>spend (USD)</th><th>duration (s)</th><th>anomalies</th></tr>"
        );
        for a in &self.report.accounting {
            let outcomes = a
                .outcomes
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&a.suite),
                esc(&a.arm),
                a.attempts,
                esc(&outcomes),
                a.model_turns,
                a.input_tokens,
                a.output_tokens,
                a.cached_tokens,
                num(a.spend_usd),
                esc(&eval_evidence::report::render::duration_text(a)),
                esc(&a.anomalies.join("; "))
            );
        }
        let _ = writeln!(o, "</table>");
    }

    fn controls_and_faults(&self, o: &mut String) {
        let r = self.report;
        if !r.grader_validity.is_empty() {
            let _ = writeln!(
                o,
                "<h2 id=\"grader-validity\">Grader validity</h2><table><tr><th>suite</th><th>task</th><th>control arm</th><th>grading</th><th>score</th><th>expected</th><th>valid</th><th>problem</th></tr>"
            );
            for c in &r.grader_validity {
                let _ = writeln!(
                    o,
                    "<tr><td>{}</td><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&c.suite),
                    task_href(&c.suite, &c.task),
                    esc(&c.task),
                    esc(&c.arm),
                    esc(&c.grading),
                    c.score.map_or("—".into(), num),
                    esc(&c.expected),
                    if c.ok {
                        "yes"
                    } else {
                        "<strong class=\"fail\">no</strong>"
                    },
                    esc(&c.problem)
                );
            }
            let _ = writeln!(o, "</table>");
        }
        let _ = writeln!(o, "<h2 id=\"faults\">Infrastructure faults and reruns</h2>");
        if r.infra_faults.is_empty() && r.reruns.is_empty() {
            let _ = writeln!(o, "<p>None.</p>");
            return;
        }
        let _ = writeln!(
            o,
            "<table><tr><th>attempt</th><th>fault code</th><th>rerun</th></tr>"
        );
        for f in &r.infra_faults {
            let id = format!("{}#{}", f.slot, f.attempt);
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                self.attempt_link(&id, ""),
                esc(f.code.map_or("?", eval_core::fault::FaultCode::as_str)),
                if f.rerun { "yes" } else { "no" }
            );
        }
        let _ = writeln!(o, "</table>");
    }

    /// A link to an attempt's page when it has one (every attempt in the run data does).
    fn attempt_link(&self, id: &str, root: &str) -> String {
        if self.names.contains_key(id) {
            format!(
                "<a href=\"{root}{}\">{}</a>",
                self.attempt_href(id),
                esc(id)
            )
        } else {
            esc(id)
        }
    }

    // ----- all attempts -----

    fn attempts_page(&self, cards: &BTreeMap<String, Card>) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "<h1>All attempts ({})</h1><p class=\"note\">In ledger order, reruns and faulted attempts included; <em>final</em> marks the attempt a slot's result is read from.</p><table id=\"attempts\"><tr><th>attempt</th><th>phase</th><th>suite</th><th>task</th><th>arm</th><th>rep</th><th>outcome</th><th>final</th><th>calls</th><th>turns</th><th>tokens</th><th>duration (s)</th></tr>",
            self.data.attempts.len()
        );
        for a in &self.data.attempts {
            let id = attempt_id(a);
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                self.attempt_link(&id, ""),
                phase_text(a.phase),
                esc(&a.suite),
                task_href(&a.suite, &a.task),
                esc(&a.task),
                esc(&a.arm),
                a.rep,
                outcome_span(a.outcome),
                if self.is_final(a) { "final" } else { "" },
                cards.get(&id).map_or(0, |c| c.calls),
                a.model_turns,
                a.tokens.total(),
                num(a.duration_seconds)
            );
        }
        let _ = writeln!(o, "</table>");
        page("eval: all attempts", "", &[], &o)
    }

    fn is_final(&self, a: &AttemptData) -> bool {
        self.finals
            .get(a.slot.as_str())
            .is_some_and(|f| f.attempt == a.attempt)
    }

    // ----- one task -----

    fn task_page(&self, s: &SuiteReport, task: &str, cards: &BTreeMap<String, Card>) -> String {
        let root = "../../";
        let mut o = String::new();
        let _ = writeln!(
            o,
            "<h1>Task <code>{}</code></h1><p>Suite <a href=\"{root}index.html#suite-{}\">{}</a>, metric <code>{}</code>.</p>",
            esc(task),
            safe_name(&s.id),
            esc(&s.id),
            esc(&s.metric)
        );
        let _ = writeln!(
            o,
            "<table class=\"pairs\"><tr><th>comparison</th><th>{} (mean)</th><th>arm (mean)</th><th>difference</th><th>repetitions</th></tr>",
            esc(&s.baseline)
        );
        for c in &s.comparisons {
            if let Some(row) = c
                .summary
                .as_ref()
                .and_then(|p| p.tasks.iter().find(|t| t.task == task))
            {
                let _ = writeln!(
                    o,
                    "<tr><td>{} − {}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} + {}</td></tr>",
                    esc(&c.arm),
                    esc(&s.baseline),
                    if c.gated { " (gated)" } else { "" },
                    num(row.baseline),
                    num(row.candidate),
                    num(row.diff),
                    row.reps[0],
                    row.reps[1]
                );
            }
        }
        let _ = writeln!(o, "</table>");
        // Every arm that ran this task, the suite's first, then control arms.
        let mut arms: Vec<String> = suite_arms(s).into_iter().cloned().collect();
        for a in self
            .data
            .attempts
            .iter()
            .filter(|a| a.suite == s.id && a.task == task)
        {
            if !arms.contains(&a.arm) {
                arms.push(a.arm.clone());
            }
        }
        let _ = writeln!(o, "<div class=\"arms\">");
        for arm in &arms {
            let _ = writeln!(
                o,
                "<div class=\"arm\" id=\"arm-{}\"><h2>{}</h2>",
                safe_name(arm),
                esc(arm)
            );
            let mut attempts: Vec<&AttemptData> = self
                .data
                .attempts
                .iter()
                .filter(|a| a.suite == s.id && a.task == task && a.arm == *arm)
                .collect();
            attempts.sort_by_key(|a| (phase_rank(a.phase), a.rep, a.attempt));
            if attempts.is_empty() {
                let _ = writeln!(o, "<p class=\"note\">No attempt.</p>");
            }
            for a in attempts {
                let id = attempt_id(a);
                let fin = self.is_final(a);
                let card = cards.get(&id).cloned().unwrap_or_default();
                let value = a
                    .metrics
                    .get(&s.metric)
                    .map_or("—".to_string(), |v| num(*v));
                let _ = writeln!(
                    o,
                    "<div class=\"card{}\"><a href=\"{root}{}\"><strong>{} r{} #{}</strong></a> {}<br>{} {} = {}{}<br>{} calls, {} turns, {} tokens, {} s{}</div>",
                    if fin { "" } else { " superseded" },
                    self.attempt_href(&id),
                    phase_text(a.phase),
                    a.rep,
                    a.attempt,
                    if fin { "(final)" } else { "" },
                    outcome_span(a.outcome),
                    esc(&s.metric),
                    esc(&value),
                    card.checks
                        .map(|(p, t)| format!(", checks {p}/{t}"))
                        .unwrap_or_default(),
                    card.calls,
                    a.model_turns,
                    a.tokens.total(),
                    num(a.duration_seconds),
                    a.infra_fault
                        .map(|f| format!("<br>fault <code>{}</code>", esc(f.as_str())))
                        .unwrap_or_default()
                );
            }
            let _ = writeln!(o, "</div>");
        }
        let _ = writeln!(o, "</div>");
        page(
            &format!("eval: {} / {}", s.id, task),
            root,
            &[(
                format!("index.html#suite-{}", safe_name(&s.id)),
                format!("suite {}", s.id),
            )],
            &o,
        )
    }

    // ----- one attempt -----

    /// One attempt's page and its card: the facts table, metrics, rounds, calls, conversation,
    /// questions, grader, artifacts, notes and attestation, in that order.
    fn attempt_page(&self, a: &AttemptData, id: &str) -> Result<(String, Card), SiteError> {
        let root = "../";
        let empty = AttemptDetail::default();
        let d = self.details.get(id).unwrap_or(&empty);
        let outcome = d.outcome.as_ref().map(|(_, o)| o);
        let mut card = Card {
            calls: d.calls.len(),
            ..Card::default()
        };
        let mut o = String::new();
        let _ = writeln!(
            o,
            "<h1 id=\"attempt\" data-attempt=\"{}\">Attempt <code>{}</code> {}</h1>",
            esc(id),
            esc(id),
            outcome_span(a.outcome)
        );
        let facts = self.attempt_facts(a, d, outcome, root);
        let _ = writeln!(o, "<table id=\"facts\">");
        for (k, v) in &facts {
            let _ = writeln!(o, "<tr><th>{}</th><td>{v}</td></tr>", esc(k));
        }
        let _ = writeln!(o, "</table>");
        if !a.metrics.is_empty() {
            let _ = writeln!(o, "<h2 id=\"metrics\">Metrics</h2><table>");
            for (k, v) in &a.metrics {
                let _ = writeln!(o, "<tr><th>{}</th><td>{}</td></tr>", esc(k), num(*v));
            }
            let _ = writeln!(o, "</table>");
        }
        rounds_table(&mut o, d, |digest| self.artifact_size(digest));
        self.calls_section(&mut o, d);
        let artifacts = outcome.map(|o| &o.artifacts);
        let transcript = self.read_text(
            id,
            "transcript",
            artifacts.and_then(|x| x.transcript.as_deref()),
        )?;
        let views = self.call_views(id, d)?;
        conversation_section(&mut o, d, &views, transcript.as_ref());
        clarifications_section(&mut o, d);
        let grader = self.read_text(
            id,
            "grader_output",
            artifacts.and_then(|x| x.grader_output.as_deref()),
        )?;
        card.checks = grader_section(&mut o, grader.as_ref());
        self.artifacts_section(&mut o, id, artifacts)?;
        notes_section(&mut o, d);
        attestation_section(&mut o, d);
        let crumbs = [
            (
                format!("index.html#suite-{}", safe_name(&a.suite)),
                format!("suite {}", a.suite),
            ),
            (task_href(&a.suite, &a.task), format!("task {}", a.task)),
        ];
        Ok((page(&format!("eval: {id}"), root, &crumbs, &o), card))
    }

    /// The attempt's facts table, row by row: where it sits, its outcome and the ledger's
    /// account of its times, model use and oracle calls.
    fn attempt_facts(
        &self,
        a: &AttemptData,
        d: &AttemptDetail,
        outcome: Option<&events::AttemptOutcome>,
        root: &str,
    ) -> Vec<(&'static str, String)> {
        let mut facts: Vec<(&'static str, String)> = vec![
            ("phase", esc(phase_text(a.phase))),
            (
                "suite / task / arm",
                format!(
                    "{} / <a href=\"{root}{}\">{}</a> / {}",
                    esc(&a.suite),
                    task_href(&a.suite, &a.task),
                    esc(&a.task),
                    esc(&a.arm)
                ),
            ),
            ("repetition", a.rep.to_string()),
            (
                "attempt",
                format!(
                    "{}{}{}",
                    a.attempt,
                    a.rerun_of
                        .map(|n| format!(
                            ", reruns {}",
                            self.attempt_link(&format!("{}#{n}", a.slot), root)
                        ))
                        .unwrap_or_default(),
                    if self.is_final(a) {
                        " — the slot's final attempt"
                    } else {
                        ""
                    }
                ),
            ),
            ("outcome", outcome_span(a.outcome)),
        ];
        if let Some(f) = a.infra_fault {
            facts.push(("fault code", format!("<code>{}</code>", esc(f.as_str()))));
        }
        if let Some(r) = &d.rerun {
            facts.push((
                "rerun because",
                format!("<code>{}</code>: {}", esc(&r.code), esc(&r.reason)),
            ));
        }
        if let Some(o) = outcome {
            outcome_facts(&mut facts, o);
        }
        if let Some((seq, s)) = &d.started {
            facts.push((
                "started at",
                format!("{} (ledger seq {seq})", esc(&s.started_at)),
            ));
        }
        facts.push((
            "model",
            format!(
                "{} turns; tokens {} in ({} cached) + {} out ({} reasoning); ${}{}",
                a.model_turns,
                a.tokens.input,
                a.tokens.cached,
                a.tokens.output,
                a.tokens.reasoning,
                num(a.spend_usd),
                if a.incomplete_calls > 0 {
                    format!(
                        "; {} incomplete calls ({} tokens reserved)",
                        a.incomplete_calls, a.incomplete_reserved_tokens
                    )
                } else {
                    String::new()
                }
            ),
        ));
        if a.oracle_calls > 0 {
            facts.push(("oracle calls", a.oracle_calls.to_string()));
        }
        facts
    }

    /// The artifacts section: the outcome's artifacts with their digests and sizes, then the
    /// logs' and agent metrics' text, each clipped as `read_text` reads it.
    fn artifacts_section(
        &self,
        o: &mut String,
        id: &str,
        artifacts: Option<&events::ArtifactDigests>,
    ) -> Result<(), SiteError> {
        let _ = writeln!(o, "<h2 id=\"artifacts\">Artifacts</h2>");
        match artifacts {
            None => {
                let _ = writeln!(o, "<p>No outcome recorded, so no artifacts.</p>");
            }
            Some(arts) => {
                let _ = writeln!(
                    o,
                    "<table><tr><th>artifact</th><th>digest</th><th>bytes</th></tr>"
                );
                let list = [
                    ("workspace", &arts.workspace),
                    ("grader_output", &arts.grader_output),
                    ("grader_log", &arts.grader_log),
                    ("agent_log", &arts.agent_log),
                    ("agent_metrics", &arts.agent_metrics),
                    ("transcript", &arts.transcript),
                ];
                let mut shown = Vec::new();
                for (name, digest) in list {
                    let Some(digest) = digest else { continue };
                    let size = self.artifact_size(digest);
                    let _ = writeln!(
                        o,
                        "<tr><td>{name}</td><td><code>{}</code></td><td>{}</td></tr>",
                        esc(digest),
                        size.map_or("missing".into(), |s| s.to_string())
                    );
                    if matches!(name, "grader_log" | "agent_log" | "agent_metrics") {
                        shown.push((name, digest));
                    }
                }
                let _ = writeln!(o, "</table>");
                for (name, digest) in shown {
                    if let Some(t) = self.read_text(id, name, Some(digest))? {
                        let _ = writeln!(
                            o,
                            "<details id=\"artifact-{name}\"><summary>{name} ({} bytes{})</summary><pre>{}</pre></details>",
                            t.total,
                            if t.total > t.text.len() {
                                format!(", the first {} shown", t.text.len())
                            } else {
                                String::new()
                            },
                            esc(&t.text)
                        );
                    }
                }
            }
        }
        Ok(())
    }

    fn calls_section(&self, o: &mut String, d: &AttemptDetail) {
        let _ = writeln!(o, "<h2 id=\"calls\">Model calls ({})</h2>", d.calls.len());
        if d.calls.is_empty() {
            let _ = writeln!(o, "<p>None recorded.</p>");
        } else {
            let by_round = !d.rounds.is_empty();
            let _ = writeln!(
                o,
                "<table class=\"calls\"><tr><th>#</th>{}<th>role</th><th>model</th><th>status</th><th>result</th><th>tokens in / cached / out / reasoning</th><th>latency (ms)</th><th>tools offered</th><th>request / response digest</th><th>ledger seq</th></tr>",
                if by_round { "<th>round</th>" } else { "" }
            );
            for (seq, c) in &d.calls {
                let r = &c.record;
                let tools = r
                    .pointer("/wire/tools")
                    .and_then(Value::as_array)
                    .map(|t| {
                        t.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                let digest = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("—").to_owned();
                let detail = r.get("detail").and_then(Value::as_str);
                let _ = writeln!(
                    o,
                    "<tr><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td><td>{}{}</td><td>{} / {} / {} / {}</td><td>{}</td><td>{}</td><td>{}<br>{}</td><td>{seq}</td></tr>",
                    c.seq,
                    if by_round {
                        format!(
                            "<td>{}</td>",
                            d.call_rounds
                                .get(seq)
                                .map_or("—".to_owned(), u32::to_string)
                        )
                    } else {
                        String::new()
                    },
                    esc(&c.role),
                    esc(c.model.as_deref().unwrap_or("")),
                    c.status,
                    esc(&c.result),
                    detail.map(|x| format!(": {}", esc(x))).unwrap_or_default(),
                    c.tokens.input,
                    c.tokens.cached,
                    c.tokens.output,
                    c.tokens.reasoning,
                    c.latency_ms,
                    esc(&tools),
                    short_digest(&digest("request_digest")),
                    short_digest(&digest("response_digest"))
                );
            }
            let _ = writeln!(o, "</table>");
        }
        if !d.unfinished_calls.is_empty() {
            let _ = writeln!(
                o,
                "<p class=\"note\">Started but never recorded as finished (in flight when the attempt ended): proxy seq {}.</p>",
                d.unfinished_calls
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }

    /// The attempt's calls read from the wire log, in ledger order, as `eval show` reads them;
    /// every artifact re-hashed.
    fn call_views(
        &self,
        id: &str,
        d: &AttemptDetail,
    ) -> Result<Vec<crate::show::CallView>, SiteError> {
        let Some(store) = self.store else {
            return Ok(Vec::new());
        };
        let mut conv = eval_runlog::wire_log::Conversations::new(store);
        d.calls
            .iter()
            .map(|(seq, c)| {
                crate::show::call_view(&mut conv, *seq, c.clone()).map_err(|f| SiteError::WireLog {
                    attempt: id.to_owned(),
                    message: f.to_string(),
                })
            })
            .collect()
    }

    fn artifact_size(&self, digest: &str) -> Option<u64> {
        let store = self.store?;
        let d = Digest::parse(digest)?;
        std::fs::metadata(store.path_of(&d)).ok().map(|m| m.len())
    }

    /// The first [`INLINE_BYTES`] of an artifact as text, its bytes re-hashed first.
    fn read_text(
        &self,
        attempt: &str,
        name: &str,
        digest: Option<&str>,
    ) -> Result<Option<Text>, SiteError> {
        let (Some(store), Some(digest)) = (self.store, digest) else {
            return Ok(None);
        };
        let fail = |source| SiteError::Artifact {
            attempt: attempt.to_owned(),
            name: name.to_owned(),
            digest: digest.to_owned(),
            source: Box::new(source),
        };
        let d = Digest::parse(digest).ok_or_else(|| {
            fail(eval_evidence::artifacts::ArtifactError::Io {
                path: digest.into(),
                source: std::io::Error::other("not a sha256 digest"),
            })
        })?;
        let bytes = store.get(&d).map_err(fail)?;
        let total = bytes.len();
        let cut = total.min(INLINE_BYTES);
        Ok(Some(Text {
            total,
            full: (cut == total).then(|| String::from_utf8_lossy(&bytes).into_owned()),
            text: String::from_utf8_lossy(&bytes[..cut]).into_owned(),
        }))
    }
}

/// A multi-round attempt's rounds (docs/rounds.md), one row each, from its `round_started`
/// and `round_finished` entries; nothing for a single-round attempt.
pub fn rounds_table(o: &mut String, d: &AttemptDetail, size: impl Fn(&str) -> Option<u64>) {
    if d.rounds.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "<h2 id=\"rounds\">Rounds ({})</h2><table class=\"rounds\"><tr><th>round</th><th>status</th><th>failures</th><th>harness</th><th>graded</th><th>metrics</th><th>turns</th><th>tokens</th><th>calls</th><th>artifacts</th><th>started / finished</th></tr>",
        d.rounds.len()
    );
    let opt = |n: Option<u64>| n.map_or("—".to_owned(), |n| n.to_string());
    for r in &d.rounds {
        let harness = r.harness.as_ref().map_or("—".to_owned(), |h| {
            let mut parts = Vec::new();
            if let Some(e) = h.exit {
                parts.push(format!("exit {e}"));
            }
            if let Some(s) = h.signal {
                parts.push(format!("signal {s}"));
            }
            if h.timed_out {
                parts.push("timed out".into());
            }
            if h.with_container {
                parts.push("with the container".into());
            }
            parts.join(", ")
        });
        let metrics: Vec<String> = r
            .metrics
            .iter()
            .map(|(k, v)| format!("{} {}", esc(k), num(*v)))
            .collect();
        let artifacts: Vec<String> = r
            .artifacts
            .iter()
            .map(|a| {
                format!(
                    "{} <code title=\"{}\">{}</code> ({})",
                    esc(&a.name),
                    esc(&a.digest),
                    esc(&short_digest(&a.digest)),
                    size(&a.digest).map_or("missing".into(), |b| format!("{b} bytes"))
                )
            })
            .collect();
        let status_class = match r.status.as_str() {
            "passed" => "pass",
            "failed" => "fail",
            _ => "note",
        };
        let _ = writeln!(
            o,
            "<tr id=\"round-{}\"><td>{}</td><td class=\"{status_class}\">{}</td><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}<br>{}</td></tr>",
            r.round,
            r.round,
            esc(&r.status),
            esc(&r.failures.join(", ")),
            esc(&harness),
            esc(r.graded.as_deref().unwrap_or("—")),
            r.detail
                .as_ref()
                .map(|x| format!(": {}", esc(x)))
                .unwrap_or_default(),
            metrics.join("<br>"),
            opt(r.model_turns),
            opt(r.tokens),
            r.calls
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            artifacts.join("<br>"),
            esc(r.started_at.as_deref().unwrap_or("—")),
            esc(r.finished_at.as_deref().unwrap_or("—"))
        );
    }
    let _ = writeln!(o, "</table>");
}

/// An artifact's text as a page shows it.
pub struct Text {
    pub total: usize,
    /// The first [`INLINE_BYTES`] (lossy UTF-8).
    pub text: String,
    /// The whole text when it fits in [`INLINE_BYTES`] (what is parsed as JSON).
    pub full: Option<String>,
}

/// A digest shortened for a table cell; the whole one is its tooltip.
fn short_digest(d: &str) -> String {
    let short: String = d.chars().take(23).collect();
    if short.len() < d.len() {
        format!("<code title=\"{}\">{}…</code>", esc(d), esc(&short))
    } else {
        format!("<code>{}</code>", esc(d))
    }
}

/// A list item of [`folded`] text.
fn long_item(o: &mut String, text: &str) {
    let _ = writeln!(o, "<li>{}</li>", folded(text));
}

/// Escaped text; a long one (a reason naming every attempt, say) shows its start and folds the
/// rest.
fn folded(text: &str) -> String {
    const SHOWN: usize = 400;
    if text.len() <= SHOWN + 100 {
        return esc(text);
    }
    let mut cut = SHOWN;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "<details><summary>{}…</summary>{}</details>",
        esc(&text[..cut]),
        esc(&text[cut..])
    )
}

fn phase_rank(p: Phase) -> u8 {
    match p {
        Phase::Infrastructure => 0,
        Phase::Control => 1,
        Phase::Statistical => 2,
    }
}

/// The suite's arms as its table orders them: the baseline, then the compared arms.
fn suite_arms(s: &SuiteReport) -> Vec<&String> {
    let mut out: Vec<&String> = vec![&s.baseline];
    for c in &s.comparisons {
        if !out.contains(&&c.arm) {
            out.push(&c.arm);
        }
    }
    out
}

fn evidence_text(r: &Report) -> String {
    match &r.evidence {
        Some(e) if e.signed => format!(
            "signed: {} checkpoints verified with {}, entries 1..{} covered; {} artifacts re-hashed",
            e.checkpoints,
            e.public_key.as_deref().unwrap_or("?"),
            e.covered_entries,
            e.artifacts_verified.unwrap_or(0)
        ),
        Some(e) => format!(
            "unsigned (hash chain only); {} artifacts re-hashed",
            e.artifacts_verified.unwrap_or(0)
        ),
        None => "not recorded".into(),
    }
}

fn rules_table(o: &mut String, rules: &[RuleResult]) {
    use eval_evidence::report::render::{rule_cond, rule_subject, rule_value};
    eval_evidence::html::table_head(
        o,
        " class=\"rules\"",
        &[
            "rule",
            "statistic",
            "value",
            "condition",
            "verdict",
            "method",
            "tasks",
            "reason",
        ],
    );
    for r in rules {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.id),
            esc(&rule_subject(r)),
            esc(&rule_value(r)),
            esc(&rule_cond(r)),
            eval_evidence::html::pass_class(r.verdict == Verdict::Pass),
            verdict_text(r.verdict),
            esc(r.method.as_deref().unwrap_or("")),
            r.n_tasks.map_or(String::new(), |n| n.to_string()),
            folded(r.reason.as_deref().unwrap_or(""))
        );
    }
    let _ = writeln!(o, "</table>");
}

/// The conversation: per call, from the wire log (the messages it added and the reply), then
/// the harness's tool calls and its transcript where the runtime keeps one.
fn conversation_section(
    o: &mut String,
    d: &AttemptDetail,
    views: &[crate::show::CallView],
    transcript: Option<&Text>,
) {
    let _ = writeln!(o, "<h2 id=\"conversation\">Conversation</h2>");
    let wire = wire_conversation(o, views);
    if let Some(t) = transcript {
        if let Some(full) = &t.full {
            harness_tools(o, &crate::show::harness_calls(full.as_bytes()));
        }
        let _ = writeln!(
            o,
            "<details class=\"transcript\"><summary>The harness's own transcript ({} bytes{}), line by line</summary>",
            t.total,
            if t.full.is_none() {
                format!(", the first {} shown", t.text.len())
            } else {
                String::new()
            }
        );
        for (i, line) in t.text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            let (kind, body) = match serde_json::from_str::<Value>(line) {
                Ok(v) => (
                    v.get("type")
                        .or_else(|| v.get("kind"))
                        .and_then(Value::as_str)
                        .unwrap_or("entry")
                        .to_owned(),
                    serde_json::to_string_pretty(&v).unwrap_or_else(|_| line.to_owned()),
                ),
                Err(_) => ("text".to_owned(), line.to_owned()),
            };
            let _ = writeln!(
                o,
                "<details><summary>{} {}</summary><pre>{}</pre></details>",
                i + 1,
                esc(&kind),
                esc(&body)
            );
        }
        let _ = writeln!(o, "</details>");
    } else if !wire {
        let _ = writeln!(
            o,
            "<p class=\"note\">{}</p>",
            if d.calls.is_empty() {
                "No model call was recorded."
            } else {
                "This run's ledger records no wire log for these calls (digests, tokens and latency are above), and the runtime keeps no transcript."
            }
        );
    }
}

/// The most of one message's or reply's text shown on an attempt page.
pub const MESSAGE_CHARS: usize = 16 * 1024;

/// Escaped text, cut at [`MESSAGE_CHARS`] with what was left out said.
fn message_text(s: &str) -> String {
    let n = s.chars().count();
    if n <= MESSAGE_CHARS {
        return esc(s);
    }
    let head: String = s.chars().take(MESSAGE_CHARS).collect();
    format!(
        "{}\n… ({} more characters in the wire log)",
        esc(&head),
        n - MESSAGE_CHARS
    )
}

fn tool_calls_html(o: &mut String, calls: &[eval_runlog::wire_log::ToolCall]) {
    if calls.is_empty() {
        return;
    }
    let _ = writeln!(o, "<ul class=\"tool-calls\">");
    for t in calls {
        let _ = writeln!(
            o,
            "<li>tool call <code>{}</code>{}<pre>{}</pre></li>",
            esc(t.name.as_deref().unwrap_or("?")),
            t.id.as_ref()
                .map(|i| format!(" (<code>{}</code>)", esc(i)))
                .unwrap_or_default(),
            message_text(&t.arguments)
        );
    }
    let _ = writeln!(o, "</ul>");
}

/// The conversation from the wire log: per call, the messages it added and the reply, as
/// `eval show` reads them (`commands::show::call_view`).
fn wire_conversation(o: &mut String, calls: &[crate::show::CallView]) -> bool {
    let mut any = false;
    for c in calls {
        let _ = writeln!(
            o,
            "<section class=\"call\" id=\"call-{}\"><h3>Call {} — {} {}, {} tokens in / {} out, {} ms</h3>",
            c.call,
            c.call,
            esc(&c.role),
            c.status,
            c.tokens.input,
            c.tokens.output,
            c.latency_ms
        );
        match &c.request {
            Some(r) => {
                any = true;
                let _ = writeln!(
                    o,
                    "<p class=\"note\">{} messages; {} sent before, {} new:</p>",
                    r.messages,
                    r.kept,
                    r.new_messages.len()
                );
                for m in &r.new_messages {
                    let role = m.role.as_deref().unwrap_or("?");
                    let _ = writeln!(
                        o,
                        "<div class=\"msg {}\"><strong>{}</strong>{}{}<pre>{}</pre>",
                        safe_name(role),
                        esc(role),
                        m.tool_call_id
                            .as_ref()
                            .map(|i| format!(" for <code>{}</code>", esc(i)))
                            .unwrap_or_default(),
                        m.reasoning_chars
                            .map(|n| format!(" (reasoning: {n} characters)"))
                            .unwrap_or_default(),
                        message_text(&m.text)
                    );
                    tool_calls_html(o, &m.tool_calls);
                    let _ = writeln!(o, "</div>");
                }
            }
            None => {
                let _ = writeln!(
                    o,
                    "<p class=\"note\">No request in the wire log{}.</p>",
                    c.wire_log
                        .as_ref()
                        .and_then(|w| w.omitted.as_ref())
                        .map(|x| format!(": {}", esc(x)))
                        .unwrap_or_default()
                );
            }
        }
        if let Some(r) = &c.reply {
            any = true;
            let _ = writeln!(
                o,
                "<div class=\"msg assistant reply\"><strong>reply</strong>{}{}{}<pre>{}</pre>",
                r.finish_reason
                    .as_ref()
                    .map(|f| format!(" (finish: {})", esc(f)))
                    .unwrap_or_default(),
                if r.reasoning_chars > 0 {
                    format!(" (reasoning: {} characters)", r.reasoning_chars)
                } else {
                    String::new()
                },
                if r.truncated {
                    " (cut at the per-call cap)"
                } else {
                    ""
                },
                message_text(&r.text)
            );
            tool_calls_html(o, &r.tool_calls);
            if let Some(e) = &r.error {
                let _ = writeln!(
                    o,
                    "<p class=\"fail\">error: <code>{}</code></p>",
                    esc(&e.to_string())
                );
            }
            let _ = writeln!(o, "</div>");
        }
        let _ = writeln!(o, "</section>");
    }
    any
}

fn harness_tools(o: &mut String, calls: &[crate::show::HarnessToolCall]) {
    if calls.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "<h3 id=\"harness-tools\">The harness's tool calls ({})</h3><table class=\"harness-tools\"><tr><th>#</th><th>tool</th><th>arguments</th><th>result</th></tr>",
        calls.len()
    );
    for (i, t) in calls.iter().enumerate() {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td><code>{}</code></td><td><pre>{}</pre></td><td class=\"{}\"><pre>{}</pre></td></tr>",
            i + 1,
            esc(t.name.as_deref().unwrap_or("?")),
            message_text(t.arguments.as_deref().unwrap_or("")),
            if t.is_error { "fail" } else { "" },
            message_text(t.result.as_deref().unwrap_or("(no result recorded)"))
        );
    }
    let _ = writeln!(o, "</table>");
}

/// The grader's `score.json`: its metrics, each list of checks (objects with a `passed` field)
/// as a table, the rest as JSON. Returns passed / total of the first check list.
fn grader_section(o: &mut String, grader: Option<&Text>) -> Option<(usize, usize)> {
    let _ = writeln!(o, "<h2 id=\"grader\">Grader</h2>");
    let Some(t) = grader else {
        let _ = writeln!(o, "<p>No grader output recorded.</p>");
        return None;
    };
    let parsed = t
        .full
        .as_deref()
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    let Some(Value::Object(map)) = parsed else {
        let _ = writeln!(
            o,
            "<p class=\"note\">Not a JSON object; as recorded:</p><pre>{}</pre>",
            esc(&t.text)
        );
        return None;
    };
    let mut first = None;
    let mut rest = serde_json::Map::new();
    for (k, v) in &map {
        let checks = v.as_array().filter(|items| {
            !items.is_empty()
                && items
                    .iter()
                    .all(|i| i.as_object().is_some_and(|m| m.contains_key("passed")))
        });
        let Some(items) = checks else {
            rest.insert(k.clone(), v.clone());
            continue;
        };
        let passed = items
            .iter()
            .filter(|i| i.get("passed") == Some(&Value::Bool(true)))
            .count();
        if first.is_none() {
            first = Some((passed, items.len()));
        }
        let _ = writeln!(
            o,
            "<h3 class=\"checks\">{} — {passed} of {} passed</h3><table class=\"checks\"><tr><th>#</th><th>check</th><th>passed</th><th>details</th></tr>",
            esc(k),
            items.len()
        );
        for (i, item) in items.iter().enumerate() {
            let name = ["name", "id", "check", "title"]
                .iter()
                .find_map(|f| item.get(*f).and_then(Value::as_str))
                .unwrap_or("");
            let ok = item.get("passed") == Some(&Value::Bool(true));
            let mut others = item.as_object().cloned().unwrap_or_default();
            for f in ["name", "id", "check", "title", "passed"] {
                others.remove(f);
            }
            let mut details = if others.is_empty() {
                String::new()
            } else {
                Value::Object(others).to_string()
            };
            if details.len() > 2000 {
                let mut cut = 2000;
                while !details.is_char_boundary(cut) {
                    cut -= 1;
                }
                details.truncate(cut);
                details.push('…');
            }
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td><code>{}</code></td></tr>",
                i + 1,
                esc(name),
                if ok { "pass" } else { "fail" },
                if ok { "yes" } else { "no" },
                esc(&details)
            );
        }
        let _ = writeln!(o, "</table>");
    }
    if first.is_none() {
        let _ = writeln!(o, "<p class=\"note\">The grader lists no checks.</p>");
    }
    if !rest.is_empty() {
        let _ = writeln!(
            o,
            "<details><summary>the rest of score.json</summary><pre>{}</pre></details>",
            esc(&serde_json::to_string_pretty(&Value::Object(rest)).unwrap_or_default())
        );
    }
    first
}

fn mkdir(p: &Path) -> Result<(), SiteError> {
    std::fs::create_dir_all(p).map_err(|source| SiteError::Write {
        path: p.to_path_buf(),
        source,
    })
}

fn put(dir: &Path, rel: &str, bytes: &[u8], sum: &mut SiteSummary) -> Result<(), SiteError> {
    let path = dir.join(rel);
    eval_protocols::statefs::replace_file(&path, bytes)
        .map_err(|source| SiteError::Write { path, source })?;
    sum.bytes += bytes.len() as u64;
    Ok(())
}

/// The facts rows of an attempt's recorded outcome: its detail, whether the controller closed
/// it, its image, timings, accounting, the harness's own account and when it finished.
fn outcome_facts(facts: &mut Vec<(&'static str, String)>, o: &events::AttemptOutcome) {
    if let Some(x) = &o.detail {
        facts.push(("detail", esc(x)));
    }
    if o.closed_by_controller {
        facts.push((
            "closed by",
            "the controller (the attempt did not end by itself)".into(),
        ));
    }
    if let Some(i) = &o.image {
        facts.push(("image", format!("<code>{}</code>", esc(i))));
    }
    facts.push((
        "timings",
        format!(
            "agent {} s, preparation {} s, inside containers {} s",
            num(o.duration_seconds),
            num(o.prepare_seconds),
            num(o.container_seconds)
        ),
    ));
    if let Some(acc) = &o.accounting {
        facts.push(("accounting", esc(acc)));
    }
    if let Some(h) = &o.harness {
        facts.push((
            "harness's own account",
            format!("{} turns, {} tokens", h.model_turns, h.total_tokens),
        ));
    }
    facts.push(("finished at", esc(&o.finished_at)));
}

/// The clarifying questions and their answers, when the attempt asked any.
fn clarifications_section(o: &mut String, d: &AttemptDetail) {
    if !d.clarifications.is_empty() {
        let _ = writeln!(o, "<h2 id=\"clarifications\">Clarifying questions</h2>");
        for c in &d.clarifications {
            let _ = writeln!(
                o,
                "<div class=\"msg user\"><strong>Question {}</strong><pre>{}</pre></div><div class=\"msg assistant\"><strong>Answer ({})</strong><pre>{}</pre></div>",
                c.index,
                esc(&c.question),
                esc(&c.source),
                esc(c.answer.as_deref().unwrap_or("(refused)"))
            );
        }
    }
}

/// The notes and refused requests of an attempt, when it has any.
fn notes_section(o: &mut String, d: &AttemptDetail) {
    if !d.notes.is_empty() || !d.agent_events.is_empty() {
        let _ = writeln!(o, "<h2 id=\"notes\">Notes and refused requests</h2><ul>");
        for n in &d.notes {
            let _ = writeln!(o, "<li>{}</li>", esc(n));
        }
        for e in &d.agent_events {
            let _ = writeln!(
                o,
                "<li>refused <code>{}</code>{}: {} bytes, <code>{}</code></li>",
                esc(&e.event),
                e.reason
                    .as_ref()
                    .map(|r| format!(" ({})", esc(r)))
                    .unwrap_or_default(),
                e.len,
                esc(&e.body_sha256)
            );
        }
        let _ = writeln!(o, "</ul>");
    }
}

/// Whether the attempt's image was attested, when the ledger has an attestation.
fn attestation_section(o: &mut String, d: &AttemptDetail) {
    if let Some(at) = &d.attestation {
        let _ = writeln!(
            o,
            "<h2 id=\"attestation\">Attestation</h2><p>{} image <code>{}</code>{}</p>",
            if at.ok {
                "verified:"
            } else {
                "<strong class=\"fail\">not verified</strong>:"
            },
            esc(&at.image),
            if at.problems.is_empty() {
                String::new()
            } else {
                format!(" — {}", esc(&at.problems.join("; ")))
            }
        );
    }
}
