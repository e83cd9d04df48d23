//! Tests of the report side (`eval_report`) on runs this binary makes: they need the engine to
//! record a run (`synthetic`), which the report crate must never import, so they live here.

mod custody;
mod site;
pub mod synthetic;
