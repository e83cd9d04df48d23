//! Running and stopping the agent's container; engine errors as fault codes.

use super::classify::End;
use super::executor::DockerExecutor;
use super::prepare::Prepared;
use crate::AttemptSpec;
use eval_protocols::TaskBundle;
use eval_runtimes::policy::RoleMounts;
use eval_runtimes::{ImageConfig, ImageId, RunEnd, Runtime, RuntimeDef, RuntimeError, WaitOutcome};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The most of the agent's log kept as an artifact.
const AGENT_LOG_BYTES: usize = 256 * 1024;

impl DockerExecutor {
    /// The task's time limit, within the protocol's wall-time budget.
    pub(super) fn agent_timeout(&self, task: &TaskBundle) -> Duration {
        Duration::from_secs(task.spec.timeout_seconds.min(self.wall_seconds).max(1))
    }

    /// Runs the agent's container to its end (`Ok(None)`: cancelled and removed) and says how
    /// long it ran: from its start to its exit when it ended on its own, else the time spent
    /// here.
    pub(super) async fn run_agent(
        &self,
        spec: &AttemptSpec,
        cancel: &CancellationToken,
        (def, image_config): (&RuntimeDef, &ImageConfig),
        task: &TaskBundle,
        image: &ImageId,
        p: &Prepared,
    ) -> (Result<Option<RunEnd>, RuntimeError>, f64) {
        let mounts = RoleMounts::Agent {
            workspace: p.workspace.clone(),
            prompt: p.prompt.clone(),
            socket: p.socket.clone(),
            shim: self.shim.clone(),
            state: p.state.clone(),
        };
        let forbidden: Vec<&[u8]> = if self.forbidden.is_empty() {
            vec![]
        } else {
            vec![&self.forbidden[..]]
        };
        let t0 = std::time::Instant::now();
        let mut cspec = match eval_runtimes::container_spec(
            def,
            image,
            image_config,
            &self.facts(spec),
            &mounts,
        ) {
            Ok(c) => c,
            Err(e) => return (Err(e), 0.0),
        };
        if self.isolation == eval_protocols::protocol::Isolation::Gvisor {
            eval_runtimes::policy::require_gvisor(&mut cspec);
        }
        let mut limit = self.agent_timeout(task);
        if task.spec.is_multi_round() {
            let timeouts: Vec<u64> = (1..=task.spec.rounds.len())
                .map(|k| task.spec.round_timeout(k).min(self.wall_seconds).max(1))
                .collect();
            if let Err(e) = eval_runtimes::policy::with_rounds(&mut cspec, def, &timeouts) {
                return (Err(e), 0.0);
            }
            // The container is frozen while each round is graded: its limit gives each round
            // its grader's time on top of the agent's.
            limit += super::grade::GRADER_TIMEOUT * task.spec.rounds.len() as u32;
        }
        let run =
            eval_runtimes::run_to_end(self.rt.as_ref(), &cspec, &forbidden, limit, AGENT_LOG_BYTES);
        tokio::pin!(run);
        let finished = tokio::select! {
            r = &mut run => Some(r),
            _ = cancel.cancelled() => None,
        };
        let ran = match finished {
            Some(r) => r.map(Some),
            None => {
                self.stop_container(&spec.attempt, run).await;
                Ok(None)
            }
        };
        let seconds = match &ran {
            Ok(Some(end)) => end.elapsed.as_secs_f64(),
            _ => t0.elapsed().as_secs_f64(),
        };
        (ran, seconds)
    }

    /// Ctrl-C: removes the attempt's container and lets `run_to_end` see it go and clean up.
    /// The container may not exist yet (create in flight), so sweep until the run has ended.
    pub(super) async fn stop_container<F>(&self, attempt: &str, mut run: std::pin::Pin<&mut F>)
    where
        F: std::future::Future,
    {
        let label = format!("{}={attempt}", eval_runtimes::policy::LABEL_ATTEMPT);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Err(e) = self.rt.sweep(&label).await {
                tracing::warn!("removing the containers of {attempt}: {e}");
            }
            match tokio::time::timeout(Duration::from_millis(300), run.as_mut()).await {
                Ok(_) => break,
                Err(_) if std::time::Instant::now() < deadline => continue,
                Err(_) => break,
            }
        }
        if let Err(e) = self.rt.sweep(&label).await {
            tracing::warn!("removing the containers of {attempt}: {e}");
        }
    }
}

/// How the container ended, for [`super::classify`].
pub(super) fn end_of(outcome: &WaitOutcome, timeout: Duration) -> End {
    match outcome {
        WaitOutcome::Exited { code } => End::Exited(*code),
        WaitOutcome::TimedOut => End::TimedOut {
            after_seconds: timeout.as_secs(),
        },
    }
}
