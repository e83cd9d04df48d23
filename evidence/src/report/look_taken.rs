//! A look's record as the ledger keeps it, apart from the looks' arithmetic (`looks.rs`) so that
//! the run data (`run_data.rs`) carries it without importing the module that reads the run data.

use serde::{Deserialize, Serialize};

use crate::stats::sequential::LookDecision;

/// One look taken, as its ledger entry records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookTaken {
    /// 1-based look number.
    pub look: u32,
    /// Statistical slots resolved when it was taken, of `total_slots`.
    pub resolved_slots: usize,
    /// Statistical slots of the run.
    pub total_slots: usize,
    /// Tasks with complete pairs behind the statistic.
    pub tasks: usize,
    /// The look statistic (`None` when it could not be computed; see `note`).
    pub z: Option<f64>,
    /// The efficacy boundary at this look.
    pub boundary: f64,
    /// What the look decided.
    pub decision: LookDecision,
    /// Why z is missing, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}
