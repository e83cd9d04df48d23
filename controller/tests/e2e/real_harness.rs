//! A third-party harness end to end (issue 13): mini-swe-agent 2.4.6 from PyPI, in the Debian
//! base image `runtimes/images/mini-swe-agent/build.sh` builds (`scripts/ensure-harness-images.sh`
//! builds or reuses it and exports its id as `EVAL_TEST_MINI_SWE_AGENT_IMAGE`), runs unmodified
//! as two arms of a project that references that image by id, no `[build]`. `eval freeze` and
//! `eval run` drive it against a scripted upstream in this process, which answers with
//! mini-swe-agent's bash tool calls: write the solution file, read it back, submit. Asserted: the
//! file in each archived workspace, the fixture grader's grade of it, the ledger's metering equal
//! to the upstream's own tally (calls and every token) and to the harness's own trajectory, and
//! the key nowhere in the project, the run's state or its output.

use crate::support::real_harness::*;
use crate::support::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// The variable `scripts/test.sh` exports the image id in.
const IMAGE_ENV: &str = "EVAL_TEST_MINI_SWE_AGENT_IMAGE";
const KEY_ENV: &str = "EVAL_REAL_HARNESS_TEST_KEY";
/// Issue 13's bound on the controller's peak resident memory for this protocol (the defect
/// measured 2.0 GB for freeze and 4–5.9 GB for run, as every image went through memory).
const MAX_PEAK_KB: u64 = 300 * 1024;
/// A hang detector only (mini imports litellm for 10–50 s per attempt on a loaded machine).
const HANG_GUARD_SECS: u64 = 1800;

fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The image id from the environment; `None` (skip) only when `EVAL_SKIP_DOCKER=1` asks for it.
fn image_id() -> Option<String> {
    let skip = std::env::var("EVAL_SKIP_DOCKER").is_ok_and(|v| v == "1");
    match std::env::var(IMAGE_ENV) {
        Ok(id) if !id.trim().is_empty() => {
            let id = id.trim().to_owned();
            let hex = id.strip_prefix("sha256:").unwrap_or_default();
            assert!(
                hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
                "{IMAGE_ENV}={id:?} is not an image id (sha256:<64 hex>); \
                 take it from scripts/ensure-harness-images.sh"
            );
            Some(id)
        }
        _ if skip => {
            eprintln!("skipping: {IMAGE_ENV} is not set and EVAL_SKIP_DOCKER=1");
            None
        }
        _ => panic!(
            "{IMAGE_ENV} is not set: run `export $(scripts/ensure-harness-images.sh)` first (it \
             builds or reuses the mini-swe-agent base image and prints its id), or set \
             EVAL_SKIP_DOCKER=1 to skip this Docker test"
        ),
    }
}

const PROTOCOL: &str = r#"schema = 1
name = "demo"
title = "A third-party harness as an arm"
matrix = "demo"

[[hypotheses]]
id = "H1"
text = "An unmodified third-party harness runs as an arm, metered exactly."

[registration]
sample_size_rationale = "An end-to-end test, not a study."
stopping_rule = "Every slot once."
exclusion_rules = ["None."]

# What mini-swe-agent sends through litellm's openai provider: model, messages and its one tool;
# no `stream` (absent means false), no output limit (the proxy inserts one).
[models.agent]
api = "openai-chat"
model = "deepseek-v4-flash"
stream = false
allowed_params = ["model", "messages", "tools", "stream", "max_tokens"]
allowed_headers = ["accept", "user-agent"]

[budgets.attempt]
wall_seconds = 3600
max_requests = 20
max_tokens = 2000000

[budgets.run]
max_tokens = 20000000
max_spend_usd = 50.0

[[budgets.prices]]
model = "deepseek-v4-flash"
input_usd_per_mtok = 0.27
cached_input_usd_per_mtok = 0.07
output_usd_per_mtok = 1.10

[[arms]]
id = "mini-a"
description = "mini-swe-agent 2.4.6, unmodified (profile a)."
runtime = "runtimes/mini-swe-agent/runtime.toml"
profile = "protocols/demo/arms/mini-a/profile.toml"

[[arms]]
id = "mini-b"
description = "mini-swe-agent 2.4.6, unmodified (profile b), on the same base image."
runtime = "runtimes/mini-swe-agent/runtime.toml"
profile = "protocols/demo/arms/mini-b/profile.toml"

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
description = "mini-swe-agent, two arms on one base image"
concurrency = 1

[order]
algorithm = "chacha8"
seed = 1

[[suites]]
id = "real"
task_root = "protocols/demo/tasks/real"
tasks = ["mini-hello-1"]
arms = ["mini-a", "mini-b"]
baseline = "mini-a"
candidate = "mini-b"
repetitions = 1
"#;

/// The arm's runtime: the base image by id, the image's own user and workdir, the task as text.
fn runtime_toml(image: &str) -> String {
    format!(
        r#"name = "mini-swe-agent"
user = "65532:65532"
workdir = "/workspace"
relay_port = 8080
tmpfs = ["/home/agent"]

[image]
id = "{image}"

[harness]
command = ["mini", "-y", "--exit-immediately", "-m", "openai/deepseek-v4-flash",
  "-o", "{{workspace}}/.mini/trajectory.json", "-t", "{{prompt_text}}"]

# Never the key: the proxy injects it. The rest is what mini needs to run headless and offline.
[env]
HOME = "/home/agent"
OPENAI_API_BASE = "{{base_url}}"
OPENAI_API_KEY = "eval-no-key"
MSWEA_CONFIGURED = "true"
MSWEA_COST_TRACKING = "ignore_errors"
MSWEA_SILENT_STARTUP = "1"
LITELLM_LOCAL_MODEL_COST_MAP = "True"

# The base (mini itself) is pinned by `image.id`; only the arm's own files can be attested.
[attest]
paths = ["{{profile}}"]

[limits]
memory_mb = 512
cpus = 1.0
pids = 64
tmpfs_mb = 64

[arm]
profile = "/opt/eval/profile.toml"
candidate = "/opt/eval/candidate"
"#
    )
}

const TASK_TOML: &str = r#"id = "mini-hello-1"
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

/// The project: `eval init`'s scaffold (for its fixture grader runtime), the protocol, matrix,
/// runtime, task and arms above. The marker is in the hidden checks and the upstream's script,
/// never in the prompt, so only the tool call can have put it into the workspace.
fn write_project(dir: &Path, image: &str, marker: &str) {
    let unique = format!("\n# real-harness test {}\n", random_hex(8));
    std::fs::write(
        dir.join("protocols/demo/protocol.toml"),
        format!("{PROTOCOL}{unique}"),
    )
    .unwrap();
    std::fs::write(dir.join("matrix/demo.toml"), MATRIX).unwrap();
    std::fs::create_dir_all(dir.join("runtimes/mini-swe-agent")).unwrap();
    std::fs::write(
        dir.join("runtimes/mini-swe-agent/runtime.toml"),
        runtime_toml(image),
    )
    .unwrap();
    let task = dir.join("protocols/demo/tasks/real/mini-hello-1");
    std::fs::create_dir_all(task.join("workspace/src")).unwrap();
    std::fs::create_dir_all(task.join("hidden")).unwrap();
    std::fs::write(task.join("task.toml"), TASK_TOML).unwrap();
    std::fs::write(
        task.join("prompt.md"),
        "Create src/hello.py as the model's first command does, check it, then submit.\n",
    )
    .unwrap();
    std::fs::write(
        task.join("workspace/src/main.py"),
        "# the task's own file\n",
    )
    .unwrap();
    // Two checks, one the task can pass and one it cannot: a grader that always says 100 (or 0)
    // gives a different score than the 50 a real grading gives.
    std::fs::write(
        task.join("hidden/checks.toml"),
        format!(
            "[[check]]\nid = \"hello\"\npath = \"src/hello.py\"\ncontains = \"{marker}\"\npoints = 50\n\n\
             [[check]]\nid = \"never\"\npath = \"src/never-written.py\"\ncontains = \"x\"\npoints = 50\n"
        ),
    )
    .unwrap();
    for arm in ["mini-a", "mini-b"] {
        let d = dir.join(format!("protocols/demo/arms/{arm}"));
        std::fs::create_dir_all(&d).unwrap();
        // mini reads no eval profile; the file makes the two arms' layers differ.
        std::fs::write(
            d.join("profile.toml"),
            format!("# arm {arm}: mini-swe-agent with its defaults\nname = \"{arm}\"\n"),
        )
        .unwrap();
    }
}

/// Runs `eval run` with the key in its environment only, and a hang guard.
fn run_eval(dir: &Path, upstream: &str, key: &str) -> (std::process::Output, Option<u64>) {
    let mut cmd = Command::new(eval_bin());
    cmd.args([
        "run",
        "--matrix",
        "demo",
        "--upstream",
        upstream,
        "--api-key-env",
        KEY_ENV,
        "--concurrency",
        "1",
    ])
    .env(KEY_ENV, key)
    .env_remove("EVAL_SIGNING_KEY_FILE")
    .current_dir(dir);
    let scratch = dir.parent().unwrap();
    measured(cmd, scratch)
}

/// Runs `cmd` (stdin closed, output captured) under a hang guard and, when `/usr/bin/time` is
/// there, returns its peak resident memory in kB (GNU time's `%M`: the maximum RSS of the
/// process, which is exact, unlike sampling `/proc`). The measurement goes to a file in
/// `scratch`, so the command's own stderr stays its own.
fn measured(cmd: Command, scratch: &Path) -> (std::process::Output, Option<u64>) {
    let time = Path::new("/usr/bin/time");
    let report = scratch.join(format!("peak-rss-{}.txt", random_hex(4)));
    let mut cmd = if time.exists() {
        let mut t = Command::new(time);
        t.arg("-f").arg("%M").arg("-o").arg(&report);
        t.arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => t.env(k, v),
                None => t.env_remove(k),
            };
        }
        if let Some(d) = cmd.get_current_dir() {
            t.current_dir(d);
        }
        t
    } else {
        eprintln!("note: no /usr/bin/time; peak memory not measured");
        cmd
    };
    // Its own process group, so the hang guard ends `eval` too, not only `time`.
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    if rx
        .recv_timeout(std::time::Duration::from_secs(HANG_GUARD_SECS))
        .is_err()
    {
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{pid}")])
            .status();
        let _ = waiter.join();
        panic!("{cmd:?} hung: still running after {HANG_GUARD_SECS} s; killed");
    }
    let out = waiter.join().unwrap().unwrap();
    let peak = std::fs::read_to_string(&report).ok().and_then(|s| {
        let kb = s.lines().last()?.trim().parse::<u64>().ok()?;
        let _ = std::fs::remove_file(&report);
        Some(kb)
    });
    (out, peak)
}

/// The layer diff ids of an image in the engine.
fn layers_of(image: &str) -> Vec<String> {
    let o = Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{json .RootFS.Layers}}",
            image,
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "docker image inspect {image}: {}",
        text(&o)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn artifact(dir: &Path, outcome: &Value, name: &str) -> Vec<u8> {
    let d = outcome["artifacts"][name]
        .as_str()
        .unwrap_or_else(|| panic!("no {name} artifact in {outcome}"));
    let hex = d.strip_prefix("sha256:").unwrap();
    std::fs::read(dir.join(format!("runs/demo/artifacts/sha256/{}/{hex}", &hex[..2])))
        .unwrap_or_else(|e| panic!("artifact {d}: {e}"))
}

#[test]
fn mini_swe_agent_runs_as_two_arms_metered_exactly_without_the_key() {
    let Some(image) = image_id() else { return };
    // Alone: it asserts the controller's peak memory and runs a real harness image.
    if !docker_available_alone() {
        return;
    }
    static_binaries();
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
    let marker = format!("mini-e2e-{}", random_hex(12));
    write_project(&dir, &image, &marker);
    let key = format!("sk-real-{}", random_hex(24));
    let script = vec![
        format!(
            "mkdir -p /workspace/src && printf 'print(\"%s\")\\n' '{marker}' > /workspace/src/hello.py"
        ),
        "cat /workspace/src/hello.py".to_owned(),
        SUBMIT.to_owned(),
    ];
    let upstream = ScriptedUpstream::start(&key, script);

    let mut freeze = Command::new(eval_bin());
    freeze
        .args(["freeze", "--protocol", "demo"])
        .current_dir(&dir)
        .env_remove("EVAL_SIGNING_KEY_FILE");
    let (o, freeze_peak) = measured(freeze, tmp.path());
    assert!(
        o.status.success(),
        "eval freeze refused a runtime that names its base image by id (`[image] id`, no \
         `[build]`), the image's user/workdir and `{{prompt_text}}`: issue 13 (base images by \
         content, the image's config respected) is not in this build.\n{}",
        text(&o)
    );
    let identity = identity_of(&dir);
    let _sweep = Sweep(format!("eval.identity={identity}"));
    let (out, run_peak) = run_eval(&dir, &upstream.url(), &key);
    let run_text = text(&out);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "eval run exited {:?}:\n{run_text}",
        out.status.code()
    );

    let ledger = dir.join("runs/demo/ledger.sqlite");
    let es = entries(&ledger);
    assert!(payloads(&es, "rerun").is_empty(), "{run_text}");
    let outcomes = payloads(&es, "attempt_outcome");
    assert_eq!(outcomes.len(), 2, "{outcomes:?}\n{run_text}");
    assert!(
        upstream.unexpected().is_empty(),
        "{:?}",
        upstream.unexpected()
    );
    assert_eq!(
        upstream.unauthorized(),
        0,
        "a request reached the upstream without the key"
    );

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

    for o in &outcomes {
        let id = o["attempt"].as_str().unwrap();
        assert_eq!(o["outcome"], "completed", "{o}\n{run_text}");
        assert!(o["infra_fault"].is_null(), "{o}");
        // No eval-specific usage file: eval records "not cross-checked" (the cross-check
        // against the harness's own trajectory is done below, by this test).
        assert_eq!(o["accounting"], "not_declared", "{id}: {o}");

        // The task's result: the file the tool call wrote, in the archived workspace.
        let files = tar_files(&artifact(&dir, o, "workspace"));
        let hello = files
            .get("src/hello.py")
            .unwrap_or_else(|| panic!("{id}: no src/hello.py in {:?}", files.keys()));
        assert_eq!(
            String::from_utf8_lossy(hello),
            format!("print(\"{marker}\")\n"),
            "{id}"
        );
        assert_eq!(
            files.get("src/main.py").map(Vec::as_slice),
            Some(&b"# the task's own file\n"[..])
        );

        // The grade: one of two checks, by the fixture grader in its own container.
        assert_eq!(o["metrics"]["score"].as_f64(), Some(50.0), "{id}: {o}");
        assert_eq!(
            o["metrics"]["checks_passed"].as_f64(),
            Some(1.0),
            "{id}: {o}"
        );
        assert_eq!(
            o["metrics"]["checks_total"].as_f64(),
            Some(2.0),
            "{id}: {o}"
        );

        // The harness's own account (its trajectory) equals the proxy's meter, call for call.
        let traj: Value = serde_json::from_slice(
            files
                .get(".mini/trajectory.json")
                .unwrap_or_else(|| panic!("{id}: no trajectory in {:?}", files.keys())),
        )
        .unwrap();
        assert_eq!(traj["info"]["exit_status"], "Submitted", "{id}");
        let own: Vec<(u64, u64)> = traj["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .map(|m| {
                let u = &m["extra"]["response"]["usage"];
                (
                    u["prompt_tokens"].as_u64().unwrap(),
                    u["completion_tokens"].as_u64().unwrap(),
                )
            })
            .collect();
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
        assert_eq!(own.len(), 3, "{id}: three scripted steps, {own:?}");
        assert_eq!(own, metered, "{id}: trajectory vs ledger");
        assert_eq!(
            traj["info"]["model_stats"]["api_calls"].as_u64(),
            Some(metered.len() as u64),
            "{id}"
        );
        let (i, out_t) = metered.iter().fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        assert_eq!(o["tokens"]["input"].as_u64(), Some(i), "{id}: {o}");
        assert_eq!(o["tokens"]["output"].as_u64(), Some(out_t), "{id}: {o}");
    }

    // Exact metering against the upstream's own count: the same calls, every token.
    let served = upstream.served();
    assert_eq!(served.len(), 6, "two attempts × three steps: {served:?}");
    assert_eq!(
        calls.len(),
        served.len(),
        "ledger model_calls vs upstream calls"
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
    assert_eq!(ledger_usage, upstream_usage);

    // The tool really ran: the step after `cat` carries its output (the marker) back to the
    // model in a non-assistant message.
    for s in served.iter().filter(|s| s.step == 2) {
        let back = s.request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] != "assistant")
            .any(|m| m.to_string().contains(&marker));
        assert!(
            back,
            "the cat output never reached the model: {}",
            s.request
        );
    }

    // The key nowhere: not in the project, its state dir, the run's output.
    let mut files = Vec::new();
    all_bytes(tmp.path(), &mut files);
    files.push(("<eval run stdout>".into(), out.stdout.clone()));
    files.push(("<eval run stderr>".into(), out.stderr.clone()));
    let core = key.strip_prefix("sk-real-").unwrap();
    for (p, b) in &files {
        for (what, needle) in [
            ("key", key.as_bytes()),
            ("key's random part", core.as_bytes()),
        ] {
            assert!(!contains(b, needle), "{} holds the {what}", p.display());
        }
    }
    // Issue 13: two arms share the one base in the engine, each adding one thin layer on top
    // (a copy of the base per arm was the defect), and the controller's memory is bounded by
    // buffers, not by the 850 MB image.
    let base_layers = layers_of(&image);
    let arm_images: BTreeSet<&str> = outcomes
        .iter()
        .map(|o| o["image"].as_str().unwrap())
        .collect();
    assert_eq!(
        arm_images.len(),
        2,
        "the two arms ran one image: {arm_images:?}"
    );
    for arm_image in arm_images {
        assert_ne!(
            arm_image, image,
            "an arm ran the bare base, without its layer"
        );
        let layers = layers_of(arm_image);
        assert_eq!(
            layers.len(),
            base_layers.len() + 1,
            "arm image {arm_image}: {layers:?} is not the base {base_layers:?} plus one layer"
        );
        assert_eq!(layers[..base_layers.len()], base_layers[..], "{arm_image}");
    }
    for (what, peak) in [("eval freeze", freeze_peak), ("eval run", run_peak)] {
        if let Some(kb) = peak {
            eprintln!("{what}: peak resident memory {} MB", kb / 1024);
            assert!(
                kb < MAX_PEAK_KB,
                "{what} peaked at {} MB resident, over {} MB",
                kb / 1024,
                MAX_PEAK_KB / 1024
            );
        }
    }

    // Nor what the agent sent: the harness only ever had the placeholder.
    for s in &served {
        assert!(
            !s.request.to_string().contains(core),
            "a request body held the key"
        );
    }
}

/// The archive reader the test relies on reads what the artifact store writes: nested paths,
/// a name too long for the ustar field (a PAX record), and content byte for byte; directories
/// and links are not files.
#[test]
fn the_workspace_reader_reads_the_stores_archives() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join(".mini")).unwrap();
    std::fs::write(ws.join("src/hello.py"), "print(\"x\")\n").unwrap();
    std::fs::write(ws.join(".mini/trajectory.json"), vec![b'{'; 1500]).unwrap();
    let long = format!("{}.txt", "n".repeat(150));
    std::fs::write(ws.join(&long), "long\n").unwrap();
    std::os::unix::fs::symlink("src/hello.py", ws.join("link")).unwrap();
    let mut tar = Vec::new();
    eval_evidence::artifacts::tar_dir(ws, &mut tar).unwrap();
    let files = tar_files(&tar);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [".mini/trajectory.json", long.as_str(), "src/hello.py"]
    );
    assert_eq!(files["src/hello.py"], b"print(\"x\")\n");
    assert_eq!(files[".mini/trajectory.json"], vec![b'{'; 1500]);
    assert_eq!(files[long.as_str()], b"long\n");
}
