//! The content-addressed artifact store: every file a run keeps (final workspaces, grader output,
//! transcripts) is stored once, under the SHA-256 of its bytes, in `STATE/<matrix>/artifacts/`.
//!
//! Layout: `sha256/<first two hex digits>/<64 hex digits>`, each file read-only once written.
//! Writes go to `tmp/` first and are renamed into place after an fsync, so a crash leaves either
//! no object or a whole one; a name is never overwritten (the same name means the same bytes).
//!
//! A directory is stored as a **deterministic tar** ([`tar_dir`]): entries sorted by the bytes of
//! their `/`-separated relative path; mode `0755` for directories and executable files, `0644`
//! otherwise; uid/gid 0, empty owner names, mtime 0; a PAX `path`/`linkpath` record only when a
//! name does not fit the ustar fields or is not UTF-8 (then preceded by `hdrcharset=BINARY` and
//! holding the exact bytes). The same tree gives the same bytes on every machine, so the archive's
//! digest is a digest of the tree.
//!
//! The tree is what an agent left behind, so it is walked through
//! [`crate::leftovers::Beneath`] (fd-relative, never following a link) and recorded faithfully
//! rather than refused: symlinks as links (target text only), FIFOs and devices as ustar types
//! `6`/`3`/`4` without content, sockets and other untypeable files only as a note; past a cap
//! ([`ArchiveLimits`]) entries are left out with a note. When there are notes, a PAX global
//! header (`g`, one `comment` record, the sorted notes one per line) precedes the end-of-archive
//! blocks. Only a host failure makes archiving fail ([`ArtifactError::is_host_fault`]).
//!
//! A regular file with a hole before its end (`SEEK_HOLE`) is written as a PAX sparse entry
//! (GNU format 1.0, [`write_sparse`]): its data regions only, so an agent's 4 GiB file of holes
//! costs the archive what the agent could allocate, and `archive.bytes` counts data, not
//! apparent sizes. Files without holes are plain entries, as before.

use crate::ledger::Digest;
use crate::leftovers::{Beneath, LeftoverError, is_host_errno, kind_name};
use sha2::{Digest as _, Sha256};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Something went wrong reading or writing the store.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A store file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A store operation the platform could not perform (e.g. no temporary file could be made).
    #[error("{path}: {reason}")]
    Unsupported {
        /// The offending path.
        path: PathBuf,
        /// Why it is not supported.
        reason: String,
    },
    /// No object with this digest is in the store (it was never stored, or was deleted).
    #[error("artifact {digest} is missing from the store")]
    Missing {
        /// The digest asked for.
        digest: Digest,
    },
    /// The object's bytes no longer hash to its name: the store was altered.
    #[error("artifact {digest} is corrupt: its bytes hash to {actual}")]
    Corrupt {
        /// The digest the object is stored under.
        digest: Digest,
        /// The digest of the bytes found.
        actual: Digest,
    },
    /// Storing the object would pass the run's artifact byte budget
    /// ([`ArtifactStore::with_budget`]) or the attempt's own quota
    /// ([`ArtifactStore::reserve_quota`]); nothing was stored.
    #[error(
        "{scope} of {max} bytes has no room for this artifact ({used} bytes already stored, this one passes it after {written} bytes)"
    )]
    OverBudget {
        /// Which bound: the run's budget or the attempt's quota.
        scope: &'static str,
        /// The budget.
        max: u64,
        /// What the store held (and other writes had reserved) when this one was refused.
        used: u64,
        /// How far this object got before it was refused.
        written: u64,
    },
    /// Reading the tree to archive failed; only a host failure reaches here (see
    /// [`tar_dir_with`]), or the root directory itself could not be opened.
    #[error("archiving {dir}: {source}")]
    Leftover {
        /// The directory being archived.
        dir: PathBuf,
        /// The read failure.
        #[source]
        source: LeftoverError,
    },
}

impl ArtifactError {
    /// True for failures of the host (the store's own writes failing with ENOSPC, EDQUOT, EIO,
    /// …, or such a failure reading a tree), which nothing in an archived tree can cause.
    pub fn is_host_fault(&self) -> bool {
        match self {
            ArtifactError::Io { source, .. } => source.raw_os_error().is_some_and(is_host_errno),
            ArtifactError::Leftover { source, .. } => source.is_host_fault(),
            // The run's own bound, reached by what the attempt left: never the host's.
            ArtifactError::OverBudget { .. } => false,
            _ => false,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ArtifactError + '_ {
    move |source| ArtifactError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A content-addressed store rooted at one directory.
#[derive(Clone, Debug)]
pub struct ArtifactStore {
    root: PathBuf,
    /// The run's artifact byte budget, shared by every clone (`with_budget`); `None`: unbounded.
    budget: Option<std::sync::Arc<Budget>>,
    /// The attempt's own quota, taken from the budget (`reserve_quota`): when present, writes
    /// are charged to it alone.
    quota: Option<std::sync::Arc<Quota>>,
}

/// `Budget::max`'s scope names, as [`ArtifactError::OverBudget`] says them.
const RUN_SCOPE: &str = "the run's artifact budget";
const QUOTA_SCOPE: &str = "this attempt's artifact quota";

/// An attempt's reserved share of the run's budget: its bytes were taken from the run's budget
/// when it was reserved, so nobody else's writes can take them; what the attempt did not use is
/// given back when its last clone is dropped.
#[derive(Debug)]
struct Quota {
    own: Budget,
    run: Option<std::sync::Arc<Budget>>,
}

impl Drop for Quota {
    fn drop(&mut self) {
        if let Some(run) = &self.run {
            let used = self.own.used.load(std::sync::atomic::Ordering::Acquire);
            run.give_back(self.own.max.saturating_sub(used));
        }
    }
}

/// What a run may store in total, and what it has stored or reserved so far.
#[derive(Debug)]
struct Budget {
    max: u64,
    used: std::sync::atomic::AtomicU64,
}

impl Budget {
    /// Takes `n` more bytes, or says how much was used when it could not.
    fn take(&self, n: u64) -> Result<(), u64> {
        use std::sync::atomic::Ordering;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|t| *t <= self.max)
            })
            .map(|_| ())
    }

    fn give_back(&self, n: u64) {
        use std::sync::atomic::Ordering;
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }
}

/// The error a [`BudgetWriter`] fails a write with; told apart from the disk's own errors.
#[derive(Debug)]
struct OverBudgetMark {
    used: u64,
}

impl std::fmt::Display for OverBudgetMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the artifact budget is used up ({} bytes)", self.used)
    }
}

impl std::error::Error for OverBudgetMark {}

/// Counts what is written against the budget before writing it.
struct BudgetWriter<'a, W: Write> {
    inner: W,
    budget: Option<&'a Budget>,
    written: u64,
}

impl<W: Write> Write for BudgetWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(b) = self.budget {
            b.take(buf.len() as u64)
                .map_err(|used| io::Error::other(OverBudgetMark { used }))?;
        }
        match self.inner.write(buf) {
            Ok(n) => {
                if let Some(b) = self.budget {
                    b.give_back((buf.len() - n) as u64);
                }
                self.written += n as u64;
                Ok(n)
            }
            Err(e) => {
                if let Some(b) = self.budget {
                    b.give_back(buf.len() as u64);
                }
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The used-up budget behind an error, if that is what it is.
fn over_budget(e: &io::Error) -> Option<u64> {
    e.get_ref()
        .and_then(|i| i.downcast_ref::<OverBudgetMark>())
        .map(|m| m.used)
}

/// Bytes of the objects under `root/sha256/` (two levels: prefix directories, objects).
fn stored_bytes(root: &Path) -> Result<u64, ArtifactError> {
    let top = root.join("sha256");
    let mut total = 0u64;
    for prefix in fs::read_dir(&top).map_err(io_err(&top))? {
        let prefix = prefix.map_err(io_err(&top))?.path();
        if !prefix.is_dir() {
            continue;
        }
        for object in fs::read_dir(&prefix).map_err(io_err(&prefix))? {
            let object = object.map_err(io_err(&prefix))?;
            let m = object.metadata().map_err(io_err(&object.path()))?;
            if m.is_file() {
                total = total.saturating_add(m.len());
            }
        }
    }
    Ok(total)
}

impl ArtifactStore {
    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: &Path) -> Result<Self, ArtifactError> {
        fs::create_dir_all(root.join("sha256")).map_err(io_err(root))?;
        fs::create_dir_all(root.join("tmp")).map_err(io_err(root))?;
        Ok(Self {
            root: root.to_path_buf(),
            budget: None,
            quota: None,
        })
    }

    /// The same store, bounded by a run's artifact byte budget: every object this store and
    /// its clones write counts against `max`, starting from what the store already holds (a
    /// resumed run's earlier sessions), and a write that would pass it fails with
    /// [`ArtifactError::OverBudget`] without storing anything. An object already present costs
    /// nothing.
    pub fn with_budget(self, max: u64) -> Result<Self, ArtifactError> {
        let used = stored_bytes(&self.root)?;
        Ok(Self {
            budget: Some(std::sync::Arc::new(Budget {
                max,
                used: std::sync::atomic::AtomicU64::new(used),
            })),
            ..self
        })
    }

    /// The run budget's `(max, used)`, when the store has one (reserved quotas count as used).
    pub fn budget(&self) -> Option<(u64, u64)> {
        self.budget
            .as_ref()
            .map(|b| (b.max, b.used.load(std::sync::atomic::Ordering::Acquire)))
    }

    /// The same store, bounded by a quota of `q` bytes of its own, taken from the run's budget
    /// now (none of it can then be taken by another writer) and given back, less what was
    /// stored, when the returned store and all its clones are dropped. Writes through it are
    /// charged to the quota alone; one past it fails [`ArtifactError::OverBudget`] (scope: the
    /// attempt's quota). Refused with `OverBudget` (scope: the run's budget, `written` = `q`)
    /// when the budget has less than `q` left.
    pub fn reserve_quota(&self, q: u64) -> Result<Self, ArtifactError> {
        if let Some(run) = &self.budget {
            run.take(q).map_err(|used| ArtifactError::OverBudget {
                scope: RUN_SCOPE,
                max: run.max,
                used,
                written: q,
            })?;
        }
        Ok(Self {
            quota: Some(std::sync::Arc::new(Quota {
                own: Budget {
                    max: q,
                    used: std::sync::atomic::AtomicU64::new(0),
                },
                run: self.budget.clone(),
            })),
            ..self.clone()
        })
    }

    /// The quota's `(max, used)`, when the store is one attempt's ([`Self::reserve_quota`]).
    pub fn quota(&self) -> Option<(u64, u64)> {
        self.quota.as_ref().map(|q| {
            (
                q.own.max,
                q.own.used.load(std::sync::atomic::Ordering::Acquire),
            )
        })
    }

    /// The bound writes are charged to (the quota, else the run's budget) and its scope.
    fn charged(&self) -> Option<(&Budget, &'static str)> {
        match &self.quota {
            Some(q) => Some((&q.own, QUOTA_SCOPE)),
            None => self.budget.as_deref().map(|b| (b, RUN_SCOPE)),
        }
    }

    /// A failed write of `written` counted bytes: given back to the budget, and the budget's
    /// own refusal told apart from the disk's errors.
    fn failed(&self, written: u64, e: ArtifactError) -> ArtifactError {
        let Some((b, scope)) = self.charged() else {
            return e;
        };
        b.give_back(written);
        let used = match &e {
            ArtifactError::Io { source, .. } => over_budget(source),
            _ => None,
        };
        match used {
            Some(used) => ArtifactError::OverBudget {
                scope,
                max: b.max,
                used,
                written,
            },
            None => e,
        }
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the object with this digest lives (whether or not it exists).
    pub fn path_of(&self, digest: &Digest) -> PathBuf {
        let hex = digest.hex();
        self.root.join("sha256").join(&hex[..2]).join(hex)
    }

    /// Whether an object with this digest is present (its bytes are not checked here).
    pub fn contains(&self, digest: &Digest) -> bool {
        self.path_of(digest).is_file()
    }

    /// Stores `bytes`; returns their digest.
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<Digest, ArtifactError> {
        self.put_reader(&mut &bytes[..])
    }

    /// Stores a file's bytes, streamed (never read whole into memory).
    pub fn put_file(&self, path: &Path) -> Result<Digest, ArtifactError> {
        let mut f = fs::File::open(path).map_err(io_err(path))?;
        self.put_reader(&mut f)
    }

    /// Stores the deterministic tar of `dir` (see the module docs) within the default
    /// [`ArchiveLimits`].
    pub fn put_dir(&self, dir: &Path) -> Result<ArchiveSummary, ArtifactError> {
        self.put_dir_with(dir, &ArchiveLimits::default())
    }

    /// Stores the deterministic tar of `dir`. Never fails because of what the tree contains:
    /// links, special files, odd names and whatever passes a cap are entries or notes.
    pub fn put_dir_with(
        &self,
        dir: &Path,
        limits: &ArchiveLimits,
    ) -> Result<ArchiveSummary, ArtifactError> {
        let (tmp, mut file) = self.temp_file()?;
        let mut counted = BudgetWriter {
            inner: &mut file,
            budget: self.charged().map(|(b, _)| b),
            written: 0,
        };
        let mut writer = HashingWriter::new(io::BufWriter::new(&mut counted));
        let summary = tar_dir_with(dir, limits, &mut writer);
        let (digest, buf) = writer.finish();
        let flushed = buf.into_inner().map(|_| ()).map_err(|e| e.into_error());
        let written = counted.written;
        let done = summary.and_then(|summary| {
            flushed
                .and_then(|_| file.sync_all())
                .map_err(io_err(&tmp))?;
            Ok(summary)
        });
        let summary = match done {
            Ok(s) => s,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(self.failed(written, e));
            }
        };
        drop(file);
        self.publish_counted(&tmp, &digest, written)?;
        Ok(ArchiveSummary {
            digest,
            notes: summary.notes,
            entries: summary.entries,
            bytes: summary.bytes,
        })
    }

    /// Reads an object back, checking that its bytes still hash to its name.
    pub fn get(&self, digest: &Digest) -> Result<Vec<u8>, ArtifactError> {
        let path = self.path_of(digest);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ArtifactError::Missing { digest: *digest });
            }
            Err(e) => return Err(io_err(&path)(e)),
        };
        let actual = Digest::of(&bytes);
        if actual != *digest {
            return Err(ArtifactError::Corrupt {
                digest: *digest,
                actual,
            });
        }
        Ok(bytes)
    }

    /// Re-hashes a stored object (streamed) and checks it against its name.
    pub fn verify(&self, digest: &Digest) -> Result<(), ArtifactError> {
        let path = self.path_of(digest);
        let mut f = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ArtifactError::Missing { digest: *digest });
            }
            Err(e) => return Err(io_err(&path)(e)),
        };
        let actual = hash_reader(&mut f).map_err(io_err(&path))?;
        if actual != *digest {
            return Err(ArtifactError::Corrupt {
                digest: *digest,
                actual,
            });
        }
        Ok(())
    }

    fn put_reader(&self, reader: &mut dyn Read) -> Result<Digest, ArtifactError> {
        let (tmp, mut file) = self.temp_file()?;
        let mut counted = BudgetWriter {
            inner: &mut file,
            budget: self.charged().map(|(b, _)| b),
            written: 0,
        };
        let mut writer = HashingWriter::new(&mut counted);
        let copied = io::copy(reader, &mut writer);
        let (digest, _) = writer.finish();
        let written = counted.written;
        if let Err(e) = copied.and_then(|_| file.sync_all()) {
            let _ = fs::remove_file(&tmp);
            return Err(self.failed(written, io_err(&tmp)(e)));
        }
        drop(file);
        self.publish_counted(&tmp, &digest, written)?;
        Ok(digest)
    }

    /// [`Self::publish`], giving the budget back what an object already present did not cost
    /// (or what a failed publish did not store).
    fn publish_counted(
        &self,
        tmp: &Path,
        digest: &Digest,
        written: u64,
    ) -> Result<(), ArtifactError> {
        let present = self.path_of(digest).is_file();
        let r = self.publish(tmp, digest);
        if let Some((b, _)) = self.charged()
            && (present || r.is_err())
        {
            b.give_back(written);
        }
        r
    }

    fn temp_file(&self) -> Result<(PathBuf, fs::File), ArtifactError> {
        let dir = self.root.join("tmp");
        for _ in 0..16 {
            let name = format!("{}.{}", std::process::id(), unique_suffix());
            let path = dir.join(name);
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => return Ok((path, f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err(&path)(e)),
            }
        }
        Err(ArtifactError::Unsupported {
            path: dir,
            reason: "could not create a temporary file".into(),
        })
    }

    fn publish(&self, tmp: &Path, digest: &Digest) -> Result<(), ArtifactError> {
        let dest = self.path_of(digest);
        if dest.is_file() {
            // Same name, same bytes: the object is already there.
            let _ = fs::remove_file(tmp);
            return Ok(());
        }
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        set_mode(tmp, 0o444).map_err(io_err(tmp))?;
        fs::rename(tmp, &dest).map_err(io_err(&dest))?;
        Ok(())
    }
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    (COUNTER.fetch_add(1, Ordering::Relaxed) << 32) ^ nanos
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// SHA-256 of everything read from `r`.
pub fn hash_reader(r: &mut dyn Read) -> io::Result<Digest> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(Digest(h.finalize().into()))
}

struct HashingWriter<W: Write> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
        }
    }

    fn finish(self) -> (Digest, W) {
        (Digest(self.hasher.finalize().into()), self.inner)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Caps on one directory archive. Beyond a cap the archive is still written: what did not fit is
/// left out and said so in a note, because the tree is the agent's doing and must never make the
/// archive step fail.
#[derive(Clone, Debug)]
pub struct ArchiveLimits {
    /// Entries (directories, files, links, special files) recorded; more are counted in a note.
    pub max_entries: u64,
    /// Bytes of file content recorded; a file that would pass the cap is left out with a note.
    pub max_bytes: u64,
    /// Directory depth below the root whose contents are recorded; deeper ones are noted.
    pub max_depth: usize,
    /// Sum of the lengths of every recorded path (bounds the walk's memory: 200,000 entries of
    /// 64 KiB paths would otherwise be 12 GiB).
    pub max_path_bytes: u64,
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        Self {
            max_entries: 200_000,
            max_bytes: 4 << 30,
            max_depth: 256,
            max_path_bytes: 64 << 20,
        }
    }
}

/// At most this many notes are kept (sorted); the rest are counted in a final note.
const MAX_NOTES: usize = 1000;

/// What archiving a directory produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// Digest of the tar archive, as stored.
    pub digest: Digest,
    /// What was recorded other than as a plain entry, or left out, and why (sorted).
    pub notes: Vec<String>,
    /// Entries written (PAX headers and the notes header not counted).
    pub entries: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

/// [`ArchiveSummary`] without the digest, as [`tar_dir`] returns it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TarSummary {
    /// As in [`ArchiveSummary::notes`].
    pub notes: Vec<String>,
    /// As in [`ArchiveSummary::entries`].
    pub entries: u64,
    /// As in [`ArchiveSummary::bytes`].
    pub bytes: u64,
}

/// One entry of a tree walk, path relative to the root with `/` separators (raw bytes: a name
/// need not be UTF-8).
enum TreeEntry {
    Dir(Vec<u8>),
    File {
        rel: Vec<u8>,
        exec: bool,
    },
    Link {
        rel: Vec<u8>,
        target: Vec<u8>,
    },
    /// FIFO (`6`), character (`3`) or block (`4`) device: a header, no content.
    Special {
        rel: Vec<u8>,
        typeflag: u8,
        dev: (u32, u32),
    },
}

impl TreeEntry {
    fn rel(&self) -> &[u8] {
        match self {
            TreeEntry::Dir(r)
            | TreeEntry::File { rel: r, .. }
            | TreeEntry::Link { rel: r, .. }
            | TreeEntry::Special { rel: r, .. } => r,
        }
    }
}

/// A name for notes and messages: quoted, with anything not UTF-8 escaped as `\xNN`.
fn shown(rel: &[u8]) -> String {
    match std::str::from_utf8(rel) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!("\"{}\"", rel.escape_ascii()),
    }
}

/// Notes keyed by the path they concern, so their order never depends on directory order.
/// Only the `MAX_NOTES` smallest are kept (a max-heap of that size) and the rest counted: a tree
/// of millions of sockets, which take no archive entry, must not take the controller's memory.
struct Notes {
    kept: std::collections::BinaryHeap<(Vec<u8>, String)>,
    extra: usize,
}

impl Notes {
    fn new() -> Self {
        Self {
            kept: std::collections::BinaryHeap::new(),
            extra: 0,
        }
    }

    fn add(&mut self, rel: &[u8], text: String) {
        self.kept.push((rel.to_vec(), text));
        if self.kept.len() > MAX_NOTES {
            self.kept.pop();
            self.extra += 1;
        }
    }

    fn finish(self) -> Vec<String> {
        let mut out: Vec<String> = self
            .kept
            .into_sorted_vec()
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        if self.extra > 0 {
            out.push(format!("{} more notes were left out", self.extra));
        }
        out
    }
}

fn leftover_to_artifact(dir: &Path, e: LeftoverError) -> ArtifactError {
    ArtifactError::Leftover {
        dir: dir.to_path_buf(),
        source: e,
    }
}

fn join_rel(parent: &[u8], name: &[u8]) -> Vec<u8> {
    if parent.is_empty() {
        name.to_vec()
    } else {
        [parent, b"/", name].concat()
    }
}

fn comps(rel: &[u8]) -> Vec<&[u8]> {
    if rel.is_empty() {
        Vec::new()
    } else {
        rel.split(|&b| b == b'/').collect()
    }
}

/// Lists the tree beneath `root` without following any link. Only a host failure is an error;
/// anything odd the agent left is an entry or a note.
fn walk(
    root: &Beneath,
    dir: &Path,
    limits: &ArchiveLimits,
    notes: &mut Notes,
) -> Result<Vec<TreeEntry>, ArtifactError> {
    let mut out = Vec::new();
    let mut path_bytes = 0u64;
    let mut skipped = 0u64;
    // Directories in a fixed order (children sorted by name), so which entries a cap leaves
    // out depends on the tree, not on the order the file system lists it in.
    let mut todo: Vec<(Vec<u8>, usize)> = vec![(Vec::new(), 0)];
    while let Some((rel, depth)) = todo.pop() {
        let mut d = match root.open_dir(&comps(&rel)) {
            Ok(d) => d,
            Err(e) if e.is_host_fault() => return Err(leftover_to_artifact(dir, e)),
            Err(e) => {
                notes.add(&rel, format!("{}: contents not archived: {e}", shown(&rel)));
                continue;
            }
        };
        // Only the smallest names that can still be recorded are kept (a max-heap of that
        // size), so a directory of ten million entries costs no more memory than the cap, and
        // which ones are kept still does not depend on directory order.
        let room = usize::try_from(limits.max_entries.saturating_sub(out.len() as u64))
            .unwrap_or(usize::MAX);
        let names = smallest_names(&mut d, &rel, room, dir, notes, &mut skipped)?;
        let mut subdirs = Vec::new();
        for name in names {
            let child = join_rel(&rel, &name);
            if out.len() as u64 >= limits.max_entries
                || path_bytes + child.len() as u64 > limits.max_path_bytes
            {
                skipped += 1;
                continue;
            }
            let dfd = d
                .fd()
                .map_err(|e| leftover_to_artifact(dir, host_or_refused(&rel, e)))?;
            let Some(st) = stat_child(dfd, &name, &child, dir, notes)? else {
                continue;
            };
            path_bytes += child.len() as u64;
            let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
            let dev = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
            use rustix::fs::FileType as T;
            match ft {
                T::Directory => {
                    out.push(TreeEntry::Dir(child.clone()));
                    if depth + 1 >= limits.max_depth {
                        notes.add(
                            &child,
                            format!(
                                "{}: deeper than {} levels; its contents were not archived",
                                shown(&child),
                                limits.max_depth
                            ),
                        );
                    } else {
                        subdirs.push((child, depth + 1));
                    }
                }
                T::RegularFile => out.push(TreeEntry::File {
                    rel: child,
                    exec: st.st_mode & 0o111 != 0,
                }),
                T::Symlink => match rustix::fs::readlinkat(dfd, name.as_slice(), Vec::new()) {
                    Ok(target) => out.push(TreeEntry::Link {
                        rel: child,
                        target: target.into_bytes(),
                    }),
                    Err(rustix::io::Errno::NOENT) => {}
                    Err(e) if is_host_errno(e.raw_os_error()) => {
                        return Err(leftover_to_artifact(dir, host_or_refused(&child, e)));
                    }
                    Err(e) => {
                        notes.add(&child, format!("{}: link not archived: {e}", shown(&child)))
                    }
                },
                T::Fifo | T::CharacterDevice | T::BlockDevice | T::Socket | T::Unknown => {
                    out.extend(odd_entry(ft, child, dev, notes));
                }
            }
        }
        // Reverse so that the smallest name is visited first.
        todo.extend(subdirs.into_iter().rev());
    }
    if skipped > 0 {
        notes.add(
            b"",
            format!(
                "{skipped} entries were not archived: the caps are {} entries and {} bytes of paths",
                limits.max_entries, limits.max_path_bytes
            ),
        );
    }
    Ok(out)
}

/// The smallest `room` names of directory `d` (sorted), counting those left out in `skipped`.
/// A listing that stops partway keeps the names read so far, with a note.
fn smallest_names(
    d: &mut rustix::fs::Dir,
    rel: &[u8],
    room: usize,
    dir: &Path,
    notes: &mut Notes,
    skipped: &mut u64,
) -> Result<Vec<Vec<u8>>, ArtifactError> {
    let mut names = std::collections::BinaryHeap::new();
    loop {
        let name = match d.read() {
            None => break,
            Some(Ok(entry)) => entry.file_name().to_bytes().to_vec(),
            Some(Err(e)) if is_host_errno(e.raw_os_error()) => {
                return Err(leftover_to_artifact(dir, host_or_refused(rel, e)));
            }
            Some(Err(e)) => {
                notes.add(rel, format!("{}: listing stopped: {e}", shown(rel)));
                break;
            }
        };
        if name == b"." || name == b".." {
            continue;
        }
        names.push(name);
        if names.len() > room {
            names.pop();
            *skipped += 1;
        }
    }
    Ok(names.into_sorted_vec())
}

/// A FIFO or device is a ustar entry without content, with a note; a socket or an unknown kind
/// only a note.
fn odd_entry(
    ft: rustix::fs::FileType,
    child: Vec<u8>,
    dev: (u32, u32),
    notes: &mut Notes,
) -> Option<TreeEntry> {
    use rustix::fs::FileType as T;
    match ft {
        T::Fifo | T::CharacterDevice | T::BlockDevice => {
            let (typeflag, what) = match ft {
                T::Fifo => (b'6', "a FIFO"),
                T::CharacterDevice => (b'3', "a character device"),
                _ => (b'4', "a block device"),
            };
            notes.add(
                &child,
                format!(
                    "{}: {what}, recorded as a ustar type {} entry without content",
                    shown(&child),
                    typeflag as char
                ),
            );
            Some(TreeEntry::Special {
                rel: child,
                typeflag,
                dev: if typeflag == b'6' { (0, 0) } else { dev },
            })
        }
        _ => {
            notes.add(
                &child,
                format!(
                    "{}: a {} has no tar type; recorded only in this note",
                    shown(&child),
                    kind_name(ft).replace('_', " ")
                ),
            );
            None
        }
    }
}

/// The status of `name` in `dfd` (its path `child`), not following a link; `None` when it is gone
/// or cannot be read (with a note).
fn stat_child(
    dfd: std::os::fd::BorrowedFd<'_>,
    name: &[u8],
    child: &[u8],
    dir: &Path,
    notes: &mut Notes,
) -> Result<Option<rustix::fs::Stat>, ArtifactError> {
    match rustix::fs::statat(dfd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) if is_host_errno(e.raw_os_error()) => {
            Err(leftover_to_artifact(dir, host_or_refused(child, e)))
        }
        Err(e) => {
            notes.add(child, format!("{}: not archived: {e}", shown(child)));
            Ok(None)
        }
    }
}

fn host_or_refused(rel: &[u8], e: rustix::io::Errno) -> LeftoverError {
    let path = String::from_utf8_lossy(rel).into_owned();
    if is_host_errno(e.raw_os_error()) {
        LeftoverError::Host {
            path,
            source: e.into(),
        }
    } else {
        LeftoverError::Refused {
            path,
            errno: e.raw_os_error(),
        }
    }
}

/// Writes the deterministic tar of `dir` (see the module docs) to `out`, within the default
/// [`ArchiveLimits`].
pub fn tar_dir(dir: &Path, out: &mut dyn Write) -> Result<TarSummary, ArtifactError> {
    tar_dir_with(dir, &ArchiveLimits::default(), out)
}

/// Writes the deterministic tar of `dir` to `out`. Fails only on a host failure (reading the tree
/// or writing `out`); everything the tree contains is an entry or a note.
pub fn tar_dir_with(
    dir: &Path,
    limits: &ArchiveLimits,
    out: &mut dyn Write,
) -> Result<TarSummary, ArtifactError> {
    let root = Beneath::open(dir).map_err(|e| leftover_to_artifact(dir, e))?;
    let mut notes = Notes::new();
    let mut entries = walk(&root, dir, limits, &mut notes)?;
    entries.sort_by(|a, b| a.rel().cmp(b.rel()));
    let mut tar = Tar {
        dir,
        root: &root,
        limits,
        out,
        notes,
        written: 0,
        bytes: 0,
    };
    for e in &entries {
        if tar.entry(e)? {
            tar.written += 1;
        }
    }
    tar.finish()
}

/// The archive [`tar_dir_with`] is writing: where it reads, where it writes, and what it has
/// counted and noted so far.
struct Tar<'a> {
    dir: &'a Path,
    root: &'a Beneath,
    limits: &'a ArchiveLimits,
    out: &'a mut dyn Write,
    notes: Notes,
    /// Entries recorded.
    written: u64,
    /// Bytes of file content recorded (of a sparse file, its data only).
    bytes: u64,
}

impl Tar<'_> {
    /// Records one entry of the walk; `false` when it was left out (with a note).
    fn entry(&mut self, e: &TreeEntry) -> Result<bool, ArtifactError> {
        let rel = e.rel();
        if std::str::from_utf8(rel).is_err() {
            self.notes.add(
                rel,
                format!(
                    "{}: name is not UTF-8; recorded byte-exact in a PAX path record with hdrcharset=BINARY",
                    shown(rel)
                ),
            );
        }
        let w = |source: io::Error| ArtifactError::Io {
            path: self.dir.to_path_buf(),
            source,
        };
        match e {
            TreeEntry::Dir(rel) => {
                let name = [rel.as_slice(), b"/"].concat();
                write_header(self.out, &name, b"", b'5', 0o755, 0, (0, 0)).map_err(w)?
            }
            TreeEntry::Link { rel, target } => {
                if std::str::from_utf8(target).is_err() {
                    self.notes.add(
                        rel,
                        format!(
                            "{}: link target is not UTF-8; recorded byte-exact in a PAX linkpath record with hdrcharset=BINARY",
                            shown(rel)
                        ),
                    );
                }
                write_header(self.out, rel, target, b'2', 0o777, 0, (0, 0)).map_err(w)?
            }
            TreeEntry::Special { rel, typeflag, dev } => {
                write_header(self.out, rel, b"", *typeflag, 0o644, 0, *dev).map_err(w)?
            }
            TreeEntry::File { rel, exec } => return self.file(rel, *exec),
        }
        Ok(true)
    }

    /// A regular file: opened again beneath the root (it may have changed since the walk), then
    /// written sparse, whole, or left out with a note when it would pass the content cap.
    fn file(&mut self, rel: &[u8], exec: bool) -> Result<bool, ArtifactError> {
        let dir = self.dir;
        let (mut f, size) = match self.root.open_regular(&comps(rel)) {
            Ok(x) => x,
            Err(e) if e.is_host_fault() => return Err(leftover_to_artifact(dir, e)),
            Err(e) => {
                self.notes
                    .add(rel, format!("{}: changed while archived: {e}", shown(rel)));
                return Ok(false);
            }
        };
        let regions = match data_regions(&f, size) {
            Ok(r) => r,
            Err(e) if is_host_errno(e.raw_os_error()) => {
                return Err(leftover_to_artifact(dir, host_or_refused(rel, e)));
            }
            Err(e) => {
                self.notes
                    .add(rel, format!("{}: not archived: {e}", shown(rel)));
                return Ok(false);
            }
        };
        let mode = if exec { 0o755 } else { 0o644 };
        if let Some(regions) = regions {
            return self.sparse(rel, mode, size, &regions, &mut f);
        }
        if self.bytes.saturating_add(size) > self.limits.max_bytes {
            self.notes.add(
                rel,
                format!(
                    "{}: {size} bytes not archived: the archive's cap of {} bytes of content was reached",
                    shown(rel),
                    self.limits.max_bytes
                ),
            );
            return Ok(false);
        }
        write_header(self.out, rel, b"", b'0', mode, size, (0, 0)).map_err(io_err(dir))?;
        let copied = copy_up_to(&mut f, self.out, size).map_err(|c| match c {
            CopyError::Read(e) => leftover_to_artifact(dir, from_read(rel, e)),
            CopyError::Write(e) => io_err(dir)(e),
        })?;
        if let Some(why) = copied {
            self.notes.add(rel, format!("{}: {why}", shown(rel)));
        }
        pad(self.out, size).map_err(io_err(dir))?;
        self.bytes += size;
        Ok(true)
    }

    /// A file with holes: only the data is written, so a file of terabytes of holes costs what
    /// was allocated, never its apparent size.
    fn sparse(
        &mut self,
        rel: &[u8],
        mode: u32,
        size: u64,
        regions: &[(u64, u64)],
        f: &mut fs::File,
    ) -> Result<bool, ArtifactError> {
        let dir = self.dir;
        let data: u64 = regions.iter().map(|r| r.1).sum();
        if regions.len() > MAX_SPARSE_REGIONS
            || self.bytes.saturating_add(data) > self.limits.max_bytes
        {
            self.notes.add(
                rel,
                format!(
                    "{}: sparse file of {size} bytes ({data} bytes of data in {} regions) not archived: the caps are {} bytes of content and {MAX_SPARSE_REGIONS} regions",
                    shown(rel),
                    regions.len(),
                    self.limits.max_bytes
                ),
            );
            return Ok(false);
        }
        let problem = write_sparse(self.out, rel, mode, size, regions, f).map_err(|c| match c {
            CopyError::Read(e) => leftover_to_artifact(dir, from_read(rel, e)),
            CopyError::Write(e) => io_err(dir)(e),
        })?;
        self.notes.add(
            rel,
            format!(
                "{}: sparse file of {size} bytes, recorded as a PAX sparse (GNU 1.0) entry of its {data} bytes of data in {} regions{problem}",
                shown(rel),
                regions.len()
            ),
        );
        self.bytes += data;
        Ok(true)
    }

    /// The notes (in a PAX global header, only when there are any) and the end of the archive.
    fn finish(self) -> Result<TarSummary, ArtifactError> {
        let w = |source: io::Error| ArtifactError::Io {
            path: self.dir.to_path_buf(),
            source,
        };
        let notes = self.notes.finish();
        if !notes.is_empty() {
            // A PAX global header carries the notes inside the archive itself (tar readers
            // ignore a `comment`), and only when there are any, so ordinary trees archive as
            // before.
            let mut text = notes.join("\n").into_bytes();
            text.push(b'\n');
            let record = pax_record(b"comment", &text);
            self.out
                .write_all(&ustar_header(
                    b"././@PaxGlobalHeader",
                    b"",
                    b'g',
                    0o644,
                    record.len() as u64,
                    (0, 0),
                ))
                .map_err(w)?;
            self.out.write_all(&record).map_err(w)?;
            pad(self.out, record.len() as u64).map_err(w)?;
        }
        // Two zero blocks end the archive.
        self.out.write_all(&[0u8; 1024]).map_err(w)?;
        Ok(TarSummary {
            notes,
            entries: self.written,
            bytes: self.bytes,
        })
    }
}

/// More data regions than this and a sparse file is left out with a note (its map alone would
/// be tens of megabytes).
const MAX_SPARSE_REGIONS: usize = 1 << 20;

/// The data regions `(offset, length)` of a file with a hole before its end (`SEEK_DATA` /
/// `SEEK_HOLE`), or `None` for a file without holes (or a filesystem that cannot say), which is
/// archived as a plain entry, as before.
fn data_regions(f: &fs::File, size: u64) -> Result<Option<Vec<(u64, u64)>>, rustix::io::Errno> {
    // Probing moves the file's offset: back to the start for the reader that follows.
    let found = probe_regions(f, size);
    rustix::fs::seek(f, rustix::fs::SeekFrom::Start(0))?;
    found
}

fn probe_regions(f: &fs::File, size: u64) -> Result<Option<Vec<(u64, u64)>>, rustix::io::Errno> {
    use rustix::fs::{SeekFrom, seek};
    use rustix::io::Errno;
    let first_hole = match seek(f, SeekFrom::Hole(0)) {
        Ok(h) => h,
        Err(Errno::NXIO) => return Ok(None),
        Err(Errno::INVAL | Errno::OPNOTSUPP) => return Ok(None),
        Err(e) => return Err(e),
    };
    if first_hole >= size {
        return Ok(None);
    }
    let mut regions = Vec::new();
    let mut off = 0u64;
    while off < size && regions.len() <= MAX_SPARSE_REGIONS {
        let start = match seek(f, SeekFrom::Data(off)) {
            Ok(d) if d < size => d,
            Ok(_) | Err(Errno::NXIO) => break,
            Err(e) => return Err(e),
        };
        let end = match seek(f, SeekFrom::Hole(start)) {
            Ok(h) => h.min(size),
            Err(Errno::NXIO) => size,
            Err(e) => return Err(e),
        };
        if end <= start {
            break;
        }
        regions.push((start, end - start));
        off = end;
    }
    Ok(Some(regions))
}

/// One sparse file as a PAX sparse entry, format 1.0 (what GNU tar writes and GNU tar, bsdtar
/// and Python's `tarfile` restore): an extended header with `GNU.sparse.major=1`,
/// `GNU.sparse.minor=0`, `GNU.sparse.name` (the real name) and `GNU.sparse.realsize`; a ustar
/// header named `GNUSparseFile.0/<name>` whose content is the map (the number of regions, then
/// each region's offset and length, decimal, one per line, padded to a block) followed by the
/// regions' bytes. A region that shrank is padded with zeros; the note says so.
fn write_sparse(
    out: &mut dyn Write,
    rel: &[u8],
    mode: u32,
    size: u64,
    regions: &[(u64, u64)],
    f: &mut fs::File,
) -> Result<String, CopyError> {
    use std::io::{Seek, SeekFrom};
    // A file ending in a hole gets a last, empty region at its end (as GNU tar writes it):
    // readers size the file by the map.
    let ends_in_hole = regions.last().is_none_or(|(off, len)| off + len < size);
    let tail = ends_in_hole.then_some((size, 0u64));
    let count = regions.len() + usize::from(ends_in_hole);
    let mut map = format!("{count}\n").into_bytes();
    for (off, len) in regions.iter().chain(tail.iter()) {
        map.extend(format!("{off}\n{len}\n").into_bytes());
    }
    let map_len = map.len().div_ceil(512) * 512;
    map.resize(map_len, 0);
    let data: u64 = regions.iter().map(|r| r.1).sum();
    let stored = map_len as u64 + data;
    let mut records = Vec::new();
    if std::str::from_utf8(rel).is_err() {
        records.extend(pax_record(b"hdrcharset", b"BINARY"));
    }
    records.extend(pax_record(b"GNU.sparse.major", b"1"));
    records.extend(pax_record(b"GNU.sparse.minor", b"0"));
    records.extend(pax_record(b"GNU.sparse.name", rel));
    records.extend(pax_record(
        b"GNU.sparse.realsize",
        size.to_string().as_bytes(),
    ));
    let w = CopyError::Write;
    out.write_all(&ustar_header(
        b"././@PaxHeader",
        b"",
        b'x',
        0o644,
        records.len() as u64,
        (0, 0),
    ))
    .map_err(w)?;
    out.write_all(&records).map_err(w)?;
    pad(out, records.len() as u64).map_err(w)?;
    let (parent, base) = match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..=i], &rel[i + 1..]),
        None => (&b""[..], rel),
    };
    let name = [parent, b"GNUSparseFile.0/", base].concat();
    out.write_all(&ustar_header(
        truncate_name(&name),
        b"",
        b'0',
        mode,
        stored,
        (0, 0),
    ))
    .map_err(w)?;
    out.write_all(&map).map_err(w)?;
    let mut problem = String::new();
    let mut buf = vec![0u8; 64 * 1024];
    for (off, len) in regions {
        f.seek(SeekFrom::Start(*off)).map_err(CopyError::Read)?;
        let mut left = *len;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(buf.len()));
            let n = match f.read(&mut buf[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error().is_some_and(is_host_errno) => {
                    return Err(CopyError::Read(e));
                }
                Err(_) => 0,
            };
            if n == 0 {
                problem = "; it shrank while archived, padded with zero bytes".to_owned();
                buf[..want].fill(0);
                out.write_all(&buf[..want]).map_err(w)?;
                left -= want as u64;
                continue;
            }
            out.write_all(&buf[..n]).map_err(w)?;
            left -= n as u64;
        }
    }
    pad(out, stored).map_err(w)?;
    Ok(problem)
}

fn from_read(rel: &[u8], e: io::Error) -> LeftoverError {
    match e.raw_os_error() {
        Some(raw) => host_or_refused(rel, rustix::io::Errno::from_raw_os_error(raw)),
        None => LeftoverError::Host {
            path: String::from_utf8_lossy(rel).into_owned(),
            source: e,
        },
    }
}

enum CopyError {
    Read(io::Error),
    Write(io::Error),
}

/// Copies exactly `size` bytes: a file that shrank since `fstat` is padded with zeros (the header
/// is already written) and one that grew is cut, the returned note saying which. A non-host read
/// error is treated like a shrink.
fn copy_up_to(
    f: &mut fs::File,
    out: &mut dyn Write,
    size: u64,
) -> Result<Option<String>, CopyError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut left = size;
    let mut problem = None;
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(buf.len()));
        let n = match f.read(&mut buf[..want]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error().is_some_and(is_host_errno) => {
                return Err(CopyError::Read(e));
            }
            Err(e) => {
                problem = Some(format!(
                    "reading it failed after {} bytes ({e})",
                    size - left
                ));
                // Pad below as for a shrink.
                0
            }
        };
        if n == 0 {
            let got = size - left;
            let why = problem
                .take()
                .unwrap_or_else(|| format!("it shrank to {got} bytes"));
            problem = Some(format!("{why} while archived; padded with zero bytes"));
            let zeros = vec![0u8; usize::try_from(left.min(buf.len() as u64)).unwrap_or(0)];
            while left > 0 {
                let k = zeros
                    .len()
                    .min(usize::try_from(left).unwrap_or(zeros.len()));
                out.write_all(&zeros[..k]).map_err(CopyError::Write)?;
                left -= k as u64;
            }
            break;
        }
        out.write_all(&buf[..n]).map_err(CopyError::Write)?;
        left -= n as u64;
    }
    if problem.is_none() {
        let mut one = [0u8; 1];
        if matches!(f.read(&mut one), Ok(1)) {
            problem = Some(format!(
                "it grew while archived; the first {size} bytes were kept"
            ));
        }
    }
    Ok(problem)
}

fn pad(out: &mut dyn Write, size: u64) -> io::Result<()> {
    let rem = (size % 512) as usize;
    if rem != 0 {
        out.write_all(&vec![0u8; 512 - rem])?;
    }
    Ok(())
}

fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    let bytes = text.as_bytes();
    let start = bytes.len().saturating_sub(width);
    field[..width].copy_from_slice(&bytes[start..]);
    field[width] = 0;
}

fn ustar_header(
    name: &[u8],
    link: &[u8],
    typeflag: u8,
    mode: u32,
    size: u64,
    dev: (u32, u32),
) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], mode as u64);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = typeflag;
    h[157..157 + link.len()].copy_from_slice(link);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    if matches!(typeflag, b'3' | b'4') {
        octal(&mut h[329..337], dev.0 as u64);
        octal(&mut h[337..345], dev.1 as u64);
    }
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|&b| b as u64).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    h
}

fn pax_record(key: &[u8], value: &[u8]) -> Vec<u8> {
    // "<len> key=value\n" where len counts itself.
    let body = [b" ", key, b"=", value, b"\n"].concat();
    let mut len = body.len() + 1;
    loop {
        let prefix = len.to_string();
        if prefix.len() + body.len() == len {
            return [prefix.as_bytes(), &body].concat();
        }
        len = prefix.len() + body.len();
    }
}

fn write_header(
    out: &mut dyn Write,
    name: &[u8],
    link: &[u8],
    typeflag: u8,
    mode: u32,
    size: u64,
    dev: (u32, u32),
) -> io::Result<()> {
    let name_utf8 = std::str::from_utf8(name).is_ok();
    let link_utf8 = std::str::from_utf8(link).is_ok();
    let pax_name = name.len() > 100 || !name_utf8;
    let pax_link = link.len() > 100 || !link_utf8;
    if pax_name || pax_link {
        let mut records = Vec::new();
        if !name_utf8 || !link_utf8 {
            // PAX values are UTF-8 unless this says otherwise; the bytes are kept exactly.
            records.extend(pax_record(b"hdrcharset", b"BINARY"));
        }
        if pax_name {
            records.extend(pax_record(b"path", name));
        }
        if pax_link {
            records.extend(pax_record(b"linkpath", link));
        }
        out.write_all(&ustar_header(
            b"././@PaxHeader",
            b"",
            b'x',
            0o644,
            records.len() as u64,
            (0, 0),
        ))?;
        out.write_all(&records)?;
        pad(out, records.len() as u64)?;
    }
    out.write_all(&ustar_header(
        truncate_name(name),
        truncate_name(link),
        typeflag,
        mode,
        size,
        dev,
    ))
}

/// The first 100 bytes of a name for the ustar field, cut at a character boundary when the name
/// is UTF-8 (the PAX record holds the whole name).
fn truncate_name(name: &[u8]) -> &[u8] {
    if name.len() <= 100 {
        return name;
    }
    match std::str::from_utf8(name) {
        Ok(s) => {
            let mut end = 100;
            while end > 0 && !s.is_char_boundary(end) {
                end -= 1;
            }
            &name[..end]
        }
        Err(_) => &name[..100],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sockets take no archive entry, only a note: a tree of millions of them must cost no more
    /// than `MAX_NOTES` notes, and which are kept must not depend on directory order.
    #[test]
    fn notes_keep_only_the_smallest_and_count_the_rest() {
        let mut notes = Notes::new();
        let total = MAX_NOTES + 500;
        for i in (0..total).rev() {
            notes.add(format!("{i:06}").as_bytes(), format!("n{i:06}"));
            assert!(notes.kept.len() <= MAX_NOTES);
        }
        let out = notes.finish();
        assert_eq!(out.len(), MAX_NOTES + 1);
        assert_eq!(out[0], "n000000");
        assert_eq!(out[MAX_NOTES - 1], format!("n{:06}", MAX_NOTES - 1));
        assert_eq!(out[MAX_NOTES], "500 more notes were left out");
    }

    fn tree(dir: &Path) {
        fs::create_dir_all(dir.join("src/nested")).unwrap();
        fs::write(dir.join("README.md"), b"hello\n").unwrap();
        fs::write(dir.join("src/main.py"), b"print('x')\n").unwrap();
        fs::write(dir.join("src/nested/data.bin"), vec![7u8; 1500]).unwrap();
        set_mode(&dir.join("src/main.py"), 0o755).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("../README.md", dir.join("src/link")).unwrap();
    }

    #[test]
    fn bytes_are_stored_under_their_digest_and_read_back_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(&tmp.path().join("artifacts")).unwrap();
        let d = store.put_bytes(b"abc").unwrap();
        assert_eq!(
            d.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let p = store.path_of(&d);
        assert!(p.ends_with(
            "sha256/ba/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        ));
        assert_eq!(store.get(&d).unwrap(), b"abc");
        // Storing again is a no-op with the same name.
        assert_eq!(store.put_bytes(b"abc").unwrap(), d);
        store.verify(&d).unwrap();
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(store.root().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn corruption_and_absence_are_detected() {
        let tmp = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(tmp.path()).unwrap();
        let d = store.put_bytes(b"payload").unwrap();
        let p = store.path_of(&d);
        set_mode(&p, 0o644).unwrap();
        fs::write(&p, b"PAYLOAD").unwrap();
        assert!(matches!(
            store.verify(&d),
            Err(ArtifactError::Corrupt { .. })
        ));
        assert!(matches!(store.get(&d), Err(ArtifactError::Corrupt { .. })));
        let missing = Digest::of(b"nope");
        assert!(matches!(
            store.verify(&missing),
            Err(ArtifactError::Missing { .. })
        ));
    }

    #[test]
    fn file_objects_are_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(tmp.path()).unwrap();
        let src = tmp.path().join("f.txt");
        fs::write(&src, b"file body").unwrap();
        let d = store.put_file(&src).unwrap();
        assert_eq!(d, Digest::of(b"file body"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(store.path_of(&d))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o444);
        }
    }

    #[test]
    fn directory_archives_are_deterministic_and_sensitive() {
        let tmp = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(&tmp.path().join("store")).unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        tree(&a);
        tree(&b);
        // Other mtimes, same content: set explicitly, not hoped for from a pause between writes.
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        for f in ["README.md", "src/main.py", "src/nested/data.bin"] {
            let file = fs::File::options().write(true).open(b.join(f)).unwrap();
            file.set_modified(old).unwrap();
            assert_ne!(
                fs::metadata(a.join(f)).unwrap().modified().unwrap(),
                fs::metadata(b.join(f)).unwrap().modified().unwrap()
            );
        }
        let da = store.put_dir(&a).unwrap();
        let db = store.put_dir(&b).unwrap();
        assert_eq!(da, db, "mtimes must not enter the archive");
        assert!(da.notes.is_empty(), "{:?}", da.notes);
        // README.md, src/, src/main.py, src/link, src/nested/, src/nested/data.bin
        assert_eq!((da.entries, da.bytes), (6, 6 + 11 + 1500));
        store.verify(&da.digest).unwrap();

        // The exec bit changes the archive.
        set_mode(&b.join("src/main.py"), 0o644).unwrap();
        let db2 = store.put_dir(&b).unwrap();
        assert_ne!(da.digest, db2.digest);
        // So does a rename.
        fs::rename(b.join("README.md"), b.join("README.txt")).unwrap();
        assert_ne!(store.put_dir(&b).unwrap().digest, db2.digest);
    }

    #[test]
    fn archives_are_readable_by_system_tar() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        tree(&src);
        let long = "d".repeat(60);
        fs::create_dir_all(src.join(&long).join(&long)).unwrap();
        fs::write(src.join(&long).join(&long).join("deep.txt"), b"deep").unwrap();
        let mut buf = Vec::new();
        tar_dir(&src, &mut buf).unwrap();
        assert_eq!(buf.len() % 512, 0);
        let archive = tmp.path().join("x.tar");
        fs::write(&archive, &buf).unwrap();
        let out_dir = tmp.path().join("out");
        fs::create_dir_all(&out_dir).unwrap();
        let status = std::process::Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&out_dir)
            .status();
        let Ok(status) = status else { return }; // no tar on this machine
        assert!(status.success());
        assert_eq!(fs::read(out_dir.join("README.md")).unwrap(), b"hello\n");
        assert_eq!(
            fs::read(out_dir.join(&long).join(&long).join("deep.txt")).unwrap(),
            b"deep"
        );
        assert_eq!(
            fs::read(out_dir.join("src/nested/data.bin")).unwrap().len(),
            1500
        );
        #[cfg(unix)]
        assert_eq!(
            fs::read_link(out_dir.join("src/link")).unwrap(),
            PathBuf::from("../README.md")
        );
    }

    /// A file of 1 GiB that holds 8 KiB of data costs its data in the archive, never its size,
    /// and GNU tar restores it byte for byte (holes read as zeros); a file without holes stays a
    /// plain entry.
    #[test]
    fn a_sparse_file_is_archived_by_its_data_and_restored_by_system_tar() {
        use std::io::{Seek, SeekFrom};
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("d")).unwrap();
        let size: u64 = 1 << 30;
        let mut f = fs::File::create(src.join("d/sparse.img")).unwrap();
        f.seek(SeekFrom::Start(1 << 20)).unwrap();
        f.write_all(&[0xab; 4096]).unwrap();
        f.seek(SeekFrom::Start(size - 4096)).unwrap();
        f.write_all(&[0xcd; 4096]).unwrap();
        drop(f);
        let mut tail_hole = fs::File::create(src.join("tail-hole")).unwrap();
        tail_hole.write_all(b"head").unwrap();
        tail_hole.set_len(64 << 20).unwrap();
        drop(tail_hole);
        fs::write(src.join("dense.txt"), b"dense\n").unwrap();
        let probe = fs::File::open(src.join("d/sparse.img")).unwrap();
        if data_regions(&probe, size).unwrap().is_none() {
            return; // this filesystem reports no holes; nothing to test here
        }
        let mut buf = Vec::new();
        let summary = tar_dir(&src, &mut buf).unwrap();
        assert!(
            buf.len() < 1 << 20,
            "a 1 GiB sparse file took {} archive bytes",
            buf.len()
        );
        assert_eq!(summary.bytes, 8192 + 4096 + 6, "{summary:?}");
        assert!(
            summary
                .notes
                .iter()
                .any(|n| n.contains("\"d/sparse.img\": sparse file of 1073741824 bytes")),
            "{:?}",
            summary.notes
        );
        // The same tree gives the same bytes.
        let mut again = Vec::new();
        tar_dir(&src, &mut again).unwrap();
        assert_eq!(buf, again);
        let archive = tmp.path().join("x.tar");
        fs::write(&archive, &buf).unwrap();
        let out_dir = tmp.path().join("out");
        fs::create_dir_all(&out_dir).unwrap();
        let status = std::process::Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&out_dir)
            .status();
        let Ok(status) = status else { return }; // no tar on this machine
        assert!(status.success());
        let restored = out_dir.join("d/sparse.img");
        assert_eq!(fs::metadata(&restored).unwrap().len(), size);
        let mut r = fs::File::open(&restored).unwrap();
        let mut block = vec![0u8; 4096];
        for (at, byte) in [
            (0u64, 0u8),
            (1 << 20, 0xab),
            ((1 << 20) + 4096, 0),
            (size - 4096, 0xcd),
        ] {
            r.seek(SeekFrom::Start(at)).unwrap();
            r.read_exact(&mut block).unwrap();
            assert!(block.iter().all(|b| *b == byte), "at {at}");
        }
        let t = fs::read(out_dir.join("tail-hole")).unwrap();
        assert_eq!(t.len(), 64 << 20);
        assert_eq!(&t[..4], b"head");
        assert!(t[4..].iter().all(|b| *b == 0));
        assert_eq!(fs::read(out_dir.join("dense.txt")).unwrap(), b"dense\n");
        assert!(!out_dir.join("d/GNUSparseFile.0").exists());
    }

    /// Every clone of a budgeted store draws on one budget, which starts from what the store
    /// already holds; a refused object leaves nothing behind and costs nothing, and an object
    /// already present is free.
    #[test]
    fn a_budget_is_shared_counts_what_is_stored_and_refuses_past_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        let first = ArtifactStore::open(&root).unwrap();
        first.put_bytes(&[1u8; 1000]).unwrap();
        let store = ArtifactStore::open(&root)
            .unwrap()
            .with_budget(5000)
            .unwrap();
        assert_eq!(store.budget(), Some((5000, 1000)));
        let clone = store.clone();
        clone.put_bytes(&[2u8; 3000]).unwrap();
        assert_eq!(store.budget(), Some((5000, 4000)));
        // Present already: free.
        store.put_bytes(&[1u8; 1000]).unwrap();
        assert_eq!(store.budget(), Some((5000, 4000)));
        let e = store.put_bytes(&[3u8; 1001]).unwrap_err();
        assert!(
            matches!(e, ArtifactError::OverBudget { max: 5000, .. }),
            "{e}"
        );
        assert!(!e.is_host_fault());
        assert_eq!(store.budget(), Some((5000, 4000)));
        assert_eq!(fs::read_dir(root.join("tmp")).unwrap().count(), 0);
        // A directory archive is refused the same way, and what fits still fits.
        let src = tmp.path().join("src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("big"), vec![9u8; 4000]).unwrap();
        let e = clone.put_dir(&src).unwrap_err();
        assert!(matches!(e, ArtifactError::OverBudget { .. }), "{e}");
        assert_eq!(fs::read_dir(root.join("tmp")).unwrap().count(), 0);
        assert_eq!(store.budget(), Some((5000, 4000)));
        store.put_bytes(&[4u8; 1000]).unwrap();
        assert_eq!(store.budget(), Some((5000, 5000)));
    }

    /// Issue 33 item 9: one attempt writing far past its share can no longer take another
    /// attempt's bytes. Each reserved its quota up front; only the writer's own write fails
    /// (scope: its quota), the other still stores its whole quota, and what an attempt did not
    /// use goes back to the run when its store is dropped.
    #[test]
    fn an_attempt_past_its_own_quota_fails_alone_and_never_takes_another_attempts_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let run = ArtifactStore::open(&tmp.path().join("store"))
            .unwrap()
            .with_budget(10_000)
            .unwrap();
        let writer = run.reserve_quota(4000).unwrap();
        let quiet = run.reserve_quota(4000).unwrap();
        assert_eq!(run.budget(), Some((10_000, 8000)));
        // The writer fills its quota, then tries far more (the run still has 2000 free).
        writer.put_bytes(&[1u8; 4000]).unwrap();
        let e = writer.clone().put_bytes(&[2u8; 1500]).unwrap_err();
        assert!(
            matches!(
                e,
                ArtifactError::OverBudget {
                    scope: QUOTA_SCOPE,
                    max: 4000,
                    used: 4000,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("this attempt's artifact quota"),
            "{e}"
        );
        assert_eq!(writer.quota(), Some((4000, 4000)));
        // The unreserved rest of the run (the wire log's) is left alone by the refused write.
        run.put_bytes(&[3u8; 1500]).unwrap();
        assert_eq!(run.budget(), Some((10_000, 9500)));
        // The quiet attempt stores its whole quota, a workspace archive included.
        let src = tmp.path().join("src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("f"), vec![7u8; 1000]).unwrap();
        let archived = quiet.put_dir(&src).unwrap();
        let left = 4000 - quiet.quota().unwrap().1;
        quiet.put_bytes(&vec![4u8; left as usize]).unwrap();
        assert!(quiet.contains(&archived.digest));
        assert_eq!(quiet.quota(), Some((4000, 4000)));
        // Ended: nothing unused to give back (both used all), the run's count stays exact.
        drop((writer, quiet));
        assert_eq!(run.budget(), Some((10_000, 9500)));
        // An attempt that used little gives the rest back at its end.
        let small = run.reserve_quota(500).unwrap();
        small.put_bytes(&[5u8; 100]).unwrap();
        assert_eq!(run.budget(), Some((10_000, 10_000)));
        drop(small);
        assert_eq!(run.budget(), Some((10_000, 9600)));
    }

    /// A quota the run's budget can no longer cover is refused up front, naming the run's
    /// budget (the controller then stops the run), and takes nothing.
    #[test]
    fn a_quota_the_run_budget_cannot_cover_is_refused_and_takes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let run = ArtifactStore::open(&tmp.path().join("store"))
            .unwrap()
            .with_budget(5000)
            .unwrap();
        run.put_bytes(&[1u8; 3000]).unwrap();
        let e = run.reserve_quota(2001).unwrap_err();
        assert!(
            matches!(
                e,
                ArtifactError::OverBudget {
                    scope: RUN_SCOPE,
                    max: 5000,
                    used: 3000,
                    written: 2001
                }
            ),
            "{e}"
        );
        assert_eq!(run.budget(), Some((5000, 3000)));
        let fits = run.reserve_quota(2000).unwrap();
        assert_eq!(run.budget(), Some((5000, 5000)));
        drop(fits);
        assert_eq!(run.budget(), Some((5000, 3000)));
    }

    /// One parsed tar entry: name, typeflag, link target, content (PAX records applied).
    #[derive(Debug)]
    struct Parsed {
        name: Vec<u8>,
        typeflag: u8,
        link: Vec<u8>,
        content: Vec<u8>,
    }

    fn field(h: &[u8]) -> Vec<u8> {
        h.iter().take_while(|&&b| b != 0).copied().collect()
    }

    fn num(h: &[u8]) -> u64 {
        let t = String::from_utf8(field(h)).unwrap();
        u64::from_str_radix(t.trim(), 8).unwrap_or(0)
    }

    fn pax(records: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let mut rest = records;
        while !rest.is_empty() {
            let sp = rest.iter().position(|&b| b == b' ').unwrap();
            let len: usize = std::str::from_utf8(&rest[..sp]).unwrap().parse().unwrap();
            let rec = &rest[sp + 1..len - 1];
            let eq = rec.iter().position(|&b| b == b'=').unwrap();
            out.push((rec[..eq].to_vec(), rec[eq + 1..].to_vec()));
            rest = &rest[len..];
        }
        out
    }

    /// Parses the archive; returns its entries and the global header's `comment`, if any.
    fn parse(tar: &[u8]) -> (Vec<Parsed>, Option<String>) {
        let mut out = Vec::new();
        let mut comment = None;
        let (mut path, mut linkpath) = (None, None);
        let mut at = 0;
        while at + 512 <= tar.len() {
            let h = &tar[at..at + 512];
            if h.iter().all(|&b| b == 0) {
                break;
            }
            let size = num(&h[124..136]) as usize;
            let body = tar[at + 512..at + 512 + size].to_vec();
            at += 512 + size.div_ceil(512) * 512;
            match h[156] {
                b'x' => {
                    for (k, v) in pax(&body) {
                        match k.as_slice() {
                            b"path" => path = Some(v),
                            b"linkpath" => linkpath = Some(v),
                            b"hdrcharset" => assert_eq!(v, b"BINARY"),
                            other => panic!("unexpected PAX key {other:?}"),
                        }
                    }
                }
                b'g' => {
                    let recs = pax(&body);
                    assert_eq!(recs.len(), 1);
                    assert_eq!(recs[0].0, b"comment");
                    comment = Some(String::from_utf8(recs[0].1.clone()).unwrap());
                }
                t => out.push(Parsed {
                    name: path.take().unwrap_or_else(|| field(&h[..100])),
                    typeflag: t,
                    link: linkpath.take().unwrap_or_else(|| field(&h[157..257])),
                    content: body,
                }),
            }
        }
        (out, comment)
    }

    fn find<'a>(entries: &'a [Parsed], name: &[u8]) -> &'a Parsed {
        entries
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no entry {:?}", String::from_utf8_lossy(name)))
    }

    #[cfg(unix)]
    fn hostile_tree(ws: &Path, canary: &Path) -> (Vec<u8>, String, String) {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::symlink;
        fs::create_dir_all(ws).unwrap();
        fs::write(ws.join("ok.txt"), b"fine").unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            ws.join("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        // The socket file stays after the listener is dropped.
        drop(std::os::unix::net::UnixListener::bind(ws.join("sock")).unwrap());
        let bad = b"bad-\xff\xfe.txt".to_vec();
        fs::write(ws.join(std::ffi::OsStr::from_bytes(&bad)), b"odd name").unwrap();
        symlink("/etc/shadow", ws.join("shadow")).unwrap();
        symlink(canary, ws.join("canary")).unwrap();
        symlink("/proc/self/environ", ws.join("environ")).unwrap();
        symlink("does/not/exist", ws.join("dangling")).unwrap();
        let mut deep = ws.to_path_buf();
        let mut deep_rel = String::new();
        for i in 0..100 {
            deep.push(format!("l{i}"));
            deep_rel.push_str(&format!("l{i}/"));
        }
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("bottom.txt"), b"bottom").unwrap();
        deep_rel.push_str("bottom.txt");
        let long_name = "n".repeat(150);
        fs::write(ws.join(&long_name), b"long").unwrap();
        let long_target = format!("/{}", "t".repeat(180));
        symlink(&long_target, ws.join("longlink")).unwrap();
        (bad, deep_rel, long_target + "|" + &long_name)
    }

    #[cfg(unix)]
    #[test]
    fn a_hostile_tree_archives_faithfully_and_never_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let canary = tmp.path().join("canary-secret");
        fs::write(&canary, b"CANARY-7f3a9d-host-secret").unwrap();
        let ws = tmp.path().join("ws");
        let (bad, deep_rel, longs) = hostile_tree(&ws, &canary);
        let (long_target, long_name) = longs.split_once('|').unwrap();
        let store = ArtifactStore::open(&tmp.path().join("store")).unwrap();

        let first = store.put_dir(&ws).unwrap();
        let second = store.put_dir(&ws).unwrap();
        assert_eq!(first, second, "same tree, same archive and notes");
        let bytes = store.get(&first.digest).unwrap();
        let hay = String::from_utf8_lossy(&bytes);
        assert!(!hay.contains("CANARY-7f3a9d"), "a link was followed");

        let (entries, comment) = parse(&bytes);
        let link = |name: &str, target: &str| {
            let e = find(&entries, name.as_bytes());
            assert_eq!((e.typeflag, e.link.as_slice()), (b'2', target.as_bytes()));
            assert!(e.content.is_empty());
        };
        link("shadow", "/etc/shadow");
        link("canary", canary.to_str().unwrap());
        link("environ", "/proc/self/environ");
        link("dangling", "does/not/exist");
        link("longlink", long_target);
        assert_eq!(find(&entries, long_name.as_bytes()).content, b"long");
        assert_eq!(find(&entries, deep_rel.as_bytes()).content, b"bottom");
        assert_eq!(find(&entries, &bad).content, b"odd name");
        let fifo = find(&entries, b"fifo");
        assert_eq!((fifo.typeflag, fifo.content.len()), (b'6', 0));
        assert!(
            !entries.iter().any(|e| e.name == b"sock"),
            "a socket has no tar type"
        );
        assert_eq!(entries.len() as u64, first.entries);
        // 100 directories, bottom.txt, ok.txt, the FIFO, the odd name, the long name, 5 links.
        assert_eq!(first.entries, 100 + 10);

        // The notes say what was recorded how, in the summary and inside the archive.
        let notes = first.notes.join("\n");
        assert_eq!(first.notes.len(), 3, "{notes}");
        assert!(notes.contains("\"fifo\": a FIFO, recorded as a ustar type 6 entry"));
        assert!(notes.contains("\"sock\": a socket has no tar type; recorded only in this note"));
        assert!(notes.contains("\"bad-\\xff\\xfe.txt\": name is not UTF-8; recorded byte-exact"));
        assert_eq!(comment.unwrap(), notes + "\n");
    }

    #[cfg(unix)]
    #[test]
    fn system_tar_restores_special_entries_and_binary_names() {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::FileTypeExt;
        let tmp = tempfile::tempdir().unwrap();
        let canary = tmp.path().join("canary");
        fs::write(&canary, b"c").unwrap();
        let ws = tmp.path().join("ws");
        let (bad, deep_rel, _) = hostile_tree(&ws, &canary);
        let mut buf = Vec::new();
        tar_dir(&ws, &mut buf).unwrap();
        let archive = tmp.path().join("x.tar");
        fs::write(&archive, &buf).unwrap();
        let out = tmp.path().join("out");
        fs::create_dir_all(&out).unwrap();
        let Ok(status) = std::process::Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&out)
            .status()
        else {
            return; // no tar on this machine
        };
        assert!(status.success());
        assert_eq!(
            fs::read(out.join(std::ffi::OsStr::from_bytes(&bad))).unwrap(),
            b"odd name"
        );
        assert!(
            fs::symlink_metadata(out.join("fifo"))
                .unwrap()
                .file_type()
                .is_fifo()
        );
        assert_eq!(
            fs::read_link(out.join("shadow")).unwrap(),
            Path::new("/etc/shadow")
        );
        assert_eq!(fs::read(out.join(deep_rel)).unwrap(), b"bottom");
    }

    #[test]
    fn caps_leave_entries_out_with_a_note_never_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(ws.join("a/b/c/d")).unwrap();
        fs::write(ws.join("a/b/c/d/deep.txt"), b"deep").unwrap();
        for i in 0..5 {
            fs::write(ws.join(format!("f{i}")), vec![b'x'; 100]).unwrap();
        }
        let limits = ArchiveLimits {
            max_entries: 1000,
            max_bytes: 250,
            max_depth: 3,
            max_path_bytes: 1 << 20,
        };
        let mut one = Vec::new();
        let s = tar_dir_with(&ws, &limits, &mut one).unwrap();
        let (entries, _) = parse(&one);
        // Depth: a, a/b, a/b/c listed; a/b/c's contents are not.
        assert!(entries.iter().any(|e| e.name == b"a/b/c/"));
        assert!(!entries.iter().any(|e| e.name.starts_with(b"a/b/c/d")));
        // Bytes: two 100-byte files fit under 250, the third does not; sorted order decides.
        let files: Vec<_> = entries.iter().filter(|e| e.typeflag == b'0').collect();
        assert_eq!(files.len(), 2);
        assert_eq!(
            (files[0].name.as_slice(), files[1].name.as_slice()),
            (&b"f0"[..], &b"f1"[..])
        );
        assert_eq!(s.bytes, 200);
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("\"a/b/c\": deeper than 3 levels"))
        );
        for f in ["f2", "f3", "f4"] {
            assert!(
                s.notes
                    .iter()
                    .any(|n| n.starts_with(&format!("\"{f}\": 100 bytes not archived"))),
                "{:?}",
                s.notes
            );
        }

        let entry_cap = ArchiveLimits {
            max_entries: 3,
            ..ArchiveLimits::default()
        };
        let mut two = Vec::new();
        let s2 = tar_dir_with(&ws, &entry_cap, &mut two).unwrap();
        // Kept in sorted order: a/, f0, f1; left out: f2..f4 and a/b (whose contents are not
        // even listed).
        assert_eq!(s2.entries, 3);
        let names: Vec<_> = parse(&two).0.into_iter().map(|e| e.name).collect();
        assert_eq!(names, [&b"a/"[..], b"f0", b"f1"]);
        assert!(
            s2.notes
                .iter()
                .any(|n| n.starts_with("4 entries were not archived")),
            "{:?}",
            s2.notes
        );
        let mut again = Vec::new();
        tar_dir_with(&ws, &entry_cap, &mut again).unwrap();
        assert_eq!(two, again);
    }

    #[test]
    fn only_host_failures_are_host_faults() {
        let io = |errno| ArtifactError::Io {
            path: PathBuf::from("x"),
            source: io::Error::from_raw_os_error(errno),
        };
        assert!(io(28).is_host_fault()); // ENOSPC
        assert!(io(122).is_host_fault()); // EDQUOT
        assert!(io(5).is_host_fault()); // EIO
        assert!(!io(13).is_host_fault()); // EACCES
        let leftover = ArtifactError::Leftover {
            dir: PathBuf::from("ws"),
            source: LeftoverError::NotRegular {
                path: "ws".into(),
                kind: "symlink",
            },
        };
        assert!(!leftover.is_host_fault());
        assert!(
            !ArtifactError::Missing {
                digest: Digest::of(b"")
            }
            .is_host_fault()
        );
    }
}
