//! What a run checks against the freeze while it runs: an arm's bytes changed after admission
//! (attestation against the frozen image), the signing key against the preregistered public key,
//! and the harness's own accounting against the proxy's meter.

use crate::support::forgery::name_signing_key;
use crate::support::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_candidate_byte_changed_after_admission_ends_the_attempt_before_the_agent_starts() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = demo_project();
    small_matrix(&dir);
    let (identity, _sweep) = freeze_demo(&dir);
    let ledger = dir.join("runs/demo/ledger.sqlite");

    let mut child = Command::new(eval_bin())
        .args([
            "run",
            "--matrix",
            "demo",
            "--upstream",
            "fixture",
            "--concurrency",
            "1",
        ])
        .current_dir(&dir)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The v0.4-auto arm's infrastructure slot runs (and completes) with the frozen bytes; then
    // one byte of its candidate package changes, long after admission. Its statistical slot
    // comes after four more infrastructure slots.
    let infra = "infra-simple-demo-simple-1-v0.4-auto-r0";
    let t0 = Instant::now();
    while outcomes_mentioning(&ledger, infra) == 0 {
        // A hang guard only (a run that stopped making progress), not a speed bound.
        assert!(t0.elapsed() < Duration::from_secs(900), "no progress");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pkg = dir.join("protocols/demo/arms/v0.4-auto/package/index.js");
    let mut bytes = std::fs::read(&pkg).unwrap();
    bytes[0] ^= 0x01;
    std::fs::write(&pkg, &bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    let run_text = text(&out);

    let es = entries(&ledger);
    let outcomes = payloads(&es, "attempt_outcome");
    let calls = payloads(&es, "model_call");
    let infra_outcome = outcomes
        .iter()
        .find(|o| o["slot"] == infra)
        .unwrap_or_else(|| panic!("{run_text}"));
    assert_eq!(infra_outcome["outcome"], "completed", "{run_text}");
    let auto: Vec<_> = outcomes
        .iter()
        .filter(|o| o["arm"] == "v0.4-auto" && o["slot"].as_str().unwrap().starts_with("stat-"))
        .collect();
    assert_eq!(auto.len(), 1, "{run_text}");
    let o = auto[0];
    assert_eq!(o["outcome"], "infra_fault", "{o}");
    assert_eq!(o["infra_fault"], "attestation_mismatch", "{o}");
    assert_ne!(o["image"], infra_outcome["image"], "{o}");
    assert_eq!(o["model_turns"], 0, "{o}");
    // No container started: no run time; the image check is preparation.
    assert_eq!(o["duration_seconds"], 0.0, "{o}");
    assert!(o["prepare_seconds"].as_f64().unwrap() > 0.0, "{o}");
    // A run's duration is its agent container's (start to exit): within the time spent in
    // containers (agent + grader), never the attempt's wall time around them.
    let (d, c) = (
        infra_outcome["duration_seconds"].as_f64().unwrap(),
        infra_outcome["container_seconds"].as_f64().unwrap(),
    );
    assert!(d > 0.0 && d <= c, "{infra_outcome}");
    let id = o["attempt"].as_str().unwrap();
    assert!(
        !calls.iter().any(|c| c["attempt"] == id),
        "the agent made a model call"
    );
    // Nothing ran: no agent log, no workspace archive, and the refusal is the attestation entry
    // the receipt binds.
    assert!(o["artifacts"]["agent_log"].is_null(), "{o}");
    assert!(o["artifacts"]["workspace"].is_null(), "{o}");
    let att = payloads(&es, "attestation")
        .into_iter()
        .find(|a| a["attempt"] == id)
        .unwrap();
    assert_eq!(att["ok"], false);
    assert!(
        att["problems"][0].as_str().unwrap().contains("frozen"),
        "{att}"
    );
    // Not rerun (the protocol does not list the code); every other arm still completed.
    assert!(
        !payloads(&es, "rerun")
            .iter()
            .any(|r| r.to_string().contains(id))
    );
    for other in outcomes.iter().filter(|o| o["arm"] != "v0.4-auto") {
        assert_ne!(other["outcome"], "infra_fault", "{other}");
    }
    assert!(containers_with(&format!("eval.identity={identity}")).is_empty());
    let v = eval(&dir, &["ledger", "verify", ledger.to_str().unwrap()]);
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn a_harness_that_misreports_its_tokens_ends_as_accounting_mismatch() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = demo_project();
    small_matrix(&dir);
    // v0.3-always has no infrastructure slot, so its failures cannot stop the run.
    edit(
        &dir.join("protocols/demo/arms/v0.3-always/profile.toml"),
        |s| s + "\n[adversarial]\nmisreport_tokens = -1\n",
    );
    let (identity, _sweep) = freeze_demo(&dir);
    let run = fixture_run(&dir, &["--concurrency", "2"]);
    let run_text = text(&run);
    assert!(run.status.success(), "{run_text}");
    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 15, "{run_text}");
    let mut seen = 0;
    for o in &outcomes {
        if o["arm"] == "v0.3-always" {
            seen += 1;
            assert_eq!(o["outcome"], "accounting_mismatch", "{o}");
            let proxy =
                o["tokens"]["input"].as_u64().unwrap() + o["tokens"]["output"].as_u64().unwrap();
            assert!(proxy > 0, "{o}");
            assert_eq!(
                o["harness"]["total_tokens"].as_u64().unwrap(),
                proxy - 1,
                "{o}"
            );
            assert!(
                o["detail"].as_str().unwrap().contains("the proxy metered"),
                "{o}"
            );
            // A task outcome: graded, and never rerun.
            assert!(o["artifacts"]["grader_output"].is_string(), "{o}");
        } else {
            assert_eq!(o["outcome"], "completed", "{o}");
        }
    }
    assert_eq!(seen, 1);
    assert!(payloads(&es, "rerun").is_empty());
    assert!(containers_with(&format!("eval.identity={identity}")).is_empty());
}

#[test]
fn a_run_refuses_a_signing_key_other_than_the_frozen_one_before_writing() {
    let (tmp, dir) = demo_project();
    let keygen = |name: &str| {
        let o = eval(tmp.path(), &["keygen", "--out", name]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_owned()
    };
    let a = keygen("a.key");
    let b = keygen("b.key");
    name_signing_key(&dir, &a);
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));
    let ledger = dir.join("runs/demo/ledger.sqlite");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--matrix", "demo", "--upstream", "fixture"];
        args.extend_from_slice(extra);
        eval(&dir, &args)
    };

    let b_file = tmp.path().join("b.key");
    let o = run(&["--signing-key-file", b_file.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains(&a) && t.contains(&b), "{t}");
    assert!(!ledger.exists(), "the refused run wrote its ledger");

    let o = run(&[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("--signing-key-file") && t.contains(&a), "{t}");
    assert!(!ledger.exists(), "the refused run wrote its ledger");
}

#[test]
fn a_model_answers_clarifying_questions_through_the_proxys_oracle_role() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = demo_project();
    small_matrix(&dir);
    let task = dir.join("protocols/demo/tasks/icae/demo-icae-1");
    replace_in(
        &task.join("task.toml"),
        "max_questions = 5",
        "max_questions = 5\nanswered_by = \"model\"",
    );
    let (identity, _sweep) = freeze_demo(&dir);
    let run = fixture_run(&dir, &["--concurrency", "2"]);
    let run_text = text(&run);
    assert!(run.status.success(), "{run_text}");
    let scripted: toml::Table =
        toml::from_str(&std::fs::read_to_string(task.join("hidden/oracle.toml")).unwrap()).unwrap();
    let scripted: std::collections::BTreeMap<String, String> = scripted["qa"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["question"].as_str().unwrap().to_owned(),
                q["answer"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    let outcomes = payloads(&es, "attempt_outcome");
    let clarifications = payloads(&es, "clarification");
    let calls = payloads(&es, "model_call");
    let asking: Vec<_> = outcomes
        .iter()
        .filter(|o| o["arm"] == "v0.4-critical" && o["slot"].as_str().unwrap().contains("icae-1"))
        .collect();
    assert_eq!(asking.len(), 2, "{run_text}");
    for o in asking {
        let id = o["attempt"].as_str().unwrap();
        assert_eq!(o["outcome"], "completed", "{o}");
        let qs: Vec<_> = clarifications
            .iter()
            .filter(|c| c["attempt"] == id)
            .collect();
        assert_eq!(qs.len(), 2, "{qs:?}");
        for q in &qs {
            assert_eq!(q["source"], "oracle_model", "{q}");
            // The fixture model, briefed with the oracle file, answers as the script would.
            assert_eq!(
                q["answer"].as_str().unwrap(),
                scripted[q["question"].as_str().unwrap()],
                "{q}"
            );
        }
        let oracle_calls: Vec<_> = calls
            .iter()
            .filter(|c| c["attempt"] == id && c["role"] == "oracle")
            .collect();
        assert_eq!(oracle_calls.len(), 2, "{oracle_calls:?}");
        assert!(oracle_calls.iter().all(|c| c["status"] == 200));
        assert_eq!(o["oracle_calls"], 2, "{o}");
        assert_eq!(o["clarification_questions"], 2, "{o}");
        assert_eq!(o["metrics"]["critical_missed"], 0.0, "{o}");
        // The agent's accounting is the agent role's alone: the oracle's tokens are not in it.
        let agent_tokens: u64 = calls
            .iter()
            .filter(|c| c["attempt"] == id && c["role"] == "agent")
            .map(|c| {
                c["tokens"]["input"].as_u64().unwrap() + c["tokens"]["output"].as_u64().unwrap()
            })
            .sum();
        assert_eq!(o["harness"]["total_tokens"].as_u64().unwrap(), agent_tokens);
    }
    // Other arms and tasks used no oracle.
    assert!(
        outcomes
            .iter()
            .filter(|o| o["arm"] != "v0.4-critical")
            .all(|o| o["oracle_calls"] == 0)
    );
    assert!(containers_with(&format!("eval.identity={identity}")).is_empty());
}
