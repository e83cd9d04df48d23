//! Tree hashing: the manifest text and the digest that names a tree.
//!
//! Manifest format, version 1 (UTF-8, `\n`-terminated lines):
//!
//! ```text
//! eval-tree-manifest v1
//! <kind> <exec> <size> <digest> <path>
//! ```
//! - `kind`: `f` regular file, `l` symbolic link, `d` directory.
//! - `exec`: `x` when any execute bit is set on a regular file, else `-` (always `-` for links and
//!   directories).
//! - `size`: bytes hashed — the file's length, the link target's length, `0` for a directory.
//! - `digest`: `sha256:<hex>` of the file's bytes or of the link target's bytes (the link is never
//!   followed); `-` for a directory.
//! - `path`: relative to the tree's root, `/`-separated, last on the line so it may contain spaces.
//!
//! Lines are sorted by the path's bytes. Every directory under the root is listed (so empty
//! directories count). The tree's digest is SHA-256 of the whole manifest text, header included.
//!
//! Refused, naming the path: non-UTF-8 names, names containing `\n` or `\r`, two paths that differ
//! only in case (they would collide on a case-insensitive file system), special files (fifos,
//! sockets, devices), and links whose target is absolute or climbs out of the root.

use eval_core::Digest;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// First line of every manifest; bump the version when anything hashed changes.
pub const MANIFEST_HEADER: &str = "eval-tree-manifest v1";

/// What a manifest entry is; symbolic links are recorded as links, never followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A regular file (`f`).
    File,
    /// A symbolic link (`l`); its digest is of the target text.
    Symlink,
    /// A directory (`d`); listed so that empty directories count.
    Dir,
}

impl Kind {
    fn letter(self) -> char {
        match self {
            Kind::File => 'f',
            Kind::Symlink => 'l',
            Kind::Dir => 'd',
        }
    }
}

/// One line of a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestEntry {
    /// Regular file, link or directory.
    pub kind: Kind,
    /// Whether a regular file has any execute bit (always false otherwise).
    pub exec: bool,
    /// Bytes hashed: the file's length, the link target's length, 0 for a directory.
    pub size: u64,
    /// `None` for directories.
    pub digest: Option<Digest>,
    /// Relative to the tree's root, `/`-separated.
    pub path: String,
}

impl ManifestEntry {
    /// The entry's manifest line, without the trailing newline.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.kind.letter(),
            if self.exec { 'x' } else { '-' },
            self.size,
            self.digest
                .map(|d| d.to_string())
                .unwrap_or_else(|| "-".into()),
            self.path
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let mut it = line.splitn(5, ' ');
        let kind = match it.next()? {
            "f" => Kind::File,
            "l" => Kind::Symlink,
            "d" => Kind::Dir,
            _ => return None,
        };
        let exec = match it.next()? {
            "x" => true,
            "-" => false,
            _ => return None,
        };
        let size = it.next()?.parse().ok()?;
        let digest = match it.next()? {
            "-" => None,
            d => Some(Digest::parse(d)?),
        };
        let path = it.next()?.to_owned();
        if path.is_empty() || (digest.is_none() != (kind == Kind::Dir)) {
            return None;
        }
        Some(Self {
            kind,
            exec,
            size,
            digest,
            path,
        })
    }
}

/// A tree's manifest: entries sorted by path bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Sorted by path bytes, one per file, link and directory below the root.
    pub entries: Vec<ManifestEntry>,
}

impl Manifest {
    /// The manifest text (header and one `\n`-terminated line per entry); its SHA-256 is the tree
    /// digest.
    pub fn text(&self) -> String {
        let mut out = String::with_capacity(32 + self.entries.len() * 100);
        out.push_str(MANIFEST_HEADER);
        out.push('\n');
        for e in &self.entries {
            out.push_str(&e.line());
            out.push('\n');
        }
        out
    }

    /// The tree's identity: SHA-256 of [`Manifest::text`].
    pub fn digest(&self) -> Digest {
        Digest::of(self.text().as_bytes())
    }

    /// Parses a manifest text (as stored in a freeze file); `None` if it is not version 1.
    pub fn parse(text: &str) -> Option<Self> {
        let mut lines = text.split_terminator('\n');
        if lines.next()? != MANIFEST_HEADER {
            return None;
        }
        let entries = lines
            .map(ManifestEntry::parse)
            .collect::<Option<Vec<_>>>()?;
        Some(Self { entries })
    }

    /// Total bytes of regular files.
    pub fn file_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind == Kind::File)
            .map(|e| e.size)
            .sum()
    }

    /// Entries under `prefix` (a directory path or a file path), as a manifest of their own with
    /// paths relative to `prefix`.
    pub fn subtree(&self, prefix: &str) -> Manifest {
        let dir = format!("{prefix}/");
        let entries = self
            .entries
            .iter()
            .filter_map(|e| {
                if e.path == prefix {
                    // A file root keeps its own name; a directory root is the empty subtree's root.
                    (e.kind != Kind::Dir).then(|| e.clone())
                } else {
                    e.path.strip_prefix(&dir).map(|rest| ManifestEntry {
                        path: rest.to_owned(),
                        ..e.clone()
                    })
                }
            })
            .collect();
        Manifest { entries }
    }
}

/// Why a tree cannot be hashed. Every variant names the offending path.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A file name that is not UTF-8 cannot appear in the (UTF-8) manifest.
    #[error("{path}: name is not valid UTF-8")]
    NotUtf8 {
        /// The offending path, as found on disk.
        path: PathBuf,
    },
    /// A name with `\n` or `\r` would break the manifest's one-line-per-entry format.
    #[error("{path}: name contains a line break")]
    LineBreak {
        /// The offending path.
        path: String,
    },
    /// Two paths equal up to case would collide on a case-insensitive file system.
    #[error("{a} and {b} differ only in case")]
    CaseCollision {
        /// One of the two paths.
        a: String,
        /// The other.
        b: String,
    },
    /// A path that is absolute, climbs out of the tree's root, or would leave it through a link.
    #[error("{path}: escapes its root ({reason})")]
    Escapes {
        /// The offending path.
        path: String,
        /// How it escapes (absolute, `..`, a link target …).
        reason: String,
    },
    /// A fifo, socket or device: its content cannot be hashed as bytes.
    #[error("{path}: not a regular file, directory or symbolic link")]
    Special {
        /// The offending path.
        path: String,
    },
    /// A root that was asked for is not there.
    #[error("{path}: does not exist")]
    Missing {
        /// The missing root, relative to the base directory.
        path: String,
    },
    /// The file system refused a read.
    #[error("{path}: {source}")]
    Io {
        /// The path being read.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TreeError + '_ {
    move |source| TreeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks that `rel` is a plain relative path (no `..`, no root, no `.` tricks) and returns it in
/// `/`-separated form.
pub fn clean_relative(rel: &str) -> Result<String, TreeError> {
    let escapes = |reason: &str| TreeError::Escapes {
        path: rel.to_owned(),
        reason: reason.to_owned(),
    };
    if rel.contains('\n') || rel.contains('\r') {
        return Err(TreeError::LineBreak {
            path: rel.to_owned(),
        });
    }
    let mut parts = Vec::new();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(p) => parts.push(
                p.to_str()
                    .ok_or_else(|| TreeError::NotUtf8 { path: rel.into() })?
                    .to_owned(),
            ),
            Component::CurDir => {}
            Component::ParentDir => return Err(escapes("`..` is not allowed")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(escapes("absolute paths are not allowed"));
            }
        }
    }
    if parts.is_empty() {
        return Err(escapes("empty path"));
    }
    Ok(parts.join("/"))
}

/// A path to hash that was found by the walk (files and links; directories need no reading).
struct Pending {
    index: usize,
    abs: PathBuf,
}

/// Walks `base/rel` for each input path (a file or a directory), never following links, and
/// returns the entries with paths relative to `base`, sorted and deduplicated. An input path may
/// not itself pass through a link (every component must be a real directory), so nothing outside
/// `base` is ever read.
pub fn hash_paths(base: &Path, inputs: &[String]) -> Result<Manifest, TreeError> {
    let mut entries: Vec<ManifestEntry> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut seen: HashMap<String, ()> = HashMap::new();
    for input in inputs {
        let rel = clean_relative(input)?;
        // Every ancestor must be a real directory: a link on the way could lead anywhere.
        let mut so_far = PathBuf::new();
        let parts: Vec<&str> = rel.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            so_far.push(part);
            let abs = base.join(&so_far);
            let md =
                fs::symlink_metadata(&abs).map_err(|_| TreeError::Missing { path: rel.clone() })?;
            if !md.is_dir() {
                return Err(TreeError::Escapes {
                    path: rel.clone(),
                    reason: format!("{} is not a directory", so_far.display()),
                });
            }
        }
        let abs = base.join(&rel);
        let md = fs::symlink_metadata(&abs).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TreeError::Missing { path: rel.clone() },
            _ => TreeError::Io {
                path: abs.clone(),
                source: e,
            },
        })?;
        if md.file_type().is_symlink() {
            // A root that is a link would freeze only the link, never what it points to.
            return Err(TreeError::Escapes {
                path: rel.clone(),
                reason: "an input root may not be a symbolic link".into(),
            });
        }
        if md.is_dir() {
            walk(&abs, &rel, &rel, &mut entries, &mut pending, &mut seen)?;
        } else {
            add_entry(&abs, &rel, &md, None, &mut entries, &mut pending, &mut seen)?;
        }
    }
    hash_pending(&mut entries, pending)?;
    entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    check_case(&entries)?;
    Ok(Manifest { entries })
}

/// Hashes one directory tree; paths in the manifest are relative to `root`.
pub fn hash_tree(root: &Path) -> Result<Manifest, TreeError> {
    let md = fs::symlink_metadata(root).map_err(io(root))?;
    if !md.is_dir() {
        return Err(TreeError::Special {
            path: root.display().to_string(),
        });
    }
    let mut entries = Vec::new();
    let mut pending = Vec::new();
    let mut seen = HashMap::new();
    walk_children(root, "", "", &mut entries, &mut pending, &mut seen)?;
    hash_pending(&mut entries, pending)?;
    entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    check_case(&entries)?;
    Ok(Manifest { entries })
}

fn walk(
    abs: &Path,
    rel: &str,
    link_root: &str,
    entries: &mut Vec<ManifestEntry>,
    pending: &mut Vec<Pending>,
    seen: &mut HashMap<String, ()>,
) -> Result<(), TreeError> {
    if seen.insert(rel.to_owned(), ()).is_none() {
        entries.push(ManifestEntry {
            kind: Kind::Dir,
            exec: false,
            size: 0,
            digest: None,
            path: rel.to_owned(),
        });
    }
    walk_children(abs, rel, link_root, entries, pending, seen)
}

fn walk_children(
    abs: &Path,
    rel: &str,
    link_root: &str,
    entries: &mut Vec<ManifestEntry>,
    pending: &mut Vec<Pending>,
    seen: &mut HashMap<String, ()>,
) -> Result<(), TreeError> {
    for item in fs::read_dir(abs).map_err(io(abs))? {
        let item = item.map_err(io(abs))?;
        let name = item.file_name();
        let child_abs = item.path();
        let name = name
            .to_str()
            .ok_or_else(|| TreeError::NotUtf8 {
                path: child_abs.clone(),
            })?
            .to_owned();
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if name.contains('\n') || name.contains('\r') {
            return Err(TreeError::LineBreak { path: child_rel });
        }
        let md = fs::symlink_metadata(&child_abs).map_err(io(&child_abs))?;
        if md.is_dir() {
            walk(&child_abs, &child_rel, link_root, entries, pending, seen)?;
        } else {
            add_entry(
                &child_abs,
                &child_rel,
                &md,
                Some(link_root),
                entries,
                pending,
                seen,
            )?;
        }
    }
    Ok(())
}

fn add_entry(
    abs: &Path,
    rel: &str,
    md: &fs::Metadata,
    link_root: Option<&str>,
    entries: &mut Vec<ManifestEntry>,
    pending: &mut Vec<Pending>,
    seen: &mut HashMap<String, ()>,
) -> Result<(), TreeError> {
    if seen.insert(rel.to_owned(), ()).is_some() {
        return Ok(());
    }
    let ft = md.file_type();
    if ft.is_symlink() {
        let target = fs::read_link(abs).map_err(io(abs))?;
        let target_bytes = target.as_os_str().as_bytes();
        check_link(rel, &target, link_root.unwrap_or(""))?;
        entries.push(ManifestEntry {
            kind: Kind::Symlink,
            exec: false,
            size: target_bytes.len() as u64,
            digest: Some(Digest::of(target_bytes)),
            path: rel.to_owned(),
        });
    } else if ft.is_file() {
        pending.push(Pending {
            index: entries.len(),
            abs: abs.to_path_buf(),
        });
        entries.push(ManifestEntry {
            kind: Kind::File,
            exec: md.permissions().mode() & 0o111 != 0,
            size: md.len(),
            digest: None,
            path: rel.to_owned(),
        });
    } else {
        return Err(TreeError::Special {
            path: rel.to_owned(),
        });
    }
    Ok(())
}

/// A link may point anywhere inside its root (resolved lexically from the link's directory), never
/// outside it and never to an absolute path.
fn check_link(rel: &str, target: &Path, root: &str) -> Result<(), TreeError> {
    let escapes = |reason: String| TreeError::Escapes {
        path: rel.to_owned(),
        reason,
    };
    if target.is_absolute() {
        return Err(escapes(format!(
            "link to absolute path {}",
            target.display()
        )));
    }
    let inside = rel.strip_prefix(root).unwrap_or(rel);
    let mut depth: Vec<&str> = inside
        .trim_start_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    depth.pop(); // the link's own name
    let mut level = depth.len() as i64;
    for c in target.components() {
        match c {
            Component::ParentDir => level -= 1,
            Component::Normal(_) => level += 1,
            _ => {}
        }
        if level < 0 {
            return Err(escapes(format!("link target {}", target.display())));
        }
    }
    Ok(())
}

fn check_case(entries: &[ManifestEntry]) -> Result<(), TreeError> {
    let mut lower: HashMap<String, &str> = HashMap::with_capacity(entries.len());
    for e in entries {
        if let Some(other) = lower.insert(e.path.to_lowercase(), &e.path) {
            return Err(TreeError::CaseCollision {
                a: other.to_owned(),
                b: e.path.clone(),
            });
        }
    }
    Ok(())
}

const BUFFER: usize = 1 << 20;

/// Hashes every pending file on a pool of threads (one per core, at most 8). Each file is
/// streamed through a fixed buffer, so memory does not grow with file size.
fn hash_pending(entries: &mut [ManifestEntry], pending: Vec<Pending>) -> Result<(), TreeError> {
    if pending.is_empty() {
        return Ok(());
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        .min(pending.len());
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, u64, Digest)>> = Mutex::new(Vec::with_capacity(pending.len()));
    let first_error: Mutex<Option<TreeError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut buf = vec![0u8; BUFFER];
                let mut local = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(p) = pending.get(i) else { break };
                    match hash_file(&p.abs, &mut buf) {
                        Ok((size, digest)) => local.push((p.index, size, digest)),
                        Err(e) => {
                            if let Ok(mut slot) = first_error.lock() {
                                slot.get_or_insert(e);
                            }
                            // Stop everyone: the tree is refused anyway.
                            next.store(usize::MAX / 2, Ordering::Relaxed);
                            break;
                        }
                    }
                }
                // A poisoned lock loses this worker's results; the count check below turns that
                // into an error.
                if let Ok(mut all) = results.lock() {
                    all.extend(local);
                }
            });
        }
    });
    // A poisoned error slot (a worker panicked) is caught by the count check below.
    if let Some(e) = first_error.into_inner().ok().flatten() {
        return Err(e);
    }
    let results = results.into_inner().unwrap_or_default();
    if results.len() != pending.len() {
        return Err(TreeError::Io {
            path: PathBuf::from("."),
            source: std::io::Error::other("a hashing thread failed"),
        });
    }
    for (index, size, digest) in results {
        if let Some(e) = entries.get_mut(index) {
            e.size = size;
            e.digest = Some(digest);
        }
    }
    Ok(())
}

/// Streams one file; the size recorded is the number of bytes actually hashed.
pub fn hash_file(path: &Path, buf: &mut [u8]) -> Result<(u64, Digest), TreeError> {
    let mut file = fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let mut size = 0u64;
    loop {
        let n = match file.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(path)(e)),
        };
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, Digest(h.finalize().into())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    }

    fn fixed_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "a.txt", b"hello\n");
        write(r, "bin/run.sh", b"#!/bin/sh\necho hi\n");
        fs::set_permissions(r.join("bin/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        write(r, "dir with space/B.md", b"");
        fs::create_dir(r.join("empty")).unwrap();
        symlink("a.txt", r.join("link")).unwrap();
        dir
    }

    /// Golden values: a change to the manifest rule must be noticed (and the version bumped).
    /// Computed independently with coreutils: `sha256sum` of each file, `printf 'a.txt' |
    /// sha256sum` for the link, and `printf '%s' "$TEXT" | sha256sum` for the manifest.
    #[test]
    fn golden_manifest_and_digest() {
        let dir = fixed_tree();
        let m = hash_tree(dir.path()).unwrap();
        let text = m.text();
        assert_eq!(text, GOLDEN_TEXT);
        assert_eq!(m.digest().to_string(), GOLDEN_DIGEST);
        assert_eq!(Manifest::parse(&text).unwrap(), m);
    }

    const GOLDEN_TEXT: &str = "eval-tree-manifest v1
f - 6 sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03 a.txt
d - 0 - bin
f x 18 sha256:299001868fb8c02fd431c336c6d058f5558c5dff5b5af5e6fe04b870a6a9cbba bin/run.sh
d - 0 - dir with space
f - 0 sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 dir with space/B.md
d - 0 - empty
l - 5 sha256:18b7cb099a9ea3f50ba899b5ba81e0d377a5f3b16f8f6eeb8b3e58cd4692b993 link
";
    const GOLDEN_DIGEST: &str =
        "sha256:e930bb53167cc937bd3a4e96f69e559d78acd94387ed8b69d9a5ebed79832bfb";

    #[test]
    fn mode_bit_symlink_and_rename_change_the_digest() {
        let dir = fixed_tree();
        let r = dir.path();
        let base = hash_tree(r).unwrap().digest();
        fs::set_permissions(r.join("a.txt"), fs::Permissions::from_mode(0o744)).unwrap();
        let exec = hash_tree(r).unwrap().digest();
        assert_ne!(base, exec);
        fs::set_permissions(r.join("a.txt"), fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(hash_tree(r).unwrap().digest(), base);

        fs::remove_file(r.join("link")).unwrap();
        symlink("bin/run.sh", r.join("link")).unwrap();
        assert_ne!(hash_tree(r).unwrap().digest(), base);
        fs::remove_file(r.join("link")).unwrap();
        // A link and a file with the same bytes as the target differ.
        fs::write(r.join("link"), b"a.txt").unwrap();
        assert_ne!(hash_tree(r).unwrap().digest(), base);
        fs::remove_file(r.join("link")).unwrap();
        symlink("a.txt", r.join("link")).unwrap();
        assert_eq!(hash_tree(r).unwrap().digest(), base);

        fs::rename(r.join("a.txt"), r.join("b.txt")).unwrap();
        assert_ne!(hash_tree(r).unwrap().digest(), base);
    }

    #[test]
    fn refuses_escapes_case_collisions_and_bad_names() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "x/a", b"1");
        symlink("../../outside", r.join("x/up")).unwrap();
        let e = hash_tree(r).unwrap_err();
        assert!(
            matches!(&e, TreeError::Escapes { path, .. } if path == "x/up"),
            "{e}"
        );
        fs::remove_file(r.join("x/up")).unwrap();
        symlink("/etc/passwd", r.join("x/abs")).unwrap();
        assert!(
            matches!(hash_tree(r).unwrap_err(), TreeError::Escapes { path, .. } if path == "x/abs")
        );
        fs::remove_file(r.join("x/abs")).unwrap();
        symlink("../x/a", r.join("x/ok")).unwrap();
        hash_tree(r).unwrap();

        write(r, "x/A", b"2");
        let e = hash_tree(r).unwrap_err();
        assert!(
            e.to_string().contains("x/A") && e.to_string().contains("x/a"),
            "{e}"
        );
        fs::remove_file(r.join("x/A")).unwrap();

        write(r, "bad\nname", b"");
        let e = hash_tree(r).unwrap_err();
        assert!(matches!(e, TreeError::LineBreak { .. }), "{e}");
        fs::remove_file(r.join("bad\nname")).unwrap();

        let raw = std::ffi::OsStr::from_bytes(b"bad\xffname");
        fs::write(r.join(raw), b"").unwrap();
        let e = hash_tree(r).unwrap_err();
        assert!(matches!(e, TreeError::NotUtf8 { .. }), "{e}");
        assert!(e.to_string().contains("bad"), "{e}");
    }

    #[test]
    fn hash_paths_refuses_dotdot_and_links_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "real/f", b"1");
        symlink("real", r.join("via")).unwrap();
        assert!(matches!(
            hash_paths(r, &["../x".into()]).unwrap_err(),
            TreeError::Escapes { .. }
        ));
        assert!(matches!(
            hash_paths(r, &["/etc".into()]).unwrap_err(),
            TreeError::Escapes { .. }
        ));
        assert!(matches!(
            hash_paths(r, &["via/f".into()]).unwrap_err(),
            TreeError::Escapes { .. }
        ));
        assert!(matches!(
            hash_paths(r, &["nope".into()]).unwrap_err(),
            TreeError::Missing { .. }
        ));
        assert!(matches!(
            hash_paths(r, &["via".into()]).unwrap_err(),
            TreeError::Escapes { .. }
        ));
        let m = hash_paths(r, &["real".into(), "real/f".into()]).unwrap();
        assert_eq!(
            m.entries
                .iter()
                .map(|e| e.path.as_str())
                .collect::<Vec<_>>(),
            ["real", "real/f"]
        );
        assert_eq!(m.subtree("real").entries[0].path, "f");
    }

    #[test]
    fn large_file_streams_and_matches_a_one_shot_digest() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..3 * BUFFER + 17).map(|i| (i % 251) as u8).collect();
        write(dir.path(), "big", &bytes);
        let m = hash_tree(dir.path()).unwrap();
        assert_eq!(m.entries[0].digest, Some(Digest::of(&bytes)));
        assert_eq!(m.entries[0].size, bytes.len() as u64);
    }
}
