//! Running and stopping the agent's container; engine errors as fault codes.

use super::DockerExecutor;
use crate::run::AttemptReport;
use eval_runtimes::Runtime;
use std::time::Duration;

impl DockerExecutor {
    /// Ctrl-C: removes the attempt's container and lets `run_to_end` see it go and clean up.
    /// The container may not exist yet (create in flight), so sweep until the run has ended.
    pub(super) async fn stop_container<F>(&self, attempt: &str, mut run: std::pin::Pin<&mut F>)
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
}

pub(super) fn fault_pair(e: &eval_runtimes::RuntimeError) -> (String, String) {
    (
        e.fault()
            .map(|f| f.as_str().to_owned())
            .unwrap_or_else(|| "container_runtime_failure".into()),
        e.to_string(),
    )
}

pub(super) fn infra_of(e: &eval_runtimes::RuntimeError) -> AttemptReport {
    let (code, detail) = fault_pair(e);
    AttemptReport::infra(&code, detail)
}
