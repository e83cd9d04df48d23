//! `eval plan --cost`: the worst case the protocol's budgets allow, and the expected cost from a
//! pilot's measured use, before any paid call.

use super::support::*;
use serde_json::Value;

fn cost_json(dir: &std::path::Path, extra: &[&str]) -> Value {
    let mut args = vec!["plan", "--matrix", "demo", "--cost", "--json"];
    args.extend_from_slice(extra);
    let o = eval(dir, &args);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn the_worst_case_is_what_the_budgets_allow_with_every_rerun() {
    let (_tmp, dir) = demo_project();
    let p = dir.join("protocols/demo/protocol.toml");
    // Budgets of our own, so the figures below are computed here, not read back.
    edit(&p, |s| {
        s.replace("max_requests = 400", "max_requests = 7")
            .replace("max_tokens = 20000000", "max_tokens = 1000")
            .replace("max_spend_usd = 500.0", "max_spend_usd = 0.05")
    });
    let v = cost_json(&dir, &[]);
    let slots = &v["slots"];
    let (infra, stat) = (
        slots["infrastructure"].as_u64().unwrap(),
        slots["statistical"].as_u64().unwrap(),
    );
    assert_eq!((infra, stat), (6, 90), "the demo's schedule");
    let proto: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let reruns = proto["reruns"]["max_reruns_per_slot"].as_integer().unwrap() as u64;
    let infra_attempts = proto["reruns"]["max_infra_attempts"].as_integer().unwrap() as u64;
    let attempts = stat * (1 + reruns) + infra * infra_attempts;
    let w = &v["worst_case"];
    assert_eq!(w["attempts"].as_u64().unwrap(), attempts);
    assert_eq!(w["calls"].as_u64().unwrap(), attempts * 7);
    assert_eq!(w["tokens"].as_u64().unwrap(), attempts * 1000);
    assert_eq!(w["tokens_bound"], "attempts");
    // 1.10 $/Mtok is the template's dearest rate: the attempts' tokens cost more than $0.05.
    assert!(attempts as f64 * 1000.0 * 1.10 / 1e6 > 0.05);
    assert_eq!(w["spend_usd"].as_f64().unwrap(), 0.05);
    assert_eq!(w["spend_bound"], "run_budget");
    let o = eval(&dir, &["plan", "--matrix", "demo", "--cost"]);
    let t = text(&o);
    assert!(t.contains("bound by [budgets.run] max_spend_usd"), "{t}");
    assert!(t.contains("give --pilot LEDGER"), "{t}");
}

#[test]
fn a_missing_pilot_is_named_and_exits_2() {
    let (_tmp, dir) = demo_project();
    let o = eval(
        &dir,
        &[
            "plan",
            "--matrix",
            "demo",
            "--cost",
            "--pilot",
            "no-such.sqlite",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no-such.sqlite"), "{}", text(&o));
    let o = eval(&dir, &["plan", "--matrix", "demo", "--cost", "--power"]);
    assert_eq!(o.status.code(), Some(2), "--cost and --power conflict");
}

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
