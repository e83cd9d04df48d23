//! `eval run`: admission, then the orchestrated, resumable run (see `crate::run`).

use crate::admission::{AdmissionFacts, LedgerCheck, PreconditionState, UpstreamChoice};
use eval_core::phase::Phase;
use eval_evidence::ledger::{self, LedgerReader};
use eval_protocols::{Loaded, Project, Registry};
use eval_runlog::events::{self, RunStarted, SlotRecord, UpstreamRecord};
use eval_runlog::layout::{MODEL_FREE, SMOKE_RUN, aa_run_name, smoke_run_name};
use eval_runlog::replay::{RunState, StatusSummary};
use std::path::Path;

/// Everything admission found, plus what the run needs from the same reads.
pub struct Admitted {
    pub loaded: Loaded,
    pub identity: String,
    /// The preconditions met, with the evidence that met each (recorded in `run_started`).
    pub preconditions_met: Vec<eval_protocols::Met>,
    pub facts: AdmissionFacts,
    /// Each arm's frozen image id and expected attestation, fixed when verify found no drift
    /// (empty otherwise: admission refuses then).
    pub arms: std::collections::BTreeMap<String, crate::attempt::FrozenArm>,
    /// The freeze's manifest (read when verify found no drift): what the task inputs staged for
    /// the run are checked against.
    pub frozen_manifest: Option<eval_protocols::Manifest>,
    /// A smoke run: a subset of the schedule, in its own run directory (see [`smoke`]).
    pub smoke: Option<SmokeSpec>,
    /// An A/A calibration run: which arm each suite's candidate copies (see [`aa`]).
    pub aa: Option<Vec<eval_protocols::aa::AaCopy>>,
    /// The running controller's driver digest (handed in: only the binary knows its sources).
    pub driver: eval_evidence::ledger::Digest,
}

/// `eval run --smoke`: which part of the schedule a smoke run runs. Recorded in the smoke run's
/// ledger as a `smoke_run` entry before each session's `run_started`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SmokeSpec {
    /// Tasks kept (empty: all).
    pub tasks: Vec<String>,
    /// Arms kept (empty: all).
    pub arms: Vec<String>,
    /// Statistical slots kept at most, the first in schedule order (`None`: all).
    pub limit: Option<usize>,
}

impl Admitted {
    /// The directory name under `STATE/` this run lives in.
    pub fn run_name(&self) -> String {
        match (&self.smoke, &self.aa) {
            (Some(_), _) => smoke_run_name(&self.loaded.matrix.name),
            (None, Some(_)) => aa_run_name(&self.loaded.matrix.name),
            (None, None) => self.loaded.matrix.name.clone(),
        }
    }
}

/// Turns an admitted run into its A/A calibration run: every suite's candidate arm runs its
/// baseline's definition under its own id (`eval_protocols::aa`), with the baseline's frozen
/// image and attestation; the ledger check is redone on the A/A run's own ledger.
pub fn aa(mut a: Admitted, state: &Path) -> Result<Admitted, AdmissionError> {
    let copies =
        eval_protocols::aa::aa_copies(&a.loaded).map_err(|refusals| AdmissionError::Smoke {
            what: format!("the A/A run of matrix {}", a.loaded.matrix.name),
            refusals,
        })?;
    eval_protocols::aa::apply_aa(&mut a.loaded.protocol, &copies);
    for c in &copies {
        // Empty when verify found drift: admission refuses the run then.
        if let Some(base) = a.arms.get(&c.copies).cloned() {
            a.arms.insert(c.arm.clone(), base);
        }
    }
    a.aa = Some(copies);
    a.facts.ledger = ledger_check(&eval_runlog::layout::ledger_path(state, &a.run_name()));
    Ok(a)
}

/// Turns an admitted run into its smoke run: the names checked against the matrix, the ledger
/// check redone on the smoke run's own ledger.
pub fn smoke(mut a: Admitted, state: &Path, spec: SmokeSpec) -> Result<Admitted, AdmissionError> {
    let slots = slot_records(&a.loaded);
    let mut bad = Vec::new();
    for t in &spec.tasks {
        if !slots.iter().any(|s| &s.task == t) {
            bad.push(format!(
                "--tasks {t:?}: no such task in matrix {}",
                a.loaded.matrix.name
            ));
        }
    }
    for arm in &spec.arms {
        if !slots.iter().any(|s| &s.arm == arm) {
            bad.push(format!(
                "--arms {arm:?}: no such arm in matrix {}",
                a.loaded.matrix.name
            ));
        }
    }
    if spec.limit == Some(0) {
        bad.push("--limit 0: a smoke run needs at least one attempt".into());
    }
    a.smoke = Some(spec);
    if bad.is_empty()
        && !smoke_slots(&a)
            .iter()
            .any(|s| s.phase == Phase::Statistical)
    {
        bad.push("--tasks and --arms together select no attempt".into());
    }
    if !bad.is_empty() {
        return Err(AdmissionError::Smoke {
            what: format!("the smoke run of matrix {}", a.loaded.matrix.name),
            refusals: bad,
        });
    }
    a.facts.ledger = ledger_check(&eval_runlog::layout::ledger_path(state, &a.run_name()));
    Ok(a)
}

/// The schedule of `a`: all of it, or a smoke run's part — the statistical slots of the chosen
/// tasks and arms (the first `limit` of them), and the infrastructure slots of the chosen tasks
/// (they must pass before any statistical slot runs, as in the real run).
fn smoke_slots(a: &Admitted) -> Vec<SlotRecord> {
    let slots = slot_records(&a.loaded);
    let Some(spec) = &a.smoke else {
        return slots;
    };
    let task_ok = |s: &SlotRecord| spec.tasks.is_empty() || spec.tasks.contains(&s.task);
    let arm_ok = |s: &SlotRecord| spec.arms.is_empty() || spec.arms.contains(&s.arm);
    let mut left = spec.limit.unwrap_or(usize::MAX);
    slots
        .into_iter()
        .filter(|s| match s.phase {
            Phase::Statistical => {
                let keep = task_ok(s) && arm_ok(s) && left > 0;
                if keep {
                    left -= 1;
                }
                keep
            }
            _ => task_ok(s),
        })
        .collect()
}

fn ledger_check(path: &Path) -> LedgerCheck {
    if !path.exists() {
        return LedgerCheck::Absent;
    }
    match ledger::verify(path, None) {
        Err(e) => LedgerCheck::Broken(e.to_string()),
        Ok(r) if !r.ok => LedgerCheck::Broken(
            r.error
                .map(|e| e.to_string())
                .unwrap_or_else(|| "unknown".into()),
        ),
        Ok(_) => {
            let entries = match LedgerReader::open(path).and_then(|r| r.entries()) {
                Ok(e) => e,
                Err(e) => return LedgerCheck::Broken(e.to_string()),
            };
            match RunState::replay(&entries) {
                Err(e) => LedgerCheck::Broken(e.to_string()),
                Ok(st) => LedgerCheck::Verified {
                    identity: st.started.map(|s| s.identity),
                },
            }
        }
    }
}

/// Why `eval run` (or `eval demo`) did not get to a session, or how a session ended early. Each
/// kind has its status in `exit::admission_status`.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error(
        "name the model upstream: --upstream URL (with --api-key-env VAR or --api-key-file PATH), --upstream fixture or --upstream model-free"
    )]
    NoUpstream,
    /// The matrix or protocol files of the project (the message names file and field).
    #[error("{0}")]
    Load(#[source] eval_protocols::ProtocolError),
    #[error("protocol {protocol} runs matrix {runs:?}, not {asked:?}")]
    WrongMatrix {
        protocol: String,
        runs: String,
        asked: String,
    },
    /// The identity registry, or the freeze it records, cannot be trusted.
    #[error("{0}")]
    Registry(#[source] eval_protocols::ProtocolError),
    #[error("protocol {0} is not frozen")]
    NotFrozen(String),
    /// `--upstream URL` is not the upstream the protocol preregisters.
    #[error(
        "protocol {protocol} preregisters the upstream {preregistered} ([upstream] url), not {given}: run it against that upstream, or against `--upstream fixture` (never evidence)"
    )]
    OtherUpstream {
        protocol: String,
        preregistered: String,
        given: String,
    },
    #[error(transparent)]
    Protocol(#[from] eval_protocols::ProtocolError),
    #[error("refusing to run {what}:\n{}", refusals.iter().map(|r| format!("  - {r}")).collect::<Vec<_>>().join("\n"))]
    Refused { what: String, refusals: Vec<String> },
    #[error("cannot start the async runtime: {0}")]
    AsyncRuntime(#[source] std::io::Error),
    /// `--smoke --tasks/--arms/--limit` that name nothing of the matrix, or a smoke run beside
    /// a live real run (the command line or the moment is wrong, not the evidence).
    #[error("refusing {what}:\n{}", refusals.iter().map(|r| format!("  - {r}")).collect::<Vec<_>>().join("\n"))]
    Smoke { what: String, refusals: Vec<String> },
    /// The run stopped at an interim look (`eval report --look`): it stays stopped.
    #[error(
        "refusing to run {}: the run stopped at an interim look and stays stopped ({line}); nothing was recorded",
        path.display()
    )]
    StoppedAtLook {
        path: std::path::PathBuf,
        line: String,
    },
    /// The state directory's file system has not the room the run's attempts need at once
    /// (`admission::StateDisk`): refused before anything is recorded.
    #[error("refusing to run on the state directory {}: {why}", path.display())]
    StateDisk {
        path: std::path::PathBuf,
        why: String,
    },
    /// Ctrl-C, or an infrastructure slot out of attempts: run the same command again.
    #[error("the {what} stopped: {why}")]
    Stopped { what: &'static str, why: String },
}

/// Gathers the admission facts from the project, the state directory and the command line.
pub fn gather(
    project: &Project,
    state: &Path,
    matrix: &str,
    protocol: Option<&str>,
    upstream: &UpstreamChoice,
    driver: eval_evidence::ledger::Digest,
) -> Result<Admitted, AdmissionError> {
    let m = project.load_matrix(matrix).map_err(AdmissionError::Load)?;
    let name = protocol.unwrap_or(&m.protocol).to_owned();
    let loaded = project.load(&name).map_err(AdmissionError::Load)?;
    if loaded.matrix.name != matrix {
        return Err(AdmissionError::WrongMatrix {
            protocol: name,
            runs: loaded.matrix.name.clone(),
            asked: matrix.to_owned(),
        });
    }
    let running_driver = driver.to_string();
    let reg = Registry::open(state).map_err(AdmissionError::Registry)?;
    let (preconditions_met, unmet) = eval_runlog::preconditions::check(&reg, &loaded.protocol);
    let mut facts = AdmissionFacts {
        protocol: name.clone(),
        identity: None,
        drift: vec![],
        retired: None,
        frozen_driver: None,
        running_driver,
        ledger: ledger_check(&eval_runlog::layout::ledger_path(state, matrix)),
        preconditions: unmet
            .into_iter()
            .map(|u| PreconditionState {
                name: u.protocol,
                passed: false,
                why: u.reason,
            })
            .collect(),
        upstream: upstream.clone(),
    };
    let mut arms = std::collections::BTreeMap::new();
    let mut frozen_manifest = None;
    if let Some(identity) = reg.frozen_identity(&name) {
        facts.identity = Some(identity.to_string());
        facts.retired = reg.retirement(&identity).map(|r| r.reason);
        let report = eval_protocols::verify(
            project,
            &name,
            state,
            driver,
            &crate::image_record::resolve_image_digest,
        )
        .map_err(AdmissionError::Registry)?;
        facts.drift = report
            .drift
            .iter()
            .map(|d| format!("{} ({})", d.path, d.change))
            .collect();
        facts.frozen_driver = Some(report.frozen_driver.to_string());
        if facts.drift.is_empty() {
            let rec = reg
                .frozen(&name)
                .ok_or_else(|| AdmissionError::NotFrozen(name.clone()))?;
            let doc = eval_protocols::freeze::read_doc(state, &rec)?;
            frozen_manifest = doc.manifest();
            match crate::attempt::frozen_arms(&project.root, &loaded.protocol, &doc.images) {
                Ok(a) => arms = a,
                Err(e) => facts.drift.push(e.to_string()),
            }
        }
    } else if reg.is_retired(&name) {
        facts.retired = Some("retired".into());
    }
    // No identity only when the protocol is not frozen, which admission refuses before any use.
    let identity = facts.identity.clone().unwrap_or_default();
    Ok(Admitted {
        loaded,
        identity,
        preconditions_met,
        facts,
        arms,
        frozen_manifest,
        smoke: None,
        aa: None,
        driver,
    })
}

/// The schedule as recorded in `run_started`: the protocol's control slots, then the matrix's.
pub fn slot_records(loaded: &Loaded) -> Vec<SlotRecord> {
    let mut slots = crate::controls::control_slots(loaded);
    slots.extend(
        loaded
            .matrix
            .schedule()
            .slots
            .into_iter()
            .map(|s| SlotRecord {
                id: s.id,
                phase: s.phase,
                suite: s.suite,
                task: s.task,
                arm: s.arm,
                rep: s.rep,
            }),
    );
    slots
}

/// The `run_started` payload for this session (the runner fills in `session`).
pub fn run_started(a: &Admitted, concurrency: usize, upstream: UpstreamRecord) -> RunStarted {
    let p = &a.loaded.protocol;
    RunStarted {
        schema: events::SCHEMA,
        session: 0,
        matrix: a.loaded.matrix.name.clone(),
        protocol: p.name.clone(),
        identity: a.identity.clone(),
        driver: a.driver.to_string(),
        fixture_evidence: upstream.kind == "fixture",
        model_free_evidence: upstream.kind == MODEL_FREE,
        upstream,
        concurrency,
        rerunnable_codes: p.reruns.codes.clone(),
        max_reruns: p.reruns.max_reruns_per_slot,
        max_infra_attempts: p.reruns.max_infra_attempts.max(1),
        slots: smoke_slots(a),
        started_at: events::now_rfc3339(),
        preconditions: a.preconditions_met.clone(),
    }
}

/// The state directory's free space against what the run's attempts take at once: the largest
/// `[limits] workspace_mb` of the protocol's arms (an unreadable definition counts nothing
/// here; the executor refuses it), at the session's concurrency.
pub fn state_disk(
    project: &Project,
    state: &Path,
    admitted: &Admitted,
    concurrency: Option<usize>,
) -> crate::admission::StateDisk {
    let loaded = &admitted.loaded;
    let workspace_bytes = loaded
        .protocol
        .arms
        .iter()
        .filter_map(|a| {
            eval_runtimes::definition::RuntimeDef::load(&project.root.join(&a.runtime)).ok()
        })
        .map(|d| crate::attempt::disk::DiskLimits::of(&d.def.limits).bytes)
        .max()
        .unwrap_or(0);
    // The state directory, or the nearest directory above it that exists (a first run makes it).
    let free_bytes = state
        .ancestors()
        .find_map(|d| rustix::fs::statvfs(d).ok())
        .map_or(u64::MAX, |st| st.f_bavail.saturating_mul(st.f_frsize));
    crate::admission::StateDisk {
        free_bytes,
        concurrency: concurrency.unwrap_or(loaded.matrix.concurrency).max(1) as u64,
        workspace_bytes,
    }
}

/// What a finished session says, for `eval run` and `eval demo`.
pub struct Finished {
    pub end: crate::runner::SessionEnd,
    pub summary: StatusSummary,
    pub fixture: Option<eval_upstreams::fixture::FixtureTally>,
}

/// What earlier sessions of this run spent, as the proxy's run budget counted it: each recorded
/// call at its metered tokens (at its reservation when no usage arrived) and recorded spend, and
/// each call that was started but never recorded (a session killed mid-call) at its reservation,
/// priced at the dearer of the model's input and output rates. Requests are the started calls.
fn run_seed(entries: &[ledger::Entry], prices: &eval_proxy::PriceTable) -> eval_proxy::RunSeed {
    let mut seed = eval_proxy::RunSeed::default();
    let mut recorded = std::collections::HashSet::new();
    for e in entries.iter().filter(|e| e.kind == events::MODEL_CALL) {
        let Ok(call) = serde_json::from_slice::<events::ModelCall>(&e.payload) else {
            continue;
        };
        recorded.insert((call.attempt.clone(), call.seq));
        let Ok(r) = serde_json::from_value::<eval_proxy::CallRecord>(call.record) else {
            continue;
        };
        // What the proxy's budget settled for the call, no more and no less: a call that may
        // have been billed without usage (unmetered, cut at close) at its reservation; one the
        // upstream refused or never answered was released and costs nothing.
        use eval_proxy::CallOutcome as O;
        let used = r.usage.as_ref().map(|u| u.total_tokens());
        seed.tokens += match (r.outcome, used) {
            (O::CutAtClose, used) => r.reserved_tokens.max(used.unwrap_or(0)),
            (_, Some(used)) => used,
            (O::Ok | O::Unmetered, None) => r.reserved_tokens,
            (_, None) => 0,
        };
        seed.spend_usd += r.spend_usd.max(0.0);
    }
    for e in entries
        .iter()
        .filter(|e| e.kind == events::MODEL_CALL_STARTED)
    {
        let Ok(s) = serde_json::from_slice::<events::ModelCallStarted>(&e.payload) else {
            continue;
        };
        seed.requests += 1;
        if recorded.contains(&(s.attempt.clone(), s.seq)) {
            continue;
        }
        seed.tokens += s.reserved_tokens;
        if let Some(p) = s.model.as_ref().and_then(|m| prices.models.get(m)) {
            seed.spend_usd +=
                s.reserved_tokens as f64 * p.input_usd_per_mtok.max(p.output_usd_per_mtok) / 1e6;
        }
    }
    seed
}

/// Makes the session's progress sink once the schedule's size and the run budget are known.
/// Handed in: the engine reports progress, the command decides how it is drawn.
pub type ProgressFactory = std::sync::Arc<
    dyn Fn(u64, Option<eval_core::budget::RunBudget>) -> std::sync::Arc<dyn crate::ProgressSink>
        + Send
        + Sync,
>;

/// The command-line choices a session takes besides the project and the upstream.
pub struct SessionOptions {
    /// The session's progress sink, made when the session knows what it will run.
    pub progress: ProgressFactory,
    pub api_key_env: Option<String>,
    pub api_key_file: Option<std::path::PathBuf>,
    pub concurrency: Option<usize>,
    pub signing_key: Option<std::path::PathBuf>,
    /// Extra container labels.
    pub extra_labels: std::collections::BTreeMap<String, String>,
}

impl SessionOptions {
    /// A session with `progress` and nothing else chosen: the key from the protocol's defaults,
    /// the matrix's concurrency, no signing key file, no extra labels.
    pub fn new(progress: ProgressFactory) -> Self {
        Self {
            progress,
            api_key_env: None,
            api_key_file: None,
            concurrency: None,
            signing_key: None,
            extra_labels: std::collections::BTreeMap::new(),
        }
    }
}

/// A progress factory that draws nothing (tests; sessions inside another command's output).
pub fn quiet() -> ProgressFactory {
    std::sync::Arc::new(|_, _| std::sync::Arc::new(crate::QuietProgress))
}

/// Why a session could not start or did not end normally. Each kind has its status in
/// `exit::session_status`; the messages are the ones `eval run` has always printed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "protocol {protocol} preregistered the signing key {key}: give its private half with --signing-key-file FILE (or EVAL_SIGNING_KEY_FILE)"
    )]
    SigningKeyMissing { protocol: String, key: String },
    #[error("protocol {0}: no [models.agent]")]
    NoAgentModel(String),
    /// The key of a built-in upstream (fixture or model-free) could not be generated.
    #[error("cannot generate the built-in upstream's key: {0}")]
    FixtureKey(#[source] std::io::Error),
    /// A built-in upstream (fixture or model-free) could not start.
    #[error("cannot start the built-in upstream: {0}")]
    FixtureUpstream(#[source] std::io::Error),
    /// The fixture key the controller generated itself was refused: a controller fault.
    #[error("{0}")]
    FixtureSecret(#[source] eval_proxy::SecretError),
    #[error("no API key for upstream {0}: give --api-key-env VAR or --api-key-file PATH")]
    NoApiKey(String),
    /// The named variable or file does not hold a usable key (the message never shows it).
    #[error("{0}")]
    ApiKey(#[source] eval_proxy::SecretError),
    #[error("{path}: {source}")]
    RunDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Ledger(#[from] eval_evidence::LedgerError),
    #[error(transparent)]
    Protocol(#[from] eval_protocols::ProtocolError),
    /// Loading the signing key or naming the checkpoint origin.
    #[error(transparent)]
    SigningKey(#[from] eval_evidence::signing::SigningError),
    /// The ledger's existing checkpoints do not accept this key or do not verify.
    #[error("{0}")]
    Checkpointer(#[source] eval_evidence::signing::SigningError),
    #[error("cannot start the proxy: {0}")]
    Proxy(#[source] eval_proxy::ProxyError),
    #[error(transparent)]
    Engine(#[from] eval_runtimes::RuntimeError),
    /// The stop signals (SIGINT, SIGTERM, SIGHUP) could not be taken over.
    #[error("cannot listen for stop signals: {0}")]
    Signals(#[source] std::io::Error),
    #[error(transparent)]
    Artifacts(#[from] eval_evidence::artifacts::ArtifactError),
    #[error(transparent)]
    Setup(#[from] crate::attempt::SetupError),
    #[error(transparent)]
    Run(#[from] crate::RunError),
    /// Staging the task inputs into the run's content-addressed copy.
    #[error(transparent)]
    Inputs(#[from] crate::inputs::InputsError),
}

/// Runs one session after admission: the upstream, the proxy, the executor, the runner. What
/// the session starts is let go on every path, a failure half-way included (see [`Held`]).
pub async fn run_admitted(
    project: &Project,
    state: &Path,
    admitted: &Admitted,
    upstream: UpstreamChoice,
    opts: SessionOptions,
) -> Result<Finished, SessionError> {
    let mut held = Held::default();
    let result = session(&mut held, project, state, admitted, upstream, opts).await;
    held.release().await;
    result
}

/// What a session has started and must stop, whatever happens after. [`Held::release`] stops it
/// in order; if the session's future is dropped before that (cancelled, or a panic), `Drop` does
/// what can be done without awaiting, which is enough to release the ledger writer.
#[derive(Default)]
struct Held {
    exec: Option<std::sync::Arc<crate::attempt::DockerExecutor>>,
    proxy: Option<eval_proxy::ProxyHandle>,
    control: Option<std::sync::Arc<crate::attempt::Control>>,
    fixture: Option<eval_upstreams::fixture::FixtureUpstream>,
    model_free: Option<eval_upstreams::model_free::ModelFreeUpstream>,
}

impl Held {
    async fn release(&mut self) {
        if let Some(exec) = self.exec.take() {
            exec.cleanup();
        }
        if let Some(proxy) = self.proxy.take() {
            proxy.shutdown(std::time::Duration::from_secs(5)).await;
        }
        // The proxy and the control plane hold each other (oracle calls); breaking that cycle
        // is what releases the ledger writer they both reach.
        if let Some(control) = self.control.take() {
            control.release_proxy();
        }
        if let Some(fixture) = self.fixture.take() {
            fixture.shutdown().await;
        }
        if let Some(server) = self.model_free.take() {
            server.shutdown().await;
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(control) = self.control.take() {
            control.release_proxy();
        }
        if let Some(exec) = self.exec.take() {
            exec.cleanup();
        }
    }
}

/// A swap point for the custody tests: `EVAL_TEST_RENAME_AFTER_STAGING=<from>:<to>` renames
/// `<from>` over `<to>` once the task inputs are staged — an operator changing a grader file of
/// the project mid-run. Only debug builds read the variable.
fn swap_point_after_staging() {
    if !cfg!(debug_assertions) {
        return;
    }
    if let Some(v) = std::env::var_os("EVAL_TEST_RENAME_AFTER_STAGING")
        && let Some((from, to)) = v.to_str().and_then(|v| v.split_once(':'))
    {
        let _ = std::fs::rename(from, to);
    }
}

/// The signing key, loaded and checked against the frozen public key before anything is
/// written: a run signed by another key than the preregistered one never starts.
pub(crate) fn signing_key(
    state: &Path,
    protocol: &str,
    path: Option<&Path>,
) -> Result<Option<eval_evidence::signing::SigningKeyPair>, SessionError> {
    let signing = match path {
        Some(path) => Some(eval_evidence::signing::SigningKeyPair::load(path)?),
        None => None,
    };
    if let Some(frozen) = eval_protocols::frozen_public_key(state, protocol)? {
        match &signing {
            Some(key) => key.ensure_public_matches(&frozen)?,
            None => {
                return Err(SessionError::SigningKeyMissing {
                    protocol: protocol.to_owned(),
                    key: frozen.to_string(),
                });
            }
        }
    }
    Ok(signing)
}

/// The upstream's key and record: a generated key and a started fixture upstream (kept in
/// `held`), or the user's key from the environment or a file, recorded with whether the protocol
/// preregisters that URL and the TLS pins the proxy enforces on it.
async fn upstream_key(
    held: &mut Held,
    upstream: &UpstreamChoice,
    preregistered: Option<&eval_protocols::protocol::Upstream>,
    api_key_env: Option<&str>,
    api_key_file: Option<&Path>,
) -> Result<(eval_proxy::SecretKey, UpstreamRecord, Vec<u8>), SessionError> {
    use eval_upstreams::{FixtureKey, fixture::FixtureUpstream};
    match upstream {
        UpstreamChoice::Fixture => {
            let k = FixtureKey::generate().map_err(SessionError::FixtureKey)?;
            let server = FixtureUpstream::start(k.clone())
                .await
                .map_err(SessionError::FixtureUpstream)?;
            let url = server.base_url();
            held.fixture = Some(server);
            let key = eval_proxy::SecretKey::from_memory(k.expose())
                .map_err(SessionError::FixtureSecret)?;
            let forbidden = k.expose().as_bytes().to_vec();
            let rec = UpstreamRecord {
                kind: "fixture".into(),
                url,
                ..UpstreamRecord::default()
            };
            Ok((key, rec, forbidden))
        }
        UpstreamChoice::ModelFree => {
            let k = FixtureKey::generate().map_err(SessionError::FixtureKey)?;
            let server = eval_upstreams::model_free::ModelFreeUpstream::start(k.clone())
                .await
                .map_err(SessionError::FixtureUpstream)?;
            let url = server.base_url();
            held.model_free = Some(server);
            let key = eval_proxy::SecretKey::from_memory(k.expose())
                .map_err(SessionError::FixtureSecret)?;
            let forbidden = k.expose().as_bytes().to_vec();
            let rec = UpstreamRecord {
                kind: MODEL_FREE.into(),
                url,
                ..UpstreamRecord::default()
            };
            Ok((key, rec, forbidden))
        }
        UpstreamChoice::Remote { url, .. } => {
            let key = match (api_key_env, api_key_file) {
                (Some(var), _) => eval_proxy::SecretKey::from_env(var),
                (None, Some(file)) => eval_proxy::SecretKey::from_file(file),
                (None, None) => return Err(SessionError::NoApiKey(url.clone())),
            }
            .map_err(SessionError::ApiKey)?;
            // Admission refused any other URL, so a preregistered upstream is this one.
            let pre = preregistered.filter(|u| u.matches(url));
            let rec = UpstreamRecord {
                kind: "remote".into(),
                url: url.clone(),
                preregistered: pre.is_some(),
                tls_spki_sha256: pre.map(|u| u.tls_spki_sha256.clone()).unwrap_or_default(),
            };
            Ok((key, rec, Vec::new()))
        }
    }
}

/// The run's ledger writer, its entries so far and the recorder over them (signing
/// checkpoints when a key is given).
fn open_recorder(
    state: &Path,
    admitted: &Admitted,
    upstream_kind: &str,
    signing: Option<eval_evidence::signing::SigningKeyPair>,
) -> Result<(crate::Recorder, Vec<ledger::Entry>), SessionError> {
    let matrix = &admitted.run_name();
    let run_dir = eval_runlog::layout::run_dir(state, matrix);
    std::fs::create_dir_all(&run_dir).map_err(|source| SessionError::RunDir {
        path: run_dir.clone(),
        source,
    })?;
    let ledger_path = eval_runlog::layout::ledger_path(state, matrix);
    let writer = eval_evidence::ledger::LedgerWriter::open(&ledger_path)?;
    // The signer attaches first and reads the writer's own file: it refuses every evidence entry
    // no checkpoint covers (appended between sessions without the key). The session then replays
    // exactly the entries the writer holds and signs — never the path re-read.
    let checkpointer = match signing {
        Some(key) => {
            use eval_evidence::signing::{
                Checkpointer, aa_origin_for_identity, origin_for_identity,
                smoke_origin_for_identity,
            };
            // A smoke run signs as itself: its log can never pass for the real run's.
            // An A/A run too: its log is never the release's evidence.
            let origin = match (&admitted.smoke, &admitted.aa) {
                (Some(_), _) => smoke_origin_for_identity(&admitted.identity)?,
                (None, Some(_)) => aa_origin_for_identity(&admitted.identity)?,
                (None, None) => origin_for_identity(&admitted.identity)?,
            };
            Some(
                Checkpointer::open(std::sync::Arc::new(key), &origin, &writer)
                    .map_err(SessionError::Checkpointer)?,
            )
        }
        None => None,
    };
    let entries = writer.entries_blocking()?;
    let mut rec = crate::Recorder::new(writer, &entries, upstream_kind)?;
    if let Some(c) = checkpointer {
        rec = rec.with_checkpointer(c);
    }
    Ok((rec, entries))
}

/// The proxy's configuration: the agent model's API, the key, the run budget and prices, and
/// what earlier sessions already spent.
fn proxy_config(
    p: &eval_protocols::protocol::Protocol,
    agent_api: eval_core::contract::ApiKind,
    upstream_url: &str,
    key: eval_proxy::SecretKey,
    sink: std::sync::Arc<dyn eval_proxy::RecordSink>,
    entries: &[ledger::Entry],
) -> eval_proxy::ProxyConfig {
    let mut cfg = eval_proxy::ProxyConfig::new(upstream_url, agent_api, key, sink);
    cfg.run_budget = Some(p.budgets.run);
    for price in &p.budgets.prices {
        cfg.prices.insert(price.clone());
    }
    cfg.run_seed = run_seed(entries, &cfg.prices);
    if let Some(idle) = test_upstream_idle() {
        cfg.timeouts.idle = idle;
    }
    cfg
}

/// A test hook: `EVAL_TEST_UPSTREAM_IDLE_SECS=<n>` shortens the proxy's upstream idle timeout
/// (300 s) so the end-to-end tests can stall a stream past it in seconds. Only debug builds
/// read the variable.
fn test_upstream_idle() -> Option<std::time::Duration> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let secs: u64 = std::env::var("EVAL_TEST_UPSTREAM_IDLE_SECS")
        .ok()?
        .parse()
        .ok()?;
    Some(std::time::Duration::from_secs(secs.max(1)))
}

/// One session from the signing key to the runner's end; everything it starts goes into `held`
/// as soon as it exists, so the caller stops it even when a later step fails.
async fn session(
    held: &mut Held,
    project: &Project,
    state: &Path,
    admitted: &Admitted,
    upstream: UpstreamChoice,
    opts: SessionOptions,
) -> Result<Finished, SessionError> {
    use std::sync::Arc;

    let loaded = &admitted.loaded;
    let p = &loaded.protocol;
    let matrix = admitted.run_name();
    let signing = signing_key(state, &p.name, opts.signing_key.as_deref())?;
    // Before the upstream starts: a protocol without an agent model runs nothing.
    agent_model(p)?;
    let (key, upstream_rec, forbidden) = upstream_key(
        held,
        &upstream,
        p.upstream.as_ref(),
        opts.api_key_env.as_deref(),
        opts.api_key_file.as_deref(),
    )
    .await?;
    let (rec, entries) = open_recorder(state, admitted, &upstream_rec.kind, signing)?;
    // Bounded by the protocol's artifact budget, counted from what earlier sessions stored;
    // shared by the wire log and the attempts.
    let store = eval_evidence::artifacts::ArtifactStore::open(
        &eval_runlog::layout::artifacts_dir(state, &matrix),
    )?
    .with_budget(p.budgets.artifacts.max_bytes)?;
    let (proxy, control, bridge) =
        start_proxy(held, p, &upstream_rec, key, &rec, &entries, &store).await?;
    let parts = ExecutorParts {
        proxy,
        control,
        bridge,
        store,
        forbidden,
        extra_labels: opts.extra_labels,
    };
    let exec = Arc::new(start_executor(project, state, admitted, parts).await?);
    held.exec = Some(exec.clone());
    let concurrency = opts.concurrency.unwrap_or(loaded.matrix.concurrency).max(1);
    let started = run_started(admitted, concurrency, upstream_rec);
    let total = started
        .slots
        .iter()
        .filter(|s| s.phase == Phase::Statistical)
        .count() as u64;
    let cancel = stop_on_signals()?;
    record_run_kind(&rec, admitted).await?;
    let progress = (opts.progress)(total, Some(p.budgets.run));
    let end = crate::runner::run_session(rec.clone(), started, exec, progress, cancel).await?;
    let tally = record_upstream_counts(held, &rec).await?;
    let summary = rec.state().summary();
    Ok(Finished {
        end,
        summary,
        fixture: tally,
    })
}

/// Starts the proxy for the session: the wire log in `store` (the key redacted), the bridge that
/// records each call, the control plane, and the proxy itself with the upstream's pins. All three
/// are `held`, so they are stopped whatever happens next.
async fn start_proxy(
    held: &mut Held,
    p: &eval_protocols::protocol::Protocol,
    upstream: &UpstreamRecord,
    key: eval_proxy::SecretKey,
    rec: &crate::Recorder,
    entries: &[ledger::Entry],
    store: &eval_evidence::artifacts::ArtifactStore,
) -> Result<
    (
        eval_proxy::ProxyHandle,
        std::sync::Arc<crate::attempt::Control>,
        crate::attempt::Bridge,
    ),
    SessionError,
> {
    use crate::attempt::{Bridge, Control};
    use std::sync::Arc;

    let wire_limits = eval_runlog::wire_log::WireLimits::default();
    let wire = eval_runlog::wire_log::WireLog::new(store.clone(), key.redactor(), wire_limits);
    let (bridge, sink) = Bridge::start_with(rec.clone(), Some(wire));
    let control = Control::new(rec.clone());
    held.control = Some(control.clone());
    let mut cfg = proxy_config(
        p,
        agent_model(p)?.api,
        &upstream.url,
        key,
        Arc::new(sink),
        entries,
    );
    cfg.control = Some(control.clone());
    cfg.tls_spki_sha256 = upstream
        .tls_spki_sha256
        .iter()
        .map(|pin| eval_protocols::protocol::parse_pin(pin))
        .collect::<Result<_, _>>()
        .map_err(|m| SessionError::Proxy(eval_proxy::ProxyError::Client(m)))?;
    cfg.keep_bodies = Some(wire_limits.per_call_response_bytes);
    let proxy = eval_proxy::Proxy::start(cfg)
        .await
        .map_err(SessionError::Proxy)?;
    held.proxy = Some(proxy.clone());
    control.set_proxy(proxy.clone());
    Ok((proxy, control, bridge))
}

/// The protocol's `agent` model (the one the proxy serves the agent).
fn agent_model(
    p: &eval_protocols::protocol::Protocol,
) -> Result<&eval_protocols::protocol::ModelContract, SessionError> {
    p.models
        .get("agent")
        .ok_or_else(|| SessionError::NoAgentModel(p.name.clone()))
}

/// What the session has started that the executor takes over.
struct ExecutorParts {
    proxy: eval_proxy::ProxyHandle,
    control: std::sync::Arc<crate::attempt::Control>,
    bridge: crate::attempt::Bridge,
    store: eval_evidence::artifacts::ArtifactStore,
    forbidden: Vec<u8>,
    extra_labels: std::collections::BTreeMap<String, String>,
}

/// Connects to Docker, stages the task inputs (checked against the freeze's manifest) and builds
/// the executor that runs the attempts.
async fn start_executor(
    project: &Project,
    state: &Path,
    admitted: &Admitted,
    parts: ExecutorParts,
) -> Result<crate::attempt::DockerExecutor, SessionError> {
    use crate::attempt::{DockerExecutor, ExecutorConfig};
    use std::sync::Arc;

    let loaded = &admitted.loaded;
    let matrix = admitted.run_name();
    let docker = eval_runtimes::DockerRuntime::connect().await?;
    let inputs = crate::inputs::stage(
        &project.root,
        &eval_runlog::layout::run_dir(state, &matrix),
        &loaded.tasks,
        admitted
            .frozen_manifest
            .as_ref()
            .ok_or_else(|| crate::inputs::InputsError::Mismatch {
                task: matrix.clone(),
                detail: "the freeze holds no readable manifest".into(),
            })?,
    )?;
    swap_point_after_staging();
    Ok(DockerExecutor::new(
        loaded,
        Arc::new(docker),
        parts.proxy,
        parts.control,
        parts.bridge,
        ExecutorConfig {
            inputs,
            root: project.root.clone(),
            work: eval_runlog::layout::run_dir(state, &matrix).join("attempts"),
            store: parts.store,
            artifact_quota: loaded.artifact_quota(),
            identity: admitted.identity.clone(),
            forbidden: parts.forbidden,
            extra_labels: parts.extra_labels,
            state_id: crate::owner::state_id(state, true)
                .map_err(|source| SessionError::RunDir {
                    path: state.join(crate::owner::STATE_ID_FILE),
                    source,
                })?
                .unwrap_or_default(),
            frozen: admitted.arms.clone(),
        },
    )?)
}

/// Installed before the runner starts any container: from then on SIGINT, SIGTERM and SIGHUP no
/// longer end the process, they cancel the returned token, which stops the session.
fn stop_on_signals() -> Result<tokio_util::sync::CancellationToken, SessionError> {
    let cancel = tokio_util::sync::CancellationToken::new();
    let on_signal = cancel.clone();
    let mut stops = StopSignals::install().map_err(SessionError::Signals)?;
    #[allow(
        clippy::disallowed_methods,
        reason = "a signal listener owns nothing and may be dropped with the runtime at exit"
    )]
    tokio::spawn(async move {
        stops.recv().await;
        on_signal.cancel();
    });
    Ok(cancel)
}

/// A smoke or A/A run says what it is before this session's `run_started`, so the ledger tells
/// it from its first entry (and, for A/A, which arm each candidate copies).
async fn record_run_kind(rec: &crate::Recorder, admitted: &Admitted) -> Result<(), SessionError> {
    let loaded = &admitted.loaded;
    if let Some(spec) = &admitted.smoke {
        let payload = serde_json::json!({
            "schema": events::SCHEMA,
            "matrix": loaded.matrix.name,
            "tasks": spec.tasks,
            "arms": spec.arms,
            "limit": spec.limit,
            "evidence": false,
        });
        rec.append(SMOKE_RUN, &payload).await?;
    }
    if let Some(copies) = &admitted.aa {
        let payload = eval_runlog::layout::AaRun {
            schema: events::SCHEMA,
            matrix: loaded.matrix.name.clone(),
            protocol: loaded.protocol.name.clone(),
            identity: admitted.identity.clone(),
            copies: copies.clone(),
            evidence: false,
        };
        rec.append(eval_runlog::layout::AA_RUN, &payload).await?;
    }
    Ok(())
}

/// The built-in upstreams' own counts, beside the proxy's meter in the same ledger so anyone can
/// cross-check it: the model-free upstream's plain stops, the fixture upstream's tally (returned).
async fn record_upstream_counts(
    held: &Held,
    rec: &crate::Recorder,
) -> Result<Option<eval_upstreams::fixture::FixtureTally>, SessionError> {
    if let Some(m) = &held.model_free {
        rec.append(
            "model_free_upstream",
            &serde_json::json!({"schema": events::SCHEMA, "calls": m.calls()}),
        )
        .await?;
    }
    let tally = held.fixture.as_ref().map(|f| f.tally());
    if let Some(t) = &tally {
        rec.append("fixture_upstream", t).await?;
    }
    Ok(tally)
}

/// The signals that stop a session as Ctrl-C does (closing running attempts by rule, removing
/// their containers and unmounting their filesystems, exit 2): SIGINT, SIGTERM (what `timeout`,
/// systemd, CI runners and Kubernetes send) and SIGHUP (the terminal went away). Left at their
/// default, the last two killed the controller and left its agents running.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for the first of them.
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            _ = self.hangup.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's moving parts as `session` starts them (fixture upstream, recorder, bridge,
    /// control plane, proxy, the proxy<->control cycle), put into a `Held` the way `session`
    /// does, with nothing else left holding them.
    async fn started_parts(ledger: &Path) -> Held {
        use crate::attempt::{Bridge, Control};
        use eval_upstreams::{FixtureKey, fixture::FixtureUpstream};
        let mut held = Held::default();
        let k = FixtureKey::generate().unwrap();
        let server = FixtureUpstream::start(k.clone()).await.unwrap();
        let url = server.base_url();
        held.fixture = Some(server);
        let writer = eval_evidence::ledger::LedgerWriter::open(ledger).unwrap();
        let rec = crate::Recorder::new(writer, &[], "fixture").unwrap();
        let (bridge, sink) = Bridge::start(rec.clone());
        let control = Control::new(rec);
        held.control = Some(control.clone());
        let mut cfg = eval_proxy::ProxyConfig::new(
            &url,
            eval_proxy::ApiKind::OpenAiChat,
            eval_proxy::SecretKey::from_memory(k.expose()).unwrap(),
            std::sync::Arc::new(sink),
        );
        cfg.control = Some(control.clone());
        let proxy = eval_proxy::Proxy::start(cfg).await.unwrap();
        held.proxy = Some(proxy.clone());
        control.set_proxy(proxy);
        drop(bridge);
        held
    }

    fn writer_is_free(ledger: &Path) -> bool {
        eval_evidence::ledger::LedgerWriter::open(ledger).is_ok()
    }

    /// Whether the writer is let go. The release is asynchronous (the ledger bridge's drain
    /// task ends on a worker once its last sender is gone), so this polls; the minute is a hang
    /// guard that only a writer that is never released reaches, not an assumption about speed.
    async fn writer_becomes_free(ledger: &Path) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if writer_is_free(ledger) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        writer_is_free(ledger)
    }

    /// `run_admitted` releases what the session holds after `session` returns, on its error
    /// path too: the ledger writer the proxy<->control cycle holds is let go, so the same
    /// process (`eval demo` goes on to the report) can take the ledger again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_failing_half_way_still_releases_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.sqlite");
        let mut held = started_parts(&ledger).await;
        // Without the release the cycle keeps the writer (and its lock) alive: what an early
        // `?` used to leave behind.
        assert!(!writer_is_free(&ledger));
        held.release().await;
        assert!(writer_becomes_free(&ledger).await);
    }

    /// A session future dropped before its release (Ctrl-C in a caller's `select!`, a panic)
    /// still breaks the cycle in `Drop`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_session_releases_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.sqlite");
        let held = started_parts(&ledger).await;
        assert!(!writer_is_free(&ledger));
        drop(held);
        assert!(writer_becomes_free(&ledger).await);
    }

    fn entry(kind: &str, payload: serde_json::Value) -> ledger::Entry {
        ledger::Entry {
            seq: 0,
            prev: eval_evidence::ledger::Digest::ZERO,
            kind: kind.into(),
            payload: serde_json::to_vec(&payload).unwrap(),
            hash: eval_evidence::ledger::Digest::ZERO,
            recorded_at: String::new(),
        }
    }

    fn started(attempt: &str, seq: u64, reserved: u64) -> ledger::Entry {
        let p = events::ModelCallStarted {
            schema: events::SCHEMA,
            attempt: attempt.into(),
            role: "agent".into(),
            seq,
            model: Some("m".into()),
            path: "/v1/chat/completions".into(),
            stream: false,
            reserved_tokens: reserved,
        };
        entry(events::MODEL_CALL_STARTED, serde_json::to_value(p).unwrap())
    }

    /// A `model_call` entry whose record ended with `outcome` instead of `ok`.
    fn with_outcome(e: ledger::Entry, outcome: eval_proxy::CallOutcome) -> ledger::Entry {
        let mut call: serde_json::Value = serde_json::from_slice(&e.payload).unwrap();
        call["record"]["outcome"] = serde_json::to_value(outcome).unwrap();
        ledger::Entry {
            payload: serde_json::to_vec(&call).unwrap(),
            ..e
        }
    }

    fn called(
        attempt: &str,
        seq: u64,
        usage: Option<(u64, u64)>,
        reserved: u64,
        spend: f64,
    ) -> ledger::Entry {
        let record = eval_proxy::CallRecord {
            attempt_id: Some(attempt.into()),
            arm: None,
            role: eval_proxy::Role::Agent,
            seq,
            started_at_ms: 0,
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            model: Some("m".into()),
            upstream_model: None,
            stream: false,
            status: 200,
            upstream_status: Some(200),
            outcome: eval_proxy::CallOutcome::Ok,
            detail: None,
            latency_ms: 0.0,
            ttfb_ms: None,
            usage: usage.map(|(i, o)| eval_proxy::Usage {
                input_tokens: i,
                output_tokens: o,
                ..eval_proxy::Usage::default()
            }),
            spend_usd: spend,
            reserved_tokens: reserved,
            request_digest: None,
            response_digest: None,
            changes: vec![],
            client_disconnected: false,
            incomplete: false,
            streamed_bytes: None,
            wire: None,
            bodies: None,
        };
        let p = events::ModelCall {
            schema: events::SCHEMA,
            attempt: attempt.into(),
            role: "agent".into(),
            seq,
            model: Some("m".into()),
            status: 200,
            result: "ok".into(),
            tokens: eval_core::tokens::TokenCounts::default(),
            metered: usage.is_some(),
            latency_ms: 0,
            record: serde_json::to_value(record).unwrap(),
            artifacts: Default::default(),
            wire_log: None,
        };
        entry(events::MODEL_CALL, serde_json::to_value(p).unwrap())
    }

    #[test]
    fn a_resumed_run_is_seeded_with_what_earlier_sessions_spent() {
        let mut prices = eval_proxy::PriceTable::default();
        prices.models.insert(
            "m".into(),
            eval_proxy::Price {
                model: "m".into(),
                input_usd_per_mtok: 1.0,
                cached_input_usd_per_mtok: None,
                cache_write_usd_per_mtok: None,
                output_usd_per_mtok: 4.0,
            },
        );
        let entries = vec![
            // Metered: its usage counts, not its reservation.
            started("a#1", 1, 5000),
            called("a#1", 1, Some((100, 20)), 5000, 0.25),
            // Unmetered: its reservation counts.
            started("b#1", 1, 3000),
            called("b#1", 1, None, 3000, 0.5),
            // Started, never recorded (the session died mid-call): its reservation, priced at
            // the dearer rate.
            started("c#1", 1, 1_000_000),
            // Refused by the upstream without usage: released, so no tokens (an agent's free
            // 400s must not eat the run budget after a resume).
            started("d#1", 1, 7000),
            with_outcome(
                called("d#1", 1, None, 7000, 0.0),
                eval_proxy::CallOutcome::UpstreamError,
            ),
            // Cut at close with the usage seen so far: charged at its reservation.
            started("e#1", 1, 9000),
            with_outcome(
                called("e#1", 1, Some((10, 1)), 9000, 0.0),
                eval_proxy::CallOutcome::CutAtClose,
            ),
        ];
        let seed = run_seed(&entries, &prices);
        assert_eq!(seed.tokens, 120 + 3000 + 1_000_000 + 9000);
        assert_eq!(seed.requests, 5);
        assert!(
            (seed.spend_usd - (0.25 + 0.5 + 4.0)).abs() < 1e-9,
            "{}",
            seed.spend_usd
        );
        assert_eq!(run_seed(&[], &prices), eval_proxy::RunSeed::default());
    }
}
