//! v0.4's real `simple` suite end to end (issue 15): `eval import v04-simple` from v0.4's upstream
//! inputs (`EVAL_V04_UPSTREAM`, default `../shared/v04-upstream`) into a fresh project — two tasks
//! of different languages (`simple-js-clamp`, `simple-python-whitespace`), v0.4's grader runtime,
//! the three real arms `native`, `v0.3-always` (Plan Lattice 0.3.0) and `v0.4-auto` (0.4.0-rc.3)
//! on the DeepSeek Harness base —, then `eval freeze`, `eval run` against the scripted
//! DeepSeek-compatible upstream of `support/dsh.rs` (DeepSeek's wire: thinking mode, token-sized
//! deltas, tool-call argument fragments, keep-alive comments, events split across writes, usage
//! on the finish chunk and a trailing `choices: []` chunk, a prefix cache shared across attempts;
//! it writes a correct solution with the Harness's real tools), and `eval report`. Asserted: every attempt completed and graded by v0.4's
//! grader at 100 (5 of 5 assertions); the arms differ on the wire (`lattice_route` only in
//! `v0.4-auto`'s requests); every attempt's transcript usage == the proxy's meter == the
//! upstream's tally; `eval show --json` lists each attempt's ledger calls in order, the site has
//! the verdict and a page per attempt; `eval regrade` with v0.4's grader grades every archived
//! workspace as the run did, beside an unchanged verdict; the key nowhere. Prints one wire summary line per arm. Needs
//! `EVAL_TEST_DSH_POLY_IMAGE` and `EVAL_TEST_V04_GRADER_IMAGE` (`scripts/ensure-harness-images.sh`).

use crate::support::dsh::*;
use crate::support::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

const DSH_ENV: &str = "EVAL_TEST_DSH_POLY_IMAGE";
const GRADER_ENV: &str = "EVAL_TEST_V04_GRADER_IMAGE";
const UPSTREAM_ENV: &str = "EVAL_V04_UPSTREAM";
const KEY_ENV: &str = "EVAL_DSH_SIMPLE_TEST_KEY";
const NAME: &str = "simple-real";
const TASKS: [&str; 2] = ["simple-js-clamp", "simple-python-whitespace"];
const ARMS: [&str; 3] = ["native", "v0.3-always", "v0.4-auto"];
/// A hang detector only (14 attempts of 4–15 s each on an idle machine, minutes when loaded).
const HANG_GUARD_SECS: u64 = 3600;

fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// An image id from the environment; `None` (skip) only when `EVAL_SKIP_DOCKER=1` asks for it.
pub(crate) fn image_id(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(id) if !id.trim().is_empty() => {
            let id = id.trim().to_owned();
            assert!(
                eval_runtimes::definition::is_digest(&id),
                "{var}={id:?} is not an image id (sha256:<64 hex>); take it from \
                 scripts/ensure-harness-images.sh"
            );
            Some(id)
        }
        _ if std::env::var("EVAL_SKIP_DOCKER").is_ok_and(|v| v == "1") => {
            eprintln!("skipping: {var} is not set and EVAL_SKIP_DOCKER=1");
            None
        }
        _ => panic!(
            "{var} is not set: run `export $(scripts/ensure-harness-images.sh)` first, or set \
             EVAL_SKIP_DOCKER=1 to skip this Docker test"
        ),
    }
}

/// v0.4's upstream inputs: `EVAL_V04_UPSTREAM`, else `../shared/v04-upstream` beside the
/// repository.
fn v04_upstream() -> PathBuf {
    let dir = crate::support::v04_upstream();
    assert!(
        dir.join("simple-tasks.json").is_file(),
        "{}: no simple-tasks.json; set {UPSTREAM_ENV} to the directory holding v0.4's inputs",
        dir.display()
    );
    dir
}

#[test]
fn v04_simple_imported_frozen_run_and_reported_on_the_real_harness() {
    let Some(dsh) = image_id(DSH_ENV) else { return };
    let Some(grader) = image_id(GRADER_ENV) else {
        return;
    };
    if !docker_available() {
        return;
    }
    static_binaries();
    let from = v04_upstream();

    // A fresh project: the import is all it holds.
    let tmp = tempfile::Builder::new()
        .prefix("dshsimple")
        .tempdir()
        .unwrap();
    let dir = tmp.path().join("proj");
    std::fs::create_dir(&dir).unwrap();
    let tasks = TASKS.join(",");
    let o = eval(
        &dir,
        &[
            "import",
            "v04-simple",
            "--from",
            from.to_str().unwrap(),
            "--protocol",
            NAME,
            "--dsh-image",
            &dsh,
            "--grader-image",
            &grader,
            "--tasks",
            &tasks,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "eval import: {}", text(&o));
    // The import's protocol names this instance apart from any other run of the test.
    let protocol = dir.join(format!("protocols/{NAME}/protocol.toml"));
    edit(&protocol, |s| {
        format!("{s}\n# dsh-simple test {}\n", random_hex(8))
    });
    let o = eval(&dir, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "eval freeze: {}", text(&o));
    let freeze: Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("runs/freezes/{NAME}.json"))).unwrap(),
    )
    .unwrap();
    let identity = freeze["identity"].as_str().unwrap().to_owned();
    let _sweep = Sweep(format!("eval.identity={identity}"));

    let marker = format!("dsh-simple-{}", random_hex(12));
    let key = format!("sk-dshs-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &marker);
    let started = std::time::Instant::now();
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
    let run_secs = started.elapsed().as_secs_f64();
    let run_text = text(&out);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "eval run exited {:?}:\n{run_text}",
        out.status.code()
    );

    // `eval run`'s own preflight read the account first: `GET /models`, `GET /user/balance`.
    assert_eq!(upstream.account_requests(), 2, "{run_text}");
    for check in [
        "key accepted",
        "model listed",
        "balance available",
        "fits the balance",
    ] {
        assert!(
            run_text.contains(check),
            "preflight: {check:?} not in {run_text}"
        );
    }

    let es = entries(&dir.join(format!("runs/{NAME}/ledger.sqlite")));
    assert!(payloads(&es, "rerun").is_empty(), "{run_text}");
    // Grader validity is on by default (eval's own reference solutions): every task's control
    // arms (oracle, nop and the exploit library) are graded before any agent runs, on the host
    // with no Harness, so they are counted apart from the Harness attempts asserted below.
    let (controls, outcomes): (Vec<Value>, Vec<Value>) =
        payloads(&es, "attempt_outcome").into_iter().partition(|o| {
            o["attempt"]
                .as_str()
                .is_some_and(|a| a.starts_with("control-"))
        });
    assert_eq!(controls.len(), TASKS.len() * 8, "{controls:?}\n{run_text}");
    for c in &controls {
        assert_ne!(c["outcome"], "infra_fault", "a control slot: {c}");
    }
    // Two tasks × three arms × two repetitions, plus v0.4's two infrastructure slots.
    assert_eq!(outcomes.len(), 14, "{outcomes:?}\n{run_text}");
    assert!(
        upstream.unexpected().is_empty(),
        "{:?}",
        upstream.unexpected()
    );
    assert_eq!(upstream.unauthorized(), 0, "a request came without the key");
    let served = upstream.served();
    if let Some(path) = std::env::var_os("EVAL_DSH_TEST_DUMP") {
        let lines: Vec<String> = served
            .iter()
            .map(|s| serde_json::json!({"kind": format!("{:?}", s.kind), "headers": s.headers, "request": s.request}).to_string())
            .collect();
        std::fs::write(path, lines.join("\n")).unwrap();
    }

    let calls: Vec<Value> = payloads(&es, "model_call")
        .into_iter()
        .filter(|c| c["role"] == "agent")
        .collect();
    let mut by_attempt: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for c in &calls {
        assert_eq!(c["result"], "ok", "{c}");
        by_attempt
            .entry(c["attempt"].as_str().unwrap().to_owned())
            .or_default()
            .push(c);
    }

    // Per attempt: completed, graded 100 by v0.4's grader, the Harness's own usage equal to
    // the meter and to the upstream's tally of its session.
    let mut arm_of_session: BTreeMap<String, (String, String)> = BTreeMap::new();
    for o in &outcomes {
        let id = o["attempt"].as_str().unwrap();
        let arm = o["arm"].as_str().unwrap().to_owned();
        let slot = o["slot"].as_str().unwrap_or_default().to_owned();
        assert_eq!(o["outcome"], "completed", "{arm} {slot}: {o}\n{run_text}");
        assert_eq!(o["accounting"], "matched", "{arm} {slot}: {o}");
        assert_eq!(
            (
                o["metrics"]["score"].as_f64(),
                o["metrics"]["checks_passed"].as_f64(),
                o["metrics"]["checks_total"].as_f64()
            ),
            (Some(100.0), Some(5.0), Some(5.0)),
            "{arm} {slot}: v0.4's grader on the scripted solution: {o}"
        );
        let transcript = artifact(&dir, NAME, o, "transcript");
        let (session, own) = transcript_usage(&transcript);
        let (_, dsh_calls) = transcript_calls(&transcript);
        let mut metered: Vec<&Value> = by_attempt.get(id).cloned().unwrap_or_default();
        metered.sort_by_key(|c| c["seq"].as_u64());
        // The Harness's disjoint counts against DeepSeek's: cache hits and reasoning, call by call.
        let theirs_full: Vec<&Served> = served.iter().filter(|s| s.session() == session).collect();
        assert_eq!(
            dsh_calls
                .iter()
                .map(|u| (u.cache_read, u.reasoning))
                .collect::<Vec<_>>(),
            theirs_full
                .iter()
                .map(|s| (s.hit_tokens, s.reasoning_tokens))
                .collect::<Vec<_>>(),
            "{arm} {slot}: the transcript's cacheReadTokens/reasoningTokens vs the upstream's"
        );
        assert_eq!(
            metered
                .iter()
                .map(|c| (
                    c["tokens"]["cached"].as_u64(),
                    c["tokens"]["reasoning"].as_u64()
                ))
                .collect::<Vec<_>>(),
            theirs_full
                .iter()
                .map(|s| (Some(s.hit_tokens), Some(s.reasoning_tokens)))
                .collect::<Vec<_>>(),
            "{arm} {slot}: the ledger's cached/reasoning vs the upstream's"
        );
        // The attempt's meter is what the upstream billed, cache hits included, and the
        // transcript's total is the same number.
        let billed: u64 = theirs_full
            .iter()
            .map(|s| s.prompt_tokens + s.completion_tokens)
            .sum();
        let meter =
            o["tokens"]["input"].as_u64().unwrap() + o["tokens"]["output"].as_u64().unwrap();
        assert_eq!(meter, billed, "{arm} {slot}: meter vs upstream billed");
        assert_eq!(
            o["harness"]["total_tokens"].as_u64(),
            Some(billed),
            "{arm} {slot}: transcript total vs upstream billed"
        );
        let metered: Vec<(u64, u64)> = metered
            .iter()
            .map(|c| {
                (
                    c["tokens"]["input"].as_u64().unwrap(),
                    c["tokens"]["output"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(own, metered, "{arm} {slot}: transcript vs ledger");
        let theirs: Vec<(u64, u64)> = served
            .iter()
            .filter(|s| s.session() == session)
            .map(|s| (s.prompt_tokens, s.completion_tokens))
            .collect();
        assert_eq!(own, theirs, "{arm} {slot}: transcript vs upstream");
        let task = served
            .iter()
            .find(|s| s.session() == session)
            .and_then(|s| s.task)
            .unwrap_or_default()
            .to_owned();
        arm_of_session.insert(session, (arm, task));
    }
    assert_eq!(
        arm_of_session.len(),
        outcomes.len(),
        "one session per attempt"
    );
    let mut ledger_usage: Vec<(u64, u64)> = calls
        .iter()
        .map(|c| {
            (
                c["tokens"]["input"].as_u64().unwrap(),
                c["tokens"]["output"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut upstream_usage: Vec<(u64, u64)> = served
        .iter()
        .map(|s| (s.prompt_tokens, s.completion_tokens))
        .collect();
    ledger_usage.sort_unstable();
    upstream_usage.sort_unstable();
    assert_eq!(ledger_usage, upstream_usage, "ledger vs upstream");

    // The wire was DeepSeek's: every answer complete, thinking, keep-alives, events split over
    // writes; tool calls in fragments; the cache hit nearly everywhere, across attempts too
    // (the first call of every attempt after the first of its arm shares the schemas' prefix).
    for s in &served {
        assert!(s.complete && s.fault.is_none(), "{s:?}");
        assert!(s.reasoning_tokens > 0, "no thinking: {:?}", s.kind);
        assert!(
            s.comments >= 2 && s.writes > s.events,
            "{:?}",
            (s.comments, s.writes, s.events)
        );
        assert!(s.completion_tokens > s.reasoning_tokens);
        assert!(s.hit_tokens <= s.prompt_tokens && s.hit_tokens % 64 == 0);
    }
    let hits = served.iter().filter(|s| s.hit_tokens > 0).count();
    assert!(
        hits * 10 >= served.len() * 8,
        "{hits} of {} calls hit the cache",
        served.len()
    );
    let mut first_calls: BTreeMap<String, &Served> = BTreeMap::new();
    for s in &served {
        first_calls.entry(s.session()).or_insert(s);
    }
    assert!(
        first_calls.values().filter(|s| s.hit_tokens > 0).count() >= first_calls.len() - ARMS.len(),
        "first calls of later attempts should hit the shared prefix: {:?}",
        first_calls
            .values()
            .map(|s| s.hit_tokens)
            .collect::<Vec<_>>()
    );

    // The arms on the wire.
    let wire = |arm: &str| -> Vec<&Served> {
        served
            .iter()
            .filter(|s| {
                arm_of_session
                    .get(&s.session())
                    .is_some_and(|(a, _)| a == arm)
            })
            .collect()
    };
    let lattice = |s: &Served| s.tools().iter().any(|t| t.starts_with("lattice_"));
    let route = |s: &Served| s.tools().iter().any(|t| t == "lattice_route");
    // One line per arm: one real attempt on simple-js-clamp (the prompt v0.4's router probes),
    // then the arm's totals over all its attempts.
    for arm in ARMS {
        let all = wire(arm);
        let one = all
            .iter()
            .find(|s| s.task == Some("src/clamp.js"))
            .map(|s| s.session())
            .unwrap_or_default();
        let attempt: Vec<&Served> = all.iter().copied().filter(|s| s.session() == one).collect();
        let n = all
            .iter()
            .map(|s| s.session())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let (i, o) = all.iter().fold((0, 0), |(a, b), s| {
            (a + s.prompt_tokens, b + s.completion_tokens)
        });
        eprintln!(
            "{} | all {n} attempts: {} calls, usage in={i} out={o}",
            wire_summary(&format!("{arm} (simple-js-clamp)"), &attempt),
            all.len()
        );
        // The closing note's figures: the upstream's bill, the ledger's meter and the
        // transcript's total for this one attempt.
        let outcome = outcomes
            .iter()
            .find(|o| {
                let t = artifact(&dir, NAME, o, "transcript");
                transcript_usage(&t).0 == one
            })
            .unwrap();
        let (p, h, c, r) = attempt.iter().fold((0, 0, 0, 0), |(p, h, c, r), s| {
            (
                p + s.prompt_tokens,
                h + s.hit_tokens,
                c + s.completion_tokens,
                r + s.reasoning_tokens,
            )
        });
        eprintln!(
            "billing {arm}: upstream billed prompt={p} (cache hits {h}) completion={c} \
             (reasoning {r}) total={} | ledger meter input={} output={} cached={} reasoning={} \
             | transcript total={} turns={} | accounting={}",
            p + c,
            outcome["tokens"]["input"],
            outcome["tokens"]["output"],
            outcome["tokens"]["cached"],
            outcome["tokens"]["reasoning"],
            outcome["harness"]["total_tokens"],
            outcome["harness"]["model_turns"],
            outcome["accounting"],
        );
    }
    assert!(
        wire("native").iter().all(|s| !lattice(s)),
        "the baseline was offered a Plan Lattice tool"
    );
    assert!(
        wire("v0.3-always").iter().all(|s| !route(s)),
        "v0.3.0 has no lattice_route"
    );
    let v04 = wire("v0.4-auto");
    assert!(
        v04.iter()
            .filter(|s| s.task == Some("src/clamp.js"))
            .all(|s| s.kind != Kind::Route || route(s)),
        "lattice_route called without being offered"
    );
    assert!(
        v04.iter()
            .any(|s| s.task == Some("src/clamp.js") && s.kind == Kind::Route),
        "v0.4-auto never routed the clamp task (its router probes that prompt)"
    );
    // The Python prompt is bypassed by v0.4's router: its wire is the baseline's.
    assert!(
        v04.iter()
            .filter(|s| s.task == Some("text_utils.py"))
            .all(|s| !lattice(s)),
        "a Plan Lattice tool offered on a bypassed prompt"
    );

    // The report.
    let o = eval(&dir, &["report", "--matrix", NAME, "--format", "json"]);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "eval report: {}",
        text(&o)
    );
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("eval report --format json: {e}: {}", text(&o)));
    assert_eq!(report["integrity_failure"], false, "{report}");
    eprintln!(
        "eval report: {} (reasons: {})",
        report["verdict"], report["reasons"]
    );
    let rendered = report.to_string();
    for arm in ARMS {
        assert!(rendered.contains(arm), "the report does not name {arm}");
    }
    eprintln!(
        "eval run of {} attempts: {run_secs:.1} s; report exit {:?}",
        outcomes.len(),
        o.status.code()
    );

    // The reviewer's view of the real run: `eval show --json` of every attempt lists exactly its
    // ledger's model calls, in ledger order, and the Harness's tool calls from its transcript;
    // the site has the verdict of `report.json` and one page per attempt.
    for out in &outcomes {
        let attempt = out["attempt"].as_str().unwrap();
        let o = eval(&dir, &["show", attempt, "--matrix", NAME, "--json"]);
        assert!(o.status.success(), "eval show {attempt}: {}", text(&o));
        let shown: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(shown["format"], "eval.show/1");
        let recorded: Vec<u64> = es
            .iter()
            .filter(|e| e.kind == "model_call" && e.payload_json().unwrap()["attempt"] == attempt)
            .map(|e| e.seq)
            .collect();
        let listed: Vec<u64> = shown["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["entry"].as_u64().unwrap())
            .collect();
        assert_eq!(
            listed, recorded,
            "{attempt}: the calls shown are the ledger's, in order"
        );
        assert!(
            shown["harness_tool_calls"]
                .as_array()
                .is_some_and(|t| !t.is_empty()),
            "{attempt}: the Harness's tool calls from its transcript"
        );
    }
    let site = tmp.path().join("site");
    let o = eval(
        &dir,
        &[
            "report",
            "--matrix",
            NAME,
            "--format",
            "site",
            "--out",
            site.to_str().unwrap(),
        ],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert!(
        index.contains(report["verdict"].as_str().unwrap()),
        "the site's index shows report.json's verdict {}",
        report["verdict"]
    );
    let pages = std::fs::read_dir(site.join("attempts")).unwrap().count();
    assert_eq!(
        pages,
        outcomes.len() + controls.len(),
        "one page per attempt, control slots included"
    );

    // A regrade on the real suite (`eval regrade`): v0.4's grader runtime as imported (its own
    // `[grader] command` is the tasks') grades the archived real workspaces again. Each attempt
    // must grade exactly as it did (a regrade that took another attempt's workspace, a wrong
    // archive or other hidden files would differ), and the report's verdict and exit status stay
    // what they were.
    let g = eval(
        &dir,
        &[
            "regrade",
            "--matrix",
            NAME,
            "--grader",
            "runtimes/v04-grader/runtime.toml",
        ],
    );
    assert!(g.status.success(), "eval regrade: {}", text(&g));
    let o2 = eval(&dir, &["report", "--matrix", NAME, "--format", "json"]);
    assert_eq!(o2.status.code(), o.status.code(), "{}", text(&o2));
    let after: Value = serde_json::from_slice(&o2.stdout).unwrap();
    for field in ["verdict", "release_allowed", "reasons", "gates", "suites"] {
        assert_eq!(after[field], report[field], "{field}");
    }
    let s = &after["sensitivity"][0];
    assert_eq!(s["finished"], true, "{s}");
    assert!(s["problems"].as_array().unwrap().is_empty(), "{s}");
    let regraded = s["attempts"].as_array().unwrap();
    assert_eq!(
        regraded.len(),
        TASKS.len() * ARMS.len() * 2,
        "every statistical slot's attempt (two repetitions): {s}"
    );
    for a in regraded {
        assert_eq!(a["graded"], "scored", "{a}");
        for m in ["score", "checks_passed", "checks_total", "hardened_score"] {
            assert_eq!(a["regraded"][m], a["original"][m], "{m} of {a}");
        }
    }
    eprintln!(
        "eval regrade of {} real attempts with v0.4's grader: every one graded as it was",
        regraded.len()
    );

    // The key nowhere: not in the project, its state, the run's output, what the agent sent.
    let mut files = Vec::new();
    all_bytes(tmp.path(), &mut files);
    files.push(("<eval run stdout>".into(), out.stdout.clone()));
    files.push(("<eval run stderr>".into(), out.stderr.clone()));
    files.push(("<eval report stdout>".into(), o.stdout.clone()));
    let core = key.strip_prefix("sk-dshs-").unwrap();
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
