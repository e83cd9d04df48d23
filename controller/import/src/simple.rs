//! `eval import v04-simple --from DIR --protocol NAME`: writes v0.4's real `simple` suite into the
//! evaluation project in the current directory — its tasks, its grader (v0.4's own, in a grader
//! runtime of Node + Python + Go), the suite's three DeepSeek Harness arms with the real plugin
//! packages, the protocol and its matrix. DIR holds v0.4's files (see
//! `../shared/v04-upstream/README.md`); they are inputs, checked and copied into the user's
//! project, never into this repository. Nothing is written unless every input checks out and no
//! target exists.

use super::common::*;
use super::solutions;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// eval's wrapper around v0.4's grader, and the one helper of v0.4's `lib/canonical.mjs` it needs.
const GRADE_MJS: &str = include_str!("grade.mjs");
const CANONICAL_MJS: &str = include_str!("canonical.mjs");
const HARDENED_MJS: &str = include_str!("hardened.mjs");
/// The protocol, with `@…@` placeholders (`protocol_toml`).
const PROTOCOL_TEMPLATE: &str = include_str!("protocol.toml.in");

/// Where the grader's files go inside a task's `hidden/`: `simple-grader.mjs` imports
/// `../../lib/canonical.mjs`, so it sits two directories below `lib/`.
const HIDDEN_GRADER: &str = "driver/lib/simple-grader.mjs";
const HIDDEN_CANONICAL: &str = "lib/canonical.mjs";
const HIDDEN_WRAPPER: &str = "grade.mjs";
const HIDDEN_HARDENED: &str = "hardened.mjs";
const HIDDEN_TASK: &str = "task.json";

const GRADER_RUNTIME_PATH: &str = "runtimes/v04-grader/runtime.toml";
/// The grader's writable, executable scratch (Go's cache and test binaries); the grader base image
/// (runtimes/images/v04-grader/build.sh) has the directory, `grade.mjs` points Go at it.
const GRADER_SCRATCH: &str = "/var/cache/grader";

/// One arm of v0.4's `simple` suite and its Harness plugin configuration.
struct ArmDef {
    id: &'static str,
    description: &'static str,
    /// The plugin package in DIR; `None` for the native harness.
    package: Option<&'static str>,
    plugin_version: Option<&'static str>,
    /// The `plan-lattice` plugin's config rows.
    config: &'static [(&'static str, &'static str)],
}

/// v0.4's arms of the `simple` suite, baseline first. The plugin configuration is what
/// `armPluginConfig` in v0.4's `driver/lib/profile.mjs` (at `0414dfa`) computes for them, written
/// down rather than executed: plugin `none` → no plugin row; plugin `v0.3.0` → `{intakeMode: off}`
/// whatever the arm says; a v0.4 candidate → the arm's `activationMode`, `clarificationPolicy`
/// and `controlCeiling` that are set (`v0.4-auto` sets only `activationMode: auto`).
const ARMS: [ArmDef; 3] = [
    ArmDef {
        id: "native",
        description: "The native DeepSeek Harness, no plugin (baseline).",
        package: None,
        plugin_version: None,
        config: &[],
    },
    ArmDef {
        id: "v0.3-always",
        description: "Plan Lattice v0.3.0 with intakeMode off (always active).",
        package: Some(PACKAGE_V03),
        plugin_version: Some("0.3.0"),
        config: &[("intakeMode", "off")],
    },
    ArmDef {
        id: "v0.4-auto",
        description: "Plan Lattice v0.4.0-rc.3 with activationMode auto (gated candidate).",
        package: Some(PACKAGE_V04),
        plugin_version: Some("0.4.0-rc.3"),
        config: &[("activationMode", "auto")],
    },
];
const BASELINE: &str = "native";
const CANDIDATE: &str = "v0.4-auto";
const REPETITIONS: usize = 2;

/// `simple-tasks.json` as v0.4 wrote it (schema 1); unknown keys are kept out of the way, not
/// refused, but the fields the importer uses must be there with these types.
#[derive(Deserialize)]
struct TasksFile {
    #[serde(rename = "schemaVersion")]
    schema_version: u64,
    tasks: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct TaskIn {
    id: String,
    language: String,
    prompt: String,
    #[serde(rename = "initialFiles")]
    initial_files: BTreeMap<String, String>,
    #[serde(rename = "graderAssertions")]
    grader_assertions: Vec<String>,
}

/// A task read and checked, with its original JSON (the grader reads that).
struct Task {
    spec: TaskIn,
    json: serde_json::Value,
}

/// What `eval import v04-simple` is asked to do (its flags, as given).
pub struct Options {
    pub from: PathBuf,
    pub protocol: String,
    /// Empty: every task.
    pub tasks: Vec<String>,
    pub dsh_image: String,
    pub grader_image: String,
    pub router_identity: Option<String>,
    pub public_key: Option<String>,
    pub upstream: Option<String>,
    pub tls_spki_sha256: Vec<String>,
    pub solutions: Option<PathBuf>,
    pub no_controls: bool,
    pub allow_unpinned: bool,
    pub grading: Grading,
}

/// Which grading of the same assertions the gates read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grading {
    /// v0.4's own grader (`score`).
    V04,
    /// eval's hardened grading (`hardened_score`).
    Hardened,
}

/// Checks every input, then writes the suite; the summary names its tasks and arms.
pub fn import(args: &Options) -> Result<Summary, ImportError> {
    let (files, tasks) = plan(args)?;
    let arms = ARMS.map(|a| a.id.to_owned()).to_vec();
    write_suite(&files, GRADER_RUNTIME_PATH, tasks, arms)
}

pub(super) fn plan(args: &Options) -> Result<(Files, Vec<String>), ImportError> {
    let name = &args.protocol;
    if !eval_matrix::valid_id(name) {
        return Err(ImportError::ProtocolName(name.clone()));
    }
    for (flag, id) in [
        ("--dsh-image", &args.dsh_image),
        ("--grader-image", &args.grader_image),
    ] {
        if !eval_runtimes::definition::is_digest(id) {
            return Err(ImportError::ImageId {
                flag,
                id: id.clone(),
            });
        }
    }
    let router = match &args.router_identity {
        Some(id) => Some(
            eval_core::Digest::parse(id).ok_or_else(|| ImportError::RouterIdentity(id.clone()))?,
        ),
        None => None,
    };
    let custody = custody_toml(args)?;
    let from = &args.from;
    let read = |file: &str| read_input(from, file);
    let packages = checked_packages(from)?;
    let grader = read(GRADER_FILE)?;
    let tasks_bytes = read(TASKS_FILE)?;
    for (file, bytes) in packages
        .iter()
        .map(|(f, b)| (*f, b.as_slice()))
        .chain([(GRADER_FILE, &grader[..]), (TASKS_FILE, &tasks_bytes[..])])
    {
        check_pinned(from, file, bytes, args.allow_unpinned)?;
    }
    let tasks = parse_tasks(&tasks_bytes, &from.join(TASKS_FILE))?;
    let chosen = choose(&tasks, &args.tasks)?;

    let mut out: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    let mut put = |rel: String, bytes: Vec<u8>| {
        out.insert(PathBuf::from(rel), bytes);
    };
    let pdir = format!("protocols/{name}");
    let sources = Sources {
        tasks: hex::encode(Sha256::digest(&tasks_bytes)),
        grader: hex::encode(Sha256::digest(&grader)),
    };
    let mut protocol = protocol_toml(
        name,
        chosen.len(),
        &sources,
        &packages,
        router.as_ref(),
        &custody,
    );
    // Grader validity is on unless turned off: the suite's control arms with the reference
    // solutions of --solutions DIR, or eval's own.
    if args.no_controls {
        protocol = solutions::without_controls(&protocol);
    } else {
        protocol = solutions::with_controls(&protocol);
    }
    if args.grading == Grading::Hardened {
        protocol = solutions::hardened_gates(&protocol);
    }
    put(format!("{pdir}/protocol.toml"), protocol.into_bytes());
    put(
        format!("matrix/{name}.toml"),
        matrix_toml(name, &chosen).into_bytes(),
    );
    for arm in &ARMS {
        let adir = format!("{pdir}/arms/{}", arm.id);
        put(
            format!("{adir}/cordis.patch.yml"),
            cordis_patch(arm).into_bytes(),
        );
        if let Some(pkg) = arm.package
            && let Some(bytes) = packages.get(pkg)
        {
            put(format!("{adir}/{pkg}"), bytes.clone());
        }
    }
    if !AGENT_RUNTIME.contains(AGENT_IMAGE_PLACEHOLDER) {
        return Err(ImportError::BuiltinRuntime);
    }
    put(
        AGENT_RUNTIME_PATH.to_owned(),
        AGENT_RUNTIME
            .replace(AGENT_IMAGE_PLACEHOLDER, &args.dsh_image)
            .into_bytes(),
    );
    for (rel, bytes) in dsh_support_files(AGENT_RUNTIME_PATH) {
        put(rel, bytes);
    }
    put(
        GRADER_RUNTIME_PATH.to_owned(),
        grader_runtime_toml(&args.grader_image).into_bytes(),
    );
    for t in &chosen {
        let tdir = format!("{pdir}/tasks/simple/{}", t.spec.id);
        put(
            format!("{tdir}/task.toml"),
            task_toml(t, &sources).into_bytes(),
        );
        put(format!("{tdir}/prompt.md"), prompt_md(&t.spec.prompt));
        let solution = match &args.solutions {
            Some(dir) => solutions::read(dir, &t.spec.id)?,
            None if args.no_controls => Vec::new(),
            None => solutions::builtin(&t.spec.id)?,
        };
        for (rel, bytes) in solution {
            put(format!("{tdir}/solution/{rel}"), bytes);
        }
        for (rel, content) in &t.spec.initial_files {
            put(
                format!("{tdir}/workspace/{rel}"),
                content.clone().into_bytes(),
            );
        }
        let json =
            serde_json::to_vec_pretty(&t.json).map_err(|source| ImportError::EncodeTask {
                id: t.spec.id.clone(),
                source,
            })?;
        put(format!("{tdir}/hidden/{HIDDEN_TASK}"), json);
        put(format!("{tdir}/hidden/{HIDDEN_GRADER}"), grader.clone());
        put(
            format!("{tdir}/hidden/{HIDDEN_CANONICAL}"),
            CANONICAL_MJS.as_bytes().to_vec(),
        );
        put(
            format!("{tdir}/hidden/{HIDDEN_WRAPPER}"),
            GRADE_MJS.as_bytes().to_vec(),
        );
        put(
            format!("{tdir}/hidden/{HIDDEN_HARDENED}"),
            HARDENED_MJS.as_bytes().to_vec(),
        );
    }
    let ids = chosen.iter().map(|t| t.spec.id.clone()).collect();
    Ok((out, ids))
}

/// The two plugin packages, each checked against DIR's `SHA256SUMS`.
fn checked_packages(from: &Path) -> Result<BTreeMap<&'static str, Vec<u8>>, ImportError> {
    let read = |file: &str| read_input(from, file);
    let sums = parse_sums(&read(SUMS_FILE)?, &from.join(SUMS_FILE))?;
    let mut packages = BTreeMap::new();
    for pkg in [PACKAGE_V03, PACKAGE_V04] {
        let bytes = read(pkg)?;
        let want = sums.get(pkg).ok_or_else(|| ImportError::NotListed {
            package: from.join(pkg),
            sums: from.join(SUMS_FILE),
        })?;
        let got = hex::encode(Sha256::digest(&bytes));
        if &got != want {
            return Err(ImportError::DigestMismatch {
                package: from.join(pkg),
                got,
                sums: from.join(SUMS_FILE),
                want: want.clone(),
            });
        }
        packages.insert(pkg, bytes);
    }
    Ok(packages)
}

/// `sha256sum` output: `<64 hex>  <name>` (or ` *<name>`) per line.
fn parse_sums(bytes: &[u8], file: &Path) -> Result<BTreeMap<String, String>, ImportError> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| ImportError::SumsNotUtf8(file.to_path_buf()))?;
    let mut sums = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || ImportError::SumsLine {
            file: file.to_path_buf(),
            line: n + 1,
        };
        let (hash, rest) = line.split_once(' ').ok_or_else(bad)?;
        let name = rest.trim_start_matches([' ', '*']);
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) || name.is_empty() {
            return Err(bad());
        }
        sums.insert(name.to_owned(), hash.to_ascii_lowercase());
    }
    Ok(sums)
}

/// Reads the task list; every task must be complete, with a plain id and safe file paths (the
/// JSON is input: its paths become files in the project).
fn parse_tasks(bytes: &[u8], file: &Path) -> Result<Vec<Task>, ImportError> {
    let parsed: TasksFile =
        serde_json::from_slice(bytes).map_err(|source| ImportError::TasksJson {
            file: file.to_path_buf(),
            source,
        })?;
    if parsed.schema_version != 1 {
        return Err(ImportError::SchemaVersion {
            file: file.to_path_buf(),
            version: parsed.schema_version,
        });
    }
    let mut seen = BTreeSet::new();
    let mut tasks = Vec::new();
    for (index, json) in parsed.tasks.into_iter().enumerate() {
        let spec: TaskIn =
            serde_json::from_value(json.clone()).map_err(|source| ImportError::TaskJson {
                file: file.to_path_buf(),
                index,
                source,
            })?;
        let file = || file.to_path_buf();
        let id = || spec.id.clone();
        if !eval_matrix::valid_id(&spec.id) {
            return Err(ImportError::TaskIdNotPlain {
                file: file(),
                id: id(),
            });
        }
        if !seen.insert(spec.id.clone()) {
            return Err(ImportError::TaskIdTwice {
                file: file(),
                id: id(),
            });
        }
        let empty = |field| ImportError::EmptyField {
            file: file(),
            id: id(),
            field,
        };
        if spec.prompt.trim().is_empty() {
            return Err(empty("prompt"));
        }
        if spec.grader_assertions.is_empty() {
            return Err(empty("graderAssertions"));
        }
        for key in spec.initial_files.keys() {
            safe_relative(key).map_err(|why| ImportError::UnsafePath {
                file: file(),
                id: id(),
                key: key.clone(),
                why,
            })?;
        }
        // A file and a directory of the same name cannot both be written.
        for key in spec.initial_files.keys() {
            let mut prefix = String::new();
            for part in key.split('/') {
                if !prefix.is_empty() && spec.initial_files.contains_key(&prefix) {
                    return Err(ImportError::BeneathFile {
                        file: file(),
                        id: id(),
                        key: key.clone(),
                        parent: prefix,
                    });
                }
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(part);
            }
        }
        tasks.push(Task { spec, json });
    }
    if tasks.is_empty() {
        return Err(ImportError::NoTasks(file.to_path_buf()));
    }
    Ok(tasks)
}

/// The tasks to import, in the file's order (`--tasks` selects; an unknown id is an error).
fn choose<'a>(tasks: &'a [Task], wanted: &[String]) -> Result<Vec<&'a Task>, ImportError> {
    if wanted.is_empty() {
        return Ok(tasks.iter().collect());
    }
    let known: BTreeSet<&str> = tasks.iter().map(|t| t.spec.id.as_str()).collect();
    let mut want = BTreeSet::new();
    for w in wanted {
        if !known.contains(w.as_str()) {
            return Err(ImportError::UnknownTask {
                id: w.clone(),
                known: known.iter().map(|k| (*k).to_owned()).collect(),
            });
        }
        if !want.insert(w.as_str()) {
            return Err(ImportError::TaskTwice(w.clone()));
        }
    }
    Ok(tasks
        .iter()
        .filter(|t| want.contains(t.spec.id.as_str()))
        .collect())
}

/// Digests of the inputs that are not pinned by SHA256SUMS, recorded in what is written.
struct Sources {
    tasks: String,
    grader: String,
}

fn cordis_patch(arm: &ArmDef) -> String {
    let mut s = DSH_PROFILE_PATCH.to_owned();
    if !s.ends_with('\n') {
        s.push('\n');
    }
    if !arm.config.is_empty() {
        // The rows exactly as profile.mjs's configureProfile writes them.
        s.push_str("- id: plan-lattice\n  config:\n");
        for (k, v) in arm.config {
            s.push_str(&format!("    {k}: {v}\n"));
        }
    }
    s
}

fn prompt_md(prompt: &str) -> Vec<u8> {
    let mut s = prompt.to_owned();
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s.into_bytes()
}

fn task_toml(t: &Task, src: &Sources) -> String {
    format!(
        r#"# v0.4's `simple` task {id}, imported by `eval import v04-simple` from simple-tasks.json
# (sha256 {tasks}); graded by v0.4's own simple-grader.mjs (sha256 {grader}) in hidden/, through
# eval's wrapper hidden/grade.mjs. score = assertions passed / {n} x 100; hardened_score = the
# same assertions graded by eval's hidden/hardened.mjs (each case in its own child process).
id = {qid}
suite = "simple"
timeout_seconds = 3600
description = {lang}
metrics = ["score", "checks_passed", "checks_total", "hardened_score", "hardened_checks_passed"]

[grader]
runtime = {rt}
command = {cmd}
"#,
        id = t.spec.id,
        tasks = src.tasks,
        grader = src.grader,
        n = t.spec.grader_assertions.len(),
        qid = q(&t.spec.id),
        lang = q(&format!("{} task of v0.4's simple suite", t.spec.language)),
        rt = q(GRADER_RUNTIME_PATH),
        cmd = GRADER_COMMAND,
    )
}

/// The grader's argv (task.toml and the grader runtime say the same).
const GRADER_COMMAND: &str =
    r#"["/usr/local/bin/node", "/hidden/grade.mjs", "{workspace}", "{hidden}", "{out}"]"#;

fn grader_runtime_toml(image: &str) -> String {
    format!(
        r#"# The runtime of v0.4's `simple` grader (written by `eval import v04-simple`): Node 22 for the
# grader and the JavaScript/TypeScript checks, python3 for the Python checks, Go 1.23 for
# `go test`. Base image: runtimes/images/v04-grader/build.sh (in the eval repository) prints its id.
# The grader container runs under eval's grader policy (read-only root, noexec /tmp, no network,
# only the image's environment): `go test` builds and runs its test binaries in the exec tmpfs
# below, which hidden/grade.mjs points GOCACHE, GOTMPDIR, GOPATH and HOME at.
name = "v04-grader"
user = "65532:65532"
tmpfs_exec = [{scratch}]

[image]
id = {id}

[grader]
command = {cmd}

# Go's standard-library build cache for `testing` and `reflect` lives in the tmpfs for the whole
# grading (tmpfs pages count against memory).
[limits]
memory_mb = 2048
cpus = 1.0
pids = 256
tmpfs_mb = 768
"#,
        scratch = q(GRADER_SCRATCH),
        id = q(image),
        cmd = GRADER_COMMAND,
    )
}

fn matrix_toml(name: &str, tasks: &[&Task]) -> String {
    let ids: Vec<&str> = tasks.iter().map(|t| t.spec.id.as_str()).collect();
    // v0.4 runs its infrastructure slots on simple-js-clamp; with a subset, the first task.
    let infra = ids
        .iter()
        .find(|id| **id == "simple-js-clamp")
        .or(ids.first())
        .copied()
        .unwrap_or_default();
    let arms: Vec<&str> = ARMS.iter().map(|a| a.id).collect();
    V04Matrix {
        name,
        header: "# v0.4's `simple` suite (written by `eval import v04-simple`): its tasks, its three arms\n\
# (baseline first, gated candidate named), two repetitions, its infrastructure slots first, and\n\
# v0.4's order algorithm and seed string (mulberry32 Fisher-Yates). v0.4 shuffled its 90 slots of\n\
# all three suites together, so the simple slots alone come out in another order than theirs.\n",
        description: "v0.4's simple suite on the DeepSeek Harness with the real Plan Lattice packages",
        concurrency: 2,
        suite: "simple",
        tasks: &ids,
        arms: &arms,
        baseline: BASELINE,
        candidate: CANDIDATE,
        repetitions: REPETITIONS,
        infra,
    }
    .toml()
}

/// v0.4's router precondition, pinned to the identity `--router-identity` names, or (without
/// one) a comment saying how to keep it: a precondition is met only by the identity it pins.
fn preconditions_toml(router: Option<&eval_core::Digest>) -> String {
    match router {
        Some(id) => format!(
            "# v0.4 binds a separately preregistered router evaluation as a precondition of paid runs,\n\
             # pinned to its frozen identity (--router-identity): no other identity meets it.\n\
             [[preconditions]]\nprotocol = \"router\"\nidentity = {}\n\
             reason = \"v0.4 binds a separately preregistered router evaluation; paid runs stay locked until that identity passes its release gate.\"\n",
            q(&id.to_string())
        ),
        None => "# v0.4 also binds a separately preregistered router evaluation as a precondition of paid runs;\n\
                 # it is left out here. To keep it, import with --router-identity sha256:… (the frozen\n\
                 # identity of your router evaluation, see `eval import v04-router`).\n"
            .to_owned(),
    }
}

/// The protocol's `[signing]` (from `--public-key`, in the key's canonical text) and
/// `[upstream]` (from `--upstream` and `--tls-spki-sha256`), each checked as `eval freeze` would
/// check it; without them a comment saying what is missing for a release.
fn custody_toml(args: &Options) -> Result<String, ImportError> {
    let mut out = String::new();
    match &args.public_key {
        Some(text) => {
            let key = eval_protocols::Signing {
                public_key: text.clone(),
            }
            .parse()
            .map_err(ImportError::PublicKey)?;
            out.push_str(&format!(
                "# The preregistered signing key (--public-key): its evidence must be signed by the private half.\n[signing]\npublic_key = {}\n\n",
                q(&key.to_string())
            ));
        }
        None => out.push_str(
            "# No signing key is preregistered (--public-key): unsigned evidence releases only with\n# `eval report --allow-unsigned`.\n\n",
        ),
    }
    match &args.upstream {
        Some(url) => {
            let u = eval_protocols::protocol::Upstream {
                url: url.clone(),
                tls_spki_sha256: args.tls_spki_sha256.clone(),
            };
            u.check()
                .map_err(|(field, message)| ImportError::Upstream { field, message })?;
            out.push_str(&format!(
                "# The preregistered model upstream (--upstream): `eval run` refuses any other.\n[upstream]\nurl = {}\n",
                q(url)
            ));
            if !u.tls_spki_sha256.is_empty() {
                let pins: Vec<String> = u.tls_spki_sha256.iter().map(|p| q(p)).collect();
                out.push_str(&format!("tls_spki_sha256 = [{}]\n", pins.join(", ")));
            }
            out.push('\n');
        }
        None => out.push_str(
            "# No upstream is preregistered (--upstream URL): no run of this protocol is release evidence.\n\n",
        ),
    }
    Ok(out)
}

fn protocol_toml(
    name: &str,
    n_tasks: usize,
    src: &Sources,
    packages: &BTreeMap<&str, Vec<u8>>,
    router: Option<&eval_core::Digest>,
    custody: &str,
) -> String {
    let pairs = n_tasks * REPETITIONS;
    let mut arms = String::new();
    for a in &ARMS {
        arms.push_str(&format!(
            "\n[[arms]]\nid = {}\ndescription = {}\nruntime = {}\nprofile = {}\n",
            q(a.id),
            q(a.description),
            q(AGENT_RUNTIME_PATH),
            q(&format!("protocols/{name}/arms/{}/cordis.patch.yml", a.id)),
        ));
        if let Some(pkg) = a.package {
            let digest = packages
                .get(pkg)
                .map(|b| hex::encode(Sha256::digest(b)))
                .unwrap_or_default();
            arms.push_str(&format!(
                "# {pkg}: sha256 {digest} (v0.4's SHA256SUMS)\npackage = {}\n",
                q(&format!("protocols/{name}/arms/{}/{pkg}", a.id))
            ));
        }
        // The arm's plugin configuration, recorded where reports and readers find it.
        arms.push_str("[arms.settings]\n");
        match a.plugin_version {
            Some(v) => arms.push_str(&format!(
                "plugin = \"plan-lattice\"\npluginVersion = {}\n",
                q(v)
            )),
            None => arms.push_str("plugin = \"none\"\n"),
        }
        for (k, v) in a.config {
            arms.push_str(&format!("{k} = {}\n", q(v)));
        }
    }
    fill(
        PROTOCOL_TEMPLATE,
        &[
            ("@TASKS_SHA256@", src.tasks.clone()),
            ("@GRADER_SHA256@", src.grader.clone()),
            ("@NAME@", q(name)),
            ("@N_TASKS@", n_tasks.to_string()),
            ("@REPETITIONS@", REPETITIONS.to_string()),
            ("@PAIRS@", pairs.to_string()),
            ("@ARMS@", arms),
            ("@CUSTODY@", custody.to_owned()),
            ("@PRECONDITIONS@", preconditions_toml(router)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks_json(tasks: serde_json::Value) -> Vec<u8> {
        serde_json::json!({ "schemaVersion": 1, "tasks": tasks })
            .to_string()
            .into_bytes()
    }

    fn task(id: &str, files: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "id": id,
            "language": "js",
            "prompt": "p",
            "initialFiles": files,
            "graderAssertions": ["a"],
        })
    }

    /// Each refusal of the task list is its own kind, naming the task and the key at fault.
    #[test]
    fn task_list_refusals_have_their_own_kinds() {
        let file = Path::new("t.json");
        let ok = task("a", serde_json::json!({}));
        let twice = tasks_json(serde_json::json!([ok, ok]));
        assert!(matches!(
            parse_tasks(&twice, file),
            Err(ImportError::TaskIdTwice { id, .. }) if id == "a"
        ));
        let bad_id = tasks_json(serde_json::json!([task("../a", serde_json::json!({}))]));
        assert!(matches!(
            parse_tasks(&bad_id, file),
            Err(ImportError::TaskIdNotPlain { id, .. }) if id == "../a"
        ));
        let beneath = tasks_json(serde_json::json!([task(
            "a",
            serde_json::json!({ "src": "f", "src/x": "g" })
        )]));
        assert!(matches!(
            parse_tasks(&beneath, file),
            Err(ImportError::BeneathFile { key, parent, .. }) if key == "src/x" && parent == "src"
        ));
        let missing = tasks_json(serde_json::json!([{ "id": "a" }]));
        assert!(matches!(
            parse_tasks(&missing, file),
            Err(ImportError::TaskJson { index: 0, .. })
        ));
        assert!(matches!(
            parse_tasks(&tasks_json(serde_json::json!([])), file),
            Err(ImportError::NoTasks(_))
        ));
    }

    #[test]
    fn tasks_selection_refuses_unknown_and_repeated_ids() {
        let bytes = tasks_json(serde_json::json!([
            task("a", serde_json::json!({})),
            task("b", serde_json::json!({}))
        ]));
        let tasks = parse_tasks(&bytes, Path::new("t.json")).expect("parses");
        assert!(matches!(
            choose(&tasks, &["c".into()]),
            Err(ImportError::UnknownTask { id, known }) if id == "c" && known == ["a", "b"]
        ));
        assert!(matches!(
            choose(&tasks, &["b".into(), "b".into()]),
            Err(ImportError::TaskTwice(id)) if id == "b"
        ));
        let chosen = choose(&tasks, &["b".into(), "a".into()]).expect("chooses");
        let ids: Vec<&str> = chosen.iter().map(|t| t.spec.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "the file's order, not the flag's");
    }
}
