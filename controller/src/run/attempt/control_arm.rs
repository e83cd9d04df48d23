//! A control attempt: the task's starting workspace, changed by the control arm on the host (no
//! agent container, no proxy registration, no model call), archived, then graded exactly as an
//! agent's workspace is — the task's grader runtime, `policy::container_spec`, the grader's
//! timeout and `score.json` rules — and classified by the same pure `classify`.

use super::classify::{HostIo, classify};
use super::container::engine_fault;
use super::{DockerExecutor, Seen};
use crate::run::{AttemptReport, AttemptSpec};
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
        let applied =
            super::super::controls::apply(&arm, &p.task_dir, &p.workspace, custom.as_deref())
                .and_then(|()| {
                    eval_runtimes::host::prepare_workspace(&p.workspace, ids)
                        .map_err(|e| std::io::Error::other(e.to_string()))
                });
        let mut seen = Seen::default();
        let mut report = AttemptReport::default();
        if let Err(e) = applied {
            seen.obs.host_io = Some(HostIo::of(format!("applying control arm {arm}"), &e));
            return self.conclude(spec, seen, report).await;
        }
        // Archiving is blocking work: off the runtime, like an agent attempt's.
        let (store, workspace) = (self.store.clone(), p.workspace.clone());
        match super::off_runtime(move || {
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
            self.grade(spec, &task, &p, &mut seen, &mut report).await;
        }
        self.conclude(spec, seen, report).await
    }
}
