//! One attempt, for real: fresh workspace copy → proxy registration (own socket, budgets) →
//! agent container under the policy → attestation → run to exit/timeout → metrics cross-check →
//! workspace archived → grader container → outcome with metrics.
//!
//! The proxy and the runtime are reached only through this module, so their APIs stay local.

use super::events::{
    self, Attestation, Clarification, ModelCall, ModelCallStarted, Outcome, Tokens,
};
use super::{AttemptExecutor, AttemptReport, AttemptSpec, BoxFuture, Recorder};
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::Digest;
use eval_protocols::protocol::{ModelContract, Protocol};
use eval_protocols::{Loaded, TaskBundle};
use eval_proxy::{
    Budget, CallRecord, CallStarted, Contract, ControlFuture, ControlPlane, Listen, ParamRule,
    ProxyHandle, RecordError, RecordSink, Role, RoleSpec, StartFuture,
};
use eval_runtimes::fixture::attest::AttestReport;
use eval_runtimes::policy::{AttemptFacts, RoleMounts};
use eval_runtimes::{
    ArmFiles, DockerRuntime, ImageId, ImageSpec, LoadedDef, Runtime, RuntimeDef, WaitOutcome,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OnceCell, mpsc, oneshot};
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

/// Maps the protocol's contract to the proxy's.
pub fn contract_of(m: &ModelContract, max_output_default: u64) -> Contract {
    let mut c = Contract::model_only(&m.model);
    for (name, b) in &m.params {
        let rule = match b.equals {
            Some(v) => ParamRule::Exact(json!(v)),
            None => ParamRule::Range {
                min: b.min,
                max: b.max,
                required: b.required,
            },
        };
        c.params.insert(name.clone(), rule);
    }
    if let Some(s) = m.stream {
        c.params
            .insert("stream".into(), ParamRule::Exact(Value::Bool(s)));
    }
    c.default_max_output_tokens = max_output_default;
    c.allowed_params = m
        .allowed_params
        .as_ref()
        .map(|l| l.iter().cloned().collect());
    // Header names are case-insensitive; the proxy compares lower-case names.
    c.allowed_headers = m
        .allowed_headers
        .as_ref()
        .map(|l| l.iter().map(|h| h.to_ascii_lowercase()).collect());
    c
}

fn agent_budget(p: &Protocol) -> Budget {
    Budget {
        max_requests: Some(p.budgets.attempt.max_requests),
        max_tokens: Some(p.budgets.attempt.max_tokens),
        max_wall_time: Some(Duration::from_secs(p.budgets.attempt.wall_seconds)),
    }
}

// ---------------------------------------------------------------------------------------------
// Model-call records → ledger, in order, with a flush barrier.

enum BridgeMsg {
    Record(Box<CallRecord>),
    Flush(oneshot::Sender<()>),
}

/// The proxy's record sink: forwards every record to one task that appends `model_call` entries,
/// and commits a `model_call_started` entry before the proxy may forward a call.
pub struct LedgerSink {
    tx: mpsc::UnboundedSender<BridgeMsg>,
    rec: Recorder,
}

impl RecordSink for LedgerSink {
    fn record(&self, record: &CallRecord) -> Result<(), RecordError> {
        self.tx
            .send(BridgeMsg::Record(Box::new(record.clone())))
            .map_err(|_| RecordError("the ledger bridge has stopped".into()))
    }

    fn call_started<'a>(&'a self, started: &'a CallStarted) -> StartFuture<'a> {
        Box::pin(async move {
            let payload = ModelCallStarted {
                schema: events::SCHEMA,
                attempt: started.attempt_id.clone(),
                role: started.role.as_str().to_owned(),
                seq: started.seq,
                model: started.model.clone().unwrap_or_default(),
                path: started.path.clone(),
                stream: started.stream,
                reserved_tokens: started.reserved_tokens,
            };
            self.rec
                .append(events::MODEL_CALL_STARTED, &payload)
                .await
                .map(|_| ())
                .map_err(|e| RecordError(format!("cannot record the call's start: {e}")))
        })
    }
}

/// Handle to wait until every record sent so far is in the ledger.
#[derive(Clone)]
pub struct Bridge {
    tx: mpsc::UnboundedSender<BridgeMsg>,
}

impl Bridge {
    pub fn start(rec: Recorder) -> (Bridge, LedgerSink) {
        let rec_for_sink = rec.clone();
        let (tx, mut rx) = mpsc::unbounded_channel::<BridgeMsg>();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                match msg {
                    BridgeMsg::Flush(done) => {
                        let _ = done.send(());
                    }
                    BridgeMsg::Record(r) => {
                        // Records without an attempt (unknown socket) concern no attempt of ours.
                        let Some(attempt) = r.attempt_id.clone() else {
                            continue;
                        };
                        let usage = r.usage.clone().unwrap_or_default();
                        let payload = ModelCall {
                            schema: events::SCHEMA,
                            attempt,
                            role: r.role.as_str().to_owned(),
                            seq: r.seq,
                            model: r.model.clone().unwrap_or_default(),
                            status: r.status,
                            result: r.outcome.as_str().to_owned(),
                            tokens: Tokens {
                                input: usage.input_tokens,
                                output: usage.output_tokens,
                                cached: usage.cached_input_tokens,
                                reasoning: usage.reasoning_tokens,
                            },
                            metered: r.usage.is_some(),
                            latency_ms: r.latency_ms.max(0.0) as u64,
                            record: serde_json::to_value(&*r).unwrap_or(Value::Null),
                        };
                        if let Err(e) = rec.append(events::MODEL_CALL, &payload).await {
                            tracing::error!("cannot record a model call: {e}");
                        }
                    }
                }
            }
        });
        (
            Bridge { tx: tx.clone() },
            LedgerSink {
                tx,
                rec: rec_for_sink,
            },
        )
    }

    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(BridgeMsg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The control plane: `/_eval/attest` from the shim, `/_eval/clarify` from the agent.

struct AttemptControl {
    image: String,
    expected: BTreeMap<String, Option<String>>,
    attested: Mutex<Option<(bool, String)>>,
    answers: BTreeMap<String, String>,
    /// Set when a model (the `oracle` role) answers this attempt's questions.
    oracle: Option<OracleAsk>,
    /// A question the oracle model could not answer (the attempt is an infrastructure fault).
    oracle_failed: std::sync::atomic::AtomicBool,
    max_questions: u32,
    asked: AtomicU32,
    answered: AtomicU32,
}

/// How to ask the oracle model: a request body without messages, and the task's brief.
#[derive(Clone)]
struct OracleAsk {
    template: Value,
    anthropic: bool,
    brief: String,
}

/// The oracle model's system prompt; the brief (the task's oracle file) follows the marker.
const ORACLE_SYSTEM: &str = "You are the oracle of an evaluation task. Answer the agent's clarifying question briefly, from the brief below only; if the brief does not say, answer \"No further information.\"\n";

/// Answers the reserved paths of every attempt's socket, and records what happened.
pub struct Control {
    rec: Recorder,
    attempts: Mutex<HashMap<String, Arc<AttemptControl>>>,
    /// The proxy, for the oracle role's calls (set once it has started: it needs this control
    /// plane to start). The proxy holds this control plane too; [`Control::release_proxy`] breaks
    /// that cycle when the session ends, so the ledger writer behind both is dropped.
    proxy: Mutex<Option<ProxyHandle>>,
}

impl Control {
    pub fn new(rec: Recorder) -> Arc<Self> {
        Arc::new(Self {
            rec,
            attempts: Mutex::new(HashMap::new()),
            proxy: Mutex::new(None),
        })
    }

    /// Gives the control plane the proxy it answers for (oracle calls go through it).
    pub fn set_proxy(&self, proxy: ProxyHandle) {
        if let Ok(mut slot) = self.proxy.lock() {
            *slot = Some(proxy);
        }
    }

    /// Forgets the proxy (after it has shut down).
    pub fn release_proxy(&self) {
        if let Ok(mut slot) = self.proxy.lock() {
            *slot = None;
        }
    }

    /// Asks the oracle model through the proxy, in the attempt's `oracle` role.
    async fn ask_model(&self, id: &str, o: &OracleAsk, question: &str) -> Result<String, String> {
        let proxy = self
            .proxy
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
            .ok_or_else(|| "the proxy is not running".to_owned())?;
        let system = format!(
            "{ORACLE_SYSTEM}{}{}",
            eval_runtimes::fixture_model::ORACLE_BRIEF_MARKER,
            o.brief
        );
        let mut body = o.template.clone();
        if o.anthropic {
            body["system"] = json!(system);
            body["messages"] = json!([{"role": "user", "content": question}]);
        } else {
            body["messages"] = json!([
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ]);
        }
        let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let mut headers = http::HeaderMap::new();
        if o.anthropic {
            headers.insert(
                "anthropic-version",
                http::HeaderValue::from_static("2023-06-01"),
            );
        }
        let reply = proxy
            .oracle_call(id, headers, bytes.into())
            .await
            .map_err(|e| e.to_string())?;
        if !reply.status.is_success() {
            return Err(format!("the oracle model answered {}", reply.status));
        }
        answer_text(&reply.body).ok_or_else(|| "the oracle model's reply has no text".to_owned())
    }

    fn get(&self, id: &str) -> Option<Arc<AttemptControl>> {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn insert(&self, id: &str, c: Arc<AttemptControl>) {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), c);
    }

    fn remove(&self, id: &str) -> Option<Arc<AttemptControl>> {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
    }

    async fn attest(&self, id: &str, c: &AttemptControl, body: &[u8]) -> (http::StatusCode, Value) {
        let parsed: Result<AttestReport, _> = serde_json::from_slice(body);
        let (ok, reported, problems) = match parsed {
            Ok(r) => {
                let mismatches = r.mismatches(&c.expected);
                let reported = r
                    .digests()
                    .into_iter()
                    .map(|(k, v)| (k, v.unwrap_or_else(|| "absent".into())))
                    .collect();
                let problems = mismatches
                    .iter()
                    .map(|p| format!("{p}: reported digest differs from the frozen one"))
                    .collect::<Vec<_>>();
                (problems.is_empty(), reported, problems)
            }
            Err(e) => (
                false,
                BTreeMap::new(),
                vec![format!("malformed attestation: {e}")],
            ),
        };
        let payload = Attestation {
            schema: events::SCHEMA,
            attempt: id.to_owned(),
            ok,
            image: c.image.clone(),
            reported,
            expected: c
                .expected
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().unwrap_or_else(|| "absent".into())))
                .collect(),
            problems: problems.clone(),
        };
        let digest = eval_evidence::canonical::to_vec(&payload)
            .map(|b| Digest::of(&b).to_string())
            .unwrap_or_default();
        let recorded = self.rec.append(events::ATTESTATION, &payload).await.is_ok();
        *c.attested.lock().unwrap_or_else(|p| p.into_inner()) = Some((ok && recorded, digest));
        if ok && recorded {
            (http::StatusCode::OK, json!({"ok": true}))
        } else {
            (
                http::StatusCode::FORBIDDEN,
                json!({"ok": false, "problems": problems}),
            )
        }
    }

    async fn clarify(
        &self,
        id: &str,
        c: &AttemptControl,
        body: &[u8],
    ) -> (http::StatusCode, Value) {
        let question = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("question").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let index = c.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let (answer, source) = if c.max_questions == 0 {
            (None, "refused_no_oracle")
        } else if index > c.max_questions {
            (None, "refused_limit")
        } else if let Some(o) = &c.oracle {
            match self.ask_model(id, o, &question).await {
                Ok(a) => (Some(a), "oracle_model"),
                Err(e) => {
                    tracing::warn!("attempt {id}: the oracle model did not answer: {e}");
                    c.oracle_failed.store(true, Ordering::SeqCst);
                    (None, "oracle_unavailable")
                }
            }
        } else {
            let a = c
                .answers
                .get(&question)
                .cloned()
                .unwrap_or_else(|| "No further information.".to_owned());
            (Some(a), "scripted")
        };
        let payload = Clarification {
            schema: events::SCHEMA,
            attempt: id.to_owned(),
            index,
            question,
            answer: answer.clone(),
            source: source.to_owned(),
        };
        if self
            .rec
            .append(events::CLARIFICATION, &payload)
            .await
            .is_err()
        {
            return (
                http::StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "cannot record the question"}),
            );
        }
        match answer {
            Some(a) => {
                c.answered.fetch_add(1, Ordering::SeqCst);
                (http::StatusCode::OK, json!({"answer": a}))
            }
            None if source == "oracle_unavailable" => (
                http::StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "the oracle could not answer"}),
            ),
            None => (
                http::StatusCode::TOO_MANY_REQUESTS,
                json!({"error": format!("clarifying question refused: {source} (at most {} per attempt)", c.max_questions)}),
            ),
        }
    }
}

impl ControlPlane for Control {
    fn handle<'a>(
        &'a self,
        attempt_id: &'a str,
        path: &'a str,
        body: bytes::Bytes,
    ) -> ControlFuture<'a> {
        Box::pin(async move {
            let Some(c) = self.get(attempt_id) else {
                return (
                    http::StatusCode::NOT_FOUND,
                    json!({"error": "unknown attempt"}),
                );
            };
            match path {
                "/_eval/attest" => self.attest(attempt_id, &c, &body).await,
                "/_eval/clarify" => self.clarify(attempt_id, &c, &body).await,
                _ => (
                    http::StatusCode::NOT_FOUND,
                    json!({"error": format!("no control path {path}")}),
                ),
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The executor.

struct ArmImage {
    def: LoadedDef,
    spec: ImageSpec,
    /// The image id the freeze recorded (`None`: the freeze could not resolve it).
    frozen_image: Option<ImageId>,
    expected: BTreeMap<String, Option<String>>,
    id: OnceCell<Result<ImageId, (String, String)>>,
}

/// An arm as admitted: the image id its freeze recorded and the digests its shim must report.
/// Computed once, right after `eval verify` found the inputs equal to the frozen ones, so that a
/// byte changed later is compared with the frozen bytes and never with itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrozenArm {
    pub image: Option<ImageId>,
    pub expected: BTreeMap<String, Option<String>>,
}

/// The image an arm's files make now (profile and candidate package read when it is built).
fn arm_image_spec(root: &Path, a: &eval_protocols::protocol::Arm, def: LoadedDef) -> ImageSpec {
    ImageSpec {
        def,
        arm: ArmFiles {
            profile: Some(root.join(&a.profile)),
            candidate: a.package.as_ref().map(|pkg| root.join(pkg)),
        },
        labels: BTreeMap::new(),
    }
}

/// Every arm's [`FrozenArm`]: the image digest from the freeze file (`images`), the expected
/// attestation from the files as they are now (call it only when verify found no drift). A
/// built image whose id differs from the frozen digest is refused here already.
pub fn frozen_arms(
    root: &Path,
    p: &Protocol,
    images: &BTreeMap<String, eval_protocols::ImageRecord>,
) -> Result<BTreeMap<String, FrozenArm>, SetupError> {
    let root = abs(root);
    let mut out = BTreeMap::new();
    for a in &p.arms {
        let def = RuntimeDef::load(&root.join(&a.runtime))
            .map_err(|e| SetupError::Definition(format!("{}: {e}", a.runtime)))?;
        let frozen = images
            .get(&a.id)
            .and_then(|r| r.digest.as_ref())
            .map(|d| ImageId(d.to_string()));
        let built = def.def.build.is_some();
        let spec = arm_image_spec(&root, a, def);
        let b = eval_runtimes::image::build(&spec)
            .map_err(|e| SetupError::Definition(format!("arm {}: {e}", a.id)))?;
        if built
            && let Some(f) = &frozen
            && f != &b.id
        {
            return Err(SetupError::Definition(format!(
                "arm {}: its files build image {}, the freeze recorded {f}",
                a.id, b.id
            )));
        }
        out.insert(
            a.id.clone(),
            FrozenArm {
                image: frozen,
                expected: b.expected_attestation(&spec.def.def),
            },
        );
    }
    Ok(out)
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

    /// Ctrl-C: removes the attempt's container and lets `run_to_end` see it go and clean up.
    /// The container may not exist yet (create in flight), so sweep until the run has ended.
    async fn stop_container<F>(&self, attempt: &str, mut run: std::pin::Pin<&mut F>)
    where
        F: std::future::Future,
    {
        let label = format!("{}={attempt}", eval_runtimes::policy::LABEL_ATTEMPT);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let _ = self.rt.sweep(&label).await;
            match tokio::time::timeout(Duration::from_millis(300), run.as_mut()).await {
                Ok(_) => break,
                Err(_) if std::time::Instant::now() < deadline => continue,
                Err(_) => break,
            }
        }
        let _ = self.rt.sweep(&label).await;
    }

    async fn grade(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        task_dir: &Path,
        workspace: &Path,
        out: &Path,
    ) -> Result<(BTreeMap<String, f64>, Option<String>, Option<String>), (String, String)> {
        let g = self
            .graders
            .get(&task.spec.grader.runtime)
            .cloned()
            .ok_or_else(|| (GRADER_FAILURE.to_owned(), "no grader runtime".to_owned()))?;
        let image = self.image(&g).await?;
        let mounts = RoleMounts::Grader {
            workspace: workspace.to_path_buf(),
            hidden: task_dir.join("hidden"),
            out: out.to_path_buf(),
        };
        let mut facts = self.facts(spec);
        facts.attempt = format!("{}/grade", spec.attempt);
        let cspec = eval_runtimes::container_spec(&g.def.def, &image, &facts, &mounts)
            .map_err(|e| fault_pair(&e))?;
        let end = eval_runtimes::run_to_end(
            self.rt.as_ref(),
            &cspec,
            &[],
            Duration::from_secs(600),
            64 * 1024,
        )
        .await
        .map_err(|e| fault_pair(&e))?;
        let log = self.store.put_bytes(&end.logs).ok().map(|d| d.to_string());
        if end.outcome != (WaitOutcome::Exited { code: 0 }) {
            return Err((
                GRADER_FAILURE.into(),
                format!(
                    "the grader ended with {:?}: {}",
                    end.outcome,
                    String::from_utf8_lossy(&end.logs)
                        .chars()
                        .take(400)
                        .collect::<String>()
                ),
            ));
        }
        let score_path = out.join("score.json");
        let bytes = std::fs::read(&score_path)
            .map_err(|e| (GRADER_FAILURE.to_owned(), format!("no score.json: {e}")))?;
        let digest = self.store.put_bytes(&bytes).ok().map(|d| d.to_string());
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| (GRADER_FAILURE.to_owned(), format!("score.json: {e}")))?;
        let metrics = v
            .get("metrics")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_f64().map(|f| (k.clone(), f)))
                    .collect()
            })
            .unwrap_or_default();
        Ok((metrics, digest, log))
    }
}

/// The oracle request a contract allows: its model, every fixed parameter (and a bound for a
/// required one), and streaming as it demands; the messages are added per question.
fn oracle_template(m: &ModelContract) -> Value {
    let mut body = json!({"model": m.model});
    for (name, b) in &m.params {
        let v = b.equals.or(if b.required { b.max.or(b.min) } else { None });
        if let Some(v) = v {
            body[name] = if v.fract() == 0.0 && v.abs() < 1e15 {
                json!(v as i64)
            } else {
                json!(v)
            };
        }
    }
    let anthropic = m.api == eval_protocols::protocol::ApiKind::AnthropicMessages;
    if anthropic && body.get("max_tokens").is_none() {
        body["max_tokens"] = json!(1024);
    }
    if m.stream == Some(true) {
        body["stream"] = json!(true);
        if m.stream_usage && !anthropic {
            body["stream_options"] = json!({"include_usage": true});
        }
    }
    body
}

/// The text of a model's answer: a JSON body (OpenAI `choices[0].message.content`, Anthropic
/// `content[].text`) or an SSE stream (their delta forms).
fn answer_text(body: &[u8]) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(t) = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
        {
            return Some(t.to_owned());
        }
        return v.get("content").and_then(Value::as_array).map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        });
    }
    let mut out = String::new();
    let mut any = false;
    for line in String::from_utf8_lossy(body).lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let piece = v
            .pointer("/choices/0/delta/content")
            .or_else(|| v.pointer("/delta/text"))
            .and_then(Value::as_str);
        if let Some(t) = piece {
            out.push_str(t);
            any = true;
        }
    }
    any.then_some(out)
}

/// The accounting cross-check: the harness's own (turns, tokens) must equal the proxy's meter.
pub fn accounting_mismatch(harness: (u64, u64), proxy: (u64, u64)) -> Option<String> {
    (harness != proxy).then(|| {
        format!(
            "the harness reports {} model turns and {} tokens, the proxy metered {} and {}",
            harness.0, harness.1, proxy.0, proxy.1
        )
    })
}

/// A short directory for the attempt's socket: a Unix socket path must fit in 108 bytes, and
/// state directories and slot ids (v0.4's are up to ~80 characters) can be long.
fn socket_dir(work: &Path, attempt: &str) -> PathBuf {
    let hex = Digest::of(attempt.as_bytes()).hex();
    sockets_root(work).join(&hex[..16])
}

/// Where all of one run's attempt sockets live (removed whole by the resume sweep: only the
/// process holding the ledger's writer lock uses it).
fn sockets_root(work: &Path) -> PathBuf {
    let hex = Digest::of(work.display().to_string().as_bytes()).hex();
    std::env::temp_dir().join(format!("evs-{}", &hex[..16]))
}

fn fault_pair(e: &eval_runtimes::RuntimeError) -> (String, String) {
    (
        e.fault()
            .map(|f| f.as_str().to_owned())
            .unwrap_or_else(|| "container_runtime_failure".into()),
        e.to_string(),
    )
}

fn infra_of(e: &eval_runtimes::RuntimeError) -> AttemptReport {
    let (code, detail) = fault_pair(e);
    AttemptReport::infra(&code, detail)
}

/// Copies a task's workspace (files, directories, symlinks as links, exec bits kept).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    if !from.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let ft = std::fs::symlink_metadata(&src)?.file_type();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if ft.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn oracle_answers_are_read_from_json_and_streams() {
        let json_body = br#"{"choices":[{"message":{"content":"yes"}}]}"#;
        assert_eq!(answer_text(json_body).as_deref(), Some("yes"));
        let sse = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a \"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(answer_text(sse).as_deref(), Some("a b"));
        let anthropic = br#"{"content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}"#;
        assert_eq!(answer_text(anthropic).as_deref(), Some("xy"));
        assert_eq!(answer_text(b"data: [DONE]\n\n"), None);
        let m: ModelContract = toml::from_str(
            "api = \"openai-chat\"\nmodel = \"m\"\nstream = true\nstream_usage = true\n[params.temperature]\nequals = 0.0\nrequired = true\n[params.max_tokens]\nequals = 512.0\n",
        )
        .unwrap();
        let t = oracle_template(&m);
        assert_eq!(t["model"], "m");
        assert_eq!(t["max_tokens"], json!(512));
        assert_eq!(t["stream"], true);
        assert_eq!(t["stream_options"]["include_usage"], true);
    }

    #[test]
    fn accounting_must_match_exactly() {
        assert_eq!(accounting_mismatch((3, 1200), (3, 1200)), None);
        let why = accounting_mismatch((3, 1200), (4, 1200)).unwrap();
        assert!(
            why.contains("3 model turns") && why.contains("metered 4"),
            "{why}"
        );
        assert!(accounting_mismatch((3, 1199), (3, 1200)).is_some());
    }

    #[test]
    fn contracts_map_bounds_and_exact_values() {
        let m: ModelContract = toml::from_str(
            "api = \"openai-chat\"\nmodel = \"m-1\"\nstream = true\n[params.temperature]\nequals = 0.0\nrequired = true\n[params.max_tokens]\nmax = 100.0\n",
        )
        .unwrap();
        let c = contract_of(&m, 32);
        assert_eq!(c.model, "m-1");
        assert_eq!(c.params["temperature"], ParamRule::Exact(json!(0.0)));
        assert_eq!(
            c.params["max_tokens"],
            ParamRule::Range {
                min: None,
                max: Some(100.0),
                required: false
            }
        );
        assert_eq!(c.params["stream"], ParamRule::Exact(Value::Bool(true)));
        assert_eq!(c.default_max_output_tokens, 32);
        assert_eq!(c.allowed_params, None);
        assert_eq!(c.allowed_headers, None);
    }

    #[test]
    fn contracts_map_allow_lists_with_lower_case_header_names() {
        let m: ModelContract = toml::from_str(
            "api = \"openai-chat\"\nmodel = \"m\"\nallowed_params = [\"tools\", \"n\"]\nallowed_headers = [\"User-Agent\", \"X-Session\"]\n",
        )
        .unwrap();
        let c = contract_of(&m, 32);
        let params: Vec<&str> = c
            .allowed_params
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        assert_eq!(params, ["n", "tools"]);
        let headers: Vec<&str> = c
            .allowed_headers
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        assert_eq!(headers, ["user-agent", "x-session"]);
    }

    #[test]
    fn socket_paths_stay_short_for_long_slot_ids() {
        let long =
            "infra-evocode-theme_d1_w1_code_build_greenfield_implementation-v0.4-lattice-r0#1";
        let work =
            Path::new("/a/very/long/state/directory/that/users/may/well/have/runs/v0.4/attempts");
        let p = socket_dir(work, long).join("a.sock");
        assert!(p.as_os_str().len() < 100, "{}", p.display());
        assert_ne!(socket_dir(work, long), socket_dir(work, "other#1"));
    }

    #[test]
    fn copy_tree_keeps_links_and_exec_bits() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        std::fs::write(src.join("d/run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(src.join("d/run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink("d/run.sh", src.join("link")).unwrap();
        let dst = t.path().join("dst");
        copy_tree(&src, &dst).unwrap();
        let mode = std::fs::metadata(dst.join("d/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
        assert_eq!(
            std::fs::read_link(dst.join("link")).unwrap(),
            PathBuf::from("d/run.sh")
        );
    }
}
