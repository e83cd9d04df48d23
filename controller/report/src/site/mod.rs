//! `eval report --format site --out DIR`: the report as a static, self-contained site — the
//! verdict and gates first, a forest plot per comparison, per suite a task × arm table, per task
//! the arms' attempts side by side, and one page per attempt (its calls, grader checks,
//! artifacts).
//!
//! Its numbers are the report's: the pages are drawn from the [`Report`] `eval report` has just
//! built and recorded and from the [`RunData`] it was built from, never recomputed. What a page
//! shows about one attempt beyond that comes from the same verified ledger prefix the report read
//! (re-read and re-verified here, its head compared with the report's) and from the artifact store
//! (each artifact re-hashed as it is read). Everything an agent, a model or a grader produced is
//! HTML-escaped: the agent is the adversary, and the site has no script for it to reach.

pub mod detail;
mod forest;
#[doc(hidden)] // public for the controller's site tests (src/report_tests/site.rs), not an API
pub mod html;
mod names;
mod outcome;

use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::{self, Digest, LedgerReader};
use eval_evidence::report::{Report, RunData};
use std::path::{Path, PathBuf};

pub use names::{Names, safe_name};
pub use outcome::{MARKER, SiteError, SiteSummary};

/// Writes the site of `report` (built from `data`, the run of `data.matrix` in `state`) into
/// `out`: into a fresh sibling directory first, which then replaces `out` (a directory that is
/// absent, empty, or an earlier site), so a failure half-way leaves `out` as it was.
pub fn write(
    state: &Path,
    data: &RunData,
    report: &Report,
    out: &Path,
) -> Result<SiteSummary, SiteError> {
    check_out(out)?;
    let ledger_path = eval_runlog::layout::ledger_path(state, &data.matrix);
    let entries = verified_prefix(&ledger_path, data)?;
    let store_dir = eval_runlog::layout::artifacts_dir(state, &data.matrix);
    let store = if store_dir.is_dir() {
        Some(
            ArtifactStore::open(&store_dir).map_err(|source| SiteError::Artifact {
                attempt: String::new(),
                name: "store".into(),
                digest: store_dir.display().to_string(),
                source: Box::new(source),
            })?,
        )
    } else {
        None
    };
    let details = detail::collect(&entries);
    drop(entries);
    let staging = staging_dir(out);
    let _ = std::fs::remove_dir_all(&staging);
    let summary = html::Site::new(data, report, &details, store.as_ref())
        .write_all(&staging)
        .inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&staging);
        })?;
    replace_dir(&staging, out)?;
    Ok(summary)
}

/// `out` may be absent, an empty directory, or a site written earlier (it has [`MARKER`]).
fn check_out(out: &Path) -> Result<(), SiteError> {
    match std::fs::read_dir(out) {
        Ok(mut items) => {
            if items.next().is_none() || out.join(MARKER).is_file() {
                Ok(())
            } else {
                Err(SiteError::NotASite(out.to_path_buf()))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(SiteError::NotASite(out.to_path_buf()))
        }
        Err(source) => Err(SiteError::Write {
            path: out.to_path_buf(),
            source,
        }),
    }
}

fn staging_dir(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "site".into());
    out.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Puts the finished `staging` at `out`: an earlier site (or empty directory) there is moved
/// aside first and removed after.
fn replace_dir(staging: &Path, out: &Path) -> Result<(), SiteError> {
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SiteError::Write { path, source }
    };
    let old = out.with_file_name(format!(
        ".{}.old-{}",
        out.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let had_old = out.exists();
    if had_old {
        std::fs::rename(out, &old).map_err(fail(out))?;
    }
    if let Err(e) = std::fs::rename(staging, out) {
        if had_old {
            let _ = std::fs::rename(&old, out);
        }
        let _ = std::fs::remove_dir_all(staging);
        return Err(fail(out)(e));
    }
    if had_old {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(())
}

/// The ledger's entries up to the head the report was computed from, re-verified: the chain must
/// hold and reach exactly that head (a `report` entry appended since lies beyond it).
fn verified_prefix(path: &Path, data: &RunData) -> Result<Vec<ledger::Entry>, SiteError> {
    let changed = || SiteError::LedgerChanged {
        path: path.to_path_buf(),
        verified: format!("{}:{}", data.ledger_head.seq, data.ledger_head.hash),
    };
    let mut all = LedgerReader::open(path).and_then(|r| r.entries())?;
    all.truncate(data.ledger_head.seq as usize);
    let expect = Digest::parse(&data.ledger_head.hash).ok_or_else(changed)?;
    let v = ledger::verify_entries(&all, None);
    if v.error.is_some() || v.head.seq != data.ledger_head.seq || v.head.hash != expect {
        return Err(changed());
    }
    Ok(all)
}
