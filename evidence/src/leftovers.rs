//! The one reader of files that came back from a container (see "Files left behind" in
//! docs/containers.md).
//!
//! Everything under an attempt's directory was written by the agent or its grader, so it is
//! hostile input: a name may be a symlink to a host secret (`/proc/self/environ`, `/etc/shadow`),
//! a FIFO that blocks whoever opens it, a link to `/dev/zero`, or a file too big to hold. Every
//! open here is relative to a root directory *fd* and never follows a symlink at any component:
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`
//! where the kernel has it, and otherwise (or when it refuses, to tell the caller precisely why)
//! one `openat(O_NOFOLLOW)` per component, checking that no component changes file system.
//! Opens are `O_NONBLOCK | O_NOCTTY` so a FIFO or device can never block them, and the opened fd
//! is `fstat`ed: only regular files are read, and reads are capped per file and, through a shared
//! [`Budget`], per attempt.
//!
//! Errors say whose doing a failure was: [`LeftoverError::Host`] (EIO, ENOMEM, ENOSPC, EDQUOT,
//! EMFILE, ENFILE) is the only kind the agent cannot cause; every other variant describes what
//! the agent left behind and must become an outcome, never an infrastructure fault.

use rustix::fs::{self as rfs, AtFlags, Dir, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Set once the kernel (or a seccomp filter) answers `openat2` with ENOSYS, so later opens go
/// straight to the per-component walk.
static OPENAT2_UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// Directory fds held at once while removing a tree; deeper directories are moved up first (see
/// [`Beneath::remove`]), so an agent's 10,000-level tree cannot exhaust the controller's fds.
const MAX_HELD_DIRS: usize = 32;

/// Why a file the container left behind was not read.
#[derive(thiserror::Error, Debug)]
pub enum LeftoverError {
    /// The agent did not leave the file.
    #[error("{path:?} does not exist")]
    NotFound {
        /// The path asked for, relative to the attempt's root.
        path: String,
    },
    /// A directory, FIFO, device or socket where a file was expected.
    #[error("{path:?} is a {kind}, not a regular file; it was not read")]
    NotRegular {
        /// The path, relative to the root.
        path: String,
        /// What it is instead (`directory`, `fifo`, …).
        kind: &'static str,
    },
    /// Bigger than the per-file cap or the attempt's remaining [`Budget`].
    #[error("{path:?} is larger than the limit of {limit} bytes; it was not read")]
    TooLarge {
        /// The path, relative to the root.
        path: String,
        /// The limit it exceeded, in bytes.
        limit: u64,
    },
    /// A path that is empty, absolute, contains NUL or `..`, or names the root itself.
    #[error("{path:?} is not an acceptable relative path: {reason}")]
    BadPath {
        /// The path as given.
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// Anything else from the agent's files (EACCES, ELOOP, EXDEV, EINVAL…): the agent's doing.
    #[error("{path:?} was refused: {}", io::Error::from_raw_os_error(*errno))]
    Refused {
        /// The path, relative to the root.
        path: String,
        /// The raw OS error number.
        errno: i32,
    },
    /// A failure of the host itself (EIO, ENOMEM, ENOSPC, EDQUOT, EMFILE, ENFILE): never caused
    /// by what the agent left behind. Only this one may become an infrastructure fault.
    #[error("{path:?}: host I/O failure: {source}")]
    Host {
        /// The path, relative to the root.
        path: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl LeftoverError {
    /// True only for failures of the host itself, which the agent cannot cause.
    pub fn is_host_fault(&self) -> bool {
        matches!(self, LeftoverError::Host { .. })
    }
}

/// The errnos that only the host can cause: the agent cannot fill the controller's disk or fd
/// table through the files it leaves behind (its own disk is a bounded tmpfs or workspace quota).
pub(crate) fn is_host_errno(raw: i32) -> bool {
    [
        Errno::IO,
        Errno::NOMEM,
        Errno::NOSPC,
        Errno::DQUOT,
        Errno::MFILE,
        Errno::NFILE,
    ]
    .iter()
    .any(|e| e.raw_os_error() == raw)
}

fn from_errno(path: &str, e: Errno) -> LeftoverError {
    if e == Errno::NOENT {
        LeftoverError::NotFound { path: path.into() }
    } else if is_host_errno(e.raw_os_error()) {
        LeftoverError::Host {
            path: path.into(),
            source: e.into(),
        }
    } else {
        LeftoverError::Refused {
            path: path.into(),
            errno: e.raw_os_error(),
        }
    }
}

fn from_io(path: &str, e: io::Error) -> LeftoverError {
    match e.raw_os_error() {
        Some(raw) if !is_host_errno(raw) => from_errno(path, Errno::from_raw_os_error(raw)),
        // An error without an errno comes from our own side (e.g. allocation): the host's.
        _ => LeftoverError::Host {
            path: path.into(),
            source: e,
        },
    }
}

pub(crate) fn kind_name(ft: FileType) -> &'static str {
    match ft {
        FileType::RegularFile => "regular_file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "char_device",
        FileType::BlockDevice => "block_device",
        FileType::Unknown => "unknown",
    }
}

/// Splits a relative path into its components, dropping empty and `.` ones. Refuses what could
/// name something outside the root. An empty result names the root itself.
fn split(rel: &str) -> Result<Vec<&[u8]>, LeftoverError> {
    let bad = |reason| LeftoverError::BadPath {
        path: rel.into(),
        reason,
    };
    if rel.is_empty() {
        return Err(bad("it is empty"));
    }
    if rel.contains('\0') {
        return Err(bad("it contains a NUL byte"));
    }
    if rel.starts_with('/') {
        return Err(bad("it is absolute"));
    }
    let mut out = Vec::new();
    for c in rel.as_bytes().split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err(bad("it contains `..`")),
            c => out.push(c),
        }
    }
    Ok(out)
}

pub(crate) fn show(comps: &[&[u8]]) -> String {
    String::from_utf8_lossy(&comps.join(&b'/')).into_owned()
}

/// A byte allowance shared by every read of one attempt, so that many files each under the
/// per-file cap still cannot make the controller hold unbounded memory.
#[derive(Debug)]
pub struct Budget {
    remaining: AtomicU64,
}

impl Budget {
    /// An allowance of `total` bytes for one attempt's reads.
    pub fn new(total: u64) -> Self {
        Self {
            remaining: AtomicU64::new(total),
        }
    }

    /// Bytes still allowed.
    pub fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::Acquire)
    }

    /// Takes `n` bytes from the allowance, or nothing if fewer remain.
    fn take(&self, n: u64) -> bool {
        self.remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(n))
            .is_ok()
    }
}

/// What [`Beneath::read_tree`] read.
#[derive(Debug, Default)]
pub struct TreeRead {
    /// Each regular file's path (relative, `/`-separated) and bytes, in path order.
    pub files: Vec<(String, Vec<u8>)>,
    /// The directories listed (relative), in path order.
    pub dirs: Vec<String>,
    /// What was not read: links, FIFOs, devices, sockets, names not UTF-8, directories too deep.
    pub skipped: Vec<String>,
}

/// An open root directory; every path handed to it is resolved beneath it.
#[derive(Debug)]
pub struct Beneath {
    root: OwnedFd,
    dev: u64,
}

impl Beneath {
    /// Opens `root` (chosen by the controller, so trusted — but its last component must still not
    /// be a symlink).
    pub fn open(root: &Path) -> Result<Beneath, LeftoverError> {
        let shown = root.display().to_string();
        let fd = rfs::openat(
            rfs::CWD,
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => match rfs::lstat(root) {
                Ok(st) => LeftoverError::NotRegular {
                    path: shown.clone(),
                    kind: kind_name(FileType::from_raw_mode(st.st_mode)),
                },
                Err(e) => from_errno(&shown, e),
            },
            e => from_errno(&shown, e),
        })?;
        let st = rfs::fstat(&fd).map_err(|e| from_errno(&shown, e))?;
        Ok(Beneath {
            root: fd,
            dev: st.st_dev,
        })
    }

    /// Whole file, at most `max` bytes (TooLarge beyond).
    pub fn read_file(&self, rel: &str, max: u64) -> Result<Vec<u8>, LeftoverError> {
        self.read_capped(rel, max, None)
    }

    /// Like [`Beneath::read_file`], and the bytes read are also taken from `budget`; beyond what
    /// remains of it the file is TooLarge (with the remaining allowance as the limit).
    pub fn read_file_within(
        &self,
        rel: &str,
        max: u64,
        budget: &Budget,
    ) -> Result<Vec<u8>, LeftoverError> {
        self.read_capped(rel, max, Some(budget))
    }

    /// Removes `rel` (file, link, or directory tree) without ever leaving the root or
    /// following a link; refuses `..`, absolute paths and the root itself. Nothing there is
    /// success. A directory deeper than the fds this holds is moved up, under the parent of `rel`
    /// as `.eval-remove-N`, and removed from there in the same call.
    pub fn remove(&self, rel: &str) -> Result<(), LeftoverError> {
        let comps = split(rel)?;
        let Some((last, parents)) = comps.split_last() else {
            return Err(LeftoverError::BadPath {
                path: rel.into(),
                reason: "it names the root itself",
            });
        };
        let parent = if parents.is_empty() {
            None
        } else {
            match self.open_at(parents, dir_flags()) {
                Ok(fd) => Some(fd),
                Err(LeftoverError::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(e),
            }
        };
        let pfd = parent.as_ref().map_or(self.root.as_fd(), |p| p.as_fd());
        let st = match rfs::statat(pfd, *last, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(from_errno(rel, e)),
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            if st.st_dev != self.dev {
                return Err(from_errno(rel, Errno::XDEV));
            }
            self.remove_tree(pfd, last.to_vec(), rel)
        } else {
            match rfs::unlinkat(pfd, *last, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(from_errno(rel, e)),
            }
        }
    }

    /// The one file `pattern` names, whole, at most `max` bytes. Each component of `pattern` is a
    /// name, or a prefix followed by `*` that must match exactly one entry of its directory (an
    /// entry of any kind; a link or non-directory on the way fails the open as everywhere here).
    /// A directory is listed only as far as `max_entries` entries, so an agent-made directory of
    /// millions of entries costs a bounded read. No match is `NotFound`; two are `BadPath`.
    pub fn read_found(
        &self,
        pattern: &str,
        max_entries: usize,
        max: u64,
    ) -> Result<Vec<u8>, LeftoverError> {
        let pat = split(pattern)?;
        let mut found: Vec<Vec<u8>> = Vec::with_capacity(pat.len());
        for seg in pat {
            let Some(prefix) = seg.strip_suffix(b"*") else {
                found.push(seg.to_vec());
                continue;
            };
            let comps: Vec<&[u8]> = found.iter().map(Vec::as_slice).collect();
            let shown = show(&comps);
            let mut dir = self.open_dir(&comps)?;
            let (mut hit, mut listed) = (None, 0usize);
            while let Some(entry) = dir.read() {
                let entry = entry.map_err(|e| from_errno(&shown, e))?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                listed += 1;
                if listed > max_entries {
                    return Err(LeftoverError::BadPath {
                        path: pattern.into(),
                        reason: "a directory on its way holds more entries than are listed",
                    });
                }
                if name.starts_with(prefix) {
                    if hit.is_some() {
                        return Err(LeftoverError::BadPath {
                            path: pattern.into(),
                            reason: "more than one entry matches a `*` component",
                        });
                    }
                    hit = Some(name.to_vec());
                }
            }
            match hit {
                Some(name) => found.push(name),
                None => {
                    return Err(LeftoverError::NotFound {
                        path: pattern.into(),
                    });
                }
            }
        }
        let comps: Vec<&[u8]> = found.iter().map(Vec::as_slice).collect();
        self.read_comps(&comps, &show(&comps), max, None)
    }

    /// Every file `pattern` names, each whole, all together at most `max_total` bytes: like
    /// [`Beneath::read_found`], but a `*` component matches every entry of its directory that
    /// starts with its prefix (at most `max_entries` listed per directory). A match that leads
    /// nowhere — a later name missing beneath it, or a non-directory where the pattern goes on —
    /// is no match; any other failure (a link, a non-regular file, a refusal) fails the whole
    /// read, as does more than `max_total` bytes. Returns (path, bytes) in path order; none
    /// found is an empty list.
    pub fn read_found_all(
        &self,
        pattern: &str,
        max_entries: usize,
        max_total: u64,
    ) -> Result<Vec<(String, Vec<u8>)>, LeftoverError> {
        let pat = split(pattern)?;
        let leads_nowhere = |e: &LeftoverError| match e {
            LeftoverError::NotFound { .. } => true,
            LeftoverError::Refused { errno, .. } => *errno == Errno::NOTDIR.raw_os_error(),
            _ => false,
        };
        let mut found: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
        for (i, seg) in pat.iter().enumerate() {
            let Some(prefix) = seg.strip_suffix(b"*") else {
                for f in &mut found {
                    f.push(seg.to_vec());
                }
                continue;
            };
            let mut next = Vec::new();
            for f in &found {
                let comps: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
                let shown = show(&comps);
                let mut dir = match self.open_dir(&comps) {
                    Ok(d) => d,
                    // The root itself must open; below it, a dead end is no match.
                    Err(e) if i > 0 && leads_nowhere(&e) => continue,
                    Err(e) => return Err(e),
                };
                let (mut names, mut listed) = (Vec::new(), 0usize);
                while let Some(entry) = dir.read() {
                    let entry = entry.map_err(|e| from_errno(&shown, e))?;
                    let name = entry.file_name().to_bytes();
                    if name == b"." || name == b".." {
                        continue;
                    }
                    listed += 1;
                    if listed > max_entries {
                        return Err(LeftoverError::BadPath {
                            path: pattern.into(),
                            reason: "a directory on its way holds more entries than are listed",
                        });
                    }
                    if name.starts_with(prefix) {
                        names.push(name.to_vec());
                    }
                }
                names.sort();
                for name in names {
                    let mut g = f.clone();
                    g.push(name);
                    next.push(g);
                }
            }
            found = next;
        }
        found.sort();
        let budget = Budget::new(max_total);
        let mut out = Vec::with_capacity(found.len());
        for f in &found {
            let comps: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
            let shown = show(&comps);
            match self.read_comps(&comps, &shown, max_total, Some(&budget)) {
                Ok(bytes) => out.push((shown, bytes)),
                Err(e) if leads_nowhere(&e) => {}
                Err(LeftoverError::TooLarge { .. }) => {
                    return Err(LeftoverError::TooLarge {
                        path: pattern.into(),
                        limit: max_total,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Every regular file beneath the root, whole, as (path, bytes) in path order, and the paths
    /// skipped: links, FIFOs, devices and sockets (never followed or opened blocking), names that
    /// are not UTF-8, and directories deeper than `max_depth`. At most `max_entries` entries are
    /// listed in all and `max_total` bytes read in all (`BadPath` / `TooLarge` beyond), so a
    /// container's capture of millions of files or an endless one costs a bounded read.
    pub fn read_tree(
        &self,
        max_depth: usize,
        max_entries: usize,
        max_total: u64,
    ) -> Result<TreeRead, LeftoverError> {
        let budget = Budget::new(max_total);
        let mut out = TreeRead::default();
        let mut listed = 0usize;
        let mut pending: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
        while let Some(dir_comps) = pending.pop() {
            let comps: Vec<&[u8]> = dir_comps.iter().map(Vec::as_slice).collect();
            let shown = show(&comps);
            let mut dir = self.open_dir(&comps)?;
            let mut names = Vec::new();
            while let Some(entry) = dir.read() {
                let entry = entry.map_err(|e| from_errno(&shown, e))?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                listed += 1;
                if listed > max_entries {
                    return Err(LeftoverError::BadPath {
                        path: shown,
                        reason: "the tree holds more entries than are listed",
                    });
                }
                names.push(name.to_vec());
            }
            names.sort();
            for name in names {
                let mut f = dir_comps.clone();
                f.push(name);
                let comps: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
                let shown = show(&comps);
                if std::str::from_utf8(comps.last().copied().unwrap_or_default()).is_err() {
                    out.skipped.push(shown);
                    continue;
                }
                match self.read_comps(&comps, &shown, max_total, Some(&budget)) {
                    Ok(bytes) => out.files.push((shown, bytes)),
                    Err(LeftoverError::NotRegular {
                        kind: "directory", ..
                    }) if f.len() <= max_depth => {
                        out.dirs.push(shown);
                        pending.push(f);
                    }
                    Err(LeftoverError::NotRegular { .. }) => out.skipped.push(shown),
                    Err(LeftoverError::TooLarge { .. }) => {
                        return Err(LeftoverError::TooLarge {
                            path: shown,
                            limit: max_total,
                        });
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        out.files.sort();
        out.dirs.sort();
        Ok(out)
    }

    fn read_capped(
        &self,
        rel: &str,
        max: u64,
        budget: Option<&Budget>,
    ) -> Result<Vec<u8>, LeftoverError> {
        let comps = split(rel)?;
        self.read_comps(&comps, rel, max, budget)
    }

    fn read_comps(
        &self,
        comps: &[&[u8]],
        rel: &str,
        max: u64,
        budget: Option<&Budget>,
    ) -> Result<Vec<u8>, LeftoverError> {
        let (file, size) = self.open_regular(comps)?;
        let limit = budget.map_or(max, |b| max.min(b.remaining()));
        let too_large = || LeftoverError::TooLarge {
            path: rel.into(),
            limit,
        };
        if size > limit {
            return Err(too_large());
        }
        // One byte past the limit tells a file that grew since fstat from one that fits.
        let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| from_io(rel, e))?;
        let n = buf.len() as u64;
        if n > limit || budget.is_some_and(|b| !b.take(n)) {
            return Err(too_large());
        }
        Ok(buf)
    }

    /// Opens a regular file beneath the root, never blocking; returns it with its size.
    pub(crate) fn open_regular(&self, comps: &[&[u8]]) -> Result<(File, u64), LeftoverError> {
        if comps.is_empty() {
            return Err(LeftoverError::NotRegular {
                path: ".".into(),
                kind: "directory",
            });
        }
        let shown = show(comps);
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = self.open_at(comps, flags)?;
        let st = rfs::fstat(&fd).map_err(|e| from_errno(&shown, e))?;
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft != FileType::RegularFile {
            return Err(LeftoverError::NotRegular {
                path: shown,
                kind: kind_name(ft),
            });
        }
        if st.st_dev != self.dev {
            return Err(from_errno(&shown, Errno::XDEV));
        }
        Ok((File::from(fd), u64::try_from(st.st_size).unwrap_or(0)))
    }

    /// Opens a directory beneath the root (the root itself for no components) for reading.
    pub(crate) fn open_dir(&self, comps: &[&[u8]]) -> Result<Dir, LeftoverError> {
        let shown = show(comps);
        let fd = if comps.is_empty() {
            rfs::openat(&self.root, c".", dir_flags(), Mode::empty())
                .map_err(|e| from_errno(".", e))?
        } else {
            self.open_at(comps, dir_flags())?
        };
        Dir::new(fd).map_err(|e| from_errno(&shown, e))
    }

    /// Opens `comps` (at least one) beneath the root with `flags` (which must include
    /// `O_NOFOLLOW`): `openat2` first, and on any refusal the per-component walk, which is just as
    /// strict and says precisely which component was what.
    fn open_at(&self, comps: &[&[u8]], flags: OFlags) -> Result<OwnedFd, LeftoverError> {
        if !OPENAT2_UNAVAILABLE.load(Ordering::Relaxed) {
            let joined = comps.join(&b'/');
            let resolve = ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV;
            match rfs::openat2(&self.root, joined.as_slice(), flags, Mode::empty(), resolve) {
                Ok(fd) => return Ok(fd),
                Err(Errno::NOSYS) => OPENAT2_UNAVAILABLE.store(true, Ordering::Relaxed),
                Err(_) => {}
            }
        }
        self.walk(comps, flags)
    }

    fn walk(&self, comps: &[&[u8]], flags: OFlags) -> Result<OwnedFd, LeftoverError> {
        let mut dir: Option<OwnedFd> = None;
        for (i, c) in comps.iter().enumerate() {
            let last = i + 1 == comps.len();
            // An intermediate directory is only a place to resolve from: `O_PATH` needs no read
            // permission on it, and still refuses a symlink (`O_DIRECTORY` gives ENOTDIR).
            let f = if last {
                flags
            } else {
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC
            } | OFlags::NOFOLLOW;
            let cur = dir.as_ref().map_or(self.root.as_fd(), |d| d.as_fd());
            let shown = show(&comps[..=i]);
            let fd =
                rfs::openat(cur, *c, f, Mode::empty()).map_err(|e| explain(cur, c, &shown, e))?;
            let st = rfs::fstat(&fd).map_err(|e| from_errno(&shown, e))?;
            if st.st_dev != self.dev {
                return Err(from_errno(&shown, Errno::XDEV));
            }
            dir = Some(fd);
        }
        dir.ok_or_else(|| LeftoverError::BadPath {
            path: String::new(),
            reason: "it names the root itself",
        })
    }

    fn remove_tree(
        &self,
        top: BorrowedFd<'_>,
        name: Vec<u8>,
        shown: &str,
    ) -> Result<(), LeftoverError> {
        let err = |e: Errno| from_errno(shown, e);
        let mut pending = vec![name];
        let mut moved = 0u64;
        while let Some(name) = pending.pop() {
            let mut stack: Vec<(Dir, Vec<u8>, u8)> =
                vec![(open_dir_in(top, &name, shown)?, name, 0)];
            loop {
                let depth = stack.len();
                let Some(frame) = stack.last_mut() else {
                    break;
                };
                match frame.0.read() {
                    Some(Ok(entry)) => {
                        let en = entry.file_name().to_bytes();
                        if en == b"." || en == b".." {
                            continue;
                        }
                        let en = en.to_vec();
                        let dfd = frame.0.fd().map_err(err)?;
                        let st = match rfs::statat(dfd, en.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
                            Ok(st) => st,
                            Err(Errno::NOENT) => continue,
                            Err(e) => return Err(err(e)),
                        };
                        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                            match rfs::unlinkat(dfd, en.as_slice(), AtFlags::empty()) {
                                Ok(()) | Err(Errno::NOENT) => continue,
                                Err(e) => return Err(err(e)),
                            }
                        }
                        if st.st_dev != self.dev {
                            return Err(err(Errno::XDEV));
                        }
                        if depth < MAX_HELD_DIRS {
                            let sub = open_dir_in(dfd, &en, shown)?;
                            stack.push((sub, en, 0));
                            continue;
                        }
                        // Too deep to hold another fd: move the subtree up next to `name` and
                        // remove it from there later; the tree only ever gets shallower.
                        loop {
                            moved += 1;
                            let fresh = format!(".eval-remove-{moved}").into_bytes();
                            match rfs::renameat_with(
                                dfd,
                                en.as_slice(),
                                top,
                                fresh.as_slice(),
                                RenameFlags::NOREPLACE,
                            ) {
                                Ok(()) => {
                                    pending.push(fresh);
                                    break;
                                }
                                Err(Errno::EXIST) => continue,
                                Err(e) => return Err(err(e)),
                            }
                        }
                    }
                    Some(Err(e)) => return Err(err(e)),
                    None => {
                        let Some((dir, name, retries)) = stack.pop() else {
                            break;
                        };
                        drop(dir);
                        let parent = match stack.last() {
                            Some(p) => p.0.fd().map_err(err)?,
                            None => top,
                        };
                        match rfs::unlinkat(parent, name.as_slice(), AtFlags::REMOVEDIR) {
                            Ok(()) | Err(Errno::NOENT) => {}
                            // Removing entries while reading a directory may skip some; read it
                            // again a few times, then give up (something keeps refilling it).
                            Err(Errno::NOTEMPTY) if retries < 3 => {
                                let again = open_dir_in(parent, &name, shown)?;
                                stack.push((again, name, retries + 1));
                            }
                            Err(e) => return Err(err(e)),
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn open_dir_in(parent: BorrowedFd<'_>, name: &[u8], shown: &str) -> Result<Dir, LeftoverError> {
    let fd = rfs::openat(parent, name, dir_flags(), Mode::empty())
        .map_err(|e| explain(parent, name, shown, e))?;
    Dir::new(fd).map_err(|e| from_errno(shown, e))
}

/// Turns a refused open of `name` in `parent` into the most precise error: if the name is a
/// symlink, FIFO, socket or device, say so; otherwise classify the errno.
fn explain(parent: BorrowedFd<'_>, name: &[u8], shown: &str, e: Errno) -> LeftoverError {
    if e != Errno::NOENT
        && !is_host_errno(e.raw_os_error())
        && let Ok(st) = rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
    {
        let ft = FileType::from_raw_mode(st.st_mode);
        if !matches!(ft, FileType::RegularFile | FileType::Directory) {
            return LeftoverError::NotRegular {
                path: shown.into(),
                kind: kind_name(ft),
            };
        }
    }
    from_errno(shown, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_tree_is_read_without_links_fifos_or_too_many_bytes() {
        let (tmp, b) = root();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(ws.join("d/e")).unwrap();
        fs::write(ws.join("a.txt"), b"A").unwrap();
        fs::write(ws.join("d/b.txt"), b"BB").unwrap();
        fs::write(ws.join("d/e/deep.txt"), b"C").unwrap();
        fs::write(tmp.path().join("secret"), b"S").unwrap();
        symlink(tmp.path().join("secret"), ws.join("d/link")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            ws.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let t = b.read_tree(1, 100, 1000).unwrap();
        let files: Vec<&str> = t.files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(files, ["a.txt", "d/b.txt"]);
        assert_eq!(t.dirs, ["d"]);
        assert_eq!(t.skipped.len(), 3, "{:?}", t.skipped);
        assert!(t.skipped.iter().any(|s| s == "d/link"));
        assert!(matches!(
            b.read_tree(4, 100, 2),
            Err(LeftoverError::TooLarge { .. })
        ));
        assert!(matches!(
            b.read_tree(4, 3, 1000),
            Err(LeftoverError::BadPath { .. })
        ));
    }

    fn root() -> (tempfile::TempDir, Beneath) {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("ws")).unwrap();
        let b = Beneath::open(&tmp.path().join("ws")).unwrap();
        (tmp, b)
    }

    fn mkfifo(path: &Path) {
        rfs::mknodat(
            rfs::CWD,
            path,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    }

    #[test]
    fn a_regular_file_is_read_whole_and_a_hard_link_is_a_regular_file() {
        let (tmp, b) = root();
        fs::write(tmp.path().join("ws/m.json"), b"{\"x\":1}").unwrap();
        fs::create_dir(tmp.path().join("ws/sub")).unwrap();
        fs::hard_link(tmp.path().join("ws/m.json"), tmp.path().join("ws/sub/h")).unwrap();
        assert_eq!(b.read_file("m.json", 100).unwrap(), b"{\"x\":1}");
        assert_eq!(b.read_file("./sub//h", 100).unwrap(), b"{\"x\":1}");
        // The per-component fallback resolves the same path to the same file.
        let fd = b
            .walk(&[b"sub", b"h"], OFlags::RDONLY | OFlags::NOFOLLOW)
            .unwrap();
        let mut text = String::new();
        File::from(fd).read_to_string(&mut text).unwrap();
        assert_eq!(text, "{\"x\":1}");
        assert!(matches!(
            b.read_file("absent", 100),
            Err(LeftoverError::NotFound { .. })
        ));
    }

    /// The harness's transcript found at a fixed depth: one match per `*` component, never a
    /// link, bounded listing; none is missing, two (or a flood) are refused, not picked from.
    #[test]
    fn a_pattern_finds_exactly_one_file_at_its_fixed_depth() {
        let (tmp, b) = root();
        let pat = "*/session-*/session.jsonl";
        assert!(matches!(
            b.read_found(pat, 8, 100),
            Err(LeftoverError::NotFound { .. })
        ));
        let s1 = tmp.path().join("ws/--workspace--/session-1");
        fs::create_dir_all(&s1).unwrap();
        fs::create_dir_all(tmp.path().join("ws/--workspace--/other")).unwrap();
        fs::write(s1.join("session.jsonl"), b"{}\n").unwrap();
        assert_eq!(b.read_found(pat, 8, 100).unwrap(), b"{}\n");
        // A second session: refused, never one of them picked.
        fs::create_dir_all(tmp.path().join("ws/--workspace--/session-2")).unwrap();
        let two = b.read_found(pat, 8, 100).unwrap_err();
        assert!(two.to_string().contains("more than one"), "{two}");
        fs::remove_dir(tmp.path().join("ws/--workspace--/session-2")).unwrap();
        // A flood of entries is listed only up to the bound.
        for i in 0..20 {
            fs::create_dir(tmp.path().join(format!("ws/--workspace--/x{i}"))).unwrap();
        }
        let flood = b.read_found(pat, 8, 100).unwrap_err();
        assert!(flood.to_string().contains("more entries"), "{flood}");
        assert_eq!(b.read_found(pat, 64, 100).unwrap(), b"{}\n");
        // A link where the file (or a directory on the way) should be is never followed.
        fs::remove_file(s1.join("session.jsonl")).unwrap();
        symlink("/etc/passwd", s1.join("session.jsonl")).unwrap();
        assert!(b.read_found(pat, 64, 100_000).is_err());
        fs::remove_dir_all(tmp.path().join("ws/--workspace--")).unwrap();
        fs::create_dir_all(tmp.path().join("elsewhere/session-9")).unwrap();
        fs::write(tmp.path().join("elsewhere/session-9/session.jsonl"), b"x").unwrap();
        symlink(tmp.path().join("elsewhere"), tmp.path().join("ws/--link--")).unwrap();
        assert!(b.read_found(pat, 64, 100).is_err());
    }

    /// Every session file of an attempt (the root and its children): each `*` matches all its
    /// entries, in name order; a dead end (a file where a directory goes on, a directory without
    /// the file) is no match; a link anywhere fails the read; the total is bounded.
    #[test]
    fn a_pattern_finds_every_file_at_its_fixed_depth() {
        let (tmp, b) = root();
        let pat = "*/*/session.jsonl";
        assert!(b.read_found_all(pat, 8, 100).unwrap().is_empty());
        let p = tmp.path().join("ws/--workspace--");
        for (dir, body) in [
            ("session-1", "root\n"),
            ("b-child", "b\n"),
            ("a-child", "a\n"),
        ] {
            fs::create_dir_all(p.join(dir)).unwrap();
            fs::write(p.join(dir).join("session.jsonl"), body).unwrap();
        }
        fs::create_dir_all(p.join("empty")).unwrap();
        fs::write(p.join("a-file"), b"x").unwrap();
        fs::write(tmp.path().join("ws/top-file"), b"x").unwrap();
        let all = b.read_found_all(pat, 8, 100).unwrap();
        let got: Vec<(&str, &[u8])> = all.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
        assert_eq!(
            got,
            [
                ("--workspace--/a-child/session.jsonl", &b"a\n"[..]),
                ("--workspace--/b-child/session.jsonl", b"b\n"),
                ("--workspace--/session-1/session.jsonl", b"root\n"),
            ]
        );
        // The total, not each file, is bounded.
        let big = b.read_found_all(pat, 8, 6).unwrap_err();
        assert!(
            matches!(big, LeftoverError::TooLarge { limit: 6, .. }),
            "{big}"
        );
        // A flood of entries is listed only up to the bound.
        let flood = b.read_found_all(pat, 3, 100).unwrap_err();
        assert!(flood.to_string().contains("more entries"), "{flood}");
        // A link, as the file or as a directory on the way, fails the read: never followed.
        symlink("/etc/passwd", p.join("empty/session.jsonl")).unwrap();
        assert!(b.read_found_all(pat, 8, 100_000).is_err());
        fs::remove_file(p.join("empty/session.jsonl")).unwrap();
        fs::create_dir_all(tmp.path().join("elsewhere/s")).unwrap();
        fs::write(tmp.path().join("elsewhere/s/session.jsonl"), b"x").unwrap();
        symlink(tmp.path().join("elsewhere/s"), p.join("linked")).unwrap();
        assert!(b.read_found_all(pat, 8, 100).is_err());
    }

    #[test]
    fn symlinks_to_host_files_are_never_followed() {
        let (tmp, b) = root();
        let secret = tmp.path().join("secret");
        fs::write(&secret, b"host-secret").unwrap();
        symlink(&secret, tmp.path().join("ws/abs")).unwrap();
        symlink("../secret", tmp.path().join("ws/rel")).unwrap();
        symlink("/proc/self/environ", tmp.path().join("ws/environ")).unwrap();
        symlink("/dev/zero", tmp.path().join("ws/zero")).unwrap();
        for name in ["abs", "rel", "environ", "zero"] {
            match b.read_file(name, 1 << 20) {
                Err(LeftoverError::NotRegular { path, kind }) => {
                    assert_eq!((path.as_str(), kind), (name, "symlink"));
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        // The per-component fallback refuses the same links.
        assert!(matches!(
            b.walk(
                &[b"environ"],
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK
            ),
            Err(LeftoverError::NotRegular {
                kind: "symlink",
                ..
            })
        ));
        // Even a link that stays beneath the root is not followed.
        fs::write(tmp.path().join("ws/real"), b"x").unwrap();
        symlink("real", tmp.path().join("ws/inside")).unwrap();
        assert!(matches!(
            b.read_file("inside", 10),
            Err(LeftoverError::NotRegular {
                kind: "symlink",
                ..
            })
        ));
    }

    #[test]
    fn an_intermediate_symlinked_directory_is_refused() {
        let (tmp, b) = root();
        fs::create_dir(tmp.path().join("outside")).unwrap();
        fs::write(tmp.path().join("outside/f"), b"host").unwrap();
        symlink(tmp.path().join("outside"), tmp.path().join("ws/d")).unwrap();
        match b.read_file("d/f", 100) {
            Err(LeftoverError::NotRegular { path, kind }) => {
                assert_eq!((path.as_str(), kind), ("d", "symlink"));
            }
            other => panic!("{other:?}"),
        }
        // The fallback walk gives the same answer as openat2.
        assert!(matches!(
            b.walk(&[b"d", b"f"], OFlags::RDONLY | OFlags::NOFOLLOW),
            Err(LeftoverError::NotRegular {
                kind: "symlink",
                ..
            })
        ));
    }

    #[test]
    fn a_fifo_never_blocks_the_reader() {
        let (tmp, b) = root();
        mkfifo(&tmp.path().join("ws/fifo"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r = b.read_file("fifo", 100);
            let _ = tx.send(r);
        });
        // A generous bound only turns a hang into a failure; a correct reader answers at once.
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Err(LeftoverError::NotRegular { kind, .. })) => assert_eq!(kind, "fifo"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_directory_and_a_socket_are_not_regular() {
        let (tmp, b) = root();
        fs::create_dir(tmp.path().join("ws/dir")).unwrap();
        let _l = std::os::unix::net::UnixListener::bind(tmp.path().join("ws/sock")).unwrap();
        assert!(matches!(
            b.read_file("dir", 100),
            Err(LeftoverError::NotRegular {
                kind: "directory",
                ..
            })
        ));
        assert!(matches!(
            b.read_file("sock", 100),
            Err(LeftoverError::NotRegular { kind: "socket", .. })
        ));
    }

    #[test]
    fn reads_are_capped_per_file_and_per_budget() {
        let (tmp, b) = root();
        fs::write(tmp.path().join("ws/big"), vec![1u8; 1000]).unwrap();
        fs::write(tmp.path().join("ws/small"), vec![2u8; 400]).unwrap();
        assert!(matches!(
            b.read_file("big", 999),
            Err(LeftoverError::TooLarge { limit: 999, .. })
        ));
        assert_eq!(b.read_file("big", 1000).unwrap().len(), 1000);
        let budget = Budget::new(1000);
        assert_eq!(
            b.read_file_within("small", 500, &budget).unwrap().len(),
            400
        );
        assert_eq!(budget.remaining(), 600);
        assert_eq!(
            b.read_file_within("small", 500, &budget).unwrap().len(),
            400
        );
        // 200 bytes remain: a third 400-byte read exceeds the attempt's allowance.
        assert!(matches!(
            b.read_file_within("small", 500, &budget),
            Err(LeftoverError::TooLarge { limit: 200, .. })
        ));
        assert_eq!(budget.remaining(), 200);
    }

    #[test]
    fn paths_that_could_leave_the_root_are_refused() {
        let (_tmp, b) = root();
        for (p, reason) in [
            ("../x", "it contains `..`"),
            ("a/../../x", "it contains `..`"),
            ("/etc/hostname", "it is absolute"),
            ("", "it is empty"),
            ("a\0b", "it contains a NUL byte"),
        ] {
            match b.read_file(p, 10) {
                Err(LeftoverError::BadPath { reason: r, .. }) => assert_eq!(r, reason, "{p:?}"),
                other => panic!("{p:?}: {other:?}"),
            }
        }
        assert!(matches!(b.remove("."), Err(LeftoverError::BadPath { .. })));
        assert!(matches!(
            b.remove("../ws"),
            Err(LeftoverError::BadPath { .. })
        ));
    }

    #[test]
    fn only_host_errors_are_host_faults() {
        let host = from_errno("x", Errno::NOSPC);
        assert!(host.is_host_fault());
        assert!(from_errno("x", Errno::IO).is_host_fault());
        for e in [
            Errno::LOOP,
            Errno::ACCESS,
            Errno::XDEV,
            Errno::INVAL,
            Errno::NOENT,
        ] {
            assert!(!from_errno("x", e).is_host_fault(), "{e:?}");
        }
        assert!(
            !LeftoverError::NotRegular {
                path: "x".into(),
                kind: "fifo"
            }
            .is_host_fault()
        );
    }

    #[test]
    fn remove_deletes_trees_without_following_links() {
        let (tmp, b) = root();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), b"k").unwrap();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(ws.join(".eval-agent/deep")).unwrap();
        fs::write(ws.join(".eval-agent/deep/f"), b"f").unwrap();
        symlink(&outside, ws.join(".eval-agent/link")).unwrap();
        symlink(&outside, ws.join(".eval-agent/deep/link2")).unwrap();
        mkfifo(&ws.join(".eval-agent/fifo"));
        b.remove(".eval-agent").unwrap();
        assert!(!ws.join(".eval-agent").exists());
        assert_eq!(fs::read(outside.join("keep")).unwrap(), b"k");
        // A symlinked directory at `rel` itself is removed as a link; its target stays.
        symlink(&outside, ws.join("l")).unwrap();
        b.remove("l").unwrap();
        assert!(fs::symlink_metadata(ws.join("l")).is_err());
        assert!(outside.join("keep").exists());
        // Nothing there is fine; a path through a symlink is not followed.
        b.remove("gone").unwrap();
        symlink(&outside, ws.join("via")).unwrap();
        assert!(b.remove("via/keep").is_err());
        assert!(outside.join("keep").exists());
    }

    #[test]
    fn remove_handles_trees_deeper_than_the_fds_it_holds() {
        let (tmp, b) = root();
        let mut p = tmp.path().join("ws/top");
        for _ in 0..(MAX_HELD_DIRS * 3 + 5) {
            p.push("d");
        }
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("leaf"), b"x").unwrap();
        b.remove("top").unwrap();
        assert_eq!(fs::read_dir(tmp.path().join("ws")).unwrap().count(), 0);
    }
}
