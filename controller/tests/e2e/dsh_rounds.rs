//! The real DeepSeek Harness continues one session across the rounds of a multi-round attempt
//! (docs/rounds.md, `runtimes/dsh/eval-support/runner.js`): the synthetic 3-round Go task of
//! `import_evocode.rs` (`write_task`, the Harbor multi-step layout; round 3 changes round 1's
//! behaviour) goes through `eval import v04-evocode` → `eval freeze` → `eval run` with the real
//! Harness image with its toolchains (`EVAL_TEST_DSH_POLY_IMAGE`) against the scripted DeepSeek-faithful upstream of
//! `support/dsh.rs`, in all three of v0.4's EvoCode arms (`native`, `v0.4-contract`,
//! `v0.4-lattice`, the last two with the real Plan Lattice 0.4.0-rc.3 package), one repetition
//! each, then `eval report`. The grader is `EVAL_TEST_V04_GRADER_IMAGE` (Go 1.23), standing in for
//! `runtimes/images/evocode-go`.
//!
//! The scripted model works each round with the Harness's own `read` and `write` (see
//! [`GREET_ROUNDS`]): right in round 1, breaking round 1's `hello` in round 2 and round 2's
//! `count` in round 3. Asserted per attempt: one Harness session (one id on every request, one
//! `session` record in the transcript), round 2's and round 3's first request carrying the earlier
//! rounds' prompts and answers; every round graded by its own tests only (1, 2, 2 cases); the
//! round metrics, v0.4's and the corrected ones, equal to the values computed by hand below; the
//! transcript == the proxy's meter == the upstream's bill over the attempt, and per round the
//! ledger's `round_finished` turns and tokens == the upstream's requests of that round;
//! `eval export atif` of every attempt passes Harbor's `TrajectoryValidator`, a system step
//! opening each round; the key nowhere. Prints one attempt's rounds and wire summary (the closing note quotes them).

use crate::dsh_simple::image_id;
use crate::import_evocode::{DOCKERFILE, write_task};
use crate::support::dsh::*;
use crate::support::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

const DSH_ENV: &str = "EVAL_TEST_DSH_POLY_IMAGE";
const GRADER_ENV: &str = "EVAL_TEST_V04_GRADER_IMAGE";
const KEY_ENV: &str = "EVAL_DSH_ROUNDS_TEST_KEY";
const PACKAGE: &str = "dsh-plan-lattice-0.4.0-rc.3.tgz";
const NAME: &str = "evocode";
const ARMS: [&str; 3] = ["native", "v0.4-contract", "v0.4-lattice"];
/// A hang detector only (three attempts of three rounds, each round a Harness run and a Go
/// build in the grader: minutes on a loaded machine).
const HANG_GUARD_SECS: u64 = 3600;

/// What the rounds of an attempt whose writes all landed come to (the scripted solutions of
/// [`GREET_ROUNDS`] against `write_task`'s tests), by hand:
///
/// | round | case_id: scenario (origin) | status | reward |
/// | --- | --- | --- | --- |
/// | 1 | c001: hello_name (round-1) | success | 1 |
/// | 2 | c001: count_words (round-2), c002: hello_name (round-1) | success, fail | 0 |
/// | 3 | c001: count_words (round-2), c002: hello_polite (round-3) | fail, success | 0 |
///
/// v0.4 keys cases by `case_id`: only c001 passed and then failed with an earlier origin (round
/// 3), so one regression; hello_name's failure in round 2 is under c002, new to v0.4, so missed.
/// The stable key (origin, requirement, scenario) sees both: two. Case scores 100, 50, 50 (mean
/// 66.67) both ways; rewards 1 + 0 + 0.
const WRITTEN: Expect = Expect {
    cases: [(1, 1), (1, 2), (1, 2)],
    rewards: [1.0, 0.0, 0.0],
    v04: [1.0, 200.0 / 3.0, 1.0],
    corrected: [2.0, 200.0 / 3.0, 1.0, 1.0 / 3.0],
};

/// What the rounds of a Plan Lattice arm come to: both arms run v0.4's `activationMode: always`
/// (phase `contract` or `lattice` from the first request), whose guard blocks a guarded `write`
/// until its contract protocol (intake, commit, context refresh, …) has run, which the scripted
/// model does not follow. Every round's write is refused ("plan-lattice blocks …", asserted
/// below), the workspace stays the task's skeleton (it builds, `greet` prints nothing): every
/// case fails, every reward is 0, and so is every metric, both ways.
const BLOCKED: Expect = Expect {
    cases: [(0, 1), (0, 2), (0, 2)],
    rewards: [0.0, 0.0, 0.0],
    v04: [0.0, 0.0, 0.0],
    corrected: [0.0, 0.0, 0.0, 0.0],
};

struct Expect {
    /// (passed, total) per round.
    cases: [(u64, u64); 3],
    rewards: [f64; 3],
    /// v04_regressions, v04_cumulative_case_score, v04_score.
    v04: [f64; 3],
    /// rounds_regressions, rounds_cumulative_case_score, rounds_score, rounds_mean_reward.
    corrected: [f64; 4],
}

fn user_texts(request: &Value) -> String {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

fn assistant_texts(request: &Value) -> String {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m.to_string())
        .collect()
}

#[test]
fn dsh_continues_one_session_across_three_rounds_in_every_evocode_arm() {
    let Some(dsh) = image_id(DSH_ENV) else { return };
    let Some(grader) = image_id(GRADER_ENV) else {
        return;
    };
    if !docker_available() {
        return;
    }
    static_binaries();
    let tmp = tempfile::Builder::new()
        .prefix("dshrounds")
        .tempdir()
        .unwrap();
    let from = tmp.path().join("tasks");
    // Two things of the grader images this test cannot change: v0.4's (the stand-in) has Go at
    // /usr/lib/go-1.23, linked from /usr/local/bin, and in both it and eval's Go base
    // /usr/local/bin is root's 0755 directory, which the tmpfs the EvoCode grader mounts there
    // inherits — the link is hidden and the grader's user cannot write a build output into it
    // (a known gap of the grader images, docs/importers.md "Importing v0.4's EvoCode suite"). So
    // the task's Dockerfile names Go's directory on PATH, as golang images do, and its tests
    // build `greet` into /tests (a fresh 1777 tmpfs) instead of /usr/local/bin.
    let task = write_task(
        &from,
        &format!(
            "{DOCKERFILE}ENV PATH=/tests:/usr/lib/go-1.23/bin:/usr/lib/go-1.22/bin:/usr/bin:/bin\n"
        ),
    );
    for k in 1..=3 {
        edit(&task.join(format!("steps/round-{k}/tests/test.sh")), |s| {
            assert!(s.contains("-o /usr/local/bin/greet"), "{s}");
            s.replace("-o /usr/local/bin/greet", "-o /tests/greet")
        });
        // No reference solutions: this test is about the Harness's rounds, not the control arms
        // they would add (`grader_controls_evocode.rs` runs those).
        std::fs::remove_dir_all(task.join(format!("steps/round-{k}/solution"))).unwrap();
    }
    let dir = tmp.path().join("proj");
    std::fs::create_dir(&dir).unwrap();
    let package = crate::support::v04_upstream().join(PACKAGE);
    let o = eval(
        &dir,
        &[
            "import",
            "v04-evocode",
            "--from",
            from.to_str().unwrap(),
            "--package",
            package.to_str().unwrap(),
            "--dsh-image",
            &dsh,
            "--grader-image",
            &grader,
            "--allow-unpinned",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "eval import: {}", text(&o));
    // The imported runtime says how the Harness continues, so the multi-round task is not
    // refused at set-up.
    let def = eval_runtimes::RuntimeDef::load(&dir.join("runtimes/dsh-poly/runtime.toml")).unwrap();
    assert!(def.def.harness.continue_command.is_some());
    // Few attempts: one repetition per arm, no infrastructure slots (this test is about the
    // rounds, not v0.4's schedule).
    edit(&dir.join(format!("matrix/{NAME}.toml")), |s| {
        let s = s.replace("repetitions = 2", "repetitions = 1");
        s[..s.find("[[infra]]").unwrap()].to_owned()
    });
    // The scripted account holds 1000 USD (`support/account.rs`): the run's worst case must fit.
    edit(&dir.join(format!("protocols/{NAME}/protocol.toml")), |s| {
        assert!(s.contains("max_spend_usd = 2000.0"), "{s}");
        format!(
            "{}\n# dsh-rounds test {}\n",
            s.replace("max_spend_usd = 2000.0", "max_spend_usd = 100.0"),
            random_hex(8)
        )
    });
    let o = eval(&dir, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "eval freeze: {}", text(&o));
    let freeze: Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("runs/freezes/{NAME}.json"))).unwrap(),
    )
    .unwrap();
    let identity = freeze["identity"].as_str().unwrap().to_owned();
    let _sweep = Sweep(format!("eval.identity={identity}"));

    let marker = format!("dsh-rounds-{}", random_hex(12));
    let key = format!("sk-dshr-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &marker);
    let mut run = Command::new(eval_bin());
    run.args([
        "run",
        "--matrix",
        NAME,
        "--upstream",
        &upstream.url(),
        "--api-key-env",
        KEY_ENV,
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
    assert_eq!(upstream.unauthorized(), 0, "a request came without the key");
    let served = upstream.served();

    let es = entries(&dir.join(format!("runs/{NAME}/ledger.sqlite")));
    assert!(payloads(&es, "rerun").is_empty(), "{run_text}");
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), ARMS.len(), "{outcomes:#?}\n{run_text}");
    let started = payloads(&es, "round_started");
    let finished = payloads(&es, "round_finished");
    let calls: Vec<Value> = payloads(&es, "model_call")
        .into_iter()
        .filter(|c| c["role"] == "agent")
        .collect();

    let mut sessions = BTreeSet::new();
    let mut shown = None;
    for o in &outcomes {
        let id = o["attempt"].as_str().unwrap();
        let arm = o["arm"].as_str().unwrap().to_owned();
        let mine = |v: &[Value]| -> Vec<Value> {
            let mut m: Vec<Value> = v.iter().filter(|p| p["attempt"] == id).cloned().collect();
            m.sort_by_key(|p| p["round"].as_u64());
            m
        };
        let (st, fin) = (mine(&started), mine(&finished));
        for f in &fin {
            eprintln!("{arm} round {}: {f}", f["round"]);
        }
        assert_eq!(o["outcome"], "completed", "{arm}: {o}\n{run_text}");
        assert_eq!(o["accounting"], "matched", "{arm}: {o}");
        assert_eq!(st.len(), 3, "{arm}: every round begun: {st:#?}");
        assert_eq!(fin.len(), 3, "{arm}: every round recorded: {fin:#?}");

        // One Harness session: the transcript's, on every request of the attempt, in every round.
        let transcript = artifact(&dir, NAME, o, "transcript");
        let headers = String::from_utf8_lossy(&transcript)
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|r| r["type"] == "session"))
            .count();
        assert_eq!(headers, 1, "{arm}: one session record in the transcript");
        let (session, own) = transcript_usage(&transcript);
        assert!(session.starts_with("session-"), "{arm}: {session}");
        assert!(
            sessions.insert(session.clone()),
            "{arm}: a session of its own"
        );
        let wire: Vec<&Served> = served.iter().filter(|s| s.session() == session).collect();
        let rounds_on_wire: Vec<Option<usize>> = wire.iter().map(|s| s.round).collect();
        let mut sorted = rounds_on_wire.clone();
        sorted.sort();
        assert_eq!(rounds_on_wire, sorted, "{arm}: rounds in order on the wire");
        for k in 1..=3 {
            assert!(
                rounds_on_wire.contains(&Some(k)),
                "{arm}: round {k} never reached the upstream in the session: {rounds_on_wire:?}"
            );
        }
        // The session continues: round k's first request carries every earlier round's prompt
        // and the model's answer to it.
        for k in 2..=3 {
            let first = wire.iter().find(|s| s.round == Some(k)).unwrap();
            let users = user_texts(&first.request);
            let assistants = assistant_texts(&first.request);
            for j in 1..k {
                assert!(
                    users.contains(GREET_ROUNDS[j - 1].recognise),
                    "{arm}: round {k}'s first request lacks round {j}'s prompt"
                );
                assert!(
                    assistants.contains(&format!("Round {j} is done.")),
                    "{arm}: round {k}'s first request lacks round {j}'s answer"
                );
            }
            assert!(
                users.contains(GREET_ROUNDS[k - 1].recognise),
                "{arm}: round {k}'s prompt"
            );
        }

        // transcript == meter == upstream over the attempt.
        let mut metered: Vec<&Value> = calls.iter().filter(|c| c["attempt"] == id).collect();
        metered.sort_by_key(|c| c["seq"].as_u64());
        let metered: Vec<(u64, u64)> = metered
            .iter()
            .map(|c| {
                (
                    c["tokens"]["input"].as_u64().unwrap(),
                    c["tokens"]["output"].as_u64().unwrap(),
                )
            })
            .collect();
        let theirs: Vec<(u64, u64)> = wire
            .iter()
            .map(|s| (s.prompt_tokens, s.completion_tokens))
            .collect();
        assert_eq!(own, metered, "{arm}: transcript vs ledger");
        assert_eq!(own, theirs, "{arm}: transcript vs upstream");
        let billed: u64 = theirs.iter().map(|(i, o)| i + o).sum();
        assert_eq!(
            o["tokens"]["input"].as_u64().unwrap() + o["tokens"]["output"].as_u64().unwrap(),
            billed,
            "{arm}: meter vs upstream"
        );
        assert_eq!(o["harness"]["total_tokens"].as_u64(), Some(billed), "{arm}");
        // Per round: the ledger's turns and tokens are the upstream's requests of that round.
        for (k, f) in fin.iter().enumerate() {
            let round: Vec<&&Served> = wire.iter().filter(|s| s.round == Some(k + 1)).collect();
            let tokens: u64 = round
                .iter()
                .map(|s| s.prompt_tokens + s.completion_tokens)
                .sum();
            assert_eq!(
                f["model_turns"].as_u64(),
                Some(round.len() as u64),
                "{arm} round {}: {f}",
                k + 1
            );
            assert_eq!(
                f["tokens"].as_u64(),
                Some(tokens),
                "{arm} round {}: {f}",
                k + 1
            );
        }

        // What the Harness's `write` answered in each round: done in the baseline, refused by
        // Plan Lattice's guard in its arms (the model reads that before its answer).
        let lattice = arm != "native";
        for k in 1..=3 {
            let answer = wire
                .iter()
                .find(|s| s.round == Some(k) && s.kind == Kind::Answer)
                .unwrap_or_else(|| panic!("{arm}: no answer in round {k}"));
            let messages = answer.request["messages"].as_array().unwrap();
            let wrote = result_of(messages, "write").unwrap_or_default();
            assert_eq!(
                wrote.contains("plan-lattice blocks"),
                lattice,
                "{arm} round {k}: the write's result: {wrote}"
            );
        }
        // Each round graded by its own tests only, to the values computed by hand.
        let want = if lattice { &BLOCKED } else { &WRITTEN };
        for (k, f) in fin.iter().enumerate() {
            assert_eq!(f["status"], "passed", "{arm} round {}: {f}", k + 1);
            assert_eq!(f["harness"]["exit"], 0, "{arm} round {}: {f}", k + 1);
            let m = &f["metrics"];
            assert_eq!(
                (
                    m["cases_passed"].as_f64(),
                    m["cases_total"].as_f64(),
                    m["reward"].as_f64()
                ),
                (
                    Some(want.cases[k].0 as f64),
                    Some(want.cases[k].1 as f64),
                    Some(want.rewards[k])
                ),
                "{arm} round {}: {f}",
                k + 1
            );
        }
        let m = &o["metrics"];
        let got = |name: &str| {
            m[name]
                .as_f64()
                .unwrap_or_else(|| panic!("{arm}: no {name} in {m}"))
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        for (name, v) in ["v04_regressions", "v04_cumulative_case_score", "v04_score"]
            .iter()
            .zip(want.v04)
        {
            assert!(close(got(name), v), "{arm}: {name} = {} ≠ {v}", got(name));
        }
        for (name, v) in [
            "rounds_regressions",
            "rounds_cumulative_case_score",
            "rounds_score",
            "rounds_mean_reward",
        ]
        .iter()
        .zip(want.corrected)
        {
            assert!(close(got(name), v), "{arm}: {name} = {} ≠ {v}", got(name));
        }
        if arm == "native" {
            shown = Some((id.to_owned(), session.clone(), fin.clone()));
        }
    }

    // The closing note: one attempt's rounds and its wire, round by round.
    let (attempt, session, fin) = shown.expect("a native attempt");
    let o = eval(&dir, &["show", &attempt, "--matrix", NAME, "--json"]);
    assert!(o.status.success(), "eval show: {}", text(&o));
    let show: Value = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!(
        "eval show {attempt}: outcome {} | {} model calls | metrics {}",
        show["outcome"],
        show["calls"].as_array().map_or(0, Vec::len),
        show["metrics"]
    );
    for f in &fin {
        let k = f["round"].as_u64().unwrap() as usize;
        let wire: Vec<&Served> = served
            .iter()
            .filter(|s| s.session() == session && s.round == Some(k))
            .collect();
        eprintln!(
            "round {k}: {} graded {} reward={} cases {}/{} turns={} tokens={} | {}",
            f["status"],
            f["graded"],
            f["metrics"]["reward"],
            f["metrics"]["cases_passed"],
            f["metrics"]["cases_total"],
            f["model_turns"],
            f["tokens"],
            wire_summary(&format!("native round {k}"), &wire)
        );
    }
    let by_arm: BTreeMap<String, Value> = outcomes
        .iter()
        .map(|o| (o["arm"].as_str().unwrap().to_owned(), o["metrics"].clone()))
        .collect();
    for (arm, m) in &by_arm {
        eprintln!("{arm}: {m}");
    }

    let r = eval(&dir, &["report", "--matrix", NAME, "--format", "json"]);
    assert!(matches!(r.status.code(), Some(0 | 1)), "{}", text(&r));
    let report: Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(report["integrity_failure"], false, "{report}");
    eprintln!("eval report: {} ({})", report["verdict"], report["reasons"]);

    // The run exported as ATIF passes Harbor's validator, each round opened by its system step.
    crate::support::export_tools::check_real_harness_atif(&dir, NAME, 3);

    // The key nowhere: not in the project, its state, the run's output, what the agent sent.
    let mut files = Vec::new();
    all_bytes(tmp.path(), &mut files);
    files.push(("<eval run stdout>".into(), out.stdout.clone()));
    files.push(("<eval run stderr>".into(), out.stderr.clone()));
    files.push(("<eval report stdout>".into(), r.stdout.clone()));
    let core = key.strip_prefix("sk-dshr-").unwrap();
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

fn random_hex(n: usize) -> String {
    crate::dsh_harness::random_hex(n)
}
