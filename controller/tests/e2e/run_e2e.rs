//! `eval run` end to end: real containers, the real proxy, the fixture upstream. One run of the
//! 96-slot demo matrix in which three non-gated arms misbehave on purpose (a foreign model id, a
//! request storm past the budget, a sleeper past its timeout) and one task's oracle allows a
//! single question, so that every outcome path is exercised in the same ledger.

use crate::support::*;
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::Digest;
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn fixture_run_end_to_end_with_every_outcome() {
    // Alone: the whole 96-slot demo at concurrency 4.
    if !docker_available_alone() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = demo_project();
    let arms = dir.join("protocols/demo/arms");
    edit(&arms.join("v0.3-always/profile.toml"), |s| {
        s + "\n[adversarial]\nmodel_override = \"other-model\"\n"
    });
    edit(&arms.join("v0.4-never/profile.toml"), |s| {
        s + "\n[adversarial]\nrepeat_calls = 20\n"
    });
    edit(&arms.join("v0.4-contract/profile.toml"), |s| {
        s + "\n[adversarial]\nsleep_secs = 60\n"
    });
    replace_in(
        &arms.join("v0.4-critical/profile.toml"),
        "clarify = \"critical\"",
        "clarify = \"always\"",
    );
    replace_in(
        &dir.join("protocols/demo/protocol.toml"),
        "max_requests = 400",
        "max_requests = 10",
    );
    for t in ["demo-evocode-1", "demo-evocode-2", "demo-evocode-3"] {
        replace_in(
            &dir.join(format!("protocols/demo/tasks/evocode/{t}/task.toml")),
            "timeout_seconds = 3600",
            "timeout_seconds = 8",
        );
    }
    replace_in(
        &dir.join("protocols/demo/tasks/icae/demo-icae-1/task.toml"),
        "max_questions = 5",
        "max_questions = 1",
    );
    let (identity, _sweep) = freeze_demo(&dir);

    let run = fixture_run(&dir, &["--concurrency", "4"]);
    let run_text = text(&run);
    assert!(run.status.success(), "{run_text}");

    // The chain verifies, and status says complete.
    let ledger = dir.join("runs/demo/ledger.sqlite");
    let o = eval(&dir, &["ledger", "verify", ledger.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = eval(&dir, &["status", "--matrix", "demo", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(status["total"], 90);
    assert_eq!(status["done"], 90);
    assert_eq!(status["complete"], true);
    assert_eq!(status["infra_faults"], 0);
    assert_eq!(status["reruns"], 0);

    let es = entries(&ledger);
    let started = payloads(&es, "attempt_started");
    let outcomes = payloads(&es, "attempt_outcome");
    let calls = payloads(&es, "model_call");
    assert_eq!(started.len(), 96);
    assert_eq!(outcomes.len(), 96);

    // The schedule recorded is exactly what `eval plan` prints, infra slots first, and no
    // statistical attempt started before every infrastructure attempt had ended.
    let plan = eval(&dir, &["plan", "--matrix", "demo", "--json"]);
    let plan: Vec<serde_json::Value> = serde_json::from_slice(&plan.stdout).unwrap();
    let run_started = &payloads(&es, "run_started")[0];
    let recorded: Vec<&str> = run_started["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    let planned: Vec<&str> = plan.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(recorded, planned);
    assert_eq!(run_started["fixture_evidence"], true);
    let last_infra_outcome = es
        .iter()
        .filter(|e| e.kind == "attempt_outcome")
        .filter(|e| {
            e.payload_json().unwrap()["slot"]
                .as_str()
                .unwrap()
                .starts_with("infra-")
        })
        .map(|e| e.seq)
        .max()
        .unwrap();
    let first_stat_start = es
        .iter()
        .filter(|e| e.kind == "attempt_started")
        .filter(|e| {
            e.payload_json().unwrap()["slot"]
                .as_str()
                .unwrap()
                .starts_with("stat-")
        })
        .map(|e| e.seq)
        .min()
        .unwrap();
    assert!(last_infra_outcome < first_stat_start);

    // Outcomes per arm: the misbehaving arms end as their failure, never rerun.
    let mut by_arm: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();
    for o in &outcomes {
        *by_arm
            .entry(o["arm"].as_str().unwrap().to_owned())
            .or_default()
            .entry(o["outcome"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(
        by_arm["v0.3-always"],
        BTreeMap::from([("contract_violation".into(), 12)])
    );
    assert_eq!(
        by_arm["v0.4-never"],
        BTreeMap::from([("budget_exhausted".into(), 12)])
    );
    assert_eq!(
        by_arm["v0.4-contract"],
        BTreeMap::from([("timeout".into(), 6)])
    );
    for arm in ["native", "v0.4-auto", "v0.4-critical", "v0.4-lattice"] {
        assert_eq!(
            by_arm[arm].keys().collect::<Vec<_>>(),
            vec!["completed"],
            "{arm}: {:?}",
            by_arm[arm]
        );
    }
    assert!(started.iter().all(|s| s["number"] == 1));

    // Receipts: image, attestation, artifacts that re-hash, tokens equal to the calls' sum.
    let store = ArtifactStore::open(&dir.join("runs/demo/artifacts")).unwrap();
    let mut call_tokens: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for c in &calls {
        let e = call_tokens
            .entry(c["attempt"].as_str().unwrap().to_owned())
            .or_default();
        e.0 += c["tokens"]["input"].as_u64().unwrap();
        e.1 += c["tokens"]["output"].as_u64().unwrap();
    }
    let call_seqs: BTreeSet<u64> = es
        .iter()
        .filter(|e| e.kind == "model_call")
        .map(|e| e.seq)
        .collect();
    for o in &outcomes {
        let id = o["attempt"].as_str().unwrap();
        assert!(o["image"].as_str().unwrap().starts_with("sha256:"), "{o}");
        assert!(
            o["attestation"].as_str().unwrap().starts_with("sha256:"),
            "{o}"
        );
        let (i, out) = call_tokens.get(id).copied().unwrap_or_default();
        assert_eq!(o["tokens"]["input"].as_u64().unwrap(), i, "{id}");
        assert_eq!(o["tokens"]["output"].as_u64().unwrap(), out, "{id}");
        for seq in o["model_calls"].as_array().unwrap() {
            assert!(call_seqs.contains(&seq.as_u64().unwrap()));
        }
        for key in ["workspace", "grader_output", "agent_log"] {
            let d = o["artifacts"][key]
                .as_str()
                .unwrap_or_else(|| panic!("{id}: no {key}"));
            store.verify(&Digest::parse(d).unwrap()).unwrap();
        }
        if o["outcome"] == "completed" {
            let h = &o["harness"];
            assert_eq!(h["model_turns"], o["model_turns"], "{id}");
            assert_eq!(
                h["total_tokens"].as_u64().unwrap(),
                o["tokens"]["input"].as_u64().unwrap() + o["tokens"]["output"].as_u64().unwrap()
            );
            assert!(o["metrics"]["score"].is_number(), "{o}");
        }
    }
    // The grader output stored is what the receipt says.
    let one = &outcomes[0];
    let score = store
        .get(&Digest::parse(one["artifacts"]["grader_output"].as_str().unwrap()).unwrap())
        .unwrap();
    let score: serde_json::Value = serde_json::from_slice(&score).unwrap();
    assert_eq!(score["metrics"]["score"], one["metrics"]["score"]);

    // Token counts against the fixture upstream's own count.
    let tally = &payloads(&es, "fixture_upstream")[0];
    let (sum_in, sum_out) = call_tokens
        .values()
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(tally["prompt_tokens"].as_u64().unwrap(), sum_in);
    assert_eq!(tally["completion_tokens"].as_u64().unwrap(), sum_out);
    let ok_calls = calls.iter().filter(|c| c["result"] == "ok").count() as u64;
    assert_eq!(tally["calls"].as_u64().unwrap(), ok_calls);
    assert_eq!(tally["rejected_unauthorized"], 0);
    assert!(calls.iter().any(|c| c["result"] == "contract_violation"));
    assert!(calls.iter().any(|c| c["result"] == "budget_exhausted"));

    // Attestation: every attempt attested, the baseline without candidate bytes.
    let att = payloads(&es, "attestation");
    assert_eq!(att.len(), 96);
    assert!(att.iter().all(|a| a["ok"] == true));
    let native = att
        .iter()
        .find(|a| a["attempt"].as_str().unwrap().contains("-native-"))
        .unwrap();
    assert!(
        native["reported"]
            .as_object()
            .unwrap()
            .values()
            .any(|v| v == "absent"),
        "{native}"
    );

    // Clarifying questions: the one-question task refuses the second — recorded as an
    // `agent_event` with the body's digest and length, never its text — and counts are metrics.
    let clar = payloads(&es, "clarification");
    let refused = payloads(&es, "agent_event");
    assert!(
        refused.iter().any(|c| c["event"] == "question_refused"
            && c["reason"] == "limit"
            && c["body_sha256"].as_str().unwrap().starts_with("sha256:")
            && c.get("question").is_none()
            && c["attempt"]
                .as_str()
                .unwrap()
                .contains("demo-icae-1-v0.4-critical")),
        "{refused:?}"
    );
    for c in clar.iter().filter(|c| c["answer"].is_string()) {
        if c["attempt"].as_str().unwrap().contains("demo-icae-1-") {
            assert_eq!(c["index"], 1, "{c}");
        }
    }
    let crit = outcomes
        .iter()
        .find(|o| {
            o["slot"]
                .as_str()
                .unwrap()
                .starts_with("stat-icae-demo-icae-2-v0.4-critical")
        })
        .unwrap();
    assert!(crit["metrics"]["clarification_questions"].as_f64().unwrap() >= 1.0);

    // The key never reaches the ledger, the artifacts or the output; no container is left.
    let mut files = Vec::new();
    all_bytes(&dir.join("runs"), &mut files);
    for (p, b) in &files {
        assert!(
            !contains(b, b"fxk-"),
            "{} holds the fixture key",
            p.display()
        );
    }
    assert!(!run_text.contains("fxk-"));
    assert!(containers_with(&format!("eval.identity={identity}")).is_empty());

    // The report reads the ledger: fixture evidence never allows a release (exit 1).
    let o = eval(&dir, &["report", "--matrix", "demo", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("fixture"));

    // The report is recorded: report.json beside the ledger, and a `report` entry binding its
    // digest and the head it was computed from. A fixture verdict never reaches the registry.
    let run_dir = dir.join("runs/demo");
    let report_json = std::fs::read(run_dir.join("report.json")).unwrap();
    let ledger = run_dir.join("ledger.sqlite");
    let reports = payloads(&entries(&ledger), "report");
    assert_eq!(reports.len(), 1);
    assert_eq!(
        reports[0]["report_digest"],
        eval_evidence::ledger::Digest::of(&report_json).to_string()
    );
    assert_eq!(reports[0]["release_allowed"], false);
    let registry = std::fs::read_to_string(dir.join("runs/registry.jsonl")).unwrap();
    assert!(!registry.contains("\"kind\":\"report\""), "{registry}");

    // A key given only now cannot sign this unsigned run after the fact: its entries were
    // committed by no signing controller, so they are refused, never signed (the attestation of
    // a signed run is tested in custody.rs).
    let o = eval(&dir, &["keygen", "--out", "signing.key"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = eval(
        &dir,
        &[
            "report",
            "--matrix",
            "demo",
            "--signing-key-file",
            "signing.key",
            "--format",
            "md",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("covered by no signed checkpoint"),
        "{}",
        text(&o)
    );
    assert!(!run_dir.join("report.intoto.json").exists());
    let private = std::fs::read_to_string(dir.join("signing.key")).unwrap();
    assert!(!text(&o).contains(private.trim()));
}
