//! Storing what the attempt produced: the workspace archive and byte artifacts (logs, metrics,
//! the grader's score). A failure of the store's own disk is the host's fault; anything else is
//! a recorded note — never silently dropped, never an infrastructure fault of the agent's making.

use super::classify::HostIo;
use super::{DockerExecutor, Seen};
use crate::run::AttemptReport;
use eval_evidence::artifacts::ArtifactError;
use std::path::Path;

impl DockerExecutor {
    /// Stores `bytes`; `None` (with a note or a host fault in `seen`) when the store failed.
    pub(super) fn store_bytes(&self, what: &str, bytes: &[u8], seen: &mut Seen) -> Option<String> {
        match self.store.put_bytes(bytes) {
            Ok(d) => Some(d.to_string()),
            Err(e) => {
                store_failed(what, &e, seen);
                None
            }
        }
    }

    /// Archives the workspace as the agent left it (after the harness's bookkeeping is gone).
    pub(super) fn archive(&self, workspace: &Path, seen: &mut Seen, report: &mut AttemptReport) {
        match self.store.put_dir(workspace) {
            Ok(d) => report.artifacts.workspace = Some(d.to_string()),
            Err(e) => store_failed("the workspace archive", &e, seen),
        }
    }
}

fn store_failed(what: &str, e: &ArtifactError, seen: &mut Seen) {
    let storing = format!("storing {what}");
    match e {
        ArtifactError::Io { source, .. } if HostIo::of(&storing, source).is_storage_fault() => {
            seen.obs.host_io = Some(HostIo::of(storing, source));
        }
        _ => seen.notes.push(format!("{storing}: {e}")),
    }
}
