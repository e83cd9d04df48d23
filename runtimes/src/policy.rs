//! The container policy, applied by one function (`container_spec`) so that it cannot be
//! forgotten, and checked after create (`check`) so that an engine or a caller that changed
//! anything is caught before the container starts.
//!
//! Agent containers: labels `eval.protocol`, `eval.identity`, `eval.arm`, `eval.attempt`,
//! `eval.role`; `network_mode: none`; every capability dropped; `no-new-privileges`; read-only
//! root filesystem; tmpfs `/tmp` plus the definition's extra paths (`noexec` unless declared in
//! `tmpfs_exec`); memory (no swap), CPU and pids limits; a non-root user; the image's own `Env`,
//! `WorkingDir`, `User` and `Entrypoint`/`Cmd` unless the definition overrides them (see
//! `effective_user` and "The image's own config" in docs/containers.md); exactly these mounts:
//! workspace (rw), prompt
//! (ro), shim (ro), the directory holding the attempt's socket (ro — connecting needs no write
//! access to the directory). Grader containers: the same, with the final workspace (ro), the
//! task's hidden files (ro) and an output directory (rw), no socket and no shim.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use bollard::models::{
    ContainerConfig, ContainerCreateBody, ContainerInspectResponse, HostConfig,
    HostConfigLogConfig, Mount, MountType,
};

use crate::definition::{DEFAULT_USER, PROMPT_TEXT, RuntimeDef, parse_user, paths};
use crate::fault::RuntimeError;
use crate::image::ImageId;
use crate::image_config::ImageConfig;

/// Label naming the protocol an agent container runs for.
pub const LABEL_PROTOCOL: &str = "eval.protocol";
/// Label holding the frozen protocol identity.
pub const LABEL_IDENTITY: &str = "eval.identity";
/// Label naming the arm.
pub const LABEL_ARM: &str = "eval.arm";
/// Label naming the attempt the container belongs to.
pub const LABEL_ATTEMPT: &str = "eval.attempt";
/// Label saying `agent` or `grader`.
pub const LABEL_ROLE: &str = "eval.role";
/// Present on every container this crate creates: `eval.managed=1` sweeps them all.
pub const LABEL_MANAGED: &str = "eval.managed";
/// The security option every container gets, so setuid binaries cannot gain privileges.
pub const NO_NEW_PRIVILEGES: &str = "no-new-privileges";
/// `PATH` when neither the image nor the definition sets one.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The longest single argument Linux `execve` accepts (`MAX_ARG_STRLEN`, 32 pages, with its NUL).
const MAX_ARG_BYTES: usize = 32 * 4096 - 1;

/// Which kind of container: it decides the mounts, the environment and the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Runs the arm's harness against the task, with the proxy socket as its only way out.
    Agent,
    /// Scores a finished workspace; sees the hidden files, no socket, no shim.
    Grader,
}

impl Role {
    /// The value of the `eval.role` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Grader => "grader",
        }
    }
}

/// Who a container belongs to; becomes its labels.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptFacts {
    /// Protocol name (`eval.protocol`).
    pub protocol: String,
    /// Frozen identity (`eval.identity`).
    pub identity: String,
    /// Arm id (`eval.arm`).
    pub arm: String,
    /// Attempt id (`eval.attempt`).
    pub attempt: String,
    /// Further labels (tests add one to sweep what they made); cannot override the above.
    pub extra_labels: BTreeMap<String, String>,
}

/// The engine's log of every container: `json-file`, one file of at most [`LOG_MAX_SIZE`]. The
/// engine's default has no bound, so an agent that prints without end would fill the host's disk
/// (the engine's, not the attempt's) and turn its own failure into a rerunnable
/// `filesystem_capacity`. The controller keeps at most 256 KiB of it anyway.
pub const LOG_DRIVER: &str = "json-file";
/// See [`LOG_DRIVER`].
pub const LOG_MAX_SIZE: &str = "8m";
/// See [`LOG_DRIVER`]: the file is cut at the limit, never multiplied by rotation.
pub const LOG_MAX_FILE: &str = "1";

fn log_config() -> HostConfigLogConfig {
    HostConfigLogConfig {
        typ: Some(LOG_DRIVER.to_owned()),
        config: Some(HashMap::from([
            ("max-size".to_owned(), LOG_MAX_SIZE.to_owned()),
            ("max-file".to_owned(), LOG_MAX_FILE.to_owned()),
        ])),
    }
}

/// The engine runtime name eval's gVisor is registered under (`/etc/docker/daemon.json`
/// `runtimes`, written by `scripts/ensure-docker.sh`): eval's own entry, never the machine's
/// `runsc`, whose arguments belong to every other gVisor user of the engine.
pub const GVISOR_RUNTIME: &str = "eval-runsc";

/// Host threads and processes a gVisor sandbox needs besides its tasks': the Sentry's Go runtime,
/// the gofer and their helpers. Measured with Debian's `runsc` 0.0~20221219.0 (ptrace platform, 2
/// CPUs): the fixture agent's sandbox peaked at 69 host pids for 5 in-sandbox threads; the rest is
/// margin for a machine with more CPUs (more Go threads).
pub const GVISOR_SANDBOX_PIDS: i64 = 256;

/// Host pids per in-sandbox task under gVisor's ptrace platform: the Sentry thread that runs it
/// and the stub thread (in a stub process per address space) it traces.
pub const GVISOR_PIDS_PER_TASK: i64 = 2;

/// The engine's `pids_limit` for a gVisor container whose arm allows `pids` tasks. The engine
/// applies `pids_limit` to the sandbox's host cgroup, which holds no container process but the
/// Sentry's threads and the platform's stubs: the arm's own limit there (64 for the fixture)
/// made the Sentry fail to clone its next stub ("error initializing first thread: resource
/// temporarily unavailable"), a Go panic whose status 2 read as the agent's `agent_error`.
pub fn gvisor_host_pids(pids: i64) -> i64 {
    pids.saturating_mul(GVISOR_PIDS_PER_TASK)
        .saturating_add(GVISOR_SANDBOX_PIDS)
}

/// Makes `spec` run under gVisor: the create body names the runtime and the policy check then
/// refuses a created container whose `HostConfig.Runtime` is anything else (an engine without
/// `runsc` refuses the create, `container_runtime_failure`). The pids limit becomes the sandbox's
/// ([`gvisor_host_pids`]), checked like any other limit. Call it once per spec.
pub fn require_gvisor(spec: &mut ContainerSpec) {
    let pids = gvisor_host_pids(spec.expected.pids);
    if let Some(h) = spec.body.host_config.as_mut() {
        h.runtime = Some(GVISOR_RUNTIME.to_owned());
        h.pids_limit = Some(pids);
    }
    spec.expected.runtime = Some(GVISOR_RUNTIME.to_owned());
    spec.expected.pids = pids;
}

/// Makes an agent container's shim run a multi-round attempt (docs/rounds.md): one
/// `--round-timeout SECONDS` per round, in order, and the definition's rendered
/// `harness.continue_command` as `--continue ARG`s, all before the shim's `--`; the policy check
/// then expects exactly that command. A definition without `continue_command` is refused for
/// two or more rounds; one round (a single-step Harbor task) never continues a session.
pub fn with_rounds(
    spec: &mut ContainerSpec,
    def: &RuntimeDef,
    round_timeouts: &[u64],
) -> Result<(), RuntimeError> {
    let none = Vec::new();
    let cont = match &def.harness.continue_command {
        Some(c) => c,
        None if round_timeouts.len() <= 1 => &none,
        None => return Err(invalid(
            &def.name,
            "harness.continue_command",
            "absent: this runtime cannot continue a session, so it cannot run a multi-round task"
                .into(),
        )),
    };
    let mut extra = Vec::new();
    for t in round_timeouts {
        extra.push("--round-timeout".to_owned());
        extra.push(t.to_string());
    }
    for a in cont {
        extra.push("--continue".to_owned());
        extra.push(def.render_agent(a));
    }
    let insert = |cmd: &mut Vec<String>| {
        let at = cmd.iter().position(|a| a == "--").unwrap_or(cmd.len());
        cmd.splice(at..at, extra.iter().cloned());
    };
    if let Some(cmd) = spec.body.cmd.as_mut() {
        insert(cmd);
    }
    insert(&mut spec.expected.cmd);
    Ok(())
}

/// Host paths a container of each role gets.
#[derive(Debug, Clone, PartialEq)]
pub enum RoleMounts {
    /// An agent container's host paths.
    Agent {
        /// The attempt's workspace copy, mounted read-write.
        workspace: PathBuf,
        /// The task's prompt file.
        prompt: PathBuf,
        /// The attempt's Unix socket; its directory is mounted, so a re-bound socket still works.
        socket: PathBuf,
        /// The static `eval-shim` binary.
        shim: PathBuf,
        /// The attempt's state directory (the harness's transcript), mounted read-write at
        /// `paths::STATE` — outside the workspace; `None` when the definition keeps its metrics
        /// in the workspace.
        state: Option<PathBuf>,
    },
    /// A grader container's host paths.
    Grader {
        /// The finished workspace, mounted read-only.
        workspace: PathBuf,
        /// The task's `hidden/` directory, mounted read-only.
        hidden: PathBuf,
        /// An empty directory for the grader's `score.json`, mounted read-write.
        out: PathBuf,
        /// The attempt's oracle record directory, mounted read-only at `paths::ORACLE` when the
        /// task lets its grader read it.
        oracle: Option<PathBuf>,
    },
    /// A two-stage grader's run stage (may run agent code): the finished workspace (ro), the
    /// suite's public inputs (ro) and the capture directory (rw); no hidden files, no `/out`.
    GraderRun {
        /// The finished workspace, mounted read-only.
        workspace: PathBuf,
        /// The public part of the task's hidden files (`[grader] run_inputs`), read-only at
        /// `paths::INPUTS`.
        inputs: Option<PathBuf>,
        /// The capture directory, read-write at the definition's `capture`.
        capture: PathBuf,
    },
    /// A two-stage grader's score stage (runs no agent code): no workspace; the hidden files
    /// (ro), eval's copy of what the run stage captured (ro, `paths::CAPTURE`) and `/out` (rw).
    GraderScore {
        /// The task's hidden directory, mounted read-only.
        hidden: PathBuf,
        /// Eval's copy of the run stage's capture, mounted read-only.
        capture: PathBuf,
        /// An empty directory for `score.json`, mounted read-write.
        out: PathBuf,
        /// The attempt's oracle record directory, as for a one-stage grader.
        oracle: Option<PathBuf>,
    },
}

impl RoleMounts {
    /// Which role these mounts are for.
    pub fn role(&self) -> Role {
        match self {
            RoleMounts::Agent { .. } => Role::Agent,
            RoleMounts::Grader { .. }
            | RoleMounts::GraderRun { .. }
            | RoleMounts::GraderScore { .. } => Role::Grader,
        }
    }
}

/// One bind mount as the policy wants it and as inspect reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BindMount {
    /// Host path (absolute).
    pub source: String,
    /// Container path.
    pub target: String,
    /// Whether the container may not write through the mount.
    pub read_only: bool,
}

/// What `check` compares a created container with.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// The image id the container must run.
    pub image: ImageId,
    /// Numeric `uid:gid` the container runs as.
    pub user: String,
    /// Working directory.
    pub workdir: String,
    /// Entrypoint argument vector (the shim, for agent containers).
    pub entrypoint: Vec<String>,
    /// Command argument vector.
    pub cmd: Vec<String>,
    /// Every `NAME=value` of the environment, nothing more.
    pub env: BTreeSet<String>,
    /// Exactly these bind mounts.
    pub mounts: BTreeSet<BindMount>,
    /// tmpfs mount point → mount options (size, `exec`/`noexec`).
    pub tmpfs: BTreeMap<String, String>,
    /// Exactly these labels.
    pub labels: BTreeMap<String, String>,
    /// Memory limit in bytes; the swap limit equals it, so the container gets no swap.
    pub memory: i64,
    /// CPU limit in billionths of a CPU.
    pub nano_cpus: i64,
    /// Process/thread limit.
    pub pids: i64,
    /// The engine runtime the container must run under (`runsc` when the protocol requires
    /// gVisor, [`require_gvisor`]); `None`: the engine's default, not checked.
    pub runtime: Option<String>,
}

/// A container ready to create: the engine's create body and what it must look like after.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    /// What is sent to the engine's create call.
    pub body: ContainerCreateBody,
    /// What inspect must report afterwards; [`check`] compares the two.
    pub expected: Expected,
}

fn absolute(p: &Path) -> Result<String, RuntimeError> {
    if !p.is_absolute() {
        return Err(RuntimeError::Definition(
            crate::definition::DefinitionError::Invalid {
                path: p.display().to_string(),
                field: "mount".to_owned(),
                detail: "host paths given to the policy must be absolute".to_owned(),
            },
        ));
    }
    Ok(p.display().to_string())
}

fn bind(source: &Path, target: &str, read_only: bool) -> Result<BindMount, RuntimeError> {
    Ok(BindMount {
        source: absolute(source)?,
        target: target.to_owned(),
        read_only,
    })
}

fn invalid(path: &str, field: &str, detail: String) -> RuntimeError {
    RuntimeError::Definition(crate::definition::DefinitionError::Invalid {
        path: path.to_owned(),
        field: field.to_owned(),
        detail,
    })
}

/// The user a container runs as: the definition's `user`; else the image's `User` when it is a
/// numeric, non-root `uid:gid`; else [`DEFAULT_USER`]. Never root. A name, a bare uid (its group
/// would come from the image's `/etc/passwd`, which the controller does not read, or be root's)
/// or root in the image falls back to the default rather than failing.
pub fn effective_user(def: &RuntimeDef, image: &ImageConfig) -> Result<(u32, u32), RuntimeError> {
    if let Some(u) = &def.user {
        return parse_user(u).map_err(|d| invalid(&def.name, "user", d));
    }
    if let Some(ids) = image.user.as_deref().and_then(|u| parse_user(u).ok()) {
        return Ok(ids);
    }
    parse_user(DEFAULT_USER).map_err(|d| invalid(&def.name, "user", d))
}

/// The working directory: the definition's `workdir`; else its declared `workspace`; else the
/// image's absolute `WorkingDir`; else the workspace.
pub fn effective_workdir(def: &RuntimeDef, image: &ImageConfig) -> String {
    def.workdir
        .clone()
        .or_else(|| def.workspace.clone())
        .or_else(|| image.workdir.clone().filter(|w| w.starts_with('/')))
        .unwrap_or_else(|| paths::WORKSPACE.to_owned())
}

/// The environment: the image's `Env`, then (agent only) the definition's `[env]` per variable,
/// then `PATH` if neither set it. Sorted `NAME=value`, one per name.
fn effective_env(def: &RuntimeDef, image: &ImageConfig, role: Role) -> Vec<String> {
    let mut vars: BTreeMap<String, String> = image
        .env
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if role == Role::Agent {
        for (k, v) in &def.env {
            vars.insert(k.clone(), def.render_agent(v));
        }
    }
    vars.entry("PATH".to_owned())
        .or_insert_with(|| DEFAULT_PATH.to_owned());
    vars.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The prompt's text for `{prompt_text}`: UTF-8 without NUL, small enough to be one argument.
fn prompt_text(prompt: &Path) -> Result<String, RuntimeError> {
    let shown = prompt.display().to_string();
    let bytes = std::fs::read(prompt).map_err(|source| RuntimeError::HostIo {
        path: shown.clone(),
        source,
    })?;
    if bytes.len() > MAX_ARG_BYTES {
        return Err(invalid(
            &shown,
            PROMPT_TEXT,
            format!(
                "the prompt has {} bytes; one argument holds at most {MAX_ARG_BYTES} (use {{prompt}}, its path)",
                bytes.len()
            ),
        ));
    }
    if bytes.contains(&0) {
        return Err(invalid(
            &shown,
            PROMPT_TEXT,
            "the prompt contains a NUL byte, which no argument can hold".into(),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        invalid(
            &shown,
            PROMPT_TEXT,
            "the prompt is not UTF-8 text (use {prompt}, its path)".into(),
        )
    })
}

/// The harness's argument vector: the definition's command rendered (`{prompt_text}` in one
/// pass after the other variables, so the prompt's own text is never rendered), else the
/// image's `Entrypoint` + `Cmd` as they are.
fn harness_argv(
    def: &RuntimeDef,
    image: &ImageConfig,
    prompt: &Path,
) -> Result<Vec<String>, RuntimeError> {
    let Some(command) = &def.harness.command else {
        let argv: Vec<String> = image.entrypoint.iter().chain(&image.cmd).cloned().collect();
        if argv.is_empty() {
            return Err(invalid(
                &def.name,
                "harness.command",
                "absent, and the image has no Entrypoint or Cmd to run instead".into(),
            ));
        }
        return Ok(argv);
    };
    let text = if command.iter().any(|a| a.contains(PROMPT_TEXT)) {
        Some(prompt_text(prompt)?)
    } else {
        None
    };
    let mut argv = Vec::with_capacity(command.len());
    for a in command {
        let arg = match &text {
            Some(t) => a
                .split(PROMPT_TEXT)
                .map(|piece| def.render_agent(piece))
                .collect::<Vec<_>>()
                .join(t),
            None => def.render_agent(a),
        };
        if arg.len() > MAX_ARG_BYTES {
            return Err(invalid(
                &prompt.display().to_string(),
                PROMPT_TEXT,
                format!(
                    "the argument {a:?} becomes {} bytes; one argument holds at most {MAX_ARG_BYTES}",
                    arg.len()
                ),
            ));
        }
        argv.push(arg);
    }
    Ok(argv)
}

/// The one function that turns a definition, its image's own configuration, an attempt and a
/// role into a container under the policy.
pub fn container_spec(
    def: &RuntimeDef,
    image: &ImageId,
    image_config: &ImageConfig,
    facts: &AttemptFacts,
    mounts: &RoleMounts,
) -> Result<ContainerSpec, RuntimeError> {
    let role = mounts.role();
    let labels = labels(facts, role);
    let (uid, gid) = effective_user(def, image_config)?;
    let tmpfs = tmpfs_mounts(def, (uid, gid));
    let user = format!("{uid}:{gid}");
    let workdir = effective_workdir(def, image_config);
    let env = effective_env(def, image_config, role);
    let (binds, entrypoint, cmd) = match mounts {
        RoleMounts::Agent {
            workspace,
            prompt,
            socket,
            shim,
            state,
        } => agent_process(def, image_config, workspace, prompt, socket, shim, state)?,
        RoleMounts::Grader {
            workspace,
            hidden,
            out,
            oracle,
        } => grader_process(def, workspace, hidden, out, oracle.as_deref())?,
        RoleMounts::GraderRun {
            workspace,
            inputs,
            capture,
        } => grader_run_process(def, workspace, inputs.as_deref(), capture)?,
        RoleMounts::GraderScore {
            hidden,
            capture,
            out,
            oracle,
        } => grader_score_process(def, hidden, capture, out, oracle.as_deref())?,
    };
    let limits = Limits::of(def);
    let body = ContainerCreateBody {
        image: Some(image.0.clone()),
        user: Some(user.clone()),
        env: Some(env.clone()),
        entrypoint: Some(entrypoint.clone()),
        cmd: Some(cmd.clone()),
        working_dir: Some(workdir.clone()),
        labels: Some(labels.clone().into_iter().collect()),
        network_disabled: Some(true),
        attach_stdin: Some(false),
        open_stdin: Some(false),
        tty: Some(false),
        host_config: Some(host_config(&tmpfs, &binds, limits)),
        ..Default::default()
    };
    Ok(ContainerSpec {
        body,
        expected: Expected {
            image: image.clone(),
            user,
            workdir,
            entrypoint,
            cmd,
            env: env.into_iter().collect(),
            mounts: binds.into_iter().collect(),
            tmpfs,
            labels,
            memory: limits.memory,
            nano_cpus: limits.nano_cpus,
            pids: limits.pids,
            runtime: None,
        },
    })
}

/// The container's labels: the caller's extra ones, then the attempt's facts, the role and
/// `eval.managed`, which the extras cannot override.
fn labels(facts: &AttemptFacts, role: Role) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = facts.extra_labels.clone();
    for (k, v) in [
        (LABEL_PROTOCOL, &facts.protocol),
        (LABEL_IDENTITY, &facts.identity),
        (LABEL_ARM, &facts.arm),
        (LABEL_ATTEMPT, &facts.attempt),
    ] {
        labels.insert(k.to_owned(), v.clone());
    }
    labels.insert(LABEL_ROLE.to_owned(), role.as_str().to_owned());
    labels.insert(LABEL_MANAGED.to_owned(), "1".to_owned());
    labels
}

/// tmpfs mount point → options: `/tmp` and the definition's `tmpfs` are `noexec`, its
/// `tmpfs_exec` are `exec`.
fn tmpfs_mounts(def: &RuntimeDef, user: (u32, u32)) -> BTreeMap<String, String> {
    // `noexec` and `exec` are always stated: the engine's default for a tmpfs is `noexec`.
    let size = def.limits.tmpfs_mb;
    let noexec = format!("rw,nosuid,nodev,noexec,size={size}m");
    let exec = format!("rw,nosuid,nodev,exec,size={size}m");
    // A declared tmpfs belongs to the container's user: over a directory the image has
    // (`/usr/local/bin` for build outputs) the runtime gives the tmpfs that directory's mode,
    // root's 0755, which the non-root user could not write into otherwise. `/tmp` is 1777.
    let owner = format!(",uid={},gid={}", user.0, user.1);
    let mut tmpfs = BTreeMap::new();
    tmpfs.insert("/tmp".to_owned(), noexec.clone());
    for t in &def.tmpfs {
        tmpfs.insert(t.clone(), format!("{noexec}{owner}"));
    }
    for t in &def.tmpfs_exec {
        tmpfs.insert(t.clone(), format!("{exec}{owner}"));
    }
    tmpfs
}

/// Bind mounts, entrypoint and command of a container.
type Process = (Vec<BindMount>, Vec<String>, Vec<String>);

/// An agent container: workspace (rw), prompt, shim and the socket's directory (ro), the state
/// directory (rw) when there is one; the shim is the entrypoint and runs the harness after `--`.
fn agent_process(
    def: &RuntimeDef,
    image_config: &ImageConfig,
    workspace: &Path,
    prompt: &Path,
    socket: &Path,
    shim: &Path,
    state: &Option<PathBuf>,
) -> Result<Process, RuntimeError> {
    let socket_dir = socket.parent().ok_or_else(|| {
        RuntimeError::Definition(crate::definition::DefinitionError::Invalid {
            path: socket.display().to_string(),
            field: "socket".to_owned(),
            detail: "the socket path has no directory".to_owned(),
        })
    })?;
    let socket_name = socket
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    socket_dir_holds_only(socket_dir, &socket_name)?;
    let mut binds = vec![
        bind(workspace, def.workspace_path(), false)?,
        bind(prompt, paths::PROMPT, true)?,
        bind(shim, paths::SHIM, true)?,
        bind(socket_dir, paths::SOCKET_DIR, true)?,
    ];
    if let Some(state) = state {
        binds.push(bind(state, paths::STATE, false)?);
    }
    let mut cmd = vec![
        "--socket".to_owned(),
        format!("{}/{socket_name}", paths::SOCKET_DIR),
        "--port".to_owned(),
        def.relay_port.to_string(),
    ];
    for p in def.attested_paths() {
        cmd.push("--attest".to_owned());
        cmd.push(p);
    }
    cmd.push("--".to_owned());
    cmd.extend(harness_argv(def, image_config, prompt)?);
    Ok((binds, vec![paths::SHIM.to_owned()], cmd))
}

/// The whole socket directory is mounted: it must hold this attempt's socket and nothing else
/// (another attempt's socket there would be reachable from this container).
fn socket_dir_holds_only(socket_dir: &Path, socket_name: &str) -> Result<(), RuntimeError> {
    if let Ok(entries) = std::fs::read_dir(socket_dir) {
        let others: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != socket_name)
            .collect();
        if !others.is_empty() {
            return Err(violation(
                "(not created)",
                "mounts",
                format!(
                    "the socket directory {} holds more than the attempt's socket: {others:?}",
                    socket_dir.display()
                ),
            ));
        }
    }
    Ok(())
}

fn no_grader(def: &RuntimeDef, detail: &str) -> RuntimeError {
    RuntimeError::Definition(crate::definition::DefinitionError::Invalid {
        path: def.name.clone(),
        field: "grader".to_owned(),
        detail: detail.to_owned(),
    })
}

/// A one-stage grader container: the finished workspace and the hidden files (ro), the output
/// directory (rw); the definition's grader command is the entrypoint. A two-stage definition is
/// refused here: its `command` is a score stage and must never see the workspace.
fn grader_process(
    def: &RuntimeDef,
    workspace: &Path,
    hidden: &Path,
    out: &Path,
    oracle: Option<&Path>,
) -> Result<Process, RuntimeError> {
    let grader = def
        .grader
        .as_ref()
        .ok_or_else(|| no_grader(def, "the runtime definition has no grader command"))?;
    if grader.two_stage() {
        return Err(no_grader(
            def,
            "a two-stage grader's command is its score stage: it never gets the workspace",
        ));
    }
    let binds = vec![
        bind(workspace, def.workspace_path(), true)?,
        bind(hidden, paths::HIDDEN, true)?,
        bind(out, paths::OUT, false)?,
    ];
    score_process(def, &grader.command, binds, oracle)
}

/// The grader command over `binds` and, when the task lets its grader read it, the oracle record.
fn score_process(
    def: &RuntimeDef,
    command: &[String],
    mut binds: Vec<BindMount>,
    oracle: Option<&Path>,
) -> Result<Process, RuntimeError> {
    if let Some(o) = oracle {
        binds.push(bind(o, paths::ORACLE, true)?);
    }
    let argv: Vec<String> = command.iter().map(|a| def.render_grader(a)).collect();
    Ok((binds, argv, Vec::new()))
}

/// A two-stage grader's run stage: the workspace (ro), the public inputs (ro), the capture
/// (rw); nothing of the hidden files but those inputs, no `/out`.
fn grader_run_process(
    def: &RuntimeDef,
    workspace: &Path,
    inputs: Option<&Path>,
    capture: &Path,
) -> Result<Process, RuntimeError> {
    let grader = def
        .grader
        .as_ref()
        .ok_or_else(|| no_grader(def, "no grader"))?;
    let run = grader
        .run
        .as_ref()
        .ok_or_else(|| no_grader(def, "a one-stage grader has no run stage"))?;
    let mut binds = vec![
        bind(workspace, def.workspace_path(), true)?,
        bind(capture, grader.capture_path(), false)?,
    ];
    if let Some(i) = inputs {
        binds.push(bind(i, paths::INPUTS, true)?);
    }
    let argv: Vec<String> = run.iter().map(|a| def.render_grader_run(a)).collect();
    Ok((binds, argv, Vec::new()))
}

/// A two-stage grader's score stage: no workspace; the hidden files and the capture (ro), `/out`
/// (rw).
fn grader_score_process(
    def: &RuntimeDef,
    hidden: &Path,
    capture: &Path,
    out: &Path,
    oracle: Option<&Path>,
) -> Result<Process, RuntimeError> {
    let grader = def
        .grader
        .as_ref()
        .ok_or_else(|| no_grader(def, "no grader"))?;
    if !grader.two_stage() {
        return Err(no_grader(def, "a one-stage grader has no score stage"));
    }
    let binds = vec![
        bind(hidden, paths::HIDDEN, true)?,
        bind(capture, paths::CAPTURE, true)?,
        bind(out, paths::OUT, false)?,
    ];
    score_process(def, &grader.command, binds, oracle)
}

/// The definition's resource limits in the engine's units.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Bytes; the swap limit equals it.
    memory: i64,
    /// Billionths of a CPU.
    nano_cpus: i64,
    pids: i64,
}

impl Limits {
    fn of(def: &RuntimeDef) -> Limits {
        Limits {
            memory: (def.limits.memory_mb as i64).saturating_mul(1024 * 1024),
            nano_cpus: (def.limits.cpus * 1e9).round() as i64,
            pids: def.limits.pids as i64,
        }
    }
}

/// The isolation every container gets: no network, no capabilities, no new privileges, a
/// read-only root, private IPC, a bounded log, the limits, and exactly `binds` and `tmpfs`.
fn host_config(
    tmpfs: &BTreeMap<String, String>,
    binds: &[BindMount],
    limits: Limits,
) -> HostConfig {
    HostConfig {
        network_mode: Some("none".to_owned()),
        cap_drop: Some(vec!["ALL".to_owned()]),
        cap_add: Some(Vec::new()),
        security_opt: Some(vec![NO_NEW_PRIVILEGES.to_owned()]),
        readonly_rootfs: Some(true),
        privileged: Some(false),
        tmpfs: Some(tmpfs.clone().into_iter().collect::<HashMap<_, _>>()),
        memory: Some(limits.memory),
        memory_swap: Some(limits.memory),
        nano_cpus: Some(limits.nano_cpus),
        pids_limit: Some(limits.pids),
        log_config: Some(log_config()),
        ipc_mode: Some("private".to_owned()),
        mounts: Some(
            binds
                .iter()
                .map(|b| Mount {
                    target: Some(b.target.clone()),
                    source: Some(b.source.clone()),
                    typ: Some(MountType::BIND),
                    read_only: Some(b.read_only),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

fn violation(container: &str, field: &'static str, detail: String) -> RuntimeError {
    RuntimeError::PolicyViolation {
        container: container.to_owned(),
        field,
        detail,
    }
}

/// One deviation from the policy: the field and what is wrong with it.
type Deviation = (&'static str, String);

/// Compares a created container with the policy. `forbidden` are values (the upstream key)
/// that must appear nowhere in its environment, command or labels; an error never shows them.
/// The checks run in a fixed order and the first deviation is the one reported.
pub fn check(
    inspect: &ContainerInspectResponse,
    expected: &Expected,
    forbidden: &[&[u8]],
) -> Result<(), RuntimeError> {
    let config = inspect.config.clone().unwrap_or_default();
    let host = inspect.host_config.clone().unwrap_or_default();
    check_forbidden(&config, forbidden)
        .and_then(|()| check_process(inspect, &config, expected))
        .and_then(|()| check_isolation(inspect, &host))
        .and_then(|()| check_limits(&host, expected))
        .and_then(|()| check_mounts(inspect, &host, expected))
        .map_err(|(field, detail)| {
            violation(&inspect.id.clone().unwrap_or_default(), field, detail)
        })
}

/// The forbidden values appear nowhere in the environment, working directory, command,
/// entrypoint or labels; the error names the variable near it, never the value.
fn check_forbidden(config: &ContainerConfig, forbidden: &[&[u8]]) -> Result<(), Deviation> {
    for e in config
        .env
        .iter()
        .flatten()
        .chain(config.working_dir.iter())
        .chain(config.cmd.iter().flatten())
        .chain(config.entrypoint.iter().flatten())
        .chain(
            config
                .labels
                .iter()
                .flat_map(|l| l.iter().flat_map(|(k, v)| [k, v])),
        )
    {
        if forbidden
            .iter()
            .any(|f| !f.is_empty() && e.as_bytes().windows(f.len()).any(|w| w == *f))
        {
            let name = e.split('=').next().unwrap_or("").to_owned();
            return Err((
                "env",
                format!(
                    "a forbidden value (the key) appears in the container's configuration near {name:?}"
                ),
            ));
        }
    }
    Ok(())
}

/// What the container runs and as whom: environment, user, working directory, entrypoint,
/// command, image and labels, exactly as expected.
fn check_process(
    inspect: &ContainerInspectResponse,
    config: &ContainerConfig,
    expected: &Expected,
) -> Result<(), Deviation> {
    let env_set: BTreeSet<String> = config.env.clone().unwrap_or_default().into_iter().collect();
    if env_set != expected.env {
        let extra: Vec<_> = env_set
            .difference(&expected.env)
            .map(|e| e.split('=').next().unwrap_or("").to_owned())
            .collect();
        let missing: Vec<_> = expected
            .env
            .difference(&env_set)
            .map(|e| e.split('=').next().unwrap_or("").to_owned())
            .collect();
        return Err((
            "env",
            format!("unexpected variables {extra:?}, missing or changed {missing:?}"),
        ));
    }
    if config.user.as_deref() != Some(expected.user.as_str()) {
        return Err((
            "user",
            format!("{:?}, want {:?}", config.user, expected.user),
        ));
    }
    if config.working_dir.as_deref() != Some(expected.workdir.as_str()) {
        return Err((
            "workdir",
            format!("{:?}, want {:?}", config.working_dir, expected.workdir),
        ));
    }
    // An engine may report an empty vector as absent.
    if config.entrypoint.clone().unwrap_or_default() != expected.entrypoint {
        return Err((
            "entrypoint",
            format!("{:?}, want {:?}", config.entrypoint, expected.entrypoint),
        ));
    }
    let cmd = config.cmd.clone().unwrap_or_default();
    if cmd != expected.cmd {
        // Arguments may hold the prompt's text: name the first difference, not the values.
        let at = cmd
            .iter()
            .zip(&expected.cmd)
            .position(|(a, b)| a != b)
            .unwrap_or(cmd.len().min(expected.cmd.len()));
        return Err((
            "cmd",
            format!(
                "{} arguments, want {}; the first difference is argument {at}",
                cmd.len(),
                expected.cmd.len()
            ),
        ));
    }
    if inspect.image.as_deref() != Some(expected.image.0.as_str()) {
        return Err((
            "image",
            format!("{:?}, want {}", inspect.image, expected.image),
        ));
    }
    let labels = config.labels.clone().unwrap_or_default();
    for (k, want) in &expected.labels {
        if labels.get(k) != Some(want) {
            return Err((
                "labels",
                format!("{k} = {:?}, want {want:?}", labels.get(k)),
            ));
        }
    }
    Ok(())
}

/// The isolation: no network, every capability dropped and none added, not privileged,
/// `no-new-privileges`, a read-only root filesystem.
fn check_isolation(inspect: &ContainerInspectResponse, host: &HostConfig) -> Result<(), Deviation> {
    if host.network_mode.as_deref() != Some("none") {
        return Err((
            "network",
            format!("network_mode {:?}, want none", host.network_mode),
        ));
    }
    if let Some(nets) = inspect
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        && nets.keys().any(|k| k != "none")
    {
        return Err((
            "network",
            format!("attached to {:?}", nets.keys().collect::<Vec<_>>()),
        ));
    }
    if host.cap_drop.as_deref() != Some(&["ALL".to_owned()][..]) {
        return Err(("caps", format!("cap_drop {:?}, want [ALL]", host.cap_drop)));
    }
    if host.cap_add.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(("caps", format!("cap_add {:?}", host.cap_add)));
    }
    if host.privileged == Some(true) {
        return Err(("privileged", "privileged container".to_owned()));
    }
    if !host
        .security_opt
        .iter()
        .flatten()
        .any(|s| s == NO_NEW_PRIVILEGES || s == "no-new-privileges:true")
    {
        return Err((
            "security_opt",
            format!("{:?} lacks no-new-privileges", host.security_opt),
        ));
    }
    if host.readonly_rootfs != Some(true) {
        return Err(("readonly", "the root filesystem is writable".to_owned()));
    }
    Ok(())
}

/// The resources: tmpfs mounts and their options, memory without swap, CPUs, pids, the engine
/// runtime when one is required, and the bounded log.
fn check_limits(host: &HostConfig, expected: &Expected) -> Result<(), Deviation> {
    let tmpfs: BTreeMap<String, String> =
        host.tmpfs.clone().unwrap_or_default().into_iter().collect();
    if tmpfs != expected.tmpfs {
        return Err(("tmpfs", format!("{tmpfs:?}, want {:?}", expected.tmpfs)));
    }
    if host.memory != Some(expected.memory) || host.memory_swap != Some(expected.memory) {
        return Err((
            "memory",
            format!(
                "{:?}/{:?}, want {}",
                host.memory, host.memory_swap, expected.memory
            ),
        ));
    }
    if host.nano_cpus != Some(expected.nano_cpus) {
        return Err((
            "cpus",
            format!("{:?}, want {}", host.nano_cpus, expected.nano_cpus),
        ));
    }
    if host.pids_limit != Some(expected.pids) {
        return Err((
            "pids",
            format!("{:?}, want {}", host.pids_limit, expected.pids),
        ));
    }
    if let Some(want) = &expected.runtime
        && host.runtime.as_deref() != Some(want.as_str())
    {
        return Err((
            "runtime",
            format!("{:?}, the protocol requires {want}", host.runtime),
        ));
    }
    // The engine may add options of its own (daemon `log-opts`); these two must be ours.
    let log = host.log_config.clone().unwrap_or_default();
    let opt = |k: &str| {
        log.config
            .as_ref()
            .and_then(|c| c.get(k))
            .map(String::as_str)
    };
    if log.typ.as_deref() != Some(LOG_DRIVER)
        || opt("max-size") != Some(LOG_MAX_SIZE)
        || opt("max-file") != Some(LOG_MAX_FILE)
    {
        return Err((
            "log_config",
            format!(
                "{:?} {:?}, want {LOG_DRIVER} with max-size={LOG_MAX_SIZE}, max-file={LOG_MAX_FILE}",
                log.typ, log.config
            ),
        ));
    }
    Ok(())
}

/// What the container can reach on the host: no devices, no `binds`, and exactly the expected
/// bind mounts with their read-only flags.
fn check_mounts(
    inspect: &ContainerInspectResponse,
    host: &HostConfig,
    expected: &Expected,
) -> Result<(), Deviation> {
    if host.devices.as_ref().is_some_and(|d| !d.is_empty()) {
        return Err(("devices", "devices are mapped".to_owned()));
    }
    if host.binds.as_ref().is_some_and(|b| !b.is_empty()) {
        return Err(("mounts", format!("extra binds {:?}", host.binds)));
    }
    let mut mounts = BTreeSet::new();
    for m in inspect.mounts.iter().flatten() {
        if m.typ.as_deref() != Some("bind") {
            return Err((
                "mounts",
                format!("{:?} mount at {:?}", m.typ, m.destination),
            ));
        }
        mounts.insert(BindMount {
            source: m.source.clone().unwrap_or_default(),
            target: m.destination.clone().unwrap_or_default(),
            read_only: m.rw != Some(true),
        });
    }
    if mounts != expected.mounts {
        return Err(("mounts", format!("{mounts:?}, want {:?}", expected.mounts)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerConfig, MountPoint};

    fn def() -> RuntimeDef {
        RuntimeDef::parse(
            r#"
name = "t"
tmpfs = ["/home/agent"]
[image]
reference = "eval-runtime/t"
[harness]
command = ["/agent", "{prompt}"]
[env]
HOME = "/home/agent"
"#,
            "t.toml",
        )
        .unwrap()
    }

    fn spec() -> ContainerSpec {
        spec_with_state(None)
    }

    /// The oracle record is mounted read-only, and only when the task lets the grader read it.
    #[test]
    fn a_grader_sees_the_oracle_record_only_when_given_read_only() {
        let d = RuntimeDef::parse(
            "name = \"g\"\n[image]\nreference = \"eval-runtime/g\"\n[harness]\ncommand = [\"/a\"]\n[grader]\ncommand = [\"/g\", \"{oracle_record}\", \"{out}\"]\n",
            "g.toml",
        )
        .unwrap();
        let with = grader_process(
            &d,
            Path::new("/w"),
            Path::new("/h"),
            Path::new("/o"),
            Some(Path::new("/r")),
        )
        .unwrap();
        assert!(with.0.contains(&BindMount {
            source: "/r".into(),
            target: paths::ORACLE.into(),
            read_only: true,
        }));
        assert_eq!(with.1, ["/g", "/oracle/record.json", "/out/score.json"]);
        let without =
            grader_process(&d, Path::new("/w"), Path::new("/h"), Path::new("/o"), None).unwrap();
        assert_eq!(without.0.len(), 3);
        assert!(without.0.iter().all(|b| b.target != paths::ORACLE));
    }

    /// The agent spec of `def()`, with or without the attempt's state directory mounted.
    fn spec_with_state(state: Option<&str>) -> ContainerSpec {
        let facts = AttemptFacts {
            protocol: "p".into(),
            identity: "i".into(),
            arm: "a".into(),
            attempt: "x".into(),
            extra_labels: BTreeMap::new(),
        };
        let mounts = RoleMounts::Agent {
            workspace: "/w".into(),
            prompt: "/p/prompt.md".into(),
            socket: "/s/a.sock".into(),
            shim: "/bin/shim".into(),
            state: state.map(Into::into),
        };
        container_spec(
            &def(),
            &ImageId("sha256:ab".into()),
            &ImageConfig::default(),
            &facts,
            &mounts,
        )
        .unwrap()
    }

    /// What an engine that obeyed the spec would report.
    fn obeyed(s: &ContainerSpec) -> ContainerInspectResponse {
        let b = &s.body;
        ContainerInspectResponse {
            id: Some("c1".into()),
            image: b.image.clone(),
            config: Some(ContainerConfig {
                user: b.user.clone(),
                env: b.env.clone(),
                working_dir: b.working_dir.clone(),
                cmd: b.cmd.clone(),
                entrypoint: b.entrypoint.clone(),
                labels: b.labels.clone(),
                ..Default::default()
            }),
            host_config: b.host_config.clone(),
            mounts: Some(
                s.expected
                    .mounts
                    .iter()
                    .map(|m| MountPoint {
                        typ: Some("bind".into()),
                        source: Some(m.source.clone()),
                        destination: Some(m.target.clone()),
                        rw: Some(!m.read_only),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn field(r: Result<(), RuntimeError>) -> &'static str {
        match r {
            Err(RuntimeError::PolicyViolation { field, .. }) => field,
            other => panic!("expected a violation, got {other:?}"),
        }
    }

    /// A definition that keeps its metrics in the state directory gets exactly one more mount,
    /// writable, at the fixed path outside the workspace; a container without it is refused.
    #[test]
    fn the_state_directory_is_one_more_writable_mount_outside_the_workspace() {
        let s = spec_with_state(Some("/attempt/state"));
        assert_eq!(s.expected.mounts.len(), 5);
        assert!(s.expected.mounts.contains(&BindMount {
            source: "/attempt/state".into(),
            target: paths::STATE.into(),
            read_only: false,
        }));
        check(&obeyed(&s), &s.expected, &[]).unwrap();
        let without = spec();
        assert!(check(&obeyed(&without), &s.expected, &[]).is_err());
    }

    #[test]
    fn an_obedient_container_passes_and_each_deviation_is_named() {
        let s = spec();
        let ok = obeyed(&s);
        check(&ok, &s.expected, &[b"secret-key"]).unwrap();
        assert_eq!(
            s.expected.mounts.len(),
            4,
            "workspace, prompt, shim, socket dir"
        );
        assert!(s.expected.mounts.contains(&BindMount {
            source: "/s".into(),
            target: paths::SOCKET_DIR.into(),
            read_only: true
        }));

        let mut i = ok.clone();
        i.config.as_mut().unwrap().user = Some("0:0".into());
        assert_eq!(field(check(&i, &s.expected, &[])), "user");

        let mut i = ok.clone();
        i.host_config.as_mut().unwrap().cap_drop = Some(vec![]);
        assert_eq!(field(check(&i, &s.expected, &[])), "caps");

        let mut i = ok.clone();
        i.host_config.as_mut().unwrap().cap_add = Some(vec!["NET_ADMIN".into()]);
        assert_eq!(field(check(&i, &s.expected, &[])), "caps");

        let mut i = ok.clone();
        i.host_config.as_mut().unwrap().readonly_rootfs = Some(false);
        assert_eq!(field(check(&i, &s.expected, &[])), "readonly");

        let mut i = ok.clone();
        i.host_config.as_mut().unwrap().network_mode = Some("host".into());
        assert_eq!(field(check(&i, &s.expected, &[])), "network");

        let mut i = ok.clone();
        i.host_config.as_mut().unwrap().security_opt = Some(vec![]);
        assert_eq!(field(check(&i, &s.expected, &[])), "security_opt");

        let mut i = ok.clone();
        i.config
            .as_mut()
            .unwrap()
            .env
            .as_mut()
            .unwrap()
            .push("EXTRA=1".into());
        assert_eq!(field(check(&i, &s.expected, &[])), "env");

        // The key anywhere in the configuration, and the error never repeats it.
        let mut i = ok.clone();
        i.config
            .as_mut()
            .unwrap()
            .cmd
            .as_mut()
            .unwrap()
            .push("--key=secret-key".into());
        let e = check(&i, &s.expected, &[b"secret-key"]).unwrap_err();
        assert!(!e.to_string().contains("secret-key"), "{e}");
        assert_eq!(
            e.fault(),
            Some(eval_core::fault::FaultCode::PolicyViolation)
        );

        let mut i = ok.clone();
        i.mounts.as_mut().unwrap()[0].rw = Some(true);
        i.mounts.as_mut().unwrap()[1].rw = Some(true);
        assert_eq!(field(check(&i, &s.expected, &[])), "mounts");

        let mut i = ok.clone();
        i.host_config.as_mut().unwrap().tmpfs = None;
        assert_eq!(field(check(&i, &s.expected, &[])), "tmpfs");

        let mut i = ok.clone();
        i.config.as_mut().unwrap().working_dir = Some("/".into());
        assert_eq!(field(check(&i, &s.expected, &[])), "workdir");

        let mut i = ok.clone();
        i.config.as_mut().unwrap().entrypoint = Some(vec!["/bin/sh".into()]);
        assert_eq!(field(check(&i, &s.expected, &[])), "entrypoint");

        let mut i = ok.clone();
        i.config.as_mut().unwrap().cmd.as_mut().unwrap().pop();
        assert_eq!(field(check(&i, &s.expected, &[])), "cmd");

        let mut i = ok;
        i.host_config.as_mut().unwrap().pids_limit = None;
        assert_eq!(field(check(&i, &s.expected, &[])), "pids");
    }

    /// A protocol that requires gVisor gets containers created under eval's own `eval-runsc`
    /// (not the machine's shared `runsc`), and one the engine made under another runtime (the
    /// machine's `runsc` included, or its default) is refused.
    #[test]
    fn a_gvisor_container_must_run_under_evals_own_runsc() {
        let plain = spec();
        assert_eq!(plain.body.host_config.as_ref().unwrap().runtime, None);
        let mut i = obeyed(&plain);
        i.host_config.as_mut().unwrap().runtime = Some("runc".into());
        check(&i, &plain.expected, &[]).unwrap();
        let mut s = spec();
        require_gvisor(&mut s);
        assert_eq!(
            s.body.host_config.as_ref().unwrap().runtime.as_deref(),
            Some("eval-runsc")
        );
        check(&obeyed(&s), &s.expected, &[]).unwrap();
        let mut shared = obeyed(&s);
        shared.host_config.as_mut().unwrap().runtime = Some("runsc".into());
        assert!(check(&shared, &s.expected, &[]).is_err());
        // The sandbox's host cgroup gets room for the Sentry beside the arm's tasks, and the
        // arm's own number (what a runc container gets) is refused under gVisor.
        let arms = plain.expected.pids;
        let want = arms * GVISOR_PIDS_PER_TASK + GVISOR_SANDBOX_PIDS;
        assert_eq!(s.expected.pids, want);
        assert_eq!(s.body.host_config.as_ref().unwrap().pids_limit, Some(want));
        let mut i = obeyed(&s);
        i.host_config.as_mut().unwrap().pids_limit = Some(arms);
        assert_eq!(field(check(&i, &s.expected, &[])), "pids");
        for other in [None, Some("runc".to_owned()), Some("kata".to_owned())] {
            let mut i = obeyed(&s);
            i.host_config.as_mut().unwrap().runtime = other;
            assert_eq!(field(check(&i, &s.expected, &[])), "runtime");
        }
    }

    /// The engine's log of the container is bounded: asked for at create, and a container the
    /// engine made without the bound (its default driver, another size, rotation) is refused.
    #[test]
    fn the_engines_log_is_bounded_and_checked() {
        let s = spec();
        let asked = s
            .body
            .host_config
            .as_ref()
            .unwrap()
            .log_config
            .clone()
            .unwrap();
        assert_eq!(asked.typ.as_deref(), Some("json-file"));
        let opts = asked.config.clone().unwrap();
        assert_eq!(opts["max-size"], LOG_MAX_SIZE);
        assert_eq!(opts["max-file"], "1");
        check(&obeyed(&s), &s.expected, &[]).unwrap();
        // Options the daemon adds of its own are fine.
        let mut i = obeyed(&s);
        let lc = i.host_config.as_mut().unwrap().log_config.as_mut().unwrap();
        lc.config
            .as_mut()
            .unwrap()
            .insert("compress".into(), "false".into());
        check(&i, &s.expected, &[]).unwrap();
        for change in [
            |l: &mut HostConfigLogConfig| l.typ = Some("local".into()),
            |l: &mut HostConfigLogConfig| l.config = None,
            |l: &mut HostConfigLogConfig| {
                l.config
                    .as_mut()
                    .unwrap()
                    .insert("max-size".into(), "100g".into());
            },
            |l: &mut HostConfigLogConfig| {
                l.config
                    .as_mut()
                    .unwrap()
                    .insert("max-file".into(), "10".into());
            },
        ] {
            let mut i = obeyed(&s);
            change(i.host_config.as_mut().unwrap().log_config.as_mut().unwrap());
            assert_eq!(field(check(&i, &s.expected, &[])), "log_config");
        }
        let mut i = obeyed(&s);
        i.host_config.as_mut().unwrap().log_config = None;
        assert_eq!(field(check(&i, &s.expected, &[])), "log_config");
    }

    #[test]
    fn a_shared_socket_directory_is_refused() {
        let dir = std::env::temp_dir().join(format!("eval-sockdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("other-attempt.sock"), b"").unwrap();
        let facts = AttemptFacts {
            protocol: "p".into(),
            identity: "i".into(),
            arm: "a".into(),
            attempt: "x".into(),
            extra_labels: BTreeMap::new(),
        };
        let mounts = RoleMounts::Agent {
            workspace: "/w".into(),
            prompt: "/p".into(),
            socket: dir.join("a.sock"),
            shim: "/shim".into(),
            state: None,
        };
        let e = container_spec(
            &def(),
            &ImageId("sha256:ab".into()),
            &ImageConfig::default(),
            &facts,
            &mounts,
        )
        .unwrap_err();
        assert_eq!(
            e.fault(),
            Some(eval_core::fault::FaultCode::PolicyViolation)
        );
        assert!(e.to_string().contains("other-attempt.sock"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn relative_host_paths_are_refused() {
        let facts = AttemptFacts {
            protocol: "p".into(),
            identity: "i".into(),
            arm: "a".into(),
            attempt: "x".into(),
            extra_labels: BTreeMap::new(),
        };
        let mounts = RoleMounts::Agent {
            workspace: "w".into(),
            prompt: "/p".into(),
            socket: "/s/a.sock".into(),
            shim: "/shim".into(),
            state: None,
        };
        assert!(
            container_spec(
                &def(),
                &ImageId("sha256:ab".into()),
                &ImageConfig::default(),
                &facts,
                &mounts,
            )
            .is_err()
        );
    }

    fn facts() -> AttemptFacts {
        AttemptFacts {
            protocol: "p".into(),
            identity: "i".into(),
            arm: "a".into(),
            attempt: "x".into(),
            extra_labels: BTreeMap::new(),
        }
    }

    fn agent(prompt: &Path) -> RoleMounts {
        RoleMounts::Agent {
            workspace: "/w".into(),
            prompt: prompt.to_path_buf(),
            socket: "/nonexistent-eval-socket-dir/a.sock".into(),
            shim: "/bin/shim".into(),
            state: None,
        }
    }

    fn spec_of(top: &str, tables: &str, img: &ImageConfig) -> Result<ContainerSpec, RuntimeError> {
        let def = RuntimeDef::parse(
            &format!("name = \"t\"\n{top}\n[image]\nreference = \"r\"\n{tables}"),
            "t.toml",
        )
        .unwrap();
        container_spec(
            &def,
            &ImageId("sha256:ab".into()),
            img,
            &facts(),
            &agent(Path::new("/p/prompt.md")),
        )
    }

    fn image() -> ImageConfig {
        ImageConfig {
            env: vec![
                "PATH=/img/bin:/bin".into(),
                "LANG=C.UTF-8".into(),
                "HOME=/root".into(),
                "EQ=a=b".into(),
            ],
            workdir: Some("/src".into()),
            user: Some("1000:1001".into()),
            entrypoint: vec!["/entry".into(), "-x".into()],
            cmd: vec!["run".into()],
        }
    }

    /// The part of the command after the shim's own arguments.
    fn harness(s: &ContainerSpec) -> Vec<String> {
        let cmd = s.body.cmd.clone().unwrap();
        let at = cmd.iter().position(|a| a == "--").unwrap();
        cmd[at + 1..].to_vec()
    }

    /// A multi-round container's shim gets each round's limit and the rendered continue
    /// command before its `--`; the harness argv and the policy's expectation follow; a
    /// definition that cannot continue a session is refused.
    #[test]
    fn rounds_reach_the_shim_before_its_separator_and_the_check_expects_them() {
        let tables = "[harness]\ncommand = [\"/agent\", \"{prompt}\"]\ncontinue_command = [\"/agent\", \"--resume\", \"{prompt}\"]";
        let def = RuntimeDef::parse(
            &format!("name = \"t\"\n[image]\nreference = \"r\"\n{tables}"),
            "t.toml",
        )
        .unwrap();
        let mut s = spec_of("", tables, &image()).unwrap();
        with_rounds(&mut s, &def, &[600, 30]).unwrap();
        let cmd = s.body.cmd.clone().unwrap();
        let at = cmd.iter().position(|a| a == "--").unwrap();
        let before: Vec<&str> = cmd[..at].iter().map(String::as_str).collect();
        let tail = &before[before.len() - 10..];
        assert_eq!(
            tail,
            [
                "--round-timeout",
                "600",
                "--round-timeout",
                "30",
                "--continue",
                "/agent",
                "--continue",
                "--resume",
                "--continue",
                paths::PROMPT
            ]
        );
        assert_eq!(harness(&s), ["/agent", paths::PROMPT]);
        assert_eq!(s.expected.cmd, cmd);
        let plain = RuntimeDef::parse(
            "name = \"t\"\n[image]\nreference = \"r\"\n[harness]\ncommand = [\"/agent\"]",
            "t.toml",
        )
        .unwrap();
        let e = with_rounds(&mut s, &plain, &[1, 2]).unwrap_err();
        assert!(e.to_string().contains("harness.continue_command"), "{e}");
        // One round never continues: its limit reaches the shim, no --continue.
        let mut one = spec_of("", "[harness]\ncommand = [\"/agent\"]", &image()).unwrap();
        with_rounds(&mut one, &plain, &[45]).unwrap();
        let cmd = one.body.cmd.clone().unwrap();
        let at = cmd.iter().position(|a| a == "--").unwrap();
        assert_eq!(cmd[at - 2..at], ["--round-timeout", "45"]);
        assert!(!cmd.iter().any(|a| a == "--continue"), "{cmd:?}");
    }

    #[test]
    fn the_image_config_is_the_base_when_the_definition_is_silent() {
        let s = spec_of("", "[env]\nHOME = \"/home/agent\"", &image()).unwrap();
        let env = s.body.env.clone().unwrap();
        assert_eq!(
            env,
            [
                "EQ=a=b",
                "HOME=/home/agent",
                "LANG=C.UTF-8",
                "PATH=/img/bin:/bin"
            ],
            "the image's Env, the definition's HOME over the image's"
        );
        assert_eq!(s.expected.env, env.iter().cloned().collect());
        assert_eq!(s.body.user.as_deref(), Some("1000:1001"));
        assert_eq!(s.expected.user, "1000:1001");
        assert_eq!(s.body.working_dir.as_deref(), Some("/src"));
        assert_eq!(s.expected.workdir, "/src");
        // The shim stays the entrypoint and runs the image's Entrypoint + Cmd.
        assert_eq!(s.body.entrypoint, Some(vec![paths::SHIM.to_owned()]));
        assert_eq!(harness(&s), ["/entry", "-x", "run"]);
        assert_eq!(s.expected.cmd, s.body.cmd.clone().unwrap());
    }

    #[test]
    fn the_definition_overrides_each_field_and_may_set_path() {
        let s = spec_of(
            "user = \"2000:2000\"\nworkdir = \"/workspace/sub\"",
            "[harness]\ncommand = [\"/agent\", \"{prompt}\"]\n[env]\nPATH = \"/opt/venv/bin:/usr/bin:/bin\"",
            &image(),
        )
        .unwrap();
        let env = s.body.env.clone().unwrap();
        assert!(
            env.contains(&"PATH=/opt/venv/bin:/usr/bin:/bin".to_owned()),
            "{env:?}"
        );
        assert_eq!(env.iter().filter(|e| e.starts_with("PATH=")).count(), 1);
        assert!(env.contains(&"LANG=C.UTF-8".to_owned()), "{env:?}");
        assert_eq!(s.body.user.as_deref(), Some("2000:2000"));
        assert_eq!(s.body.working_dir.as_deref(), Some("/workspace/sub"));
        assert_eq!(harness(&s), ["/agent", paths::PROMPT]);
    }

    #[test]
    fn a_declared_workspace_is_where_the_workspace_is_mounted_and_the_harness_starts() {
        let s = spec_of(
            "workspace = \"/app\"\ntmpfs_exec = [\"/usr/local/bin\"]",
            "[harness]\ncommand = [\"/agent\", \"{workspace}\"]",
            &image(),
        )
        .unwrap();
        let ws: Vec<_> = s
            .expected
            .mounts
            .iter()
            .filter(|m| m.source == "/w")
            .collect();
        assert_eq!(ws.len(), 1);
        assert_eq!((ws[0].target.as_str(), ws[0].read_only), ("/app", false));
        assert!(
            !s.expected
                .mounts
                .iter()
                .any(|m| m.target == paths::WORKSPACE)
        );
        // Over the image's WorkingDir; `{workspace}` renders to it.
        assert_eq!(s.body.working_dir.as_deref(), Some("/app"));
        assert_eq!(harness(&s), ["/agent", "/app"]);
        // The root stays read-only; the exec path is a tmpfs stated `exec`.
        let host = s.body.host_config.as_ref().unwrap();
        assert_eq!(host.readonly_rootfs, Some(true));
        let t = host.tmpfs.as_ref().unwrap();
        assert!(t["/usr/local/bin"].contains(",exec,"), "{t:?}");
        assert!(t["/tmp"].contains("noexec"), "{t:?}");
        // The grader of a definition declaring it finds the workspace there too, read-only.
        let def = RuntimeDef::parse(
            "name = \"g\"\nworkspace = \"/app\"\n[image]\nreference = \"r\"\n[grader]\ncommand = [\"/g\", \"{workspace}\"]",
            "g.toml",
        )
        .unwrap();
        let g = container_spec(
            &def,
            &ImageId("sha256:ab".into()),
            &image(),
            &facts(),
            &RoleMounts::Grader {
                workspace: "/w".into(),
                hidden: "/h".into(),
                out: "/o".into(),
                oracle: None,
            },
        )
        .unwrap();
        assert!(
            g.expected
                .mounts
                .iter()
                .any(|m| m.target == "/app" && m.source == "/w" && m.read_only)
        );
        assert_eq!(
            g.body.entrypoint,
            Some(vec!["/g".to_owned(), "/app".to_owned()])
        );
    }

    #[test]
    fn without_image_or_definition_values_the_defaults_apply() {
        let s = spec_of(
            "",
            "[harness]\ncommand = [\"/agent\"]",
            &ImageConfig::default(),
        )
        .unwrap();
        assert_eq!(
            s.body.env.clone().unwrap(),
            [format!("PATH={DEFAULT_PATH}")]
        );
        assert_eq!(s.body.user.as_deref(), Some(DEFAULT_USER));
        assert_eq!(s.body.working_dir.as_deref(), Some(paths::WORKSPACE));
        // A relative WorkingDir is not a place: the workspace instead.
        let rel = ImageConfig {
            workdir: Some("src".into()),
            ..ImageConfig::default()
        };
        let s = spec_of("", "[harness]\ncommand = [\"/agent\"]", &rel).unwrap();
        assert_eq!(s.body.working_dir.as_deref(), Some(paths::WORKSPACE));
        // Neither a command nor an Entrypoint/Cmd: nothing to run, said so.
        let e = spec_of("", "", &ImageConfig::default()).unwrap_err();
        assert!(e.to_string().contains("harness.command"), "{e}");
    }

    #[test]
    fn a_two_stage_graders_run_stage_gets_no_answers_and_its_score_stage_no_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        let def = RuntimeDef::parse(
            "name = \"g\"\n[image]\nreference = \"r\"\n[grader]\nrun = [\"/bin/sh\", \"{inputs}/g\", \"{workspace}\", \"{capture}\"]\nrun_inputs = \"public\"\ncapture = \"/logs/verifier\"\ncommand = [\"/bin/sh\", \"{hidden}/g\", \"{capture}\", \"{out}\"]",
            "g.toml",
        )
        .unwrap();
        let img = ImageId("sha256:ab".into());
        let targets = |m: &RoleMounts| {
            let s = container_spec(&def, &img, &image(), &facts(), m).unwrap();
            let mut t: Vec<(String, bool)> = s
                .expected
                .mounts
                .iter()
                .map(|b| (b.target.clone(), b.read_only))
                .collect();
            t.sort();
            (t, s.body.entrypoint.unwrap())
        };
        let (run, argv) = targets(&RoleMounts::GraderRun {
            workspace: p("ws"),
            inputs: Some(p("public")),
            capture: p("cap"),
        });
        assert_eq!(
            run,
            [
                (paths::INPUTS.to_owned(), true),
                ("/logs/verifier".to_owned(), false),
                (paths::WORKSPACE.to_owned(), true),
            ]
        );
        assert_eq!(
            argv,
            ["/bin/sh", "/inputs/g", "/workspace", "/logs/verifier"]
        );
        let (score, argv) = targets(&RoleMounts::GraderScore {
            hidden: p("hidden"),
            capture: p("copy"),
            out: p("out"),
            oracle: None,
        });
        assert_eq!(
            score,
            [
                (paths::CAPTURE.to_owned(), true),
                (paths::HIDDEN.to_owned(), true),
                (paths::OUT.to_owned(), false),
            ]
        );
        assert_eq!(
            argv,
            ["/bin/sh", "/hidden/g", "/capture", "/out/score.json"]
        );
        // Its command is never run as a one-stage grader beside the workspace.
        let e = container_spec(
            &def,
            &img,
            &image(),
            &facts(),
            &RoleMounts::Grader {
                workspace: p("ws"),
                hidden: p("hidden"),
                out: p("out"),
                oracle: None,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("score stage"), "{e}");
    }

    #[test]
    fn only_a_numeric_non_root_image_user_is_used() {
        for (image_user, want) in [
            ("1000:1001", "1000:1001"),
            ("0:0", DEFAULT_USER),
            ("1000:0", DEFAULT_USER),
            ("0:1000", DEFAULT_USER),
            ("root", DEFAULT_USER),
            ("agent", DEFAULT_USER),
            ("1000", DEFAULT_USER),
            ("agent:agent", DEFAULT_USER),
        ] {
            let img = ImageConfig {
                user: Some(image_user.into()),
                ..image()
            };
            let s = spec_of("", "", &img).unwrap();
            assert_eq!(
                s.body.user.as_deref(),
                Some(want),
                "image User {image_user:?}"
            );
        }
        // The definition's user wins even over a usable image user.
        let s = spec_of("user = \"3000:3000\"", "", &image()).unwrap();
        assert_eq!(s.body.user.as_deref(), Some("3000:3000"));
    }

    #[test]
    fn the_prompt_text_is_one_argument_and_is_never_rendered() {
        let dir = tempfile::tempdir().unwrap();
        let prompt = dir.path().join("prompt.md");
        let text =
            "Fix the bug in \"a b.py\"; don't run `rm -rf /` $(x) {workspace} {prompt}\nline 2";
        std::fs::write(&prompt, text).unwrap();
        let def = RuntimeDef::parse(
            "name = \"t\"\n[image]\nreference = \"r\"\n[harness]\ncommand = [\"mini\", \"-t\", \"{prompt_text}\", \"--task={prompt_text}!\", \"{prompt}\", \"{workspace}\"]",
            "t.toml",
        )
        .unwrap();
        let s = container_spec(
            &def,
            &ImageId("sha256:ab".into()),
            &image(),
            &facts(),
            &agent(&prompt),
        )
        .unwrap();
        assert_eq!(
            harness(&s),
            [
                "mini".to_owned(),
                "-t".to_owned(),
                text.to_owned(),
                format!("--task={text}!"),
                paths::PROMPT.to_owned(),
                paths::WORKSPACE.to_owned(),
            ]
        );
        // Text no argument can carry is refused, naming the prompt file.
        std::fs::write(&prompt, b"a\0b").unwrap();
        let e = container_spec(
            &def,
            &ImageId("sha256:ab".into()),
            &image(),
            &facts(),
            &agent(&prompt),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("NUL") && e.to_string().contains("prompt.md"),
            "{e}"
        );
        std::fs::write(&prompt, vec![b'a'; MAX_ARG_BYTES + 1]).unwrap();
        let e = container_spec(
            &def,
            &ImageId("sha256:ab".into()),
            &image(),
            &facts(),
            &agent(&prompt),
        )
        .unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
    }

    #[test]
    fn tmpfs_options_state_exec_or_noexec() {
        let s = spec_of(
            "tmpfs = [\"/home/agent\"]\ntmpfs_exec = [\"/opt/cache\"]",
            "[limits]\nmemory_mb = 512\ncpus = 1.0\npids = 64\ntmpfs_mb = 32",
            &image(),
        )
        .unwrap();
        let want: BTreeMap<String, String> = [
            ("/tmp", "rw,nosuid,nodev,noexec,size=32m"),
            (
                "/home/agent",
                "rw,nosuid,nodev,noexec,size=32m,uid=1000,gid=1001",
            ),
            (
                "/opt/cache",
                "rw,nosuid,nodev,exec,size=32m,uid=1000,gid=1001",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(s.expected.tmpfs, want);
        let body: BTreeMap<String, String> = s
            .body
            .host_config
            .clone()
            .unwrap()
            .tmpfs
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(body, want);
    }

    #[test]
    fn a_changed_image_derived_field_is_caught_after_create() {
        let s = spec_of("", "", &image()).unwrap();
        let ok = obeyed(&s);
        check(&ok, &s.expected, &[]).unwrap();
        // The engine (or an image swapped underneath) changed one of the image's variables.
        let mut i = ok.clone();
        let env = i.config.as_mut().unwrap().env.as_mut().unwrap();
        let at = env.iter().position(|e| e.starts_with("LANG=")).unwrap();
        env[at] = "LANG=C".into();
        assert_eq!(field(check(&i, &s.expected, &[])), "env");
        let mut i = ok.clone();
        i.config.as_mut().unwrap().user = Some(DEFAULT_USER.into());
        assert_eq!(field(check(&i, &s.expected, &[])), "user");
        let mut i = ok.clone();
        i.config.as_mut().unwrap().working_dir = Some(paths::WORKSPACE.into());
        assert_eq!(field(check(&i, &s.expected, &[])), "workdir");
        let mut i = ok.clone();
        *i.config
            .as_mut()
            .unwrap()
            .cmd
            .as_mut()
            .unwrap()
            .last_mut()
            .unwrap() = "other".into();
        assert_eq!(field(check(&i, &s.expected, &[])), "cmd");
        // An exec tmpfs the policy did not ask for.
        let mut i = ok;
        i.host_config
            .as_mut()
            .unwrap()
            .tmpfs
            .as_mut()
            .unwrap()
            .insert("/tmp".into(), "rw,nosuid,nodev,exec,size=64m".into());
        assert_eq!(field(check(&i, &s.expected, &[])), "tmpfs");
        // The key in a variable the image brought is refused like any other.
        let leaky = ImageConfig {
            env: vec!["TOKEN=sk-secret".into()],
            ..image()
        };
        let s = spec_of("", "", &leaky).unwrap();
        let e = check(&obeyed(&s), &s.expected, &[b"sk-secret"]).unwrap_err();
        assert!(!e.to_string().contains("sk-secret"), "{e}");
        assert_eq!(field(Err(e)), "env");
    }
}
