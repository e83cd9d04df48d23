//! The executor's artifact store, each attempt charged to a quota of its own.

use eval_evidence::artifacts::ArtifactStore;

tokio::task_local! {
    /// The running attempt's store, bounded by its quota ([`AttemptStore::scope`]).
    static ATTEMPT_STORE: ArtifactStore;
}

/// The executor's store: the run's, from which each attempt reserves its own quota
/// (`ArtifactStore::reserve_quota`) when it starts. Inside an attempt, [`AttemptStore::clone`]
/// is that attempt's quota-bounded store, so every place an attempt stores (here, grading,
/// rounds, control arms) is charged to it alone without being handed it.
pub(crate) struct AttemptStore {
    run: ArtifactStore,
    quota: u64,
}

impl AttemptStore {
    /// `run` (bounded by the run's budget), each attempt reserving `quota` bytes of it.
    pub(crate) fn new(run: ArtifactStore, quota: u64) -> Self {
        Self { run, quota }
    }

    /// The running attempt's store (the run's outside an attempt). Named `clone` on purpose:
    /// the attempt code's `self.store.clone()` gets the attempt's store.
    #[allow(
        clippy::should_implement_trait,
        reason = "returns the attempt's store, not a copy of this one"
    )]
    pub(crate) fn clone(&self) -> ArtifactStore {
        ATTEMPT_STORE
            .try_with(ArtifactStore::clone)
            .unwrap_or_else(|_| self.run.clone())
    }

    /// Runs `attempt` charged to a quota of its own, reserved now and given back (less what
    /// it stored) when it ends. `Err`: the run's budget has less than a quota left — other
    /// attempts and the wire log used it up; the caller stops the run, naming why.
    pub(crate) async fn scope<F: std::future::Future>(
        &self,
        attempt: F,
    ) -> Result<F::Output, String> {
        let store = self.run.reserve_quota(self.quota).map_err(|e| {
            format!(
                "the run's artifact budget (budgets.artifacts.max_bytes) cannot reserve this \
                 attempt's quota of {} bytes: {e}",
                self.quota
            )
        })?;
        Ok(ATTEMPT_STORE.scope(store, attempt).await)
    }
}
