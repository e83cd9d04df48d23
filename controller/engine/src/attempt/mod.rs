//! One attempt, for real: fresh workspace copy → proxy registration (own socket, budgets) →
//! agent container under the policy → attestation → run to exit/timeout → metrics cross-check →
//! workspace archived → grader container → outcome with metrics.
//!
//! The proxy and the runtime are reached only through this module, so their APIs stay local.

mod accounting;
mod archive;
mod bridge;
pub mod classify;
mod container;
mod contract;
mod control;
mod control_arm;
pub mod disk;
mod executor;
pub(crate) mod grade;
mod images;
mod oracle;
mod oracle_ask;
pub(crate) mod prepare;
mod round_end;
pub mod rounds;
mod sockets;
mod store;

pub use crate::inputs::copy_tree;
pub use bridge::Bridge;
pub use contract::contract_of;
pub use control::Control;
use eval_core::fault::FaultCode;
use executor::{ArmImage, Seen, abs, is_attempt_dir, off_runtime};
pub use executor::{DockerExecutor, SetupError};
pub use images::{FrozenArm, frozen_arms};
pub(crate) use oracle_ask::regrade_record;
pub(crate) use prepare::remove_attempt_tree;
use sockets::SocketRoot;

use super::{AttemptExecutor, AttemptReport, AttemptSpec, BoxFuture, Recorder};
use classify::{Attested, Classification, EngineFault, Oracle, Provider, Upstream, classify};
use contract::agent_budget;
use control::{AttemptControl, AttestState};
use eval_evidence::artifacts::ArtifactStore;
use eval_protocols::{Loaded, TaskBundle};
use eval_proxy::{AttemptMeter, ProxyHandle, Role, RoleSpec};
use eval_runlog::events::{self, AttemptNote, IncompleteCalls};
use eval_runtimes::policy::AttemptFacts;
use eval_runtimes::{DockerRuntime, ImageId, Runtime, RuntimeDef};
use oracle::oracle_template;
use prepare::Prepared;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long the proxy lets an exited agent's calls finish before it cuts them.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// What the executor needs from the run command.
pub struct ExecutorConfig {
    pub root: PathBuf,
    pub work: PathBuf,
    pub store: ArtifactStore,
    /// Each attempt's artifact quota (`Loaded::artifact_quota`), reserved from `store`'s budget.
    pub artifact_quota: u64,
    pub identity: String,
    /// Bytes no container may see (the key); checked by the policy after create.
    pub forbidden: Vec<u8>,
    /// Extra container labels (tests sweep by them).
    pub extra_labels: BTreeMap<String, String>,
    /// The state directory's id (`run::owner`): every container is labelled
    /// `eval.owner=<state id>/<identity>`, and the session's sweep goes by that label.
    pub state_id: String,
    /// Each arm's frozen image id and expected attestation, fixed at admission.
    pub frozen: BTreeMap<String, FrozenArm>,
    /// The task bundles' verified copies, staged at admission.
    pub inputs: crate::inputs::TaskInputs,
}

/// A task of two or more rounds needs every arm it runs on to say how its harness continues:
/// checked at setup, so no attempt of such an arm starts without it. A one-round task (a
/// single-step Harbor task, `eval import harbor`) runs only the harness's first command.
fn arms_continue_rounds(
    loaded: &Loaded,
    arms: &BTreeMap<String, Arc<ArmImage>>,
) -> Result<(), SetupError> {
    for suite in &loaded.matrix.suites {
        let multi = loaded
            .tasks
            .iter()
            .find(|t| t.suite == suite.id && t.spec.rounds.len() > 1);
        for arm in suite.arms.iter().filter_map(|a| arms.get(a)) {
            if let Some(t) = multi
                && arm.def.def.harness.continue_command.is_none()
            {
                return Err(SetupError::Definition {
                    path: arm.def.path.display().to_string(),
                    source: Box::new(eval_runtimes::definition::DefinitionError::Invalid {
                        path: arm.def.path.display().to_string(),
                        field: "harness.continue_command".into(),
                        detail: format!(
                            "absent, but task {}/{} has rounds: the runtime must say how its harness continues the session",
                            t.suite, t.id
                        ),
                    }),
                });
            }
        }
    }
    Ok(())
}

impl DockerExecutor {
    pub fn new(
        loaded: &Loaded,
        rt: Arc<DockerRuntime>,
        proxy: ProxyHandle,
        control: Arc<Control>,
        bridge: Bridge,
        cfg: ExecutorConfig,
    ) -> Result<Self, SetupError> {
        let root = abs(&cfg.root);
        let p = &loaded.protocol;
        let arms = images::admitted_arms(&root, p, &cfg.frozen)?;
        let graders = images::grader_images(&root, &loaded.tasks)?;
        let tasks = loaded
            .tasks
            .iter()
            .map(|t| ((t.suite.clone(), t.id.clone()), t.clone()))
            .collect();
        arms_continue_rounds(loaded, &arms)?;
        let agent_contract = p.models.get("agent").ok_or(SetupError::NoAgentModel)?;
        let shim = eval_runtimes::static_bins::locate(eval_runtimes::static_bins::SHIM)
            .map_err(SetupError::from)?;
        std::fs::create_dir_all(&cfg.work).map_err(|source| SetupError::WorkDir {
            path: cfg.work.clone(),
            source,
        })?;
        let work = abs(&cfg.work);
        // A session killed mid-attempt left that attempt's filesystem mounted.
        disk::unmount_stale(&work);
        let sockets = SocketRoot::create(&work).map_err(SetupError::Sockets)?;
        Ok(Self {
            rt,
            proxy,
            control,
            bridge,
            store: store::AttemptStore::new(cfg.store, cfg.artifact_quota),
            root,
            inputs: cfg.inputs,
            work,
            protocol: p.name.clone(),
            identity: cfg.identity.clone(),
            arms,
            graders,
            tasks,
            agent: RoleSpec {
                contract: contract_of(agent_contract, 32_768),
                budget: agent_budget(p),
            },
            oracle: p.models.get("oracle").map(|m| {
                (
                    RoleSpec {
                        contract: contract_of(m, 32_768),
                        budget: agent_budget(p),
                    },
                    oracle_template(m),
                    m.api == eval_core::contract::ApiKind::AnthropicMessages,
                )
            }),
            max_tokens: p.budgets.attempt.max_tokens,
            wall_seconds: p.budgets.attempt.wall_seconds,
            max_oracle: p
                .suites
                .iter()
                .map(|(k, v)| (k.clone(), v.max_oracle_calls))
                .collect(),
            oracle_guard: p
                .suites
                .iter()
                .map(|(k, v)| (k.clone(), v.oracle_guard.clone()))
                .collect(),
            forbidden: cfg.forbidden,
            shim,
            extra_labels: {
                let mut labels = cfg.extra_labels;
                labels.insert(
                    crate::owner::LABEL_OWNER.to_owned(),
                    crate::owner::owner_value(&cfg.state_id, &cfg.identity),
                );
                labels
            },
            state_id: cfg.state_id,
            sockets,
            isolation: p.isolation,
            custom_exploits: p
                .suites
                .iter()
                .filter_map(|(k, v)| v.control_arms().map(|c| (k.clone(), c.exploits.clone())))
                .collect(),
        })
    }

    /// Removes the run's socket directory (after a session).
    pub fn cleanup(&self) {
        if let Err(e) = std::fs::remove_dir_all(self.sockets.path()) {
            tracing::warn!("{}: {e}", self.sockets.path().display());
        }
    }

    /// The label every container this state directory's sessions start for this identity
    /// carries (the resume sweep removes by it): never another state directory's containers,
    /// whose liveness this session cannot judge.
    pub fn sweep_label(&self) -> String {
        crate::owner::owner_label(&self.state_id, &self.identity)
    }

    fn facts(&self, spec: &AttemptSpec) -> AttemptFacts {
        AttemptFacts {
            protocol: self.protocol.clone(),
            identity: self.identity.clone(),
            arm: spec.slot.arm.clone(),
            attempt: spec.attempt.clone(),
            extra_labels: self.extra_labels.clone(),
        }
    }

    fn lookup(
        &self,
        spec: &AttemptSpec,
    ) -> Result<(Arc<ArmImage>, TaskBundle), Box<AttemptReport>> {
        let arm = self.arms.get(&spec.slot.arm).cloned().ok_or_else(|| {
            AttemptReport::infra(
                FaultCode::ControllerError,
                format!("arm {} is not in the protocol", spec.slot.arm),
            )
        })?;
        let key = (spec.slot.suite.clone(), spec.slot.task.clone());
        let task = self.tasks.get(&key).cloned().ok_or_else(|| {
            AttemptReport::infra(
                FaultCode::ControllerError,
                format!("task {}/{} is not loaded", spec.slot.suite, spec.slot.task),
            )
        })?;
        Ok((arm, task))
    }

    /// One attempt: image check → host preparation → control plane and proxy registration →
    /// the agent's container → every call recorded → leftovers read, archived, graded →
    /// classified. Any failure to record ends up in `recording_failure`.
    async fn run_attempt(&self, spec: &AttemptSpec, cancel: &CancellationToken) -> AttemptReport {
        let t0 = std::time::Instant::now();
        let mut report = self.attempt_in(spec, cancel, t0).await;
        if report.duration_seconds.is_none() {
            // No container started (none was even created): everything the attempt did was
            // preparation, and a fault here is retried without using a rerun.
            report.duration_seconds = Some(0.0);
            report.prepare_seconds = t0.elapsed().as_secs_f64();
            // A control arm runs no agent container but does run its grader: its faults are
            // not preparation failures.
            report.before_container = spec.slot.phase != eval_core::phase::Phase::Control;
        }
        report
    }

    /// The attempt from its beginning at `t0` (preparation is measured from there).
    async fn attempt_in(
        &self,
        spec: &AttemptSpec,
        cancel: &CancellationToken,
        t0: std::time::Instant,
    ) -> AttemptReport {
        if spec.slot.phase == eval_core::phase::Phase::Control {
            let dir = self.work.join(format!("{}-a{}", spec.slot.id, spec.number));
            let report = self.run_control(spec, &dir).await;
            self.remove_attempt_dir(&dir).await;
            if let Err(e) = self.sockets.remove_attempt(&spec.attempt) {
                tracing::warn!("attempt {}: its socket directory: {e}", spec.attempt);
            }
            return report;
        }
        let (arm, task) = match self.lookup(spec) {
            Ok(found) => found,
            Err(report) => return *report,
        };
        let image = match self.checked_image(spec, &arm).await {
            Ok(image) => image,
            Err(report) => return *report,
        };
        let dir = self.work.join(format!("{}-a{}", spec.slot.id, spec.number));
        let mut report = self
            .run_in(spec, cancel, (&arm, &task), &image, &dir, t0)
            .await;
        self.remove_attempt_dir(&dir).await;
        if let Err(e) = self.sockets.remove_attempt(&spec.attempt) {
            tracing::warn!("attempt {}: its socket directory: {e}", spec.attempt);
        }
        if report.recording_failure.is_none() {
            report.recording_failure = self.bridge.fatal();
        }
        report
    }

    /// The attempt once its image is checked: preparation, control plane, the agent's container
    /// (beside its rounds), the ledger closed, then the observations, grading and verdict.
    async fn run_in(
        &self,
        spec: &AttemptSpec,
        cancel: &CancellationToken,
        (arm, task): (&ArmImage, &TaskBundle),
        image: &ImageId,
        dir: &Path,
        t0: std::time::Instant,
    ) -> AttemptReport {
        let def = &arm.def.def;
        let (image_config, ids) = match self.image_user(def, image).await {
            Ok(found) => found,
            Err(report) => return report,
        };
        let with_state = def.metrics_root == eval_runtimes::definition::MetricsRoot::State;
        let limits = Some(disk::DiskLimits::of(&def.limits));
        let mut p = match self
            .prepare(spec, ids, task, dir, (with_state, limits))
            .await
        {
            Ok(p) => p,
            Err(report) => return *report,
        };
        let ctl = match self.attempt_control(spec, task, arm, image, &p.task_dir) {
            Ok(ctl) => ctl,
            Err(report) => return *report,
        };
        if let Err(report) = self.register(spec, &ctl, &p).await {
            self.control.remove(&spec.attempt);
            return *report;
        }
        let mut rounds = rounds::Rounds::default();
        let round_ends = match self
            .start_rounds(spec, task, dir, &mut p, &ctl, &mut rounds)
            .await
        {
            Ok(rx) => rx,
            Err(report) => return *report,
        };
        let before_agent = std::time::Instant::now();
        let (ran, agent_seconds) = self
            .run_agent_beside_rounds(
                spec,
                cancel,
                (def, &image_config),
                (task, image, &p),
                round_ends,
                &mut rounds,
            )
            .await;
        let started = match &ran {
            Ok(Some(end)) => end.started,
            // Cancelled, or failed around create or start: `run_agent` timed all of it.
            _ => before_agent,
        };
        // Every call of the attempt is in the ledger before anything is concluded from it.
        let meter = self
            .proxy
            .close_attempt_and_wait(&spec.attempt, CLOSE_GRACE)
            .await;
        self.bridge.flush().await;
        self.control.remove(&spec.attempt);
        let prepare = started.saturating_duration_since(t0);
        let mut report = agent_report(image, agent_seconds, prepare, &p.bundle_digest);
        let mut seen = Seen::default();
        observe_control(&ctl, &mut seen, &mut report);
        observe_meter(meter, &mut seen, &mut report);
        match ran {
            Err(e) => seen.obs.engine = Some(classify::engine_fault(&e)),
            Ok(None) => {
                report.cancelled = true;
                return self.conclude(spec, seen, report).await;
            }
            Ok(Some(end)) => {
                seen.obs.end = Some(container::end_of(&end.outcome, self.agent_timeout(task)));
                report.artifacts.agent_log =
                    self.store_bytes("the agent's log", &end.logs, &mut seen);
            }
        }
        if task.spec.is_multi_round() {
            self.close_rounds(spec, task, &p, rounds, &mut seen, &mut report)
                .await;
        }
        if classify(&seen.obs).outcome != eval_core::outcome::Outcome::InfraFault {
            self.grade_attempt(
                spec,
                (task, def),
                (dir, &ctl),
                &mut p,
                &mut seen,
                &mut report,
            )
            .await;
        }
        self.conclude(spec, seen, report).await
    }

    /// The image's own configuration, which decides the user (hence who owns the workspace), the
    /// environment, the working directory and, unless the definition names one, the command;
    /// and the user the agent runs as. An error is the attempt's infra fault.
    async fn image_user(
        &self,
        def: &RuntimeDef,
        image: &ImageId,
    ) -> Result<(eval_runtimes::ImageConfig, (u32, u32)), AttemptReport> {
        let image_config = match self.rt.inspect_image(image).await {
            Ok(c) => c,
            Err(e) => {
                let f = classify::engine_fault(&e);
                return Err(AttemptReport::infra(f.code, f.detail));
            }
        };
        let ids = match eval_runtimes::policy::effective_user(def, &image_config) {
            Ok(ids) => ids,
            Err(e) => {
                return Err(AttemptReport::infra(
                    FaultCode::ControllerError,
                    e.to_string(),
                ));
            }
        };
        Ok((image_config, ids))
    }

    /// A multi-round task's first round set up: the receiver of its rounds' ends (`None` for a
    /// single-round task). On failure the attempt's control plane is removed, as a failed
    /// registration removes it.
    async fn start_rounds(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        dir: &Path,
        p: &mut Prepared,
        ctl: &AttemptControl,
        rounds: &mut rounds::Rounds,
    ) -> Result<Option<tokio::sync::mpsc::Receiver<round_end::RoundEnd>>, Box<AttemptReport>> {
        if !task.spec.is_multi_round() {
            return Ok(None);
        }
        match self.begin_rounds(spec, task, dir, p, ctl, rounds).await {
            Ok(rx) => Ok(Some(rx)),
            Err(report) => {
                self.control.remove(&spec.attempt);
                Err(report)
            }
        }
    }

    /// The agent's container, and for a multi-round task the loop that serves each round's end
    /// beside it until the container has ended. Returns what `run_agent` returns.
    async fn run_agent_beside_rounds(
        &self,
        spec: &AttemptSpec,
        cancel: &CancellationToken,
        (def, image_config): (&RuntimeDef, &eval_runtimes::ImageConfig),
        (task, image, p): (&TaskBundle, &ImageId, &Prepared),
        round_ends: Option<tokio::sync::mpsc::Receiver<round_end::RoundEnd>>,
        rounds: &mut rounds::Rounds,
    ) -> (
        Result<Option<eval_runtimes::RunEnd>, eval_runtimes::RuntimeError>,
        f64,
    ) {
        match round_ends {
            None => {
                self.run_agent(spec, cancel, (def, image_config), task, image, p)
                    .await
            }
            Some(rx) => {
                // The container and its rounds side by side: the loop serves each round's end
                // until the container has ended.
                let done = CancellationToken::new();
                let agent = async {
                    let r = self
                        .run_agent(spec, cancel, (def, image_config), task, image, p)
                        .await;
                    done.cancel();
                    r
                };
                let (r, ()) = tokio::join!(
                    agent,
                    self.round_loop(spec, task, p, rx, done.clone(), rounds)
                );
                r
            }
        }
    }

    /// An attempt whose agent ended without an infra fault: the oracle record written when the
    /// grader reads it, the grader run, and the oracle's metrics added.
    async fn grade_attempt(
        &self,
        spec: &AttemptSpec,
        (task, def): (&TaskBundle, &RuntimeDef),
        (dir, ctl): (&Path, &AttemptControl),
        p: &mut Prepared,
        seen: &mut Seen,
        report: &mut AttemptReport,
    ) {
        if task
            .spec
            .oracle
            .as_ref()
            .is_some_and(|o| o.grader_reads_record)
        {
            // Written after the agent's container is gone, beside (never in) its
            // workspace: the agent cannot see or shape it beyond its questions.
            match write_oracle_record(dir, &ctl.oracle_record()) {
                Ok(d) => p.oracle_record = Some(d),
                Err(e) => seen.obs.host_io = Some(classify::HostIo::of("the oracle record", &e)),
            }
        }
        self.after_agent(spec, task, def, p, seen, report).await;
        // The oracle metrics are the controller's own observation of the questions, whatever
        // the grader made of the workspace; they win over a grader's metric of the name.
        report.metrics.extend(ctl.oracle_metrics());
    }

    /// A multi-round attempt after its container: the open round finished, the unreached ones
    /// recorded, the rounds' observations and the attempt's metrics (`rounds::attempt_metrics`).
    async fn close_rounds(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        mut rounds: rounds::Rounds,
        seen: &mut Seen,
        report: &mut AttemptReport,
    ) {
        self.finish_open_round(spec, task, p, seen.obs.end.as_ref(), report, &mut rounds)
            .await;
        let declared = task.spec.rounds.len();
        seen.obs.rounds = rounds.observed(declared);
        if let Some(e) = rounds.seen.obs.grader_engine.take()
            && let Some(r) = seen
                .obs
                .rounds
                .iter_mut()
                .find(|r| r.graded == classify::Graded::NotRun)
        {
            r.grader_engine = Some(e);
        }
        seen.notes.append(&mut rounds.seen.notes);
        let o = rounds.seen.obs;
        if seen.obs.engine.is_none() {
            seen.obs.engine = o.engine;
        }
        if seen.obs.host_io.is_none() {
            seen.obs.host_io = o.host_io;
        }
        if seen.obs.leftover_host_fault.is_none() {
            seen.obs.leftover_host_fault = o.leftover_host_fault;
        }
        if seen.obs.over_budget.is_none() {
            seen.obs.over_budget = o.over_budget;
        }
        report.container_seconds += rounds.container_seconds;
        report.metrics = rounds::attempt_metrics(&rounds.finished, declared, &rounds.tests);
        if report.recording_failure.is_none() {
            report.recording_failure = rounds.recording_failure;
        }
    }

    /// The agent's leftovers: the accounting cross-check, the archive, then the grader (every
    /// outcome but an infrastructure fault is graded: failures are scores too).
    async fn after_agent(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        def: &RuntimeDef,
        p: &Prepared,
        seen: &mut Seen,
        report: &mut AttemptReport,
    ) {
        // Reading, hashing, fsyncing and removing the agent's files (up to the archive's cap)
        // is blocking work: it runs on the blocking pool, so the runtime's workers keep serving
        // sibling attempts' proxies meanwhile.
        let (store, def_owned) = (self.store.clone(), def.clone());
        let (workspace, state) = (p.workspace.clone(), p.state.clone());
        let taken = (std::mem::take(seen), std::mem::take(report));
        let done = off_runtime(move || {
            let (mut seen, mut report) = taken;
            leftovers(
                &store,
                &def_owned,
                &workspace,
                state.as_deref(),
                &mut seen,
                &mut report,
            );
            (seen, report)
        })
        .await;
        match done {
            Ok((s, r)) => (*seen, *report) = (s, r),
            Err(why) => {
                // The observations went with the task: this attempt's evidence is incomplete.
                report.recording_failure = Some(why);
                return;
            }
        }
        // Past the artifact budget the attempt is not graded: its outcome is decided. A
        // multi-round attempt was graded round by round (`close_rounds`).
        if classify(&seen.obs).outcome == eval_core::outcome::Outcome::InfraFault
            || seen.obs.over_budget.is_some()
            || task.spec.is_multi_round()
        {
            return;
        }
        self.grade(spec, task, p, seen, report).await;
    }

    /// The outcome, and the notes recorded before it.
    async fn conclude(
        &self,
        spec: &AttemptSpec,
        seen: Seen,
        mut report: AttemptReport,
    ) -> AttemptReport {
        if seen.obs.over_budget.is_some() {
            // Not graded, or graded before its last artifact was refused: either way the
            // metrics are the protocol's missing-data values.
            report.metrics.clear();
        }
        if !report.cancelled {
            let Classification {
                outcome,
                infra_fault,
                detail,
            } = classify(&seen.obs);
            report.outcome = Some(outcome);
            report.infra_fault = infra_fault;
            report.detail = detail;
        }
        if !seen.notes.is_empty() {
            let note = AttemptNote {
                schema: events::SCHEMA,
                attempt: spec.attempt.clone(),
                notes: seen.notes,
            };
            if let Err(e) = self.control.rec.append(events::ATTEMPT_NOTE, &note).await
                && report.recording_failure.is_none()
            {
                report.recording_failure = Some(format!(
                    "cannot record the notes of attempt {}: {e}",
                    spec.attempt
                ));
            }
        }
        report
    }

    /// Removes the attempt's directory — only ever a direct child of the executor's work
    /// directory, whatever the slot id says — on the blocking pool (an agent-made tree can be
    /// millions of entries).
    async fn remove_attempt_dir(&self, dir: &Path) {
        if !is_attempt_dir(&self.work, dir) {
            tracing::error!(
                "refusing to remove {}: not an attempt directory under {}",
                dir.display(),
                self.work.display()
            );
            return;
        }
        let owned = dir.to_path_buf();
        match off_runtime(move || remove_attempt_tree(&owned)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("{}: {e}", dir.display()),
            Err(e) => tracing::warn!("{}: {e}", dir.display()),
        }
    }
}

/// The agent's files after its container: the accounting cross-check, then the archive.
fn leftovers(
    store: &ArtifactStore,
    def: &RuntimeDef,
    workspace: &Path,
    state: Option<&Path>,
    seen: &mut Seen,
    report: &mut AttemptReport,
) {
    let ws = match eval_evidence::leftovers::Beneath::open(workspace) {
        Ok(ws) => ws,
        Err(e) => {
            seen.leftover("the workspace", &e);
            if def.metrics_path.is_some() {
                seen.obs.accounting =
                    classify::Accounting::MetricsUnreadable(format!("the workspace: {e}"));
                report.accounting = Some(seen.obs.accounting.as_str().to_owned());
            }
            seen.obs.graded = classify::Graded::Unscorable(format!("the workspace: {e}"));
            return;
        }
    };
    accounting::cross_check(store, def, &ws, state, seen, report);
    archive::archive(store, workspace, seen, report);
}

/// The control plane's side of the attempt: attestation, questions, recording failures.
fn observe_control(ctl: &AttemptControl, seen: &mut Seen, report: &mut AttemptReport) {
    seen.obs.attested = match ctl.attested() {
        AttestState::Pending => Attested::Missing,
        AttestState::Decided { ok, digest } => {
            report.attestation = Some(digest);
            if ok {
                Attested::Ok
            } else {
                Attested::Mismatch("the shim's digests differ from the frozen arm".into())
            }
        }
    };
    seen.obs.oracle = Oracle {
        unavailable: ctl.oracle_unavailable(),
        refused: ctl.refused(),
    };
    report.clarification_questions = u64::from(ctl.asked());
    if ctl.malformed() > 0 {
        seen.notes.push(format!(
            "{} oracle repl(ies) were malformed; the agent got the task's fallback answer",
            ctl.malformed()
        ));
    }
    if ctl.triggers_dropped() > 0 {
        seen.notes.push(format!(
            "{} element(s) of the oracle's recorded triggers were dropped (not an id of the brief, a repeat, or over the suite's oracle_guard.max_triggers_per_question)",
            ctl.triggers_dropped()
        ));
    }
    if ctl.replies_flagged() > 0 {
        seen.notes.push(format!(
            "{} oracle repl(ies) quoted the brief beyond the suite's oracle_guard.max_brief_overlap (flagged in their clarification entries)",
            ctl.replies_flagged()
        ));
    }
    if ctl.unrecorded_events() > 0 {
        seen.notes.push(format!(
            "{} further refused request(s) of the agent were counted but not recorded one by one",
            ctl.unrecorded_events()
        ));
    }
    report.recording_failure = ctl.fatal();
}

/// Writes an attempt's oracle record (`AttemptControl::oracle_record`, or a regrade's
/// `oracle::regrade_record`) as `<dir>/oracle/record.json` and returns the directory the grader
/// gets read-only. A small file, written once per attempt (not worth the blocking pool).
pub(crate) fn write_oracle_record(dir: &Path, record: &Value) -> std::io::Result<PathBuf> {
    let d = dir.join("oracle");
    std::fs::create_dir_all(&d)?;
    let bytes = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
    eval_protocols::statefs::replace_file(&d.join("record.json"), &bytes)?;
    Ok(d)
}

/// The proxy's meter of the attempt: the agent role's upstream outcomes and usage.
fn observe_meter(
    meter: Result<AttemptMeter, eval_proxy::ProxyError>,
    seen: &mut Seen,
    report: &mut AttemptReport,
) {
    let meter = match meter {
        Ok(m) => m,
        Err(e) => {
            seen.obs.engine = Some(EngineFault {
                code: FaultCode::ControllerError,
                detail: format!("the proxy has no meter for the attempt: {e}"),
            });
            return;
        }
    };
    report.oracle_calls = meter.roles.get(&Role::Oracle).map_or(0, |o| o.calls);
    let Some(agent) = meter.roles.get(&Role::Agent) else {
        seen.obs.engine = Some(EngineFault {
            code: FaultCode::ControllerError,
            detail: "the proxy has no meter for the agent role".into(),
        });
        return;
    };
    report.model_turns = agent.turns;
    report.tokens = agent.tokens();
    report.incomplete = (agent.incomplete_calls > 0).then_some(IncompleteCalls {
        calls: agent.incomplete_calls,
        reserved_tokens: agent.incomplete_reserved_tokens,
        streamed_bytes: agent.incomplete_streamed_bytes,
        seen_tokens: agent.incomplete_seen_tokens,
    });
    seen.obs.provider = Provider {
        account_refused: (agent.upstream_account_refusals > 0).then(|| {
            match &agent.last_provider_fault {
                Some(f) if f.kind == "account" => format!(
                    "{} (upstream status {})",
                    f.detail,
                    f.status.map_or("none".to_owned(), |s| s.to_string())
                ),
                _ => "the upstream refused the API key or the account".to_owned(),
            }
        }),
        last_fault: agent.last_provider_fault.clone(),
    };
    seen.obs.upstream = Upstream {
        // An incomplete call still showed the agent model output: for the "never answered" rule
        // it counts as answered.
        turns: agent.turns + agent.incomplete_calls,
        contract_violations: agent.contract_violations,
        budget_exhaustions: agent.budget_exhaustions,
        client_errors: agent.upstream_client_errors,
        server_errors: agent.upstream_server_errors,
        transport_errors: agent.upstream_transport_errors,
    };
}

impl AttemptExecutor for DockerExecutor {
    fn run<'a>(
        &'a self,
        spec: &'a AttemptSpec,
        rec: Recorder,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, AttemptReport> {
        Box::pin(async move {
            match self.store.scope(self.run_attempt(spec, &cancel)).await {
                Ok(report) => report,
                Err(why) => {
                    // Not this attempt's doing (it has stored nothing): the run stops, named,
                    // and the slot runs again when the run continues.
                    let why = format!("{}: {why}", spec.attempt);
                    rec.stop_for_host(&why);
                    let mut report = AttemptReport::infra(FaultCode::FilesystemCapacity, why);
                    report.duration_seconds = Some(0.0);
                    report.before_container = true;
                    report
                }
            }
        })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<usize, eval_runtimes::RuntimeError>> {
        Box::pin(async move { self.rt.sweep(&self.sweep_label()).await })
    }
}

/// The report of an attempt whose agent ran: its image, how long the agent's container ran (the
/// attempt's duration), how long preparing took, and the bundle it was given.
fn agent_report(
    image: &ImageId,
    agent_seconds: f64,
    prepare: std::time::Duration,
    bundle: &eval_core::Digest,
) -> AttemptReport {
    AttemptReport {
        image: Some(image.0.clone()),
        container_seconds: agent_seconds,
        duration_seconds: Some(agent_seconds),
        prepare_seconds: prepare.as_secs_f64(),
        bundle_digest: Some(bundle.to_string()),
        ..AttemptReport::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent can make its workspace far deeper than PATH_MAX allows to name; removing the
    /// attempt must neither fail nor follow the links the agent left.
    #[test]
    fn an_attempt_tree_thousands_of_levels_deep_is_removed_without_following_links() {
        use rustix::fs::{CWD, Mode, OFlags, mkdirat, openat, symlinkat};
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"host file").unwrap();
        let dir = tmp.path().join("slot-a1");
        std::fs::create_dir_all(dir.join("workspace")).unwrap();
        std::fs::create_dir_all(dir.join("out")).unwrap();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut fd = openat(CWD, dir.join("workspace"), flags, Mode::empty()).unwrap();
        for _ in 0..3000 {
            mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = openat(&fd, "d", flags, Mode::empty()).unwrap();
        }
        symlinkat(&outside, &fd, "link").unwrap();
        std::fs::write(dir.join("out/score.json"), b"{}").unwrap();
        remove_attempt_tree(&dir).unwrap();
        assert!(!dir.exists());
        assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"host file");
        // Already gone: nothing to do, no error.
        remove_attempt_tree(&dir).unwrap();
    }

    /// Blocking work must not hold the runtime: on a single-threaded runtime, a sibling future
    /// (standing for another attempt's proxy) runs while the blocking work waits for it. Done on
    /// the runtime's own thread, the work would wait forever for a sibling that never gets
    /// polled; the bound only turns that hang into a failure and is never reached when it
    /// works.
    #[test]
    fn blocking_work_leaves_the_runtime_to_its_siblings() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (work, sibling) = rt.block_on(async move {
            tokio::join!(
                off_runtime(move || rx.recv_timeout(std::time::Duration::from_secs(120))),
                async move { tx.send(()).is_ok() }
            )
        });
        assert!(sibling);
        assert!(
            work.unwrap().is_ok(),
            "the sibling never ran during the work"
        );
    }

    #[test]
    fn only_a_direct_child_of_the_work_dir_is_ever_removed() {
        let work = Path::new("/state/run/attempts");
        assert!(is_attempt_dir(work, &work.join("slot-a1")));
        assert!(!is_attempt_dir(work, work));
        assert!(!is_attempt_dir(work, &work.join("a/b")));
        assert!(!is_attempt_dir(work, &work.join("..")));
        assert!(!is_attempt_dir(work, &work.join("../../etc")));
        assert!(!is_attempt_dir(work, Path::new("/")));
        // What `work.join(slot)` gives for a slot id starting with `/`.
        assert!(!is_attempt_dir(work, Path::new("/etc")));
        assert!(!is_attempt_dir(
            work,
            Path::new("/state/run/attempts-other/x")
        ));
    }
}
