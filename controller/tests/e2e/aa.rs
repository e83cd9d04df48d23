//! A/A calibration runs (`eval run --aa`): every suite's candidate arm runs an identical copy of
//! its baseline under its own id, into its own run directory and ledger; never evidence for a
//! release, the natural pilot of `eval plan --calibrate`. And a run stopped at an interim look
//! stays stopped.

use crate::support::forgery::*;
use crate::support::*;
use std::path::Path;

/// Each arm's distinct (image, attested file digests as the shim reported them) over its
/// attempts' `attestation` entries in `entries`, every one of them ok.
fn attested(
    entries: &[eval_evidence::ledger::Entry],
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<(String, String)>> {
    let arm_of: std::collections::BTreeMap<String, String> = payloads(entries, "attempt_outcome")
        .iter()
        .map(|o| {
            (
                o["attempt"].as_str().unwrap().to_owned(),
                o["arm"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut out: std::collections::BTreeMap<_, std::collections::BTreeSet<_>> = Default::default();
    for a in payloads(entries, "attestation") {
        assert_eq!(a["ok"], true, "{a}");
        let Some(arm) = arm_of.get(a["attempt"].as_str().unwrap()) else {
            continue;
        };
        out.entry(arm.clone()).or_default().insert((
            a["image"].as_str().unwrap().to_owned(),
            a["reported"].to_string(),
        ));
    }
    out
}

#[test]
fn an_aa_run_runs_copies_of_the_baselines_records_them_and_is_never_evidence() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (tmp, dir) = small_demo_project();
    let o = eval(tmp.path(), &["keygen", "--out", "a.key"]);
    assert!(o.status.success(), "{}", text(&o));
    name_signing_key(&dir, String::from_utf8(o.stdout).unwrap().trim());
    let (identity, _sweep) = freeze_demo(&dir);
    let key_file = tmp.path().join("a.key");
    let key = key_file.to_str().unwrap();

    // --aa takes the whole schedule; the smoke run's limits are another mode.
    let o = fixture_run(&dir, &["--aa", "--smoke"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!dir.join("runs/demo.aa").exists());

    let o = fixture_run(&dir, &["--aa", "--signing-key-file", key]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("A/A calibration run: never evidence for a release"),
        "{}",
        text(&o)
    );
    let ledger = dir.join("runs/demo.aa/ledger.sqlite");
    let all = entries(&ledger);
    // The ledger says what it is first, and which arm each candidate copied.
    assert_eq!(all[0].kind, "aa_run");
    let aa = all[0].payload_json().unwrap();
    assert_eq!(aa["identity"], identity.as_str());
    assert_eq!(aa["evidence"], false);
    let copies: Vec<(String, String, String)> = aa["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["suite"].as_str().unwrap().to_owned(),
                c["arm"].as_str().unwrap().to_owned(),
                c["copies"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        copies,
        [
            ("simple", "v0.4-auto", "native"),
            ("icae", "v0.4-critical", "native"),
            ("evocode", "v0.4-lattice", "native"),
        ]
        .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
    );
    // The schedule is the real run's: the candidates keep their ids.
    let started = &payloads(&all, "run_started")[0];
    assert!(
        started["slots"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["arm"] == "v0.4-auto" && s["phase"] == "statistical")
    );
    // Each candidate ran the baseline's image with the baseline's files (the attested runtime,
    // profile and package digests), and an arm the A/A run leaves alone did not.
    let by_arm = attested(&all);
    let native = by_arm.get("native").expect("native attempts");
    assert_eq!(native.len(), 1, "{by_arm:?}");
    for (_, cand, _) in &copies {
        assert_eq!(by_arm.get(cand), Some(native), "{cand}: {by_arm:?}");
    }
    assert_ne!(by_arm.get("v0.3-always"), Some(native), "{by_arm:?}");
    // The real run's directory was never touched.
    assert!(!dir.join("runs/demo/ledger.sqlite").exists());

    // Never evidence for a release: exit 1 naming the mode, nothing written or recorded.
    for args in [
        vec!["report", "--matrix", "demo.aa"],
        vec!["report", "--matrix", "demo.aa", "--format", "json"],
    ] {
        let o = eval(&dir, &args);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            text(&o).contains("A/A calibration run: never evidence for a release"),
            "{}",
            text(&o)
        );
    }
    assert!(!dir.join("runs/demo.aa/report.json").exists());
    assert!(payloads(&entries(&ledger), "report").is_empty());
    let o = eval(&dir, &["status", "--matrix", "demo.aa"]);
    assert!(text(&o).contains("A/A calibration run"), "{}", text(&o));

    // The calibration takes it although it is a run of the frozen protocol itself.
    let o = calibrate(&dir, &ledger, "20");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("A/A calibration run (suite simple: v0.4-auto copies native"),
        "{}",
        text(&o)
    );
    // Signed by the preregistered key: trusted as signed evidence, not on the chain alone.
    assert!(!text(&o).contains("unsigned"), "{}", text(&o));
    assert!(
        text(&o).contains("false-fail: gate simple rule"),
        "{}",
        text(&o)
    );

    // The marker is part of the hash chain: edited in place, the ledger no longer verifies and
    // the calibration no longer takes the ledger for an A/A run of its protocol.
    let forged = dir.join("forged.sqlite");
    std::fs::copy(&ledger, &forged).unwrap();
    tamper_first_payload(&forged, |p| p.replace("\"native\"", "\"v0.3-always\""));
    let o = eval(&dir, &["ledger", "verify", forged.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let o = calibrate(&dir, &forged, "5");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!text(&o).contains("false-fail:"), "{}", text(&o));

    // An operator without the key goes further: edits the marker and recomputes the whole hash
    // chain, which needs no secret. The chain verifies again, but the protocol's preregistered
    // key no longer signs what the checkpoints cover, so the marker is not trusted.
    let rechained = dir.join("rechained.sqlite");
    std::fs::copy(&ledger, &rechained).unwrap();
    let mut edited = rows(&rechained);
    let first = String::from_utf8(edited[0].payload.clone()).unwrap();
    edited[0].payload = first.replace("\"native\"", "\"v0.3-always\"").into_bytes();
    assert_ne!(
        edited[0].payload,
        first.as_bytes(),
        "the edit changed nothing"
    );
    rewrite_and_rechain(&rechained, &edited);
    let o = eval(&dir, &["ledger", "verify", rechained.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "the forger's chain verifies: {}",
        text(&o)
    );
    let o = calibrate(&dir, &rechained, "5");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("never from the evaluated run"),
        "{}",
        text(&o)
    );
}

/// `eval plan --matrix demo --calibrate --pilot PILOT --replicates N`.
fn calibrate(dir: &Path, pilot: &Path, replicates: &str) -> std::process::Output {
    let pilot = pilot.to_str().unwrap();
    eval(
        dir,
        &[
            "plan",
            "--matrix",
            "demo",
            "--calibrate",
            "--pilot",
            pilot,
            "--replicates",
            replicates,
        ],
    )
}

/// Rewrites entry 1's payload in place (the triggers that forbid it dropped), leaving the chain
/// as it was: what an editor with write access to the file does.
fn tamper_first_payload(ledger: &Path, f: impl FnOnce(String) -> String) {
    let c = open_without_guards(ledger);
    let payload: Vec<u8> = c
        .query_row("SELECT payload FROM entries WHERE seq = 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    let new = f(String::from_utf8(payload.clone()).unwrap());
    assert_ne!(
        new.as_bytes(),
        payload.as_slice(),
        "the edit changed nothing"
    );
    c.execute(
        "UPDATE entries SET payload = ?1 WHERE seq = 1",
        rusqlite::params![new.into_bytes()],
    )
    .unwrap();
}

/// A run's ledger whose look 1 stopped it (as `eval report --look 1` records it): `eval run`
/// refuses to go on (exit 2, naming the look and its decision, nothing recorded) and `eval
/// status` shows the stop.
#[test]
fn a_run_stopped_at_a_look_refuses_to_continue_and_status_shows_the_stop() {
    use eval_evidence::ledger::{LedgerWriter, NewEntry};
    let (_tmp, dir) = small_demo_project();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));
    let real = dir.join("runs/demo/ledger.sqlite");
    std::fs::create_dir_all(real.parent().unwrap()).unwrap();
    let look = serde_json::json!({
        "look": 1,
        "resolved_slots": 9,
        "total_slots": 18,
        "tasks": 3,
        "z": 3.5,
        "boundary": 2.797,
        "decision": "stop_efficacy",
    });
    let w = LedgerWriter::open(&real).unwrap();
    w.append_blocking(NewEntry::new("look", &look).unwrap())
        .unwrap();
    w.close();
    let before = entries(&real).len();

    let o = fixture_run(&dir, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("stopped at an interim look") && text(&o).contains("look 1:"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("stop for efficacy"), "{}", text(&o));
    assert_eq!(entries(&real).len(), before, "nothing was recorded");

    let o = eval(&dir, &["status", "--matrix", "demo"]);
    assert!(
        text(&o).contains("STOPPED at an interim look: look 1:")
            && text(&o).contains("stop for efficacy"),
        "{}",
        text(&o)
    );
}
