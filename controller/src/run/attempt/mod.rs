//! One attempt, for real: fresh workspace copy → proxy registration (own socket, budgets) →
//! agent container under the policy → attestation → run to exit/timeout → metrics cross-check →
//! workspace archived → grader container → outcome with metrics.
//!
//! The proxy and the runtime are reached only through this module, so their APIs stay local.

mod accounting;
mod bridge;
mod container;
mod contract;
mod control;
mod grade;
mod images;
mod oracle;
mod prepare;

pub use accounting::accounting_mismatch;
pub use bridge::Bridge;
pub use contract::contract_of;
pub use control::Control;
pub use images::{FrozenArm, frozen_arms};
pub use prepare::copy_tree;

use super::events::{self, Attestation, Outcome, Tokens};
use super::{AttemptExecutor, AttemptReport, AttemptSpec, BoxFuture, Recorder};
use container::infra_of;
use contract::agent_budget;
use control::AttemptControl;
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::Digest;
use eval_protocols::{Loaded, TaskBundle};
use eval_proxy::{Listen, ProxyHandle, Role, RoleSpec};
use eval_runtimes::policy::{AttemptFacts, RoleMounts};
use eval_runtimes::{
    ArmFiles, DockerRuntime, ImageId, ImageSpec, Runtime, RuntimeDef, WaitOutcome,
};
use images::{ArmImage, arm_image_spec};
use oracle::{OracleAsk, oracle_template};
use prepare::{socket_dir, sockets_root};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

/// Fault code when the grader could not score a workspace.
pub const GRADER_FAILURE: &str = "grader_failure";
/// Fault code for a controller-side failure preparing an attempt (host files).
pub const HOST_IO: &str = "filesystem_capacity";

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Definition(String),
    #[error("{0}")]
    Runtime(String),
}

/// Runs attempts in Docker containers through the proxy.
pub struct DockerExecutor {
    rt: Arc<DockerRuntime>,
    proxy: ProxyHandle,
    control: Arc<Control>,
    bridge: Bridge,
    store: ArtifactStore,
    root: PathBuf,
    work: PathBuf,
    protocol: String,
    identity: String,
    arms: BTreeMap<String, Arc<ArmImage>>,
    graders: BTreeMap<String, Arc<ArmImage>>,
    tasks: BTreeMap<(String, String), TaskBundle>,
    agent: RoleSpec,
    /// The `oracle` role and its request template, when the protocol names an oracle model.
    oracle: Option<(RoleSpec, Value, bool)>,
    max_tokens: u64,
    wall_seconds: u64,
    max_oracle: BTreeMap<String, u32>,
    forbidden: Vec<u8>,
    shim: PathBuf,
    extra_labels: BTreeMap<String, String>,
}

/// What the executor needs from the run command.
pub struct ExecutorConfig {
    pub root: PathBuf,
    pub work: PathBuf,
    pub store: ArtifactStore,
    pub identity: String,
    /// Bytes no container may see (the key); checked by the policy after create.
    pub forbidden: Vec<u8>,
    /// Extra container labels (tests sweep by them).
    pub extra_labels: BTreeMap<String, String>,
    /// Each arm's frozen image id and expected attestation, fixed at admission.
    pub frozen: BTreeMap<String, FrozenArm>,
}

fn abs(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
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
        let load_def = |rel: &str| {
            RuntimeDef::load(&root.join(rel))
                .map_err(|e| SetupError::Definition(format!("{rel}: {e}")))
        };
        let mut arms = BTreeMap::new();
        for a in &p.arms {
            let def = load_def(&a.runtime)?;
            let frozen = cfg.frozen.get(&a.id).cloned().ok_or_else(|| {
                SetupError::Definition(format!("arm {} was not admitted (no frozen image)", a.id))
            })?;
            let spec = arm_image_spec(&root, a, def.clone());
            arms.insert(
                a.id.clone(),
                Arc::new(ArmImage {
                    def,
                    spec,
                    frozen_image: frozen.image,
                    expected: frozen.expected,
                    id: OnceCell::new(),
                }),
            );
        }
        let mut graders = BTreeMap::new();
        let mut tasks = BTreeMap::new();
        for t in &loaded.tasks {
            let rel = t.spec.grader.runtime.clone();
            if let std::collections::btree_map::Entry::Vacant(slot) = graders.entry(rel.clone()) {
                let def = load_def(&rel)?;
                let spec = ImageSpec {
                    def: def.clone(),
                    arm: ArmFiles::default(),
                    labels: BTreeMap::new(),
                };
                slot.insert(Arc::new(ArmImage {
                    def,
                    spec,
                    frozen_image: None,
                    expected: BTreeMap::new(),
                    id: OnceCell::new(),
                }));
            }
            tasks.insert((t.suite.clone(), t.id.clone()), t.clone());
        }
        let agent_contract = p
            .models
            .get("agent")
            .ok_or_else(|| SetupError::Definition("the protocol has no [models.agent]".into()))?;
        let shim = eval_runtimes::static_bins::locate(eval_runtimes::static_bins::SHIM)
            .map_err(|e| SetupError::Runtime(e.to_string()))?;
        std::fs::create_dir_all(&cfg.work)
            .map_err(|e| SetupError::Runtime(format!("{}: {e}", cfg.work.display())))?;
        Ok(Self {
            rt,
            proxy,
            control,
            bridge,
            store: cfg.store,
            root,
            work: abs(&cfg.work),
            protocol: p.name.clone(),
            identity: cfg.identity,
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
                    m.api == eval_protocols::protocol::ApiKind::AnthropicMessages,
                )
            }),
            max_tokens: p.budgets.attempt.max_tokens,
            wall_seconds: p.budgets.attempt.wall_seconds,
            max_oracle: p
                .suites
                .iter()
                .map(|(k, v)| (k.clone(), v.max_oracle_calls))
                .collect(),
            forbidden: cfg.forbidden,
            shim,
            extra_labels: cfg.extra_labels,
        })
    }

    /// Removes the run's socket directory (after a session).
    pub fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(sockets_root(&self.work));
    }

    /// The label every container of this identity carries (the resume sweep removes by it).
    pub fn sweep_label(&self) -> String {
        format!(
            "{}={}",
            eval_runtimes::policy::LABEL_IDENTITY,
            self.identity
        )
    }

    async fn image(&self, a: &ArmImage) -> Result<ImageId, (String, String)> {
        a.id.get_or_init(|| async {
            self.rt.ensure_image(&a.spec).await.map_err(|e| {
                (
                    e.fault()
                        .map(|f| f.as_str().to_owned())
                        .unwrap_or_else(|| "image_missing".into()),
                    e.to_string(),
                )
            })
        })
        .await
        .clone()
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

    async fn run_attempt(&self, spec: &AttemptSpec, cancel: &CancellationToken) -> AttemptReport {
        let Some(arm) = self.arms.get(&spec.slot.arm).cloned() else {
            return AttemptReport::infra(
                "controller_error",
                format!("arm {} is not in the protocol", spec.slot.arm),
            );
        };
        let Some(task) = self
            .tasks
            .get(&(spec.slot.suite.clone(), spec.slot.task.clone()))
            .cloned()
        else {
            return AttemptReport::infra(
                "controller_error",
                format!("task {}/{} is not loaded", spec.slot.suite, spec.slot.task),
            );
        };
        // The arm's files must still make the frozen image, now, before every attempt: a byte
        // changed after admission ends the attempt here, and no container is made.
        if arm.def.def.build.is_some()
            && let Some(frozen) = &arm.frozen_image
            && let Ok(now) = eval_runtimes::image_id(&arm.spec)
            && &now != frozen
        {
            return self
                .refuse_image(spec, &arm, &now, format!(
                    "the arm's files now make image {now}, not the frozen {frozen}: an input changed after admission"
                ))
                .await;
        }
        let image = match self.image(&arm).await {
            Ok(i) => i,
            Err((code, detail)) => return AttemptReport::infra(&code, detail),
        };
        if let Some(frozen) = &arm.frozen_image
            && &image != frozen
        {
            return self
                .refuse_image(
                    spec,
                    &arm,
                    &image,
                    format!("the arm's image is {image}, not the frozen {frozen}"),
                )
                .await;
        }
        let dir = self.work.join(format!("{}-a{}", spec.slot.id, spec.number));
        let result = self.run_in(spec, cancel, &arm, &task, &image, &dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(socket_dir(&self.work, &spec.attempt));
        result
    }

    /// Ends an attempt as `infra_fault(attestation_mismatch)` before any container exists,
    /// recording the refusal as the attempt's `attestation` entry.
    async fn refuse_image(
        &self,
        spec: &AttemptSpec,
        arm: &ArmImage,
        image: &ImageId,
        problem: String,
    ) -> AttemptReport {
        let payload = Attestation {
            schema: events::SCHEMA,
            attempt: spec.attempt.clone(),
            ok: false,
            image: image.0.clone(),
            reported: BTreeMap::new(),
            expected: arm
                .expected
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().unwrap_or_else(|| "absent".into())))
                .collect(),
            problems: vec![problem.clone()],
        };
        let mut report = AttemptReport::infra(
            eval_runtimes::FaultCode::AttestationMismatch.as_str(),
            format!("{problem}; the agent never started"),
        );
        report.image = Some(image.0.clone());
        if self
            .control
            .rec
            .append(events::ATTESTATION, &payload)
            .await
            .is_ok()
        {
            report.attestation = eval_evidence::canonical::to_vec(&payload)
                .ok()
                .map(|b| Digest::of(&b).to_string());
        }
        report
    }

    async fn run_in(
        &self,
        spec: &AttemptSpec,
        cancel: &CancellationToken,
        arm: &ArmImage,
        task: &TaskBundle,
        image: &ImageId,
        dir: &Path,
    ) -> AttemptReport {
        let task_dir = self.root.join(&task.dir);
        let workspace = dir.join("workspace");
        let out = dir.join("out");
        let socket = socket_dir(&self.work, &spec.attempt).join("a.sock");
        let prep = (|| -> std::io::Result<()> {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir)?;
            copy_tree(&task_dir.join("workspace"), &workspace)?;
            std::fs::create_dir_all(&out)?;
            std::fs::create_dir_all(socket.parent().unwrap_or(dir))?;
            Ok(())
        })();
        if let Err(e) = prep {
            return AttemptReport::infra(HOST_IO, format!("preparing {}: {e}", dir.display()));
        }
        let def = &arm.def.def;
        if let Err(e) = eval_runtimes::host::prepare_workspace(&workspace, def)
            .and_then(|_| eval_runtimes::host::prepare_workspace(&out, def))
        {
            return infra_of(&e);
        }
        // Oracle: scripted answers from the task's hidden files (never mounted for the agent).
        let mut answers = BTreeMap::new();
        let mut max_questions = 0;
        let mut oracle = None;
        if let Some(o) = &task.spec.oracle {
            max_questions = o
                .max_questions
                .min(*self.max_oracle.get(&spec.slot.suite).unwrap_or(&0));
            if o.answered_by == eval_protocols::task::OracleAnswerer::Model {
                let Some((_, template, anthropic)) = &self.oracle else {
                    return AttemptReport::infra(
                        "controller_error",
                        "the task's oracle is a model but the protocol names no [models.oracle]",
                    );
                };
                let brief = match std::fs::read_to_string(task_dir.join(&o.answers)) {
                    Ok(b) => b,
                    Err(e) => return AttemptReport::infra(HOST_IO, format!("{}: {e}", o.answers)),
                };
                oracle = Some(OracleAsk {
                    template: template.clone(),
                    anthropic: *anthropic,
                    brief,
                });
            } else if let Ok(text) = std::fs::read_to_string(task_dir.join(&o.answers))
                && let Ok(v) = toml::from_str::<toml::Table>(&text)
                && let Some(qa) = v.get("qa").and_then(|q| q.as_array())
            {
                for item in qa {
                    if let (Some(q), Some(a)) = (
                        item.get("question").and_then(|x| x.as_str()),
                        item.get("answer").and_then(|x| x.as_str()),
                    ) {
                        answers.insert(q.to_owned(), a.to_owned());
                    }
                }
            }
        }
        let ctl = Arc::new(AttemptControl {
            image: image.0.clone(),
            expected: arm.expected.clone(),
            attested: Mutex::new(None),
            answers,
            oracle: oracle.clone(),
            oracle_failed: std::sync::atomic::AtomicBool::new(false),
            max_questions,
            asked: AtomicU32::new(0),
            answered: AtomicU32::new(0),
        });
        self.control.insert(&spec.attempt, ctl.clone());
        let mut roles = BTreeMap::new();
        roles.insert(Role::Agent, self.agent.clone());
        if oracle.is_some()
            && let Some((role, _, _)) = &self.oracle
        {
            // The oracle role may answer at most the questions the task allows.
            let mut role = role.clone();
            role.budget.max_requests = Some(u64::from(max_questions));
            role.budget.max_tokens = Some(self.max_tokens);
            roles.insert(Role::Oracle, role);
        }
        let reg = self
            .proxy
            .register_attempt(eval_proxy::AttemptSpec {
                attempt_id: spec.attempt.clone(),
                arm: spec.slot.arm.clone(),
                session_id: spec.attempt.clone(),
                listen: Listen::Unix(socket.clone()),
                roles,
            })
            .await;
        if let Err(e) = reg {
            self.control.remove(&spec.attempt);
            return AttemptReport::infra("proxy_failure", e.to_string());
        }
        let _ = eval_runtimes::host::prepare_socket(&socket, def);
        let mounts = RoleMounts::Agent {
            workspace: workspace.clone(),
            prompt: task_dir.join("prompt.md"),
            socket: socket.clone(),
            shim: self.shim.clone(),
        };
        let timeout = Duration::from_secs(task.spec.timeout_seconds.min(self.wall_seconds).max(1));
        let forbidden: Vec<&[u8]> = if self.forbidden.is_empty() {
            vec![]
        } else {
            vec![&self.forbidden[..]]
        };
        let t0 = std::time::Instant::now();
        let ran = match eval_runtimes::container_spec(def, image, &self.facts(spec), &mounts) {
            Err(e) => Err(e),
            Ok(cspec) => {
                let run = eval_runtimes::run_to_end(
                    self.rt.as_ref(),
                    &cspec,
                    &forbidden,
                    timeout,
                    256 * 1024,
                );
                tokio::pin!(run);
                let finished = tokio::select! {
                    r = &mut run => Some(r),
                    _ = cancel.cancelled() => None,
                };
                match finished {
                    Some(r) => r.map(Some),
                    None => {
                        self.stop_container(&spec.attempt, run).await;
                        Ok(None)
                    }
                }
            }
        };
        let mut container_seconds = t0.elapsed().as_secs_f64();
        let meter = self
            .proxy
            .close_attempt_and_wait(&spec.attempt, Duration::from_secs(10))
            .await
            .ok();
        self.bridge.flush().await;
        self.control.remove(&spec.attempt);
        let mut report = AttemptReport {
            image: Some(image.0.clone()),
            clarification_questions: u64::from(ctl.asked.load(Ordering::SeqCst)),
            ..AttemptReport::default()
        };
        let attested = ctl
            .attested
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        report.attestation = attested.as_ref().map(|(_, d)| d.clone());
        let agent = meter
            .as_ref()
            .and_then(|m| m.roles.get(&Role::Agent).cloned())
            .unwrap_or_default();
        report.model_turns = agent.turns;
        report.tokens = Tokens {
            input: agent.input_tokens,
            output: agent.output_tokens,
            cached: agent.cached_input_tokens,
            reasoning: agent.reasoning_tokens,
        };
        report.oracle_calls = meter
            .as_ref()
            .and_then(|m| m.roles.get(&Role::Oracle).map(|o| o.calls))
            .unwrap_or(0);
        let end = match ran {
            Err(e) => {
                let mut r = infra_of(&e);
                r.tokens = report.tokens;
                r.model_turns = report.model_turns;
                return r;
            }
            Ok(None) => {
                report.cancelled = true;
                return report;
            }
            Ok(Some(end)) => end,
        };
        if let Ok(d) = self.store.put_bytes(&end.logs) {
            report.artifacts.agent_log = Some(d.to_string());
        }
        // Outcome, by the first rule that applies.
        let exit_code = match end.outcome {
            WaitOutcome::Exited { code } => Some(code),
            WaitOutcome::TimedOut => None,
        };
        let mut outcome = match attested {
            Some((false, _)) => {
                report.outcome = Some(Outcome::InfraFault);
                report.infra_fault = Some(
                    eval_runtimes::FaultCode::AttestationMismatch
                        .as_str()
                        .into(),
                );
                report.detail = Some(
                    "the shim's digests differ from the frozen arm; the agent never started".into(),
                );
                report.container_seconds = container_seconds;
                return report;
            }
            _ => Outcome::Completed,
        };
        if ctl.oracle_failed.load(Ordering::SeqCst) {
            report.outcome = Some(Outcome::InfraFault);
            report.infra_fault = Some("oracle_service_unavailable".into());
            report.detail = Some("the oracle model could not answer a clarifying question".into());
            report.container_seconds = container_seconds;
            return report;
        }
        let mut detail = None;
        if exit_code.is_none() {
            outcome = Outcome::Timeout;
            detail = Some(format!("killed after {}s", timeout.as_secs()));
        } else if agent.contract_violations > 0 {
            outcome = Outcome::ContractViolation;
            detail = Some(format!(
                "{} call(s) outside the model contract",
                agent.contract_violations
            ));
        } else if agent.budget_exhaustions > 0 {
            outcome = Outcome::BudgetExhausted;
            detail = Some(format!(
                "{} call(s) refused over budget",
                agent.budget_exhaustions
            ));
        } else if agent.upstream_errors > 0 && agent.turns == 0 {
            report.outcome = Some(Outcome::InfraFault);
            report.infra_fault = Some("host_network_outage".into());
            report.detail = Some("the upstream failed before any model call was answered".into());
            report.container_seconds = container_seconds;
            return report;
        } else if exit_code != Some(0) {
            outcome = Outcome::AgentError;
            detail = Some(format!(
                "the agent exited with status {}",
                exit_code.unwrap_or(-1)
            ));
        }
        // The harness's own accounting must equal the proxy's meter.
        if let Some(rel) = &def.metrics_path {
            let path = workspace.join(rel);
            if let Ok(bytes) = std::fs::read(&path) {
                if let Ok(d) = self.store.put_bytes(&bytes) {
                    report.artifacts.agent_metrics = Some(d.to_string());
                }
                if let Ok(m) = serde_json::from_slice::<Value>(&bytes) {
                    let turns = m.get("model_turns").and_then(Value::as_u64).unwrap_or(0);
                    let total = m.get("total_tokens").and_then(Value::as_u64).unwrap_or(0);
                    report.harness = Some(events::HarnessAccount {
                        model_turns: turns,
                        total_tokens: total,
                    });
                    if outcome == Outcome::Completed
                        && let Some(why) = accounting_mismatch(
                            (turns, total),
                            (agent.turns, agent.input_tokens + agent.output_tokens),
                        )
                    {
                        outcome = Outcome::AccountingMismatch;
                        detail = Some(why);
                    }
                }
            }
            // The grader and the archive never see the harness's bookkeeping.
            if let Some(first) = Path::new(rel).components().next() {
                let top = workspace.join(first);
                if top.is_dir() {
                    let _ = std::fs::remove_dir_all(&top);
                } else {
                    let _ = std::fs::remove_file(&top);
                }
            }
        }
        match self.store.put_dir(&workspace) {
            Ok(d) => report.artifacts.workspace = Some(d.to_string()),
            Err(e) => {
                report.outcome = Some(Outcome::InfraFault);
                report.infra_fault = Some(HOST_IO.into());
                report.detail = Some(format!("archiving the workspace: {e}"));
                return report;
            }
        }
        // Grade every non-infra outcome: failures are scores too.
        let g0 = std::time::Instant::now();
        match self.grade(spec, task, &task_dir, &workspace, &out).await {
            Ok((metrics, score_digest, log_digest)) => {
                report.metrics = metrics;
                report.artifacts.grader_output = score_digest;
                report.artifacts.grader_log = log_digest;
            }
            Err((code, why)) => {
                report.outcome = Some(Outcome::InfraFault);
                report.infra_fault = Some(code);
                report.detail = Some(why);
                return report;
            }
        }
        container_seconds += g0.elapsed().as_secs_f64();
        report.container_seconds = container_seconds;
        report.outcome = Some(outcome);
        report.detail = detail;
        report
    }
}

impl AttemptExecutor for DockerExecutor {
    fn run<'a>(
        &'a self,
        spec: &'a AttemptSpec,
        rec: Recorder,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, AttemptReport> {
        Box::pin(async move {
            let _ = rec;
            self.run_attempt(spec, &cancel).await
        })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<usize, String>> {
        Box::pin(async move {
            let _ = std::fs::remove_dir_all(sockets_root(&self.work));
            self.rt
                .sweep(&self.sweep_label())
                .await
                .map_err(|e| e.to_string())
        })
    }
}
