//! A control attempt: the task's starting workspace, changed by the control arm on the host (no
//! agent container, no proxy registration, no model call), archived, then graded exactly as an
//! agent's workspace is — the task's grader runtime, `policy::container_spec`, the grader's
//! timeout and `score.json` rules — and classified by the same pure `classify`.

use super::classify::engine_fault;
use super::classify::{HostIo, classify};
use super::executor::{DockerExecutor, Seen};
use crate::{AttemptReport, AttemptSpec};
use eval_core::controls::ControlArm;
use eval_core::fault::FaultCode;
use eval_runtimes::Runtime;
use std::path::Path;

impl DockerExecutor {
    pub(super) async fn run_control(&self, spec: &AttemptSpec, dir: &Path) -> AttemptReport {
        let t0 = std::time::Instant::now();
        let mut report = self.control_in(spec, dir).await;
        report.duration_seconds = Some(0.0);
        report.prepare_seconds = t0.elapsed().as_secs_f64() - report.container_seconds;
        report.accounting = Some("not_declared".into());
        report
    }

    async fn control_in(&self, spec: &AttemptSpec, dir: &Path) -> AttemptReport {
        let arm: ControlArm = match spec.slot.arm.parse() {
            Ok(a) => a,
            Err(e) => return AttemptReport::infra(FaultCode::ControllerError, e.to_string()),
        };
        let key = (spec.slot.suite.clone(), spec.slot.task.clone());
        let Some(task) = self.tasks.get(&key).cloned() else {
            return AttemptReport::infra(
                FaultCode::ControllerError,
                format!("task {}/{} is not loaded", spec.slot.suite, spec.slot.task),
            );
        };
        // The workspace belongs to the grader's user: no agent ever sees it.
        let Some(g) = self.graders.get(&task.spec.grader.runtime).cloned() else {
            return AttemptReport::infra(
                FaultCode::ControllerError,
                format!("no grader runtime {}", task.spec.grader.runtime),
            );
        };
        let image = match self.image(&g).await {
            Ok(i) => i,
            Err((code, detail)) => return AttemptReport::infra(code, detail),
        };
        let ids = match self.rt.inspect_image(&image).await {
            Ok(c) => match eval_runtimes::policy::effective_user(&g.def.def, &c) {
                Ok(ids) => ids,
                Err(e) => return AttemptReport::infra(FaultCode::ControllerError, e.to_string()),
            },
            Err(e) => {
                let f = engine_fault(&e);
                return AttemptReport::infra(f.code, f.detail);
            }
        };
        // No agent writes here (eval's own solution or exploit, graded read-only): plain host
        // directories, no filesystem of its own.
        let p = match self.prepare(spec, ids, &task, dir, (false, None)).await {
            Ok(p) => p,
            Err(report) => return *report,
        };
        let custom = match &arm {
            ControlArm::Exploit(n) => self
                .custom_exploits
                .get(&spec.slot.suite)
                .and_then(|m| m.get(n))
                .map(|d| self.root.join(d)),
            _ => None,
        };
        // A multi-round task's oracle changes nothing here: its solutions run per round in the
        // grader (`fn grade_control_rounds`).
        let on_host = task.spec.rounds.is_empty() || arm != ControlArm::Oracle;
        let applied = if on_host {
            super::super::controls::apply(&arm, &p.task_dir, &p.workspace, custom.as_deref())
        } else {
            Ok(())
        }
        .and_then(|()| {
            eval_runtimes::host::prepare_workspace(&p.workspace, ids)
                .map_err(|e| std::io::Error::other(e.to_string()))
        });
        let mut seen = Seen::default();
        let mut report = AttemptReport {
            bundle_digest: Some(p.bundle_digest.to_string()),
            ..AttemptReport::default()
        };
        if let Err(e) = applied {
            seen.obs.host_io = Some(HostIo::of(format!("applying control arm {arm}"), &e));
            return self.conclude(spec, seen, report).await;
        }
        // Archiving is blocking work: off the runtime, like an agent attempt's.
        let (store, workspace) = (self.store.clone(), p.workspace.clone());
        match super::executor::off_runtime(move || {
            super::archive::archive(&store, &workspace, &mut seen, &mut report);
            (seen, report)
        })
        .await
        {
            Ok((s, r)) => (seen, report) = (s, r),
            Err(why) => {
                return AttemptReport {
                    recording_failure: Some(why),
                    ..AttemptReport::default()
                };
            }
        }
        if classify(&seen.obs).outcome != eval_core::outcome::Outcome::InfraFault {
            if task.spec.rounds.is_empty() {
                self.grade(spec, &task, &p, &mut seen, &mut report).await;
            } else {
                self.grade_control_rounds(spec, &task, &p, &arm, ids, &mut seen, &mut report)
                    .await;
            }
        }
        self.conclude(spec, seen, report).await
    }

    /// A control of a multi-round task: the workspace the arm left is graded once per round,
    /// round k by `hidden/rounds/<k>/` as an agent's round is (`grade_with`, its own
    /// `out-round-<k>/`), and the attempt's metrics are `rounds::attempt_metrics` over those
    /// gradings. The oracle's round k is graded from `oracle-round-<k>/`, a copy of the round's
    /// hidden files with the reference solutions of rounds 1..=k beside them
    /// (`controls::oracle_round_hidden`): the task's grader runs them in order on its copy of
    /// the workspace before the round's tests, as Harbor's oracle agent runs each step's
    /// `solve.sh` in one container. No round entry is recorded: a control has no harness.
    #[allow(clippy::too_many_arguments)]
    async fn grade_control_rounds(
        &self,
        spec: &AttemptSpec,
        task: &eval_protocols::TaskBundle,
        p: &super::prepare::Prepared,
        arm: &ControlArm,
        ids: (u32, u32),
        seen: &mut Seen,
        report: &mut AttemptReport,
    ) {
        let declared = task.spec.rounds.len();
        let mut finished = Vec::new();
        let mut tests = Vec::new();
        let mut any_scored = false;
        let mut first_unscored = None;
        for k in 1..=declared {
            let out = p.out.with_file_name(format!("out-round-{k}"));
            let mut hidden = p.task_dir.join(eval_protocols::task::round_hidden(k));
            let made = std::fs::create_dir(&out).and_then(|()| {
                if *arm != ControlArm::Oracle {
                    return Ok(());
                }
                let h = p.out.with_file_name(format!("oracle-round-{k}"));
                super::super::controls::oracle_round_hidden(&p.task_dir, k, &h)?;
                eval_runtimes::host::prepare_workspace(&h, ids)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                hidden = h;
                Ok(())
            });
            if let Err(e) = made {
                seen.obs.host_io = Some(HostIo::of(format!("round {k}'s control grading"), &e));
                return;
            }
            let target = super::grade::GradeTarget {
                hidden,
                out: out.clone(),
                label: format!("grade-round-{k}"),
            };
            let mut rs = Seen::default();
            let mut rr = AttemptReport::default();
            self.grade_with(spec, task, p, &target, &mut rs, &mut rr)
                .await;
            report.container_seconds += rr.container_seconds;
            if let Some(e) = rs.obs.grader_engine.take() {
                seen.obs.grader_engine = Some(super::classify::EngineFault {
                    code: e.code,
                    detail: format!("round {k}: {}", e.detail),
                });
                seen.obs.graded = super::classify::Graded::NotRun;
                return;
            }
            seen.notes.append(&mut rs.notes);
            if rr.artifacts.grader_output.is_some() {
                report.artifacts.grader_output = rr.artifacts.grader_output;
            }
            if rr.artifacts.grader_log.is_some() {
                report.artifacts.grader_log = rr.artifacts.grader_log;
            }
            let scored = rs.obs.graded == super::classify::Graded::Scored;
            any_scored |= scored;
            if !scored && first_unscored.is_none() {
                first_unscored = Some(rs.obs.graded.clone());
            }
            tests.push(super::rounds::round_tests(k as u32, &out));
            finished.push(eval_runlog::events::RoundFinished {
                schema: eval_runlog::events::SCHEMA,
                attempt: spec.attempt.clone(),
                round: k as u32,
                status: if scored { "passed" } else { "failed" }.to_owned(),
                failures: Vec::new(),
                harness: None,
                graded: if scored { "scored" } else { "unscorable" }.to_owned(),
                detail: None,
                metrics: if scored {
                    rr.metrics
                } else {
                    Default::default()
                },
                model_turns: 0,
                tokens: 0,
                artifacts: Default::default(),
                finished_at: eval_runlog::events::now_rfc3339(),
            });
        }
        // Scored when some round was, as an agent's multi-round attempt (`fn attempt_graded`).
        seen.obs.graded = match (any_scored, first_unscored) {
            (true, _) | (false, None) => super::classify::Graded::Scored,
            (false, Some(g)) => g,
        };
        report.metrics = super::rounds::attempt_metrics(&finished, declared, &tests);
    }
}
