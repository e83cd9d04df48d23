//! What every importer shares: v0.4's pinned inputs, the Harness runtimes and support files they
//! write, `ImportError`, reading an input without following links, writing files without
//! overwriting, and the one matrix writer. A leaf: it imports no importer, so the importers
//! (`simple.rs`, `evocode.rs`, `icae.rs`, `router.rs`, `v04.rs`, `harbor.rs`) import it and never
//! each other's parent (`core/tests/file_circles.rs`).

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The files of DIR the importer reads.
pub(super) const TASKS_FILE: &str = "simple-tasks.json";
pub(super) const GRADER_FILE: &str = "simple-grader.mjs";
pub(super) const SUMS_FILE: &str = "SHA256SUMS";
pub(super) const PACKAGE_V03: &str = "dsh-plan-lattice-0.3.0.tgz";
pub(super) const PACKAGE_V04: &str = "dsh-plan-lattice-0.4.0-rc.3.tgz";

/// v0.4's inputs as frozen at Plan Lattice `0414dfa`: the packages as its release `SHA256SUMS`
/// lists them, the task list and grader as `eval/v0.4/checksums.sha256` does. Compiled in, because
/// a `SHA256SUMS` read from the same directory as the packages vouches for nothing.
pub(super) const PINNED: &[(&str, &str)] = &[
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
pub(super) fn size_cap(file: &str) -> u64 {
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
pub(super) const AGENT_RUNTIME: &str = include_str!("../../../runtimes/dsh/poly.toml");
pub(super) const AGENT_IMAGE_PLACEHOLDER: &str = "@DSH_POLY_IMAGE_ID@";
/// The plain dsh runtime (Node only), for `eval import router`'s arms.
pub(super) const DSH_RUNTIME: &str = include_str!("../../../runtimes/dsh/runtime.toml");
pub(super) const DSH_IMAGE_PLACEHOLDER: &str = "@DSH_IMAGE_ID@";
/// Where an import writes [`AGENT_RUNTIME`] in the project (its support plugin beside it).
pub(super) const AGENT_RUNTIME_PATH: &str = "runtimes/dsh-poly/runtime.toml";
/// The toolchains of [`AGENT_RUNTIME`]'s image (name, version, command), each as
/// `runtimes/images/dsh-poly/build.sh` installs it: what a prompt may say is installed.
pub(super) const AGENT_TOOLCHAINS: [(&str, &str, &str); 4] = [
    ("Go", "1.22", "go"),
    ("Python", "3.11", "python3"),
    ("Node.js", "22.23.3", "node"),
    ("TypeScript", "5.9.3", "tsc"),
];

/// The toolchains of the agent runtime, as a prompt states them: "Go 1.22 (`go`), …".
pub(super) fn agent_toolchains() -> String {
    AGENT_TOOLCHAINS
        .iter()
        .map(|(name, version, command)| format!("{name} {version} (`{command}`)"))
        .collect::<Vec<_>>()
        .join(", ")
}
pub(super) const DSH_PROFILE_PATCH: &str = include_str!("../../../runtimes/dsh/profile.patch.yml");
/// eval's support plugin for the Harness (`runtimes/dsh/eval-support/`), written beside every dsh
/// runtime an import writes: the runtime's `[[arm.file]]` puts these same bytes into every arm's
/// layer, baseline included (the Harness's user questions reach `/_eval/clarify` through it).
/// Its session runner (`runner.js`) continues one Harness session across a multi-round attempt.
pub(super) const DSH_SUPPORT: [(&str, &str); 4] = [
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
pub(super) const DSH_SUPPORT_DIR: &str = "eval-support";

/// The support plugin's files for the runtime definition at `runtime` (project-relative).
pub(super) fn dsh_support_files(runtime: &str) -> Vec<(String, Vec<u8>)> {
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

/// Writes every file (project-relative), nothing when any target exists; the runtime
/// definitions several imports share — the dsh runtime, its support plugin and the importer's
/// grader runtime at `grader_runtime` — are left alone when they already hold exactly these bytes.
/// Returns how many files were written.
pub(super) fn write_all(files: &Files, grader_runtime: &str) -> Result<usize, ImportError> {
    let support = dsh_support_files(AGENT_RUNTIME_PATH);
    write_files(files, &|rel: &Path| {
        rel == Path::new(AGENT_RUNTIME_PATH)
            || rel == Path::new(grader_runtime)
            || support.iter().any(|(p, _)| rel == Path::new(p))
    })
}

/// Writes every file, nothing when any target exists, except the `shared` ones that already hold
/// exactly these bytes.
pub(super) fn write_files(
    files: &Files,
    shared: &dyn Fn(&Path) -> bool,
) -> Result<usize, ImportError> {
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
pub(super) fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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
pub(super) type Files = BTreeMap<PathBuf, Vec<u8>>;

/// `file` of DIR: opened without following a link and without blocking (a FIFO neither hangs
/// the import nor is read), accepted only as a regular file, read up to its size cap.
pub(super) fn read_input(from: &Path, file: &str) -> Result<Vec<u8>, ImportError> {
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
pub(super) fn check_pinned(
    from: &Path,
    file: &str,
    bytes: &[u8],
    allow: bool,
) -> Result<(), ImportError> {
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

/// A workspace path from the task list: relative, normalised, no `..`, nothing git would treat as
/// its own (`.git` is history the agent must not get).
pub(super) fn safe_relative(p: &str) -> Result<(), &'static str> {
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

pub(super) fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
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

/// `template` with each placeholder replaced.
pub(super) fn fill(template: &str, values: &[(&str, String)]) -> String {
    values
        .iter()
        .fold(template.to_owned(), |t, (k, v)| t.replace(k, v))
}

/// What an import wrote, for the command to print: the files written, the tasks and the arms
/// (ids, in the order the import names them; empty where the command prints neither).
#[derive(Debug, Default)]
pub struct Summary {
    pub written: usize,
    pub tasks: Vec<String>,
    pub arms: Vec<String>,
}

/// What `eval import v04-evocode` and `v04-icae` are asked to do (their flags, as given).
pub struct SuiteOptions {
    pub from: PathBuf,
    /// Plan Lattice's package of the two plugin arms.
    pub package: PathBuf,
    pub protocol: String,
    /// Empty: the importer's default (EvoCode: every task of the directory, or the archive's
    /// v0.4 three; ICAE: v0.4's six).
    pub tasks: Vec<String>,
    pub dsh_image: String,
    pub grader_image: String,
    pub allow_unpinned: bool,
}

/// A suite import's last step: its planned files written (`write_all`), and what was.
pub(super) fn write_suite(
    files: &Files,
    grader_runtime: &str,
    tasks: Vec<String>,
    arms: Vec<String>,
) -> Result<Summary, ImportError> {
    let written = write_all(files, grader_runtime)?;
    Ok(Summary {
        written,
        tasks,
        arms,
    })
}

/// A v0.4 Harness arm: id, description, the `plan-lattice` plugin's config rows (none: no plugin).
pub(super) type Arm = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// The files of a suite's Harness arms (EvoCode's and ICAE's): each arm's profile patch, the v0.4
/// package beside an arm that loads the plugin, and the agent runtime with its support files.
pub(super) fn harness_arm_files(
    pdir: &str,
    arms: &[Arm],
    package: &[u8],
    dsh_image: &str,
) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (arm, _, config) in arms {
        let adir = format!("{pdir}/arms/{arm}");
        out.push((
            format!("{adir}/cordis.patch.yml"),
            cordis_patch(config).into_bytes(),
        ));
        if !config.is_empty() {
            out.push((format!("{adir}/{PACKAGE_V04}"), package.to_vec()));
        }
    }
    out.push((
        AGENT_RUNTIME_PATH.to_owned(),
        AGENT_RUNTIME
            .replace(AGENT_IMAGE_PLACEHOLDER, dsh_image)
            .into_bytes(),
    ));
    out.extend(dsh_support_files(AGENT_RUNTIME_PATH));
    out
}

/// The Harness profile patch of an arm: the shared profile, then the plugin with `config`.
fn cordis_patch(config: &[(&str, &str)]) -> String {
    let mut s = DSH_PROFILE_PATCH.to_owned();
    if !s.ends_with('\n') {
        s.push('\n');
    }
    if !config.is_empty() {
        s.push_str("- id: plan-lattice\n  config:\n");
        for (k, v) in config {
            s.push_str(&format!("    {k}: {v}\n"));
        }
    }
    s
}
