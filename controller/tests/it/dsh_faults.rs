//! Provider faults on the real Harness, against the DeepSeek-faithful scripted upstream of
//! `support/dsh.rs` (the project of `dsh_harness`: two arms, one `simple-js-clamp` attempt each,
//! concurrency 1). First session: the upstream answers the first call 402 "Insufficient
//! Balance" (DeepSeek's body); the Harness does not retry it (QUOTA) and exits 1; the attempt is
//! `upstream_account_refused`, no further attempt starts, and `eval run` exits 2 naming the cause.
//! Second session, the account "fixed": the stopped attempt is rerun by rule, and on the way the
//! upstream cuts one stream mid-answer (the Harness retries it: TRANSPORT) and answers one call
//! 429 with `retry-after: 1` (retried after it): every attempt completes with its accounting
//! matched, the cut call recorded apart as incomplete, on both sides.

use crate::dsh_harness::{checked_package, image_id, random_hex, v04_upstream, write_project};
use crate::support::dsh::*;
use crate::support::*;
use std::process::Command;

const KEY_ENV: &str = "EVAL_DSH_FAULTS_TEST_KEY";
/// A hang detector only.
const HANG_GUARD_SECS: u64 = 1800;

fn run(dir: &std::path::Path, url: &str, key: &str) -> std::process::Output {
    let mut run = Command::new(eval_bin());
    run.args([
        "run",
        "--matrix",
        "demo",
        "--upstream",
        url,
        "--api-key-env",
        KEY_ENV,
        "--concurrency",
        "1",
    ])
    .env(KEY_ENV, key)
    .env_remove("EVAL_SIGNING_KEY_FILE")
    .current_dir(dir);
    guarded(run, HANG_GUARD_SECS)
}

#[test]
fn dsh_an_empty_balance_stops_the_run_and_a_cut_stream_retried_by_the_harness_still_matches() {
    let Some(image) = image_id() else { return };
    if !docker_available() {
        return;
    }
    static_binaries();
    let package = checked_package(&v04_upstream());
    let (tmp, dir) = demo_project();
    let marker = format!("dsh-faults-{}", random_hex(12));
    write_project(&dir, &image, &marker, &package);
    let key = format!("sk-dshf-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &marker);
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "eval freeze: {}", text(&o));
    let _sweep = Sweep(format!("eval.identity={}", identity_of(&dir)));

    // Session 1: the account is out of balance.
    upstream.schedule(
        1,
        Fault::Status {
            status: 402,
            message: "Insufficient Balance",
            retry_after: None,
        },
    );
    let out = run(&dir, &upstream.url(), &key);
    let first = text(&out);
    assert_eq!(out.status.code(), Some(2), "{first}");
    assert!(
        first.contains("the upstream account is out of balance"),
        "{first}"
    );
    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(
        outcomes.len(),
        1,
        "no attempt after the refusal: {outcomes:?}"
    );
    assert_eq!(outcomes[0]["outcome"], "infra_fault", "{}", outcomes[0]);
    assert_eq!(outcomes[0]["infra_fault"], "upstream_account_refused");
    assert_eq!(
        upstream.served().len(),
        1,
        "the Harness does not retry a 402"
    );
    let calls = payloads(&es, "model_call");
    assert_eq!(calls[0]["status"], 402, "passed through: {}", calls[0]);

    // Session 2: the account fixed; a cut stream and a 429 on the way.
    upstream.schedule(3, Fault::CutAfter(6));
    upstream.schedule(
        5,
        Fault::Status {
            status: 429,
            message: "Rate Limit Reached",
            retry_after: Some(1),
        },
    );
    let out = run(&dir, &upstream.url(), &key);
    let second = text(&out);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{second}");
    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    let reruns = payloads(&es, "rerun");
    assert_eq!(reruns.len(), 1, "{reruns:?}");
    assert_eq!(reruns[0]["code"], "upstream_account_refused");
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 3, "{outcomes:?}\n{second}");
    let served = upstream.served();
    let cut = served
        .iter()
        .find(|s| s.fault == Some(Fault::CutAfter(6)))
        .expect("the cut was played");
    assert!(!cut.complete);
    let mut incomplete = 0;
    for o in &outcomes[1..] {
        assert_eq!(o["outcome"], "completed", "{o}\n{second}");
        assert_eq!(o["accounting"], "matched", "{o}");
        incomplete += o["incomplete"]["calls"].as_u64().unwrap_or(0);
        // The meter is the upstream's bill of the session's complete calls, cache hits included.
        let (session, own) = transcript_usage(&artifact(&dir, "demo", o, "transcript"));
        let billed: Vec<(u64, u64)> = served
            .iter()
            .filter(|s| s.session() == session && s.complete)
            .map(|s| (s.prompt_tokens, s.completion_tokens))
            .collect();
        assert_eq!(own, billed, "{o}");
        let total: u64 = billed.iter().map(|(p, c)| p + c).sum();
        assert_eq!(
            o["tokens"]["input"].as_u64().unwrap() + o["tokens"]["output"].as_u64().unwrap(),
            total
        );
    }
    assert_eq!(incomplete, 1, "the cut call, counted apart");
    assert!(
        served
            .iter()
            .any(|s| matches!(s.fault, Some(Fault::Status { status: 429, .. }))),
        "the 429 was played"
    );
    drop(tmp);
}
