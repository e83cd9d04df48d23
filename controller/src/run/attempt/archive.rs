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
    /// What the archive recorded other than as a plain entry (links to odd places, FIFOs,
    /// non-UTF-8 names, entries over a cap) is noted; the archive itself holds every note.
    pub(super) fn archive(&self, workspace: &Path, seen: &mut Seen, report: &mut AttemptReport) {
        match self.store.put_dir(workspace) {
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
}

/// Archive notes copied into the ledger at most (all of them are in the archive itself).
const MAX_ARCHIVE_NOTES: usize = 20;

/// A store failure: the host's when `is_host_fault` (its own disk, or a host failure reading the
/// tree), otherwise a note — nothing the agent left behind makes it an infrastructure fault.
fn store_failed(what: &str, e: &ArtifactError, seen: &mut Seen) {
    let storing = format!("storing {what}");
    match e {
        // The store's own write: classified by its errno (ENOSPC/EDQUOT/EIO: capacity; ENOMEM,
        // EMFILE, ENFILE: `controller_error`, not rerun — see "Classifying an attempt").
        ArtifactError::Io { source, .. } if e.is_host_fault() => {
            seen.obs.host_io = Some(HostIo::of(storing, source));
        }
        ArtifactError::Leftover { source, .. } if e.is_host_fault() => {
            seen.leftover(&storing, source);
        }
        _ => seen.notes.push(format!("{storing}: {e}")),
    }
}
