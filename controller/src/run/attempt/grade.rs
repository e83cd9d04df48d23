//! The grader container and its `score.json`.
//!
//! The grader is frozen with the protocol and judges only the agent's workspace, so a grader
//! that ends non-zero, times out, or leaves no usable `score.json` has judged the workspace
//! unscorable: an outcome of the agent (metrics fall back to the protocol's missing-data values).
//! Only a grader the engine could not run at all is an infrastructure fault.

use super::classify::{EngineFault, Graded};
use super::container::engine_fault;
use super::prepare::Prepared;
use super::{DockerExecutor, Seen};
use crate::run::{AttemptReport, AttemptSpec};
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
        crate::run::inputs::recheck_for_grading(&self.inputs, &task.dir, &p.bundle_digest)
            .map_err(|detail| EngineFault {
                code: FaultCode::ControllerError,
                detail,
            })?;
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

/// The grader container of a run's attempt and of `eval regrade` (`run/regrade.rs`): `def`'s
/// grader command over the mounts (workspace and hidden files read-only, `out` the only
/// writable path), under the one container policy, to its end or [`GRADER_TIMEOUT`].
pub(crate) async fn run_grader_container(
    rt: &dyn Runtime,
    def: &eval_runtimes::RuntimeDef,
    image: &eval_runtimes::ImageId,
    facts: &eval_runtimes::policy::AttemptFacts,
    mounts: RoleMounts,
) -> Result<RunEnd, EngineFault> {
    let RoleMounts::Grader { out, .. } = &mounts else {
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
    eval_runtimes::policy::effective_user(def, &image_config)
        .and_then(|ids| eval_runtimes::host::prepare_workspace(out, ids))
        .map_err(|e| engine_fault(&e))?;
    let cspec = eval_runtimes::container_spec(def, image, &image_config, facts, &mounts)
        .map_err(|e| engine_fault(&e))?;
    eval_runtimes::run_to_end(rt, &cspec, &[], GRADER_TIMEOUT, GRADER_LOG_BYTES)
        .await
        .map_err(|e| engine_fault(&e))
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
