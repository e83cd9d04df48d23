//! Release gates: the declared rule language (`schema`), views of a run's pairs (`pairs`) and
//! their mechanical evaluation (`evaluate`).

pub mod evaluate;
pub mod pairs;
pub mod schema;

pub use evaluate::{GateResult, RuleResult, Verdict, evaluate_gates};
pub use schema::{ArmRole, Gate, GateSchemaError, Op, Rule, Statistic};
