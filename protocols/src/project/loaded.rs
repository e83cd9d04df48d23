//! What a load produces: the project root and a protocol loaded with its matrix and tasks. Apart
//! from the loader (`project.rs`) so that the loader and the cross-validation (`validate.rs`)
//! both name them without importing each other.

use crate::protocol::Protocol;
use crate::task::TaskBundle;
use eval_matrix::Matrix;
use std::path::PathBuf;

/// The project root: every path in protocols and matrices is relative to it.
#[derive(Clone, Debug)]
pub struct Project {
    /// The project's root directory (holding `protocols/`, `matrix/`, runtimes and task bundles).
    pub root: PathBuf,
}

/// A protocol with its matrix and task bundles, validated together.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The parsed `protocols/NAME/protocol.toml`.
    pub protocol: Protocol,
    /// The matrix the protocol names, loaded and validated.
    pub matrix: Matrix,
    /// Every task bundle the matrix's suites list, in matrix order.
    pub tasks: Vec<TaskBundle>,
    /// Relative to the project root.
    pub protocol_file: String,
    /// The matrix file, relative to the project root (`matrix/NAME.toml`).
    pub matrix_file: String,
}

impl Loaded {
    /// The run's slots, each an attempt's worth of artifacts: the matrix's (infrastructure and
    /// statistical) and the control arms' (one per task per control arm).
    pub fn attempt_slots(&self) -> u64 {
        let controls: usize = self
            .matrix
            .suites
            .iter()
            .filter_map(|s| {
                let c = self.protocol.suites.get(&s.id)?.control_arms()?;
                Some(s.tasks.len() * c.arms.len())
            })
            .sum();
        (self.matrix.schedule().slots.len() + controls) as u64
    }

    /// Each attempt's artifact quota (`[budgets.artifacts]`, see
    /// [`crate::protocol::ArtifactBudget`]): `per_attempt_bytes`, by default `max_bytes`
    /// shared equally by [`Self::attempt_slots`].
    pub fn artifact_quota(&self) -> u64 {
        let a = &self.protocol.budgets.artifacts;
        a.per_attempt_bytes
            .unwrap_or(a.max_bytes / self.attempt_slots().max(1))
    }

    /// The protocol's arm with this id, if any.
    pub fn arm(&self, id: &str) -> Option<&crate::protocol::Arm> {
        self.protocol.arms.iter().find(|a| a.id == id)
    }

    /// The task bundle `id` of suite `suite`, if the matrix runs it.
    pub fn task(&self, suite: &str, id: &str) -> Option<&TaskBundle> {
        self.tasks.iter().find(|t| t.suite == suite && t.id == id)
    }
}
