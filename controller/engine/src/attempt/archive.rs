//! Storing what the attempt produced: the workspace archive and byte artifacts (logs, metrics,
//! the grader's score). A failure of the store's own disk is the host's fault; anything else is
//! a recorded note — never silently dropped, never an infrastructure fault of the agent's making.

use super::classify::HostIo;
use super::executor::{DockerExecutor, Seen};
use crate::AttemptReport;
use eval_evidence::artifacts::{ArtifactError, ArtifactStore};
use std::path::Path;

impl DockerExecutor {
    /// Stores `bytes`; `None` (with a note or a host fault in `seen`) when the store failed.
    pub(super) fn store_bytes(&self, what: &str, bytes: &[u8], seen: &mut Seen) -> Option<String> {
        store_bytes(&self.store.clone(), what, bytes, seen)
    }
}

/// Stores `bytes` in `store`; `None` (with a note or a host fault in `seen`) when it failed.
pub(super) fn store_bytes(
    store: &ArtifactStore,
    what: &str,
    bytes: &[u8],
    seen: &mut Seen,
) -> Option<String> {
    match store.put_bytes(bytes) {
        Ok(d) => Some(d.to_string()),
        Err(e) => {
            store_failed(what, &e, seen);
            None
        }
    }
}

/// Archives the workspace as the agent left it (after the harness's bookkeeping is gone).
/// What the archive recorded other than as a plain entry (links to odd places, FIFOs,
/// non-UTF-8 names, entries over a cap) is noted; the archive itself holds every note. Reads,
/// hashes and fsyncs up to the archive's cap: called off the async runtime.
pub(super) fn archive(
    store: &ArtifactStore,
    workspace: &Path,
    seen: &mut Seen,
    report: &mut AttemptReport,
) {
    match store.put_dir(workspace) {
        Ok(summary) => {
            report.artifacts.workspace = Some(summary.digest.to_string());
            let n = summary.notes.len();
            seen.notes.extend(
                summary
                    .notes
                    .into_iter()
                    .take(MAX_ARCHIVE_NOTES)
                    .map(|note| format!("workspace archive: {note}")),
            );
            if n > MAX_ARCHIVE_NOTES {
                seen.notes.push(format!(
                    "workspace archive: {} more notes (in the archive's notes header)",
                    n - MAX_ARCHIVE_NOTES
                ));
            }
        }
        Err(e) => store_failed("the workspace archive", &e, seen),
    }
}

/// Archive notes copied into the ledger at most (all of them are in the archive itself).
const MAX_ARCHIVE_NOTES: usize = 20;

/// A store failure. Only reading the agent's tree ([`ArtifactError::Leftover`]) can be the
/// agent's doing (a note unless it is a host failure); every other failure is the store's own —
/// the controller's write — and so the host's, whatever the errno ("Classifying an attempt",
/// row 1: ENOSPC/EDQUOT/EIO are `filesystem_capacity`, EACCES, EROFS and the rest
/// `controller_error`), never the agent's outcome.
fn store_failed(what: &str, e: &ArtifactError, seen: &mut Seen) {
    let storing = format!("storing {what}");
    match e {
        ArtifactError::Leftover { source, .. } => seen.leftover(&storing, source),
        // The run's bound, reached by what this attempt left: its outcome, not the host's.
        ArtifactError::OverBudget { .. } => {
            if seen.obs.over_budget.is_none() {
                seen.obs.over_budget = Some(format!("{storing}: {e}"));
            }
        }
        ArtifactError::Io { source, .. } => {
            seen.obs.host_io = Some(HostIo::of(storing, source));
        }
        other => {
            let e = std::io::Error::other(other.to_string());
            seen.obs.host_io = Some(HostIo::of(format!("{storing}: {other}"), &e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attempt::classify::classify;
    use crate::attempt::store::AttemptStore;
    use eval_core::fault::FaultCode;
    use eval_core::outcome::Outcome;

    fn io(errno: i32) -> ArtifactError {
        ArtifactError::Io {
            path: "/state/demo/artifacts/tmp/1.2".into(),
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    fn classified(e: &ArtifactError) -> (Seen, crate::attempt::classify::Classification) {
        let mut seen = Seen::default();
        store_failed("the agent log", e, &mut seen);
        let c = classify(&seen.obs);
        (seen, c)
    }

    /// Issue 33 item 9, as reproduced: one attempt (the native arm's) and the wire log write far
    /// more than a share, while two other attempts run beside it. Only the writer is charged
    /// (its rule 14); the others store all their quota, from the async code and from blocking
    /// work alike; once the budget cannot cover another quota, the attempt is refused up front,
    /// naming the budget (the executor then stops the run).
    #[tokio::test]
    async fn an_attempt_writing_past_its_share_never_makes_another_attempt_an_agent_error() {
        let tmp = tempfile::tempdir().unwrap();
        let run = ArtifactStore::open(tmp.path())
            .unwrap()
            .with_budget(40_000)
            .unwrap();
        let store = AttemptStore::new(run.clone(), 10_000);
        let flood = async {
            let mut seen = Seen::default();
            for i in 0..8u8 {
                store_bytes(&store.clone(), "the agent's log", &[i; 5000], &mut seen);
            }
            classify(&seen.obs)
        };
        let (store, tmp) = (&store, &tmp);
        let quiet = |fill: u8| async move {
            let mut seen = Seen::default();
            store_bytes(&store.clone(), "the grader's log", &[fill; 4000], &mut seen);
            tokio::task::yield_now().await;
            // As `after_agent` archives: the store is taken here, used off the runtime.
            let s = store.clone();
            let ws = tmp.path().join(format!("ws{fill}"));
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::write(ws.join("f"), [fill; 64]).unwrap();
            let (seen, left) = crate::attempt::off_runtime(move || {
                let mut seen = seen;
                let mut report = AttemptReport::default();
                archive(&s, &ws, &mut seen, &mut report);
                let left = s.quota().map(|(max, used)| max - used).unwrap();
                store_bytes(&s, "the metrics", &vec![fill; left as usize], &mut seen);
                (seen, s.quota())
            })
            .await
            .unwrap();
            (classify(&seen.obs), left)
        };
        // The wire log writes outside any attempt: the run's unreserved rest.
        run.put_bytes(&[9u8; 9000]).unwrap();
        let (flooded, a, b) = tokio::join!(
            async { store.scope(flood).await.unwrap() },
            async { store.scope(quiet(1)).await.unwrap() },
            async { store.scope(quiet(2)).await.unwrap() },
        );
        assert_eq!(flooded.outcome, Outcome::AgentError, "{flooded:?}");
        assert!(
            flooded
                .detail
                .as_deref()
                .unwrap_or("")
                .contains("this attempt's artifact quota"),
            "{flooded:?}"
        );
        for (c, quota) in [a, b] {
            assert_ne!(c.outcome, Outcome::AgentError, "{c:?}");
            assert_eq!(c.infra_fault, None, "{c:?}");
            assert_eq!(quota, Some((10_000, 10_000)));
        }
        // Everything ended: 3 × 10000 stored by the attempts, 9000 by the wire log.
        assert_eq!(run.budget(), Some((40_000, 39_000)));
        // Outside an attempt the executor's store is the run's own.
        assert_eq!(store.clone().quota(), None);
        let refused = store.scope(async {}).await.unwrap_err();
        assert!(refused.contains("budgets.artifacts.max_bytes"), "{refused}");
        assert!(refused.contains("quota of 10000 bytes"), "{refused}");
        assert_eq!(run.budget(), Some((40_000, 39_000)));
    }

    #[test]
    fn the_stores_own_write_failing_is_the_hosts_fault_whatever_the_errno() {
        for (errno, code) in [
            (28, FaultCode::FilesystemCapacity), // ENOSPC
            (5, FaultCode::FilesystemCapacity),  // EIO
            (13, FaultCode::ControllerError),    // EACCES
            (30, FaultCode::ControllerError),    // EROFS
        ] {
            let (seen, c) = classified(&io(errno));
            assert!(seen.notes.is_empty(), "errno {errno}: {:?}", seen.notes);
            assert_eq!(c.outcome, Outcome::InfraFault, "errno {errno}");
            assert_eq!(c.infra_fault, Some(code), "errno {errno}");
        }
        let (seen, c) = classified(&ArtifactError::Unsupported {
            path: "/state/demo/artifacts/tmp".into(),
            reason: "could not create a temporary file".into(),
        });
        assert!(seen.notes.is_empty(), "{:?}", seen.notes);
        assert_eq!(c.infra_fault, Some(FaultCode::ControllerError));
    }
}
