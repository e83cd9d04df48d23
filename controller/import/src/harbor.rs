//! `eval import harbor --from DIR [--tasks ID,…] --arm ID=RUNTIME=PROFILE …`: task directories
//! in Harbor's task format (docs/harbor.md), read as Harbor's own task model reads them
//! (`harbor_reader`), become one suite of eval tasks on the user's arms:
//!
//! ```text
//! instruction.md (steps/<s>/instruction.md)   round prompt (one round per step)
//! environment/                                 the task's environment image, built by the engine
//!                                              at import and pinned by id in its grader runtime
//! tests/ (steps/<s>/tests/)                    the round's hidden tests, run by the shared
//!                                              Harbor grader (evocode-grade.sh) in that image
//! solution/ (steps/<s>/solution/)              the oracle control arm; the workspace: nop
//! [agent]/[verifier] timeout_sec, [environment] cpus, memory_mb, storage_mb  round and grader limits
//! ```
//!
//! The importer is a function of its [`Options`] returning a [`Summary`]; the command converts
//! the arguments and prints. The environment images are built by the [`BuildImage`] the caller
//! hands in (the controller's is the engine's): this crate starts no container. Nothing is written unless every task reads, every image builds and
//! no target exists.

mod dockerfile;
mod task;

use super::common::{AGENT_IMAGE_PLACEHOLDER, AGENT_RUNTIME, AGENT_RUNTIME_PATH, ImportError, q};
use super::evocode::{
    GRADE_SH, GRADER_COMMAND, GRADER_RUN, env_file, round_task_metrics, with_controls,
};
use super::harbor_reader::{self, harbor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use task::HarborTask;

const SUITE: &str = "harbor";
const PROTOCOL_TEMPLATE: &str = include_str!("harbor-protocol.toml.in");
const MAX_TASKS: usize = 200;
/// The grader's defaults where the task sets no resources (EvoCode's grader's).
const GRADER_MEMORY_MB: u64 = 4096;
const GRADER_TMPFS_MB: u64 = 2048;

/// What `eval import harbor` is asked to do.
pub struct Options {
    pub from: PathBuf,
    pub tasks: Vec<String>,
    pub protocol: String,
    /// Baseline first, gated candidate last.
    pub arms: Vec<ArmOption>,
    /// When given, the DeepSeek Harness runtime is written to `runtimes/dsh-poly/runtime.toml`
    /// on this image, for arms to name.
    pub dsh_image: Option<String>,
    pub repetitions: usize,
}

/// One arm: its id, runtime definition and profile (project-relative paths).
pub struct ArmOption {
    pub id: String,
    pub runtime: String,
    pub profile: String,
}

/// What an import wrote.
pub struct Summary {
    pub written: usize,
    /// Each task's id and its environment image id.
    pub tasks: Vec<(String, String)>,
    pub controls: bool,
}

/// Builds one task's environment image and returns its id, or why it did not build: the task's
/// id, its build context (path, bytes, mode), the base images it names, the build's time limit.
pub type BuildImage<'a> =
    dyn Fn(&str, Vec<(String, Vec<u8>, u32)>, Vec<String>, Duration) -> Result<String, String> + 'a;

/// `--check`: every task read and checked, as pretty JSON; nothing is built or written.
pub fn check(o: &Options) -> Result<String, ImportError> {
    let tasks = read_tasks(o)?;
    let report: Vec<serde_json::Value> = tasks.iter().map(task::HarborTask::as_read).collect();
    serde_json::to_string_pretty(&report).map_err(|e| harbor(&o.from, e.to_string()))
}

fn flag(why: impl Into<String>) -> ImportError {
    harbor("--arm", why)
}

impl ArmOption {
    /// One `--arm ID=RUNTIME=PROFILE`.
    pub fn parse(a: &str) -> Result<ArmOption, ImportError> {
        let mut parts = a.splitn(3, '=');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(id), Some(rt), Some(pr)) if !rt.is_empty() && !pr.is_empty() => Ok(ArmOption {
                id: id.into(),
                runtime: rt.into(),
                profile: pr.into(),
            }),
            _ => Err(flag(format!("{a:?}: not ID=RUNTIME=PROFILE"))),
        }
    }
}

/// Checks the options, reads every task, builds every environment image, writes the project.
pub fn import(o: &Options, build_image: &BuildImage<'_>) -> Result<Summary, ImportError> {
    check_options(o)?;
    let tasks = read_tasks(o)?;
    for target in [
        format!("protocols/{}", o.protocol),
        format!("matrix/{}.toml", o.protocol),
    ] {
        if std::fs::symlink_metadata(&target).is_ok() {
            return Err(ImportError::Exists(PathBuf::from(target)));
        }
    }
    let mut images = Vec::new();
    for t in &tasks {
        images.push(build(&o.from, t, build_image)?);
    }
    let (files, controls) = plan(o, &tasks, &images);
    // A runtime definition another import wrote with the same bytes is shared.
    let written = super::common::write_files(&files, &|rel: &Path| rel.starts_with("runtimes/"))?;
    // A task whose environment copies nothing into its working directory starts empty: the
    // bundle still has its (empty) workspace/.
    for t in &tasks {
        let ws = PathBuf::from(format!(
            "protocols/{}/tasks/{SUITE}/{}/workspace",
            o.protocol, t.id
        ));
        std::fs::create_dir_all(&ws).map_err(|source| ImportError::Write { path: ws, source })?;
    }
    Ok(Summary {
        written,
        tasks: tasks.iter().map(|t| t.id.clone()).zip(images).collect(),
        controls,
    })
}

/// Every task of `--from` (or those `--tasks` names), read and checked.
fn read_tasks(o: &Options) -> Result<Vec<HarborTask>, ImportError> {
    harbor_reader::task_ids(&o.from, &o.tasks, MAX_TASKS)?
        .iter()
        .map(|id| task::read_task(&o.from, id))
        .collect()
}

fn check_options(o: &Options) -> Result<(), ImportError> {
    if !eval_matrix::valid_id(&o.protocol) {
        return Err(ImportError::ProtocolName(o.protocol.clone()));
    }
    if let Some(id) = &o.dsh_image
        && !eval_runtimes::definition::is_digest(id)
    {
        return Err(ImportError::ImageId {
            flag: "--dsh-image",
            id: id.clone(),
        });
    }
    if o.arms.len() < 2 {
        return Err(flag(
            "at least two arms: the baseline first, the gated candidate last",
        ));
    }
    if o.repetitions == 0 {
        return Err(harbor("--repetitions", "at least 1"));
    }
    for (i, a) in o.arms.iter().enumerate() {
        if !eval_matrix::valid_id(&a.id)
            || ["oracle", "nop"].contains(&a.id.as_str())
            || a.id.starts_with("exploit")
        {
            return Err(flag(format!(
                "{:?}: not a plain arm id, or a control arm's",
                a.id
            )));
        }
        if o.arms[..i].iter().any(|b| b.id == a.id) {
            return Err(flag(format!("{:?} named twice", a.id)));
        }
        for p in [&a.runtime, &a.profile] {
            let written_here = o.dsh_image.is_some() && p == AGENT_RUNTIME_PATH;
            if !written_here && !Path::new(p).is_file() {
                return Err(flag(format!("{}: {p}: no such file in the project", a.id)));
            }
        }
    }
    Ok(())
}

/// Builds the task's environment image with the caller's builder; a base the engine lacks is
/// refused naming the image (nothing is pulled).
fn build(from: &Path, t: &HarborTask, build_image: &BuildImage<'_>) -> Result<String, ImportError> {
    let dockerfile = from.join(&t.id).join("environment/Dockerfile");
    build_image(
        &t.id,
        t.context.clone(),
        t.bases.clone(),
        Duration::from_secs(t.build_secs),
    )
    .map_err(|e| harbor(&dockerfile, e))
}

type Files = BTreeMap<PathBuf, Vec<u8>>;

fn plan(o: &Options, tasks: &[HarborTask], images: &[String]) -> (Files, bool) {
    let mut out = Files::new();
    let mut put = |rel: String, bytes: Vec<u8>| {
        out.insert(PathBuf::from(rel), bytes);
    };
    let name = &o.protocol;
    let controls = tasks.iter().all(|t| {
        t.steps
            .iter()
            .all(|s| s.solution.iter().any(|(rel, _)| rel == "solve.sh"))
    });
    put(
        format!("protocols/{name}/protocol.toml"),
        protocol_toml(o, tasks, images, controls).into_bytes(),
    );
    put(
        format!("matrix/{name}.toml"),
        matrix_toml(o, tasks).into_bytes(),
    );
    if let Some(image) = &o.dsh_image {
        put(
            AGENT_RUNTIME_PATH.into(),
            AGENT_RUNTIME
                .replace(AGENT_IMAGE_PLACEHOLDER, image)
                .into_bytes(),
        );
        for (rel, bytes) in super::common::dsh_support_files(AGENT_RUNTIME_PATH) {
            put(rel, bytes);
        }
    }
    for (t, image) in tasks.iter().zip(images) {
        let runtime = grader_runtime_path(&t.id);
        put(runtime.clone(), grader_runtime_toml(t, image).into_bytes());
        let tdir = format!("protocols/{name}/tasks/{SUITE}/{}", t.id);
        put(
            format!("{tdir}/task.toml"),
            task_toml(t, &runtime).into_bytes(),
        );
        for (rel, bytes) in &t.workspace {
            put(format!("{tdir}/workspace/{rel}"), bytes.clone());
        }
        for (k, s) in t.steps.iter().enumerate() {
            let k = k + 1;
            put(format!("{tdir}/rounds/{k}/prompt.md"), s.prompt.clone());
            let hdir = format!("{tdir}/hidden/rounds/{k}");
            for (rel, bytes) in &s.tests {
                put(format!("{hdir}/tests/{rel}"), bytes.clone());
            }
            for (rel, bytes) in &s.solution {
                put(format!("{hdir}/solution/{rel}"), bytes.clone());
            }
            put(format!("{hdir}/grade.sh"), GRADE_SH.as_bytes().to_vec());
            put(format!("{hdir}/env"), env_file(&s.env).into_bytes());
            put(
                format!("{hdir}/workdir"),
                format!("{}\n", t.workdir).into_bytes(),
            );
            put(
                format!("{hdir}/verifier-timeout"),
                format!("{}\n", s.verifier_secs).into_bytes(),
            );
        }
    }
    (out, controls)
}

fn grader_runtime_path(task: &str) -> String {
    format!("runtimes/{SUITE}-{task}/runtime.toml")
}

fn task_toml(t: &HarborTask, runtime: &str) -> String {
    let total: u64 = t.steps.iter().map(|s| s.agent_secs).sum();
    let metrics = round_task_metrics();
    let mut s = format!(
        "# Harbor task {id} ({n} step(s), task.toml schema {schema}), imported by `eval import harbor`\n\
         # (task directory tree sha256 {digest}). Round k's prompt is step k's instruction.md; its hidden files are step k's tests/\n\
         # (and solution/, for the oracle control) and eval's grade.sh, run in the task's environment image.\n\
         id = {qid}\nsuite = \"{SUITE}\"\ntimeout_seconds = {total}\ndescription = {title}\n\
         after_failed_round = \"continue\"\nmetrics = [{metrics}]\n\n[grader]\nruntime = {rt}\ncommand = {GRADER_COMMAND}\n",
        id = t.id,
        n = t.steps.len(),
        schema = t.schema,
        digest = t.digest,
        qid = q(&t.id),
        title = q(&t.title),
        metrics = metrics.join(", "),
        rt = q(runtime),
    );
    for step in &t.steps {
        s.push_str(&format!(
            "\n[[rounds]]\ntimeout_seconds = {}\n",
            step.agent_secs
        ));
    }
    s
}

/// The task's grader: its environment image (pinned by id), the shared two-stage Harbor grader,
/// Harbor's `/logs/verifier` as the capture, the task's `[environment]` resources as limits.
fn grader_runtime_toml(t: &HarborTask, image: &str) -> String {
    let tmpfs: Vec<String> = [
        t.workdir.as_str(),
        "/tests",
        "/usr/local/bin",
        "/var/cache/grader",
    ]
    .iter()
    .map(|p| q(p))
    .collect();
    format!(
        "# The grader of Harbor task {id} (written by `eval import harbor`): the image the engine built\n\
         # from the task's environment/ at import. Each round's hidden/grade.sh runs the round's tests as\n\
         # Harbor's verifier does (the workspace at {wd}, the tests at /tests, the reward in\n\
         # /logs/verifier, eval's capture); its score stage sees no workspace.\n\
         name = {name}\nuser = \"65532:65532\"\ntmpfs_exec = [{tmpfs}]\n\n[image]\nid = {img}\n\n\
         [grader]\nrun = {GRADER_RUN}\nrun_inputs = \".\"\ncapture = \"/logs/verifier\"\n\
         capture_files = [\"reward.txt\", \"reward.json\", \"test-stdout.txt\", \"test-stderr.txt\", \"tests-exit.txt\"]\n\
         command = {GRADER_COMMAND}\n\n[limits]\nmemory_mb = {mem}\ncpus = {cpus:?}\npids = 512\ntmpfs_mb = {tmp}\n",
        id = t.id,
        wd = t.workdir,
        name = q(&format!("{SUITE}-{}", t.id)),
        tmpfs = tmpfs.join(", "),
        img = q(image),
        mem = t.memory_mb.unwrap_or(GRADER_MEMORY_MB),
        cpus = t.cpus.unwrap_or(1.0),
        tmp = t.storage_mb.unwrap_or(GRADER_TMPFS_MB),
    )
}

fn matrix_toml(o: &Options, tasks: &[HarborTask]) -> String {
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let arms: Vec<&str> = o.arms.iter().map(|a| a.id.as_str()).collect();
    super::common::V04Matrix {
        name: &o.protocol,
        header: "# Harbor tasks (written by `eval import harbor`): the arms as named on its command line\n\
# (baseline first, gated candidate last), infrastructure slots first.\n",
        description: "Harbor tasks on the arms named at import",
        concurrency: 1,
        suite: SUITE,
        tasks: &ids,
        arms: &arms,
        baseline: arms.first().copied().unwrap_or_default(),
        candidate: arms.last().copied().unwrap_or_default(),
        repetitions: o.repetitions,
        infra: ids.first().copied().unwrap_or_default(),
    }
    .toml()
}

fn protocol_toml(o: &Options, tasks: &[HarborTask], images: &[String], controls: bool) -> String {
    let mut arms = String::new();
    for a in &o.arms {
        arms.push_str(&format!(
            "\n[[arms]]\nid = {}\nruntime = {}\nprofile = {}\n",
            q(&a.id),
            q(&a.runtime),
            q(&a.profile)
        ));
    }
    let digests: Vec<String> = tasks
        .iter()
        .zip(images)
        .map(|(t, i)| format!("#   {}: sha256 {}, environment image {i}", t.id, t.digest))
        .collect();
    let wall = tasks
        .iter()
        .map(|t| t.steps.iter().map(|s| s.agent_secs).sum::<u64>())
        .max()
        .unwrap_or(3600);
    let base = o.arms.first().map(|a| a.id.as_str()).unwrap_or_default();
    let cand = o.arms.last().map(|a| a.id.as_str()).unwrap_or_default();
    let text = PROTOCOL_TEMPLATE
        .replace("@NAME@", &q(&o.protocol))
        .replace("@TASK_DIGESTS@", &digests.join("\n"))
        .replace("@N_TASKS@", &tasks.len().to_string())
        .replace("@REPETITIONS@", &o.repetitions.to_string())
        .replace("@PAIRS@", &(tasks.len() * o.repetitions).to_string())
        .replace("@WALL@", &wall.to_string())
        .replace("@BASELINE@", base)
        .replace("@CANDIDATE@", cand)
        .replace("@ARMS@", &arms);
    if controls {
        with_controls(&text, SUITE)
    } else {
        text
    }
}
