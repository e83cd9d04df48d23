//! The grader container and its `score.json`.
//!
//! The grader is frozen with the protocol and judges only the agent's workspace, so a grader
//! that ends non-zero, times out, or leaves no usable `score.json` has judged the workspace
//! unscorable: an outcome of the agent (metrics fall back to the protocol's missing-data values).
//! Only a grader the engine could not run at all is an infrastructure fault.

use super::classify::engine_fault;
use super::classify::{EngineFault, Graded};
use super::executor::{DockerExecutor, Seen};
use super::prepare::Prepared;
use crate::{AttemptReport, AttemptSpec};
use eval_core::fault::FaultCode;
use eval_evidence::leftovers::Beneath;
use eval_protocols::TaskBundle;
use eval_runtimes::policy::RoleMounts;
use eval_runtimes::{RunEnd, Runtime, WaitOutcome};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The largest `score.json` read.
pub const MAX_SCORE_BYTES: u64 = 1024 * 1024;
/// The grader's time limit.
pub(super) const GRADER_TIMEOUT: Duration = Duration::from_secs(600);
/// The most of the grader's log kept.
const GRADER_LOG_BYTES: usize = 64 * 1024;

impl DockerExecutor {
    /// Grades the workspace; what happened goes to `seen.obs.grader_engine` / `seen.obs.graded`.
    pub(super) async fn grade(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        seen: &mut Seen,
        report: &mut AttemptReport,
    ) {
        let target = GradeTarget {
            hidden: p.task_dir.join("hidden"),
            out: p.out.clone(),
            label: "grade".to_owned(),
        };
        self.grade_with(spec, task, p, &target, seen, report).await;
    }

    /// Grades the workspace with `target`'s hidden files into its output directory (a round's
    /// grading: that round's `hidden/rounds/<k>/` only).
    pub(super) async fn grade_with(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        target: &GradeTarget,
        seen: &mut Seen,
        report: &mut AttemptReport,
    ) {
        let end = match self.run_grader(spec, task, p, target).await {
            Ok(end) => end,
            Err(f) => {
                seen.obs.grader_engine = Some(f);
                seen.obs.graded = Graded::NotRun;
                return;
            }
        };
        report.container_seconds += end.elapsed.as_secs_f64();
        report.artifacts.grader_log = self.store_bytes("the grader's log", &end.logs, seen);
        if end.outcome != (WaitOutcome::Exited { code: 0 }) {
            let log = String::from_utf8_lossy(&end.logs);
            let tail: String = log.chars().take(400).collect();
            seen.obs.graded =
                Graded::Unscorable(format!("it ended with {:?}: {tail}", end.outcome));
            return;
        }
        match read_score(&target.out) {
            Ok((score, metrics)) => {
                report.artifacts.grader_output =
                    self.store_bytes("the grader's score.json", &score, seen);
                report.metrics = metrics;
                seen.obs.graded = Graded::Scored;
            }
            Err(ScoreError::Leftover(e)) => {
                if e.is_host_fault() {
                    seen.leftover("the grader's score.json", &e);
                }
                seen.obs.graded = Graded::Unscorable(format!("score.json: {e}"));
            }
            Err(ScoreError::Malformed { score, why }) => {
                report.artifacts.grader_output =
                    self.store_bytes("the grader's score.json", &score, seen);
                seen.obs.graded = Graded::Unscorable(format!("score.json: {why}"));
            }
        }
    }

    async fn run_grader(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        target: &GradeTarget,
    ) -> Result<RunEnd, EngineFault> {
        // The staged bundle is re-hashed right before grading: a swap mid-run is refused.
        crate::inputs::recheck_for_grading(&self.inputs, &task.dir, &p.bundle_digest).map_err(
            |detail| EngineFault {
                code: FaultCode::ControllerError,
                detail,
            },
        )?;
        let g = self
            .graders
            .get(&task.spec.grader.runtime)
            .cloned()
            .ok_or_else(|| EngineFault {
                code: FaultCode::ControllerError,
                detail: format!("no grader runtime {}", task.spec.grader.runtime),
            })?;
        let image = self
            .image(&g)
            .await
            .map_err(|(code, detail)| EngineFault { code, detail })?;
        let mut facts = self.facts(spec);
        facts.attempt = format!("{}/{}", spec.attempt, target.label);
        let mounts = RoleMounts::Grader {
            workspace: p.workspace.clone(),
            hidden: target.hidden.clone(),
            out: target.out.clone(),
            oracle: p.oracle_record.clone(),
        };
        run_grader_container(self.rt.as_ref(), &g.def.def, &image, &facts, mounts).await
    }
}

/// The grading of a run's attempt and of `eval regrade` (`run/regrade.rs`), under the one
/// container policy, each container to its end or [`GRADER_TIMEOUT`]. `mounts` are the
/// grading's (workspace and hidden files read-only, `out` the only writable path of the score).
///
/// A one-stage grader (`[grader]` without `run`) is one container over those mounts. A
/// two-stage grader is two (docs/grading.md, "Grading in two stages"): the run stage over the
/// workspace, the public inputs and a fresh capture directory only (`<out>.run`); eval then reads
/// that capture back as an agent's leftover ([`read_capture`]) into its own copy (`<out>.capture`),
/// and the score stage gets that copy read-only with the hidden files and `out`, and no
/// workspace. The returned end is the score stage's, its log both stages', its time their sum.
pub(crate) async fn run_grader_container(
    rt: &dyn Runtime,
    def: &eval_runtimes::RuntimeDef,
    image: &eval_runtimes::ImageId,
    facts: &eval_runtimes::policy::AttemptFacts,
    mounts: RoleMounts,
) -> Result<RunEnd, EngineFault> {
    let RoleMounts::Grader {
        workspace,
        hidden,
        out,
        oracle,
    } = mounts
    else {
        return Err(EngineFault {
            code: FaultCode::ControllerError,
            detail: "a grader container needs grader mounts".into(),
        });
    };
    let image_config = rt
        .inspect_image(image)
        .await
        .map_err(|e| engine_fault(&e))?;
    // The grader's user may differ from the agent's (its own image and definition): the
    // output directory is handed to it.
    let ids =
        eval_runtimes::policy::effective_user(def, &image_config).map_err(|e| engine_fault(&e))?;
    eval_runtimes::host::prepare_workspace(&out, ids).map_err(|e| engine_fault(&e))?;
    let Some(g) = def.grader.as_ref().filter(|g| g.two_stage()) else {
        let mounts = RoleMounts::Grader {
            workspace,
            hidden,
            out,
            oracle,
        };
        let cspec = eval_runtimes::container_spec(def, image, &image_config, facts, &mounts)
            .map_err(|e| engine_fault(&e))?;
        return eval_runtimes::run_to_end(rt, &cspec, &[], GRADER_TIMEOUT, GRADER_LOG_BYTES)
            .await
            .map_err(|e| engine_fault(&e));
    };
    let host = |what: &str, e: std::io::Error| EngineFault {
        code: FaultCode::ControllerError,
        detail: format!("the grader's {what}: {e}"),
    };
    let run_dir = sibling(&out, "run");
    let copy_dir = sibling(&out, "capture");
    prepare_capture(&run_dir, &g.capture_files, ids).map_err(|e| host("capture", e))?;
    let inputs = run_inputs_dir(&g.run_inputs, &hidden)?;
    let mut run_facts = facts.clone();
    run_facts.attempt = format!("{}-run", facts.attempt);
    let run_mounts = RoleMounts::GraderRun {
        workspace,
        inputs,
        capture: run_dir.clone(),
    };
    let cspec = eval_runtimes::container_spec(def, image, &image_config, &run_facts, &run_mounts)
        .map_err(|e| engine_fault(&e))?;
    let run_end = eval_runtimes::run_to_end(rt, &cspec, &[], GRADER_TIMEOUT, GRADER_LOG_BYTES)
        .await
        .map_err(|e| engine_fault(&e))?;
    let note = read_capture(&run_dir, &copy_dir).map_err(|e| host("capture copy", e))?;
    let score_mounts = RoleMounts::GraderScore {
        hidden,
        capture: copy_dir,
        out,
        oracle,
    };
    let cspec = eval_runtimes::container_spec(def, image, &image_config, facts, &score_mounts)
        .map_err(|e| engine_fault(&e))?;
    let mut end = eval_runtimes::run_to_end(rt, &cspec, &[], GRADER_TIMEOUT, GRADER_LOG_BYTES)
        .await
        .map_err(|e| engine_fault(&e))?;
    let mut logs = format!("--- run stage ({:?}) ---\n", run_end.outcome).into_bytes();
    logs.extend_from_slice(&run_end.logs);
    logs.extend_from_slice(format!("\n--- capture: {note} ---\n--- score stage ---\n").as_bytes());
    logs.extend_from_slice(&end.logs);
    end.logs = logs;
    end.elapsed += run_end.elapsed;
    Ok(end)
}

/// The run stage's public inputs: `run_inputs` (relative to the hidden files, `.` for all of
/// them) when it names a directory; anything else is the controller's fault, named.
fn run_inputs_dir(
    run_inputs: &Option<String>,
    hidden: &std::path::Path,
) -> Result<Option<std::path::PathBuf>, EngineFault> {
    match run_inputs {
        None => Ok(None),
        Some(rel) => {
            let p = if rel == "." {
                hidden.to_path_buf()
            } else {
                hidden.join(rel)
            };
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => Ok(Some(p)),
                _ => Err(EngineFault {
                    code: FaultCode::ControllerError,
                    detail: format!(
                        "the grader's run_inputs {rel:?}: {} is not a directory",
                        p.display()
                    ),
                }),
            }
        }
    }
}

/// The most bytes, entries and directory levels eval reads back from a run stage's capture.
pub(crate) const MAX_CAPTURE_BYTES: u64 = 64 * 1024 * 1024;
const MAX_CAPTURE_ENTRIES: usize = 10_000;
const MAX_CAPTURE_DEPTH: usize = 4;

/// `<out>.<what>` beside the grader's output directory.
fn sibling(out: &std::path::Path, what: &str) -> std::path::PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{what}"));
    out.with_file_name(name)
}

/// `dir` made anew, empty (whatever an earlier grading of the same attempt left there removed,
/// links removed, never followed).
fn fresh_dir(dir: &std::path::Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir)?,
        Ok(_) => std::fs::remove_file(dir)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir(dir)
}

/// A fresh capture directory for the run stage. Without `files`, it belongs to the stage's
/// user. With them, it is root's and sticky (1777) and each named file is root's with mode 0666:
/// the stage's user (agent code among it) can create files and write the named ones' content,
/// but cannot replace, remove, re-own or make read-only what the verifier writes last.
fn prepare_capture(
    dir: &std::path::Path,
    files: &[String],
    ids: (u32, u32),
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fresh_dir(dir)?;
    if files.is_empty() {
        return eval_runtimes::host::prepare_workspace(dir, ids).map_err(std::io::Error::other);
    }
    for f in files {
        let p = dir.join(f);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
}

/// Reads what the run stage left in `run_dir` as an agent's leftover (`Beneath::read_tree`: no
/// link followed, no FIFO opened, bounded) into eval's own fresh copy `copy_dir` (plain
/// directories and files eval wrote). A capture that cannot be read (too large, too many entries)
/// leaves the copy empty: the score stage then scores missing outputs. Returns what was done, for
/// the grader's log.
pub(crate) fn read_capture(
    run_dir: &std::path::Path,
    copy_dir: &std::path::Path,
) -> std::io::Result<String> {
    fresh_dir(copy_dir)?;
    let tree = match Beneath::open(run_dir)
        .and_then(|b| b.read_tree(MAX_CAPTURE_DEPTH, MAX_CAPTURE_ENTRIES, MAX_CAPTURE_BYTES))
    {
        Ok(t) => t,
        Err(e) if e.is_host_fault() => return Err(std::io::Error::other(e.to_string())),
        Err(e) => return Ok(format!("refused, nothing passed on: {e}")),
    };
    for d in &tree.dirs {
        std::fs::create_dir_all(copy_dir.join(d))?;
    }
    for (rel, bytes) in &tree.files {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(copy_dir.join(rel))?
            .write_all(bytes)?;
    }
    let mut note = format!("{} file(s) passed on", tree.files.len());
    if !tree.skipped.is_empty() {
        let shown: Vec<&str> = tree.skipped.iter().take(8).map(String::as_str).collect();
        note.push_str(&format!(
            "; {} not regular files or too deep, left out: {}",
            tree.skipped.len(),
            shown.join(", ")
        ));
    }
    Ok(note)
}

/// What one grading reads and where it writes.
pub(super) struct GradeTarget {
    /// Mounted read-only as `/hidden`.
    pub(super) hidden: std::path::PathBuf,
    /// Mounted read-write as `/out`; `score.json` is read from it.
    pub(super) out: std::path::PathBuf,
    /// The grader container's `eval.attempt` suffix (`grade`, `grade-round-<k>`).
    pub(super) label: String,
}

/// Why a grader that exited 0 gave no usable score.
pub(crate) enum ScoreError {
    /// `score.json` could not be read (missing, not a regular file, too large, a host failure).
    Leftover(eval_evidence::leftovers::LeftoverError),
    /// It was read but holds no `metrics` object (its bytes are kept as evidence).
    Malformed { score: Vec<u8>, why: String },
}

/// The grader's `score.json` in `out` and its numeric metrics, read as an agent's leftover
/// (`Beneath`, capped at [`MAX_SCORE_BYTES`]).
pub(crate) fn read_score(
    out: &std::path::Path,
) -> Result<(Vec<u8>, BTreeMap<String, f64>), ScoreError> {
    let score = Beneath::open(out)
        .and_then(|o| o.read_file("score.json", MAX_SCORE_BYTES))
        .map_err(ScoreError::Leftover)?;
    match metrics_of(&score) {
        Ok(m) => Ok((score, m)),
        Err(why) => Err(ScoreError::Malformed { score, why }),
    }
}

/// The numeric `metrics` of a `score.json` (other values are not metrics and are left out).
fn metrics_of(score: &[u8]) -> Result<BTreeMap<String, f64>, String> {
    let v: Value = serde_json::from_slice(score).map_err(|e| e.to_string())?;
    let m = v
        .get("metrics")
        .and_then(Value::as_object)
        .ok_or_else(|| "no \"metrics\" object".to_owned())?;
    Ok(m.iter()
        .filter_map(|(k, v)| v.as_f64().map(|f| (k.clone(), f)))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_score_without_metrics_is_unscorable_not_empty() {
        let m = metrics_of(br#"{"metrics": {"pass": 1, "note": "x"}}"#).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m["pass"], 1.0);
        assert!(metrics_of(br#"{"score": 1}"#).is_err());
        assert!(metrics_of(b"[]").is_err());
    }
}
