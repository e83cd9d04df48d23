//! ICAE's simulated user through the real Harness, end to end (issue 25): `dsh --profile
//! headless` (`EVAL_TEST_DSH_IMAGE`) on the synthetic ICAE-shaped task of
//! `controller/tests/fixtures/icae-synthetic` (a fuzzy PRD as the workspace's `start.md`, a brief
//! with three hidden constraints, tiered cases and eval's test grader after ICAE's
//! `evaluate.py` in `hidden/`), in two arms as v0.4's ICAE suite has them: `native` and
//! `v04-critical` (Plan Lattice 0.4.0-rc.3, `activationMode: auto`, `clarificationPolicy:
//! critical`), each with eval's support plugin. The scripted DeepSeek upstream
//! (`support::dsh`) is both the agent's model — it asks through the Harness's own
//! `ask_user_question` tool, one question in the baseline, four after Plan Lattice's route in
//! the plugin arm (`icae_questions`), then writes `parse` from what the answers told it
//! (`icae_solution`) — and the oracle's model, answering in ICAE's JSON from the brief
//! (`icae_oracle_reply`) through the proxy's oracle role. The task allows three questions.
//!
//! Asserted per arm: each answered question's `clarification` entry (question digest, turn,
//! reply digest, the triggered ids), the refusal over the limit counted; the oracle's requests
//! resend the conversation; only `reply` reached the Harness (its next request and its
//! transcript show question and answer, never the oracle's JSON); the hidden-feature score and
//! the missed constraints as computed by hand (native 40 / 2 / 1, plugin 80 / 1 / 0); the grader
//! read the attempt's oracle record, equal to the ledger's entries, and reads it again in
//! `eval regrade` (the same output, byte for byte); the brief, the oracle's
//! system prompt and the hidden cases are in nothing the agent saw or left; the key nowhere.
//! `eval show` of each attempt, printed, is the closing note's question-and-answer log.

use crate::dsh_harness::{
    HANG_GUARD_SECS, KEY_ENV, PROTOCOL, checked_package, image_id, random_hex, v04_upstream,
    write_runtime,
};
use crate::support::dsh::*;
use crate::support::*;
use eval_evidence::ledger::Digest;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROFILE_PATCH: &str = include_str!("../../../runtimes/dsh/profile.patch.yml");
const V04_PACKAGE: &str = "dsh-plan-lattice-0.4.0-rc.3.tgz";
const TASK: &str = "icae-synthetic-1";
/// The agent's prompt, after ICAE's `task_docker.md` for an agent working in its own container
/// (Plan Lattice's `auto` router sends it to its probe phase, so the plugin arm routes first).
const PROMPT: &str = "Read start.md in your workspace: it is the product requirement of a small library. Build it in parser.py. The requirement is deliberately incomplete; ask the user about anything unclear before you build.";
const FALLBACK: &str = "No further information is available.";
/// The brief's responses to C001 and C002, and its fallback (oracle_data.json).
const C001_REPLY: &str = "An empty input returns an empty list, never an error.";
const C002_REPLY: &str = "Fields are separated by a single tab; a line without one is an error.";
const BRIEF_FALLBACK: &str =
    "That is not specified; choose a reasonable behaviour and document it.";
/// Text only the host-side files hold: the brief (an untriggered constraint's response), the
/// oracle's system prompt, a hidden case.
const SECRETS: [&str; 4] = [
    "BRIEF-CANARY-ARCH001",
    "simulated requirements provider",
    "Ada Lovelace",
    "hidden_constraints",
];

fn fixture() -> PathBuf {
    repo_root().join("controller/tests/fixtures/icae-synthetic")
}

fn grader_image() -> String {
    match std::env::var("EVAL_TEST_V04_GRADER_IMAGE") {
        Ok(id) if eval_runtimes::definition::is_digest(id.trim()) => id.trim().to_owned(),
        other => panic!(
            "EVAL_TEST_V04_GRADER_IMAGE={other:?}: run `export $(scripts/ensure-harness-images.sh)` \
             first (the grader needs its python3), or set EVAL_SKIP_DOCKER=1"
        ),
    }
}

pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The protocol: dsh_harness's, with v0.4's ICAE arms, the oracle model, and the ICAE suite
/// (at most five questions, as in v0.4; the task allows three).
fn protocol() -> String {
    let oracle = "[models.oracle]\napi = \"openai-chat\"\nmodel = \"deepseek-v4-flash\"\nstream = true\nstream_usage = true\n\
                  [models.oracle.params.temperature]\nequals = 0.0\nrequired = true\n\
                  [models.oracle.params.max_tokens]\nequals = 4096\nrequired = true\n\n[budgets.attempt]";
    let p = PROTOCOL
        .replacen("[budgets.attempt]", oracle, 1)
        .replace("id = \"v04-auto\"", "id = \"v04-critical\"")
        .replace("arms/v04-auto/", "arms/v04-critical/")
        .replace(
            "activationMode auto.",
            "activationMode auto, clarificationPolicy critical.",
        )
        .replace(
            "[suites.real]\ndescription = \"One small file-writing task.\"\nmetrics = [\"score\", \"model_turns\", \"tokens\", \"duration_seconds\"]\nmax_oracle_calls = 0",
            "[suites.icae]\ndescription = \"An ambiguous build with a simulated user.\"\nmetrics = [\"score\", \"model_turns\", \"oracle_constraints_missed\", \"oracle_constraints_missed_substantive\"]\nmax_oracle_calls = 5",
        )
        .replace(
            "[missing_data.values]\nscore = 0.0",
            "[missing_data.values]\nscore = 0.0\noracle_constraints_missed = 3.0\noracle_constraints_missed_substantive = 2.0",
        );
    assert!(
        p.contains("[suites.icae]") && p.contains("v04-critical") && p.contains("[models.oracle]")
    );
    format!("{p}\n# dsh-icae test {}\n", random_hex(8))
}

const MATRIX: &str = r#"name = "demo"
protocol = "demo"
description = "dsh on an ICAE-shaped task, with and without Plan Lattice 0.4.0-rc.3"
concurrency = 1

[order]
algorithm = "chacha8"
seed = 1

[[suites]]
id = "icae"
task_root = "protocols/demo/tasks/icae"
tasks = ["icae-synthetic-1"]
arms = ["native", "v04-critical"]
baseline = "native"
candidate = "v04-critical"
repetitions = 1
"#;

fn task_toml() -> String {
    format!(
        r#"id = "{TASK}"
suite = "icae"
timeout_seconds = 900
metrics = ["score", "public_passed", "hidden_passed", "enhanced_passed"]

[grader]
runtime = "runtimes/icae-grader/runtime.toml"
command = ["/usr/bin/python3", "{{hidden}}/grade.py", "{{workspace}}", "{{hidden}}", "{{oracle_record}}", "{{out}}"]

[oracle]
answers = "hidden/oracle/oracle_data.json"
max_questions = 3
answered_by = "stateful"
grader_reads_record = true

[oracle.stateful]
system_prompt = "hidden/oracle/init.md"
brief_heading = "{ICAE_BRIEF_HEADING}"
brief_fence = "json"
reply = "json"
reply_field = "reply"
record_field = "_internal_log.triggers_hit"
fallback_answer = "{FALLBACK}"
max_tokens = 1000000

[oracle.constraints]
list = "hidden_constraints"
id_field = "constraint_id"
scaffolding = ["ARCH001", "HARNESS*", "TC_*"]
"#
    )
}

fn write_project(dir: &Path, image: &str, grader: &str, package: &[u8], prompt: &str) {
    std::fs::write(dir.join("protocols/demo/protocol.toml"), protocol()).unwrap();
    std::fs::write(dir.join("matrix/demo.toml"), MATRIX).unwrap();
    write_runtime(dir, image);
    let g = dir.join("runtimes/icae-grader");
    std::fs::create_dir_all(&g).unwrap();
    std::fs::write(
        g.join("runtime.toml"),
        format!(
            "name = \"icae-grader\"\nuser = \"65532:65532\"\n\n[image]\nid = \"{grader}\"\n\n\
             [grader]\ncommand = [\"/usr/bin/python3\", \"{{hidden}}/grade.py\", \"{{workspace}}\", \"{{hidden}}\", \"{{oracle_record}}\", \"{{out}}\"]\n\n\
             [limits]\nmemory_mb = 512\ncpus = 1.0\npids = 64\ntmpfs_mb = 64\n"
        ),
    )
    .unwrap();
    let task = dir.join("protocols/demo/tasks/icae").join(TASK);
    std::fs::create_dir_all(task.join("workspace")).unwrap();
    std::fs::write(task.join("task.toml"), task_toml()).unwrap();
    std::fs::write(task.join("prompt.md"), prompt).unwrap();
    std::fs::copy(fixture().join("start.md"), task.join("workspace/start.md")).unwrap();
    copy_tree(&fixture().join("hidden"), &task.join("hidden"));
    copy_tree(&fixture().join("oracle"), &task.join("hidden/oracle"));
    let native = dir.join("protocols/demo/arms/native");
    std::fs::create_dir_all(&native).unwrap();
    std::fs::write(native.join("cordis.patch.yml"), PROFILE_PATCH).unwrap();
    let plugin = dir.join("protocols/demo/arms/v04-critical");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join("cordis.patch.yml"),
        format!(
            "{PROFILE_PATCH}- id: plan-lattice\n  config:\n    activationMode: auto\n    clarificationPolicy: critical\n"
        ),
    )
    .unwrap();
    std::fs::write(plugin.join(V04_PACKAGE), package).unwrap();
}

fn sha(s: &str) -> String {
    Digest::of(s.as_bytes()).to_string()
}

/// The tool results of the `ask_user_question` calls in a request, in order.
fn ask_results(s: &Served) -> Vec<String> {
    let messages = s.request["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ids: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["function"]["name"] == "ask_user_question")
        .filter_map(|c| c["id"].as_str().map(str::to_owned))
        .collect();
    ids.iter()
        .filter_map(|id| {
            messages
                .iter()
                .find(|m| m["role"] == "tool" && m["tool_call_id"].as_str() == Some(id.as_str()))
                .map(|m| match &m["content"] {
                    Value::String(t) => t.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    other => other.to_string(),
                })
        })
        .collect()
}

/// What each arm must show, computed by hand from the brief, the questions and the cases.
struct Expected {
    questions: &'static [&'static str],
    /// (answer, recorded triggers) of each answered question.
    answered: Vec<(&'static str, Value)>,
    score: f64,
    missed: f64,
    missed_substantive: f64,
    missed_ids: Value,
}

fn expected(arm: &str) -> Expected {
    if arm == "native" {
        // One question (C001's keyword). parse knows the empty-input rule and guesses a
        // whitespace split: hidden cases 1 and 2 pass, 3 (a name with a space) and both
        // enhanced cases fail: 100·2/5. Missed C002 and ARCH001; substantive only C002.
        Expected {
            questions: icae_questions(false),
            answered: vec![(C001_REPLY, json!(["C001"]))],
            score: 40.0,
            missed: 2.0,
            missed_substantive: 1.0,
            missed_ids: json!(["C002", "ARCH001"]),
        }
    } else {
        // Four questions, three answered (C001, C002, the fallback), the fourth refused. parse
        // knows both rules: every case but the comment line passes, 100·4/5. Missed ARCH001,
        // which is scaffolding.
        Expected {
            questions: icae_questions(true),
            answered: vec![
                (C001_REPLY, json!(["C001"])),
                (C002_REPLY, json!(["C002"])),
                (BRIEF_FALLBACK, json!([])),
            ],
            score: 80.0,
            missed: 1.0,
            missed_substantive: 0.0,
            missed_ids: json!(["ARCH001"]),
        }
    }
}

#[test]
fn dsh_asks_icae_s_simulated_user_and_the_answers_move_the_hidden_feature_score_by_arm() {
    let Some(image) = image_id() else { return };
    if !docker_available() {
        return;
    }
    let grader = grader_image();
    static_binaries();
    let package = checked_package(&v04_upstream());
    let (tmp, dir) = demo_project();
    write_project(&dir, &image, &grader, &package, PROMPT);
    let key = format!("sk-dsh-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &format!("dsh-icae-{}", random_hex(8)));

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
    assert!(payloads(&es, "rerun").is_empty(), "{run_text}");
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 2, "{outcomes:?}\n{run_text}");
    let clarifications = payloads(&es, "clarification");
    let events = payloads(&es, "agent_event");
    // The oracle's requests, in order; each arm's are a contiguous run (concurrency 1).
    let oracle: Vec<&Served> = served.iter().filter(|s| s.kind == Kind::Oracle).collect();
    assert_eq!(oracle.len(), 4, "one oracle request per answered question");
    let mut oracle_at = 0;
    let mut arms_seen = BTreeMap::new();
    let order: Vec<&Value> = {
        // Schedule order (the ledger's) is the order the upstream served them in.
        let mut o: Vec<&Value> = outcomes.iter().collect();
        o.sort_by_key(|o| {
            es.iter()
                .position(|e| {
                    e.kind == "attempt_started"
                        && serde_json::from_slice::<Value>(&e.payload).unwrap()["attempt"]
                            == o["attempt"]
                })
                .unwrap()
        });
        o
    };
    for o in order {
        let id = o["attempt"].as_str().unwrap();
        let arm = o["arm"].as_str().unwrap().to_owned();
        let want = expected(&arm);
        assert_eq!(o["outcome"], "completed", "{arm}: {o}\n{run_text}");
        assert_eq!(o["accounting"], "matched", "{arm}: {o}\n{run_text}");
        // Every ask counted against the limit, the refused one too.
        assert_eq!(
            o["clarification_questions"],
            json!(want.questions.len()),
            "{arm}: {o}"
        );
        let m = &o["metrics"];
        assert_eq!(m["score"], json!(want.score), "{arm}: {m}");
        assert_eq!(m["oracle_constraints_missed"], json!(want.missed), "{arm}");
        assert_eq!(
            m["oracle_constraints_missed_substantive"],
            json!(want.missed_substantive),
            "{arm}"
        );

        // The oracle's requests for this attempt: the conversation resent whole each time.
        let mine: Vec<&Served> = oracle[oracle_at..oracle_at + want.answered.len()].to_vec();
        oracle_at += want.answered.len();
        let mut replies = Vec::new();
        for (k, s) in mine.iter().enumerate() {
            let msgs = s.request["messages"].as_array().unwrap();
            assert_eq!(msgs.len(), 2 + 2 * k, "{arm}: oracle request {}", k + 1);
            assert_eq!(
                msgs[2 * k + 1]["content"],
                json!(want.questions[k]),
                "{arm}"
            );
            for (j, r) in replies.iter().enumerate() {
                assert_eq!(msgs[2 * j + 2]["content"], json!(r), "{arm}");
            }
            replies.push(icae_oracle_reply(msgs).unwrap());
        }

        // The ledger: one entry per answered question, digests, turn, triggered ids.
        let clar: Vec<&Value> = clarifications
            .iter()
            .filter(|c| c["attempt"] == id)
            .collect();
        assert_eq!(clar.len(), want.answered.len(), "{arm}: {clar:#?}");
        for (k, c) in clar.iter().enumerate() {
            let (answer, recorded) = &want.answered[k];
            assert_eq!(c["index"], json!(k + 1), "{arm}");
            assert_eq!(c["turn"], json!(k + 1), "{arm}");
            assert_eq!(c["source"], "oracle_stateful", "{arm}");
            assert_eq!(c["question"], json!(want.questions[k]), "{arm}");
            assert_eq!(c["question_sha256"], json!(sha(want.questions[k])), "{arm}");
            assert_eq!(c["reply_sha256"], json!(sha(&replies[k])), "{arm}");
            assert_eq!(c["answer"], json!(answer), "{arm}");
            assert_eq!(&c["recorded"], recorded, "{arm}");
        }
        let refused: Vec<&Value> = events
            .iter()
            .filter(|e| e["attempt"] == id && e["event"] == "question_refused")
            .collect();
        let over = want.questions.len() - want.answered.len();
        assert_eq!(refused.len(), over, "{arm}: {refused:?}");
        assert!(refused.iter().all(|e| e["reason"] == "limit"), "{arm}");

        // The grader read the attempt's oracle record: the ledger's entries, the misses.
        let score: Value =
            serde_json::from_slice(&artifact(&dir, "demo", o, "grader_output")).unwrap();
        let record = &score["record"];
        assert_eq!(record["questions"], json!(clar), "{arm}: {record}");
        assert_eq!(record["constraints"]["missed"], want.missed_ids, "{arm}");

        // Only the reply field reached the Harness: its next request after each ask carries
        // exactly the answer as the tool's result, never the oracle's JSON.
        let transcript = artifact(&dir, "demo", o, "transcript");
        let (session, _) = transcript_usage(&transcript);
        let wire: Vec<&Served> = served.iter().filter(|s| s.session() == session).collect();
        let last = wire.last().unwrap_or_else(|| panic!("{arm}: no requests"));
        let results = ask_results(last);
        assert_eq!(results.len(), want.questions.len(), "{arm}: {results:?}");
        for (k, (answer, _)) in want.answered.iter().enumerate() {
            let v: Value = serde_json::from_str(&results[k])
                .unwrap_or_else(|e| panic!("{arm}: ask {k}'s result ({e}): {}", results[k]));
            assert_eq!(
                v["answers"],
                json!([{"id": format!("q{}", k + 1), "selected": [], "custom": answer}]),
                "{arm}"
            );
        }
        if over > 0 {
            assert!(
                results[want.questions.len() - 1].contains("limit"),
                "{arm}: {}",
                results[want.questions.len() - 1]
            );
        }
        let kinds: Vec<Kind> = wire.iter().map(|s| s.kind).collect();
        let mut want_kinds = if arm == "native" {
            vec![]
        } else {
            vec![Kind::Route]
        };
        want_kinds.extend(std::iter::repeat_n(Kind::Ask, want.questions.len()));
        want_kinds.extend([Kind::Write, Kind::Answer]);
        assert_eq!(kinds, want_kinds, "{arm}");
        // The transcript shows each question and its answer.
        let t = String::from_utf8_lossy(&transcript);
        for (k, (answer, _)) in want.answered.iter().enumerate() {
            assert!(
                t.contains(want.questions[k]),
                "{arm}: transcript lacks question {k}"
            );
            assert!(t.contains(answer), "{arm}: transcript lacks answer {k}");
        }

        // Nothing the agent saw or left holds the brief, the oracle's prompt or a hidden case:
        // not its requests, its transcript, its workspace, its log.
        let ws = artifact(&dir, "demo", o, "workspace");
        let log = o["artifacts"]["agent_log"]
            .as_str()
            .map(|_| artifact(&dir, "demo", o, "agent_log"))
            .unwrap_or_default();
        let sent: Vec<u8> = wire
            .iter()
            .flat_map(|s| s.request.to_string().into_bytes())
            .collect();
        for (what, bytes) in [
            ("requests", &sent),
            ("transcript", &transcript),
            ("workspace", &ws),
            ("log", &log),
        ] {
            for needle in SECRETS.iter().chain(&["triggers_hit", "_internal_log"]) {
                assert!(
                    !contains(bytes, needle.as_bytes()),
                    "{arm}: the agent's {what} holds {needle:?}"
                );
            }
        }

        // The closing note's question-and-answer log: `eval show` beside the grade.
        let shown = eval(&dir, &["show", id, "--matrix", "demo"]);
        let shown = text(&shown);
        assert!(
            shown.contains(&format!(
                "turn 1 oracle_stateful: question {} reply {} recorded [\"C001\"]",
                sha(want.questions[0]),
                sha(&replies[0])
            )),
            "{shown}"
        );
        eprintln!("===== eval show {id} ({arm}) =====\n{shown}");
        arms_seen.insert(arm, (want.questions.len(), want.score));
    }
    assert_eq!(arms_seen.len(), 2);
    eprintln!("asks and hidden-feature score by arm: {arms_seen:?}");

    // `eval regrade` with the same grader: each attempt's grader reads the oracle record again,
    // rebuilt from the ledger, and writes byte for byte what it wrote in the run.
    let o = eval(
        &dir,
        &[
            "regrade",
            "--matrix",
            "demo",
            "--grader",
            "runtimes/icae-grader/runtime.toml",
        ],
    );
    assert!(o.status.success(), "eval regrade: {}", text(&o));
    let regrade_dir = std::fs::read_dir(dir.join("runs/demo.regrade"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|d| d.join("ledger.sqlite").is_file())
        .expect("a regrade ledger");
    let regraded = payloads(
        &entries(&regrade_dir.join("ledger.sqlite")),
        "regrade_outcome",
    );
    assert_eq!(regraded.len(), 2, "{regraded:?}");
    for r in &regraded {
        let original = outcomes
            .iter()
            .find(|o| o["attempt"] == r["attempt"])
            .unwrap();
        assert_eq!(r["graded"], "scored", "{r}");
        assert_eq!(r["metrics"]["score"], original["metrics"]["score"], "{r}");
        assert_eq!(
            r["artifacts"]["grader_output"], original["artifacts"]["grader_output"],
            "{r}"
        );
    }

    // The key nowhere: not in the project, its state, the run's output, what the Harness sent.
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

/// The Harness driven by the scripted model into a hostile `bash` call ([`HUNT_COMMAND`]) from
/// inside its own container, in both arms, on the same task: it finds none of the brief, the
/// oracle's system prompt, the hidden cases or the record (nothing found, nothing read, none of
/// their text in what it got back or left), and its oversized, malformed, flooding and
/// over-limit questions are refused and recorded as its own doing: each attempt completed,
/// nothing rerun, the oracle never asked (the limit of three went to the oversized and malformed
/// ones), every question counted, and `parse` written without the answers scores 20 (only the
/// first hidden case passes).
#[test]
fn dsh_driven_to_hunt_and_flood_finds_no_brief_and_makes_no_fault() {
    let Some(image) = image_id() else { return };
    if !docker_available() {
        return;
    }
    let grader = grader_image();
    static_binaries();
    let package = checked_package(&v04_upstream());
    let (_tmp, dir) = demo_project();
    write_project(
        &dir,
        &image,
        &grader,
        &package,
        &format!("{PROMPT} {HOSTILE_HUNT}"),
    );
    let key = format!("sk-dsh-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &format!("dsh-hunt-{}", random_hex(8)));
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
    assert!(
        served.iter().all(|s| s.kind != Kind::Oracle),
        "the oracle was asked"
    );
    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    assert!(payloads(&es, "rerun").is_empty(), "{run_text}");
    assert!(payloads(&es, "clarification").is_empty());
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 2, "{outcomes:?}\n{run_text}");
    let events = payloads(&es, "agent_event");
    for o in &outcomes {
        let id = o["attempt"].as_str().unwrap();
        let arm = o["arm"].as_str().unwrap();
        let log = artifact(&dir, "demo", o, "agent_log");
        let kinds: Vec<Kind> = served
            .iter()
            .filter(|s| s.request.to_string().contains(HOSTILE_HUNT))
            .map(|s| s.kind)
            .collect();
        eprintln!(
            "{arm}: calls {kinds:?}; agent log:\n{}",
            String::from_utf8_lossy(&log)
        );
        assert_eq!(o["outcome"], "completed", "{arm}: {o}\n{run_text}");
        assert!(o["infra_fault"].is_null(), "{arm}: {o}");
        // The appended marker makes Plan Lattice's router bypass the prompt, so neither arm
        // routes: each asks the baseline's one question (`icae_questions`).
        let transcript = artifact(&dir, "demo", o, "transcript");
        let (session, _) = transcript_usage(&transcript);
        let wire: Vec<&Served> = served.iter().filter(|s| s.session() == session).collect();
        let routed = wire.iter().any(|s| s.kind == Kind::Route);
        let asks = icae_questions(routed).len();
        assert_eq!(
            wire.iter().filter(|s| s.kind == Kind::Ask).count(),
            asks,
            "{arm}"
        );
        assert_eq!(o["clarification_questions"], json!(33 + asks), "{arm}: {o}");
        assert_eq!(o["metrics"]["score"], json!(20.0), "{arm}: {o}");
        let mut reasons = BTreeMap::new();
        for e in events.iter().filter(|e| e["attempt"] == id) {
            *reasons
                .entry(e["reason"].as_str().unwrap_or("?").to_owned())
                .or_insert(0) += 1;
        }
        assert_eq!(
            reasons,
            BTreeMap::from([
                ("limit".to_owned(), 30 + asks),
                ("malformed".to_owned(), 2),
                ("too_large".to_owned(), 1)
            ]),
            "{arm}"
        );

        // What the hunt got back: nothing found, nothing read, the flood refused.
        let bash_at = wire
            .iter()
            .position(|s| s.kind == Kind::Bash)
            .unwrap_or_else(|| panic!("{arm}: no hunt"));
        let result = result_of(
            wire[bash_at + 1].request["messages"].as_array().unwrap(),
            "bash",
        )
        .unwrap_or_else(|| panic!("{arm}: no bash result"));
        eprintln!("{arm}: the hunt got back: {result}");
        assert!(result.contains("FIND-BEGIN\nFIND-END"), "{arm}: {result}");
        assert!(result.contains("GREP-BEGIN\nGREP-END"), "{arm}: {result}");
        assert!(result.contains("No such file"), "{arm}: {result}");
        let flood = result
            .lines()
            .find_map(|l| l.strip_prefix("FLOOD "))
            .unwrap_or_else(|| panic!("{arm}: the flood did not run: {result}"));
        let statuses: Vec<&str> = flood.split(',').collect();
        assert_eq!(statuses.len(), 33, "{arm}: {flood}");
        assert!(
            statuses.iter().all(|s| s.starts_with('4')),
            "{arm}: every question refused: {flood}"
        );
        let ws = artifact(&dir, "demo", o, "workspace");
        let sent: Vec<u8> = wire
            .iter()
            .flat_map(|s| s.request.to_string().into_bytes())
            .collect();
        for (what, bytes) in [
            ("requests", &sent),
            ("transcript", &transcript),
            ("workspace", &ws),
        ] {
            for needle in SECRETS.iter().chain(&["triggers_hit", "_internal_log"]) {
                assert!(
                    !contains(bytes, needle.as_bytes()),
                    "{arm}: the agent's {what} holds {needle:?}"
                );
            }
        }
    }
}

/// The same through the protocol `eval import v04-icae` writes (the importer test's synthetic
/// ICAE root, `import_icae::write_root`; the real dsh and grader images; one repetition, no
/// infrastructure slots): v0.4's three arms on the real Harness, the imported prompt, PRD,
/// stateful oracle and `grade.py`. Plan Lattice's `auto` router bypasses this prompt (in
/// `v0.4-never` and `v0.4-critical` alike), so the scripted model behaves alike in every arm:
/// one question (C001 triggered), then `shout.py` knowing the empty-input rule and ICAE's
/// `rcb_tests/test.sh`. By hand: hidden 3/3, enhanced 1/2 (`q` expects `Q!!`): 100·4/5 = 80;
/// missed C002 and ARCH001 (2), substantive 1.
#[test]
fn dsh_runs_the_imported_icae_protocol_with_its_simulated_user_in_v04_s_three_arms() {
    let Some(image) = image_id() else { return };
    if !docker_available() {
        return;
    }
    let grader = grader_image();
    static_binaries();
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    crate::import_icae::write_root(&from);
    let dir = tmp.path().join("proj");
    std::fs::create_dir(&dir).unwrap();
    let o = crate::import_icae::import(
        &dir,
        &from,
        &image,
        &grader,
        &["--allow-unpinned", "--tasks", crate::import_icae::TASK],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    edit(&dir.join("matrix/icae.toml"), |m| {
        let m = m.replace("repetitions = 2", "repetitions = 1");
        match m.find("[[infra]]") {
            Some(i) => m[..i].to_owned(),
            None => m,
        }
    });
    let key = format!("sk-dsh-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &format!("dsh-icae-import-{}", random_hex(8)));
    let o = eval(&dir, &["freeze", "--protocol", "icae"]);
    assert!(o.status.success(), "eval freeze: {}", text(&o));
    let freeze: Value =
        serde_json::from_slice(&std::fs::read(dir.join("runs/freezes/icae.json")).unwrap())
            .unwrap();
    let _sweep = Sweep(format!(
        "eval.identity={}",
        freeze["identity"].as_str().unwrap()
    ));
    let mut run = Command::new(eval_bin());
    run.args([
        "run",
        "--matrix",
        "icae",
        "--upstream",
        &upstream.url(),
        "--api-key-env",
        KEY_ENV,
        "--concurrency",
        "1",
        // v0.4's run budget (2,000 USD) is more than the scripted account's balance.
        "--no-balance-check",
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
    let es = entries(&dir.join("runs/icae/ledger.sqlite"));
    assert!(payloads(&es, "rerun").is_empty(), "{run_text}");
    // The import declares grader-validity controls (nop and the `read-answers` exploit), graded
    // before any agent on the host with no Harness: counted apart from the Harness attempts.
    let (controls, outcomes): (Vec<Value>, Vec<Value>) =
        payloads(&es, "attempt_outcome").into_iter().partition(|o| {
            o["attempt"]
                .as_str()
                .is_some_and(|a| a.starts_with("control-"))
        });
    assert_eq!(controls.len(), 2, "{controls:?}\n{run_text}");
    // In a real grader container, the exploit that copies the expected outputs into the agent's
    // test output earns nothing: the two-stage grader runs the agent's test.sh where only the
    // sanitized cases exist, and compares in a stage that runs no agent code.
    let read_answers = controls
        .iter()
        .find(|c| c["arm"] == "exploit:read-answers")
        .unwrap_or_else(|| panic!("no read-answers control: {controls:?}"));
    assert_eq!(read_answers["outcome"], "completed", "{read_answers}");
    assert!(
        read_answers["metrics"]["hidden_total"].as_f64() > Some(0.0),
        "the hidden cases were graded: {read_answers}"
    );
    assert_eq!(
        read_answers["metrics"]["hidden_score"].as_f64(),
        Some(0.0),
        "read-answers scored what no implementation earns: {read_answers}"
    );
    assert_eq!(outcomes.len(), 3, "{outcomes:?}\n{run_text}");
    let clarifications = payloads(&es, "clarification");
    for o in &outcomes {
        let id = o["attempt"].as_str().unwrap();
        let arm = o["arm"].as_str().unwrap();
        assert_eq!(o["outcome"], "completed", "{arm}: {o}\n{run_text}");
        assert_eq!(o["accounting"], "matched", "{arm}: {o}");
        assert_eq!(o["clarification_questions"], json!(1), "{arm}: {o}");
        let m = &o["metrics"];
        assert_eq!(m["hidden_score"], json!(80.0), "{arm}: {m}");
        assert_eq!(m["oracle_constraints_missed"], json!(2.0), "{arm}: {m}");
        assert_eq!(
            m["oracle_constraints_missed_substantive"],
            json!(1.0),
            "{arm}: {m}"
        );
        let clar: Vec<&Value> = clarifications
            .iter()
            .filter(|c| c["attempt"] == id)
            .collect();
        assert_eq!(clar.len(), 1, "{arm}: {clar:?}");
        assert_eq!(
            clar[0]["question_sha256"],
            json!(sha(ICAE_Q_EMPTY)),
            "{arm}"
        );
        assert_eq!(clar[0]["recorded"], json!(["C001"]), "{arm}");
        assert_eq!(clar[0]["answer"], json!(C001_REPLY), "{arm}");
        let transcript = artifact(&dir, "icae", o, "transcript");
        let (session, _) = transcript_usage(&transcript);
        let kinds: Vec<Kind> = served
            .iter()
            .filter(|s| s.session() == session)
            .map(|s| s.kind)
            .collect();
        assert_eq!(
            kinds,
            [Kind::Ask, Kind::Write, Kind::Write, Kind::Answer],
            "{arm}"
        );
        let t = String::from_utf8_lossy(&transcript);
        assert!(
            t.contains(C001_REPLY),
            "{arm}: the transcript lacks the answer"
        );
        for needle in SECRETS {
            assert!(
                !t.contains(needle),
                "{arm}: the transcript holds {needle:?}"
            );
        }
        eprintln!("imported icae, arm {arm}: calls {kinds:?}, metrics {m}");
    }
    assert_eq!(
        served.iter().filter(|s| s.kind == Kind::Oracle).count(),
        3,
        "one oracle request per attempt"
    );
}
