//! The credential-isolating, metering model proxy.
//!
//! Owns: the only road from an agent to the model. It serves each attempt on its own Unix socket
//! (the socket is the identity) or, for local use, on loopback TCP with a per-attempt token;
//! forwards OpenAI-compatible Chat Completions and Anthropic Messages calls (streaming and not) to
//! one upstream with the real key injected; enforces each role's model contract and budgets;
//! meters every call from the upstream's own usage; and emits one [`CallRecord`] per call through
//! a [`RecordSink`].
//!
//! Must never: let the key reach a client, a record, a log line or an error message; forward a
//! client's own credential; pick up an outbound proxy from the environment; retry a call (a retry
//! changes what was spent); buffer a whole stream before forwarding; rewrite a request beyond the
//! changes it records; panic on anything a client or upstream sends.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::disallowed_methods))] // clippy.toml: production code only

pub mod account;
mod budget;
mod call;
mod config;
mod contract;
mod control;
mod digest;
mod errors;
mod metrics;
mod record;
mod request;
mod role;
mod secret;
mod server;
pub mod sse;
mod state;
pub mod tls_pin;
mod upstream;
mod usage;
pub mod wire;

pub use budget::{ProviderFault, RoleMeter};
pub use config::{
    ApiKind, AttemptSpec, Budget, Contract, Listen, ListenerLimits, ParamRule, Price, PriceTable,
    ProxyConfig, Role, RoleSpec, RunBudget, RunSeed, Timeouts,
};
pub use control::{ControlFuture, ControlPlane};
pub use errors::ProxyError;
pub use record::{
    CallBodies, CallOutcome, CallRecord, CallStarted, Change, JsonlSink, MemorySink, NullSink,
    RecordError, RecordSink, StartFuture,
};
pub use secret::{Redactor, SecretError, SecretKey, StreamRedactor};
pub use server::{
    AttemptMeter, AttemptRegistration, ConnectionMeter, OracleReply, Proxy, ProxyHandle,
};
pub use usage::{StreamUsage, Usage};
