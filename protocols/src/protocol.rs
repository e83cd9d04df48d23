//! `protocols/<name>/protocol.toml`: what is claimed, how it is measured, and what must hold
//! before and after. Every table refuses unknown fields; all paths are relative to the project
//! root (the directory `eval` runs in) and may not escape it.
//!
//! See `protocols/v0.4/protocol.toml` for a complete, commented example.

use eval_core::budget::RunBudget;
use eval_core::contract::{ApiKind, Price};
use eval_core::fault::FaultCode;
use eval_core::gates::Gate;
use eval_core::keys::PublicKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the protocol schema (`schema = 1` in the file).
pub const PROTOCOL_SCHEMA: u32 = 1;

/// A whole `protocol.toml`: the preregistration that `eval freeze` turns into an identity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Must equal [`PROTOCOL_SCHEMA`]; another value is refused when the protocol is loaded.
    pub schema: u32,
    /// The identity name: `eval freeze --protocol NAME`. Must equal the directory name.
    pub name: String,
    /// Human-readable title for reports; must not be empty.
    pub title: String,
    /// The matrix this protocol runs (`matrix/<matrix>.toml`).
    pub matrix: String,
    /// The claims under test (at least one, ids unique and non-empty).
    pub hypotheses: Vec<Hypothesis>,
    /// The registered-report statements (sample size, stopping and exclusion rules, supersession).
    pub registration: Registration,
    /// The preregistered signing key (absent: the protocol names none, and any key may sign).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing: Option<Signing>,
    /// The preregistered model upstream (absent: the protocol names none, and no run of it is
    /// release evidence). `eval run` refuses any other `--upstream` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Upstream>,
    /// Model contracts per role: `agent` (required) and e.g. `oracle`.
    pub models: BTreeMap<String, ModelContract>,
    /// Per-attempt and per-run limits the proxy enforces, and the prices spend is computed with.
    pub budgets: Budgets,
    /// The arms (runtimes with their profile and candidate) this protocol can run.
    pub arms: Vec<Arm>,
    /// Per suite: the metrics it reports and suite-wide limits.
    pub suites: BTreeMap<String, SuiteSpec>,
    /// How suite results are summarised into the statistics gates read.
    pub statistics: StatisticalPlan,
    /// What a final attempt without a metric counts as.
    pub missing_data: MissingData,
    /// Which failed attempts may be retried, and how often.
    pub reruns: Reruns,
    /// Other protocols that must have passed before this one may spend money.
    #[serde(default)]
    pub preconditions: Vec<Precondition>,
    /// The isolation every agent container must run under: `runc` (the engine's default,
    /// absent) or `gvisor` (the engine's `runsc` runtime, checked after create). Part of the
    /// protocol's bytes, so the freeze's identity records it.
    #[serde(default, skip_serializing_if = "Isolation::is_default")]
    pub isolation: Isolation,
    /// The protocol declares itself model-free: its metrics depend only on what the harness
    /// sends (the wire metrics, `eval_core::budget::WIRE_METRICS`), never on what a model
    /// answers, so a run against the built-in model-free upstream (`eval run --upstream
    /// model-free`) is evidence for it. Loading refuses a model-free protocol whose suites list
    /// any other metric; evidence from the model-free upstream passes no gate of a protocol
    /// without this flag. Part of the protocol's bytes, so the freeze's identity records it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub model_free: bool,
    /// The release gates; the report passes only if all of them pass.
    pub gates: Vec<Gate>,
    /// Per gate id: the effect the design hopes to detect and the task-level spread, for the
    /// power `eval freeze` prints for its interval rules (`[power.<gate>]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub power: BTreeMap<String, PowerSpec>,
    /// Preregistered interim looks (`[sequential]`: `gate`, `looks` as fractions of the
    /// statistical slots, `spending`, optional `futility_z`); absent: a fixed design, analysed
    /// once. Optional and serialised only when present, so existing identities stand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<eval_core::sequential::SequentialPlan>,
}

/// `[power.<gate id>]`: the declared effect and task-level standard deviation, in the units of the
/// gate's interval rules (the mean task-level difference, or contrast).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerSpec {
    /// The effect hoped for (metric units).
    pub effect: f64,
    /// The standard deviation of task-level differences (metric units, positive).
    pub sd: f64,
}

impl Protocol {
    /// The public key `[signing] public_key` names, parsed; `Ok(None)` when the table is absent.
    /// The error is the field's message (the caller names the file and `signing.public_key`).
    pub fn signing_public_key(&self) -> Result<Option<PublicKey>, String> {
        self.signing.as_ref().map(Signing::parse).transpose()
    }
}

/// `[signing]`: the Ed25519 public key whose private half must sign this protocol's evidence
/// (checkpoints, receipts, the report attestation). `eval freeze` records it and binds it into
/// the identity; `eval run` and `eval report` refuse a signing key whose public half differs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signing {
    /// `eval+<key id>+<base64>`, exactly as `eval keygen --out FILE` prints it.
    pub public_key: String,
}

impl Signing {
    /// The key, parsed; the error explains what is wrong with the text (including a pasted private
    /// key).
    pub fn parse(&self) -> Result<PublicKey, String> {
        // A pasted key file would otherwise fail with a puzzling "key id" message.
        if self.public_key.trim_start().starts_with("PRIVATE+KEY+") {
            return Err(
                "this is a private key file's text, not a public key: put the public key here \
                 (`eval keygen` printed it; it is also in FILE.pub) and treat this private key \
                 as leaked"
                    .into(),
            );
        }
        PublicKey::parse(&self.public_key).map_err(|e| format!("not a public key: {e}"))
    }
}

/// `[upstream]`: the model API the evidence must come from. A run against any other server —
/// a scripted OpenAI-compatible one included — is never release evidence, and `eval run` refuses
/// one whose URL differs from `url`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// The base URL, as `eval run --upstream URL` must give it (a trailing `/` is ignored):
    /// `http://` or `https://`, a host, no user name or password, no query or fragment.
    pub url: String,
    /// Optional TLS key pins (`https://` only): `sha256:<64 hex>` of the DER
    /// SubjectPublicKeyInfo of the server's own (leaf) certificate. When given, the proxy's
    /// upstream client refuses, during the handshake, a server whose leaf key matches none of
    /// them — in addition to the usual certificate checks — so neither a changed trust store
    /// (`SSL_CERT_FILE`) nor a redirected name reaches another server with the key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_spki_sha256: Vec<String>,
}

impl Upstream {
    /// `url` without a trailing `/`: the form two URLs are compared in.
    pub fn normalized_url(&self) -> &str {
        normalize_url(&self.url)
    }

    /// Whether `url` (an `eval run --upstream` value) names this upstream.
    pub fn matches(&self, url: &str) -> bool {
        normalize_url(url) == self.normalized_url()
    }

    /// The pins as bytes; the error names the pin and what is wrong with it.
    pub fn pins(&self) -> Result<Vec<[u8; 32]>, String> {
        self.tls_spki_sha256.iter().map(|p| parse_pin(p)).collect()
    }

    /// Checks the URL's shape and the pins (the caller names the file and field).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let url = self.url.as_str();
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or((
                "upstream.url",
                format!("{url:?} must start with http:// or https://"),
            ))?;
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() {
            return Err(("upstream.url", format!("{url:?} names no host")));
        }
        if authority.contains('@') {
            return Err((
                "upstream.url",
                "must not carry a user name or password (the key is given to `eval run`, never written into the protocol)".into(),
            ));
        }
        if rest.contains('?') || rest.contains('#') || rest.chars().any(char::is_whitespace) {
            return Err((
                "upstream.url",
                format!("{url:?} must be a base URL without query, fragment or spaces"),
            ));
        }
        if !self.tls_spki_sha256.is_empty() && !url.starts_with("https://") {
            return Err((
                "upstream.tls_spki_sha256",
                format!("a TLS pin needs an https:// upstream, not {url:?}"),
            ));
        }
        self.pins().map_err(|m| ("upstream.tls_spki_sha256", m))?;
        Ok(())
    }
}

/// A URL without its trailing `/`s.
pub fn normalize_url(url: &str) -> &str {
    url.trim_end_matches('/')
}

/// `sha256:<64 hex>` → the 32 bytes.
pub fn parse_pin(pin: &str) -> Result<[u8; 32], String> {
    let hex_part = pin.strip_prefix("sha256:").ok_or_else(|| {
        format!("{pin:?} must be sha256:<64 hex digits> (the SHA-256 of the certificate's SubjectPublicKeyInfo)")
    })?;
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out)
        .map_err(|_| format!("{pin:?} must be sha256: followed by exactly 64 hex digits"))?;
    Ok(out)
}

/// One preregistered claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hypothesis {
    /// Short stable name for cross-reference; unique within the protocol.
    pub id: String,
    /// The claim, in words, as it will appear in the report.
    pub text: String,
}

/// The registered-report (OSF style) statements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// Why the matrix's number of tasks and repetitions suffices.
    pub sample_size_rationale: String,
    /// When data collection ends (stated before seeing any results).
    pub stopping_rule: String,
    /// Which attempts or tasks are excluded from analysis, and why; may be empty.
    pub exclusion_rules: Vec<String>,
    /// The retired protocol this one replaces, if any; freezing is refused until that one is
    /// retired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<Supersedes>,
}

/// A protocol that replaces a retired one names it; the old identity stays retired and untouched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Supersedes {
    /// The superseded protocol's name.
    pub name: String,
    /// Why it was replaced; must not be empty.
    pub reason: String,
}

/// `isolation`: what the agent's containers run under.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// The engine's default runtime (runc): namespaces, no capabilities, the container policy.
    #[default]
    Runc,
    /// gVisor's user-space kernel (`runsc`) under the same policy.
    Gvisor,
}

impl Isolation {
    /// True for the default (then the field is not serialised).
    pub fn is_default(&self) -> bool {
        *self == Isolation::Runc
    }
}

/// What the proxy lets through for one role: the API, the exact model id, and parameter bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelContract {
    /// Which wire API requests for this role use; the proxy parses and meters accordingly.
    pub api: ApiKind,
    /// The exact upstream model id; a request naming another model is refused.
    pub model: String,
    /// Per request parameter (`temperature`, `max_tokens`, …): the bound a request must meet.
    #[serde(default)]
    pub params: BTreeMap<String, ParamBound>,
    /// `true`: requests must stream; `false`: must not; absent: either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Streams must carry usage (the proxy asks for it where the API needs that).
    #[serde(default)]
    pub stream_usage: bool,
    /// Body parameters a request may send besides `model`, `messages` and those ruled in
    /// `params`; any other is refused as a contract violation. Absent: `stream` and
    /// `stream_options` for `openai-chat`; `system`, `max_tokens` and `stream` for
    /// `anthropic-messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_params: Option<Vec<String>>,
    /// Client headers forwarded to the upstream (case-insensitive) besides `content-type`; any
    /// other is dropped and its name recorded. Credentials and hop-by-hop headers are never
    /// forwarded. Absent: `accept` and `user-agent` (and `anthropic-version` for
    /// `anthropic-messages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_headers: Option<Vec<String>>,
    /// Content-part types (`messages[].content[].type`, Anthropic `system` and `tool_result`
    /// blocks too) a request may send; any other is refused as a contract violation. A request's
    /// reservation bounds its input by body bytes, which an image, audio, file or document part
    /// does not respect (and a URL part makes the provider fetch what the agent names), so such
    /// parts pass only when a protocol lists them here, knowingly. Absent: the text-only types —
    /// `text`, `refusal` for `openai-chat`; `text`, `tool_use`, `tool_result`, `thinking`,
    /// `redacted_thinking` for `anthropic-messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_content_parts: Option<Vec<String>>,
}

/// A bound on one request parameter. `required`: a request without it is refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamBound {
    /// The parameter must have exactly this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<f64>,
    /// The parameter must be at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// The parameter must be at most this (`min` ≤ `max` is checked on load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// A request must carry the parameter (otherwise it may omit it).
    #[serde(default)]
    pub required: bool,
}

/// `[budgets]`: the spending limits the proxy enforces, refusing a request that would exceed them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    /// Limits per attempt.
    pub attempt: AttemptBudget,
    /// Limits summed over every attempt of the run.
    pub run: RunBudget,
    /// What the run may write into its artifact store in total (`[budgets.artifacts]`).
    #[serde(default)]
    pub artifacts: ArtifactBudget,
    /// Prices used to turn metered tokens into spend, per model id.
    #[serde(default)]
    pub prices: Vec<Price>,
}

/// `[budgets.artifacts]`: the bytes the run may store as artifacts (workspace archives, logs,
/// metrics, grader output, the wire log) over all its attempts and sessions. Each attempt
/// reserves its own quota from it when it starts; an attempt whose artifacts would pass its
/// quota is stored without them and that is its outcome (`agent_error`, not graded): what an
/// agent leaves can never fill the host's disk, nor take another attempt's share. A quota the
/// rest of the budget cannot cover stops the run, named.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactBudget {
    /// Default [`DEFAULT_ARTIFACT_BYTES`] (16 GiB).
    pub max_bytes: u64,
    /// Each attempt's quota; `slots × per_attempt_bytes ≤ max_bytes` (checked on load, so at
    /// freeze). Absent: `max_bytes / slots` ([`crate::Loaded::artifact_quota`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_attempt_bytes: Option<u64>,
}

/// The default `[budgets.artifacts] max_bytes`: 16 GiB.
pub const DEFAULT_ARTIFACT_BYTES: u64 = 16 << 30;

impl Default for ArtifactBudget {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_ARTIFACT_BYTES,
            per_attempt_bytes: None,
        }
    }
}

/// `[budgets.attempt]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptBudget {
    /// Wall-clock limit of one attempt (the task may not declare more).
    pub wall_seconds: u64,
    /// Upstream requests one attempt may make; the next one is refused.
    pub max_requests: u64,
    /// Tokens (input + output) one attempt may use; a request whose worst case would pass it is
    /// refused.
    pub max_tokens: u64,
}

/// One arm: what runs. Which suites run it, and whether it is a baseline or the gated candidate,
/// is the matrix's business.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    /// The arm's id, which the matrix and the report use.
    pub id: String,
    /// Free text for the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The runtime definition (`runtimes/<name>/runtime.toml`); its directory is frozen whole.
    pub runtime: String,
    /// The arm's harness profile file.
    pub profile: String,
    /// The candidate package: a file or a directory of files (absent for an arm without the
    /// candidate, such as a baseline). The runtime places it at its `arm.candidate` path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// Plugin settings as the candidate reads them (e.g. `activationMode = "auto"`).
    #[serde(default)]
    pub settings: toml::Table,
    /// True for an arm that stands in for a real harness runtime (reports say so).
    #[serde(default)]
    pub stand_in: bool,
}

/// `[suites.<id>]`: what the protocol says about one of the matrix's suites.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSpec {
    /// Free text for the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Metrics gates may name: grader metrics every task of the suite emits, plus built-ins.
    pub metrics: Vec<String>,
    /// Clarifying questions an attempt may ask the oracle (0 = no oracle).
    #[serde(default)]
    pub max_oracle_calls: u32,
    /// Control arms graded before any statistical slot (`[suites.<id>.controls]`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controls: Option<Controls>,
    /// How far a model oracle's own record of a question is trusted (`[suites.<id>.oracle_guard]`);
    /// absent: the defaults, which protect the oracle metrics.
    #[serde(default, skip_serializing_if = "OracleGuard::is_default")]
    pub oracle_guard: OracleGuard,
    /// What a repetition must reach on the suite's headline metric to count as a pass in the
    /// report's pass@k / pass^k (absent: the controls' `pass_at_least`, else 100). Optional and
    /// serialised only when present, so existing identities stand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_mark: Option<f64>,
}

/// `[suites.<id>.oracle_guard]`: the stateful oracle's recorded field (ICAE's `triggers_hit`,
/// which `oracle_constraints_missed` counts) comes from a model that reads the agent's question
/// verbatim, so the agent can steer it. Per question, only ids of the brief are kept (others are
/// dropped and counted), at most `max_triggers_per_question` of them; a reply whose text quotes
/// more than `max_brief_overlap` of the brief (the share of the brief's 8-word runs it contains)
/// is flagged in its `clarification` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OracleGuard {
    /// The ids of the brief one question's record may name (default 3).
    #[serde(default = "OracleGuard::default_max_triggers")]
    pub max_triggers_per_question: u32,
    /// The share (0 to 1) of the brief's 8-word runs a reply may quote before it is flagged
    /// (default 0.2).
    #[serde(default = "OracleGuard::default_max_overlap")]
    pub max_brief_overlap: f64,
}

impl SuiteSpec {
    /// The suite's control arms, when it declares some (`None` without the table or with
    /// `off`): what runs, counts slots and feeds `grader_valid`.
    pub fn control_arms(&self) -> Option<&Controls> {
        self.controls.as_ref().filter(|c| c.off.is_none())
    }

    /// The protocol's stated reason for running the suite without control arms (`off`).
    pub fn controls_off(&self) -> Option<&str> {
        self.controls.as_ref().and_then(|c| c.off.as_deref())
    }
}

impl OracleGuard {
    /// A question names a requirement or two; three leaves room without letting one injected
    /// question mark a whole brief triggered.
    pub const DEFAULT_MAX_TRIGGERS: u32 = 3;
    /// An honest reply quotes a constraint's response or two of a brief; a fifth of the brief is
    /// already recitation.
    pub const DEFAULT_MAX_OVERLAP: f64 = 0.2;

    fn default_max_triggers() -> u32 {
        Self::DEFAULT_MAX_TRIGGERS
    }

    fn default_max_overlap() -> f64 {
        Self::DEFAULT_MAX_OVERLAP
    }

    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl Default for OracleGuard {
    fn default() -> Self {
        Self {
            max_triggers_per_question: Self::DEFAULT_MAX_TRIGGERS,
            max_brief_overlap: Self::DEFAULT_MAX_OVERLAP,
        }
    }
}

/// `[suites.<id>.controls]`: the control arms every task of the suite is graded under, and what
/// counts as passing — or `off = "<why>"`, the protocol's explicit statement that the suite runs
/// without them. See `eval_core::controls`.
///
/// ```toml
/// [suites.simple.controls]
/// arms = ["oracle", "nop", "exploit:print-result", "exploit:go-testmain-exit", "exploit:mine"]
/// metric = "score"          # the grader metric that decides
/// pass_at_least = 100       # a score >= this passes
/// [suites.simple.controls.exploits]
/// mine = "protocols/NAME/exploits/mine"   # a directory of files laid over the workspace
/// ```
///
/// or, knowingly without controls (disclosed as a warning in every report):
///
/// ```toml
/// [suites.simple.controls]
/// off = "the tasks have no reference solutions yet"
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Controls {
    /// `oracle`, `nop`, `exploit:<name>`; each at most once. An oracle needs every task of the
    /// suite to have a `solution/` directory; any exploit needs a `nop` to be compared with.
    /// Required (non-empty) unless `off` is given, and then it must be absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arms: Vec<String>,
    /// The grader metric a control's result is judged by (required with `arms`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub metric: String,
    /// A control passes when its `metric` is at least this (required with `arms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_at_least: Option<f64>,
    /// `off = "<why>"`: the protocol knowingly runs this suite without control arms, so its
    /// grader's validity is not checked; the reason (non-empty) is disclosed as a warning in
    /// every report. Exclusive with every other field. A suite with neither control arms nor
    /// `off` makes the report name "grader validity unchecked" as a reason release is not
    /// allowed. Optional and serialised only when present, so existing identities stand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off: Option<String>,
    /// Other metrics of the same grader shown beside `metric` in the grader-validity table
    /// (e.g. a hardened grading of the same assertions); they never gate.
    #[serde(default)]
    pub also_report: Vec<String>,
    /// The protocol's own exploits: name → a directory (project-relative, inside the protocol's
    /// directory; frozen with the protocol) whose files are laid over the starting workspace.
    #[serde(default)]
    pub exploits: BTreeMap<String, String>,
}

/// `[statistics]`: how paired results become the intervals and p-values gates read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatisticalPlan {
    /// The independent unit; only `task` is supported (repetitions are averaged within a task).
    pub unit: String,
    /// How repetitions combine within a task; only `mean`.
    pub repetitions: String,
    /// Bootstrap / permutation resamples (positive).
    pub resamples: u64,
    /// Seed of the bootstrap's own generator (`percentile`, `bca`).
    pub seed: u64,
    /// Two-sided confidence level of intervals, strictly between 0 and 1 (e.g. 0.95).
    pub confidence: f64,
    /// Default interval method of bootstrap rules: `v04-percentile`, `percentile` or `bca`.
    pub method: String,
    /// Methods reported beside the gating one.
    #[serde(default)]
    pub report_methods: Vec<String>,
    /// For `v04-percentile`: the mulberry32 seed string; `{identity}` becomes the frozen identity's
    /// hex digest and `{suite}` the suite id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_string: Option<String>,
    /// `auto` | `always` | `never`: enumerate every resample exactly for small suites.
    #[serde(default = "default_exact")]
    pub exact: String,
    /// Suites with fewer tasks are flagged as not population-calibrated.
    #[serde(default)]
    pub min_suite_tasks: u32,
    /// The highest false-fail rate under no effect a suite gate rule may have on the run's own
    /// noise before the report flags it as an anomaly (absent: not checked). Optional and
    /// serialised only when present, so existing identities stand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub false_fail_bound: Option<f64>,
}

fn default_exact() -> String {
    "auto".into()
}

/// `[missing_data]`: the preregistered treatment of attempts that lack a metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MissingData {
    /// The rule in words (for the report and for readers of the registration).
    pub rule: String,
    /// The value a final attempt that lacks a metric gets (e.g. a failed attempt's score = 0).
    pub values: BTreeMap<String, f64>,
}

/// `[reruns]`: when a failed attempt may be run again without biasing the sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reruns {
    /// Infrastructure-fault codes whose attempts may be rerun (statistical slots); a code this
    /// eval does not know is refused when the protocol is read.
    pub codes: Vec<FaultCode>,
    /// Reruns allowed per statistical slot.
    pub max_reruns_per_slot: u32,
    /// Attempts allowed per infrastructure slot (these may be rerun after any failure).
    pub max_infra_attempts: u32,
}

/// Another frozen identity that must have a passed report (release allowed) before paid runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Precondition {
    /// The protocol name whose frozen identity must have passed.
    pub protocol: String,
    /// Optionally pin the exact identity (`sha256:…`); otherwise the name's frozen identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// Optionally pin the public key (`eval+<key id>+<base64>`) whose signed report attestation
    /// meets this precondition; otherwise the dependent protocol's own `[signing] public_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// Why the other result is required (shown when the precondition is not met).
    pub reason: String,
}
