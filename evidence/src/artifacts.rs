//! The content-addressed artifact store: every file a run keeps (final workspaces, grader output,
//! transcripts) is stored once, under the SHA-256 of its bytes, in `STATE/<matrix>/artifacts/`.
//!
//! Layout: `sha256/<first two hex digits>/<64 hex digits>`, each file read-only once written.
//! Writes go to `tmp/` first and are renamed into place after an fsync, so a crash leaves either
//! no object or a whole one; a name is never overwritten (the same name means the same bytes).
//!
//! A directory is stored as a **deterministic tar** ([`tar_dir`]): entries sorted by the bytes of
//! their `/`-separated relative path; directories, regular files and symlinks only (symlinks stored
//! as links, never followed); mode `0755` for directories and executable files, `0644` otherwise;
//! uid/gid 0, empty owner names, mtime 0; a PAX `path`/`linkpath` record only when a name does not
//! fit the ustar fields. The same tree gives the same bytes on every machine, so the archive's
//! digest is a digest of the tree.

use crate::ledger::Digest;
use sha2::{Digest as _, Sha256};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Something went wrong reading or writing the store.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error("artifact {digest} is missing from the store")]
    Missing { digest: Digest },
    #[error("artifact {digest} is corrupt: its bytes hash to {actual}")]
    Corrupt { digest: Digest, actual: Digest },
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
}

impl ArtifactStore {
    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: &Path) -> Result<Self, ArtifactError> {
        fs::create_dir_all(root.join("sha256")).map_err(io_err(root))?;
        fs::create_dir_all(root.join("tmp")).map_err(io_err(root))?;
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the object with this digest lives (whether or not it exists).
    pub fn path_of(&self, digest: &Digest) -> PathBuf {
        let hex = digest.hex();
        self.root.join("sha256").join(&hex[..2]).join(hex)
    }

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

    /// Stores the deterministic tar of `dir` (see the module docs).
    pub fn put_dir(&self, dir: &Path) -> Result<Digest, ArtifactError> {
        let (tmp, mut file) = self.temp_file()?;
        let mut writer = HashingWriter::new(io::BufWriter::new(&mut file));
        tar_dir(dir, &mut writer).inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })?;
        let (digest, buf) = writer.finish();
        buf.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .map_err(io_err(&tmp))?;
        drop(file);
        self.publish(&tmp, &digest)?;
        Ok(digest)
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
        let mut writer = HashingWriter::new(&mut file);
        let copied = io::copy(reader, &mut writer);
        let (digest, _) = writer.finish();
        if let Err(e) = copied.and_then(|_| file.sync_all()) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp)(e));
        }
        drop(file);
        self.publish(&tmp, &digest)?;
        Ok(digest)
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

/// One entry of a tree walk, path relative to the root with `/` separators.
enum TreeEntry {
    Dir(String),
    File {
        rel: String,
        abs: PathBuf,
        exec: bool,
    },
    Link {
        rel: String,
        target: String,
    },
}

impl TreeEntry {
    fn rel(&self) -> &str {
        match self {
            TreeEntry::Dir(r) | TreeEntry::File { rel: r, .. } | TreeEntry::Link { rel: r, .. } => {
                r
            }
        }
    }
}

fn walk(root: &Path, rel: &str, out: &mut Vec<TreeEntry>) -> Result<(), ArtifactError> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
        let entry = entry.map_err(io_err(&dir))?;
        let abs = entry.path();
        let name = entry.file_name();
        let name = name.to_str().ok_or_else(|| ArtifactError::Unsupported {
            path: abs.clone(),
            reason: "file name is not UTF-8".into(),
        })?;
        let child = if rel.is_empty() {
            name.to_owned()
        } else {
            format!("{rel}/{name}")
        };
        let meta = fs::symlink_metadata(&abs).map_err(io_err(&abs))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = fs::read_link(&abs).map_err(io_err(&abs))?;
            let target = target
                .to_str()
                .ok_or_else(|| ArtifactError::Unsupported {
                    path: abs.clone(),
                    reason: "link target is not UTF-8".into(),
                })?
                .to_owned();
            out.push(TreeEntry::Link { rel: child, target });
        } else if ft.is_dir() {
            out.push(TreeEntry::Dir(child.clone()));
            walk(root, &child, out)?;
        } else if ft.is_file() {
            out.push(TreeEntry::File {
                rel: child,
                abs,
                exec: is_executable(&meta),
            });
        } else {
            return Err(ArtifactError::Unsupported {
                path: abs,
                reason: "only directories, regular files and symlinks can be archived".into(),
            });
        }
    }
    Ok(())
}

#[cfg(unix)]
fn is_executable(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &fs::Metadata) -> bool {
    false
}

/// Writes the deterministic tar of `dir` (see the module docs) to `out`.
pub fn tar_dir(dir: &Path, out: &mut dyn Write) -> Result<(), ArtifactError> {
    let mut entries = Vec::new();
    walk(dir, "", &mut entries)?;
    entries.sort_by(|a, b| a.rel().as_bytes().cmp(b.rel().as_bytes()));
    for e in &entries {
        match e {
            TreeEntry::Dir(rel) => {
                write_header(out, &format!("{rel}/"), "", b'5', 0o755, 0).map_err(io_err(dir))?
            }
            TreeEntry::Link { rel, target } => {
                write_header(out, rel, target, b'2', 0o777, 0).map_err(io_err(dir))?
            }
            TreeEntry::File { rel, abs, exec } => {
                let mut f = fs::File::open(abs).map_err(io_err(abs))?;
                let size = f.metadata().map_err(io_err(abs))?.len();
                let mode = if *exec { 0o755 } else { 0o644 };
                write_header(out, rel, "", b'0', mode, size).map_err(io_err(abs))?;
                let copied = io::copy(&mut (&mut f).take(size), out).map_err(io_err(abs))?;
                if copied != size {
                    return Err(ArtifactError::Unsupported {
                        path: abs.clone(),
                        reason: "file changed size while it was archived".into(),
                    });
                }
                pad(out, size).map_err(io_err(abs))?;
            }
        }
    }
    // Two zero blocks end the archive.
    out.write_all(&[0u8; 1024]).map_err(io_err(dir))?;
    Ok(())
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

fn ustar_header(name: &[u8], link: &[u8], typeflag: u8, mode: u32, size: u64) -> [u8; 512] {
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
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|&b| b as u64).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    h
}

fn pax_record(key: &str, value: &str) -> Vec<u8> {
    // "<len> key=value\n" where len counts itself.
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    loop {
        let candidate = format!("{len}{body}");
        if candidate.len() == len {
            return candidate.into_bytes();
        }
        len = candidate.len();
    }
}

fn write_header(
    out: &mut dyn Write,
    name: &str,
    link: &str,
    typeflag: u8,
    mode: u32,
    size: u64,
) -> io::Result<()> {
    let long_name = name.len() > 100;
    let long_link = link.len() > 100;
    if long_name || long_link {
        let mut records = Vec::new();
        if long_name {
            records.extend(pax_record("path", name));
        }
        if long_link {
            records.extend(pax_record("linkpath", link));
        }
        let pax_name = b"././@PaxHeader";
        out.write_all(&ustar_header(
            pax_name,
            b"",
            b'x',
            0o644,
            records.len() as u64,
        ))?;
        out.write_all(&records)?;
        pad(out, records.len() as u64)?;
    }
    let name_field = truncate_utf8(name, 100);
    let link_field = truncate_utf8(link, 100);
    out.write_all(&ustar_header(name_field, link_field, typeflag, mode, size))
}

fn truncate_utf8(s: &str, max: usize) -> &[u8] {
    let bytes = s.as_bytes();
    if bytes.len() <= max {
        return bytes;
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    &bytes[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::thread::sleep(std::time::Duration::from_millis(20));
        tree(&b); // other mtimes, same content
        let da = store.put_dir(&a).unwrap();
        let db = store.put_dir(&b).unwrap();
        assert_eq!(da, db, "mtimes must not enter the archive");
        store.verify(&da).unwrap();

        // The exec bit changes the archive.
        set_mode(&b.join("src/main.py"), 0o644).unwrap();
        let db2 = store.put_dir(&b).unwrap();
        assert_ne!(da, db2);
        // So does a rename.
        fs::rename(b.join("README.md"), b.join("README.txt")).unwrap();
        assert_ne!(store.put_dir(&b).unwrap(), db2);
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
}
