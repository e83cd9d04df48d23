//! `eval plan --cost`: the worst case the protocol's budgets allow, and the expected cost from a
//! pilot's measured use, before any paid call.
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/plan_cost.rs`.

use super::support::*;
pub(crate) use crate::support::plan_cost::*;

#[test]
fn a_pilot_of_the_same_schedule_is_expected_to_cost_what_it_cost() {
    assert!(docker_available(), "this test needs a Docker engine");
    static_binaries();
    let (_tmp, dir) = small_demo_project();
    let (_id, _sweep) = freeze_demo(&dir);
    let o = fixture_run(&dir, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let ledger = dir.join("runs/demo/ledger.sqlite");
    // What the pilot used, from its own ledger: every model call's metered tokens and spend.
    let es = entries(&ledger);
    let calls = payloads(&es, "model_call");
    let tokens: u64 = calls
        .iter()
        .map(|c| {
            let u = &c["record"]["usage"];
            u["input_tokens"].as_u64().unwrap_or(0) + u["output_tokens"].as_u64().unwrap_or(0)
        })
        .sum();
    let spend: f64 = calls
        .iter()
        .map(|c| c["record"]["spend_usd"].as_f64().unwrap_or(0.0))
        .sum();
    let outcomes = payloads(&es, "attempt_outcome");
    assert!(tokens > 0 && !calls.is_empty());
    let v = cost_json(&dir, &["--pilot", ledger.to_str().unwrap()]);
    let e = &v["expected"];
    // No reruns in the pilot: each pair's mean times its slots is what it used.
    assert_eq!(
        e["attempts"].as_u64().unwrap() as usize,
        outcomes.len(),
        "one first attempt a slot"
    );
    assert_eq!(e["calls"].as_f64().unwrap().round() as usize, calls.len());
    assert!(
        (e["tokens"].as_f64().unwrap() - tokens as f64).abs() < 0.5,
        "{e} vs {tokens}"
    );
    assert!(
        (e["spend_usd"].as_f64().unwrap() - spend).abs() < 1e-9,
        "{e} vs {spend}"
    );
    assert_eq!(e["from_overall_mean"].as_array().unwrap().len(), 0);
    // Worst case is a bound on what was used.
    assert!(v["worst_case"]["tokens"].as_u64().unwrap() >= tokens);
}
