//! The fixture grader's checks (`hidden/checks.toml`) and its output (`score.json`).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::task::is_safe_relative;

/// A task's `hidden/checks.toml`: what the grader checks in the final workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checks {
    /// The checks (`[[check]]`), at least one.
    #[serde(default, rename = "check")]
    pub checks: Vec<Check>,
    /// Extra metric names that repeat an existing metric's value (e.g. `hidden_score = "score"`).
    #[serde(default)]
    pub alias: BTreeMap<String, String>,
}

/// One condition on one workspace file, worth `points` when it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The check's id (named in errors).
    pub id: String,
    /// The file checked, relative to the workspace; a symbolic link never counts as a file.
    pub path: String,
    /// Passes when the file's text contains this.
    #[serde(default)]
    pub contains: Option<String>,
    /// Passes when the file exists and its text does not contain this.
    #[serde(default)]
    pub not_contains: Option<String>,
    /// Passes when the file's text is exactly this.
    #[serde(default)]
    pub equals: Option<String>,
    /// Passes when nothing exists at `path`.
    #[serde(default)]
    pub absent: bool,
    /// Weight of the check in `score` (default 1, finite and ≥ 0).
    #[serde(default = "one")]
    pub points: f64,
    /// A failed critical check counts in `critical_missed`.
    #[serde(default)]
    pub critical: bool,
    /// A failed check marked so counts in `regressions` (something that worked was broken).
    #[serde(default)]
    pub regression: bool,
}

fn one() -> f64 {
    1.0
}

/// A `checks.toml` the grader refuses; each variant names the check at fault.
#[derive(Debug, thiserror::Error)]
pub enum ChecksError {
    /// Not valid TOML of the expected shape.
    #[error("checks.toml: {0}")]
    Toml(#[from] toml::de::Error),
    /// The check (id given) states no condition or more than one.
    #[error("check {0}: exactly one of contains, not_contains, equals, absent must be given")]
    Kind(String),
    /// The check's (id given) path is absolute or leaves the workspace.
    #[error("check {0}: path must be relative and stay inside the workspace")]
    Path(String),
    /// The check's (id given) points are negative or not finite.
    #[error("check {0}: points must be a finite number >= 0")]
    Points(String),
    /// An alias (name, target) whose target is not one of [`METRICS`].
    #[error("checks.toml: alias {0} names unknown metric {1}")]
    Alias(String, String),
    /// The file declares no checks, so nothing could be scored.
    #[error("checks.toml has no checks")]
    Empty,
}

/// The metrics every `score.json` of this grader carries (aliases may add names).
pub const METRICS: [&str; 5] = [
    "score",
    "checks_passed",
    "checks_total",
    "critical_missed",
    "regressions",
];

impl Checks {
    /// Parses and checks `checks.toml` text.
    pub fn parse(text: &str) -> Result<Self, ChecksError> {
        let c: Checks = toml::from_str(text)?;
        if c.checks.is_empty() {
            return Err(ChecksError::Empty);
        }
        for check in &c.checks {
            let kinds = usize::from(check.contains.is_some())
                + usize::from(check.not_contains.is_some())
                + usize::from(check.equals.is_some())
                + usize::from(check.absent);
            if kinds != 1 {
                return Err(ChecksError::Kind(check.id.clone()));
            }
            if !is_safe_relative(&check.path) {
                return Err(ChecksError::Path(check.id.clone()));
            }
            if !check.points.is_finite() || check.points < 0.0 {
                return Err(ChecksError::Points(check.id.clone()));
            }
        }
        for (name, target) in &c.alias {
            if !METRICS.contains(&target.as_str()) {
                return Err(ChecksError::Alias(name.clone(), target.clone()));
            }
        }
        Ok(c)
    }
}

/// The grader's `score.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Score {
    /// The grader's name (`eval-fixture-grader`).
    pub grader: String,
    /// File format version (1).
    pub format: u32,
    /// The best possible `score` (100).
    pub max_score: f64,
    /// Metric name → value: [`METRICS`] plus any aliases; `score` is the percentage of points
    /// earned.
    pub metrics: BTreeMap<String, f64>,
}

fn passes(check: &Check, workspace: &Path) -> bool {
    let path = workspace.join(&check.path);
    // Links are not followed: a workspace link to the hidden files must not score.
    let is_file = fs::symlink_metadata(&path)
        .map(|m| m.file_type().is_file())
        .unwrap_or(false);
    if check.absent {
        return fs::symlink_metadata(&path).is_err();
    }
    let text = if is_file {
        fs::read(&path)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    } else {
        None
    };
    match text {
        None => false,
        Some(t) => {
            if let Some(s) = &check.contains {
                t.contains(s.as_str())
            } else if let Some(s) = &check.not_contains {
                !t.contains(s.as_str())
            } else if let Some(s) = &check.equals {
                &t == s
            } else {
                false
            }
        }
    }
}

/// Grades a workspace.
pub fn grade(checks: &Checks, workspace: &Path) -> Score {
    let mut total = 0.0;
    let mut got = 0.0;
    let mut passed = 0.0;
    let mut critical_missed = 0.0;
    let mut regressions = 0.0;
    for c in &checks.checks {
        total += c.points;
        if passes(c, workspace) {
            got += c.points;
            passed += 1.0;
        } else {
            if c.critical {
                critical_missed += 1.0;
            }
            if c.regression {
                regressions += 1.0;
            }
        }
    }
    let score = if total > 0.0 {
        100.0 * got / total
    } else {
        0.0
    };
    let mut metrics = BTreeMap::new();
    metrics.insert("score".to_owned(), score);
    metrics.insert("checks_passed".to_owned(), passed);
    metrics.insert("checks_total".to_owned(), checks.checks.len() as f64);
    metrics.insert("critical_missed".to_owned(), critical_missed);
    metrics.insert("regressions".to_owned(), regressions);
    for (name, target) in &checks.alias {
        if let Some(v) = metrics.get(target).copied() {
            metrics.insert(name.clone(), v);
        }
    }
    Score {
        grader: "eval-fixture-grader".to_owned(),
        format: 1,
        max_score: 100.0,
        metrics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grades() {
        let dir = std::env::temp_dir().join(format!("eval-checks-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("a.txt"), "hello world\n").unwrap();
        let checks = Checks::parse(
            r#"
[[check]]
id = "c1"
path = "a.txt"
contains = "hello"
points = 30
[[check]]
id = "c2"
path = "b.txt"
equals = "x"
points = 70
critical = true
regression = true
[alias]
hidden_score = "score"
"#,
        )
        .unwrap();
        let s = grade(&checks, &dir);
        assert_eq!(s.metrics["score"], 30.0);
        assert_eq!(s.metrics["hidden_score"], 30.0);
        assert_eq!(s.metrics["critical_missed"], 1.0);
        assert_eq!(s.metrics["regressions"], 1.0);
        assert!(Checks::parse("[[check]]\nid=\"x\"\npath=\"a\"\n").is_err());
        assert!(Checks::parse("[[check]]\nid=\"x\"\npath=\"../a\"\nabsent=true\n").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
