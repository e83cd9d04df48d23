//! Helpers both halves of `plan_cost` use: `tests/it/plan_cost.rs` (no Docker) and
//! `tests/e2e/plan_cost.rs` (Docker).

use crate::support::*;
use serde_json::Value;

pub fn cost_json(dir: &std::path::Path, extra: &[&str]) -> Value {
    let mut args = vec!["plan", "--matrix", "demo", "--cost", "--json"];
    args.extend_from_slice(extra);
    let o = eval(dir, &args);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}
