//! The DeepSeek Harness end to end (issue 15): `@deepseek-ai/dsh@0.1.0-rc.8` in the base image
//! `runtimes/images/dsh/build.sh` builds (`scripts/ensure-harness-images.sh` exports its id as
//! `EVAL_TEST_DSH_IMAGE`), run by `eval run` through the repository's own `runtimes/dsh/` files
//! as two arms: the Harness alone, and the Harness with Plan Lattice 0.4.0-rc.3 (the real package
//! from v0.4's upstream inputs, `EVAL_V04_UPSTREAM`, default `../shared/v04-upstream`) installed
//! offline from the arm's layer at start with `activationMode: auto`. A scripted DeepSeek-compatible
//! upstream in this process streams SSE: `lattice_route` first when offered, then the real
//! `write` tool with the solution, then the answer. Asserted: both attempts completed; the file the
//! `write` tool wrote, graded; `lattice_route` offered (and called) only in the plugin arm's
//! requests; the accounting cross-check `matched`, the transcript's own usage == the proxy's meter
//! == the upstream's tally; the transcript stored as the attempt's artifact and absent from the
//! archived workspace; `eval export atif` of both attempts passes Harbor's `TrajectoryValidator`
//! with `eval show`'s calls, tool calls and tokens; the key nowhere.

use crate::support::dsh::*;
use crate::support::real_harness::tar_files;
use crate::support::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

const IMAGE_ENV: &str = "EVAL_TEST_DSH_IMAGE";
const UPSTREAM_ENV: &str = "EVAL_V04_UPSTREAM";
pub(crate) const KEY_ENV: &str = "EVAL_DSH_TEST_KEY";
/// A hang detector only: each attempt takes 4–15 s on an idle machine, minutes on a loaded one.
pub(crate) const HANG_GUARD_SECS: u64 = 1800;
/// The v0.4 candidate package and its pinned digest (v04-upstream/SHA256SUMS).
const V04_PACKAGE: &str = "dsh-plan-lattice-0.4.0-rc.3.tgz";

/// The repository's runtime files: the test runs exactly what the importer writes.
const RUNTIME_TOML: &str = include_str!("../../../runtimes/dsh/runtime.toml");
const PROFILE_PATCH: &str = include_str!("../../../runtimes/dsh/profile.patch.yml");
/// eval's support plugin, as the importer writes it beside the runtime (its `[[arm.file]]`).
pub(crate) const SUPPORT: [(&str, &str); 4] = [
    (
        "cordis.patch.yml",
        include_str!("../../../runtimes/dsh/eval-support/cordis.patch.yml"),
    ),
    (
        "index.js",
        include_str!("../../../runtimes/dsh/eval-support/index.js"),
    ),
    (
        "package.json",
        include_str!("../../../runtimes/dsh/eval-support/package.json"),
    ),
    (
        "runner.js",
        include_str!("../../../runtimes/dsh/eval-support/runner.js"),
    ),
];

/// The repository's dsh runtime (base `image`) and its support plugin, into `dir/runtimes/dsh/`.
pub(crate) fn write_runtime(dir: &Path, image: &str) {
    let rt = dir.join("runtimes/dsh");
    std::fs::create_dir_all(rt.join("eval-support")).unwrap();
    assert!(RUNTIME_TOML.contains("@DSH_IMAGE_ID@"));
    std::fs::write(
        rt.join("runtime.toml"),
        RUNTIME_TOML.replace("@DSH_IMAGE_ID@", image),
    )
    .unwrap();
    for (name, text) in SUPPORT {
        std::fs::write(rt.join("eval-support").join(name), text).unwrap();
    }
}

pub(crate) fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn skip_docker() -> bool {
    std::env::var("EVAL_SKIP_DOCKER").is_ok_and(|v| v == "1")
}

/// The image id from the environment; `None` (skip) only when `EVAL_SKIP_DOCKER=1` asks for it.
pub(crate) fn image_id() -> Option<String> {
    image_from(IMAGE_ENV)
}

/// [`image_id`] from the variable `var` (`scripts/ensure-harness-images.sh` prints each).
pub(crate) fn image_from(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(id) if !id.trim().is_empty() => {
            let id = id.trim().to_owned();
            let hex = id.strip_prefix("sha256:").unwrap_or_default();
            assert!(
                hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
                "{var}={id:?} is not an image id (sha256:<64 hex>); \
                 take it from scripts/ensure-harness-images.sh"
            );
            Some(id)
        }
        _ if skip_docker() => {
            eprintln!("skipping: {var} is not set and EVAL_SKIP_DOCKER=1");
            None
        }
        _ => panic!(
            "{var} is not set: run `export $(scripts/ensure-harness-images.sh)` first (it \
             builds or reuses the image and prints its id), or set EVAL_SKIP_DOCKER=1 \
             to skip this Docker test"
        ),
    }
}

/// v0.4's upstream inputs (the real plugin packages): `EVAL_V04_UPSTREAM`, else
/// `../shared/v04-upstream` beside the repository.
pub(crate) fn v04_upstream() -> PathBuf {
    let dir = crate::support::v04_upstream();
    assert!(
        dir.join(V04_PACKAGE).is_file(),
        "{}: no {V04_PACKAGE}; set {UPSTREAM_ENV} to the directory holding v0.4's upstream inputs",
        dir.display()
    );
    dir
}

/// The package's sha256, checked against the directory's own SHA256SUMS (the pin).
pub(crate) fn checked_package(dir: &Path) -> Vec<u8> {
    let bytes = std::fs::read(dir.join(V04_PACKAGE)).unwrap();
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let pinned = sums
        .lines()
        .find(|l| l.ends_with(V04_PACKAGE))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("SHA256SUMS does not pin {V04_PACKAGE}"))
        .to_owned();
    let o = Command::new("sha256sum")
        .arg(dir.join(V04_PACKAGE))
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(got, pinned, "{V04_PACKAGE} differs from its pin");
    bytes
}

pub(crate) const PROTOCOL: &str = r#"schema = 1
name = "demo"
title = "The DeepSeek Harness as arms, with and without a plugin"
matrix = "demo"

[[hypotheses]]
id = "H1"
text = "The DeepSeek Harness runs as an arm, with a real plugin package in another, metered exactly."

[registration]
sample_size_rationale = "An end-to-end test, not a study."
stopping_rule = "Every slot once."
exclusion_rules = ["None."]

# What the stock headless Harness sends (issue 15), as protocols/v0.4/protocol.toml lists it; it
# asks max_tokens 256000 and sends no temperature, so neither is pinned here.
[models.agent]
api = "openai-chat"
model = "deepseek-v4-flash"
stream = true
stream_usage = true
allowed_params = ["model", "messages", "stream", "stream_options", "thinking", "reasoning_effort", "tools", "max_tokens", "temperature"]
allowed_headers = ["accept", "user-agent", "x-deepseek-harness-session-id", "x-deepseek-harness-user-id"]

[budgets.attempt]
wall_seconds = 3600
max_requests = 20
max_tokens = 5000000

[budgets.run]
max_tokens = 50000000
max_spend_usd = 100.0

[[budgets.prices]]
model = "deepseek-v4-flash"
input_usd_per_mtok = 0.27
cached_input_usd_per_mtok = 0.07
output_usd_per_mtok = 1.10

[[arms]]
id = "native"
description = "DeepSeek Harness 0.1.0-rc.8, no plugin."
runtime = "runtimes/dsh/runtime.toml"
profile = "protocols/demo/arms/native/cordis.patch.yml"

[[arms]]
id = "v04-auto"
description = "DeepSeek Harness 0.1.0-rc.8 with Plan Lattice 0.4.0-rc.3, activationMode auto."
runtime = "runtimes/dsh/runtime.toml"
profile = "protocols/demo/arms/v04-auto/cordis.patch.yml"
package = "protocols/demo/arms/v04-auto/dsh-plan-lattice-0.4.0-rc.3.tgz"

[suites.real]
description = "One small file-writing task."
metrics = ["score", "model_turns", "tokens", "duration_seconds"]
max_oracle_calls = 0

[statistics]
unit = "task"
repetitions = "mean"
resamples = 200
seed = 0
confidence = 0.95
method = "v04-percentile"
report_methods = ["percentile"]
seed_string = "{identity}:{suite}"
exact = "auto"
min_suite_tasks = 1

[missing_data]
rule = "A failed attempt scores 0."
[missing_data.values]
score = 0.0

[reruns]
codes = ["container_runtime_failure", "host_network_outage", "runner_crash_before_model_call"]
max_reruns_per_slot = 1
max_infra_attempts = 1

[[gates]]
id = "integrity"
description = "Accounting complete."
[[gates.rules]]
id = "accounting_complete"
statistic = "accounting_complete"
op = "is_true"
"#;

const MATRIX: &str = r#"name = "demo"
protocol = "demo"
description = "dsh, with and without Plan Lattice 0.4.0-rc.3"
concurrency = 1

[order]
algorithm = "chacha8"
seed = 1

[[suites]]
id = "real"
task_root = "protocols/demo/tasks/real"
tasks = ["simple-js-clamp"]
arms = ["native", "v04-auto"]
baseline = "native"
candidate = "v04-auto"
repetitions = 1
"#;

/// The prompt of v0.4's `simple-js-clamp`, verbatim.
pub(crate) const CLAMP_PROMPT: &str = "Add and export a clamp(value, min, max) function in src/clamp.js. Throw RangeError when min is greater than max. Do not add dependencies or change other files.";

pub(crate) const TASK_TOML: &str = r#"id = "simple-js-clamp"
suite = "real"
timeout_seconds = 900
metrics = ["score", "checks_passed", "checks_total"]

[grader]
runtime = "runtimes/fixture/runtime.toml"
command = [
  "/usr/local/bin/eval-fixture-grader",
  "--workspace", "{workspace}",
  "--hidden", "{hidden}",
  "--out", "{out}",
]
"#;

/// The plugin arm's profile patch: the shared rows plus the plugin's configuration, as v0.4's
/// `configureProfile` writes it for an `activationMode: auto` arm.
fn v04_patch() -> String {
    format!("{PROFILE_PATCH}- id: plan-lattice\n  config:\n    activationMode: auto\n")
}

pub(crate) fn write_project(dir: &Path, image: &str, marker: &str, package: &[u8]) {
    let unique = format!("\n# dsh-harness test {}\n", random_hex(8));
    std::fs::write(
        dir.join("protocols/demo/protocol.toml"),
        format!("{PROTOCOL}{unique}"),
    )
    .unwrap();
    std::fs::write(dir.join("matrix/demo.toml"), MATRIX).unwrap();
    write_runtime(dir, image);
    // v0.4's `simple-js-clamp` (simple-tasks.json), graded here by the fixture grader: Plan
    // Lattice's `auto` router sends this prompt to its probe phase (so `lattice_route` is offered,
    // and `write` refused until it is called), unlike a bypassed one such as the Python tasks.
    let task = dir.join("protocols/demo/tasks/real/simple-js-clamp");
    std::fs::create_dir_all(task.join("workspace/src")).unwrap();
    std::fs::create_dir_all(task.join("hidden")).unwrap();
    std::fs::write(task.join("task.toml"), TASK_TOML).unwrap();
    std::fs::write(task.join("prompt.md"), CLAMP_PROMPT).unwrap();
    std::fs::write(
        task.join("workspace/package.json"),
        "{\"type\":\"module\"}\n",
    )
    .unwrap();
    std::fs::write(
        task.join("workspace/src/clamp.js"),
        "// Implement clamp here.\n",
    )
    .unwrap();
    // Two checks, one the task can pass and one it cannot: a grader that always says 100 (or 0)
    // gives a different score than the 50 a real grading gives. The marker is in no prompt.
    std::fs::write(
        task.join("hidden/checks.toml"),
        format!(
            "[[check]]\nid = \"clamp\"\npath = \"src/clamp.js\"\ncontains = \"{marker}\"\npoints = 50\n\n\
             [[check]]\nid = \"never\"\npath = \"src/never-written.py\"\ncontains = \"x\"\npoints = 50\n"
        ),
    )
    .unwrap();
    let native = dir.join("protocols/demo/arms/native");
    std::fs::create_dir_all(&native).unwrap();
    std::fs::write(native.join("cordis.patch.yml"), PROFILE_PATCH).unwrap();
    let v04 = dir.join("protocols/demo/arms/v04-auto");
    std::fs::create_dir_all(&v04).unwrap();
    std::fs::write(v04.join("cordis.patch.yml"), v04_patch()).unwrap();
    std::fs::write(v04.join(V04_PACKAGE), package).unwrap();
}

#[test]
fn dsh_runs_as_a_baseline_and_a_plugin_arm_metered_exactly_without_the_key() {
    let Some(image) = image_id() else { return };
    if !docker_available() {
        return;
    }
    static_binaries();
    let package = checked_package(&v04_upstream());
    let o = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", &image])
        .output()
        .unwrap();
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == image,
        "the engine has no image {image} ({IMAGE_ENV}): {}",
        text(&o)
    );

    let (tmp, dir) = demo_project();
    let marker = format!("dsh-e2e-{}", random_hex(12));
    write_project(&dir, &image, &marker, &package);
    let key = format!("sk-dsh-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &marker);

    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "eval freeze: {}", text(&o));
    let identity = identity_of(&dir);
    let _sweep = Sweep(format!("eval.identity={identity}"));
    let started = std::time::Instant::now();
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
    eprintln!(
        "eval run (two dsh attempts): {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "eval run exited {:?}:\n{run_text}",
        out.status.code()
    );

    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    assert!(payloads(&es, "rerun").is_empty(), "{run_text}");
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 2, "{outcomes:?}\n{run_text}");
    assert!(
        upstream.unexpected().is_empty(),
        "{:?}",
        upstream.unexpected()
    );
    assert_eq!(upstream.unauthorized(), 0, "a request came without the key");

    let calls: Vec<Value> = payloads(&es, "model_call")
        .into_iter()
        .filter(|c| c["role"] == "agent")
        .collect();
    let mut by_attempt: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for c in &calls {
        assert_eq!(c["result"], "ok", "{c}");
        assert_eq!(c["metered"], true, "{c}");
        by_attempt
            .entry(c["attempt"].as_str().unwrap().to_owned())
            .or_default()
            .push(c);
    }
    let served = upstream.served();
    // The wire as the upstream saw it, per session, before any assertion on it (and whole, on
    // request, for a person debugging the script).
    if let Some(path) = std::env::var_os("EVAL_DSH_TEST_DUMP") {
        let lines: Vec<String> = served
            .iter()
            .map(|s| serde_json::json!({"kind": format!("{:?}", s.kind), "headers": s.headers, "request": s.request}).to_string())
            .collect();
        std::fs::write(path, lines.join("\n")).unwrap();
    }
    for s in &served {
        let last = s.request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| m.to_string())
            .unwrap_or_default();
        eprintln!(
            "served {:?} session={} tools={} last message: {:.300}",
            s.kind,
            s.session(),
            s.tools().len(),
            last
        );
    }
    assert!(
        served.iter().all(|s| s.kind != Kind::Title),
        "the session-title call was not turned off by the profile patch"
    );

    let mut session_of_arm: BTreeMap<String, String> = BTreeMap::new();
    for o in &outcomes {
        let id = o["attempt"].as_str().unwrap();
        let arm = o["arm"].as_str().unwrap().to_owned();
        assert_eq!(o["outcome"], "completed", "{arm}: {o}\n{run_text}");
        assert_eq!(o["accounting"], "matched", "{arm}: {o}\n{run_text}");

        // The task's result: the file the Harness's `write` tool wrote, graded.
        let files = tar_files(&artifact(&dir, "demo", o, "workspace"));
        let clamp = files
            .get("src/clamp.js")
            .unwrap_or_else(|| panic!("{arm}: no src/clamp.js in {:?}", files.keys()));
        let solution = SOLUTIONS.iter().find(|s| s.path == "src/clamp.js").unwrap();
        assert_eq!(
            String::from_utf8_lossy(clamp),
            solution_text(solution, &marker),
            "{arm}"
        );
        assert_eq!(o["metrics"]["score"].as_f64(), Some(50.0), "{arm}: {o}");
        // The bookkeeping is gone before grading and archiving.
        assert!(
            files.keys().all(|p| !p.ends_with("session.jsonl")),
            "{arm}: the transcript is in the archived workspace: {:?}",
            files.keys()
        );

        // The transcript is the attempt's artifact; its usage equals the meter call for call.
        let (session, own) = transcript_usage(&artifact(&dir, "demo", o, "transcript"));
        let mut metered: Vec<&Value> = by_attempt.get(id).cloned().unwrap_or_default();
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
        assert!(
            metered.len() >= 3,
            "{arm}: read, write, answer: {metered:?}"
        );
        assert_eq!(own, metered, "{arm}: transcript vs ledger");
        let total: u64 = own.iter().map(|(i, o)| i + o).sum();
        assert_eq!(o["harness"]["model_turns"].as_u64(), Some(own.len() as u64));
        assert_eq!(o["harness"]["total_tokens"].as_u64(), Some(total));
        // … and the upstream's own tally for that session.
        let theirs: Vec<(u64, u64)> = served
            .iter()
            .filter(|s| s.session() == session)
            .map(|s| (s.prompt_tokens, s.completion_tokens))
            .collect();
        assert_eq!(
            own, theirs,
            "{arm}: transcript vs upstream (session {session})"
        );
        session_of_arm.insert(arm, session);
    }

    // The transcripts are evidence like every artifact, and so is the wire log: `eval ledger
    // verify --artifacts` re-hashes each one the receipts and the model-call entries name.
    let named_by = |kind: &str| -> usize {
        payloads(&es, kind)
            .iter()
            .map(|p| {
                p["artifacts"]
                    .as_object()
                    .map_or(0, |a| a.values().filter(|d| d.is_string()).count())
            })
            .sum()
    };
    let wire_logged = named_by("model_call");
    assert!(wire_logged > 0, "no model_call entry names its wire log");
    let kinds: BTreeSet<&str> = es.iter().map(|e| e.kind.as_str()).collect();
    let named: usize = kinds.iter().map(|k| named_by(k)).sum();
    let o = eval(
        &dir,
        &[
            "ledger",
            "verify",
            "runs/demo/ledger.sqlite",
            "--artifacts",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["artifacts_verified"].as_u64(), Some(named as u64), "{v}");

    // The arms differ on the wire: Plan Lattice's routing tool is offered to, and called by,
    // the plugin arm only; every request of both carries the Harness's own tools.
    let wire = |arm: &str| -> Vec<&Served> {
        served
            .iter()
            .filter(|s| s.session() == session_of_arm[arm])
            .collect()
    };
    let (native, v04) = (wire("native"), wire("v04-auto"));
    assert_eq!(native.len() + v04.len(), served.len(), "calls of no arm");
    for s in native.iter().chain(&v04) {
        assert!(s.tools().iter().any(|t| t == "write"), "{:?}", s.tools());
        assert_eq!(s.request["max_tokens"], 256000);
    }
    assert!(
        native
            .iter()
            .all(|s| !s.tools().iter().any(|t| t.starts_with("lattice_"))),
        "the baseline was offered a Plan Lattice tool"
    );
    assert!(
        v04.iter()
            .any(|s| s.tools().iter().any(|t| t == "lattice_route")),
        "the plugin arm was never offered lattice_route"
    );
    let kinds = |w: &[&Served]| w.iter().map(|s| s.kind).collect::<Vec<_>>();
    assert_eq!(kinds(&native), [Kind::Read, Kind::Write, Kind::Answer]);
    assert_eq!(
        kinds(&v04),
        [Kind::Route, Kind::Read, Kind::Write, Kind::Answer]
    );
    // The route's tool result reached the model, and it was not a refusal.
    let after_route = &v04[1].request["messages"];
    assert!(
        after_route.to_string().contains("Route resolved to bypass"),
        "lattice_route's result: {after_route}"
    );
    let mut upstream_usage: Vec<(u64, u64)> = served
        .iter()
        .map(|s| (s.prompt_tokens, s.completion_tokens))
        .collect();
    let mut ledger_usage: Vec<(u64, u64)> = calls
        .iter()
        .map(|c| {
            (
                c["tokens"]["input"].as_u64().unwrap(),
                c["tokens"]["output"].as_u64().unwrap(),
            )
        })
        .collect();
    upstream_usage.sort_unstable();
    ledger_usage.sort_unstable();
    assert_eq!(ledger_usage, upstream_usage, "ledger vs upstream");
    eprintln!("{}", wire_summary("native", &native));
    eprintln!("{}", wire_summary("v04-auto", &v04));

    // The run exported as ATIF passes Harbor's validator and is `eval show`'s story of each
    // attempt (into the project, so the key check below covers the export too).
    crate::support::export_tools::check_real_harness_atif(&dir, "demo", 1);

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
            "a request body held the key"
        );
        assert!(
            s.headers.values().all(|v| !v.contains(core)),
            "a forwarded header held the key"
        );
    }
    let arm_images: BTreeSet<&str> = outcomes
        .iter()
        .map(|o| o["image"].as_str().unwrap())
        .collect();
    assert_eq!(arm_images.len(), 2, "the two arms ran one image");
}

/// Two hostile attempts in each arm, on the real Harness: one the controller kills at its time
/// limit (every reply a `bash` call sleeping far beyond it), one whose agent deletes its own
/// transcript with `bash`. The transcript lives outside the workspace, in the attempt's state
/// directory, and the controller finds it there itself, so the killed attempt's transcript is
/// read as far as dsh wrote it; a deleted one is that attempt's accounting gap — counted and
/// shown — and `accounting_complete` holds for the run whatever either arm did.
#[test]
fn a_timed_out_or_transcript_deleting_attempt_is_its_own_gap_never_the_runs_veto() {
    let Some(image) = image_id() else { return };
    if !docker_available() {
        return;
    }
    static_binaries();
    let (tmp, dir) = demo_project();
    let marker = format!("dsh-hostile-{}", random_hex(12));
    let unique = format!("\n# dsh-hostile test {}\n", random_hex(8));
    let arms_at = PROTOCOL.find("[[arms]]").unwrap();
    let suites_at = PROTOCOL.find("[suites.real]").unwrap();
    let protocol = format!(
        "{}[[arms]]\nid = \"a\"\ndescription = \"dsh\"\nruntime = \"runtimes/dsh/runtime.toml\"\nprofile = \"protocols/demo/arms/a/cordis.patch.yml\"\n\n\
         [[arms]]\nid = \"b\"\ndescription = \"dsh again\"\nruntime = \"runtimes/dsh/runtime.toml\"\nprofile = \"protocols/demo/arms/b/cordis.patch.yml\"\n\n{}{unique}",
        &PROTOCOL[..arms_at],
        &PROTOCOL[suites_at..]
    );
    std::fs::write(dir.join("protocols/demo/protocol.toml"), protocol).unwrap();
    let matrix = MATRIX
        .replace(
            "tasks = [\"simple-js-clamp\"]",
            "tasks = [\"hang\", \"delete\"]",
        )
        .replace("arms = [\"native\", \"v04-auto\"]", "arms = [\"a\", \"b\"]")
        .replace("baseline = \"native\"", "baseline = \"a\"")
        .replace("candidate = \"v04-auto\"", "candidate = \"b\"")
        .replace("concurrency = 1", "concurrency = 2");
    std::fs::write(dir.join("matrix/demo.toml"), matrix).unwrap();
    write_runtime(&dir, &image);
    for (arm, note) in [("a", ""), ("b", "# arm b\n")] {
        let d = dir.join(format!("protocols/demo/arms/{arm}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cordis.patch.yml"), format!("{PROFILE_PATCH}{note}")).unwrap();
    }
    // The hang task's limit only has to be shorter than the `sleep 3600` it kills.
    for (task, prompt, timeout) in [("hang", HOSTILE_HANG, 90), ("delete", HOSTILE_DELETE, 900)] {
        let t = dir.join(format!("protocols/demo/tasks/real/{task}"));
        std::fs::create_dir_all(t.join("workspace")).unwrap();
        std::fs::create_dir_all(t.join("hidden")).unwrap();
        std::fs::write(
            t.join("task.toml"),
            TASK_TOML.replace("simple-js-clamp", task).replace(
                "timeout_seconds = 900",
                &format!("timeout_seconds = {timeout}"),
            ),
        )
        .unwrap();
        std::fs::write(
            t.join("prompt.md"),
            format!("{prompt}: do as you are told."),
        )
        .unwrap();
        std::fs::write(t.join("workspace/README.md"), "scratch\n").unwrap();
        std::fs::write(
            t.join("hidden/checks.toml"),
            format!("[[check]]\nid = \"x\"\npath = \"README.md\"\ncontains = \"{marker}\"\npoints = 100\n"),
        )
        .unwrap();
    }
    let key = format!("sk-dsh-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &marker);
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
    let es = entries(&dir.join("runs/demo/ledger.sqlite"));
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 4, "{outcomes:?}\n{run_text}");
    let served = upstream.served();
    assert!(
        served.iter().any(|s| s.kind == Kind::Bash),
        "the upstream never sent its bash call"
    );
    // What the deleting `bash` call answered, as the model saw it (the next request's tool
    // message), for the report of this test.
    for s in served.iter().filter(|s| {
        s.request.to_string().contains("removed") || s.request.to_string().contains("No such file")
    }) {
        if let Some(m) = s.request["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        {
            eprintln!(
                "the deleting bash call returned: {:.400}",
                m["content"].to_string()
            );
        }
    }
    let mut gaps = 0;
    for o in &outcomes {
        let slot = o["slot"].as_str().unwrap();
        let accounting = o["accounting"].as_str().unwrap_or_default();
        if slot.contains("-hang-") {
            assert_eq!(o["outcome"], "timeout", "{o}\n{run_text}");
            // Killed mid-`sleep`, no call in flight: the transcript dsh flushed after each call
            // is where the controller looks, and it matches the meter call for call.
            if o["model_turns"].as_u64() > Some(0) {
                assert_eq!(accounting, "matched", "{o}\n{run_text}");
                assert!(o["artifacts"]["transcript"].is_string(), "{o}");
            }
        } else {
            assert!(slot.contains("-delete-"), "{slot}");
            // Out of the working tree, the transcript is out of reach of dsh's sandboxed tools
            // (it survives whole, `matched`); were it deleted, it would be this attempt's gap:
            // gone, or (dsh writing on) short of the meter — and the attempt no completion.
            let short = accounting == "mismatch"
                && o["harness"]["model_turns"].as_u64() < o["model_turns"].as_u64();
            if accounting != "matched" {
                assert!(
                    matches!(accounting, "metrics_missing" | "metrics_unreadable") || short,
                    "{o}\n{run_text}"
                );
                assert_ne!(o["outcome"], "completed", "{o}");
                gaps += 1;
            }
        }
        // Nothing of the transcript in the archived workspace.
        let files = tar_files(&artifact(&dir, "demo", o, "workspace"));
        assert!(
            files.keys().all(|p| !p.ends_with("session.jsonl")),
            "{:?}",
            files.keys()
        );
    }
    let o = eval(&dir, &["report", "--matrix", "demo", "--format", "json"]);
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("eval report --format json: {e}: {}", text(&o)));
    let rule = report["gates"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .find(|r| r["id"] == "accounting_complete")
        .unwrap_or_else(|| panic!("no accounting_complete rule: {report}"));
    assert_eq!(rule["verdict"], "pass", "{rule}");
    assert_eq!(report["integrity_failure"], false, "{report}");
    // The gaps are counted and shown, per arm.
    let unchecked: u64 = report["accounting"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["accounting_unchecked"].as_u64().unwrap_or(0))
        .sum();
    assert!(unchecked >= gaps, "{}", report["accounting"]);
    let core = key.strip_prefix("sk-dsh-").unwrap();
    let mut files = Vec::new();
    all_bytes(tmp.path(), &mut files);
    for (p, b) in &files {
        assert!(
            !contains(b, core.as_bytes()),
            "{} holds the key",
            p.display()
        );
    }
}

/// The upstream's solutions are what v0.4's grader accepts where it can be run here: the Python
/// ones by the grader's own checks (copied from simple-grader.mjs), when a python3 is there.
#[test]
fn the_scripted_solutions_pass_the_simple_graders_python_checks() {
    let Ok(o) = Command::new("python3").arg("--version").output() else {
        eprintln!("skipping: no python3");
        return;
    };
    assert!(o.status.success());
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    for s in SOLUTIONS.iter().filter(|s| s.path.ends_with(".py")) {
        std::fs::create_dir_all(ws.join(s.path).parent().unwrap()).unwrap();
        std::fs::write(ws.join(s.path), solution_text(s, "marker")).unwrap();
    }
    let checks = r#"
import importlib.util, json, sys
def load(path, name):
    spec = importlib.util.spec_from_file_location('submission', path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return getattr(m, name)
fn = load(sys.argv[1] + '/text_utils.py', 'normalize_whitespace')
r = [fn('  a   b ') == 'a b', fn('a\t\n b') == 'a b', fn('a\u2003\u00a0b') == 'a b', fn('') == '']
fn = load(sys.argv[1] + '/chunks.py', 'chunks')
r += [fn([1, 2, 3, 4], 2) == [[1, 2], [3, 4]], fn([1, 2, 3], 2) == [[1, 2], [3]], fn([], 3) == []]
def invalid():
    for v in (True, False, 0, -1, 1.5, '2'):
        try: fn([1], v)
        except ValueError: continue
        return False
    return True
v = [1, 2, 3]; fn(v, 2)
r += [invalid(), v == [1, 2, 3]]
print(json.dumps(r))
"#;
    let o = Command::new("python3")
        .args(["-I", "-c", checks, ws.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let r: Vec<bool> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r, vec![true; 9], "{r:?}");
}

/// Each solution is recognised from its own task's prompt only (simple-tasks.json's prompts),
/// and `lattice_route`'s arguments fill every required property of the schema the plugin offers.
#[test]
fn the_upstream_recognises_each_task_and_fills_the_route_schema() {
    let prompts = [
        (
            "Add and export a clamp(value, min, max) function in src/clamp.js.",
            "src/clamp.js",
        ),
        (
            "Implement the existing slugify(input: string): string stub in src/slugify.ts.",
            "src/slugify.ts",
        ),
        (
            "Implement normalize_whitespace(value: str) in text_utils.py so …",
            "text_utils.py",
        ),
        ("Implement DedupeStable in dedupe.go.", "dedupe.go"),
        (
            "Implement and export parsePort(value) in src/port.js.",
            "src/port.js",
        ),
        ("Implement chunks(items, size) in chunks.py.", "chunks.py"),
    ];
    for (prompt, path) in prompts {
        let req = serde_json::json!({"messages": [
            {"role": "system", "content": "You are an agent. Files like src/clamp.js are examples."},
            {"role": "user", "content": prompt}]});
        assert_eq!(recognise(&req).map(|s| s.path), Some(path), "{prompt}");
    }
    let req = serde_json::json!({"messages": [{"role": "user", "content": "Write a poem."}]});
    assert!(recognise(&req).is_none());
    let tool = serde_json::json!({"type": "function", "function": {"name": "lattice_route",
        "parameters": {"type": "object", "properties": {
            "recommendedLevel": {"type": "string", "enum": ["bypass", "contract", "lattice"]},
            "estimatedSteps": {"type": "integer"}, "executionSpan": {"type": "integer"},
            "productDefinitionGap": {"type": "integer"}, "outcomeCritical": {"type": "boolean"},
            "evidence": {"type": "array", "items": {"type": "string"}}, "rationale": {"type": "string"},
            "somethingNew": {"type": "string", "enum": ["x", "y"]}},
        "required": ["recommendedLevel", "estimatedSteps", "executionSpan", "productDefinitionGap",
                     "outcomeCritical", "evidence", "rationale", "somethingNew"]}}});
    let args = route_arguments(&tool);
    assert_eq!(args["recommendedLevel"], "bypass");
    assert_eq!(args["somethingNew"], "x");
    assert!(!args["evidence"].as_array().unwrap().is_empty());
    for k in tool["function"]["parameters"]["required"]
        .as_array()
        .unwrap()
    {
        assert!(args.get(k.as_str().unwrap()).is_some(), "{k} missing");
    }
}

/// The runtime's shell wrapper, run on the host with its fixed paths moved into a scratch
/// directory and `dsh` replaced by a stand-in function; returns (exit status, scratch dir).
/// `fake_dsh` is the stand-in's body (it sees `$W`, the scratch workspace).
fn run_wrapper(fake_dsh: &str, with_plugin: bool) -> (i32, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let status = run_harness_script("command", tmp.path(), fake_dsh, with_plugin, None);
    (status, tmp)
}

/// The runtime's `[harness] KEY` script (`command` or `continue_command`) run as
/// [`run_wrapper`] runs it, in the scratch directory `root` (kept between calls, as the
/// container's tmpfs `DSH_HOME` is between rounds), with `EVAL_ROUND` set when `round` is;
/// `node` is a stand-in printing a fixed UUID.
fn run_harness_script(
    key: &str,
    root: &Path,
    fake_dsh: &str,
    with_plugin: bool,
    round: Option<&str>,
) -> i32 {
    let def: toml::Table = toml::from_str(RUNTIME_TOML).unwrap();
    let command = def["harness"][key].as_array().unwrap();
    assert_eq!(command[0].as_str(), Some("/bin/sh"));
    assert_eq!(command[1].as_str(), Some("-c"));
    let script = command[2].as_str().unwrap();
    for d in ["workspace", "arm", "t", "home"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("arm/cordis.patch.yml"), PROFILE_PATCH).unwrap();
    if with_plugin {
        std::fs::write(root.join("arm/plugin.tgz"), b"not really a package").unwrap();
    }
    std::fs::write(root.join("t/prompt.md"), "the task text").unwrap();
    let w = root.join("workspace");
    // `exec` cannot run the stand-in shell function: the script calls it plainly here (its
    // status is then the script's last, the same as exec's).
    assert!(script.contains("exec dsh --profile"), "{script}");
    let moved = script
        .replace("exec dsh --profile", "dsh --profile")
        .replace("/workspace", w.to_str().unwrap())
        .replace("/opt/eval/arm", root.join("arm").to_str().unwrap())
        .replace("/opt/eval/support", root.join("support").to_str().unwrap())
        .replace(
            "/task/prompt.md",
            root.join("t/prompt.md").to_str().unwrap(),
        );
    // Every fixed container path the script names was moved into the scratch directory.
    assert!(
        !moved.contains("/opt/eval") && !moved.contains("/task/"),
        "{moved}"
    );
    let full = format!(
        "W={w:?}
node() {{ printf 0f1e2d3c-4b5a-4697-8877-665544332211; }}
dsh() {{
  echo \"$*\" >> {log:?}
  case $1 in plugin) return 0 ;; esac
{fake_dsh}
}}
{moved}",
        w = w.to_str().unwrap(),
        log = root.join("dsh-calls.log").to_str().unwrap(),
    );
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", &full])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("DSH_HOME", root.join("home/.dsh"));
    if let Some(k) = round {
        cmd.env("EVAL_ROUND", k);
    }
    let o = cmd.output().unwrap();
    o.status.code().unwrap_or(-1)
}

/// Across rounds (`EVAL_ROUND` set by the shim only in a multi-round attempt) the wrapper fixes
/// one session id for the attempt, in the stock runner's `session-<UUID>` form, and hands it to
/// dsh as `EVAL_DSH_SESSION_ID` (which switches the stock runner off for eval's session runner);
/// `continue_command` hands the same id on without adding the plugins again and keeps dsh's
/// status; without its round 1 it refuses to start. A single-round attempt sets no id, so the
/// stock runner runs it as before.
#[test]
fn the_wrapper_fixes_one_session_id_per_multi_round_attempt_and_continue_reuses_it() {
    let seen = "echo \"${EVAL_DSH_SESSION_ID-unset}\" >> \"$W/../ids\"\nreturn ${DSH_STATUS:-0}";
    let ids = |root: &Path| std::fs::read_to_string(root.join("ids")).unwrap();
    let single = tempfile::tempdir().unwrap();
    assert_eq!(
        run_harness_script("command", single.path(), seen, false, None),
        0
    );
    assert_eq!(ids(single.path()), "unset\n");

    let attempt = tempfile::tempdir().unwrap();
    let root = attempt.path();
    assert_eq!(
        run_harness_script("command", root, seen, true, Some("1")),
        0
    );
    let id = "session-0f1e2d3c-4b5a-4697-8877-665544332211";
    assert_eq!(ids(root), format!("{id}\n"));
    assert_eq!(
        std::fs::read_to_string(root.join("home/.dsh/eval-session-id")).unwrap(),
        format!("{id}\n")
    );
    let failing = seen.replace("${DSH_STATUS:-0}", "4");
    for k in ["2", "3"] {
        let want = if k == "3" { 4 } else { 0 };
        let body = if k == "3" { failing.as_str() } else { seen };
        assert_eq!(
            run_harness_script("continue_command", root, body, true, Some(k)),
            want,
            "round {k}: dsh's status is the round's"
        );
    }
    assert_eq!(
        ids(root),
        format!("{id}\n{id}\n{id}\n"),
        "one id, every round"
    );
    let calls = std::fs::read_to_string(root.join("dsh-calls.log")).unwrap();
    assert_eq!(
        calls.lines().filter(|l| l.starts_with("plugin ")).count(),
        1,
        "the plugins are added once, in round 1: {calls}"
    );
    assert_eq!(
        calls
            .lines()
            .filter(|l| *l == "--profile headless the task text")
            .count(),
        3,
        "{calls}"
    );

    let fresh = tempfile::tempdir().unwrap();
    assert_ne!(
        run_harness_script("continue_command", fresh.path(), seen, false, Some("2")),
        0,
        "a continuation without its first round"
    );
    assert!(!fresh.path().join("ids").exists(), "dsh never ran");
}

/// The wrapper keeps dsh's exit status, adds eval's support plugin in every arm and the arm's
/// plugin only when the layer has one (one add), and installs the arm's patch after the add; it touches no transcript (the controller finds it in
/// the state directory itself, `Beneath::read_found`), so a session file dsh wrote stays where
/// it is, in the state directory named by the patch and never in the workspace.
#[test]
fn the_wrapper_adds_the_plugin_installs_the_patch_and_keeps_dshs_status() {
    assert!(
        PROFILE_PATCH.contains("root: /eval-state\n"),
        "{PROFILE_PATCH}"
    );
    let def: toml::Table = toml::from_str(RUNTIME_TOML).unwrap();
    assert_eq!(def["metrics_root"].as_str(), Some("state"));
    assert_eq!(
        def["metrics_path"].as_str(),
        Some("*/session-*/session.jsonl")
    );
    let one = "mkdir -p \"$W/s/--workspace--/session-1\"\n\
               printf '{}\\n' > \"$W/s/--workspace--/session-1/session.jsonl\"\nreturn 3";
    let (status, tmp) = run_wrapper(one, false);
    assert_eq!(status, 3, "dsh's exit status is the harness's");
    let ws = tmp.path().join("workspace");
    assert_eq!(
        std::fs::read(ws.join("s/--workspace--/session-1/session.jsonl")).unwrap(),
        b"{}\n",
        "the wrapper moved or removed a session file"
    );
    let calls = std::fs::read_to_string(tmp.path().join("dsh-calls.log")).unwrap();
    let support = tmp.path().join("support");
    assert_eq!(
        calls,
        format!(
            "plugin --profile headless add {}\n--profile headless the task text\n",
            support.display()
        ),
        "a baseline adds eval's support plugin, and nothing else"
    );
    assert_eq!(
        std::fs::read_to_string(
            tmp.path()
                .join("home/.dsh/profiles/headless/cordis.patch.yml")
        )
        .unwrap(),
        PROFILE_PATCH
    );

    let (status, tmp) = run_wrapper("", true);
    assert_eq!(status, 0);
    let calls = std::fs::read_to_string(tmp.path().join("dsh-calls.log")).unwrap();
    let support = tmp.path().join("support");
    let plugin = tmp.path().join("arm/plugin.tgz");
    assert_eq!(
        calls,
        format!(
            "plugin --profile headless add {} {}\n--profile headless the task text\n",
            support.display(),
            plugin.display()
        ),
        "the support plugin and the arm's plugin in one add"
    );
}

/// The values the upstream copies from Plan Lattice 0.3's tool results, in the plugin's own
/// rendering (`renderContext`, `lattice_add`'s message).
#[test]
fn the_upstream_reads_plan_lattice_receipts_and_node_ids() {
    let opened = "Opened lattice revision 1. Context is complete and current; create no more than 2 root nodes before executing.\n\nFresh context receipt (copy these exact values into the next structural lattice call):\n- receiptId: rcpt-7f3a\n- expectedRevision: 12\n- contextDigest: abc\n\n--- src/clamp.js (sha256:00) ---\n// x";
    assert_eq!(receipt(opened).unwrap(), ("rcpt-7f3a".to_owned(), 12));
    let added = "Added node n-42 at lattice revision 2. Context receipt consumed; refresh context before another structural change.";
    assert_eq!(after(added, "Added node").as_deref(), Some("n-42"));
    assert!(receipt(added).is_err());
    assert!(receipt("- receiptId: r\n- expectedRevision: two").is_err());
}
