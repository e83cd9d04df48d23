//! `eval import v04-simple --from DIR --protocol NAME`: writes v0.4's real `simple` suite into the
//! evaluation project in the current directory — its tasks, its grader (v0.4's own, in a grader
//! runtime of Node + Python + Go), the suite's three DeepSeek Harness arms with the real plugin
//! packages, the protocol and its matrix. DIR holds v0.4's files (see
//! `../shared/v04-upstream/README.md`); they are inputs, checked and copied into the user's
//! project, never into this repository. Nothing is written unless every input checks out and no
//! target exists.

mod evocode;
mod harbor;
mod harbor_reader;
mod icae;
mod router;
mod solutions;
mod v04;

use crate::cli::{ImportCommand, ImportV04SimpleArgs};
use crate::status::{CmdResult, Status};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The files of DIR the importer reads.
const TASKS_FILE: &str = "simple-tasks.json";
const GRADER_FILE: &str = "simple-grader.mjs";
const SUMS_FILE: &str = "SHA256SUMS";
const PACKAGE_V03: &str = "dsh-plan-lattice-0.3.0.tgz";
const PACKAGE_V04: &str = "dsh-plan-lattice-0.4.0-rc.3.tgz";

/// v0.4's inputs as frozen at Plan Lattice `0414dfa`: the packages as its release `SHA256SUMS`
/// lists them, the task list and grader as `eval/v0.4/checksums.sha256` does. Compiled in, because
/// a `SHA256SUMS` read from the same directory as the packages vouches for nothing.
const PINNED: &[(&str, &str)] = &[
    (
        PACKAGE_V03,
        "a2cda7e45fdac11865b05809b49434e0809142aebe3b97ce6b17cf630060163d",
    ),
    (
        PACKAGE_V04,
        "6e429cc3664bb1f602c0563a30e749a785d7d4f2555e3d05e6d1959c8426f2fe",
    ),
    (
        TASKS_FILE,
        "9e228f210f806e7c30014b85ef741f18f93fca87f06602252651e6746e837e7c",
    ),
    (
        GRADER_FILE,
        "179540c038adea0684c29fac67adb4768efd70fe04947bdb398e4844ae10b07d",
    ),
];

/// The most bytes the importer reads of each input (v0.4's are 4 KiB to 263 KiB): a link to
/// `/dev/zero` or a huge file is refused, never read into memory.
fn size_cap(file: &str) -> u64 {
    if file.ends_with(".tgz") {
        32 << 20
    } else if file.ends_with(".tar.zst") {
        // EvoCode-Bench's dataset archive is 70 MB (V04-SUITES.md).
        256 << 20
    } else {
        4 << 20
    }
}

/// The agent runtime every importer puts its arms on (`runtimes/dsh/poly.toml`: the Harness on
/// the image with every toolchain v0.4's tasks build with, `runtimes/images/dsh-poly/build.sh`), so
/// an arm keeps one runtime whatever its tasks' languages; the importer fills in the image id
/// (`--dsh-image`). The shared profile rows are `runtimes/dsh/`'s (each arm's plugin rows appended).
const AGENT_RUNTIME: &str = include_str!("../../../runtimes/dsh/poly.toml");
const AGENT_IMAGE_PLACEHOLDER: &str = "@DSH_POLY_IMAGE_ID@";
/// The plain dsh runtime (Node only), for `eval import router`'s arms.
const DSH_RUNTIME: &str = include_str!("../../../runtimes/dsh/runtime.toml");
const DSH_IMAGE_PLACEHOLDER: &str = "@DSH_IMAGE_ID@";
/// Where an import writes [`AGENT_RUNTIME`] in the project (its support plugin beside it).
const AGENT_RUNTIME_PATH: &str = "runtimes/dsh-poly/runtime.toml";
/// The toolchains of [`AGENT_RUNTIME`]'s image (name, version, command), each as
/// `runtimes/images/dsh-poly/build.sh` installs it: what a prompt may say is installed.
const AGENT_TOOLCHAINS: [(&str, &str, &str); 4] = [
    ("Go", "1.22", "go"),
    ("Python", "3.11", "python3"),
    ("Node.js", "22.23.3", "node"),
    ("TypeScript", "5.9.3", "tsc"),
];

/// The toolchains of the agent runtime, as a prompt states them: "Go 1.22 (`go`), …".
fn agent_toolchains() -> String {
    AGENT_TOOLCHAINS
        .iter()
        .map(|(name, version, command)| format!("{name} {version} (`{command}`)"))
        .collect::<Vec<_>>()
        .join(", ")
}
const DSH_PROFILE_PATCH: &str = include_str!("../../../runtimes/dsh/profile.patch.yml");
/// eval's support plugin for the Harness (`runtimes/dsh/eval-support/`), written beside every dsh
/// runtime an import writes: the runtime's `[[arm.file]]` puts these same bytes into every arm's
/// layer, baseline included (the Harness's user questions reach `/_eval/clarify` through it).
/// Its session runner (`runner.js`) continues one Harness session across a multi-round attempt.
const DSH_SUPPORT: [(&str, &str); 4] = [
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
/// The support plugin's directory beside a runtime definition (its `[[arm.file]]` `src`).
const DSH_SUPPORT_DIR: &str = "eval-support";

/// The support plugin's files for the runtime definition at `runtime` (project-relative).
fn dsh_support_files(runtime: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(runtime)
        .parent()
        .unwrap_or(Path::new(""))
        .join(DSH_SUPPORT_DIR);
    DSH_SUPPORT
        .iter()
        .map(|(name, text)| {
            (
                dir.join(name).to_string_lossy().into_owned(),
                text.as_bytes().to_vec(),
            )
        })
        .collect()
}
/// eval's wrapper around v0.4's grader, and the one helper of v0.4's `lib/canonical.mjs` it needs.
const GRADE_MJS: &str = include_str!("import/grade.mjs");
const CANONICAL_MJS: &str = include_str!("import/canonical.mjs");
const HARDENED_MJS: &str = include_str!("import/hardened.mjs");
/// The protocol, with `@…@` placeholders (`protocol_toml`).
const PROTOCOL_TEMPLATE: &str = include_str!("import/protocol.toml.in");

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

/// What keeps `eval import v04-simple` from writing; each kind's exit status is decided in
/// `exit::import_status`. The messages name the file, field or flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A reference solution of `--solutions DIR` that is missing, unreadable or not plain files.
    #[error("{path}: {why}")]
    Solution { path: PathBuf, why: String },
    #[error("--protocol {0:?}: a protocol name is letters, digits, `-`, `_` and `.` (not first)")]
    ProtocolName(String),
    /// `--dsh-image` or `--grader-image` is not `sha256:<64 hex>`.
    #[error("{flag} {id:?}: not an image id (sha256:<64 hex>, as the image's build.sh prints it)")]
    ImageId { flag: &'static str, id: String },
    /// `--router-identity` is not `sha256:<64 hex>`.
    #[error(
        "--router-identity {0:?}: not a frozen identity (sha256:<64 hex>, as `eval freeze` prints it)"
    )]
    RouterIdentity(String),
    /// `--public-key` is not a public key (a pasted private key is named as such, never echoed).
    #[error("--public-key: {0}")]
    PublicKey(String),
    /// `--upstream` or `--tls-spki-sha256` is malformed (`field` is the protocol field).
    #[error("--upstream: {field}: {message}")]
    Upstream {
        field: &'static str,
        message: String,
    },
    /// A file of `--from DIR` that cannot be read.
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An input that is not a regular file (a link, a FIFO, a device, a directory): opened
    /// without following links and without blocking, then refused.
    #[error("{path}: not a regular file ({what}); the importer reads only regular files")]
    NotRegular { path: PathBuf, what: String },
    /// An input larger than the importer reads.
    #[error("{path}: larger than {cap} bytes; not one of v0.4's inputs")]
    TooLarge { path: PathBuf, cap: u64 },
    /// An input whose bytes are not v0.4's, as compiled into eval.
    #[error(
        "{path}: sha256 {got}, but v0.4 (Plan Lattice 0414dfa) has {want}; pass --allow-unpinned to import other bytes"
    )]
    Unpinned {
        path: PathBuf,
        got: String,
        want: &'static str,
    },
    #[error("{0}: not UTF-8")]
    SumsNotUtf8(PathBuf),
    #[error("{file}: line {line}: not `<sha256 hex>  <file>`")]
    SumsLine { file: PathBuf, line: usize },
    #[error("{package}: not listed in {sums}")]
    NotListed { package: PathBuf, sums: PathBuf },
    /// A plugin package whose bytes are not the ones `SHA256SUMS` pins.
    #[error("{package}: sha256 {got}, but {sums} says {want}")]
    DigestMismatch {
        package: PathBuf,
        got: String,
        sums: PathBuf,
        want: String,
    },
    /// The task list is not JSON of the expected shape (serde names the line and column).
    #[error("{file}: {source}")]
    TasksJson {
        file: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{file}: schemaVersion {version} (this importer reads 1)")]
    SchemaVersion { file: PathBuf, version: u64 },
    /// One task lacks a field or has one of the wrong type.
    #[error("{file}: tasks[{index}]: {source}")]
    TaskJson {
        file: PathBuf,
        index: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{file}: task {id:?}: not a plain id (letters, digits, `-`, `_`, `.`), or listed twice"
    )]
    TaskIdNotPlain { file: PathBuf, id: String },
    #[error(
        "{file}: task {id:?}: not a plain id (letters, digits, `-`, `_`, `.`), or listed twice"
    )]
    TaskIdTwice { file: PathBuf, id: String },
    #[error("{file}: task {id:?}: field {field} is empty")]
    EmptyField {
        file: PathBuf,
        id: String,
        field: &'static str,
    },
    /// An `initialFiles` key that would write outside the task's workspace or into its `.git`.
    #[error("{file}: task {id:?}: initialFiles key {key:?} {why}")]
    UnsafePath {
        file: PathBuf,
        id: String,
        key: String,
        why: &'static str,
    },
    #[error("{file}: task {id:?}: initialFiles key {key:?} lies beneath the file {parent:?}")]
    BeneathFile {
        file: PathBuf,
        id: String,
        key: String,
        parent: String,
    },
    #[error("{0}: no tasks")]
    NoTasks(PathBuf),
    #[error("--tasks: unknown task {id:?} (known: {})", .known.join(", "))]
    UnknownTask { id: String, known: Vec<String> },
    #[error("--tasks: {0:?} listed twice")]
    TaskTwice(String),
    /// eval was built with a dsh runtime definition that has no place for the image id.
    #[error(
        "a runtime definition built into eval (runtimes/dsh/poly.toml or runtime.toml) lacks its image placeholder ({AGENT_IMAGE_PLACEHOLDER} or {DSH_IMAGE_PLACEHOLDER})"
    )]
    BuiltinRuntime,
    #[error("task {id}: {source}")]
    EncodeTask {
        id: String,
        #[source]
        source: serde_json::Error,
    },
    /// A router corpus file whose content is not Plan Lattice's layout (the message names the
    /// line or id at fault).
    #[error("{file}: {why}")]
    Corpus { file: PathBuf, why: String },
    /// A task directory of `v04-evocode --from DIR` that is not in the Harbor multi-step layout,
    /// or a line of its `environment/Dockerfile` that cannot be translated (the message names the
    /// file, the field or the line).
    #[error("{path}: {why}")]
    Harbor { path: PathBuf, why: String },
    /// EvoCode-Bench's dataset archive whose bytes are not the pinned ones.
    #[error(
        "{path}: sha256 {got}, but EvoCode-Bench's dataset archive (dataset commit 9fcae3e, archives/evocodebench_wotraj.tar.zst) has {want}; pass --allow-unpinned to import other bytes (their digest is recorded)"
    )]
    ArchiveUnpinned {
        path: PathBuf,
        got: String,
        want: &'static str,
    },
    /// EvoCode tasks read from directories: no pin exists for their bytes.
    #[error(
        "{0}: EvoCode-Bench pins only its dataset archive, not extracted task directories; pass --allow-unpinned to import them (their tree digests are recorded)"
    )]
    TasksUnpinned(PathBuf),
    /// An input of `v04-icae --from DIR` that is not in ICAE-EVAL's layout (the message names
    /// the file and the field or entry at fault).
    #[error("{path}: {why}")]
    Icae { path: PathBuf, why: String },
    /// ICAE read from extracted directories: v0.4 pinned only the Zenodo archives.
    #[error(
        "{0}: no rcb_tests_repos.tar.gz and icae_prd_bundle.tar.gz to check against v0.4's pins (Plan Lattice 0414dfa benchmark-lock.json); pass --allow-unpinned to import the extracted directories (their tree digests are recorded)"
    )]
    IcaeUnpinned(PathBuf),
    /// `--image` that is not `NAME=ID` with a NAME `eval import v04` uses.
    #[error("--image {0:?}: not NAME=sha256:… with NAME one of {1}")]
    ImageFlag(String, String),
    /// A base image with neither `--image` nor a build record of its build script.
    #[error(
        "image {name:?}: no build record in {dir} (and no --image {name}=sha256:…); run {script} first"
    )]
    MissingImage {
        name: &'static str,
        script: &'static str,
        dir: PathBuf,
    },
    /// The suites' imports do not compose into one protocol (the message names the file or table).
    #[error("{0}")]
    Compose(String),
    /// A target already exists (and is not a shared runtime with exactly these bytes).
    #[error(
        "{0}: exists; `eval import` never overwrites (choose another --protocol, or move it away)"
    )]
    Exists(PathBuf),
    /// A target whose existence cannot be checked.
    #[error("{path}: {source}")]
    Target {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Creating a target or its directory failed.
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

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

pub fn run(cmd: ImportCommand) -> CmdResult {
    match cmd {
        ImportCommand::V04Simple(args) => v04_simple(&args),
        ImportCommand::V04Router(args) => router::run(&args),
        ImportCommand::V04Evocode(args) => evocode::run(&args),
        ImportCommand::V04Icae(args) => icae::run(&args),
        ImportCommand::V04(args) => v04::run(&args),
        ImportCommand::Harbor(args) => harbor::run(&args),
    }
}

fn v04_simple(args: &ImportV04SimpleArgs) -> CmdResult {
    let (files, tasks) = plan(args)?;
    let written = write_all(&files, GRADER_RUNTIME_PATH)?;
    println!(
        "imported v0.4's simple suite as protocol {} ({} files written): tasks {}, arms {}",
        args.protocol,
        written,
        tasks.join(", "),
        ARMS.map(|a| a.id).join(", ")
    );
    println!("next:");
    println!("  eval plan --matrix {}", args.protocol);
    println!("  eval freeze --protocol {}", args.protocol);
    println!(
        "  eval run --matrix {} --upstream URL --api-key-env VAR",
        args.protocol
    );
    Ok(Status::Ok)
}

/// Writes every file (project-relative), nothing when any target exists; the runtime
/// definitions several imports share — the dsh runtime, its support plugin and the importer's
/// grader runtime at `grader_runtime` — are left alone when they already hold exactly these bytes.
/// Returns how many files were written.
fn write_all(files: &Files, grader_runtime: &str) -> Result<usize, ImportError> {
    let support = dsh_support_files(AGENT_RUNTIME_PATH);
    write_files(files, &|rel: &Path| {
        rel == Path::new(AGENT_RUNTIME_PATH)
            || rel == Path::new(grader_runtime)
            || support.iter().any(|(p, _)| rel == Path::new(p))
    })
}

/// Writes every file, nothing when any target exists, except the `shared` ones that already hold
/// exactly these bytes.
fn write_files(files: &Files, shared: &dyn Fn(&Path) -> bool) -> Result<usize, ImportError> {
    let mut todo = Vec::new();
    for (rel, bytes) in files {
        match std::fs::symlink_metadata(rel) {
            Ok(_) if shared(rel) && std::fs::read(rel).ok().as_deref() == Some(bytes) => {}
            Ok(_) => return Err(ImportError::Exists(rel.clone())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => todo.push((rel, bytes)),
            Err(source) => {
                return Err(ImportError::Target {
                    path: rel.clone(),
                    source,
                });
            }
        }
    }
    for (rel, bytes) in &todo {
        let fail = |source| ImportError::Write {
            path: rel.to_path_buf(),
            source,
        };
        if let Some(parent) = rel.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        write_new(rel, bytes).map_err(fail)?;
    }
    Ok(todo.len())
}

/// Creates `path`, failing if it appeared since the check.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Every file the import writes (project-relative path → bytes), from checked inputs, and the
/// imported task ids.
type Files = BTreeMap<PathBuf, Vec<u8>>;
fn plan(args: &ImportV04SimpleArgs) -> Result<(Files, Vec<String>), ImportError> {
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
    if args.grading == crate::cli::Grading::Hardened {
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

/// `file` of DIR: opened without following a link and without blocking (a FIFO neither hangs
/// the import nor is read), accepted only as a regular file, read up to its size cap.
fn read_input(from: &Path, file: &str) -> Result<Vec<u8>, ImportError> {
    use std::io::Read as _;
    use std::os::unix::fs::FileTypeExt as _;
    let path = from.join(file);
    let read_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Read { path, source }
    };
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        &path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        if e == rustix::io::Errno::LOOP {
            ImportError::NotRegular {
                path: path.clone(),
                what: "a symbolic link".into(),
            }
        } else {
            ImportError::Read {
                path: path.clone(),
                source: e.into(),
            }
        }
    })?;
    let f = std::fs::File::from(fd);
    let meta = f.metadata().map_err(read_err(&path))?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let what = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_dir() {
            "a directory"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(ImportError::NotRegular {
            path,
            what: what.into(),
        });
    }
    let cap = size_cap(file);
    if meta.len() > cap {
        return Err(ImportError::TooLarge { path, cap });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // Bounded even if the file grows while it is read.
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err(&path))?;
    if bytes.len() as u64 > cap {
        return Err(ImportError::TooLarge { path, cap });
    }
    Ok(bytes)
}

/// Refuses `bytes` of `file` unless they are v0.4's (or `allow` says any bytes may be imported).
fn check_pinned(from: &Path, file: &str, bytes: &[u8], allow: bool) -> Result<(), ImportError> {
    let Some((_, want)) = PINNED.iter().find(|(f, _)| *f == file) else {
        return Ok(());
    };
    let got = hex::encode(Sha256::digest(bytes));
    if allow || got == *want {
        return Ok(());
    }
    Err(ImportError::Unpinned {
        path: from.join(file),
        got,
        want,
    })
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

/// A workspace path from the task list: relative, normalised, no `..`, nothing git would treat as
/// its own (`.git` is history the agent must not get).
fn safe_relative(p: &str) -> Result<(), &'static str> {
    if p.is_empty() {
        return Err("is empty");
    }
    if p.starts_with('/') {
        return Err("is absolute");
    }
    if p.contains('\0') || p.contains('\\') {
        return Err("holds a NUL byte or a backslash");
    }
    for part in p.split('/') {
        match part {
            "" | "." => return Err("is not normalised (an empty or `.` component)"),
            ".." => return Err("contains `..`"),
            ".git" => return Err("names a .git directory"),
            _ => {}
        }
    }
    Ok(())
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

fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
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

/// A matrix of one v0.4 suite as the importers write it: the suite's tasks and arms, v0.4's
/// order algorithm and seed string, and infrastructure slots for the baseline and the candidate
/// on one task. One writer, so every imported suite's matrix has the same shape.
pub(super) struct V04Matrix<'a> {
    /// The matrix's (and its protocol's) name.
    pub name: &'a str,
    /// Comment lines heading the file, each ending in a newline.
    pub header: &'a str,
    pub description: &'a str,
    pub concurrency: u32,
    pub suite: &'a str,
    pub tasks: &'a [&'a str],
    pub arms: &'a [&'a str],
    pub baseline: &'a str,
    pub candidate: &'a str,
    pub repetitions: usize,
    /// The task the infrastructure slots run.
    pub infra: &'a str,
}

impl V04Matrix<'_> {
    pub(super) fn toml(&self) -> String {
        let list: Vec<String> = self.tasks.iter().map(|t| format!("  {},", q(t))).collect();
        format!(
            r#"{header}name = {qn}
protocol = {qn}
description = {desc}
concurrency = {conc}

[order]
algorithm = "mulberry32-fisher-yates"
seed_string = "plan-lattice-v0.4-blind-90-2026-08-15"

[[suites]]
id = {suite}
task_root = {root}
tasks = [
{list}
]
arms = [{arms}]
baseline = {base}
candidate = {cand}
repetitions = {reps}

[[infra]]
suite = {suite}
task = {infra}
arm = {base}

[[infra]]
suite = {suite}
task = {infra}
arm = {cand}
"#,
            header = self.header,
            qn = q(self.name),
            desc = q(self.description),
            conc = self.concurrency,
            suite = q(self.suite),
            root = q(&format!("protocols/{}/tasks/{}", self.name, self.suite)),
            list = list.join("\n"),
            arms = self
                .arms
                .iter()
                .map(|a| q(a))
                .collect::<Vec<_>>()
                .join(", "),
            base = q(self.baseline),
            cand = q(self.candidate),
            reps = self.repetitions,
            infra = q(self.infra),
        )
    }
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
fn custody_toml(args: &ImportV04SimpleArgs) -> Result<String, ImportError> {
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

/// `template` with each placeholder replaced.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    values
        .iter()
        .fold(template.to_owned(), |t, (k, v)| t.replace(k, v))
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
