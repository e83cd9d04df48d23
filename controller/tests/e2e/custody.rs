//! Chain of custody on a signed fixture run: a reviewer holding only the preregistered public key
//! must catch a rewritten-and-rechained ledger, a cut-off signed tail and an altered or missing
//! artifact — and `eval report` must refuse (exit 3) before it writes, appends or records
//! anything.

use crate::support::forgery::*;
use crate::support::*;
use eval_evidence::ledger::{Digest, entry_hash};
use std::path::{Path, PathBuf};

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// A copy of the run's state directory (freeze, registry, ledger, artifacts) to forge in.
fn state_copy(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    copy_tree(&dir.join("runs"), &to);
    to
}

fn report_entries(ledger: &Path) -> usize {
    rows(ledger).iter().filter(|r| r.kind == "report").count()
}

#[test]
fn a_reviewer_with_only_the_public_key_catches_every_forgery() {
    if !docker_available() {
        eprintln!("skipping: no Docker engine");
        return;
    }
    static_binaries();
    let (tmp, dir) = demo_project();
    small_matrix(&dir);
    let o = eval(tmp.path(), &["keygen", "--out", "a.key"]);
    assert!(o.status.success(), "{}", text(&o));
    let public = String::from_utf8(o.stdout).unwrap().trim().to_owned();
    name_signing_key(&dir, &public);
    let (_, _sweep) = freeze_demo(&dir);
    let key_file = tmp.path().join("a.key");
    let o = fixture_run(
        &dir,
        &[
            "--concurrency",
            "4",
            "--signing-key-file",
            key_file.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let ledger = dir.join("runs/demo/ledger.sqlite");
    let pub_file = tmp.path().join("a.key.pub");
    let pubk = pub_file.to_str().unwrap();
    let verify = |state: &str, extra: &[&str]| {
        let path = format!("{state}/demo/ledger.sqlite");
        let mut args = vec!["ledger", "verify", path.as_str(), "--public-key", pubk];
        args.extend_from_slice(extra);
        eval(&dir, &args)
    };
    let report = |state: &str| {
        eval(
            &dir,
            &[
                "report", "--matrix", "demo", "--state", state, "--format", "json",
            ],
        )
    };

    // The honest run: signed to its end, every artifact intact.
    let o = verify("runs", &["--artifacts", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["finished"], true, "{v}");
    assert!(v["artifacts_verified"].as_u64().unwrap() > 0, "{v}");

    // Forgery: one attempt's metric changed, the chain recomputed. Plain verification passes.
    let forged = state_copy(&dir, "forged");
    let forged_ledger = forged.join("demo/ledger.sqlite");
    let mut all = rows(&forged_ledger);
    let (at, metric) = all
        .iter()
        .enumerate()
        .find_map(|(i, r)| {
            if r.kind != "attempt_outcome" {
                return None;
            }
            let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
            let slot = v["slot"].as_str()?;
            let m = v["metrics"].as_object()?.keys().next()?.clone();
            slot.starts_with("stat-").then_some((i, m))
        })
        .expect("an outcome with a metric");
    let mut v: serde_json::Value = serde_json::from_slice(&all[at].payload).unwrap();
    let old = v["metrics"][&metric].as_f64().unwrap();
    v["metrics"][&metric] = serde_json::json!(old + 100.0);
    all[at].payload = eval_evidence::canonical::to_vec(&v).unwrap();
    let forged_seq = all[at].seq;
    rewrite_and_rechain(&forged_ledger, &all);
    let o = eval(&dir, &["ledger", "verify", forged_ledger.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the forgery must pass the plain chain: {}",
        text(&o)
    );
    let registry_before = std::fs::read(forged.join("registry.jsonl")).unwrap();
    let reports_before = report_entries(&forged_ledger);
    let o = report("forged");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("root_mismatch"), "{t}");
    assert!(t.contains("seq "), "{t}");
    assert!(!t.contains("RELEASE"), "a verdict was computed: {t}");
    assert!(
        !forged.join("demo/report.json").exists(),
        "report.json was written"
    );
    assert_eq!(
        report_entries(&forged_ledger),
        reports_before,
        "a report entry was appended"
    );
    assert_eq!(
        std::fs::read(forged.join("registry.jsonl")).unwrap(),
        registry_before
    );

    // The same forgery with every checkpoint from the forged entry on dropped: the chain and
    // the remaining checkpoints verify, but the finished run is no longer signed to its end.
    let kept: Vec<Row> = rows(&forged_ledger)
        .into_iter()
        .filter(|r| !(r.kind == "checkpoint" && r.seq > forged_seq))
        .collect();
    rewrite_and_rechain(&forged_ledger, &kept);
    let o = verify("forged", &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("unsigned_tail"), "{t}");
    let o = verify("forged", &["--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["reason"], "unsigned_tail");
    // Named: the first evidence entry no checkpoint covers, at or before the forged one.
    let first = v["error"]["seq"].as_u64().unwrap();
    assert!(first > 0 && first <= forged_seq, "{v}");
    assert!(t.contains(&format!("seq {first}:")), "{t}");
    let o = report("forged");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("unsigned_tail"), "{t}");
    assert!(!forged.join("demo/report.json").exists());
    assert_eq!(report_entries(&forged_ledger), reports_before);

    // Artifacts: an overwritten grader output and a deleted workspace are each caught, named by
    // digest and by the entry that references them.
    let outcomes = payloads(&entries(&ledger), "attempt_outcome");
    let with = |name: &str| {
        outcomes
            .iter()
            .find_map(|o| o["artifacts"][name].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("no outcome references a {name}"))
    };
    let object = |state: &Path, digest: &str| {
        let hex = &digest["sha256:".len()..];
        state
            .join("demo/artifacts/sha256")
            .join(&hex[..2])
            .join(hex)
    };
    for (name, damage) in [("grader_output", "overwrite"), ("workspace", "delete")] {
        let digest = with(name);
        let state = state_copy(&dir, &format!("art-{name}"));
        let file = object(&state, &digest);
        if damage == "overwrite" {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            std::fs::write(&file, b"{\"score\": 100}").unwrap();
        } else {
            std::fs::remove_file(&file).unwrap();
        }
        let state_name = format!("art-{name}");
        let o = verify(&state_name, &[]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "signatures alone still hold: {}",
            text(&o)
        );
        let o = verify(&state_name, &["--artifacts"]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(3), "{name}: {t}");
        assert!(t.contains(&digest), "{name}: {t}");
        assert!(t.contains("referenced by seq"), "{name}: {t}");
        assert!(
            t.contains(if damage == "overwrite" {
                "altered"
            } else {
                "missing"
            }),
            "{name}: {t}"
        );
        let ledger_copy = state.join("demo/ledger.sqlite");
        let before = report_entries(&ledger_copy);
        let o = report(&state_name);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(3), "{name}: {t}");
        assert!(t.contains(&digest), "{name}: {t}");
        assert_eq!(report_entries(&ledger_copy), before);
        assert!(!state.join("demo/report.json").exists());
    }

    // The honest report: computed after verifying, says the evidence is signed, shows the
    // per-arm breakdown; its `report` entry (appended without the private key) leaves the run
    // verifying.
    let o = report("runs");
    let t = text(&o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "fixture evidence never allows: {t}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "eval.report/2");
    assert_eq!(v["evidence"]["signed"], true, "{v}");
    assert!(v["evidence"]["artifacts_verified"].as_u64().unwrap() > 0);
    assert!(
        v["verdict"].as_str().unwrap().contains("evidence signed"),
        "{v}"
    );
    let arms = v["accounting"].as_array().unwrap();
    assert!(!arms.is_empty());
    let attempts: u64 = arms.iter().map(|a| a["attempts"].as_u64().unwrap()).sum();
    let by_outcome: u64 = arms
        .iter()
        .flat_map(|a| a["outcomes"].as_object().unwrap().values())
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(
        attempts, by_outcome,
        "every attempt counted under one outcome"
    );
    let o = verify("runs", &["--artifacts"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Every candidate attempt of a suite refused by the contract before any model turn: the report
/// (every format) flags it per arm next to the verdict, says the evidence is unsigned, and the
/// `--out` summary never reads "every check passed".
#[test]
fn a_candidate_that_never_made_a_model_call_is_flagged_in_the_report() {
    if !docker_available() {
        eprintln!("skipping: no Docker engine");
        return;
    }
    static_binaries();
    let (_tmp, dir) = demo_project();
    small_matrix(&dir);
    // The candidate's infrastructure slot would stop the run before any statistical slot.
    edit(&dir.join("matrix/demo.toml"), |s| {
        let block =
            "[[infra]]\nsuite = \"simple\"\ntask = \"demo-simple-1\"\narm = \"v0.4-auto\"\n";
        assert!(s.contains(block), "{s}");
        s.replace(block, "")
    });
    edit(
        &dir.join("protocols/demo/arms/v0.4-auto/profile.toml"),
        |s| s + "\n[adversarial]\nmodel_override = \"other-model\"\n",
    );
    let (_, _sweep) = freeze_demo(&dir);
    let o = fixture_run(&dir, &["--concurrency", "4"]);
    assert!(o.status.success(), "{}", text(&o));
    let outcomes = payloads(
        &entries(&dir.join("runs/demo/ledger.sqlite")),
        "attempt_outcome",
    );
    let cand: Vec<_> = outcomes
        .iter()
        .filter(|o| o["arm"] == "v0.4-auto")
        .collect();
    assert!(!cand.is_empty());
    for c in &cand {
        assert_eq!(c["outcome"], "contract_violation", "{c}");
        assert_eq!(c["model_turns"], 0, "{c}");
    }

    let o = eval(&dir, &["report", "--matrix", "demo", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let arm = v["accounting"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["suite"] == "simple" && a["arm"] == "v0.4-auto")
        .unwrap();
    let n = cand.len() as u64;
    assert_eq!(arm["outcomes"]["contract_violation"], n, "{arm}");
    assert_eq!(arm["zero_turn_attempts"], n, "{arm}");
    assert_eq!(arm["model_turns"], 0);
    let verdict = v["verdict"].as_str().unwrap();
    assert!(verdict.contains("evidence UNSIGNED"), "{verdict}");
    assert!(verdict.contains("anomalies flagged"), "{verdict}");
    let native = v["accounting"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["suite"] == "simple" && a["arm"] == "native")
        .unwrap();
    assert!(native["model_turns"].as_u64().unwrap() > 0, "{native}");
    assert!(native["spend_usd"].as_f64().is_some(), "{native}");
    for (format, needle) in [
        ("text", "made no model call"),
        ("md", "made no model call"),
        ("html", "made no model call"),
    ] {
        let out = dir.join(format!("report.{format}"));
        let o = eval(
            &dir,
            &[
                "report",
                "--matrix",
                "demo",
                "--format",
                format,
                "--out",
                out.to_str().unwrap(),
            ],
        );
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(!t.contains("every check passed"), "{t}");
        assert!(t.contains("anomal"), "{t}");
        let body = std::fs::read_to_string(&out).unwrap();
        assert!(body.contains(needle), "{format}");
        assert!(body.contains("contract_violation"), "{format}");
        assert!(body.contains("evidence UNSIGNED"), "{format}");
    }
}

/// `eval report` reads the ledger once: a file swapped in right after that read (the
/// `EVAL_TEST_SWAP_LEDGER` hook of debug builds) can neither be described by the report nor
/// receive its `report` entry; a byte-identical copy swapped in changes nothing.
#[test]
fn a_ledger_swapped_during_the_report_is_never_reported_on() {
    if !docker_available() {
        eprintln!("skipping: no Docker engine");
        return;
    }
    static_binaries();
    let (_tmp, dir) = demo_project();
    small_matrix(&dir);
    let (_, _sweep) = freeze_demo(&dir);
    let o = fixture_run(&dir, &["--concurrency", "4"]);
    assert!(o.status.success(), "{}", text(&o));
    let ledger = dir.join("runs/demo/ledger.sqlite");
    let report_json = dir.join("runs/demo/report.json");

    // The forgery: one statistical outcome's metric raised, the chain recomputed (unsigned, so
    // only a single read protects the report).
    let forged = dir.join("forged.sqlite");
    std::fs::copy(&ledger, &forged).unwrap();
    let mut all = rows(&forged);
    let at = all
        .iter()
        .position(|r| {
            r.kind == "attempt_outcome" && {
                let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
                v["slot"].as_str().is_some_and(|s| s.starts_with("stat-"))
                    && v["metrics"].as_object().is_some_and(|m| !m.is_empty())
            }
        })
        .expect("an outcome with a metric");
    let mut v: serde_json::Value = serde_json::from_slice(&all[at].payload).unwrap();
    let metric = v["metrics"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let old = v["metrics"][&metric].as_f64().unwrap();
    v["metrics"][&metric] = serde_json::json!(old + 100.0);
    all[at].payload = eval_evidence::canonical::to_vec(&v).unwrap();
    rewrite_and_rechain(&forged, &all);

    let report = |swap: &Path| {
        eval_env(
            &dir,
            &["report", "--matrix", "demo", "--format", "json"],
            &[("EVAL_TEST_SWAP_LEDGER", swap.to_str().unwrap())],
        )
    };

    // An identical copy swapped in: the same head, so the report is made and recorded.
    let same = dir.join("same.sqlite");
    std::fs::copy(&ledger, &same).unwrap();
    let o = report(&same);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!same.exists(), "the hook did not swap");
    assert!(report_json.exists());
    std::fs::remove_file(&report_json).unwrap();
    let reports_before = report_entries(&ledger);
    assert_eq!(reports_before, 1);

    // The forgery swapped in after the read: refused before anything is written or appended.
    let o = report(&forged);
    let t = text(&o);
    assert!(!forged.exists(), "the hook did not swap");
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("the ledger changed"), "{t}");
    assert!(!report_json.exists(), "report.json was written: {t}");
    // The file now in place is the forgery, and it received no report entry.
    assert_eq!(report_entries(&ledger), 0);
}

/// Appends `kinds` to a SQLite ledger as a forger with write access and no key would: each
/// entry chain-valid and well-formed (the last genuine payload of its kind), no checkpoint.
fn append_unsigned(ledger: &Path, kinds: &[&str]) {
    let c = rusqlite::Connection::open(ledger).unwrap();
    for kind in kinds {
        let (seq, prev): (i64, Vec<u8>) = c
            .query_row(
                "SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let prev = Digest::from_slice(&prev).unwrap();
        let seq = seq as u64 + 1;
        // A well-formed payload: the last genuine one of the kind, replayed.
        let payload: Vec<u8> = c
            .query_row(
                "SELECT payload FROM entries WHERE kind = ?1 ORDER BY seq DESC LIMIT 1",
                [kind],
                |r| r.get(0),
            )
            .unwrap();
        let hash = entry_hash(&prev, seq, kind, &payload);
        c.execute(
            "INSERT INTO entries (seq, prev, kind, payload, hash, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, '2026-01-01T00:00:00.000000Z')",
            rusqlite::params![seq as i64, prev.0.to_vec(), kind, payload, hash.0.to_vec()],
        )
        .unwrap();
    }
}

/// The controller signs only what its own writer committed. (1) During `eval report
/// --signing-key-file`, a forged copy renamed over `ledger.sqlite` after the head check (the
/// `EVAL_TEST_SWAP_BEFORE_SIGN` hook of debug builds) is refused by the writer: no checkpoint or
/// attestation signs it and no report is written. (2) Between sessions, evidence entries
/// appended without the key (a `run_started` making the run look unfinished, a `model_call`
/// adding spend) are refused when a signing session resumes — never signed by its first
/// checkpoint.
#[test]
fn the_controller_signs_only_what_its_own_writer_committed() {
    if !docker_available() {
        eprintln!("skipping: no Docker engine");
        return;
    }
    static_binaries();
    let (tmp, dir) = demo_project();
    small_matrix(&dir);
    let o = eval(tmp.path(), &["keygen", "--out", "a.key"]);
    assert!(o.status.success(), "{}", text(&o));
    let public = String::from_utf8(o.stdout).unwrap().trim().to_owned();
    name_signing_key(&dir, &public);
    let (_, _sweep) = freeze_demo(&dir);
    let key_file = tmp.path().join("a.key");
    let key_arg = key_file.to_str().unwrap();
    let o = fixture_run(&dir, &["--concurrency", "4", "--signing-key-file", key_arg]);
    assert!(o.status.success(), "{}", text(&o));
    let pub_file = tmp.path().join("a.key.pub");
    let pubk = pub_file.to_str().unwrap();

    // The honest report of the signed run: the `report` entry is signed in its own transaction
    // and report.intoto.json attests it; `--verify` accepts it and refuses it once report.json
    // changes. (On a copy, so the forgeries below start from the unreported run.)
    let honest = state_copy(&dir, "honest");
    let o = eval(
        &dir,
        &[
            "report",
            "--matrix",
            "demo",
            "--state",
            honest.to_str().unwrap(),
            "--signing-key-file",
            key_arg,
            "--format",
            "md",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let att = honest.join("demo/report.intoto.json");
    let att_s = att.to_str().unwrap();
    // `--verify` exits with the attested verdict's status: a fixture run never allows a release.
    let o = eval(&dir, &["report", "--verify", att_s, "--public-key", pubk]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("matches the attested digest"),
        "{}",
        text(&o)
    );
    // `--public-key` is honoured without --verify: the preregistered key verifies…
    let report_at = |extra: &[&str]| {
        let mut args = vec![
            "report",
            "--matrix",
            "demo",
            "--state",
            honest.to_str().unwrap(),
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        eval(&dir, &args)
    };
    let o = report_at(&["--public-key", pubk]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // …and another key is refused: it cannot make this protocol's evidence signed.
    let other = tmp.path().join("b.key");
    let o = eval(tmp.path(), &["keygen", "--out", other.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let other_pub = String::from_utf8(o.stdout).unwrap().trim().to_owned();
    let o = report_at(&["--public-key", &other_pub]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("preregisters"), "{}", text(&o));
    // The report entries those made are annotations after the final checkpoint.
    let hl = honest.join("demo/ledger.sqlite");
    let o = eval(
        &dir,
        &[
            "ledger",
            "verify",
            hl.to_str().unwrap(),
            "--public-key",
            pubk,
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The signed report's own checkpoint, and the unsigned `report` entry made after it.
    assert_eq!(v["unsigned_tail"], 2, "{v}");
    assert_eq!(v["first_unsigned_evidence"], serde_json::Value::Null, "{v}");
    let report_json = honest.join("demo/report.json");
    let mut tampered = std::fs::read(&report_json).unwrap();
    let at = tampered.iter().position(|b| *b == b'{').unwrap() + 1;
    tampered.insert(at, b' ');
    std::fs::write(&report_json, tampered).unwrap();
    let o = eval(&dir, &["report", "--verify", att_s, "--public-key", pubk]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let private = std::fs::read_to_string(&key_file).unwrap();
    assert!(!text(&o).contains(private.trim()));
    // Without report.json the attestation proves nothing a release could rest on.
    std::fs::remove_file(&report_json).unwrap();
    let o = eval(&dir, &["report", "--verify", att_s, "--public-key", pubk]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("report.json"), "{}", text(&o));

    // (1) The report window.
    let window = state_copy(&dir, "window");
    let ledger = window.join("demo/ledger.sqlite");
    let forged = dir.join("forged.sqlite");
    std::fs::copy(&ledger, &forged).unwrap();
    append_unsigned(&forged, &["model_call"]);
    let o = eval_env(
        &dir,
        &[
            "report",
            "--matrix",
            "demo",
            "--state",
            window.to_str().unwrap(),
            "--format",
            "json",
            "--signing-key-file",
            key_arg,
        ],
        &[("EVAL_TEST_SWAP_BEFORE_SIGN", forged.to_str().unwrap())],
    );
    let t = text(&o);
    assert!(!forged.exists(), "the hook did not swap");
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("replaced"), "{t}");
    assert!(!window.join("demo/report.intoto.json").exists(), "{t}");
    assert!(!window.join("demo/report.json").exists(), "{t}");
    // The forged file now at the path: its forged entry is under no checkpoint.
    let all = rows(&ledger);
    assert_eq!(all.last().unwrap().kind, "model_call");
    assert_eq!(report_entries(&ledger), 0);

    // (2) A forged tail appended between sessions.
    let between = state_copy(&dir, "between");
    let ledger = between.join("demo/ledger.sqlite");
    append_unsigned(&ledger, &["run_started", "model_call"]);
    let before = rows(&ledger).len();
    let o = fixture_run(
        &dir,
        &[
            "--state",
            between.to_str().unwrap(),
            "--signing-key-file",
            key_arg,
        ],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("covered by no signed checkpoint"), "{t}");
    assert_eq!(
        rows(&ledger).len(),
        before,
        "the refused session appended: {t}"
    );
    let o = eval(
        &dir,
        &[
            "ledger",
            "verify",
            ledger.to_str().unwrap(),
            "--public-key",
            pubk,
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["last_checkpoint"]["tree_size"].as_u64().unwrap() as usize,
        before - 3,
        "{v}"
    );
}

/// Task inputs are staged at admission: a grader file of the project swapped once the run has
/// staged them (the `EVAL_TEST_RENAME_AFTER_STAGING` hook of debug builds: an operator editing
/// `hidden/` mid-run) and restored before the report changes nothing that was graded.
#[test]
fn a_grader_swapped_mid_run_does_not_change_what_was_graded() {
    if !docker_available() {
        eprintln!("skipping: no Docker engine");
        return;
    }
    static_binaries();
    let (_tmp, dir) = demo_project();
    small_matrix(&dir);
    let (_, _sweep) = freeze_demo(&dir);
    let checks = dir.join("protocols/demo/tasks/simple/demo-simple-1/hidden/checks.toml");
    let original = std::fs::read_to_string(&checks).unwrap();
    // The swapped grader passes nothing: every check looks for a string no file holds.
    let evil = dir.join("evil-checks.toml");
    let rewritten: String = original
        .lines()
        .map(|l| {
            if l.starts_with("contains = ") {
                "contains = \"never-present-anywhere\"".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&evil, rewritten + "\n").unwrap();
    let swap = format!("{}:{}", evil.display(), checks.display());
    let o = eval_env(
        &dir,
        &["run", "--matrix", "demo", "--upstream", "fixture"],
        &[("EVAL_TEST_RENAME_AFTER_STAGING", swap.as_str())],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(!evil.exists(), "the hook did not swap");
    assert_ne!(std::fs::read_to_string(&checks).unwrap(), original);
    std::fs::write(&checks, &original).unwrap();
    let o = eval(&dir, &["verify", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let passed: Vec<f64> = rows(&dir.join("runs/demo/ledger.sqlite"))
        .iter()
        .filter(|r| r.kind == "attempt_outcome")
        .filter_map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
            v["slot"]
                .as_str()?
                .contains("demo-simple-1")
                .then(|| v["metrics"]["checks_passed"].as_f64())?
        })
        .collect();
    assert!(!passed.is_empty());
    assert!(
        passed.iter().any(|p| *p > 0.0),
        "every demo-simple-1 attempt was graded by the swapped grader: {passed:?}"
    );
}
