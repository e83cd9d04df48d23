//! The real Harness's user questions reach eval's clarify channel (issue 25): `dsh --profile
//! headless` in the base image, two arms — the Harness alone and the Harness with Plan Lattice
//! 0.4.0-rc.3 — each with eval's support plugin from `runtimes/dsh/eval-support/` in its layer.
//! The scripted DeepSeek upstream calls the Harness's own `ask_user_question` tool (its real
//! name and argument schema, `packages/interaction/tool-ask-user` of dsh-v0.1.0-rc.8) three
//! times, one question each, before the work (after Plan Lattice's `lattice_route` in the plugin
//! arm: both plugins at work in one arm); the task allows two (`[oracle] max_questions`,
//! the suite's `max_oracle_calls`), answered by a scripted oracle. Asserted per arm: the two
//! in-bounds questions are `clarification` entries with the text the plugin sent and the
//! scripted answers; the third is refused (`agent_event` `question_refused`, reason `limit`)
//! and still counted (`clarification_questions = 3`); each answer, and the refusal, is in the
//! tool result of the model's next request as the upstream received it, and in the Harness's
//! transcript; the attempt completes, metered exactly; both arms attest the same support plugin
//! digest; the key is nowhere.

use crate::dsh_harness::{
    HANG_GUARD_SECS, KEY_ENV, TASK_TOML, checked_package, image_id, random_hex, v04_upstream,
    write_project,
};
use crate::support::dsh::*;
use crate::support::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The scripted oracle's answers, by the exact text the support plugin sends (the question, then
/// its options: `questionText` of `runtimes/dsh/eval-support/index.js`).
const NAN_Q: &str = "Should clamp return NaN when the value is NaN?";
const NAN_A: &str = "Yes: a NaN value is returned unchanged.";
const ERROR_Q: &str = "Which error should clamp throw when min > max?\n\nOptions: RangeError (Recommended); TypeError";
const ERROR_A: &str = "RangeError, exactly as the task says.";

fn oracle_toml() -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    format!(
        "[[qa]]\nquestion = {}\nanswer = {}\n\n[[qa]]\nquestion = {}\nanswer = {}\n",
        q(NAN_Q),
        q(NAN_A),
        q(ERROR_Q),
        q(ERROR_A)
    )
}

/// The text of the tool message answering this upstream's `ask_user_question` call number `k`
/// (0-based) in `s`'s request, if the request holds it.
fn ask_result(s: &Served, k: usize) -> Option<String> {
    let messages = s.request["messages"].as_array()?;
    let ids: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["function"]["name"] == "ask_user_question")
        .filter_map(|c| c["id"].as_str().map(str::to_owned))
        .collect();
    let id = ids.get(k)?;
    let m = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"].as_str() == Some(id.as_str()))?;
    Some(match &m["content"] {
        Value::String(t) => t.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    })
}

#[test]
fn dsh_questions_reach_the_clarify_channel_counted_answered_and_refused_over_the_limit() {
    let Some(image) = image_id() else { return };
    if !docker_available() {
        return;
    }
    static_binaries();
    let package = checked_package(&v04_upstream());
    let (tmp, dir) = demo_project();
    let marker = format!("dsh-ask-{}", random_hex(12));
    write_project(&dir, &image, &marker, &package);
    // The task may ask two questions, answered from its hidden oracle file; the prompt makes the
    // scripted model ask three.
    let protocol_path = dir.join("protocols/demo/protocol.toml");
    let protocol = std::fs::read_to_string(&protocol_path).unwrap();
    assert!(protocol.contains("max_oracle_calls = 0"));
    std::fs::write(
        &protocol_path,
        protocol.replace("max_oracle_calls = 0", "max_oracle_calls = 2"),
    )
    .unwrap();
    let task = dir.join("protocols/demo/tasks/real/simple-js-clamp");
    std::fs::write(
        task.join("task.toml"),
        format!(
            "{TASK_TOML}\n[oracle]\nanswers = \"hidden/oracle.toml\"\nmax_questions = 2\nanswered_by = \"scripted\"\n"
        ),
    )
    .unwrap();
    std::fs::write(task.join("hidden/oracle.toml"), oracle_toml()).unwrap();

    let key = format!("sk-dsh-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &marker);
    // v0.4's prompt unchanged (so Plan Lattice's router probes it, as in `dsh_harness`); the
    // model asks three questions before its work.
    upstream.ask_questions();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "eval freeze: {}", text(&o));
    let identity = identity_of(&dir);
    let _sweep = Sweep(format!("eval.identity={identity}"));
    let mut run = Command::new(eval_bin());
    run.args([
        "run",
        "--matrix",
        "demo",
        "--upstream",
        &upstream.url(),
        "--api-key-env",
        KEY_ENV,
        "--concurrency",
        "1",
    ])
    .env(KEY_ENV, &key)
    .env_remove("EVAL_SIGNING_KEY_FILE")
    .current_dir(&dir);
    let out = guarded(run, HANG_GUARD_SECS);
    let run_text = text(&out);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "eval run exited {:?}:\n{run_text}",
        out.status.code()
    );
    assert!(
        upstream.unexpected().is_empty(),
        "{:?}",
        upstream.unexpected()
    );
    let served = upstream.served();
    for s in &served {
        eprintln!(
            "served {:?} session={} tools={}",
            s.kind,
            s.session(),
            s.tools().len()
        );
    }

    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 2, "{outcomes:?}\n{run_text}");
    let clarifications = payloads(&es, "clarification");
    let refused = payloads(&es, "agent_event");
    let attestations = payloads(&es, "attestation");
    let mut support_digests = BTreeSet::new();
    let mut session_of_arm: BTreeMap<String, String> = BTreeMap::new();
    for o in &outcomes {
        let id = o["attempt"].as_str().unwrap();
        let arm = o["arm"].as_str().unwrap().to_owned();
        assert_eq!(o["outcome"], "completed", "{arm}: {o}\n{run_text}");
        assert_eq!(o["accounting"], "matched", "{arm}: {o}\n{run_text}");
        // Three asked, all counted — the refused one too.
        assert_eq!(o["clarification_questions"], 3, "{arm}: {o}");

        // The two in-bounds questions, recorded whole with their scripted answers.
        let mine: Vec<(u64, String, Option<String>, String)> = clarifications
            .iter()
            .filter(|c| c["attempt"] == id)
            .map(|c| {
                (
                    c["index"].as_u64().unwrap(),
                    c["question"].as_str().unwrap().to_owned(),
                    c["answer"].as_str().map(str::to_owned),
                    c["source"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        for (i, q, a, source) in &mine {
            eprintln!("arm {arm}: question {i} {q:?} -> {a:?} ({source})");
        }
        assert_eq!(
            mine,
            [
                (
                    1,
                    NAN_Q.to_owned(),
                    Some(NAN_A.to_owned()),
                    "scripted".to_owned()
                ),
                (
                    2,
                    ERROR_Q.to_owned(),
                    Some(ERROR_A.to_owned()),
                    "scripted".to_owned()
                ),
            ],
            "{arm}"
        );
        // The third: over the limit, refused, recorded by digest and length only.
        let over: Vec<&Value> = refused
            .iter()
            .filter(|e| e["attempt"] == id && e["event"] == "question_refused")
            .collect();
        assert_eq!(over.len(), 1, "{arm}: {refused:?}");
        assert_eq!(over[0]["reason"], "limit", "{arm}");

        // The arm's layer carries the support plugin, attested like the rest of the arm.
        let att: Vec<&Value> = attestations.iter().filter(|a| a["attempt"] == id).collect();
        assert_eq!(att.len(), 1, "{arm}");
        assert_eq!(att[0]["ok"], true, "{arm}: {}", att[0]);
        let d = att[0]["reported"]["/opt/eval/support"]
            .as_str()
            .unwrap_or_else(|| panic!("{arm}: the support plugin is not attested: {}", att[0]));
        assert!(d.starts_with("sha256:"), "{arm}: {d}");
        assert_eq!(att[0]["expected"]["/opt/eval/support"].as_str(), Some(d));
        support_digests.insert(d.to_owned());

        // The transcript shows the questions' answers and the refusal.
        let transcript = artifact(&dir, "demo", o, "transcript");
        let (session, _) = transcript_usage(&transcript);
        session_of_arm.insert(arm.clone(), session);
        let t = String::from_utf8_lossy(&transcript);
        for needle in [NAN_A, ERROR_A, "limit"] {
            assert!(t.contains(needle), "{arm}: the transcript lacks {needle:?}");
        }
    }
    assert_eq!(
        support_digests.len(),
        1,
        "every arm attests the same support plugin bytes: {support_digests:?}"
    );

    // On the wire: each answer (and the refusal) is in the tool result of the model's next
    // request, as the upstream received it; the Harness went on to do the task.
    for (arm, session) in &session_of_arm {
        let wire: Vec<&Served> = served.iter().filter(|s| &s.session() == session).collect();
        assert!(
            wire.iter()
                .all(|s| s.tools().iter().any(|t| t == "ask_user_question")),
            "{arm}: ask_user_question is not offered on every call"
        );
        let asks: Vec<usize> = wire
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kind == Kind::Ask)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            asks.len(),
            3,
            "{arm}: {:?}",
            wire.iter().map(|s| s.kind).collect::<Vec<_>>()
        );
        for (k, want) in [(0, NAN_A), (1, ERROR_A)] {
            let next = wire[asks[k] + 1];
            let got = ask_result(next, k).unwrap_or_else(|| panic!("{arm}: no result of ask {k}"));
            let v: Value = serde_json::from_str(&got).unwrap_or_else(|e| {
                panic!("{arm}: ask {k}'s result is not the tool's JSON ({e}): {got}")
            });
            let id = questions()[k]["id"].clone();
            assert_eq!(
                v["answers"],
                serde_json::json!([{"id": id, "selected": [], "custom": want}]),
                "{arm}: {got}"
            );
        }
        let next = wire[asks[2] + 1];
        let got = ask_result(next, 2).unwrap_or_else(|| panic!("{arm}: no result of ask 2"));
        eprintln!(
            "arm {arm}: calls {:?}; the refusal the model read: {got}",
            wire.iter().map(|s| s.kind).collect::<Vec<_>>()
        );
        assert!(
            got.contains("eval refused question \"extra\"") && got.contains("limit"),
            "{arm}: the refusal the model read: {got}"
        );
        // Both plugins at work in the plugin arm: Plan Lattice's route, then the questions.
        let route: &[Kind] = if arm == "v04-auto" {
            &[Kind::Route]
        } else {
            &[]
        };
        let want: Vec<Kind> = route
            .iter()
            .copied()
            .chain([
                Kind::Ask,
                Kind::Ask,
                Kind::Ask,
                Kind::Read,
                Kind::Write,
                Kind::Answer,
            ])
            .collect();
        assert_eq!(
            wire.iter().map(|s| s.kind).collect::<Vec<_>>(),
            want,
            "{arm}"
        );
    }
    assert_eq!(session_of_arm.len(), 2);

    // The key nowhere: not in the project, its state dir, the run's output, what the agent sent.
    let mut files = Vec::new();
    all_bytes(tmp.path(), &mut files);
    files.push(("<eval run stdout>".into(), out.stdout.clone()));
    files.push(("<eval run stderr>".into(), out.stderr.clone()));
    let core = key.strip_prefix("sk-dsh-").unwrap();
    for (p, b) in &files {
        assert!(
            !contains(b, core.as_bytes()),
            "{} holds the key",
            p.display()
        );
    }
    for s in &served {
        assert!(
            !s.request.to_string().contains(core),
            "a request held the key"
        );
    }
}
