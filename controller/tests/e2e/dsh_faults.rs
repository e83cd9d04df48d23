//! Provider faults on the real Harness, against the DeepSeek-faithful scripted upstream of
//! `support/dsh.rs` (the project of `dsh_harness`: two arms, one `simple-js-clamp` attempt each,
//! concurrency 1). First session: the upstream answers the first call 402 "Insufficient
//! Balance" (DeepSeek's body); the Harness does not retry it (QUOTA) and exits 1; the attempt is
//! `upstream_account_refused`, no further attempt starts, and `eval run` exits 2 naming the cause.
//! Second session, the account "fixed": the stopped attempt is rerun by rule, and on the way the
//! upstream cuts one stream mid-answer (the Harness retries it: TRANSPORT) and answers one call
//! 429 with `retry-after: 1` (retried after it): every attempt completes with its accounting
//! matched, the cut call recorded apart as incomplete, on both sides.
//!
//! A second test plays the two faults only the proxy can see: a stream of keep-alive comments
//! closed without data, and a stall (keep-alives only, the connection left open) past the
//! proxy's idle timeout on every try the Harness makes.

use crate::dsh_harness::{checked_package, image_id, random_hex, v04_upstream, write_project};
use crate::support::dsh::*;
use crate::support::*;
use std::process::Command;

const KEY_ENV: &str = "EVAL_DSH_FAULTS_TEST_KEY";
/// A hang detector only.
const HANG_GUARD_SECS: u64 = 1800;

fn run(dir: &std::path::Path, url: &str, key: &str) -> std::process::Output {
    run_with(dir, url, key, &[])
}

fn run_with(
    dir: &std::path::Path,
    url: &str,
    key: &str,
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut run = Command::new(eval_bin());
    run.envs(env.iter().copied());
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

/// The provider's capacity faults, end to end through the real Harness, in one session: the
/// first call is answered with keep-alive comments only and closed (the Harness: STREAM_CLOSED,
/// not retried, exit 1); the next six stall — the stream stops, the connection stays open with
/// keep-alives, which are not progress, so the proxy ends each at its idle timeout (shortened
/// for the test) and the Harness retries (TRANSPORT) five times, then gives up. Both attempts are
/// `provider_unavailable`, the provider's fault and not the arm's, with the call named; the
/// protocol lists the code, so each slot is rerun by rule and its rerun completes, matched.
#[test]
fn dsh_a_keep_alive_only_close_and_a_stall_are_the_providers_faults_and_rerun() {
    let Some(image) = image_id() else { return };
    if !docker_available() {
        return;
    }
    static_binaries();
    let package = checked_package(&v04_upstream());
    let (tmp, dir) = demo_project();
    let marker = format!("dsh-stall-{}", random_hex(12));
    write_project(&dir, &image, &marker, &package);
    // The protocol lists the provider's fault as rerunnable, twice per slot.
    replace_in(
        &dir.join("protocols/demo/protocol.toml"),
        r#"codes = ["container_runtime_failure", "host_network_outage", "runner_crash_before_model_call"]
max_reruns_per_slot = 1"#,
        r#"codes = ["container_runtime_failure", "host_network_outage", "runner_crash_before_model_call", "provider_unavailable"]
max_reruns_per_slot = 2"#,
    );
    let key = format!("sk-dshs-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &marker);
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "eval freeze: {}", text(&o));
    let _sweep = Sweep(format!("eval.identity={}", identity_of(&dir)));

    upstream.schedule(1, Fault::KeepAliveOnly);
    // The Harness's first try and its five retries.
    for n in 2..=7 {
        upstream.schedule(n, Fault::StallAfter(5));
    }
    let out = run_with(
        &dir,
        &upstream.url(),
        &key,
        &[("EVAL_TEST_UPSTREAM_IDLE_SECS", "10")],
    );
    let all = text(&out);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{all}");
    assert!(!all.contains(&key), "the key reached the output");
    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 4, "{outcomes:?}\n{all}");
    let served = upstream.served();
    let faults: Vec<_> = served.iter().map(|s| s.fault.clone()).collect();
    assert_eq!(
        faults[..7],
        [
            Some(Fault::KeepAliveOnly),
            Some(Fault::StallAfter(5)),
            Some(Fault::StallAfter(5)),
            Some(Fault::StallAfter(5)),
            Some(Fault::StallAfter(5)),
            Some(Fault::StallAfter(5)),
            Some(Fault::StallAfter(5)),
        ],
        "the Harness does not retry a closed stream and retries a stall five times"
    );
    for (o, kind) in outcomes[..2].iter().zip(["keep_alive_only", "stall"]) {
        assert_eq!(o["outcome"], "infra_fault", "{o}\n{all}");
        assert_eq!(o["infra_fault"], "provider_unavailable", "{o}");
        let detail = o.to_string();
        assert!(detail.contains(kind), "{kind}: {o}");
    }
    let reruns = payloads(&es, "rerun");
    assert_eq!(reruns.len(), 2, "{reruns:?}");
    assert!(
        reruns.iter().all(|r| r["code"] == "provider_unavailable"),
        "{reruns:?}"
    );
    for o in &outcomes[2..] {
        assert_eq!(o["outcome"], "completed", "{o}\n{all}");
        assert_eq!(o["accounting"], "matched", "{o}");
    }
    // The stalled calls are recorded as the upstream's failures, none as a model turn.
    let calls = payloads(&es, "model_call");
    let stalled = calls
        .iter()
        .filter(|c| {
            c["record"]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("stalled"))
        })
        .count();
    assert_eq!(stalled, 6, "{calls:?}");
    drop(tmp);
}
