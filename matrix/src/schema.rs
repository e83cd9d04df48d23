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

/// A matrix file (`matrix/<name>.toml`): which tasks run under which arms, how often, in what
/// order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// Must match the file name.
    pub name: String,
    /// The protocol this matrix belongs to.
    pub protocol: String,
    /// Free text for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How many attempts may run at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// The seeded order of the statistical slots.
    #[serde(default)]
    pub order: Order,
    /// The suites, each a tasks × arms × repetitions block.
    pub suites: Vec<Suite>,
    /// Infrastructure slots, run first and excluded from statistics.
    #[serde(default)]
    pub infra: Vec<InfraSlot>,
}

fn default_concurrency() -> usize {
    4
}

/// The shuffle of the statistical slots (`[order] algorithm = ...`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "algorithm", deny_unknown_fields)]
pub enum Order {
    /// Fisher-Yates driven by ChaCha8 (the default).
    #[serde(rename = "chacha8")]
    Chacha8 {
        /// The ChaCha8 seed.
        #[serde(default)]
        seed: u64,
    },
    /// v0.4's original order, reproduced exactly.
    #[serde(rename = "mulberry32-fisher-yates")]
    Mulberry32FisherYates {
        /// Hashed into the Mulberry32 state ([`crate::Mulberry32::from_seed_string`]).
        seed_string: String,
    },
}

impl Default for Order {
    fn default() -> Self {
        Order::Chacha8 { seed: 0 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
/// One suite: every task under every arm, `repetitions` times.
pub struct Suite {
    /// The suite id.
    pub id: String,
    /// The directory of its task bundles, relative to the project root.
    pub task_root: String,
    /// Task ids (bundle directory names under `task_root`).
    pub tasks: Vec<String>,
    /// Arm ids, each defined by the protocol.
    pub arms: Vec<String>,
    /// The arm the comparison is made against.
    pub baseline: String,
    /// The arm being evaluated.
    pub candidate: String,
    /// Repetitions per task and arm.
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
/// One infrastructure slot: a task run once under an arm before the statistical phase.
pub struct InfraSlot {
    /// The suite id.
    pub suite: String,
    /// The task id.
    pub task: String,
    /// The arm id.
    pub arm: String,
}

/// Bounds on a matrix, far above any real evaluation (v0.4 has 96 slots; each slot is at least one
/// container run), so that a typo or a hostile file fails at once with a message naming the field
/// instead of exhausting memory while the schedule is expanded. Checked in [`Matrix::parse`],
/// from the parsed counts alone, before anything per slot is allocated.
pub mod limits {
    /// `suites[i].repetitions`.
    pub const MAX_REPETITIONS: u32 = 10_000;
    /// `suites[i].tasks`, per suite.
    pub const MAX_TASKS_PER_SUITE: usize = 10_000;
    /// `suites[i].arms`, per suite.
    pub const MAX_ARMS_PER_SUITE: usize = 100;
    /// `suites`.
    pub const MAX_SUITES: usize = 1_000;
    /// `infra`.
    pub const MAX_INFRA_SLOTS: usize = 10_000;
    /// Infrastructure plus statistical slots of the expanded schedule.
    pub const MAX_SLOTS: u64 = 1_000_000;
    /// `concurrency`.
    pub const MAX_CONCURRENCY: usize = 1_024;
}

/// Bad matrix input: names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The matrix file.
        file: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML for the schema.
    #[error("{file}: {message}")]
    Parse {
        /// The matrix file.
        file: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A field has a value the matrix does not allow.
    #[error("{file}: field `{field}`: {message}")]
    Field {
        /// The matrix file.
        file: PathBuf,
        /// The field's path, e.g. `suites[0].arms`.
        field: String,
        /// What is wrong with it.
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
        self.check_bounds(file)?;
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

    /// The number of slots [`Matrix::schedule`] expands to, computed from the counts alone
    /// (saturating: a sum past `u64::MAX` reads as `u64::MAX`).
    pub fn slot_count(&self) -> u64 {
        self.suites.iter().fold(self.infra.len() as u64, |n, s| {
            let per_suite = (s.tasks.len() as u64)
                .saturating_mul(s.arms.len() as u64)
                .saturating_mul(u64::from(s.repetitions));
            n.saturating_add(per_suite)
        })
    }

    fn check_bounds(&self, file: &Path) -> Result<(), MatrixError> {
        use limits::*;
        let over = |field: String, what: String, limit: String| MatrixError::Field {
            file: file.to_path_buf(),
            field,
            message: format!("{what} is above the limit of {limit}"),
        };
        if self.concurrency > MAX_CONCURRENCY {
            return Err(over(
                "concurrency".into(),
                self.concurrency.to_string(),
                MAX_CONCURRENCY.to_string(),
            ));
        }
        if self.suites.len() > MAX_SUITES {
            return Err(over(
                "suites".into(),
                format!("{} suites", self.suites.len()),
                MAX_SUITES.to_string(),
            ));
        }
        if self.infra.len() > MAX_INFRA_SLOTS {
            return Err(over(
                "infra".into(),
                format!("{} infrastructure slots", self.infra.len()),
                MAX_INFRA_SLOTS.to_string(),
            ));
        }
        for (i, s) in self.suites.iter().enumerate() {
            if s.repetitions > MAX_REPETITIONS {
                return Err(over(
                    format!("suites[{i}].repetitions"),
                    s.repetitions.to_string(),
                    MAX_REPETITIONS.to_string(),
                ));
            }
            if s.tasks.len() > MAX_TASKS_PER_SUITE {
                return Err(over(
                    format!("suites[{i}].tasks"),
                    format!("{} tasks", s.tasks.len()),
                    MAX_TASKS_PER_SUITE.to_string(),
                ));
            }
            if s.arms.len() > MAX_ARMS_PER_SUITE {
                return Err(over(
                    format!("suites[{i}].arms"),
                    format!("{} arms", s.arms.len()),
                    MAX_ARMS_PER_SUITE.to_string(),
                ));
            }
        }
        let slots = self.slot_count();
        if slots > MAX_SLOTS {
            return Err(over(
                "suites".into(),
                format!(
                    "the expanded schedule's {slots} slots (tasks × arms × repetitions per suite, plus infra)"
                ),
                format!("{MAX_SLOTS} slots"),
            ));
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
