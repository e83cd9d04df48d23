//! Sensitivity analyses beside a report: `eval regrade`'s re-gradings of a finished run's
//! archived workspaces with another grader.
//!
//! They are attached to a [`Report`](super::Report) after [`build_report`](super::build_report)
//! has decided the verdict, and nothing that decides it reads them: a regrade is shown, labelled,
//! and never changes `release_allowed`, the reasons or the exit status.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::run_data::LedgerHeadRef;

/// The label every rendering puts on the section.
pub const LABEL: &str =
    "Sensitivity analyses (eval regrade): not preregistered; they never change the verdict above";

/// One regrade of the run: a grader other than the frozen one over the archived workspaces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sensitivity {
    /// The regrade's own identity (`sha256:…` of its identity text).
    pub identity: String,
    /// The grader runtime definition it used (project-relative `runtime.toml`).
    pub grader: String,
    /// The digest of that definition's directory (`eval-tree-manifest v1`).
    pub grader_tree: String,
    /// The original run's ledger head the regrade was based on.
    pub based_on: LedgerHeadRef,
    /// The regrade ledger's own head.
    pub ledger_head: LedgerHeadRef,
    /// The tasks it regraded.
    pub tasks: Vec<String>,
    /// Its ledger holds `regrade_finished`.
    pub finished: bool,
    /// Why it may not be what it says (a ledger that does not verify, a base that is not this
    /// run's ledger); shown, never a reason of the verdict.
    #[serde(default)]
    pub problems: Vec<String>,
    /// Every regraded attempt, in the order it was regraded.
    pub attempts: Vec<RegradedAttempt>,
    /// Per suite, arm and metric: the preregistered grader's mean beside the regrade's.
    pub arms: Vec<ArmComparison>,
}

/// One attempt, graded twice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegradedAttempt {
    /// `<slot>#<n>`.
    pub attempt: String,
    /// The attempt's suite.
    pub suite: String,
    /// The attempt's task.
    pub task: String,
    /// The attempt's arm.
    pub arm: String,
    /// `scored`, `unscorable`, `not_run` or `no_workspace`.
    pub graded: String,
    /// What the grader said when it gave no score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The metrics the run recorded (the preregistered grader's).
    pub original: BTreeMap<String, f64>,
    /// The regrade's metrics (empty when it gave no score).
    pub regraded: BTreeMap<String, f64>,
}

/// A suite's arm under both graders, over the attempts both scored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmComparison {
    /// The suite.
    pub suite: String,
    /// The arm.
    pub arm: String,
    /// The metric (as both graders' `score.json` name it).
    pub metric: String,
    /// Attempts with the metric under both graders.
    pub attempts: u64,
    /// The preregistered grader's mean over those attempts.
    pub original_mean: f64,
    /// The regrade's mean over the same attempts.
    pub regraded_mean: f64,
}

/// The per-arm comparison of `attempts`: for each suite, arm and metric, the means over the
/// attempts whose metric both graders gave.
pub fn compare(attempts: &[RegradedAttempt]) -> Vec<ArmComparison> {
    let mut sums: BTreeMap<(String, String, String), (u64, f64, f64)> = BTreeMap::new();
    for a in attempts {
        for (m, new) in &a.regraded {
            if let Some(old) = a.original.get(m) {
                let s = sums
                    .entry((a.suite.clone(), a.arm.clone(), m.clone()))
                    .or_default();
                s.0 += 1;
                s.1 += old;
                s.2 += new;
            }
        }
    }
    sums.into_iter()
        .map(|((suite, arm, metric), (n, old, new))| ArmComparison {
            suite,
            arm,
            metric,
            attempts: n,
            original_mean: old / n as f64,
            regraded_mean: new / n as f64,
        })
        .collect()
}

fn status(s: &Sensitivity) -> String {
    let mut t = if s.finished {
        format!("{} attempts", s.attempts.len())
    } else {
        format!("{} attempts, UNFINISHED", s.attempts.len())
    };
    for p in &s.problems {
        let _ = write!(t, "; PROBLEM: {p}");
    }
    t
}

fn mean(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.4}")
    } else {
        format!("{v}")
    }
}

/// The section as plain text (empty when there is no regrade).
pub fn text(all: &[Sensitivity]) -> String {
    let mut o = String::new();
    if all.is_empty() {
        return o;
    }
    let _ = writeln!(o, "\n{LABEL}:");
    for s in all {
        let _ = writeln!(
            o,
            "  regrade {} with grader {} (tree {}), based on ledger head {}:{}: {}",
            s.identity,
            s.grader,
            s.grader_tree,
            s.based_on.seq,
            s.based_on.hash,
            status(s)
        );
        for c in &s.arms {
            let _ = writeln!(
                o,
                "    {}/{} {}: preregistered grader {}, regrade {} ({} attempts)",
                c.suite,
                c.arm,
                c.metric,
                mean(c.original_mean),
                mean(c.regraded_mean),
                c.attempts
            );
        }
    }
    o
}

/// The section as Markdown (empty when there is no regrade); `escape` is the renderer's.
pub fn markdown(all: &[Sensitivity], escape: fn(&str) -> String) -> String {
    let mut o = String::new();
    if all.is_empty() {
        return o;
    }
    let _ = writeln!(o, "\n## Sensitivity analyses\n\n_{LABEL}._");
    for s in all {
        let _ = writeln!(
            o,
            "\n- regrade `{}` with grader `{}` (tree `{}`), based on ledger head {}:`{}`: {}\n\n| suite | arm | metric | preregistered grader | regrade | attempts |\n|---|---|---|---|---|---|",
            s.identity,
            escape(&s.grader),
            s.grader_tree,
            s.based_on.seq,
            s.based_on.hash,
            escape(&status(s))
        );
        for c in &s.arms {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} |",
                escape(&c.suite),
                escape(&c.arm),
                escape(&c.metric),
                mean(c.original_mean),
                mean(c.regraded_mean),
                c.attempts
            );
        }
    }
    o
}

/// The section as HTML (empty when there is no regrade); `esc` is the page's escaper, through
/// which every name goes.
pub fn html(all: &[Sensitivity], esc: fn(&str) -> String) -> String {
    let mut o = String::new();
    if all.is_empty() {
        return o;
    }
    let _ = writeln!(
        o,
        "<h2 id=\"sensitivity\">Sensitivity analyses</h2><p class=\"note\">{}.</p>",
        esc(LABEL)
    );
    for s in all {
        let _ = writeln!(
            o,
            "<p class=\"regrade\">regrade <code>{}</code> with grader <code>{}</code> (tree <code>{}</code>), based on ledger head {}:<code>{}</code>: {}</p>",
            esc(&s.identity),
            esc(&s.grader),
            esc(&s.grader_tree),
            s.based_on.seq,
            esc(&s.based_on.hash),
            esc(&status(s))
        );
        let _ = writeln!(
            o,
            "<table><tr><th>suite</th><th>arm</th><th>metric</th><th>preregistered grader</th><th>regrade</th><th>attempts</th></tr>"
        );
        for c in &s.arms {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.suite),
                esc(&c.arm),
                esc(&c.metric),
                mean(c.original_mean),
                mean(c.regraded_mean),
                c.attempts
            );
        }
        let _ = writeln!(o, "</table>");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(arm: &str, old: f64, new: Option<f64>) -> RegradedAttempt {
        RegradedAttempt {
            attempt: format!("{arm}#1"),
            suite: "s".into(),
            task: "t".into(),
            arm: arm.into(),
            graded: if new.is_some() {
                "scored"
            } else {
                "unscorable"
            }
            .into(),
            detail: None,
            original: [("score".to_owned(), old)].into(),
            regraded: new.map(|n| ("score".to_owned(), n)).into_iter().collect(),
        }
    }

    /// Means are over the attempts both graders scored; an unscored regrade is left out, not
    /// counted as zero.
    #[test]
    fn the_comparison_is_over_attempts_both_graders_scored() {
        let c = compare(&[
            at("a", 1.0, Some(0.0)),
            at("a", 0.5, Some(0.5)),
            at("a", 1.0, None),
            at("b", 0.0, Some(1.0)),
        ]);
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].arm.as_str(), c[0].attempts), ("a", 2));
        assert!((c[0].original_mean - 0.75).abs() < 1e-12);
        assert!((c[0].regraded_mean - 0.25).abs() < 1e-12);
        assert_eq!((c[1].arm.as_str(), c[1].regraded_mean), ("b", 1.0));
    }
}
