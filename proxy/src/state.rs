//! What the proxy's tasks share: the run-wide state and each registered attempt. Apart from the
//! server (`server.rs`, which registers attempts and dispatches to `call`) so that a call reads
//! them without importing the server that calls it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::{RoleState, RunLedger};
use crate::config::{ApiKind, Contract, Price, Role};
use crate::control::ControlPlane;
use crate::metrics::Metrics;
use crate::record::RecordSink;
use crate::secret::{Redactor, SecretKey};

pub(crate) struct RoleEntry {
    pub contract: Contract,
    pub state: Mutex<RoleState>,
}

pub(crate) struct Attempt {
    pub id: String,
    pub arm: String,
    pub session_id: String,
    pub started: Instant,
    pub roles: BTreeMap<Role, RoleEntry>,
    pub seq: AtomicU64,
    pub closed: AtomicBool,
    /// Cancelled when a closing attempt's grace runs out: running calls abort their upstream
    /// request and record themselves as cut, and the socket's connections are dropped.
    pub cut: CancellationToken,
    /// Every call of the attempt (its task, and a stream's pump wherever it lives) holds a
    /// token of this tracker until its record is delivered.
    pub calls: TaskTracker,
    pub conns: ConnCounters,
    pub stop: CancellationToken,
    pub socket: Option<PathBuf>,
    pub token_digest: Option<[u8; 32]>,
}

#[derive(Default)]
pub(crate) struct ConnCounters {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub header_timeouts: AtomicU64,
}

pub(crate) struct Shared {
    pub upstream: String,
    pub api: ApiKind,
    pub key: SecretKey,
    pub redactor: Redactor,
    pub timeouts: crate::config::Timeouts,
    pub prices: BTreeMap<String, Price>,
    pub max_body: usize,
    pub listener: crate::config::ListenerLimits,
    pub transcript_dir: Option<PathBuf>,
    pub keep_bodies: Option<usize>,
    pub client: reqwest::Client,
    /// The streamed calls' client (`crate::upstream`), unless an outbound proxy is configured
    /// (then reqwest carries every call).
    pub stream_client: Option<Arc<crate::upstream::StreamClient>>,
    pub sink: Arc<dyn RecordSink>,
    pub control: Option<Arc<dyn ControlPlane>>,
    pub run: RunLedger,
    pub metrics: Metrics,
    pub tracker: TaskTracker,
    pub cancel: CancellationToken,
    pub attempts: RwLock<HashMap<String, Arc<Attempt>>>,
    pub tokens: RwLock<HashMap<[u8; 32], String>>,
    /// The shared token listener's connections (not any one attempt's: the token is only read
    /// from a request, after the connection was accepted).
    pub token_conns: ConnCounters,
}

impl Shared {
    pub fn attempt(&self, id: &str) -> Option<Arc<Attempt>> {
        let map = self.attempts.read().unwrap_or_else(|p| p.into_inner());
        map.get(id).cloned()
    }

    pub fn attempt_by_token(&self, token: &str) -> Option<Arc<Attempt>> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let id = {
            let tokens = self.tokens.read().unwrap_or_else(|p| p.into_inner());
            tokens.get(&digest).cloned()
        }?;
        self.attempt(&id)
    }
}
