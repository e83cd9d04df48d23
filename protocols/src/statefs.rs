//! Writes into the state directory, in one place. `eval report`, `eval freeze` and `eval run` may
//! run as root over a state directory that someone else could write to, so a symbolic link (or a
//! FIFO) planted where a file is about to be written must never steer the write elsewhere:
//!
//! - [`replace_file`]: a whole file is written into a fresh temporary file beside it (created
//!   with `O_CREAT|O_EXCL|O_NOFOLLOW`, so no planted name is opened) and renamed over the path;
//!   rename replaces a name, never what a link at it points to. A symbolic link already at the
//!   path is refused (named) rather than silently replaced.
//! - [`open_append`]: an append-only file (the registry) is opened `O_NOFOLLOW|O_NONBLOCK` and must
//!   be a regular file.
//!
//! Every writer of the state directory (report outputs and attestation, registry, freezes,
//! receipts, regrades, the site, attempt records) goes through these two.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

fn nofollow_flags() -> i32 {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC;
    // The flag bits are small positive constants on every Unix `eval` builds for.
    i32::try_from(flags.bits()).unwrap_or(0)
}

fn refuse_link(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a symbolic link: refused (eval writes into the state directory only through files of its own)",
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` by a new file renamed over it (see the module docs): never through a
/// link or FIFO at `path`, never half-written. The parent directory must exist.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    refuse_link(path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?
        .to_string_lossy()
        .into_owned();
    let (tmp, mut file) = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}.partial", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nofollow_flags())
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    };
    let written = file
        .write_all(bytes)
        .and_then(|_| file.sync_all())
        .and_then(|_| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Opens `path` for appending (and reading), creating it: never through a symbolic link
/// (`O_NOFOLLOW`), never blocking on a FIFO, and only a regular file.
pub fn open_append(path: &Path) -> io::Result<File> {
    let flags = nofollow_flags() | i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            if refuse_link(path).is_err() {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is a symbolic link: refused", path.display()),
                )
            } else {
                e
            }
        })?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file: refused", path.display()),
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_file_refuses_a_planted_link_and_leaves_its_target_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("host-file");
        std::fs::write(&target, b"host").unwrap();
        let planted = tmp.path().join("report.json");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        let e = replace_file(&planted, b"report").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"host");
        // A regular file is replaced whole; no temporary file stays.
        let plain = tmp.path().join("plain.json");
        std::fs::write(&plain, b"old").unwrap();
        replace_file(&plain, b"new").unwrap();
        assert_eq!(std::fs::read(&plain).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn open_append_refuses_a_link_and_a_fifo() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("host-file");
        std::fs::write(&target, b"host").unwrap();
        let planted = tmp.path().join("registry.jsonl");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        assert!(open_append(&planted).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"host");
        let fifo = tmp.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(open_append(&fifo).is_err());
        assert!(open_append(&tmp.path().join("new.jsonl")).is_ok());
    }
}
