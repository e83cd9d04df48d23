//! The readable wire log and `eval show`, on a real fixture run (containers, proxy, ledger):
//! every model call's request and reply are artifacts of its `model_call` entry, re-hashed by
//! `ledger verify --artifacts`; `eval show` tells each attempt's calls in order, each reply
//! followed by the request that carried it back; nothing stored holds the key.

use crate::support::*;
use serde_json::Value;

fn show(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut a = vec!["show", "--matrix", "demo"];
    a.extend_from_slice(args);
    eval(dir, &a)
}

#[test]
fn the_wire_log_tells_each_attempt_in_order_and_holds_no_key() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = small_demo_project();
    let (_identity, _sweep) = freeze_demo(&dir);
    let run = fixture_run(&dir, &["--concurrency", "2"]);
    assert!(run.status.success(), "{}", text(&run));
    let ledger = dir.join("runs/demo/ledger.sqlite");
    let all = entries(&ledger);

    // Every answered agent call carries its request node and its reply.
    let calls = payloads(&all, "model_call");
    let answered: Vec<&Value> = calls.iter().filter(|c| c["status"] == 200).collect();
    assert!(!answered.is_empty());
    for c in &answered {
        let a = &c["artifacts"];
        assert!(a["request"].is_string(), "{c}");
        assert!(a["reply"].is_string() || a["response"].is_string(), "{c}");
        assert!(c["wire_log"]["omitted"].is_null(), "{c}");
    }

    // `ledger verify --artifacts` re-hashes them with the rest.
    let lp = ledger.to_str().unwrap();
    let o = eval(&dir, &["ledger", "verify", lp, "--artifacts", "--json"]);
    assert!(o.status.success(), "{}", text(&o));

    // An attempt with several calls: `eval show --json` lists them in ledger order, and each
    // call's first new message is the previous call's reply (the fixture agent sends its history
    // back) — a transcript out of order or mismatched fails here.
    let outcomes = payloads(&all, "attempt_outcome");
    let target = outcomes
        .iter()
        .filter(|o| o["outcome"] == "completed")
        .max_by_key(|o| o["model_calls"].as_array().map_or(0, Vec::len))
        .expect("a completed attempt");
    let id = target["attempt"].as_str().unwrap();
    let seqs: Vec<u64> = target["model_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert!(seqs.len() >= 2, "{target}");
    let o = show(&dir, &[id, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "eval.show/1");
    assert_eq!(v["attempt"], id);
    assert_eq!(v["outcome"]["outcome"], "completed");
    assert_eq!(v["outcome"]["rule"]["row"], "11");
    let shown = v["calls"].as_array().unwrap();
    let shown_seqs: Vec<u64> = shown.iter().map(|c| c["entry"].as_u64().unwrap()).collect();
    assert_eq!(shown_seqs, seqs, "calls in the receipt's order");
    for w in shown.windows(2) {
        assert!(w[0]["call"].as_u64() < w[1]["call"].as_u64());
        let reply = w[0]["reply"]["text"].as_str().unwrap();
        let next = &w[1]["request"]["new_messages"][0];
        assert_eq!(next["role"], "assistant", "{next}");
        assert_eq!(
            next["text"], reply,
            "call {} carries call {}'s reply",
            w[1]["call"], w[0]["call"]
        );
        assert!(w[1]["request"]["kept"].as_u64().unwrap() > 0);
    }
    assert!(
        v["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "workspace")
    );
    assert!(v["grader"]["metrics"].is_object(), "{}", v["grader"]);

    // The text view: the same calls in order, no terminal escapes on a pipe; a slot alone names
    // its latest attempt.
    let slot = target["slot"].as_str().unwrap();
    let o = show(&dir, &[slot]);
    assert!(o.status.success(), "{}", text(&o));
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(!t.contains('\x1b'), "colour on a pipe");
    assert!(t.contains("rule 11"), "{t}");
    let positions: Vec<usize> = (1..=seqs.len())
        .map(|n| {
            t.find(&format!("── call {n} "))
                .unwrap_or_else(|| panic!("call {n}: {t}"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{t}");

    // An unknown attempt is a usage error naming it.
    let o = show(&dir, &["stat-nope#1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("stat-nope#1"));

    // Nothing written holds the fixture key.
    let mut files = Vec::new();
    all_bytes(&dir.join("runs"), &mut files);
    for (p, b) in &files {
        assert!(
            !contains(b, b"fxk-"),
            "{} holds the fixture key",
            p.display()
        );
    }

    // A reply altered in the store: `eval show` and `ledger verify --artifacts` exit 3 naming it.
    let reply = shown[0]["reply"]["artifact"].as_str().unwrap();
    let hex = reply.trim_start_matches("sha256:");
    let obj = dir.join(format!("runs/demo/artifacts/sha256/{}/{hex}", &hex[..2]));
    let mut perm = std::fs::metadata(&obj).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    std::fs::set_permissions(&obj, perm).unwrap();
    std::fs::write(
        &obj,
        b"{\"format\":\"eval.wire.reply/1\",\"kind\":\"sse\",\"text\":\"forged\"}",
    )
    .unwrap();
    let o = show(&dir, &[id, "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains(hex), "{}", text(&o));
    let o = eval(&dir, &["ledger", "verify", lp, "--artifacts"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains(hex), "{}", text(&o));
}
