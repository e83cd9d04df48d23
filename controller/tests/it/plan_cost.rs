//! `eval plan --cost`: the worst case the protocol's budgets allow, and the expected cost from a
//! pilot's measured use, before any paid call.

use super::support::*;
pub(crate) use crate::support::plan_cost::*;

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
