//! Release gates: the declared rule language (`schema`) and, with the statistics issue, their
//! mechanical evaluation.

pub mod schema;

pub use schema::{ArmRole, Gate, GateSchemaError, Op, Rule, Statistic};
