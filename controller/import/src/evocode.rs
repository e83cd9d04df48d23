//! `eval import v04-evocode --from DIR --package RC3.tgz --dsh-image ID --grader-image ID`:
//! v0.4's EvoCode suite from task directories in the Harbor multi-step layout (EvoCode-Bench
//! `README.md` "Task Format", `evaluation/validate_dataset.py`):
//!
//! ```text
//! DIR/<task>/task.toml                  schema 1.2, [[steps]] name = "round-1", …; timeouts
//! DIR/<task>/environment/Dockerfile     translated onto eval's Go base (`translate`)
//! DIR/<task>/environment/…              what the Dockerfile COPYs into /app: the workspace
//! DIR/<task>/steps/<step>/instruction.md
//! DIR/<task>/steps/<step>/tests/test.sh  prints CASE_RESULT/CASE_SUMMARY, writes reward.txt
//! DIR/<task>/steps/<step>/solution/…     optional; kept grader-side only
//! ```
//!
//! Each task becomes a multi-round bundle (docs/rounds.md): round k's prompt is step k's
//! `instruction.md`, its hidden files step k's `tests/` plus eval's wrapper `grade.sh`, which
//! runs them as Harbor does (the workspace at `/app`, the tests at `/tests`, the reward at
//! `/logs/verifier/reward.txt`) and leaves `test-stdout.txt`, `reward.txt` and `score.json` in
//! `{out}` for the round metrics (`eval_core::round_metrics`). Nothing is written unless every
//! input checks out and no target exists. The inputs are copied into the user's project, never
//! into this repository.

use super::common::{
    AGENT_IMAGE_PLACEHOLDER, AGENT_RUNTIME, AGENT_RUNTIME_PATH, Arm, ImportError, PACKAGE_V04,
    PINNED, Summary, harness_arm_files, q, read_input, safe_relative, write_suite,
};

mod archive;
use super::harbor_reader::{self, harbor, read_tree, timeout_of};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SUITE: &str = "evocode";
const GRADER_RUNTIME_PATH: &str = "runtimes/v04-evocode-grader/runtime.toml";
/// eval's wrapper around one round's `tests/test.sh`, in every round's hidden directory.
pub(super) const GRADE_SH: &str = include_str!("evocode-grade.sh");
const PROTOCOL_TEMPLATE: &str = include_str!("evocode-protocol.toml.in");
/// The grader's writable, executable paths: where Harbor's tests expect the workspace, the
/// tests, their logs and the binaries they build, and Go's caches.
const GRADER_TMPFS_EXEC: [&str; 4] = ["/app", "/tests", "/usr/local/bin", "/var/cache/grader"];
/// The Debian packages the Go base has (runtimes/images/evocode-go/build.sh `APT_PACKAGES`, and
/// what debootstrap's minbase brings): a Dockerfile's `apt-get install` of only these is
/// satisfied by the base.
pub const BASE_PACKAGES: &[&str] = &[
    "bash",
    "ca-certificates",
    "coreutils",
    "curl",
    "diffutils",
    "findutils",
    "git",
    "grep",
    "jq",
    "make",
    "procps",
    "python3",
    "sed",
    "tar",
    "xz-utils",
];
/// A Dockerfile's `FROM` that the Go base stands in for.
const BASE_FROM: &[&str] = &[
    "golang:",
    "docker.io/library/golang:",
    "debian:",
    "docker.io/library/debian:",
];

/// v0.4's EvoCode arms (Plan Lattice 0414dfa `eval/v0.4/frozen-manifest.json`), baseline first;
/// the plugin rows are what `armPluginConfig` (`driver/lib/profile.mjs`) computes for them.
const ARMS: [Arm; 3] = [
    (
        "native",
        "The native DeepSeek Harness, no plugin (baseline).",
        &[],
    ),
    (
        "v0.4-contract",
        "Plan Lattice v0.4.0-rc.3: activationMode always, clarificationPolicy critical, controlCeiling contract (ablation).",
        &[
            ("activationMode", "always"),
            ("clarificationPolicy", "critical"),
            ("controlCeiling", "contract"),
        ],
    ),
    (
        "v0.4-lattice",
        "Plan Lattice v0.4.0-rc.3: activationMode always, clarificationPolicy critical, controlCeiling lattice (gated candidate).",
        &[
            ("activationMode", "always"),
            ("clarificationPolicy", "critical"),
            ("controlCeiling", "lattice"),
        ],
    ),
];
const BASELINE: &str = "native";
const CANDIDATE: &str = "v0.4-lattice";
const REPETITIONS: usize = 2;

/// One task, read and checked.
struct EvoTask {
    id: String,
    title: String,
    /// The tree digest of every file of the task directory read.
    digest: String,
    /// Seconds per round (the step's, else the task's agent timeout, else 1800).
    round_timeouts: Vec<u64>,
    prompts: Vec<Vec<u8>>,
    tests: Vec<Vec<(String, Vec<u8>)>>,
    solutions: Vec<Vec<(String, Vec<u8>)>>,
    docker: Translated,
}

/// What a Dockerfile comes to on eval's Go base.
#[derive(Debug, Default, PartialEq)]
pub struct Translated {
    /// The `FROM` image the base stands in for.
    pub from: String,
    /// Files the Dockerfile COPYs into `/app`: the workspace (relative path → source path inside
    /// `environment/`).
    pub workspace: BTreeMap<String, String>,
    /// `ENV` variables, in order: exported by the grader wrapper before the tests.
    pub env: Vec<(String, String)>,
    /// Lines satisfied by the base (apt packages it has, directories the wrapper makes).
    pub satisfied: Vec<String>,
}

/// What `eval import v04-evocode` is asked to do.
pub use super::common::SuiteOptions as Options;

/// Checks every input, then writes the suite; the summary names its tasks and arms.
pub fn import(args: &Options) -> Result<Summary, ImportError> {
    let (files, tasks) = plan(args)?;
    let arms = ARMS.map(|a| a.0.to_owned()).to_vec();
    write_suite(&files, GRADER_RUNTIME_PATH, tasks, arms)
}

type Files = BTreeMap<PathBuf, Vec<u8>>;

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
    // The archive is hashed (and refused when unpinned) before anything is extracted.
    let source = Source::open(args)?;
    let pkg_dir = args.package.parent().unwrap_or(Path::new("."));
    let pkg_file = args
        .package
        .file_name()
        .and_then(|f| f.to_str())
        .ok_or_else(|| harbor(&args.package, "--package: not a file name"))?;
    let package = read_input(pkg_dir, pkg_file)?;
    let got = hex::encode(Sha256::digest(&package));
    let want = PINNED
        .iter()
        .find(|(f, _)| *f == PACKAGE_V04)
        .map(|(_, d)| *d)
        .unwrap_or_default();
    if got != want && !args.allow_unpinned {
        return Err(ImportError::Unpinned {
            path: args.package.clone(),
            got,
            want,
        });
    }
    let from = source.tasks_root();
    let tasks = read_tasks(from, &source.wanted)?;
    if !AGENT_RUNTIME.contains(AGENT_IMAGE_PLACEHOLDER) {
        return Err(ImportError::BuiltinRuntime);
    }

    let mut out = Files::new();
    let mut put = |rel: String, bytes: Vec<u8>| {
        out.insert(PathBuf::from(rel), bytes);
    };
    let pdir = format!("protocols/{name}");
    put(
        format!("{pdir}/protocol.toml"),
        protocol_toml(
            name,
            &tasks,
            &hex::encode(Sha256::digest(&package)),
            source.archive_sha.as_deref(),
        )
        .into_bytes(),
    );
    put(
        format!("matrix/{name}.toml"),
        matrix_toml(name, &tasks).into_bytes(),
    );
    for (rel, bytes) in harness_arm_files(&pdir, &ARMS, &package, &args.dsh_image) {
        put(rel, bytes);
    }
    put(
        GRADER_RUNTIME_PATH.to_owned(),
        grader_runtime_toml(&args.grader_image).into_bytes(),
    );
    for t in &tasks {
        let tdir = format!("{pdir}/tasks/{SUITE}/{}", t.id);
        put(format!("{tdir}/task.toml"), task_toml(t).into_bytes());
        for (rel, src) in &t.docker.workspace {
            let bytes = std::fs::read(from.join(&t.id).join("environment").join(src)).map_err(
                |source| ImportError::Read {
                    path: from.join(&t.id).join("environment").join(src),
                    source,
                },
            )?;
            put(format!("{tdir}/workspace/{rel}"), bytes);
        }
        for (k, prompt) in t.prompts.iter().enumerate() {
            put(format!("{tdir}/rounds/{}/prompt.md", k + 1), prompt.clone());
        }
        for (k, tests) in t.tests.iter().enumerate() {
            let hdir = format!("{tdir}/hidden/rounds/{}", k + 1);
            for (rel, bytes) in tests {
                put(format!("{hdir}/tests/{rel}"), bytes.clone());
            }
            put(format!("{hdir}/grade.sh"), GRADE_SH.as_bytes().to_vec());
            put(format!("{hdir}/env"), env_file(&t.docker.env).into_bytes());
            // The reference delta, for a reader and a later oracle arm; grader-side only.
            for (rel, bytes) in &t.solutions[k] {
                put(format!("{hdir}/solution/{rel}"), bytes.clone());
            }
        }
    }
    Ok((out, tasks.iter().map(|t| t.id.clone()).collect()))
}

/// Where the tasks come from: `--from DIR` (extracted task directories, which no pin covers:
/// refused without `--allow-unpinned`), or `--from ARCHIVE.tar.zst`, the dataset archive, hashed
/// against [`archive::ARCHIVE_SHA256`] and extracted to a private temporary directory
/// (`archive::extract`). From the archive, the tasks default to v0.4's three ([`V04_TASKS`]).
struct Source {
    dir: PathBuf,
    _extracted: Option<archive::Extracted>,
    archive_sha: Option<String>,
    wanted: Vec<String>,
}

/// v0.4's EvoCode tasks (V04-SUITES.md; Plan Lattice 0414dfa `eval/v0.4/frozen-manifest.json`).
pub const V04_TASKS: [&str; 3] = [
    "theme_d1_w1_code_build_greenfield_implementation",
    "theme_d1_w5_code_build_integration_e2e_wiring",
    "theme_d6_w1_database_storage_greenfield_implementation",
];

impl Source {
    fn open(args: &Options) -> Result<Source, ImportError> {
        let is_archive = std::fs::symlink_metadata(&args.from).is_ok_and(|m| !m.is_dir())
            || args
                .from
                .to_string_lossy()
                .ends_with(archive::ARCHIVE_SUFFIX);
        if !is_archive {
            if !args.allow_unpinned {
                return Err(ImportError::TasksUnpinned(args.from.clone()));
            }
            return Ok(Source {
                dir: args.from.clone(),
                _extracted: None,
                archive_sha: None,
                wanted: args.tasks.clone(),
            });
        }
        let dir = args.from.parent().unwrap_or(Path::new("."));
        let file = args
            .from
            .file_name()
            .and_then(|f| f.to_str())
            .filter(|f| f.ends_with(archive::ARCHIVE_SUFFIX))
            .ok_or_else(|| {
                harbor(
                    &args.from,
                    format!(
                        "--from: neither a directory of task directories nor the dataset archive (*{})",
                        archive::ARCHIVE_SUFFIX
                    ),
                )
            })?;
        let bytes = read_input(dir, file)?;
        let sha = archive::pinned(&args.from, &bytes, args.allow_unpinned)?;
        let wanted = if args.tasks.is_empty() {
            V04_TASKS.map(str::to_owned).to_vec()
        } else {
            args.tasks.clone()
        };
        let extracted = archive::extract(&args.from, &bytes, &wanted)?;
        Ok(Source {
            dir: extracted.root.clone(),
            _extracted: Some(extracted),
            archive_sha: Some(sha),
            wanted,
        })
    }

    /// The directory holding `<task>/task.toml` (for the archive, inside `extracted`, which
    /// removes it when the import ends).
    fn tasks_root(&self) -> &Path {
        &self.dir
    }
}

/// Every task directory of `from` (those with a `task.toml`), sorted; `wanted` selects.
fn read_tasks(from: &Path, wanted: &[String]) -> Result<Vec<EvoTask>, ImportError> {
    harbor_reader::task_ids(from, wanted, archive::MAX_TASKS)?
        .iter()
        .map(|id| read_task(from, id))
        .collect()
}

fn read_task(from: &Path, id: &str) -> Result<EvoTask, ImportError> {
    let root = from.join(id);
    if !eval_matrix::valid_id(id) {
        return Err(harbor(
            &root,
            "not a plain task id (letters, digits, `-`, `_`, `.`)",
        ));
    }
    let mut digest = Sha256::new();
    let mut record = |rel: &str, bytes: &[u8]| {
        digest.update(format!("{rel}\0{}\0", bytes.len()));
        digest.update(bytes);
    };
    let toml_bytes = read_input(&root, "task.toml")?;
    record("task.toml", &toml_bytes);
    let spec = harbor_reader::parse(&root.join("task.toml"), &toml_bytes)?;
    if let Some(s) = &spec.multi_step_reward_strategy
        && s != "mean"
    {
        return Err(harbor(
            root.join("task.toml"),
            format!(
                "multi_step_reward_strategy = {s:?}: only \"mean\" (EvoCode-Bench's) is imported"
            ),
        ));
    }
    if spec.steps.is_empty() {
        return Err(harbor(root.join("task.toml"), "declares no [[steps]]"));
    }
    if spec.steps.len() > eval_protocols::task::MAX_ROUNDS {
        return Err(harbor(
            root.join("task.toml"),
            format!(
                "{} [[steps]]; a task has at most {} rounds",
                spec.steps.len(),
                eval_protocols::task::MAX_ROUNDS
            ),
        ));
    }
    let default_timeout = timeout_of(
        spec.agent.timeout_sec,
        1800,
        &root.join("task.toml"),
        "agent.timeout_sec",
    )?;
    let names = harbor_reader::step_names(&spec, &root.join("task.toml"))?;
    let mut round_timeouts = Vec::new();
    for (i, s) in spec.steps.iter().enumerate() {
        round_timeouts.push(timeout_of(
            s.agent.timeout_sec,
            default_timeout,
            &root.join("task.toml"),
            &format!("steps[{i}].agent.timeout_sec"),
        )?);
    }
    // No step directory that [[steps]] does not declare (validate_dataset.py's orphan check).
    let steps_dir = root.join("steps");
    let listed = std::fs::read_dir(&steps_dir).map_err(|source| ImportError::Read {
        path: steps_dir.clone(),
        source,
    })?;
    for e in listed {
        let e = e.map_err(|source| ImportError::Read {
            path: steps_dir.clone(),
            source,
        })?;
        let n = e.file_name().to_string_lossy().into_owned();
        if !names.contains(&n) {
            return Err(harbor(
                e.path(),
                "a step directory [[steps]] does not declare",
            ));
        }
    }
    let mut prompts = Vec::new();
    let mut tests = Vec::new();
    let mut solutions = Vec::new();
    for n in &names {
        let dir = steps_dir.join(n);
        let prompt = read_input(&dir, "instruction.md")?;
        if std::str::from_utf8(&prompt).map_or(true, |p| p.trim().is_empty()) {
            return Err(harbor(dir.join("instruction.md"), "empty or not UTF-8"));
        }
        record(&format!("steps/{n}/instruction.md"), &prompt);
        prompts.push(prompt);
        let t = read_tree(&dir.join("tests"))?;
        if !t.iter().any(|(rel, _)| rel == "test.sh") {
            return Err(harbor(dir.join("tests"), "no test.sh"));
        }
        for (rel, bytes) in &t {
            record(&format!("steps/{n}/tests/{rel}"), bytes);
        }
        tests.push(t);
        let sol = if std::fs::symlink_metadata(dir.join("solution")).is_ok() {
            read_tree(&dir.join("solution"))?
        } else {
            Vec::new()
        };
        for (rel, bytes) in &sol {
            record(&format!("steps/{n}/solution/{rel}"), bytes);
        }
        solutions.push(sol);
    }
    let env_dir = root.join("environment");
    let dockerfile = read_input(&env_dir, "Dockerfile")?;
    record("environment/Dockerfile", &dockerfile);
    let docker_text = std::str::from_utf8(&dockerfile)
        .map_err(|_| harbor(env_dir.join("Dockerfile"), "not UTF-8"))?;
    let env_files = read_tree(&env_dir)?;
    for (rel, bytes) in &env_files {
        record(&format!("environment/{rel}"), bytes);
    }
    let env_names: BTreeSet<String> = env_files.into_iter().map(|(r, _)| r).collect();
    let docker = translate(docker_text, &env_names)
        .map_err(|(line, why)| harbor(env_dir.join("Dockerfile"), format!("line {line}: {why}")))?;
    let meta = |k: &str| {
        spec.metadata
            .get(k)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let title = meta("name").unwrap_or_else(|| id.to_owned());
    let title = match meta("category") {
        Some(c) => format!("{title} ({c})"),
        None => title,
    };
    Ok(EvoTask {
        id: id.to_owned(),
        title,
        digest: hex::encode(digest.finalize()),
        round_timeouts,
        prompts,
        tests,
        solutions,
        docker,
    })
}

/// Translates a task's `environment/Dockerfile` onto eval's Go base, or names the line (1-based,
/// where its instruction starts) it cannot translate and why. `files` are the paths beneath
/// `environment/`. Understood: one `FROM` of a golang or debian image (the base stands in for
/// it); `WORKDIR /app`; `COPY SRC… /app[/DIR]/` from inside `environment/` (the workspace);
/// `ENV` (exported before the tests; the agent's runtime is shared and gets none); `RUN` of
/// `apt-get update`, `apt-get install [-y] [--no-install-recommends] PKG…` with every package in
/// [`BASE_PACKAGES`], `rm -rf /var/lib/apt/lists/*` and `mkdir -p` under `/logs` or `/tests`,
/// joined by `&&`; `CMD`, `ENTRYPOINT`, `LABEL`, `EXPOSE` (eval never runs an image's own
/// command). Everything else — another base, `ADD`, `USER`, `ARG`, any other `RUN` — is refused:
/// the base would not be what the task was built on.
pub fn translate(text: &str, files: &BTreeSet<String>) -> Result<Translated, (usize, String)> {
    let mut t = Translated::default();
    let mut froms = 0;
    for (line, instr) in instructions(text) {
        let refuse = |why: String| Err((line, format!("`{instr}`: {why}")));
        let (kw, rest) = instr
            .split_once(char::is_whitespace)
            .map_or((instr.as_str(), ""), |(k, r)| (k, r.trim()));
        match kw.to_ascii_uppercase().as_str() {
            "FROM" => {
                froms += 1;
                if froms > 1 {
                    return refuse("a multi-stage build; eval's base is one image".into());
                }
                let image = rest.split_whitespace().next().unwrap_or("");
                if rest.starts_with("--") || !BASE_FROM.iter().any(|p| image.starts_with(p)) {
                    return refuse(format!(
                        "eval's Go base (Debian bookworm, Go from bookworm-backports) stands in only for {}",
                        BASE_FROM.join(", ")
                    ));
                }
                t.from = image.to_owned();
            }
            "WORKDIR" => {
                if rest.trim_end_matches('/') != "/app" {
                    return refuse("the workspace is /app; no other working directory".into());
                }
            }
            "COPY" => {
                let parts: Vec<&str> = rest.split_whitespace().collect();
                if parts
                    .iter()
                    .any(|p| p.starts_with("--") && !p.starts_with("--chown="))
                    || parts.len() < 2
                {
                    return refuse("only `COPY [--chown=…] SRC… /app[/DIR]/`".into());
                }
                let parts: Vec<&str> = parts.into_iter().filter(|p| !p.starts_with("--")).collect();
                let (dest, srcs) = match parts.split_last() {
                    Some((d, s)) => (*d, s),
                    None => return refuse("no destination".into()),
                };
                let sub = if dest.trim_end_matches('/') == "/app" {
                    String::new()
                } else if let Some(s) = dest.strip_prefix("/app/") {
                    let s = s.trim_end_matches('/');
                    if safe_relative(s).is_err() {
                        return refuse(format!("{dest:?} is not a plain path under /app"));
                    }
                    format!("{s}/")
                } else {
                    return refuse("files go into the workspace, /app; nowhere else".into());
                };
                for src in srcs {
                    let s = src.trim_start_matches("./").trim_end_matches('/');
                    if s != "." && (s.contains('*') || s.contains('?') || safe_relative(s).is_err())
                    {
                        return refuse(format!("{src:?} is not a plain path inside environment/"));
                    }
                    let mut found = false;
                    for f in files {
                        if f == "Dockerfile" {
                            continue;
                        }
                        let rel = if s == "." {
                            Some(f.as_str())
                        } else if f == s {
                            f.rsplit('/').next()
                        } else {
                            f.strip_prefix(&format!("{s}/"))
                        };
                        if let Some(rel) = rel {
                            found = true;
                            t.workspace.insert(format!("{sub}{rel}"), f.clone());
                        }
                    }
                    if !found {
                        return refuse(format!("environment/ has no {src:?}"));
                    }
                }
            }
            "ENV" => {
                for (k, v) in env_pairs(rest).ok_or((
                    line,
                    format!("`{instr}`: not `ENV KEY=VALUE…` or `ENV KEY VALUE`"),
                ))? {
                    t.env.push((k, v));
                }
            }
            "RUN" => {
                for cmd in rest.split("&&").map(str::trim) {
                    satisfied(cmd).map_err(|why| (line, format!("`{instr}`: `{cmd}` {why}")))?;
                }
                t.satisfied.push(instr.clone());
            }
            "CMD" | "ENTRYPOINT" | "LABEL" | "EXPOSE" => t.satisfied.push(instr.clone()),
            other => {
                return refuse(format!("{other} cannot be translated onto eval's Go base"));
            }
        }
    }
    if froms == 0 {
        return Err((0, "no FROM".into()));
    }
    Ok(t)
}

/// The Dockerfile's instructions with the line each starts on: comments and blank lines
/// dropped, `\` continuations joined.
pub(super) fn instructions(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if cur.is_none() && (l.is_empty() || l.starts_with('#')) {
            continue;
        }
        if cur.is_some() && l.starts_with('#') {
            continue;
        }
        let (body, more) = match l.strip_suffix('\\') {
            Some(b) => (b.trim_end(), true),
            None => (l, false),
        };
        let entry = cur.get_or_insert_with(|| (i + 1, String::new()));
        if !entry.1.is_empty() && !body.is_empty() {
            entry.1.push(' ');
        }
        entry.1.push_str(body);
        if !more && let Some(done) = cur.take() {
            out.push(done);
        }
    }
    out.extend(cur);
    out
}

/// `ENV K=V K2="V 2"` or `ENV K V…`.
fn env_pairs(rest: &str) -> Option<Vec<(String, String)>> {
    let valid = |k: &str| {
        !k.is_empty()
            && k.chars()
                .enumerate()
                .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
    };
    let unquote = |v: &str| {
        v.strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v)
            .to_owned()
    };
    let first = rest.split_whitespace().next()?;
    if !first.contains('=') {
        let (k, v) = rest.split_once(char::is_whitespace)?;
        return valid(k).then(|| vec![(k.to_owned(), unquote(v.trim()))]);
    }
    let mut out = Vec::new();
    let mut s = rest.trim();
    while !s.is_empty() {
        let (k, after) = s.split_once('=')?;
        if !valid(k) {
            return None;
        }
        let (v, next) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (q[..end].to_owned(), &q[end + 1..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        if v.contains(['$', '\\', '\'']) {
            return None;
        }
        out.push((k.to_owned(), v));
        s = next.trim_start();
    }
    Some(out)
}

/// One `&&` part of a `RUN` the base satisfies, or why not.
fn satisfied(cmd: &str) -> Result<(), String> {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    match words.as_slice() {
        ["apt-get", "update"] | ["apt-get", "-qq", "update"] => Ok(()),
        ["rm", "-rf", "/var/lib/apt/lists/*"] => Ok(()),
        ["apt-get", "install", rest @ ..] | ["apt-get", "-qq", "install", rest @ ..] => {
            let pkgs: Vec<&&str> = rest.iter().filter(|w| !w.starts_with('-')).collect();
            if let Some(flag) = rest.iter().find(|w| {
                w.starts_with('-')
                    && !matches!(
                        **w,
                        "-y" | "-yq" | "-qy" | "--yes" | "--no-install-recommends" | "-q" | "-qq"
                    )
            }) {
                return Err(format!("has the apt-get flag {flag}"));
            }
            match pkgs
                .iter()
                .find(|p| !BASE_PACKAGES.contains(&p.split('=').next().unwrap_or(p)))
            {
                Some(p) => Err(format!(
                    "installs {p}, which eval's Go base does not have (it has {})",
                    BASE_PACKAGES.join(", ")
                )),
                None if pkgs.is_empty() => Err("installs nothing".into()),
                None => Ok(()),
            }
        }
        ["mkdir", "-p", dirs @ ..] if !dirs.is_empty() => match dirs.iter().find(|d| {
            !(d.starts_with("/logs/") || **d == "/logs" || d.starts_with("/tests"))
                || d.contains("..")
        }) {
            Some(d) => Err(format!(
                "makes {d}; only /logs and /tests (which eval's grader makes) are understood"
            )),
            None => Ok(()),
        },
        _ => Err("cannot be run at import time, and eval's Go base does not do it".into()),
    }
}

/// The grader wrapper's `env` file: one `KEY=VALUE` per line (values checked by [`env_pairs`]
/// to hold no `$`, `\` or `'`).
pub(super) fn env_file(env: &[(String, String)]) -> String {
    env.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// The score stage (runs no agent code, sees no workspace); the run stage is [`GRADER_RUN`].
pub(super) const GRADER_COMMAND: &str =
    r#"["/bin/bash", "{hidden}/grade.sh", "score", "{hidden}", "{capture}", "{out}"]"#;
/// The run stage: the round's tests over the agent's code, with the round's hidden directory (its
/// tests, env, and for an oracle control the reference solutions) as its inputs and Harbor's
/// `/logs/verifier` as the capture.
pub(super) const GRADER_RUN: &str =
    r#"["/bin/bash", "{inputs}/grade.sh", "run", "{workspace}", "{inputs}", "{capture}"]"#;

fn task_toml(t: &EvoTask) -> String {
    let total: u64 = t.round_timeouts.iter().sum();
    let metrics = round_task_metrics();
    let mut s = format!(
        r#"# EvoCode-Bench task {id} ({n} rounds), imported by `eval import v04-evocode` from the Harbor
# multi-step layout (task directory tree sha256 {digest}). Round k's prompt is step k's
# instruction.md; its hidden files are step k's tests/ and eval's grade.sh, which runs them as
# Harbor does. Dockerfile FROM {from}: translated onto eval's Go base.
id = {qid}
suite = "{SUITE}"
timeout_seconds = {total}
description = {title}
after_failed_round = "continue"
metrics = [{metrics}]

[grader]
runtime = {rt}
command = {GRADER_COMMAND}
"#,
        id = t.id,
        n = t.prompts.len(),
        digest = t.digest,
        from = t.docker.from,
        qid = q(&t.id),
        title = q(&t.title),
        metrics = metrics.join(", "),
        rt = q(GRADER_RUNTIME_PATH),
    );
    for secs in &t.round_timeouts {
        s.push_str(&format!("\n[[rounds]]\ntimeout_seconds = {secs}\n"));
    }
    s
}

/// A Harbor-graded round task's metrics: the grader's `score.json` and the round metrics.
pub(super) fn round_task_metrics() -> Vec<String> {
    ["reward", "cases_passed", "cases_total"]
        .iter()
        .chain(eval_core::round_metrics::ROUND_METRICS)
        .map(|m| q(m))
        .collect()
}

fn grader_runtime_toml(image: &str) -> String {
    let tmpfs: Vec<String> = GRADER_TMPFS_EXEC.iter().map(|p| q(p)).collect();
    format!(
        r#"# The grader of imported EvoCode tasks (written by `eval import v04-evocode`): eval's Go base
# (runtimes/images/evocode-go/build.sh in the eval repository prints its id: Debian bookworm, Go
# from bookworm-backports, the packages the translated Dockerfiles may name). Each round's
# hidden/grade.sh grades in eval's two stages: its run stage copies the read-only workspace
# snapshot to /app and the round's tests to /tests and runs tests/test.sh as Harbor's verifier
# does, its stdout and reward in /logs/verifier (eval's capture); those paths and /usr/local/bin
# (where the tests build their binaries) are the writable, executable tmpfs below. Its score
# stage sees no workspace and reads the reward and the test output from eval's copy of the
# capture.
name = "v04-evocode-grader"
user = "65532:65532"
tmpfs_exec = [{tmpfs}]

[image]
id = {id}

[grader]
run = {GRADER_RUN}
run_inputs = "."
capture = "/logs/verifier"
capture_files = ["reward.txt", "test-stdout.txt", "test-stderr.txt", "tests-exit.txt"]
command = {GRADER_COMMAND}

[limits]
memory_mb = 4096
cpus = 1.0
pids = 512
tmpfs_mb = 2048
"#,
        tmpfs = tmpfs.join(", "),
        id = q(image),
    )
}

fn matrix_toml(name: &str, tasks: &[EvoTask]) -> String {
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let arms: Vec<&str> = ARMS.iter().map(|a| a.0).collect();
    super::common::V04Matrix {
        name,
        header: "# v0.4's EvoCode suite (written by `eval import v04-evocode`): its tasks, its three arms\n\
# (baseline first, gated candidate named), two repetitions, infrastructure slots first, v0.4's\n\
# order algorithm and seed string.\n",
        description: "v0.4's EvoCode suite on the DeepSeek Harness with the real Plan Lattice package",
        concurrency: 1,
        suite: SUITE,
        tasks: &ids,
        arms: &arms,
        baseline: BASELINE,
        candidate: CANDIDATE,
        repetitions: REPETITIONS,
        infra: ids.first().copied().unwrap_or_default(),
    }
    .toml()
}

fn protocol_toml(
    name: &str,
    tasks: &[EvoTask],
    package_sha: &str,
    archive_sha: Option<&str>,
) -> String {
    let mut arms = String::new();
    for (id, description, config) in &ARMS {
        arms.push_str(&format!(
            "\n[[arms]]\nid = {}\ndescription = {}\nruntime = {}\nprofile = {}\n",
            q(id),
            q(description),
            q(AGENT_RUNTIME_PATH),
            q(&format!("protocols/{name}/arms/{id}/cordis.patch.yml")),
        ));
        if !config.is_empty() {
            arms.push_str(&format!(
                "# {PACKAGE_V04}: sha256 {package_sha}\npackage = {}\n",
                q(&format!("protocols/{name}/arms/{id}/{PACKAGE_V04}"))
            ));
        }
        arms.push_str("[arms.settings]\n");
        if config.is_empty() {
            arms.push_str("plugin = \"none\"\n");
        } else {
            arms.push_str("plugin = \"plan-lattice\"\npluginVersion = \"0.4.0-rc.3\"\n");
        }
        for (k, v) in *config {
            arms.push_str(&format!("{k} = {}\n", q(v)));
        }
    }
    let mut digests: Vec<String> = tasks
        .iter()
        .map(|t| format!("#   {}: sha256 {}", t.id, t.digest))
        .collect();
    if let Some(sha) = archive_sha {
        let pin = if sha == archive::ARCHIVE_SHA256 {
            "the pinned EvoCode-Bench dataset archive"
        } else {
            "NOT the pinned dataset archive (imported with --allow-unpinned)"
        };
        digests.push(format!(
            "# extracted from a dataset archive, sha256 {sha}: {pin}"
        ));
    }
    let wall = tasks
        .iter()
        .map(|t| t.round_timeouts.iter().sum::<u64>())
        .max()
        .unwrap_or(3600);
    let pairs = tasks.len() * REPETITIONS;
    let text = PROTOCOL_TEMPLATE
        .replace("@NAME@", &q(name))
        .replace("@TASK_DIGESTS@", &digests.join("\n"))
        .replace("@N_TASKS@", &tasks.len().to_string())
        .replace("@REPETITIONS@", &REPETITIONS.to_string())
        .replace("@PAIRS@", &pairs.to_string())
        .replace("@WALL@", &wall.to_string())
        .replace("@ARMS@", &arms);
    if has_oracle(tasks) {
        with_controls(&text, SUITE)
    } else {
        text
    }
}

/// Every step of every task has a reference `solution/solve.sh`: the suite gets oracle and nop
/// control arms (`fn with_controls`).
fn has_oracle(tasks: &[EvoTask]) -> bool {
    !tasks.is_empty()
        && tasks.iter().all(|t| {
            !t.solutions.is_empty()
                && t.solutions
                    .iter()
                    .all(|s| s.iter().any(|(rel, _)| rel == "solve.sh"))
        })
}

/// The protocol text with `[suites.evocode.controls]` and the `grader_valid` integrity rule: the
/// oracle runs each round's reference `solve.sh` before that round's tests
/// (`run/controls.rs`, `oracle_round_hidden`) and must reach a mean reward of 1 (every round
/// passed); the nop, the starting workspace graded by every round, must stay below it.
pub(super) fn with_controls(protocol: &str, suite: &str) -> String {
    let controls = format!(
        "max_oracle_calls = 0\n\n# Control arms, graded by this suite's own grader once per round before any statistical slot\n# (no agent, no model call): the oracle runs the reference solve.sh of rounds 1..k before round k's\n# tests, the nop changes nothing, exploit:forge-reward's program writes the reward and passing case\n# lines itself. grader_valid: every oracle passes every round, every nop does not, the exploit\n# scores no more than the nop.\n[suites.{suite}.controls]\narms = [\"oracle\", \"nop\", \"exploit:forge-reward\"]\nmetric = \"rounds_mean_reward\"\npass_at_least = 1\n"
    );
    let rule = "statistic = \"accounting_complete\"\nop = \"is_true\"\n";
    protocol.replacen("max_oracle_calls = 0\n", &controls, 1).replacen(
        rule,
        &format!(
            "{rule}[[gates.rules]]\nid = \"grader_valid\"\nstatistic = \"grader_valid\"\nop = \"is_true\"\n"
        ),
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_go_dockerfile_translates_onto_the_base() {
        let d = "# syntax=docker/dockerfile:1\nFROM golang:1.22-bookworm\n\nWORKDIR /app\nRUN apt-get update && \\\n    apt-get install -y --no-install-recommends jq git \\\n    && rm -rf /var/lib/apt/lists/*\nCOPY app_init/ /app/\nCOPY fixtures /app/testdata/\nENV GOFLAGS=-mod=mod CGO_ENABLED=0\nENV GOTOOLCHAIN local\nRUN mkdir -p /logs/verifier\nCMD [\"bash\"]\n";
        let env = files(&[
            "Dockerfile",
            "app_init/go.mod",
            "app_init/cmd/x/main.go",
            "fixtures/a.json",
        ]);
        let t = translate(d, &env).unwrap();
        assert_eq!(t.from, "golang:1.22-bookworm");
        assert_eq!(
            t.workspace.into_iter().collect::<Vec<_>>(),
            vec![
                (
                    "cmd/x/main.go".to_owned(),
                    "app_init/cmd/x/main.go".to_owned()
                ),
                ("go.mod".to_owned(), "app_init/go.mod".to_owned()),
                ("testdata/a.json".to_owned(), "fixtures/a.json".to_owned()),
            ]
        );
        assert_eq!(
            t.env,
            vec![
                ("GOFLAGS".to_owned(), "-mod=mod".to_owned()),
                ("CGO_ENABLED".to_owned(), "0".to_owned()),
                ("GOTOOLCHAIN".to_owned(), "local".to_owned()),
            ]
        );
        assert_eq!(t.satisfied.len(), 3);
    }

    #[test]
    fn an_untranslatable_line_is_refused_by_its_number() {
        let env = files(&["Dockerfile", "app_init/go.mod"]);
        let cases = [
            ("FROM python:3.11\n", 1, "stands in only for"),
            (
                "FROM golang:1.22\nRUN pip install requests\n",
                2,
                "cannot be run at import time",
            ),
            (
                "FROM golang:1.22\nRUN apt-get update && \\\n  apt-get install -y redis-server\n",
                2,
                "installs redis-server",
            ),
            (
                "FROM golang:1.22\n\nADD https://x/y.tgz /app/\n",
                3,
                "ADD cannot be translated",
            ),
            (
                "FROM golang:1.22\nWORKDIR /src\n",
                2,
                "the workspace is /app",
            ),
            (
                "FROM golang:1.22\nCOPY app_init/ /opt/\n",
                2,
                "nowhere else",
            ),
            (
                "FROM golang:1.22\nCOPY missing/ /app/\n",
                2,
                "has no \"missing/\"",
            ),
            (
                "FROM golang:1.22\nCOPY ../etc /app/\n",
                2,
                "not a plain path",
            ),
            (
                "FROM golang:1.22 AS b\nFROM debian:bookworm\n",
                2,
                "multi-stage",
            ),
            ("FROM golang:1.22\nUSER root\n", 2, "USER cannot"),
            ("FROM golang:1.22\nENV A=$HOME\n", 2, "not `ENV"),
            (
                "FROM golang:1.22\nRUN mkdir -p /app/data\n",
                2,
                "makes /app/data",
            ),
            ("WORKDIR /app\n", 0, "no FROM"),
        ];
        for (text, line, why) in cases {
            let (l, msg) = translate(text, &env).expect_err(text);
            assert_eq!(l, line, "{text}: {msg}");
            assert!(msg.contains(why), "{text}: {msg}");
        }
    }
}
