//! One Harbor task directory read as Harbor's `Task` reads it (`TaskPaths` layout): a
//! single-step task is `instruction.md`, `tests/`, `solution/`; a multi-step task declares
//! `[[steps]]` and has `steps/<name>/instruction.md`, `steps/<name>/tests/` (else the shared
//! `tests/`) and `steps/<name>/solution/`. Either way each step becomes one round.

use super::super::common::{ImportError, read_input};
use super::super::harbor_reader::{self, HarborToml, harbor, read_tree, strip_canary, timeout_of};
use super::dockerfile;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// The agent timeout when neither the step nor the task sets one (EvoCode's import uses the same).
const DEFAULT_AGENT_SECS: u64 = 1800;
/// `VerifierConfig.timeout_sec`'s default.
const DEFAULT_VERIFIER_SECS: u64 = 600;
/// `EnvironmentConfig.build_timeout_sec`'s default.
const DEFAULT_BUILD_SECS: u64 = 600;

pub type Tree = Vec<(String, Vec<u8>)>;

/// One step, as one round.
pub struct Step {
    pub prompt: Vec<u8>,
    pub tests: Tree,
    pub solution: Tree,
    pub agent_secs: u64,
    pub verifier_secs: u64,
    pub env: Vec<(String, String)>,
}

/// One task, read and checked; its image is built later (`super::build`).
pub struct HarborTask {
    pub id: String,
    pub title: String,
    /// `schema_version` as the task declares it (Harbor's default "1.4" when it does not).
    pub schema: String,
    /// The tree digest of every file read.
    pub digest: String,
    pub steps: Vec<Step>,
    /// The build context: path, bytes, mode.
    pub context: Vec<(String, Vec<u8>, u32)>,
    pub bases: Vec<String>,
    pub workdir: String,
    /// The agent's starting workspace: path → bytes.
    pub workspace: BTreeMap<String, Vec<u8>>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub storage_mb: Option<u64>,
    pub build_secs: u64,
}

impl HarborTask {
    /// What eval read, for `eval import harbor --check` (and the test that compares it with
    /// Harbor's own parser): the fields and file lists, without file contents.
    pub fn as_read(&self) -> serde_json::Value {
        let names = |t: &Tree| t.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>();
        let steps: Vec<serde_json::Value> = self
            .steps
            .iter()
            .map(|s| {
                serde_json::json!({
                    "prompt": String::from_utf8_lossy(&s.prompt),
                    "tests": names(&s.tests),
                    "solution": names(&s.solution),
                    "agent_timeout_sec": s.agent_secs,
                    "verifier_timeout_sec": s.verifier_secs,
                    "env": s.env.iter().cloned().collect::<BTreeMap<_, _>>(),
                })
            })
            .collect();
        serde_json::json!({
            "id": self.id,
            "name": self.title,
            "schema_version": self.schema,
            "digest": self.digest,
            "steps": steps,
            "bases": self.bases,
            "workdir": self.workdir,
            "workspace": self.workspace.keys().collect::<Vec<_>>(),
            "cpus": self.cpus,
            "memory_mb": self.memory_mb,
            "storage_mb": self.storage_mb,
            "build_timeout_sec": self.build_secs,
        })
    }
}

pub fn read_task(from: &Path, id: &str) -> Result<HarborTask, ImportError> {
    let root = from.join(id);
    if !eval_matrix::valid_id(id) {
        return Err(harbor(
            &root,
            "not a plain task id (letters, digits, `-`, `_`, `.`)",
        ));
    }
    let toml_path = root.join("task.toml");
    let toml_bytes = read_input(&root, "task.toml")?;
    let spec = harbor_reader::parse(&toml_path, &toml_bytes)?;
    refuse_unsupported(&spec, &toml_path)?;
    let mut digest = Sha256::new();
    let mut record = |rel: &str, bytes: &[u8]| {
        digest.update(format!("{rel}\0{}\0", bytes.len()));
        digest.update(bytes);
    };
    record("task.toml", &toml_bytes);
    let steps = read_steps(&root, &spec, &mut record)?;
    let env = read_environment(&root, &spec, &mut record)?;
    let meta = |k: &str| {
        spec.metadata
            .get(k)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    Ok(HarborTask {
        id: id.to_owned(),
        // Harbor names a task by `[task] name`, else by its directory.
        title: spec
            .task
            .as_ref()
            .map(|t| t.name.clone())
            .or_else(|| meta("name"))
            .unwrap_or_else(|| id.to_owned()),
        schema: spec.schema_version.clone().unwrap_or_else(|| "1.4".into()),
        digest: hex::encode(digest.finalize()),
        steps,
        context: env.0,
        bases: env.1,
        workdir: env.2,
        workspace: env.3,
        cpus: spec.environment.cpus,
        memory_mb: harbor_reader::memory_mb(&spec.environment),
        storage_mb: spec.environment.storage_mb,
        build_secs: timeout_of(
            spec.environment.build_timeout_sec,
            DEFAULT_BUILD_SECS,
            &toml_path,
            "environment.build_timeout_sec",
        )?,
    })
}

/// What eval cannot reproduce is refused, naming the field: another OS, accelerators, a separate
/// verifier environment, host-resolved variables, per-step reward thresholds and the `final`
/// reward (eval's reward is the mean over the rounds).
fn refuse_unsupported(spec: &HarborToml, p: &Path) -> Result<(), ImportError> {
    let env = &spec.environment;
    let fail = |field: &str, why: &str| Err(harbor(p, format!("{field}: {why}")));
    if env
        .os
        .as_deref()
        .is_some_and(|o| !o.eq_ignore_ascii_case("linux"))
    {
        return fail("environment.os", "only linux tasks are imported");
    }
    if env.gpus.is_some_and(|g| g > 0) || env.tpu.is_some() {
        return fail(
            "environment.gpus/tpu",
            "eval's containers have no accelerators",
        );
    }
    if let Some(c) = env.cpus
        && !(c.is_finite() && c > 0.0 && c <= 64.0)
    {
        return fail("environment.cpus", "not a number of cores in (0, 64]");
    }
    if !env.env.is_empty() {
        return fail(
            "environment.env",
            "resolved from the host at run time; a frozen run has no such input",
        );
    }
    if spec
        .verifier
        .environment_mode
        .as_deref()
        .is_some_and(|m| m != "shared")
        || spec.verifier.environment.is_some()
    {
        return fail(
            "verifier.environment",
            "a separate verifier environment is not imported; the tests run in the task's environment image",
        );
    }
    if spec.multi_step_reward_strategy.as_deref() == Some("final") {
        return fail(
            "multi_step_reward_strategy",
            "\"final\" is not imported; eval's reward is the mean over the steps",
        );
    }
    for (i, s) in spec.steps.iter().enumerate() {
        if s.min_reward.is_some() {
            return fail(
                &format!("steps[{i}].min_reward"),
                "a step gate is not imported; every step runs",
            );
        }
    }
    Ok(())
}

type Record<'a> = dyn FnMut(&str, &[u8]) + 'a;

fn read_steps(
    root: &Path,
    spec: &HarborToml,
    record: &mut Record,
) -> Result<Vec<Step>, ImportError> {
    let toml_path = root.join("task.toml");
    let agent = timeout_of(
        spec.agent.timeout_sec,
        DEFAULT_AGENT_SECS,
        &toml_path,
        "agent.timeout_sec",
    )?;
    let verifier = timeout_of(
        spec.verifier.timeout_sec,
        DEFAULT_VERIFIER_SECS,
        &toml_path,
        "verifier.timeout_sec",
    )?;
    let task_env = env_pairs(&spec.verifier.env, &toml_path, "verifier.env")?;
    if spec.steps.is_empty() {
        let step = read_step(root, "", &mut *record)?;
        return Ok(vec![Step {
            agent_secs: agent,
            verifier_secs: verifier,
            env: task_env,
            ..step
        }]);
    }
    if spec.steps.len() > eval_protocols::task::MAX_ROUNDS {
        return Err(harbor(
            &toml_path,
            format!(
                "{} [[steps]]; a task has at most {} rounds",
                spec.steps.len(),
                eval_protocols::task::MAX_ROUNDS
            ),
        ));
    }
    let names = harbor_reader::step_names(spec, &toml_path)?;
    let mut out = Vec::new();
    for (i, (n, s)) in names.iter().zip(&spec.steps).enumerate() {
        if std::fs::symlink_metadata(root.join("steps").join(n).join("workdir")).is_ok() {
            return Err(harbor(
                root.join("steps").join(n).join("workdir"),
                "a step's workdir/ (setup.sh) is not imported",
            ));
        }
        let mut step = read_step(root, n, &mut *record)?;
        step.agent_secs = timeout_of(
            s.agent.timeout_sec,
            agent,
            &toml_path,
            &format!("steps[{i}].agent.timeout_sec"),
        )?;
        // A step's verifier timeout is the step's own (`StepConfig.verifier` defaults to 600 s,
        // never to the task's), as Harbor's multi-step trial reads it.
        step.verifier_secs = timeout_of(
            s.verifier.timeout_sec,
            DEFAULT_VERIFIER_SECS,
            &toml_path,
            &format!("steps[{i}].verifier.timeout_sec"),
        )?;
        step.env = task_env.clone();
        step.env.extend(env_pairs(
            &s.verifier.env,
            &toml_path,
            &format!("steps[{i}].verifier.env"),
        )?);
        out.push(step);
    }
    Ok(out)
}

/// The step named `name` (`""`: the task itself): its instruction, its tests (a step without
/// `tests/` uses the task's, as Harbor does) and its solution.
fn read_step(root: &Path, name: &str, record: &mut Record) -> Result<Step, ImportError> {
    let (dir, pre) = if name.is_empty() {
        (root.to_path_buf(), String::new())
    } else {
        (root.join("steps").join(name), format!("steps/{name}/"))
    };
    let raw = read_input(&dir, "instruction.md")?;
    record(&format!("{pre}instruction.md"), &raw);
    let text =
        std::str::from_utf8(&raw).map_err(|_| harbor(dir.join("instruction.md"), "not UTF-8"))?;
    let prompt = strip_canary(text);
    if prompt.trim().is_empty() {
        return Err(harbor(
            dir.join("instruction.md"),
            "empty: the agent would have no task",
        ));
    }
    let (tests_dir, tests_pre) =
        if std::fs::symlink_metadata(dir.join("tests")).is_ok() || name.is_empty() {
            (dir.join("tests"), format!("{pre}tests/"))
        } else {
            (root.join("tests"), "tests/".to_owned())
        };
    let tests = read_tree(&tests_dir)?;
    if !tests.iter().any(|(rel, _)| rel == "test.sh") {
        return Err(harbor(&tests_dir, "no test.sh"));
    }
    for (rel, bytes) in &tests {
        record(&format!("{tests_pre}{rel}"), bytes);
    }
    let solution = if std::fs::symlink_metadata(dir.join("solution")).is_ok() {
        read_tree(&dir.join("solution"))?
    } else {
        Vec::new()
    };
    for (rel, bytes) in &solution {
        record(&format!("{pre}solution/{rel}"), bytes);
    }
    Ok(Step {
        prompt: prompt.into_bytes(),
        tests,
        solution,
        agent_secs: 0,
        verifier_secs: 0,
        env: Vec::new(),
    })
}

/// A verifier `env` table as `KEY=VALUE` lines the grader exports (values with `$`, `\`, `'` or
/// a line break are refused: Harbor resolves `${VAR}` from the host, which a frozen run has not).
fn env_pairs(
    env: &BTreeMap<String, String>,
    p: &Path,
    field: &str,
) -> Result<Vec<(String, String)>, ImportError> {
    let mut out = Vec::new();
    for (k, v) in env {
        let key_ok = !k.is_empty()
            && k.chars()
                .enumerate()
                .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if !key_ok || v.contains(['$', '\\', '\'', '\n', '\r']) {
            return Err(harbor(
                p,
                format!("{field}.{k}: not a plain KEY = \"value\" (no $, \\, ' or line break)"),
            ));
        }
        out.push((k.clone(), v.clone()));
    }
    Ok(out)
}

type Environment = (
    Vec<(String, Vec<u8>, u32)>,
    Vec<String>,
    String,
    BTreeMap<String, Vec<u8>>,
);

/// `environment/`: the build context (every file, its mode kept), the bases, the working
/// directory (`[environment] workdir` over the Dockerfile's WORKDIR) and the workspace. A
/// prebuilt `docker_image` is a one-line context `FROM <image>`.
fn read_environment(
    root: &Path,
    spec: &HarborToml,
    record: &mut Record,
) -> Result<Environment, ImportError> {
    let env_dir = root.join("environment");
    let docker = root.join("environment/Dockerfile");
    let (context, text) = if let Some(image) = &spec.environment.docker_image {
        let text = format!("FROM {image}\n");
        (
            vec![("Dockerfile".to_owned(), text.clone().into_bytes(), 0o644)],
            text,
        )
    } else {
        let tree = read_tree(&env_dir)?;
        if tree.iter().any(|(rel, _)| rel == ".dockerignore") {
            return Err(harbor(
                env_dir.join(".dockerignore"),
                "not read by eval's import; remove it or the files it names",
            ));
        }
        let mut ctx = Vec::new();
        for (rel, bytes) in tree {
            record(&format!("environment/{rel}"), &bytes);
            let mode = std::fs::metadata(env_dir.join(&rel))
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0o644);
            ctx.push((rel, bytes, mode));
        }
        let text = ctx
            .iter()
            .find(|(rel, _, _)| rel == "Dockerfile")
            .map(|(_, b, _)| String::from_utf8(b.clone()))
            .ok_or_else(|| harbor(&docker, "missing (and no [environment] docker_image)"))?
            .map_err(|_| harbor(&docker, "not UTF-8"))?;
        (ctx, text)
    };
    let read = dockerfile::read(&text)
        .map_err(|(line, why)| harbor(&docker, format!("line {line}: {why}")))?;
    let workdir = match (&spec.environment.workdir, &read.workdir) {
        (Some(w), _) => w.clone(),
        (None, Some(w)) => w.clone(),
        (None, None) => {
            return Err(harbor(
                &docker,
                "no WORKDIR (and no [environment] workdir): the workspace directory is unknown",
            ));
        }
    };
    if !workdir.starts_with('/') || workdir == "/" || workdir.contains(['\n', '"', '\'', '$']) {
        return Err(harbor(
            root.join("task.toml"),
            format!("workdir {workdir:?}: not an absolute directory below /"),
        ));
    }
    let names: Vec<String> = context.iter().map(|(r, _, _)| r.clone()).collect();
    let map = read
        .workspace(&workdir, &names)
        .map_err(|why| harbor(&docker, why))?;
    let mut workspace = BTreeMap::new();
    for (rel, src) in map {
        if let Some((_, b, _)) = context.iter().find(|(r, _, _)| *r == src) {
            workspace.insert(rel, b.clone());
        }
    }
    Ok((context, read.bases, workdir, workspace))
}
