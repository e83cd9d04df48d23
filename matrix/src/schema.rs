//! `matrix/<name>.toml`: which suites run which tasks with which arms, how often, in what order.
//!
//! ```toml
//! name = "v0.4"
//! protocol = "v0.4"          # the protocol whose arms and gates this matrix runs
//! concurrency = 4            # default for `eval run`
//!
//! [order]
//! algorithm = "mulberry32-fisher-yates"   # or "chacha8" with `seed = <u64>`
//! seed_string = "plan-lattice-v0.4-blind-90-2026-08-15"
//!
//! [[suites]]
//! id = "simple"
//! task_root = "protocols/v0.4/tasks/simple"   # relative to the project root
//! tasks = ["simple-js-clamp", …]              # bundles at task_root/<task id>
//! arms = ["native", "v0.3-always", "v0.4-auto"]
//! baseline = "native"
//! candidate = "v0.4-auto"                     # the gated arm; the others run but are not gated
//! repetitions = 2
//!
//! [[infra]]                                   # run first, in this order; never in statistics
//! suite = "simple"
//! task = "simple-js-clamp"
//! arm = "native"
//! ```

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    pub name: String,
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    #[serde(default)]
    pub order: Order,
    pub suites: Vec<Suite>,
    #[serde(default)]
    pub infra: Vec<InfraSlot>,
}

fn default_concurrency() -> usize {
    4
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "algorithm", deny_unknown_fields)]
pub enum Order {
    #[serde(rename = "chacha8")]
    Chacha8 {
        #[serde(default)]
        seed: u64,
    },
    #[serde(rename = "mulberry32-fisher-yates")]
    Mulberry32FisherYates { seed_string: String },
}

impl Default for Order {
    fn default() -> Self {
        Order::Chacha8 { seed: 0 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    pub id: String,
    pub task_root: String,
    pub tasks: Vec<String>,
    pub arms: Vec<String>,
    pub baseline: String,
    pub candidate: String,
    pub repetitions: u32,
}

impl Suite {
    /// The task bundle directory, relative to the project root.
    pub fn task_dir(&self, task: &str) -> String {
        format!("{}/{}", self.task_root.trim_end_matches('/'), task)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InfraSlot {
    pub suite: String,
    pub task: String,
    pub arm: String,
}

/// Bad matrix input: names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    Parse { file: PathBuf, message: String },
    #[error("{file}: field `{field}`: {message}")]
    Field {
        file: PathBuf,
        field: String,
        message: String,
    },
}

/// Ids become parts of attempt ids, container labels and file names: keep them plain.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !id.starts_with('.')
}

impl Matrix {
    /// Reads and validates `file`.
    pub fn load(file: &Path) -> Result<Matrix, MatrixError> {
        let text = std::fs::read_to_string(file).map_err(|source| MatrixError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        Self::parse(&text, file)
    }

    /// Parses and validates matrix text; `file` is only used in messages.
    pub fn parse(text: &str, file: &Path) -> Result<Matrix, MatrixError> {
        let m: Matrix = toml::from_str(text).map_err(|e| MatrixError::Parse {
            file: file.to_path_buf(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        m.validate(file)?;
        Ok(m)
    }

    fn validate(&self, file: &Path) -> Result<(), MatrixError> {
        let bad = |field: String, message: String| MatrixError::Field {
            file: file.to_path_buf(),
            field,
            message,
        };
        for (field, id) in [("name", &self.name), ("protocol", &self.protocol)] {
            if !valid_id(id) {
                return Err(bad(
                    field.into(),
                    format!("{id:?} is not a plain id ([A-Za-z0-9._-])"),
                ));
            }
        }
        if self.concurrency == 0 {
            return Err(bad("concurrency".into(), "must be at least 1".into()));
        }
        if let Order::Mulberry32FisherYates { seed_string } = &self.order
            && seed_string.is_empty()
        {
            return Err(bad("order.seed_string".into(), "must not be empty".into()));
        }
        if self.suites.is_empty() {
            return Err(bad("suites".into(), "at least one suite is needed".into()));
        }
        let mut suite_ids = HashSet::new();
        let mut task_ids = HashSet::new();
        for (i, s) in self.suites.iter().enumerate() {
            let f = |name: &str| format!("suites[{i}].{name}");
            if !valid_id(&s.id) {
                return Err(bad(f("id"), format!("{:?} is not a plain id", s.id)));
            }
            if !suite_ids.insert(s.id.as_str()) {
                return Err(bad(f("id"), format!("suite {:?} is declared twice", s.id)));
            }
            if s.tasks.is_empty() {
                return Err(bad(f("tasks"), "a suite needs at least one task".into()));
            }
            for t in &s.tasks {
                if !valid_id(t) {
                    return Err(bad(f("tasks"), format!("{t:?} is not a plain id")));
                }
                if !task_ids.insert(t.as_str()) {
                    return Err(bad(f("tasks"), format!("task id {t:?} appears twice")));
                }
            }
            let mut arms = HashSet::new();
            for a in &s.arms {
                if !valid_id(a) {
                    return Err(bad(f("arms"), format!("{a:?} is not a plain id")));
                }
                if !arms.insert(a.as_str()) {
                    return Err(bad(f("arms"), format!("arm {a:?} appears twice")));
                }
            }
            for (field, arm) in [("baseline", &s.baseline), ("candidate", &s.candidate)] {
                if !arms.contains(arm.as_str()) {
                    return Err(bad(
                        f(field),
                        format!(
                            "arm {arm:?} is not one of the suite's arms ({})",
                            s.arms.join(", ")
                        ),
                    ));
                }
            }
            if s.baseline == s.candidate {
                return Err(bad(
                    f("candidate"),
                    "the gated candidate must differ from the baseline".into(),
                ));
            }
            if s.repetitions == 0 {
                return Err(bad(f("repetitions"), "must be at least 1".into()));
            }
            if s.task_root.trim().is_empty() {
                return Err(bad(f("task_root"), "must not be empty".into()));
            }
        }
        let mut infra_seen = HashSet::new();
        for (i, slot) in self.infra.iter().enumerate() {
            let f = |name: &str| format!("infra[{i}].{name}");
            let Some(s) = self.suites.iter().find(|s| s.id == slot.suite) else {
                return Err(bad(
                    f("suite"),
                    format!("no suite {:?} in this matrix", slot.suite),
                ));
            };
            if !s.tasks.contains(&slot.task) {
                return Err(bad(
                    f("task"),
                    format!("suite {:?} has no task {:?}", s.id, slot.task),
                ));
            }
            if !s.arms.contains(&slot.arm) {
                return Err(bad(
                    f("arm"),
                    format!("suite {:?} does not run arm {:?}", s.id, slot.arm),
                ));
            }
            if !infra_seen.insert((&slot.suite, &slot.task, &slot.arm)) {
                return Err(bad(
                    f("arm"),
                    "this infrastructure slot is listed twice".into(),
                ));
            }
        }
        Ok(())
    }

    /// Every arm id the suites name, in first-use order.
    pub fn arm_ids(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in &self.suites {
            for a in &s.arms {
                if !out.contains(&a.as_str()) {
                    out.push(a);
                }
            }
        }
        out
    }
}
