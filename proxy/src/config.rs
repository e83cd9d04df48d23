//! What the controller tells the proxy: the upstream, the key, timeouts, budgets, and per attempt
//! its listener, session id and per-role contracts and budgets.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::control::ControlPlane;
use crate::record::RecordSink;
use crate::secret::SecretKey;

pub use eval_core::budget::RunBudget;
pub use eval_core::contract::{ApiKind, Price};

pub use crate::role::Role;

/// A rule for one top-level request parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamRule {
    /// The parameter must be present and equal to this value (numbers compare numerically).
    Exact(Value),
    /// A number within bounds; absent is allowed unless `required`.
    Range {
        /// The smallest value allowed, if any.
        min: Option<f64>,
        /// The largest value allowed, if any.
        max: Option<f64>,
        /// Whether the parameter must be present.
        #[serde(default)]
        required: bool,
    },
    /// The parameter must not be sent.
    Forbidden,
}

/// What a role may ask of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contract {
    /// The exact model id (no prefix or alias matching).
    pub model: String,
    /// Rules for top-level request parameters, e.g. `temperature`, `max_tokens`, `stream`.
    pub params: BTreeMap<String, ParamRule>,
    /// When set, requests must carry this header with a value exactly equal to the attempt's
    /// session id.
    pub session_header: Option<String>,
    /// The largest output a call may produce when its request names no limit; used for the
    /// worst-case budget reservation, and forwarded as the request's limit so the upstream
    /// cannot exceed it.
    pub default_max_output_tokens: u64,
    /// Body parameters a request may send besides `model`, `messages` and those ruled in
    /// `params`; any other is a contract violation. `None`: the API's defaults
    /// ([`Contract::default_allowed_params`]).
    #[serde(default)]
    pub allowed_params: Option<BTreeSet<String>>,
    /// Client headers forwarded upstream (lower-case names) besides `content-type` and the
    /// session header; any other is dropped and recorded. Credentials and hop-by-hop headers
    /// are dropped even when listed. `None`: the API's defaults
    /// ([`Contract::default_allowed_headers`]).
    #[serde(default)]
    pub allowed_headers: Option<BTreeSet<String>>,
    /// Content-part types a message (or Anthropic `system` / `tool_result` block list) may hold;
    /// any other is a contract violation. Body bytes bound a reservation's input only for text:
    /// an image, audio, file or document part costs the provider's own count, and a URL part
    /// makes it fetch what the agent chose. `None`: the API's text-only defaults
    /// ([`Contract::default_content_parts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_content_parts: Option<BTreeSet<String>>,
}

impl Contract {
    /// Only the model id is fixed.
    pub fn model_only(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            params: BTreeMap::new(),
            session_header: None,
            default_max_output_tokens: 32_768,
            allowed_params: None,
            allowed_headers: None,
            allowed_content_parts: None,
        }
    }

    /// Content-part types allowed when a contract lists none: text, and the blocks a
    /// text-only tool loop needs.
    pub fn default_content_parts(api: ApiKind) -> &'static [&'static str] {
        match api {
            ApiKind::OpenAiChat => &["text", "refusal"],
            ApiKind::AnthropicMessages => &[
                "text",
                "tool_use",
                "tool_result",
                "thinking",
                "redacted_thinking",
            ],
        }
    }

    /// Whether a request may send a content part of this type.
    pub fn allows_content_part(&self, api: ApiKind, kind: &str) -> bool {
        match &self.allowed_content_parts {
            Some(list) => list.contains(kind),
            None => Self::default_content_parts(api).contains(&kind),
        }
    }

    /// Body parameters allowed when a contract lists none: what a plain chat or messages call
    /// needs, nothing that changes how much is generated or billed.
    pub fn default_allowed_params(api: ApiKind) -> &'static [&'static str] {
        match api {
            ApiKind::OpenAiChat => &["model", "messages", "stream", "stream_options"],
            ApiKind::AnthropicMessages => &["model", "messages", "system", "max_tokens", "stream"],
        }
    }

    /// Client headers forwarded when a contract lists none.
    pub fn default_allowed_headers(api: ApiKind) -> &'static [&'static str] {
        match api {
            ApiKind::OpenAiChat => &["accept", "user-agent"],
            ApiKind::AnthropicMessages => &["accept", "user-agent", "anthropic-version"],
        }
    }

    /// Whether a request may send this body parameter.
    pub fn allows_param(&self, api: ApiKind, name: &str) -> bool {
        if matches!(name, "model" | "messages") || self.params.contains_key(name) {
            return true;
        }
        match &self.allowed_params {
            Some(list) => list.contains(name),
            None => Self::default_allowed_params(api).contains(&name),
        }
    }

    /// Whether a client header (lower-case name) may be forwarded.
    pub fn allows_header(&self, api: ApiKind, name: &str) -> bool {
        if name == "content-type" || self.session_header.as_deref() == Some(name) {
            return true;
        }
        match &self.allowed_headers {
            Some(list) => list.contains(name),
            None => Self::default_allowed_headers(api).contains(&name),
        }
    }

    /// v0.4's contract: temperature 0, `max_tokens` 32768, streaming (with usage, which the proxy
    /// requests from the upstream itself).
    pub fn v04(model: &str) -> Self {
        let mut c = Self::model_only(model);
        c.params
            .insert("temperature".into(), ParamRule::Exact(Value::from(0)));
        c.params
            .insert("max_tokens".into(), ParamRule::Exact(Value::from(32_768)));
        c.params
            .insert("stream".into(), ParamRule::Exact(Value::Bool(true)));
        c
    }
}

/// Limits for one role of one attempt. `None` is unlimited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Requests the role may send.
    pub max_requests: Option<u64>,
    /// Tokens the role's calls may reserve and spend.
    pub max_tokens: Option<u64>,
    /// Counted from registration; calls that would start after it are refused.
    pub max_wall_time: Option<Duration>,
}

/// What earlier sessions of the same run already used: a resumed run starts its run-wide
/// budget from here, so N sessions never spend N × the budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSeed {
    /// Tokens the budget counted in earlier sessions.
    pub tokens: u64,
    /// What earlier sessions spent, in USD.
    pub spend_usd: f64,
    /// Requests forwarded (or about to be) in earlier sessions.
    pub requests: u64,
}

/// The protocol's prices by model id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    /// Model id → its price.
    pub models: BTreeMap<String, Price>,
}

impl PriceTable {
    /// Adds (or replaces) the price of `price.model`.
    pub fn insert(&mut self, price: Price) {
        self.models.insert(price.model.clone(), price);
    }
}

/// Timeouts of the calls to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting to the upstream.
    pub connect: Duration,
    /// From sending the request to receiving the response headers.
    pub first_byte: Duration,
    /// Longest silence between two body chunks.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(300),
            idle: Duration::from_secs(300),
        }
    }
}

/// Limits on one listener's connections, so a client can exhaust only its own attempt: each
/// attempt's socket has its own connection cap, and a connection that sends its head or body too
/// slowly is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Open connections per attempt socket (and on the shared token listener); more are closed
    /// on accept.
    pub max_connections: usize,
    /// Time a connection has to send a complete request head.
    pub header_read_timeout: Duration,
    /// Time a request has to deliver its whole body once its head arrived.
    pub body_read_timeout: Duration,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            max_connections: 32,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
        }
    }
}

/// Everything a [`crate::Proxy`] starts with.
pub struct ProxyConfig {
    /// Base URL; request paths are appended (`https://api.deepseek.com` + `/v1/chat/completions`
    /// style, or a base ending in `/v1`, in which case a client's leading `/v1` is not repeated).
    pub upstream: String,
    /// The upstream's API (how requests, usage and errors look).
    pub api: ApiKind,
    /// The upstream key, injected into every forwarded call; held only in memory.
    pub key: SecretKey,
    /// Timeouts of the calls to the upstream.
    pub timeouts: Timeouts,
    /// Limits across all attempts of the run; `None` (a proxy outside a preregistered run) has
    /// none. With a budget, a model missing from [`PriceTable`] is refused.
    pub run_budget: Option<RunBudget>,
    /// Run-wide usage carried over from earlier sessions.
    pub run_seed: RunSeed,
    /// Prices of the models the contracts allow, for spend and its budget.
    pub prices: PriceTable,
    /// Where every call's record goes.
    pub sink: Arc<dyn RecordSink>,
    /// `GET /metrics` is served here (loopback).
    pub admin_listen: Option<SocketAddr>,
    /// The loopback TCP listener for token-identified attempts.
    pub tcp_listen: Option<SocketAddr>,
    /// Answers `/_eval/*` requests; without one they are refused.
    pub control: Option<Arc<dyn ControlPlane>>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Limits on every listener's connections.
    pub listener: ListenerLimits,
    /// Redacted request and response bodies are written here, named by their SHA-256.
    pub transcript_dir: Option<PathBuf>,
    /// Hand each call's redacted request and response bodies to the sink in
    /// [`crate::CallRecord::bodies`], a streamed response kept up to this many bytes (the
    /// controller's wire log). `None`: bodies are not kept.
    pub keep_bodies: Option<usize>,
    /// An explicitly configured outbound proxy; environment variables are never consulted.
    pub outbound_proxy: Option<String>,
    /// Extra root certificates (PEM) for the upstream, e.g. a test CA.
    pub extra_root_pem: Option<Vec<u8>>,
    /// TLS key pins: SHA-256 of the DER SubjectPublicKeyInfo of the upstream's leaf certificate.
    /// Non-empty: the handshake fails, before any request (and so the key) is sent, unless the
    /// server's certificate verifies as usual *and* its key is one of these. An `http://`
    /// upstream with pins is refused at start.
    pub tls_spki_sha256: Vec<[u8; 32]>,
}

impl ProxyConfig {
    /// A configuration with the defaults: no run budget, no listeners but the attempts' own, 32 MiB bodies.
    pub fn new(upstream: &str, api: ApiKind, key: SecretKey, sink: Arc<dyn RecordSink>) -> Self {
        Self {
            upstream: upstream.to_owned(),
            api,
            key,
            timeouts: Timeouts::default(),
            run_budget: None,
            run_seed: RunSeed::default(),
            prices: PriceTable::default(),
            sink,
            admin_listen: None,
            tcp_listen: None,
            control: None,
            max_body_bytes: 32 * 1024 * 1024,
            listener: ListenerLimits::default(),
            transcript_dir: None,
            keep_bodies: None,
            outbound_proxy: None,
            extra_root_pem: None,
            tls_spki_sha256: Vec::new(),
        }
    }
}

impl std::fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("upstream", &self.upstream)
            .field("api", &self.api)
            .field("key", &self.key)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

/// How an attempt reaches the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// Its own Unix socket at this path; the socket is the identity.
    Unix(PathBuf),
    /// The shared loopback TCP listener with a per-attempt bearer token the proxy issues.
    Token,
}

/// What one role of an attempt may do.
#[derive(Debug, Clone)]
pub struct RoleSpec {
    /// The role's model contract.
    pub contract: Contract,
    /// The role's limits.
    pub budget: Budget,
}

/// An attempt to register.
#[derive(Debug, Clone)]
pub struct AttemptSpec {
    /// The attempt's id (`<slot>#<n>` in a run), the records' `attempt_id`.
    pub attempt_id: String,
    /// The arm, the records' `arm`.
    pub arm: String,
    /// The value the contract's session header must carry.
    pub session_id: String,
    /// How the attempt reaches the proxy.
    pub listen: Listen,
    /// Roles the attempt may use; a role absent here is refused.
    pub roles: BTreeMap<Role, RoleSpec>,
}
