//! `eval import v04-router --from DIR --package RC3.tgz --dsh-image ID`: writes v0.4's router
//! gate as a model-free protocol. DIR is Plan Lattice's `eval/router-corpus/` layout (V1:
//! `blind-real.prompts.jsonl`, `blind-real.labels.jsonl`, `blind-real.manifest.json`; the
//! synthetic `development.jsonl` and `blind.jsonl`, whose explicit-override rows are imported).
//! V1's two files must have the bytes the manifest's `digests` name; the manifest, the synthetic
//! corpora and the package must have the bytes compiled into eval (Plan Lattice `0414dfa`). Every
//! input is opened like `v04-simple`'s (`read_input`: no links, regular files, size-capped). The
//! prompts are inputs, copied into the user's project, never into this repository.

use super::common::{
    DSH_IMAGE_PLACEHOLDER, DSH_PROFILE_PATCH, DSH_RUNTIME, ImportError, PACKAGE_V04, PINNED,
    Summary, dsh_support_files, q, read_input, write_new,
};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const PROMPTS: &str = "blind-real.prompts.jsonl";
const LABELS: &str = "blind-real.labels.jsonl";
const MANIFEST: &str = "blind-real.manifest.json";
const SYNTHETIC: [&str; 2] = ["development.jsonl", "blind.jsonl"];

/// The router corpora's bytes at Plan Lattice `0414dfa` (its `eval/router-corpus/`).
const PINNED_CORPUS: &[(&str, &str)] = &[
    (
        MANIFEST,
        "8c9e6ad256f02978ee7db14b06beb2958d0073a424028d516654f14f2b8d54e9",
    ),
    (
        "development.jsonl",
        "44908004fcd5a4c5b06c760eeaf905d08830790281c823d86d32ce8b3871cfc2",
    ),
    (
        "blind.jsonl",
        "11e95f79ff430cff866c328e2dec80f2d9b9de4fefeca753a57b54febf0d3d84",
    ),
];

/// The router runtime: the dsh runtime with the prompt handed over in `EVAL_TASK` and read by the
/// profile row `headless-runner` (`task: !!js process.env.EVAL_TASK`), so a prompt starting with
/// `-` is never parsed as an option of dsh's launcher (which consumes `--` too).
const ROUTER_RUNTIME_PATH: &str = "runtimes/dsh-router/runtime.toml";
const ROUTER_GRADER_PATH: &str = "runtimes/router-grader/runtime.toml";
const DSH_LAUNCH: &str = r#"exec dsh --profile headless "$(cat /task/prompt.md)""#;
const ROUTER_LAUNCH: &str = r#"EVAL_TASK="$(cat /task/prompt.md)" || exit 1
export EVAL_TASK
exec dsh --profile headless "eval-task""#;
const HEADLESS_RUNNER_ROW: &str =
    "- id: headless-runner\n  config:\n    task: !!js process.env.EVAL_TASK\n";
const CANDIDATE: &str = "v0.4-auto";

#[derive(Deserialize)]
struct Manifest {
    #[serde(rename = "schemaVersion")]
    schema_version: u64,
    digests: ManifestDigests,
}

#[derive(Deserialize)]
struct ManifestDigests {
    prompts: String,
    labels: String,
}

#[derive(Deserialize)]
struct PromptRow {
    id: String,
    text: String,
}

#[derive(Deserialize)]
struct LabelRow {
    id: String,
    expected: String,
    #[serde(rename = "outcomeCritical")]
    outcome_critical: bool,
}

#[derive(Deserialize)]
struct SyntheticRow {
    id: String,
    expected: String,
    #[serde(default)]
    r#override: Option<String>,
    #[serde(default, rename = "expectedClarificationPolicy")]
    expected_clarification: Option<String>,
    text: String,
}

/// One imported task: its suite, id, prompt and wire expectation.
struct Row {
    suite: &'static str,
    id: String,
    text: String,
    expected: String,
    clarification: Option<String>,
}

fn corpus_err(file: &Path, why: impl Into<String>) -> ImportError {
    ImportError::Corpus {
        file: file.to_path_buf(),
        why: why.into(),
    }
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn jsonl<T: for<'de> Deserialize<'de>>(bytes: &[u8], file: &Path) -> Result<Vec<T>, ImportError> {
    let text = std::str::from_utf8(bytes).map_err(|_| corpus_err(file, "not UTF-8"))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            serde_json::from_str(l).map_err(|e| corpus_err(file, format!("line {}: {e}", n + 1)))
        })
        .collect()
}

fn check_pin(path: &Path, file: &str, bytes: &[u8], allow: bool) -> Result<(), ImportError> {
    let Some((_, want)) = PINNED_CORPUS.iter().find(|(f, _)| *f == file) else {
        return Ok(());
    };
    let got = sha(bytes);
    if allow || got == *want {
        return Ok(());
    }
    Err(ImportError::Unpinned {
        path: path.to_path_buf(),
        got,
        want,
    })
}

/// The rows of the corpora, checked: V1 against its manifest, split by label; the synthetic
/// corpora's override rows.
fn rows(from: &Path, allow_unpinned: bool) -> Result<Vec<Row>, ImportError> {
    let manifest_bytes = read_input(from, MANIFEST)?;
    check_pin(
        &from.join(MANIFEST),
        MANIFEST,
        &manifest_bytes,
        allow_unpinned,
    )?;
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| corpus_err(&from.join(MANIFEST), e.to_string()))?;
    if manifest.schema_version != 1 {
        return Err(corpus_err(
            &from.join(MANIFEST),
            format!(
                "schemaVersion {} (this importer reads 1)",
                manifest.schema_version
            ),
        ));
    }
    let prompts_bytes = read_input(from, PROMPTS)?;
    let labels_bytes = read_input(from, LABELS)?;
    for (file, bytes, want) in [
        (PROMPTS, &prompts_bytes, &manifest.digests.prompts),
        (LABELS, &labels_bytes, &manifest.digests.labels),
    ] {
        let got = sha(bytes);
        if got != want.to_ascii_lowercase() {
            return Err(ImportError::DigestMismatch {
                package: from.join(file),
                got,
                sums: from.join(MANIFEST),
                want: want.clone(),
            });
        }
    }
    let prompts: Vec<PromptRow> = jsonl(&prompts_bytes, &from.join(PROMPTS))?;
    let labels: Vec<LabelRow> = jsonl(&labels_bytes, &from.join(LABELS))?;
    let mut by_id: BTreeMap<&str, &LabelRow> = BTreeMap::new();
    for l in &labels {
        if by_id.insert(l.id.as_str(), l).is_some() {
            return Err(corpus_err(
                &from.join(LABELS),
                format!("id {:?} is labelled twice", l.id),
            ));
        }
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for p in &prompts {
        let file = from.join(PROMPTS);
        if !eval_matrix::valid_id(&p.id) || !seen.insert(p.id.clone()) {
            return Err(corpus_err(
                &file,
                format!("id {:?} is not a plain id, or listed twice", p.id),
            ));
        }
        let l = by_id
            .get(p.id.as_str())
            .ok_or_else(|| corpus_err(&from.join(LABELS), format!("no label for {:?}", p.id)))?;
        let suite = match (l.expected.as_str(), l.outcome_critical) {
            ("bypass", _) => "bypass",
            ("contract" | "lattice", true) => "complex",
            (e, c) => {
                return Err(corpus_err(
                    &from.join(LABELS),
                    format!(
                        "{:?}: expected {e:?} with outcomeCritical {c}: V1's labels are bypass, or contract/lattice and outcome-critical",
                        p.id
                    ),
                ));
            }
        };
        out.push(Row {
            suite,
            id: p.id.clone(),
            text: p.text.clone(),
            expected: l.expected.clone(),
            clarification: None,
        });
    }
    if out.len() != labels.len() {
        return Err(corpus_err(
            &from.join(LABELS),
            format!("{} labels for {} prompts", labels.len(), out.len()),
        ));
    }
    for file in SYNTHETIC {
        let path = from.join(file);
        let bytes = read_input(from, file)?;
        check_pin(&path, file, &bytes, allow_unpinned)?;
        for r in jsonl::<SyntheticRow>(&bytes, &path)? {
            let Some(kind) = &r.r#override else { continue };
            if !eval_matrix::valid_id(&r.id) || !seen.insert(r.id.clone()) {
                return Err(corpus_err(
                    &path,
                    format!("id {:?} is not a plain id, or listed twice", r.id),
                ));
            }
            if !eval_core::budget::WIRE_ROUTES.contains(&r.expected.as_str()) {
                return Err(corpus_err(
                    &path,
                    format!("{:?}: expected {:?} is no route", r.id, r.expected),
                ));
            }
            // `no-questions` is compliance only with clarification `never` (PL
            // `test/router-corpus.test.ts`).
            let clarification = match (kind.as_str(), &r.expected_clarification) {
                (_, Some(c)) => Some(c.clone()),
                ("no-questions", None) => Some("never".to_owned()),
                _ => None,
            };
            if let Some(c) = &clarification
                && !eval_core::budget::WIRE_CLARIFICATIONS.contains(&c.as_str())
            {
                return Err(corpus_err(
                    &path,
                    format!("{:?}: clarification {c:?} is unknown", r.id),
                ));
            }
            out.push(Row {
                suite: "override",
                id: r.id,
                text: r.text,
                expected: r.expected,
                clarification,
            });
        }
    }
    Ok(out)
}

/// What `eval import v04-router` is asked to do (its flags, as given).
pub struct Options {
    pub from: PathBuf,
    /// The Plan Lattice package to evaluate.
    pub package: PathBuf,
    pub protocol: String,
    pub dsh_image: String,
    pub allow_unpinned: bool,
}

/// Checks every input, then writes the protocol; the summary names the arms (no task list: the
/// command prints none).
pub fn import(args: &Options) -> Result<Summary, ImportError> {
    let (files, dirs) = plan(args)?;
    let project = Path::new(".");
    for rel in files.keys().chain(&dirs) {
        match std::fs::symlink_metadata(project.join(rel)) {
            Ok(_) => return Err(ImportError::Exists(rel.clone())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ImportError::Target {
                    path: rel.clone(),
                    source,
                });
            }
        }
    }
    for (rel, bytes) in &files {
        let path = project.join(rel);
        let fail = |source| ImportError::Write {
            path: rel.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        write_new(&path, bytes).map_err(fail)?;
    }
    for rel in &dirs {
        std::fs::create_dir(project.join(rel)).map_err(|source| ImportError::Write {
            path: rel.clone(),
            source,
        })?;
    }
    Ok(Summary {
        written: files.len(),
        tasks: Vec::new(),
        arms: vec!["native".to_owned(), CANDIDATE.to_owned()],
    })
}

type Files = BTreeMap<PathBuf, Vec<u8>>;

/// The files to write, and the empty directories (each task's `workspace/`: the router reads only
/// the prompt, so the Harness starts in an empty working tree).
fn plan(args: &Options) -> Result<(Files, Vec<PathBuf>), ImportError> {
    let name = &args.protocol;
    if !eval_matrix::valid_id(name) {
        return Err(ImportError::ProtocolName(name.clone()));
    }
    if !eval_runtimes::definition::is_digest(&args.dsh_image) {
        return Err(ImportError::ImageId {
            flag: "--dsh-image",
            id: args.dsh_image.clone(),
        });
    }
    let (pkg_dir, pkg_file) = match (args.package.parent(), args.package.file_name()) {
        (Some(d), Some(f)) => (d.to_path_buf(), f.to_string_lossy().into_owned()),
        _ => {
            return Err(corpus_err(&args.package, "not a file path"));
        }
    };
    let pkg_dir = if pkg_dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        pkg_dir
    };
    let package = read_input(&pkg_dir, &pkg_file)?;
    let want = PINNED
        .iter()
        .find(|(f, _)| *f == PACKAGE_V04)
        .map(|(_, d)| *d)
        .unwrap_or_default();
    let got = sha(&package);
    if got != want && !args.allow_unpinned {
        return Err(ImportError::Unpinned {
            path: args.package.clone(),
            got,
            want,
        });
    }
    let rows = rows(&args.from, args.allow_unpinned)?;
    if !DSH_RUNTIME.contains(DSH_IMAGE_PLACEHOLDER) || !DSH_RUNTIME.contains(DSH_LAUNCH) {
        return Err(ImportError::BuiltinRuntime);
    }
    let mut out = Files::new();
    let mut put = |rel: String, bytes: Vec<u8>| {
        out.insert(PathBuf::from(rel), bytes);
    };
    let pdir = format!("protocols/{name}");
    put(
        format!("{pdir}/protocol.toml"),
        protocol_toml(name, &rows, &sha(&package)).into_bytes(),
    );
    put(
        format!("matrix/{name}.toml"),
        matrix_toml(name, &rows).into_bytes(),
    );
    let mut patch = DSH_PROFILE_PATCH.to_owned();
    if !patch.ends_with('\n') {
        patch.push('\n');
    }
    patch.push_str(HEADLESS_RUNNER_ROW);
    put(
        format!("{pdir}/arms/native/cordis.patch.yml"),
        patch.clone().into_bytes(),
    );
    // Exactly v0.4's `v0.4-auto` arm: the rc.3 package with `activationMode: auto` only.
    put(
        format!("{pdir}/arms/{CANDIDATE}/cordis.patch.yml"),
        format!("{patch}- id: plan-lattice\n  config:\n    activationMode: auto\n").into_bytes(),
    );
    put(format!("{pdir}/arms/{CANDIDATE}/{PACKAGE_V04}"), package);
    put(
        ROUTER_RUNTIME_PATH.to_owned(),
        DSH_RUNTIME
            .replace(DSH_IMAGE_PLACEHOLDER, &args.dsh_image)
            .replace("name = \"dsh\"", "name = \"dsh-router\"")
            .replace(DSH_LAUNCH, ROUTER_LAUNCH)
            .into_bytes(),
    );
    // The router's runtime is the dsh runtime with another launch line: its `[[arm.file]]`
    // needs the same support plugin beside it.
    for (rel, bytes) in dsh_support_files(ROUTER_RUNTIME_PATH) {
        put(rel, bytes);
    }
    put(
        ROUTER_GRADER_PATH.to_owned(),
        grader_runtime(&args.dsh_image).into_bytes(),
    );
    let mut dirs = Vec::new();
    for r in &rows {
        let tdir = format!("{pdir}/tasks/{}/{}", r.suite, r.id);
        dirs.push(PathBuf::from(format!("{tdir}/workspace")));
        put(format!("{tdir}/task.toml"), task_toml(r).into_bytes());
        let mut prompt = r.text.clone();
        prompt.push('\n');
        put(format!("{tdir}/prompt.md"), prompt.into_bytes());
        put(
            format!("{tdir}/hidden/README"),
            b"The router gate reads the wire; nothing is hidden.\n".to_vec(),
        );
    }
    Ok((out, dirs))
}

/// The grader's command: nothing to grade (every metric is read from the wire), so a score file
/// with an empty `metrics` object.
const GRADER_COMMAND: &str =
    r#"["/bin/sh", "-c", "printf '{\"metrics\": {}}\\n' > \"$1\"", "grade", "{out}"]"#;

fn grader_runtime(image: &str) -> String {
    format!(
        r#"# The router gate's grader (written by `eval import v04-router`): every metric is read from the
# wire, so the grader only writes an empty score.json. It runs in the dsh base image.
name = "router-grader"
user = "65532:65532"

[image]
id = {id}

[grader]
command = {cmd}

[limits]
memory_mb = 64
cpus = 0.5
pids = 16
tmpfs_mb = 8
"#,
        id = q(image),
        cmd = GRADER_COMMAND,
    )
}

fn task_toml(r: &Row) -> String {
    let mut s = format!(
        "# Router corpus row {id} (imported by `eval import v04-router`); the prompt is prompt.md.\n\
         id = {qid}\nsuite = {suite}\ntimeout_seconds = 300\nmetrics = []\n\n\
         [grader]\nruntime = {rt}\ncommand = {cmd}\n\n[wire]\nexpected_route = {exp}\n",
        id = r.id,
        qid = q(&r.id),
        suite = q(r.suite),
        rt = q(ROUTER_GRADER_PATH),
        cmd = GRADER_COMMAND,
        exp = q(&r.expected),
    );
    if let Some(c) = &r.clarification {
        s.push_str(&format!("expected_clarification = {}\n", q(c)));
    }
    s
}

const SUITES: [(&str, &str); 3] = [
    (
        "bypass",
        "V1's bypass-labelled prompts: a routed one is a false activation.",
    ),
    (
        "complex",
        "V1's contract- and lattice-labelled prompts, all outcome-critical: a bypassed one is a miss.",
    ),
    (
        "override",
        "The synthetic corpora's explicit-override rows: the route (and for no-questions the clarification policy never) must comply.",
    ),
];

fn matrix_toml(name: &str, rows: &[Row]) -> String {
    let mut s = format!(
        "# v0.4's router gate (written by `eval import v04-router`): each row once per arm, no\n\
         # infrastructure slot (the model-free upstream has nothing to warm up).\n\
         name = {qn}\nprotocol = {qn}\ndescription = \"v0.4's router gate through the real Harness\"\nconcurrency = 2\n\n\
         [order]\nalgorithm = \"mulberry32-fisher-yates\"\nseed_string = \"eval-v04-router\"\n",
        qn = q(name)
    );
    for (suite, _) in SUITES {
        let tasks: Vec<String> = rows
            .iter()
            .filter(|r| r.suite == suite)
            .map(|r| format!("  {},", q(&r.id)))
            .collect();
        s.push_str(&format!(
            "\n[[suites]]\nid = {qs}\ntask_root = {root}\ntasks = [\n{list}\n]\narms = [\"native\", {cand}]\nbaseline = \"native\"\ncandidate = {cand}\nrepetitions = 1\n",
            qs = q(suite),
            root = q(&format!("protocols/{name}/tasks/{suite}")),
            list = tasks.join("\n"),
            cand = q(CANDIDATE),
        ));
    }
    s
}

fn protocol_toml(name: &str, rows: &[Row], package_sha: &str) -> String {
    let count = |suite: &str| rows.iter().filter(|r| r.suite == suite).count();
    let mut s = format!(
        r#"# v0.4's router gate, written by `eval import v04-router`: V1 (split by label) and the synthetic
# corpora's override rows, each prompt sent once through the real DeepSeek Harness per arm, against
# the model-free upstream. The route is read from the wire (the tools and system section of the
# Harness's first request), never from what the agent reports.
schema = 1
name = {qn}
title = "Plan Lattice v0.4.0-rc.3 router gate (activationMode auto) through the real Harness"
matrix = {qn}
model_free = true

[[hypotheses]]
id = "H-router"
text = "Plan Lattice 0.4.0-rc.3 in activationMode auto routes at most 5% of simple prompts away from bypass, at least 90% of complex prompts away from bypass, no outcome-critical prompt to bypass, and complies with every explicit override."

[registration]
sample_size_rationale = "Fixed by the corpora: {nb} bypass, {nc} complex (outcome-critical) V1 prompts and {no} override rows, each once per arm; the unit is the prompt."
stopping_rule = "Run every slot once to a final outcome; the analysis runs once, after all slots are resolved."
exclusion_rules = [
  "An attempt ended by an infrastructure fault listed in [reruns] is replaced by its rerun; the faulted attempt stays in the ledger.",
  "No other attempt is excluded: an attempt whose first request shows no route counts against the gates (missing data).",
]

[models.agent]
api = "openai-chat"
model = "deepseek-v4-flash"
stream = true
stream_usage = true
allowed_params = ["model", "messages", "stream", "stream_options", "thinking", "reasoning_effort", "tools", "max_tokens", "temperature"]
allowed_headers = ["accept", "user-agent", "x-deepseek-harness-session-id", "x-deepseek-harness-user-id"]

[budgets.attempt]
wall_seconds = 300
max_requests = 20
max_tokens = 20000000

[budgets.run]
max_tokens = 2000000000
max_spend_usd = 1.0

[[budgets.prices]]
model = "deepseek-v4-flash"
input_usd_per_mtok = 0.0
cached_input_usd_per_mtok = 0.0
output_usd_per_mtok = 0.0

[[arms]]
id = "native"
description = "The native DeepSeek Harness, no plugin: the negative control (every route bypass)."
runtime = {rt}
profile = {pnative}
[arms.settings]
plugin = "none"

[[arms]]
id = {cand}
description = "Plan Lattice v0.4.0-rc.3 with activationMode auto, exactly as v0.4's v0.4-auto arm."
runtime = {rt}
profile = {pcand}
# {pkg}: sha256 {sha}
package = {ppkg}
[arms.settings]
plugin = "plan-lattice"
pluginVersion = "0.4.0-rc.3"
activationMode = "auto"
"#,
        qn = q(name),
        nb = count("bypass"),
        nc = count("complex"),
        no = count("override"),
        rt = q(ROUTER_RUNTIME_PATH),
        pnative = q(&format!("protocols/{name}/arms/native/cordis.patch.yml")),
        cand = q(CANDIDATE),
        pcand = q(&format!(
            "protocols/{name}/arms/{CANDIDATE}/cordis.patch.yml"
        )),
        pkg = PACKAGE_V04,
        sha = package_sha,
        ppkg = q(&format!("protocols/{name}/arms/{CANDIDATE}/{PACKAGE_V04}")),
    );
    for (suite, description) in SUITES {
        let metrics = if suite == "override" {
            r#"["wire_route_matches", "wire_routed", "wire_bypassed"]"#
        } else {
            r#"["wire_routed", "wire_bypassed"]"#
        };
        s.push_str(&format!(
            "\n[suites.{suite}]\ndescription = {}\nmetrics = {metrics}\nmax_oracle_calls = 0\n[suites.{suite}.controls]\noff = {}\n",
            q(description),
            q(NO_GRADER)
        ));
    }
    s.push_str(GATES);
    s
}

/// Why the router's suites have no control arms (`[suites.<id>.controls] off`): nothing grades
/// an attempt, so there is no grader whose validity control arms could check.
const NO_GRADER: &str = "no grader to check: the metrics are eval's own measurements of the wire (wire_*), taken by the proxy, not a grader's scores";

/// The statistical plan, missing data, reruns and the four gates (PL
/// `eval/router-corpus/evaluate-real-blind.mjs`). Missing data counts against each gate: no route
/// reads as routed in `bypass` and as bypassed in `complex`, and as not complying in `override`.
const GATES: &str = r#"
[statistics]
unit = "task"
repetitions = "mean"
resamples = 2000
seed = 0
confidence = 0.95
method = "percentile"
exact = "auto"
min_suite_tasks = 1

[missing_data]
rule = "An attempt whose first request with tools shows no route counts against every gate: wire_routed = 1 (a false activation in bypass), wire_bypassed = 1 (a miss in complex), wire_route_matches = 0."
[missing_data.values]
wire_routed = 1.0
wire_bypassed = 1.0
wire_route_matches = 0.0

[reruns]
codes = ["container_runtime_failure", "filesystem_capacity", "runner_crash_before_model_call"]
max_reruns_per_slot = 3
max_infra_attempts = 3

[[gates]]
id = "integrity"
description = "All statistical slots resolved; no unauthorized rerun; one upstream endpoint."
[[gates.rules]]
id = "statistical_slots_resolved"
statistic = "statistical_slots_resolved"
op = "is_true"
[[gates.rules]]
id = "reruns_authorized"
statistic = "reruns_authorized"
op = "is_true"
[[gates.rules]]
id = "single_endpoint"
statistic = "single_endpoint"
op = "is_true"

[[gates]]
id = "simple_false_activation"
suite = "bypass"
description = "Share of bypass-labelled prompts the candidate routes away from bypass (probe counts) <= 0.05."
[[gates.rules]]
id = "false_activation"
statistic = "arm_rate"
metric = "wire_routed"
arm = "candidate"
op = "<="
threshold = 0.05

[[gates]]
id = "complex_recall"
suite = "complex"
description = "Share of complex prompts the candidate routes away from bypass >= 0.90 (its bypass share <= 0.10)."
[[gates.rules]]
id = "bypass_share"
statistic = "arm_rate"
metric = "wire_bypassed"
arm = "candidate"
op = "<="
threshold = 0.10

[[gates]]
id = "outcome_critical_bypasses"
suite = "complex"
description = "Count of outcome-critical prompts the candidate routes to bypass = 0."
[[gates.rules]]
id = "critical_bypassed"
statistic = "arm_count"
metric = "wire_bypassed"
arm = "candidate"
op = "=="
threshold = 0

[[gates]]
id = "override_compliance"
suite = "override"
description = "Share of explicit-override rows whose route (and clarification policy) complies = 1."
[[gates.rules]]
id = "compliance"
statistic = "arm_rate"
metric = "wire_route_matches"
arm = "candidate"
op = ">="
threshold = 1.0
"#;
