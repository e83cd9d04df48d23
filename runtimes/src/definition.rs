//! Runtime definitions: `runtimes/<name>/runtime.toml`.
//!
//! A definition says which image an arm's containers run (a tag or a pinned content digest,
//! and how to build it locally from a root filesystem), the harness command, the environment
//! the harness may see (an allow-list of literal values; the key is never among them), the
//! attested paths, the resource limits, the user and the extra tmpfs paths.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Fixed paths inside every container; the policy mounts exactly these.
pub mod paths {
    /// The task's workspace (the agent's working copy; what the grader scores).
    pub const WORKSPACE: &str = "/workspace";
    /// The task's prompt file, read-only.
    pub const PROMPT: &str = "/task/prompt.md";
    /// The shim binary, bind-mounted read-only into every agent container.
    pub const SHIM: &str = "/.eval/eval-shim";
    /// The directory holding the attempt's proxy socket (the container's only way out).
    pub const SOCKET_DIR: &str = "/run/eval";
    /// The task's grader-only files; mounted into grader containers, never into an agent's.
    pub const HIDDEN: &str = "/hidden";
    /// The grader's output directory (it writes `score.json` there); the only writable mount of a
    /// grader.
    pub const OUT: &str = "/out";
    /// The harness's own bookkeeping (its transcript), outside the workspace: a fresh, writable,
    /// attempt-private directory, mounted only when the definition says
    /// `metrics_root = "state"`. Never seen by the grader, never archived as the workspace.
    pub const STATE: &str = "/eval-state";
    /// The attempt's oracle record (`record.json`), read-only, in the grader container of a task
    /// that lets its grader read it (`[oracle] grader_reads_record`); never in an agent's.
    pub const ORACLE: &str = "/oracle";
    /// A two-stage grader's public inputs (`[grader] run_inputs` of the task's hidden files),
    /// read-only, in its run stage only.
    pub const INPUTS: &str = "/inputs";
    /// A two-stage grader's capture: written by its run stage (at `[grader] capture`, default
    /// this path), read back by eval, and handed to its score stage read-only here.
    pub const CAPTURE: &str = "/capture";
}

/// A parsed `runtime.toml`: everything about an arm's containers that is not the policy's fixed
/// part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeDef {
    /// The definition's name: the built image's `eval.runtime` label, and named in messages.
    pub name: String,
    /// Which image the containers run, by content or by name.
    pub image: ImageRef,
    /// How to build the image locally instead of pulling it; absent: the image must exist or be
    /// loaded from `image.archive`.
    #[serde(default)]
    pub build: Option<BuildRecipe>,
    /// The agent container's command.
    #[serde(default)]
    pub harness: Harness,
    /// The grader container's command, for definitions that serve as a task's grader runtime.
    #[serde(default)]
    pub grader: Option<GraderCmd>,
    /// Environment: name → literal value (variables allowed), over the image's own `Env`
    /// (per variable; `PATH` included). Nothing else is set.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Paths the shim hashes before the harness starts (the evidence of what ran).
    #[serde(default)]
    pub attest: Attest,
    /// Resource limits of every container of this definition.
    #[serde(default)]
    pub limits: Limits,
    /// Numeric `uid:gid`; never 0. Absent: the image's `User` when it is a numeric, non-root
    /// `uid:gid`, else [`DEFAULT_USER`] (`policy::effective_user`).
    #[serde(default)]
    pub user: Option<String>,
    /// Where the task's workspace is mounted in this definition's containers (agent and
    /// grader alike), for tasks that expect it elsewhere (EvoCode-Bench's `/app`); `{workspace}`
    /// renders to it. Absent: [`paths::WORKSPACE`]. Serialised only when set, so the frozen form
    /// of every definition written before the field existed stays byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The harness's working directory. Absent: the declared `workspace`, else the image's
    /// `WorkingDir`, else `/workspace`.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Extra tmpfs mount points besides `/tmp` (a harness's `$HOME`, caches), `noexec`.
    #[serde(default)]
    pub tmpfs: Vec<String>,
    /// tmpfs mount points where files may be executed (a compiler's or package manager's cache);
    /// disjoint from `tmpfs`.
    #[serde(default)]
    pub tmpfs_exec: Vec<String>,
    /// Port the shim's relay listens on at 127.0.0.1 inside the container.
    #[serde(default = "default_port")]
    pub relay_port: u16,
    /// Where the arm's files go inside the image.
    #[serde(default)]
    pub arm: ArmPaths,
    /// The harness's own metrics file, relative to the workspace (accounting cross-check).
    #[serde(default)]
    pub metrics_path: Option<String>,
    /// How the file at `metrics_path` is read. Serialised only when not the default, so the
    /// frozen form of every definition written before the field existed stays byte for byte.
    #[serde(default, skip_serializing_if = "MetricsFormat::is_default")]
    pub metrics_format: MetricsFormat,
    /// What `metrics_path` is relative to: the workspace (default), or the attempt's state
    /// directory at [`paths::STATE`], outside the model's working tree. Under `state`, a
    /// component of `metrics_path` may be a prefix followed by `*` that must match exactly one
    /// entry (the controller finds the file at that fixed depth itself). Serialised only when not
    /// the default, like `metrics_format`.
    #[serde(default, skip_serializing_if = "MetricsRoot::is_default")]
    pub metrics_root: MetricsRoot,
    /// Every session file of an attempt, for a harness that writes child sessions beside its
    /// root one (the DeepSeek Harness's `subagent`, `subagent_fork`, `workflow`, `ralph`): a
    /// pattern like `metrics_path`'s whose `*` components match every entry, one of whose matches
    /// is the root `metrics_path` finds. Only under `metrics_root = "state"` with
    /// `metrics_format = "dsh-session-jsonl"`. The files are read together (bounded by the
    /// transcript cap), stored root first, and their usage summed for the cross-check.
    /// Serialised only when set, so earlier frozen definitions keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_sessions: Option<String>,
}

/// Whether `path` (plain components) is one `pattern` (of `metrics_path` or `metrics_sessions`)
/// names: as many components, each equal to its pattern component or, for `prefix*`, starting
/// with the prefix.
pub fn metrics_pattern_matches(pattern: &str, path: &str) -> bool {
    let (pat, got): (Vec<&str>, Vec<&str>) =
        (pattern.split('/').collect(), path.split('/').collect());
    pat.len() == got.len()
        && pat
            .iter()
            .zip(&got)
            .all(|(p, g)| match p.strip_suffix('*') {
                Some(prefix) => g.starts_with(prefix),
                None => p == g,
            })
}

/// Where the harness's metrics file lives (`metrics_root`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricsRoot {
    /// Relative to the workspace (removed from it before grading and archiving).
    #[default]
    Workspace,
    /// Relative to the attempt's state directory, mounted at [`paths::STATE`].
    State,
}

impl MetricsRoot {
    /// True for the default (then the field is not serialised).
    pub fn is_default(&self) -> bool {
        *self == MetricsRoot::Workspace
    }
}

/// The format of the harness's own account at `metrics_path`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricsFormat {
    /// eval's own JSON object: `{"model_turns": N, "total_tokens": N}`.
    #[default]
    EvalJson,
    /// The DeepSeek Harness's session transcript as plain JSONL (its `session-persistence-jsonl`
    /// with `compression: none`): one usage chunk per model call it made for the agent loop.
    DshSessionJsonl,
}

impl MetricsFormat {
    /// True for the default format (then the field is not serialised).
    pub fn is_default(&self) -> bool {
        *self == MetricsFormat::EvalJson
    }

    /// The name a definition writes (`eval-json`, `dsh-session-jsonl`).
    pub fn as_str(&self) -> &'static str {
        match self {
            MetricsFormat::EvalJson => "eval-json",
            MetricsFormat::DshSessionJsonl => "dsh-session-jsonl",
        }
    }
}

/// `[image]`: the image an arm's containers are made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageRef {
    /// The base image by content (`sha256:<64 hex>` image id). Without `[build]` the arm's image
    /// is this base plus one thin layer; with `[build]`, the id the recipe must build. `digest`
    /// is its old name, still accepted.
    #[serde(default, alias = "digest")]
    pub id: Option<String>,
    /// Informational `name:tag`, and where freeze looks when `id` is not given; with `[build]`,
    /// the repository name of the built image's tag.
    #[serde(default)]
    pub reference: String,
    /// A `docker save` archive of the base, relative to the definition's directory: freeze reads
    /// its config digest when the engine lacks the image, `eval run` loads it.
    #[serde(default)]
    pub archive: Option<String>,
}

/// `[build]`: a local recipe producing the image from a root filesystem, without an engine-side
/// build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildRecipe {
    /// Copy the host's static `/bin/busybox` to `/bin/busybox` with a few applet links.
    #[serde(default)]
    pub busybox: bool,
    /// Names of this workspace's static binaries to install in `/usr/local/bin/`.
    #[serde(default)]
    pub static_binaries: Vec<String>,
    /// Further files copied in (`[[build.file]]`).
    #[serde(default, rename = "file")]
    pub files: Vec<BuildFile>,
}

/// One file a `[build]` recipe copies into the image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildFile {
    /// Relative to the definition's directory.
    pub src: String,
    /// Absolute path in the image.
    pub dest: String,
    /// Forces the file executable (mode 0755); otherwise the source file's execute bit is kept.
    #[serde(default)]
    pub executable: bool,
}

/// `[harness]`: what the agent container runs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Harness {
    /// Argument vector; `{prompt}` (the prompt file's path), `{prompt_text}` (the prompt's
    /// text), `{workspace}`, `{base_url}`, `{profile}`, `{candidate}`. Absent: the image's
    /// `Entrypoint` followed by its `Cmd`, as they are.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// The argument vector that continues the same session in a multi-round attempt's rounds
    /// after the first (docs/rounds.md): the same variables as `command` but `{prompt_text}`;
    /// `{prompt}` then holds the round's prompt, written when the round begins. Absent: the
    /// runtime cannot run a multi-round task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_command: Option<Vec<String>>,
}

/// `[grader]`: what a grader container runs.
///
/// With `run` absent, one container (the one-stage grader): `command` sees the workspace and the
/// hidden files together. With `run`, two (the two-stage grader, docs/grading.md "Grading in two
/// stages"): `run` may run agent code and sees the workspace, the public inputs and its capture
/// directory only; `command` (the score stage) runs no agent code, sees no workspace, and gets
/// the hidden files, the run stage's capture read-only and `/out`. The new fields are serialised
/// only when set, so the frozen form of every one-stage definition stays byte for byte.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraderCmd {
    /// Argument vector; `{workspace}`, `{hidden}`, `{out}` (one stage); in a two-stage grader the
    /// score stage's: `{hidden}`, `{capture}`, `{out}`, never `{workspace}`.
    pub command: Vec<String>,
    /// The run stage's argument vector: `{workspace}`, `{inputs}`, `{capture}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Vec<String>>,
    /// The directory of the task's hidden files (relative; `.` for all of them) the run stage
    /// gets read-only at [`paths::INPUTS`]: what the suite declares public to code under test.
    /// Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_inputs: Option<String>,
    /// Where the run stage's capture directory is mounted (default [`paths::CAPTURE`]), e.g.
    /// Harbor's `/logs/verifier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<String>,
    /// Files eval creates in the capture before the run stage (owned by root, mode 0666, in a
    /// root-owned sticky directory): the stage's user can write their content but not replace,
    /// remove, re-own or make them read-only, so what the verifier writes last is what is read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capture_files: Vec<String>,
}

impl GraderCmd {
    /// Whether this grader runs in two stages.
    pub fn two_stage(&self) -> bool {
        self.run.is_some()
    }

    /// The run stage's capture mount point.
    pub fn capture_path(&self) -> &str {
        self.capture.as_deref().unwrap_or(paths::CAPTURE)
    }

    /// The load checks of the two-stage fields (`Err((field, detail))`).
    fn check(&self) -> Result<(), (&'static str, String)> {
        let Some(run) = &self.run else {
            if self.run_inputs.is_some() || self.capture.is_some() || !self.capture_files.is_empty()
            {
                return Err((
                    "grader.run",
                    "run_inputs, capture and capture_files need a run stage".into(),
                ));
            }
            return Ok(());
        };
        if run.is_empty() {
            return Err(("grader.run", "must not be empty".into()));
        }
        // The score stage sees the answers: it must not see the workspace, nor name what only
        // the run stage has.
        for v in ["{workspace}", "{inputs}", "{prompt"] {
            if self.command.iter().any(|a| a.contains(v)) {
                return Err((
                    "grader.command",
                    format!(
                        "the score stage of a two-stage grader runs no agent code and sees no workspace: {v} is not available to it"
                    ),
                ));
            }
        }
        for v in ["{hidden}", "{out}", "{oracle_record}", "{prompt"] {
            if run.iter().any(|a| a.contains(v)) {
                return Err((
                    "grader.run",
                    format!(
                        "the run stage sees no answers and writes no score: {v} is not available to it"
                    ),
                ));
            }
        }
        if let Some(i) = &self.run_inputs {
            let ok = i == "."
                || (!i.is_empty()
                    && !i.starts_with('/')
                    && i.split('/').all(|c| !c.is_empty() && c != "." && c != ".."));
            if !ok {
                return Err((
                    "grader.run_inputs",
                    format!("{i:?}: a relative path inside the hidden files, or \".\""),
                ));
            }
        }
        let cap = self.capture_path();
        let reserved = [
            paths::HIDDEN,
            paths::OUT,
            paths::INPUTS,
            paths::ORACLE,
            "/tmp",
        ];
        if !cap.starts_with('/')
            || cap
                .split('/')
                .skip(1)
                .any(|c| c.is_empty() || c == "." || c == "..")
            || reserved.contains(&cap)
        {
            return Err((
                "grader.capture",
                format!("{cap:?}: an absolute, normal path other than the fixed mounts"),
            ));
        }
        for f in &self.capture_files {
            if f.is_empty() || f.contains('/') || f == "." || f == ".." {
                return Err((
                    "grader.capture_files",
                    format!("{f:?}: a file name, no directory"),
                ));
            }
        }
        Ok(())
    }
}

/// `[attest]`: the paths whose digests the shim reports before the harness starts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attest {
    /// Absolute paths in the container (variables allowed), hashed by the shim before start.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// `[limits]`: resource limits of each container (defaults: 512 MB, 1 CPU, 256 pids, 64 MB tmpfs;
/// an attempt's own filesystem of 1024 MiB and 100,000 inodes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Memory limit in MiB, without swap.
    pub memory_mb: u64,
    /// CPU limit in cores (fractions allowed).
    pub cpus: f64,
    /// Maximum number of processes and threads.
    pub pids: u64,
    /// Size limit of each tmpfs mount in MiB.
    pub tmpfs_mb: u64,
    /// Size in MiB of the attempt's own filesystem, which holds the agent's workspace and its
    /// state directory: preallocated on the host before the attempt, so what the agent writes
    /// can never take the host's space and a full filesystem is the agent's own. Default
    /// [`DEFAULT_WORKSPACE_MB`].
    #[serde(default = "default_workspace_mb")]
    pub workspace_mb: u64,
    /// Inodes of the attempt's own filesystem (files, directories, links the agent may make).
    /// Default [`DEFAULT_WORKSPACE_INODES`].
    #[serde(default = "default_workspace_inodes")]
    pub workspace_inodes: u64,
}

/// The default `[limits] workspace_mb`.
pub const DEFAULT_WORKSPACE_MB: u64 = 1024;
/// The default `[limits] workspace_inodes`.
pub const DEFAULT_WORKSPACE_INODES: u64 = 100_000;
/// The largest `[limits] workspace_mb` (1 TiB): the image is preallocated.
pub const MAX_WORKSPACE_MB: u64 = 1 << 20;
/// The smallest `[limits] workspace_mb`: room for the filesystem's own metadata.
pub const MIN_WORKSPACE_MB: u64 = 16;
/// The largest `[limits] workspace_inodes` (what ext4 allows is 2^32 - 1).
pub const MAX_WORKSPACE_INODES: u64 = 1 << 31;

fn default_workspace_mb() -> u64 {
    DEFAULT_WORKSPACE_MB
}

fn default_workspace_inodes() -> u64 {
    DEFAULT_WORKSPACE_INODES
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mb: 512,
            cpus: 1.0,
            pids: 256,
            tmpfs_mb: 64,
            workspace_mb: DEFAULT_WORKSPACE_MB,
            workspace_inodes: DEFAULT_WORKSPACE_INODES,
        }
    }
}

/// `[arm]`: where the arm's profile and candidate package are placed inside the image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmPaths {
    /// In-image path of the arm's profile file (default `/opt/eval/profile.toml`); `{profile}` in
    /// commands.
    pub profile: String,
    /// In-image path of the candidate package (default `/opt/eval/candidate`); `{candidate}` in
    /// commands.
    pub candidate: String,
    /// `[[arm.file]]`: the runtime's own files (or directories) every arm of it carries in its
    /// layer, beside the arm's profile and package — the same bytes in every arm, baseline
    /// included (the DeepSeek Harness's `eval-support` plugin). Serialised only when present,
    /// so older frozen definitions keep their bytes.
    #[serde(default, rename = "file", skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ArmFile>,
}

/// One `[[arm.file]]`: copied from the definition's directory into every arm's layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmFile {
    /// Relative to the definition's directory (a file or a directory, copied whole).
    pub src: String,
    /// Absolute path in the image.
    pub dest: String,
}

impl Default for ArmPaths {
    fn default() -> Self {
        ArmPaths {
            profile: "/opt/eval/profile.toml".to_owned(),
            candidate: "/opt/eval/candidate".to_owned(),
            files: Vec::new(),
        }
    }
}

/// The user a container runs as when neither the definition nor the image names a usable one.
pub const DEFAULT_USER: &str = "65532:65532";

/// The variable replaced by the prompt's text; only in `harness.command`.
pub const PROMPT_TEXT: &str = "{prompt_text}";

/// A numeric, non-root `uid:gid`.
pub fn parse_user(user: &str) -> Result<(u32, u32), String> {
    let (u, g) = user
        .split_once(':')
        .ok_or_else(|| format!("{user:?} is not uid:gid"))?;
    let uid: u32 = u.parse().map_err(|_| format!("{u:?} is not a number"))?;
    let gid: u32 = g.parse().map_err(|_| format!("{g:?} is not a number"))?;
    if uid == 0 || gid == 0 {
        return Err("containers never run as root".to_owned());
    }
    Ok((uid, gid))
}
fn default_port() -> u16 {
    8080
}

/// A runtime definition that cannot be used: an input error (exit 2) naming the file.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The definition file, as given.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown field, or a value of the wrong type.
    #[error("{path}: {source}")]
    Toml {
        /// The definition file, as given.
        path: String,
        /// The parser's error (it names the line and the key).
        #[source]
        source: toml::de::Error,
    },
    /// A field whose value breaks a rule (root user, bad digest, escaping path, …).
    #[error("{path}: field {field}: {detail}")]
    Invalid {
        /// The definition file, as given.
        path: String,
        /// The dotted field name (e.g. `image.id`).
        field: String,
        /// What is wrong and, where it helps, what is accepted.
        detail: String,
    },
}

/// A definition with the directory it was read from (build files are relative to it).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedDef {
    /// The parsed and checked definition.
    pub def: RuntimeDef,
    /// The definition's directory (build files and `image.archive` are relative to it).
    pub dir: PathBuf,
    /// The `runtime.toml` itself.
    pub path: PathBuf,
}

impl RuntimeDef {
    /// Reads and checks `path` (a `runtime.toml`).
    pub fn load(path: &Path) -> Result<LoadedDef, DefinitionError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| DefinitionError::Read {
            path: shown.clone(),
            source,
        })?;
        let def = Self::parse(&text, &shown)?;
        Ok(LoadedDef {
            def,
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            path: path.to_path_buf(),
        })
    }

    /// Parses and checks definition text; `shown` is the file name errors use.
    pub fn parse(text: &str, shown: &str) -> Result<Self, DefinitionError> {
        let def: RuntimeDef = toml::from_str(text).map_err(|source| DefinitionError::Toml {
            path: shown.to_owned(),
            source,
        })?;
        def.validate(shown)?;
        Ok(def)
    }

    fn validate(&self, shown: &str) -> Result<(), DefinitionError> {
        let bad = |field: &str, detail: String| DefinitionError::Invalid {
            path: shown.to_owned(),
            field: field.to_owned(),
            detail,
        };
        self.validate_commands()
            .map_err(|(field, detail)| bad(&field, detail))?;
        self.validate_image()
            .map_err(|(field, detail)| bad(&field, detail))?;
        self.validate_env()
            .map_err(|(field, detail)| bad(&field, detail))?;
        self.validate_limits()
            .map_err(|(field, detail)| bad(&field, detail))?;
        self.validate_paths()
            .map_err(|(field, detail)| bad(&field, detail))?;
        if self.relay_port == 0 {
            return Err(bad("relay_port", "must not be 0".into()));
        }
        Ok(())
    }

    /// The user and the harness's and grader's commands.
    fn validate_commands(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, detail: String| (field.to_owned(), detail);
        if let Some(u) = &self.user {
            parse_user(u).map_err(|d| bad("user", d))?;
        }
        if self.harness.command.as_ref().is_some_and(Vec::is_empty) {
            return Err(bad(
                "harness.command",
                "must not be empty (leave it out to run the image's Entrypoint and Cmd)".into(),
            ));
        }
        if let Some(c) = &self.harness.continue_command {
            if c.is_empty() {
                return Err(bad(
                    "harness.continue_command",
                    "must not be empty (leave it out for a runtime without rounds)".into(),
                ));
            }
            if c.iter().any(|a| a.contains(PROMPT_TEXT)) {
                return Err(bad(
                    "harness.continue_command",
                    format!(
                        "{PROMPT_TEXT} is only for harness.command (read the round's prompt from {{prompt}})"
                    ),
                ));
            }
        }
        if let Some(g) = &self.grader
            && g.command.iter().any(|a| a.contains(PROMPT_TEXT))
        {
            return Err(bad(
                "grader.command",
                format!("{PROMPT_TEXT} is only for harness.command"),
            ));
        }
        if let Some(g) = &self.grader
            && g.command.is_empty()
        {
            return Err(bad("grader.command", "must not be empty".into()));
        }
        if let Some(g) = &self.grader {
            g.check().map_err(|(field, detail)| bad(field, detail))?;
        }
        Ok(())
    }

    /// Where the base image comes from: its id, archive or reference, or a [build].
    fn validate_image(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, detail: String| (field.to_owned(), detail);
        if let Some(d) = &self.image.id
            && !is_digest(d)
        {
            return Err(bad("image.id", format!("{d:?} is not sha256:<64 hex>")));
        }
        if let Some(a) = &self.image.archive {
            relative(a).map_err(|d| bad("image.archive", format!("{a:?}: {d}")))?;
        }
        if self.build.is_none()
            && self.image.id.is_none()
            && self.image.reference.is_empty()
            && self.image.archive.is_none()
        {
            return Err(bad(
                "image.id",
                "required (the base image by content, sha256:<64 hex>) unless [build] makes the image or `reference`/`archive` names where to find it".into(),
            ));
        }
        if (self.build.is_some() && self.image.reference.is_empty())
            || self
                .image
                .reference
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || "._-/:@".contains(c)))
        {
            return Err(bad(
                "image.reference",
                format!("{:?} is not an image name", self.image.reference),
            ));
        }
        Ok(())
    }

    /// The environment: variable names and values.
    fn validate_env(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, detail: String| (field.to_owned(), detail);
        for (name, value) in self.env.iter() {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(bad("env", format!("{name:?} is not a variable name")));
            }
            if value.contains(PROMPT_TEXT) {
                return Err(bad(
                    &format!("env.{name}"),
                    format!("{PROMPT_TEXT} is only for harness.command"),
                ));
            }
            if value.contains('\0') {
                return Err(bad(&format!("env.{name}"), "contains a NUL byte".into()));
            }
        }
        Ok(())
    }

    /// The resource limits and the workspace's size.
    fn validate_limits(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, detail: String| (field.to_owned(), detail);
        let l = &self.limits;
        if l.memory_mb == 0 || l.pids == 0 || l.tmpfs_mb == 0 || !(l.cpus > 0.0 && l.cpus <= 64.0) {
            return Err(bad("limits", "every limit must be positive".into()));
        }
        if !(MIN_WORKSPACE_MB..=MAX_WORKSPACE_MB).contains(&l.workspace_mb) {
            return Err(bad(
                "limits.workspace_mb",
                format!(
                    "{} is outside {MIN_WORKSPACE_MB}..={MAX_WORKSPACE_MB}",
                    l.workspace_mb
                ),
            ));
        }
        // Each MiB holds 256 blocks; ext4 wants at least one block per inode (and a few
        // hundred inodes for itself and the seed).
        if !(1024..=MAX_WORKSPACE_INODES.min(l.workspace_mb * 256)).contains(&l.workspace_inodes) {
            return Err(bad(
                "limits.workspace_inodes",
                format!(
                    "{} is outside 1024..={} (at most one inode per 4 KiB block of workspace_mb)",
                    l.workspace_inodes,
                    MAX_WORKSPACE_INODES.min(l.workspace_mb * 256)
                ),
            ));
        }
        Ok(())
    }

    /// Every path field, for what it is (see "Runtime definitions" in docs/containers.md).
    /// Returns the field and why it was refused.
    fn validate_paths(&self) -> Result<(), (String, String)> {
        self.validate_arm_paths()?;
        self.validate_tmpfs_paths()?;
        self.validate_tmpfs_hides_no_program()?;
        self.validate_workspace_paths()?;
        self.validate_metrics_paths()?;
        self.validate_attest_paths()?;
        self.validate_build_paths()?;
        Ok(())
    }

    /// The arm's profile, candidate and files: absolute, clear of the fixed mounts, the tmpfs
    /// mounts and each other.
    fn validate_arm_paths(&self) -> Result<(), (String, String)> {
        let arm = [
            ("arm.profile", &self.arm.profile),
            ("arm.candidate", &self.arm.candidate),
        ];
        for (field, p) in arm {
            let refuse = |why: String| (field.to_owned(), format!("{p:?} {why}"));
            absolute(p).map_err(refuse)?;
            if let Some(m) = fixed_mount_overlapping(p) {
                return Err(refuse(format!(
                    "overlaps the fixed container mount {m:?}, which would hide or be hidden by it"
                )));
            }
        }
        if overlaps(&self.arm.profile, &self.arm.candidate) {
            return Err((
                "arm.candidate".to_owned(),
                format!(
                    "{:?} overlaps arm.profile {:?}",
                    self.arm.candidate, self.arm.profile
                ),
            ));
        }
        for (i, f) in self.arm.files.iter().enumerate() {
            relative(&f.src).map_err(|why| {
                (
                    format!("arm.file[{i}].src"),
                    format!(
                        "{:?} {why} (it is relative to the definition's directory)",
                        f.src
                    ),
                )
            })?;
            let field = format!("arm.file[{i}].dest");
            let refuse = |why: String| (field.clone(), format!("{:?} {why}", f.dest));
            absolute(&f.dest).map_err(refuse)?;
            if let Some(m) = fixed_mount_overlapping(&f.dest) {
                return Err(refuse(format!(
                    "overlaps the fixed container mount {m:?}, which would hide or be hidden by it"
                )));
            }
            for (name, a) in arm {
                if overlaps(&f.dest, a) {
                    return Err(refuse(format!("overlaps {name} {a:?}")));
                }
            }
            if let Some(o) = self.arm.files[..i]
                .iter()
                .find(|o| overlaps(&f.dest, &o.dest))
            {
                return Err(refuse(format!("overlaps arm.file dest {:?}", o.dest)));
            }
            for t in self.tmpfs.iter().chain(&self.tmpfs_exec) {
                if overlaps(&f.dest, t) {
                    return Err(refuse(format!("overlaps tmpfs {t:?}, which would hide it")));
                }
            }
        }
        Ok(())
    }

    /// Each tmpfs and tmpfs_exec mount: a valid mount point, listed once, not overlapping.
    fn validate_tmpfs_paths(&self) -> Result<(), (String, String)> {
        let arm = [
            ("arm.profile", &self.arm.profile),
            ("arm.candidate", &self.arm.candidate),
        ];
        for (i, t) in self.tmpfs.iter().enumerate() {
            let field = format!("tmpfs[{i}]");
            let refuse = |why: String| (field.clone(), format!("{t:?} {why}"));
            tmpfs_path(t, &arm).map_err(refuse)?;
            if self.tmpfs[..i].contains(t) {
                return Err(refuse("is listed twice".into()));
            }
        }
        for (i, t) in self.tmpfs_exec.iter().enumerate() {
            let field = format!("tmpfs_exec[{i}]");
            let refuse = |why: String| (field.clone(), format!("{t:?} {why}"));
            tmpfs_path(t, &arm).map_err(refuse)?;
            if let Some(o) = self.tmpfs.iter().find(|o| overlaps(t, o)) {
                return Err(refuse(format!(
                    "overlaps tmpfs {o:?}: a path is either executable or not"
                )));
            }
            if let Some(o) = self.tmpfs_exec[..i].iter().find(|o| overlaps(t, o)) {
                return Err(refuse(format!("overlaps tmpfs_exec {o:?}")));
            }
        }
        Ok(())
    }

    fn validate_tmpfs_hides_no_program(&self) -> Result<(), (String, String)> {
        // A tmpfs starts empty and hides what the image has beneath it: never the programs the
        // containers run or the files the shim attests (`/usr/local/bin` for build outputs is
        // fine in an image whose harness lives elsewhere, and refused in one whose lives there).
        let programs = self
            .harness
            .command
            .iter()
            .chain(&self.harness.continue_command)
            .chain(self.grader.as_ref().map(|g| &g.command))
            .chain(self.grader.as_ref().and_then(|g| g.run.as_ref()))
            .filter_map(|c| c.first())
            .chain(self.attest.paths.iter())
            .map(|p| self.render_agent(p))
            .filter(|p| p.starts_with('/'));
        for p in programs {
            for (kind, list) in [("tmpfs", &self.tmpfs), ("tmpfs_exec", &self.tmpfs_exec)] {
                if let Some((i, t)) = list
                    .iter()
                    .enumerate()
                    .find(|(_, t)| p.starts_with(t.as_str()) && overlaps(t, &p))
                {
                    return Err((
                        format!("{kind}[{i}]"),
                        format!("{t:?} would hide {p:?}, which the container runs or attests"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The workspace and the working directory.
    fn validate_workspace_paths(&self) -> Result<(), (String, String)> {
        if let Some(w) = &self.workspace {
            workspace_path(w, self)
                .map_err(|why| ("workspace".to_owned(), format!("{w:?} {why}")))?;
        }
        if let Some(w) = &self.workdir {
            absolute(w).map_err(|why| ("workdir".to_owned(), format!("{w:?} {why}")))?;
        }
        Ok(())
    }

    /// The metrics file, its root, format and sessions.
    fn validate_metrics_paths(&self) -> Result<(), (String, String)> {
        if let Some(m) = &self.metrics_path {
            let base = match self.metrics_root {
                MetricsRoot::Workspace => "the workspace",
                MetricsRoot::State => "the state directory",
            };
            relative(m).map_err(|why| {
                (
                    "metrics_path".to_owned(),
                    format!("{m:?} {why} (it is relative to {base})"),
                )
            })?;
            if self.metrics_root == MetricsRoot::State
                && m.split('/').any(|c| c.trim_end_matches('*').contains('*'))
            {
                return Err((
                    "metrics_path".to_owned(),
                    format!("{m:?}: a `*` may only end a component (a prefix match)"),
                ));
            }
            if let Some(all) = &self.metrics_sessions {
                let refuse =
                    |why: String| ("metrics_sessions".to_owned(), format!("{all:?} {why}"));
                if self.metrics_root != MetricsRoot::State
                    || self.metrics_format != MetricsFormat::DshSessionJsonl
                {
                    return Err(refuse(
                        "needs metrics_root = \"state\" and metrics_format = \"dsh-session-jsonl\""
                            .into(),
                    ));
                }
                relative(all).map_err(|why| {
                    refuse(format!("{why} (it is relative to the state directory)"))
                })?;
                if all
                    .split('/')
                    .any(|c| c.trim_end_matches('*').contains('*'))
                {
                    return Err(refuse("has a `*` that does not end its component".into()));
                }
                // The root must be one of the sessions (its `prefix*` components are read as
                // names: what they match starts with the prefix).
                if !metrics_pattern_matches(all, m) {
                    return Err(refuse(format!("does not cover metrics_path {m:?}")));
                }
            }
        } else if self.metrics_sessions.is_some() {
            return Err((
                "metrics_sessions".to_owned(),
                "needs metrics_path (the root session)".to_owned(),
            ));
        } else if self.metrics_root != MetricsRoot::Workspace {
            return Err((
                "metrics_root".to_owned(),
                "\"state\" needs metrics_path (the file it holds)".to_owned(),
            ));
        } else if !self.metrics_format.is_default() {
            // A format without a file would silently skip the cross-check it asks for.
            return Err((
                "metrics_format".to_owned(),
                format!(
                    "{:?} needs metrics_path (the file it describes)",
                    self.metrics_format.as_str()
                ),
            ));
        }
        Ok(())
    }

    /// The attested paths: absolute once rendered, and the arm's own unless the image is built.
    fn validate_attest_paths(&self) -> Result<(), (String, String)> {
        for (i, p) in self.attest.paths.iter().enumerate() {
            if p.contains(PROMPT_TEXT) {
                return Err((
                    format!("attest.paths[{i}]"),
                    format!("{PROMPT_TEXT} is only for harness.command"),
                ));
            }
            let rendered = self.render_agent(p);
            absolute(&rendered).map_err(|why| {
                (
                    format!("attest.paths[{i}]"),
                    format!("{p:?} (rendered {rendered:?}) {why}"),
                )
            })?;
            // A thin arm's image is its base (pinned by id) plus a layer of the arm's own files;
            // the expected digests come from those files, so only they can be attested.
            let own = [&self.arm.profile, &self.arm.candidate]
                .into_iter()
                .chain(self.arm.files.iter().map(|f| &f.dest))
                .any(|a| overlaps(&rendered, a) && rendered.starts_with(a.as_str()));
            if self.build.is_none() && !own {
                return Err((
                    format!("attest.paths[{i}]"),
                    format!(
                        "{rendered:?} lies in the base image, which `image.id` pins already; without [build] only the arm's own files ({}, {}) can be attested",
                        self.arm.profile, self.arm.candidate
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The build's files and static binaries.
    fn validate_build_paths(&self) -> Result<(), (String, String)> {
        if let Some(b) = &self.build {
            for (i, f) in b.files.iter().enumerate() {
                relative(&f.src).map_err(|why| {
                    (
                        format!("build.file[{i}].src"),
                        format!(
                            "{:?} {why} (it is relative to the definition's directory)",
                            f.src
                        ),
                    )
                })?;
                absolute(&f.dest).map_err(|why| {
                    (
                        format!("build.file[{i}].dest"),
                        format!("{:?} {why}", f.dest),
                    )
                })?;
            }
            for (i, n) in b.static_binaries.iter().enumerate() {
                if relative(n).is_err() || n.contains('/') {
                    return Err((
                        format!("build.static_binaries[{i}]"),
                        format!("{n:?} must be a plain file name"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The declared user, else [`DEFAULT_USER`], as numbers; root is refused. What a container
    /// runs as also depends on its image: see `policy::effective_user`.
    pub fn uid_gid(&self) -> Result<(u32, u32), String> {
        parse_user(self.user_or_default())
    }

    /// The declared user, else [`DEFAULT_USER`] (the user of images this crate builds).
    pub fn user_or_default(&self) -> &str {
        self.user.as_deref().unwrap_or(DEFAULT_USER)
    }

    /// The URL the harness reaches the model through: the shim's relay on `relay_port` (what
    /// `{base_url}` becomes).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.relay_port)
    }

    /// Where the workspace is mounted: the declared `workspace`, else [`paths::WORKSPACE`].
    pub fn workspace_path(&self) -> &str {
        self.workspace.as_deref().unwrap_or(paths::WORKSPACE)
    }

    /// Substitutes the agent-side variables.
    pub fn render_agent(&self, s: &str) -> String {
        s.replace("{prompt}", paths::PROMPT)
            .replace("{workspace}", self.workspace_path())
            .replace("{base_url}", &self.base_url())
            .replace("{profile}", &self.arm.profile)
            .replace("{candidate}", &self.arm.candidate)
    }

    /// Substitutes the grader-side variables (`{out}` becomes the score file's path,
    /// `{oracle_record}` the oracle record's).
    pub fn render_grader(&self, s: &str) -> String {
        s.replace("{workspace}", self.workspace_path())
            .replace("{hidden}", paths::HIDDEN)
            .replace("{oracle_record}", &format!("{}/record.json", paths::ORACLE))
            .replace("{out}", &format!("{}/score.json", paths::OUT))
            .replace("{capture}", paths::CAPTURE)
    }

    /// Substitutes a two-stage grader's run-stage variables (`{workspace}`, `{inputs}`,
    /// `{capture}` at the definition's capture mount point).
    pub fn render_grader_run(&self, s: &str) -> String {
        let capture = self
            .grader
            .as_ref()
            .map_or(paths::CAPTURE, GraderCmd::capture_path);
        s.replace("{workspace}", self.workspace_path())
            .replace("{inputs}", paths::INPUTS)
            .replace("{capture}", capture)
    }

    /// The attested container paths, rendered.
    pub fn attested_paths(&self) -> Vec<String> {
        self.attest
            .paths
            .iter()
            .map(|p| self.render_agent(p))
            .collect()
    }

    /// The environment allow-list, rendered, as `NAME=value`, sorted.
    pub fn agent_env(&self) -> Vec<String> {
        self.env
            .iter()
            .map(|(k, v)| format!("{k}={}", self.render_agent(v)))
            .collect()
    }
}

/// What the container policy mounts (or the kernel provides) at fixed places: an image path or
/// tmpfs that overlaps one of these would hide it or be hidden by it.
const FIXED_MOUNTS: [&str; 12] = [
    paths::WORKSPACE,
    paths::STATE,
    paths::PROMPT,
    paths::SHIM,
    paths::SOCKET_DIR,
    paths::HIDDEN,
    paths::OUT,
    paths::ORACLE,
    "/tmp",
    "/proc",
    "/sys",
    "/dev",
];

/// Image directories a declared workspace may neither be nor hide (a bind mount over one of
/// them, or over a parent of one, would replace the image's own programs or configuration).
const SYSTEM_DIRS: [&str; 10] = [
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/etc",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/local/bin",
    "/usr/local/lib",
];

/// A declared `workspace`: absolute, normalised, not `/`, hiding no system directory, clear of
/// every other fixed mount (it replaces `/workspace`, which it may equal), of the arm's paths
/// and files and of every tmpfs (a tmpfs over the workspace would hide it; one beneath it would
/// be graded as part of it).
fn workspace_path(w: &str, def: &RuntimeDef) -> Result<(), String> {
    absolute(w)?;
    if let Some(d) = SYSTEM_DIRS
        .iter()
        .find(|d| d.starts_with(w) && overlaps(w, d))
    {
        return Err(format!("would hide the image's {d}"));
    }
    if let Some(m) = FIXED_MOUNTS
        .iter()
        .copied()
        .filter(|m| *m != paths::WORKSPACE)
        .find(|m| overlaps(w, m))
    {
        return Err(format!("overlaps the fixed container mount {m:?}"));
    }
    for (name, a) in [
        ("arm.profile", &def.arm.profile),
        ("arm.candidate", &def.arm.candidate),
    ] {
        if overlaps(w, a) {
            return Err(format!("overlaps {name} {a:?}"));
        }
    }
    if let Some(f) = def.arm.files.iter().find(|f| overlaps(w, &f.dest)) {
        return Err(format!("overlaps arm.file dest {:?}", f.dest));
    }
    if let Some(t) = def
        .tmpfs
        .iter()
        .chain(&def.tmpfs_exec)
        .find(|t| overlaps(w, t))
    {
        return Err(format!("overlaps tmpfs {t:?}"));
    }
    Ok(())
}

/// A tmpfs mount point (either kind): absolute, normalised, clear of the fixed mounts and of
/// the arm's files.
fn tmpfs_path(t: &str, arm: &[(&str, &String); 2]) -> Result<(), String> {
    absolute(t)?;
    if let Some(m) = fixed_mount_overlapping(t) {
        return Err(format!("overlaps the fixed container mount {m:?}"));
    }
    for (name, a) in arm {
        if overlaps(t, a) {
            return Err(format!("overlaps {name} {a:?}, which it would hide"));
        }
    }
    Ok(())
}

fn fixed_mount_overlapping(p: &str) -> Option<&'static str> {
    FIXED_MOUNTS.iter().copied().find(|m| overlaps(p, m))
}

/// `a` and `b` (both normalised absolute paths) are equal or one lies beneath the other.
fn overlaps(a: &str, b: &str) -> bool {
    let under = |x: &str, y: &str| y == "/" || x == y || x.starts_with(&format!("{y}/"));
    under(a, b) || under(b, a)
}

/// Checks the components of a path: none empty (`//`, a trailing `/`), `.`, `..`, or with NUL.
fn components(p: &str) -> Result<(), String> {
    if p.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    for c in p.split('/') {
        match c {
            "" => return Err("is not normalised (empty component: `//` or a trailing `/`)".into()),
            "." => return Err("is not normalised (a `.` component)".into()),
            ".." => return Err("contains `..`".into()),
            _ => {}
        }
    }
    Ok(())
}

/// An absolute, normalised path other than `/` itself.
fn absolute(p: &str) -> Result<(), String> {
    let Some(rest) = p.strip_prefix('/') else {
        return Err("must be absolute".into());
    };
    if rest.is_empty() {
        return Err("must not be `/` itself".into());
    }
    components(rest)
}

/// A relative, normalised path naming something beneath its base (never the base itself).
fn relative(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("must not be empty".into());
    }
    if p.starts_with('/') {
        return Err("must be relative, not absolute".into());
    }
    components(p)
}

/// Whether `s` is `sha256:` followed by exactly 64 lowercase hex digits.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = r#"
name = "t"
[image]
reference = "eval-runtime/t"
[harness]
command = ["/usr/local/bin/agent", "{prompt}", "{base_url}"]
"#;

    #[test]
    fn parses_renders_and_refuses() {
        let d = RuntimeDef::parse(MIN, "t.toml").unwrap();
        assert_eq!(d.uid_gid().unwrap(), (65532, 65532));
        assert_eq!(
            d.render_agent(&d.harness.command.as_ref().unwrap()[2]),
            "http://127.0.0.1:8080/v1"
        );
        let e = RuntimeDef::parse(&format!("{MIN}\nbogus = 1"), "t.toml").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let root = format!("user = \"0:0\"\n{MIN}");
        let e = RuntimeDef::parse(&root, "t.toml").unwrap_err();
        assert!(e.to_string().contains("root"), "{e}");
        let tmp = format!("tmpfs = [\"/workspace/x\"]\n{MIN}");
        assert!(RuntimeDef::parse(&tmp, "t.toml").is_err());
    }

    #[test]
    fn the_fixture_runtime_definition_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixture/runtime.toml");
        let l = RuntimeDef::load(&path).unwrap();
        assert_eq!(l.def.name, "fixture");
        assert_eq!(l.def.attested_paths().len(), 3);
        assert!(l.def.grader.is_some());
        assert!(l.def.agent_env().iter().all(|e| !e.contains("sk-")));
    }

    /// The attempt filesystem's limits: documented defaults when absent (also in a `[limits]`
    /// table that names only the older limits), and bounds that name the field.
    #[test]
    fn workspace_limits_default_and_are_bounded() {
        let d = RuntimeDef::parse(MIN, "t.toml").unwrap();
        assert_eq!(d.limits.workspace_mb, DEFAULT_WORKSPACE_MB);
        assert_eq!(d.limits.workspace_inodes, DEFAULT_WORKSPACE_INODES);
        let old = "[limits]\nmemory_mb = 256\ncpus = 1.0\npids = 64\ntmpfs_mb = 16\n";
        let d = RuntimeDef::parse(&format!("{MIN}\n{old}"), "t.toml").unwrap();
        assert_eq!(d.limits.workspace_mb, DEFAULT_WORKSPACE_MB);
        let d = RuntimeDef::parse(
            &format!("{MIN}\n{old}workspace_mb = 64\nworkspace_inodes = 4096\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            (d.limits.workspace_mb, d.limits.workspace_inodes),
            (64, 4096)
        );
        for (extra, field) in [
            ("workspace_mb = 8\n", "limits.workspace_mb"),
            (
                "workspace_mb = 64\nworkspace_inodes = 100000\n",
                "limits.workspace_inodes",
            ),
            ("workspace_inodes = 10\n", "limits.workspace_inodes"),
        ] {
            let (f, detail) = refused("", &format!("{old}{extra}"));
            assert_eq!(f, field, "{extra}: {detail}");
        }
    }

    /// Parses MIN with `extra` added at the top level (before any table) or after it, and
    /// returns the refused field and detail.
    fn refused(top: &str, tables: &str) -> (String, String) {
        match RuntimeDef::parse(&format!("{top}\n{MIN}\n{tables}"), "r.toml") {
            Err(DefinitionError::Invalid {
                path,
                field,
                detail,
            }) => {
                assert_eq!(path, "r.toml");
                (field, detail)
            }
            other => panic!("{top} / {tables}: {other:?}"),
        }
    }

    fn accepted(top: &str, tables: &str) {
        RuntimeDef::parse(&format!("{top}\n{MIN}\n{tables}"), "r.toml").unwrap();
    }

    #[test]
    fn metrics_path_must_be_relative_normalised_and_beneath_the_workspace() {
        accepted(r#"metrics_path = ".eval-agent/metrics.json""#, "");
        for (value, why) in [
            ("../../etc/hostname", "contains `..`"),
            ("a/../../b", "contains `..`"),
            ("/etc/hostname", "must be relative"),
            ("", "must not be empty"),
            (".", "not normalised"),
            ("./m.json", "not normalised"),
            ("a//m.json", "not normalised"),
            ("dir/", "not normalised"),
        ] {
            let (field, detail) = refused(&format!("metrics_path = {value:?}"), "");
            assert_eq!(field, "metrics_path", "{value:?}");
            assert!(detail.contains(why), "{value:?}: {detail}");
        }
    }

    #[test]
    fn metrics_format_defaults_to_eval_json_and_needs_a_path() {
        let d = RuntimeDef::parse(MIN, "t.toml").unwrap();
        assert_eq!(d.metrics_format, MetricsFormat::EvalJson);
        // The default is not written, so older frozen definitions keep their bytes.
        assert!(!toml::to_string(&d).unwrap().contains("metrics_format"));
        let d = RuntimeDef::parse(
            &format!(
                "metrics_path = \".dsh-transcript/session.jsonl\"\nmetrics_format = \"dsh-session-jsonl\"\n{MIN}"
            ),
            "t.toml",
        )
        .unwrap();
        assert_eq!(d.metrics_format, MetricsFormat::DshSessionJsonl);
        assert!(toml::to_string(&d).unwrap().contains("dsh-session-jsonl"));
        let (field, detail) = refused(r#"metrics_format = "dsh-session-jsonl""#, "");
        assert_eq!(field, "metrics_format");
        assert!(detail.contains("needs metrics_path"), "{detail}");
        let e = RuntimeDef::parse(
            &format!("metrics_path = \"m\"\nmetrics_format = \"zstd\"\n{MIN}"),
            "t.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("zstd"), "{e}");
    }

    #[test]
    fn metrics_sessions_cover_the_root_under_state_and_a_dsh_transcript() {
        let base = "metrics_root = \"state\"\nmetrics_format = \"dsh-session-jsonl\"\nmetrics_path = \"*/session-*/session.jsonl\"\n";
        let d = RuntimeDef::parse(
            &format!("{base}metrics_sessions = \"*/*/session.jsonl\"\n{MIN}"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(d.metrics_sessions.as_deref(), Some("*/*/session.jsonl"));
        // Unset, it is not written (earlier frozen definitions keep their bytes).
        let d = RuntimeDef::parse(&format!("{base}{MIN}"), "t.toml").unwrap();
        assert!(!toml::to_string(&d).unwrap().contains("metrics_sessions"));
        for (extra, says) in [
            (
                "metrics_sessions = \"*/child-*/session.jsonl\"",
                "does not cover",
            ),
            (
                "metrics_sessions = \"*/*/*/session.jsonl\"",
                "does not cover",
            ),
            ("metrics_sessions = \"*/a*b/session.jsonl\"", "`*`"),
            ("metrics_sessions = \"/abs/session.jsonl\"", "relative"),
        ] {
            let e = RuntimeDef::parse(&format!("{base}{extra}\n{MIN}"), "t.toml").unwrap_err();
            assert!(e.to_string().contains("metrics_sessions"), "{extra}: {e}");
            assert!(e.to_string().contains(says), "{extra}: {e}");
        }
        // Only for a state-root dsh transcript.
        let (field, detail) = refused(
            "metrics_path = \"m.json\"\nmetrics_sessions = \"m.json\"",
            "",
        );
        assert_eq!(field, "metrics_sessions");
        assert!(detail.contains("metrics_root"), "{detail}");
        let (field, _) = refused("metrics_sessions = \"*/x\"", "");
        assert_eq!(field, "metrics_sessions");
        assert!(metrics_pattern_matches(
            "*/session-*/session.jsonl",
            "--workspace--/session-1/session.jsonl"
        ));
        assert!(!metrics_pattern_matches(
            "*/session-*/session.jsonl",
            "--workspace--/0f6c-uuid/session.jsonl"
        ));
        assert!(!metrics_pattern_matches(
            "*/session.jsonl",
            "a/b/session.jsonl"
        ));
    }

    #[test]
    fn metrics_root_state_takes_prefix_patterns_and_needs_a_path() {
        let d = RuntimeDef::parse(MIN, "t.toml").unwrap();
        assert_eq!(d.metrics_root, MetricsRoot::Workspace);
        assert!(!toml::to_string(&d).unwrap().contains("metrics_root"));
        let d = RuntimeDef::parse(
            &format!(
                "metrics_root = \"state\"\nmetrics_path = \"*/session-*/session.jsonl\"\n{MIN}"
            ),
            "t.toml",
        )
        .unwrap();
        assert_eq!(d.metrics_root, MetricsRoot::State);
        assert!(
            toml::to_string(&d)
                .unwrap()
                .contains("metrics_root = \"state\"")
        );
        let (field, detail) = refused(
            "metrics_root = \"state\"\nmetrics_path = \"a*b/session.jsonl\"",
            "",
        );
        assert_eq!(field, "metrics_path");
        assert!(detail.contains("only end a component"), "{detail}");
        let (field, _) = refused("metrics_root = \"state\"", "");
        assert_eq!(field, "metrics_root");
        // The state directory is a fixed mount: no tmpfs may hide it.
        let (field, detail) = refused(r#"tmpfs = ["/eval-state"]"#, "");
        assert_eq!(field, "tmpfs[0]");
        assert!(detail.contains("fixed container mount"), "{detail}");
    }

    #[test]
    fn tmpfs_must_be_absolute_normalised_and_clear_of_fixed_mounts() {
        accepted(r#"tmpfs = ["/home/agent", "/var/cache/x"]"#, "");
        for (value, why) in [
            ("home/agent", "must be absolute"),
            ("/", "`/` itself"),
            ("/home/../etc", "contains `..`"),
            ("/home//agent", "not normalised"),
            ("/workspace", "fixed container mount \"/workspace\""),
            ("/workspace/x", "fixed container mount \"/workspace\""),
            ("/run", "fixed container mount \"/run/eval\""),
            ("/task", "fixed container mount \"/task/prompt.md\""),
            ("/.eval", "fixed container mount \"/.eval/eval-shim\""),
            ("/proc/self", "fixed container mount \"/proc\""),
            ("/opt", "overlaps arm.profile"),
        ] {
            let (field, detail) = refused(&format!("tmpfs = [\"/ok\", {value:?}]"), "");
            assert_eq!(field, "tmpfs[1]", "{value:?}");
            assert!(detail.contains(why), "{value:?}: {detail}");
        }
        let (field, detail) = refused(r#"tmpfs = ["/a", "/a"]"#, "");
        assert_eq!(
            (field.as_str(), detail.contains("twice")),
            ("tmpfs[1]", true)
        );
    }

    #[test]
    fn arm_paths_must_be_absolute_normalised_and_apart() {
        for (key, value, why) in [
            ("profile", "opt/p.toml", "must be absolute"),
            ("profile", "/opt/./p.toml", "not normalised"),
            ("candidate", "/opt/../c", "contains `..`"),
            ("candidate", "/workspace/c", "fixed container mount"),
            ("candidate", "/", "`/` itself"),
        ] {
            let other = if key == "profile" {
                "candidate = \"/opt/c\""
            } else {
                "profile = \"/opt/p\""
            };
            let (field, detail) = refused("", &format!("[arm]\n{key} = {value:?}\n{other}"));
            assert_eq!(field, format!("arm.{key}"), "{value:?}");
            assert!(detail.contains(why), "{value:?}: {detail}");
        }
        let (field, detail) = refused("", "[arm]\nprofile = \"/opt/c/p\"\ncandidate = \"/opt/c\"");
        assert_eq!(field, "arm.candidate");
        assert!(detail.contains("overlaps arm.profile"), "{detail}");
    }

    /// `[[arm.file]]`: the runtime's own files in every arm's layer; attestable over a pinned
    /// base (they are the layer's, not the base's), checked like the other arm paths.
    #[test]
    fn arm_files_are_checked_and_attestable_over_a_base() {
        let id = format!("sha256:{}", "a".repeat(64));
        let thin = |files: &str, attest: &str| {
            format!(
                "name = \"t\"\ntmpfs = [\"/home/agent\"]\n[image]\nid = \"{id}\"\n[harness]\ncommand = [\"/a\"]\n[attest]\npaths = [{attest}]\n[arm]\nprofile = \"/opt/eval/arm/p\"\ncandidate = \"/opt/eval/arm/c\"\n{files}"
            )
        };
        let one = "[[arm.file]]\nsrc = \"eval-support\"\ndest = \"/opt/eval/support\"\n";
        let d = RuntimeDef::parse(&thin(one, "\"/opt/eval/support\""), "t.toml").unwrap();
        assert_eq!(
            d.arm.files,
            [ArmFile {
                src: "eval-support".into(),
                dest: "/opt/eval/support".into()
            }]
        );
        // Without the file, the same path lies in the base: not attestable.
        let e = RuntimeDef::parse(&thin("", "\"/opt/eval/support\""), "t.toml").unwrap_err();
        assert!(e.to_string().contains("attest.paths[0]"), "{e}");
        for (file, field, why) in [
            (
                "src = \"../x\"\ndest = \"/opt/s\"",
                "arm.file[0].src",
                "contains `..`",
            ),
            (
                "src = \"/etc\"\ndest = \"/opt/s\"",
                "arm.file[0].src",
                "must be relative",
            ),
            (
                "src = \"s\"\ndest = \"opt/s\"",
                "arm.file[0].dest",
                "must be absolute",
            ),
            (
                "src = \"s\"\ndest = \"/workspace/s\"",
                "arm.file[0].dest",
                "fixed container mount",
            ),
            (
                "src = \"s\"\ndest = \"/opt/eval/arm\"",
                "arm.file[0].dest",
                "overlaps arm.profile",
            ),
            (
                "src = \"s\"\ndest = \"/home/agent/s\"",
                "arm.file[0].dest",
                "overlaps tmpfs",
            ),
        ] {
            let e = RuntimeDef::parse(&thin(&format!("[[arm.file]]\n{file}\n"), ""), "t.toml")
                .unwrap_err();
            let text = e.to_string();
            assert!(text.contains(field) && text.contains(why), "{file}: {text}");
        }
        let two = format!("{one}[[arm.file]]\nsrc = \"b\"\ndest = \"/opt/eval/support/b\"\n");
        let e = RuntimeDef::parse(&thin(&two, ""), "t.toml").unwrap_err();
        assert!(e.to_string().contains("arm.file[1].dest"), "{e}");
    }

    #[test]
    fn image_schema_id_alias_archive_and_thin_attestation() {
        let id = format!("sha256:{}", "a".repeat(64));
        let thin = |image: &str, attest: &str| {
            format!(
                "name = \"t\"\n[image]\n{image}\n[harness]\ncommand = [\"/a\"]\n[attest]\npaths = [{attest}]\n"
            )
        };
        let d =
            RuntimeDef::parse(&thin(&format!("id = \"{id}\""), "\"{profile}\""), "t.toml").unwrap();
        assert_eq!(d.image.id.as_deref(), Some(id.as_str()));
        let d = RuntimeDef::parse(&thin(&format!("digest = \"{id}\""), ""), "t.toml").unwrap();
        assert_eq!(
            d.image.id.as_deref(),
            Some(id.as_str()),
            "`digest` is an alias"
        );
        for (image, attest, field) in [
            ("id = \"sha256:12\"", "", "image.id"),
            ("archive = \"../x.tar\"", "", "image.archive"),
            ("archive = \"/x.tar\"", "", "image.archive"),
            ("", "", "image.id"),
            (
                "archive = \"b.tar\"",
                "\"/usr/bin/python3\"",
                "attest.paths[0]",
            ),
        ] {
            let e = RuntimeDef::parse(&thin(image, attest), "t.toml").unwrap_err();
            assert!(e.to_string().contains(field), "{image} {attest}: {e}");
        }
        let d = RuntimeDef::parse(
            &thin("archive = \"b.tar\"", "\"{candidate}/x.js\""),
            "t.toml",
        )
        .unwrap();
        assert_eq!(d.image.archive.as_deref(), Some("b.tar"));
    }

    #[test]
    fn build_and_attest_paths_are_checked_for_what_they_are() {
        accepted(
            "",
            "[build]\nstatic_binaries = [\"eval-shim\"]\n[[build.file]]\nsrc = \"files/a\"\ndest = \"/usr/bin/a\"\n[attest]\npaths = [\"{profile}\", \"/usr/bin/a\"]",
        );
        for (tables, field, why) in [
            (
                "[[build.file]]\nsrc = \"../secret\"\ndest = \"/a\"",
                "build.file[0].src",
                "contains `..`",
            ),
            (
                "[[build.file]]\nsrc = \"/etc/passwd\"\ndest = \"/a\"",
                "build.file[0].src",
                "must be relative",
            ),
            (
                "[[build.file]]\nsrc = \"a\"\ndest = \"a\"",
                "build.file[0].dest",
                "must be absolute",
            ),
            (
                "[[build.file]]\nsrc = \"a\"\ndest = \"/\"",
                "build.file[0].dest",
                "`/` itself",
            ),
            (
                "[build]\nstatic_binaries = [\"../x\"]",
                "build.static_binaries[0]",
                "plain file name",
            ),
            (
                "[build]\nstatic_binaries = [\"a/b\"]",
                "build.static_binaries[0]",
                "plain file name",
            ),
            (
                "[attest]\npaths = [\"{workspace}/../etc\"]",
                "attest.paths[0]",
                "contains `..`",
            ),
            (
                "[attest]\npaths = [\"bin/x\"]",
                "attest.paths[0]",
                "must be absolute",
            ),
        ] {
            let (f, detail) = refused("", tables);
            assert_eq!(f, field, "{tables}");
            assert!(detail.contains(why), "{tables}: {detail}");
        }
    }

    #[test]
    fn image_config_fields_are_optional_and_checked_when_given() {
        let d = RuntimeDef::parse("name = \"t\"\n[image]\nreference = \"r\"", "t.toml").unwrap();
        assert_eq!(
            (d.user.as_deref(), d.workdir.as_deref(), &d.harness.command),
            (None, None, &None),
            "no user, workdir or harness: the image's own"
        );
        assert_eq!(d.uid_gid().unwrap(), (65532, 65532));
        accepted(
            "workdir = \"/src/app\"\ntmpfs_exec = [\"/opt/cache\"]",
            "[env]\nPATH = \"/opt/venv/bin:/usr/bin\"",
        );
        let (field, detail) = refused("workdir = \"src\"", "");
        assert_eq!(
            (field.as_str(), detail.contains("must be absolute")),
            ("workdir", true)
        );
        let (field, detail) = refused("", "[env]\nTASK = \"{prompt_text}\"");
        assert_eq!(field, "env.TASK");
        assert!(detail.contains("only for harness.command"), "{detail}");
        let e = RuntimeDef::parse(
            "name = \"t\"\n[image]\nreference = \"r\"\n[harness]\ncommand = []",
            "t.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("harness.command"), "{e}");
    }

    #[test]
    fn a_declared_workspace_is_a_plain_path_clear_of_system_dirs_mounts_and_tmpfs() {
        accepted("workspace = \"/app\"\ntmpfs_exec = [\"/opt/build\"]", "");
        accepted("workspace = \"/workspace\"", "");
        let d = RuntimeDef::parse("name = \"t\"\n[image]\nreference = \"r\"", "t.toml").unwrap();
        assert_eq!(d.workspace_path(), paths::WORKSPACE);
        // Absent, it is not serialised: definitions frozen before it keep their bytes.
        assert!(!toml::to_string(&d).unwrap().contains("workspace ="));
        for (top, why) in [
            ("workspace = \"app\"", "must be absolute"),
            ("workspace = \"/app/../etc\"", "contains `..`"),
            ("workspace = \"/\"", "must not be `/`"),
            ("workspace = \"/usr\"", "would hide the image's /usr/bin"),
            (
                "workspace = \"/usr/local/bin\"",
                "would hide the image's /usr/local/bin",
            ),
            ("workspace = \"/tmp/app\"", "fixed container mount \"/tmp\""),
            (
                "workspace = \"/hidden\"",
                "fixed container mount \"/hidden\"",
            ),
            (
                "workspace = \"/app\"\ntmpfs_exec = [\"/app/bin\"]",
                "overlaps tmpfs \"/app/bin\"",
            ),
            (
                "workspace = \"/home/agent/app\"\ntmpfs = [\"/home/agent\"]",
                "overlaps tmpfs",
            ),
            ("workspace = \"/opt/eval\"", "overlaps arm.profile"),
        ] {
            let (field, detail) = refused(top, "");
            assert_eq!(field, "workspace", "{top}: {detail}");
            assert!(detail.contains(why), "{top}: {detail}");
        }
    }

    #[test]
    fn a_tmpfs_never_hides_what_the_container_runs_or_attests() {
        // MIN's harness is /usr/local/bin/agent.
        accepted("tmpfs_exec = [\"/opt/build\"]", "");
        for (top, tables, field) in [
            ("tmpfs_exec = [\"/usr/local/bin\"]", "", "tmpfs_exec[0]"),
            (
                "tmpfs = [\"/opt/x\"]",
                "continue_command = [\"/opt/x/agent\"]",
                "tmpfs[0]",
            ),
            (
                "tmpfs_exec = [\"/opt/g\"]",
                "[grader]\ncommand = [\"/opt/g/grade\"]",
                "tmpfs_exec[0]",
            ),
            (
                "tmpfs_exec = [\"/a\", \"/opt/bin\"]",
                "[build]\nbusybox = true\n[attest]\npaths = [\"/opt/bin/tool\"]",
                "tmpfs_exec[1]",
            ),
        ] {
            let (f, detail) = refused(top, tables);
            assert_eq!(f, field, "{top} {tables}: {detail}");
            assert!(detail.contains("would hide"), "{detail}");
        }
    }

    #[test]
    fn a_continue_command_is_optional_not_empty_and_reads_the_prompt_by_path() {
        let d = RuntimeDef::parse(
            "name = \"t\"\n[image]\nreference = \"r\"\n[harness]\ncommand = [\"/a\"]\ncontinue_command = [\"/a\", \"--resume\", \"{prompt}\"]",
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            d.harness.continue_command.as_deref(),
            Some(&["/a".to_owned(), "--resume".into(), "{prompt}".into()][..])
        );
        let plain =
            RuntimeDef::parse("name = \"t\"\n[image]\nreference = \"r\"", "t.toml").unwrap();
        assert_eq!(plain.harness.continue_command, None);
        // Absent, it is not serialised: definitions frozen before rounds keep their bytes.
        assert!(
            !toml::to_string(&plain)
                .unwrap()
                .contains("continue_command")
        );
        for (cmd, why) in [
            ("[]", "must not be empty"),
            ("[\"/a\", \"{prompt_text}\"]", "only for harness.command"),
        ] {
            let (field, detail) = refused("", &format!("continue_command = {cmd}"));
            assert_eq!(field, "harness.continue_command", "{cmd}");
            assert!(detail.contains(why), "{cmd}: {detail}");
        }
    }

    #[test]
    fn tmpfs_exec_is_checked_like_tmpfs_and_kept_apart_from_it() {
        for (top, field, why) in [
            (
                "tmpfs_exec = [\"opt/cache\"]",
                "tmpfs_exec[0]",
                "must be absolute",
            ),
            (
                "tmpfs_exec = [\"/tmp\"]",
                "tmpfs_exec[0]",
                "fixed container mount \"/tmp\"",
            ),
            (
                "tmpfs_exec = [\"/workspace/bin\"]",
                "tmpfs_exec[0]",
                "fixed container mount",
            ),
            (
                "tmpfs_exec = [\"/opt/eval\"]",
                "tmpfs_exec[0]",
                "overlaps arm.profile",
            ),
            (
                "tmpfs_exec = [\"/a/../b\"]",
                "tmpfs_exec[0]",
                "contains `..`",
            ),
            (
                "tmpfs = [\"/home/agent\"]\ntmpfs_exec = [\"/home/agent/.cache\"]",
                "tmpfs_exec[0]",
                "overlaps tmpfs \"/home/agent\"",
            ),
            (
                "tmpfs = [\"/home/agent/x\"]\ntmpfs_exec = [\"/home\"]",
                "tmpfs_exec[0]",
                "overlaps tmpfs",
            ),
            (
                "tmpfs_exec = [\"/c\", \"/c/d\"]",
                "tmpfs_exec[1]",
                "overlaps tmpfs_exec \"/c\"",
            ),
        ] {
            let (f, detail) = refused(top, "");
            assert_eq!(f, field, "{top}");
            assert!(detail.contains(why), "{top}: {detail}");
        }
    }

    #[test]
    fn a_two_stage_graders_score_stage_never_sees_the_workspace_nor_its_run_stage_the_answers() {
        let ok = "[grader]\nrun = [\"/bin/sh\", \"{inputs}/g\", \"{workspace}\", \"{capture}\"]\nrun_inputs = \"public\"\ncapture = \"/logs/verifier\"\ncapture_files = [\"reward.txt\"]\ncommand = [\"/bin/sh\", \"{hidden}/g\", \"{capture}\", \"{out}\"]";
        accepted("", ok);
        let d = RuntimeDef::parse(&format!("{MIN}\n{ok}"), "r.toml").unwrap();
        assert_eq!(
            d.render_grader_run("{capture}|{inputs}"),
            "/logs/verifier|/inputs"
        );
        assert_eq!(d.render_grader("{capture}"), paths::CAPTURE);
        // A one-stage definition's frozen form has none of the new fields.
        let one =
            RuntimeDef::parse(&format!("{MIN}\n[grader]\ncommand = [\"/g\"]"), "r.toml").unwrap();
        let json = serde_json::to_string(&one).unwrap();
        assert!(json.contains(r#""grader":{"command":["/g"]}"#), "{json}");
        for (tables, field, why) in [
            (
                "[grader]\nrun = [\"/r\"]\ncommand = [\"/g\", \"{workspace}\"]",
                "grader.command",
                "{workspace}",
            ),
            (
                "[grader]\nrun = [\"/r\"]\ncommand = [\"/g\", \"{inputs}\"]",
                "grader.command",
                "{inputs}",
            ),
            (
                "[grader]\nrun = [\"/r\", \"{hidden}\"]\ncommand = [\"/g\"]",
                "grader.run",
                "{hidden}",
            ),
            (
                "[grader]\nrun = [\"/r\", \"{out}\"]\ncommand = [\"/g\"]",
                "grader.run",
                "{out}",
            ),
            (
                "[grader]\nrun = []\ncommand = [\"/g\"]",
                "grader.run",
                "empty",
            ),
            (
                "[grader]\nrun = [\"/r\"]\nrun_inputs = \"../x\"\ncommand = [\"/g\"]",
                "grader.run_inputs",
                "relative",
            ),
            (
                "[grader]\nrun = [\"/r\"]\ncapture = \"/hidden\"\ncommand = [\"/g\"]",
                "grader.capture",
                "fixed mounts",
            ),
            (
                "[grader]\nrun = [\"/r\"]\ncapture_files = [\"a/b\"]\ncommand = [\"/g\"]",
                "grader.capture_files",
                "file name",
            ),
            (
                "[grader]\nrun_inputs = \"public\"\ncommand = [\"/g\"]",
                "grader.run",
                "need a run stage",
            ),
        ] {
            let (f, detail) = refused("", tables);
            assert_eq!(f, field, "{tables}: {detail}");
            assert!(detail.contains(why), "{tables}: {detail}");
        }
    }
}
