//! The `Runtime` trait (create, start, wait with timeout, kill, logs, inspect, remove, sweep;
//! deliberately no `exec`) and the steps every caller needs on top of it.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bollard::models::ContainerInspectResponse;

use crate::fault::RuntimeError;
use crate::image::{ImageId, ImageSpec};
use crate::image_config::ImageConfig;
use crate::policy::{ContainerSpec, check};

/// The boxed future every [`Runtime`] method returns (boxed so the trait stays object safe).
pub type RtFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, RuntimeError>> + Send + 'a>>;

/// A created container's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerId(pub String);

/// How a wait for a container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The container stopped by itself.
    Exited {
        /// Its exit status as the engine reports it (128 + n after signal n).
        code: i64,
    },
    /// The timeout passed first; the container is still running.
    TimedOut,
}

/// A container engine. Object safe, so the controller can hold `Arc<dyn Runtime>`.
pub trait Runtime: Send + Sync {
    /// Loads the image unless the engine already has its id; returns the id.
    fn ensure_image<'a>(&'a self, spec: &'a ImageSpec) -> RtFuture<'a, ImageId>;
    /// Creates (does not start) a container exactly as `spec` says; callers use [`create_checked`],
    /// which also verifies the result.
    fn create<'a>(&'a self, spec: &'a ContainerSpec) -> RtFuture<'a, ContainerId>;
    /// Starts a created container.
    fn start<'a>(&'a self, id: &'a ContainerId) -> RtFuture<'a, ()>;
    /// Waits for the container to stop, at most `timeout`; it keeps running on `TimedOut`.
    fn wait<'a>(&'a self, id: &'a ContainerId, timeout: Duration) -> RtFuture<'a, WaitOutcome>;
    /// SIGKILL; a container that is not running is not an error.
    fn kill<'a>(&'a self, id: &'a ContainerId) -> RtFuture<'a, ()>;
    /// stdout and stderr interleaved, at most `max_bytes` (the tail is cut).
    fn logs<'a>(&'a self, id: &'a ContainerId, max_bytes: usize) -> RtFuture<'a, Vec<u8>>;
    /// The engine's full description of a container (what the policy check compares).
    fn inspect<'a>(&'a self, id: &'a ContainerId) -> RtFuture<'a, ContainerInspectResponse>;
    /// Removes (force); a container already gone is not an error.
    fn remove<'a>(&'a self, id: &'a ContainerId) -> RtFuture<'a, ()>;
    /// Removes every container carrying `label` (`key` or `key=value`); returns how many.
    fn sweep<'a>(&'a self, label: &'a str) -> RtFuture<'a, usize>;
    /// The image's own configuration (env, working directory, user, entrypoint, cmd), which
    /// `policy::container_spec` starts from.
    fn inspect_image<'a>(&'a self, id: &'a ImageId) -> RtFuture<'a, ImageConfig>;
    /// Freezes (`paused`) every running container carrying `label`, or thaws every paused one:
    /// a frozen container's processes run no instruction until thawed (the cgroup freezer), so
    /// its files hold still while a round is graded. Returns how many containers it changed.
    fn pause_labelled<'a>(&'a self, label: &'a str, paused: bool) -> RtFuture<'a, usize>;
}

/// Create, then inspect and compare with the policy; a container that differs is removed and
/// never started (`policy_violation`).
pub async fn create_checked(
    rt: &dyn Runtime,
    spec: &ContainerSpec,
    forbidden: &[&[u8]],
) -> Result<ContainerId, RuntimeError> {
    let id = rt.create(spec).await?;
    let verdict = match rt.inspect(&id).await {
        Ok(inspect) => check(&inspect, &spec.expected, forbidden),
        Err(e) => Err(e),
    };
    if let Err(e) = verdict {
        let _ = rt.remove(&id).await;
        return Err(e);
    }
    Ok(id)
}

/// How a container run by `run_to_end` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// Exit or timeout (a timed-out container was killed).
    pub outcome: WaitOutcome,
    /// stdout and stderr, interleaved, cut to the caller's `max_log_bytes` (empty when that is 0).
    pub logs: Vec<u8>,
    /// From the start request to the end of the wait (exit, or the timeout): the container's
    /// own run, without create, the policy check, logs or removal.
    pub elapsed: Duration,
    /// When the start request was sent (preparation is measured up to here).
    pub started: Instant,
}

/// create (checked) → start → wait (timeout: kill) → logs → remove. The container is removed on
/// every path, errors included.
pub async fn run_to_end(
    rt: &dyn Runtime,
    spec: &ContainerSpec,
    forbidden: &[&[u8]],
    timeout: Duration,
    max_log_bytes: usize,
) -> Result<RunEnd, RuntimeError> {
    let id = create_checked(rt, spec, forbidden).await?;
    let mut ran = Duration::ZERO;
    let started = Instant::now();
    let result = async {
        rt.start(&id).await?;
        let outcome = rt.wait(&id, timeout).await;
        ran = started.elapsed();
        let outcome = outcome?;
        if outcome == WaitOutcome::TimedOut {
            rt.kill(&id).await?;
        }
        let logs = if max_log_bytes > 0 {
            rt.logs(&id, max_log_bytes).await?
        } else {
            Vec::new()
        };
        Ok::<_, RuntimeError>((outcome, logs))
    }
    .await;
    let removed = rt.remove(&id).await;
    let (outcome, logs) = result?;
    removed?;
    Ok(RunEnd {
        outcome,
        logs,
        elapsed: ran,
        started,
    })
}
