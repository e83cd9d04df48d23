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

use eval_evidence::artifacts::{ArtifactError, ArtifactStore};
use eval_evidence::ledger::{self, Digest, LedgerReader};
use eval_evidence::report::{Report, RunData};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file that marks a directory as a site `eval` wrote (so `--out` never replaces anything
/// else).
pub const MARKER: &str = "eval-site.json";

/// Why a site could not be written; each kind's exit status is decided in
/// `exit::report_status` (through `ReportCmdError::Site`).
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error(
        "--out {0}: the directory exists, is not empty and is not a site eval wrote (no {MARKER}); name a new or empty directory"
    )]
    NotASite(PathBuf),
    #[error("--format site needs --out DIR (the site is a directory of pages)")]
    NoOut,
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The ledger could not be re-read for the attempt pages.
    #[error("{0}")]
    Ledger(#[from] eval_evidence::LedgerError),
    /// The ledger the pages would show is not the one the report verified.
    #[error(
        "{path}: the ledger no longer holds the prefix the report verified (head {verified}); no site was written"
    )]
    LedgerChanged { path: PathBuf, verified: String },
    /// A call's wire log does not read back (an artifact missing, altered or malformed).
    #[error("the wire log of {attempt}: {message}; no site was written")]
    WireLog { attempt: String, message: String },
    /// An artifact a page shows is missing or altered.
    #[error("artifact {digest} ({name} of {attempt}): {source}; no site was written")]
    Artifact {
        attempt: String,
        name: String,
        digest: String,
        #[source]
        source: Box<ArtifactError>,
    },
}

/// What a written site holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteSummary {
    pub pages: usize,
    pub attempts: usize,
    pub bytes: u64,
}

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

/// A file name for an id: ASCII letters, digits, `-`, `_` and `.` are kept, anything else
/// becomes `_`; a name that had to change (or would be hidden or too long) gets a digest suffix
/// so two ids never share a name.
pub fn safe_name(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean == s && !s.is_empty() && !s.starts_with('.') && s.len() <= 100 {
        return clean;
    }
    let d = Digest::of(s.as_bytes()).hex();
    let head: String = clean.chars().take(80).collect();
    format!("_{head}-{}", &d[..12])
}

/// Unique page names for the attempts (`<slot>.<n>`, sanitised), assigned once.
#[derive(Default)]
pub struct Names {
    by_id: BTreeMap<String, String>,
    taken: std::collections::BTreeSet<String>,
}

impl Names {
    pub fn attempt(&mut self, id: &str) -> String {
        if let Some(n) = self.by_id.get(id) {
            return n.clone();
        }
        let base = match id.rsplit_once('#') {
            Some((slot, n)) => format!("{}.{}", safe_name(slot), safe_name(n)),
            None => safe_name(id),
        };
        let name = if self.taken.contains(&base) {
            format!("{base}-{}", &Digest::of(id.as_bytes()).hex()[..12])
        } else {
            base
        };
        self.taken.insert(name.clone());
        self.by_id.insert(id.to_owned(), name.clone());
        name
    }
}
