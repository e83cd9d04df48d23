//! The controller's side channel on an attempt's socket: requests under `/_eval/` (the shim's
//! attestation, the agent's clarifying questions) go to a [`ControlPlane`], never upstream, and are
//! never metered as model calls.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;

/// What [`ControlPlane::handle`] returns: the status and JSON body to answer with.
pub type ControlFuture<'a> = Pin<Box<dyn Future<Output = (StatusCode, Value)> + Send + 'a>>;

/// Implemented by the controller. `path` is the full request path (e.g. `/_eval/attest`); the
/// attempt id is the one the socket (or token) identifies, never one the client claims.
/// Write it as `fn handle<'a>(..) -> ControlFuture<'a> { Box::pin(async move { .. }) }`.
pub trait ControlPlane: Send + Sync {
    /// Answers one `/_eval/*` request of `attempt_id`.
    fn handle<'a>(&'a self, attempt_id: &'a str, path: &'a str, body: Bytes) -> ControlFuture<'a>;
}
