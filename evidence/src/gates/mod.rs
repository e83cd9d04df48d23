//! Release gates: the declared rule language (`eval_core::gates`), views of a run's pairs (`pairs`) and
//! their mechanical evaluation (`evaluate`).

pub mod controls;
pub mod evaluate;
pub mod pairs;

pub use evaluate::{Binomial, GateResult, RuleResult, Verdict, clopper_pearson, evaluate_gates};
// The schema is eval-core's (a protocol file declares it); evaluation is this module's.
pub use eval_core::gates::{ArmRole, Gate, GateSchemaError, Op, Rule, Statistic};
