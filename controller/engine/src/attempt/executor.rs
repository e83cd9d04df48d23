//! What the executor is and holds, apart from what it does: the rooms of an attempt (`prepare`,
//! `container`, `rounds`, `grade`, `archive`, …) each add their methods to [`DockerExecutor`] and
//! import it from here, so none of them imports the module that calls them (no circle of files).

use super::bridge::Bridge;
use super::classify::Observations;
use super::control::Control;
use super::sockets::SocketRoot;
use super::store::AttemptStore;
use eval_protocols::TaskBundle;
use eval_proxy::{ProxyHandle, RoleSpec};
use eval_runtimes::{DockerRuntime, ImageId, ImageSpec, LoadedDef};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// Why the executor could not be set up; each kind's exit status is decided in
/// `exit::setup_status`.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A runtime definition (`runtime.toml`, by its project-relative path) does not load.
    #[error("{path}: {source}")]
    Definition {
        path: String,
        #[source]
        source: Box<eval_runtimes::definition::DefinitionError>,
    },
    /// An arm's image could not be built or its attestation computed.
    #[error("arm {arm}: {source}")]
    ArmImage {
        arm: String,
        #[source]
        source: Box<eval_runtimes::RuntimeError>,
    },
    /// The arm's files build another image than the freeze recorded.
    #[error("arm {arm}: its files build image {built}, the freeze recorded {frozen}")]
    ImageDrift {
        arm: String,
        built: String,
        frozen: String,
    },
    #[error("arm {0} was not admitted (no frozen image)")]
    NotAdmitted(String),
    #[error("the protocol has no [models.agent]")]
    NoAgentModel,
    #[error("{0}")]
    StaticBinary(#[from] eval_runtimes::static_bins::StaticBinaryError),
    #[error("{path}: {source}")]
    WorkDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the attempt sockets' directory: {0}")]
    Sockets(std::io::Error),
}

/// What the attempt's rooms observed (for [`classify`]) and noted (for an `attempt_note`).
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) obs: Observations,
    pub(crate) notes: Vec<String>,
}

impl Seen {
    /// A file the container left behind could not be read: a host failure is the host's fault,
    /// anything else (a link, a FIFO, too large, a bad path) is noted and left to the outcome.
    pub(crate) fn leftover(&mut self, what: &str, e: &eval_evidence::leftovers::LeftoverError) {
        if e.is_host_fault() {
            self.obs.leftover_host_fault = Some(format!("{what}: {e}"));
        } else {
            self.notes.push(format!("{what}: {e}"));
        }
    }
}

/// Runs attempts in Docker containers through the proxy.
pub struct DockerExecutor {
    pub(super) rt: Arc<DockerRuntime>,
    pub(super) proxy: ProxyHandle,
    pub(super) control: Arc<Control>,
    pub(super) bridge: Bridge,
    /// The run's store; each attempt is charged to a quota of its own (`archive::AttemptStore`).
    pub(super) store: AttemptStore,
    pub(super) root: PathBuf,
    /// The verified copies of the task bundles (`run::inputs`): the only place attempts read
    /// task files from.
    pub(super) inputs: crate::inputs::TaskInputs,
    pub(super) work: PathBuf,
    pub(super) protocol: String,
    pub(super) identity: String,
    pub(super) arms: BTreeMap<String, Arc<ArmImage>>,
    pub(super) graders: BTreeMap<String, Arc<ArmImage>>,
    pub(super) tasks: BTreeMap<(String, String), TaskBundle>,
    pub(super) agent: RoleSpec,
    /// The `oracle` role and its request template, when the protocol names an oracle model.
    pub(super) oracle: Option<(RoleSpec, Value, bool)>,
    pub(super) max_tokens: u64,
    pub(super) wall_seconds: u64,
    pub(super) max_oracle: BTreeMap<String, u32>,
    /// Per suite: how far a model oracle's own records are trusted.
    pub(super) oracle_guard: BTreeMap<String, eval_protocols::protocol::OracleGuard>,
    pub(super) forbidden: Vec<u8>,
    pub(super) shim: PathBuf,
    pub(super) extra_labels: BTreeMap<String, String>,
    /// The state directory's id (`run::owner`).
    pub(super) state_id: String,
    /// The run's private directory of attempt sockets.
    pub(super) sockets: SocketRoot,
    /// Per suite, the protocol's own exploits (name → project-relative directory).
    pub(super) custom_exploits: BTreeMap<String, BTreeMap<String, String>>,
    /// What the protocol requires the agent's containers to run under.
    pub(super) isolation: eval_protocols::protocol::Isolation,
}

/// An arm's image: its definition and spec, the id its freeze recorded and the attestation its
/// shim must report; built once per session.
pub(super) struct ArmImage {
    pub(super) def: LoadedDef,
    pub(super) spec: ImageSpec,
    /// The image id the freeze recorded (`None`: the freeze could not resolve it).
    pub(super) frozen_image: Option<ImageId>,
    pub(super) expected: BTreeMap<String, Option<String>>,
    /// Set once the image is ready; a failure is never kept, so the next attempt (or grading)
    /// tries again instead of failing at once for the rest of the session.
    pub(super) id: OnceCell<ImageId>,
}

pub(super) fn abs(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Runs blocking work (file trees, archives, fsync) on the blocking pool and waits for it, so
/// the async runtime's workers — which serve every running attempt's proxy — are never held by
/// it. `Err` only when the work itself panicked or was cancelled.
pub(crate) async fn off_runtime<T, F>(f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking work of the attempt did not finish: {e}"))
}

/// `dir` is a direct child of `work` reached by a plain name (no `..`, no absolute jump).
pub(super) fn is_attempt_dir(work: &Path, dir: &Path) -> bool {
    let mut rest = match dir.strip_prefix(work) {
        Ok(r) => r.components(),
        Err(_) => return false,
    };
    matches!(
        (rest.next(), rest.next()),
        (Some(std::path::Component::Normal(_)), None)
    )
}
