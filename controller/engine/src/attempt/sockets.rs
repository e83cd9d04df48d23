//! The run's private directory of attempt sockets.

use eval_evidence::ledger::Digest;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The longest socket path a `sockaddr_un` holds (108 bytes with its terminating NUL).
pub(super) const MAX_SOCKET_PATH: usize = 107;

/// One run's private directory of attempt sockets: created fresh (a random name, `mkdir`
/// refuses an existing one), mode 0700 and owned by the controller — both checked after
/// creation, so a directory someone else prepared is never used. Each attempt gets a
/// subdirectory owned by its container's user (0700) holding its socket (0600): only that user
/// (and root) can reach the proxy through it. Removed when dropped.
pub struct SocketRoot {
    dir: tempfile::TempDir,
}

impl SocketRoot {
    /// Under `$TMPDIR`, or under `work` when `$TMPDIR` is too long for socket paths.
    pub fn create(work: &Path) -> std::io::Result<SocketRoot> {
        let tmp = std::env::temp_dir();
        let base = if fits(&tmp) { tmp } else { work.to_path_buf() };
        if !fits(&base) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{}: too long a directory for attempt sockets (at most {MAX_SOCKET_PATH} bytes per socket path); set TMPDIR to a short one",
                    base.display()
                ),
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("evs-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&base)?;
        check_private(dir.path(), rustix::process::geteuid().as_raw())?;
        Ok(SocketRoot { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Creates the attempt's socket directory, owned by the container's `uid:gid`, mode 0700,
    /// and returns the socket path in it. An existing directory (a stale attempt) is refused.
    pub fn attempt_dir(&self, attempt: &str, uid: u32, gid: u32) -> std::io::Result<PathBuf> {
        let dir = socket_dir(self.path(), attempt);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        std::os::unix::fs::lchown(&dir, Some(uid), Some(gid))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        check_private(&dir, uid)?;
        Ok(dir.join(SOCKET_NAME))
    }

    /// Gives the bound socket to the container's user, 0600.
    pub fn hand_over(socket: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
        std::os::unix::fs::lchown(socket, Some(uid), Some(gid))?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
    }

    /// Removes one attempt's socket directory (its socket is gone with the proxy's close).
    pub fn remove_attempt(&self, attempt: &str) -> std::io::Result<()> {
        let dir = socket_dir(self.path(), attempt);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }
}

/// The socket's file name inside its attempt directory.
const SOCKET_NAME: &str = "a.sock";

/// A room for `<base>/evs-XXXXXX/<16 hex>/a.sock`.
fn fits(base: &Path) -> bool {
    base.as_os_str().len() + "/evs-XXXXXX/".len() + 16 + 1 + SOCKET_NAME.len() <= MAX_SOCKET_PATH
}

/// Refuses `dir` unless it is a real directory (not a link), owned by `uid`, mode 0700.
pub(super) fn check_private(dir: &Path, uid: u32) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    let mode = m.mode() & 0o7777;
    if !m.file_type().is_dir() || m.uid() != uid || mode != 0o700 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{}: expected a directory owned by uid {uid} with mode 0700, found uid {} mode {mode:o}",
                dir.display(),
                m.uid()
            ),
        ));
    }
    Ok(())
}

/// A short directory name for the attempt's socket: a Unix socket path must fit in 108 bytes,
/// and slot ids (v0.4's are up to ~80 characters) can be long.
pub(super) fn socket_dir(root: &Path, attempt: &str) -> PathBuf {
    let hex = Digest::of(attempt.as_bytes()).hex();
    root.join(&hex[..16])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn socket_paths_stay_short_for_long_slot_ids() {
        let long =
            "infra-evocode-theme_d1_w1_code_build_greenfield_implementation-v0.4-lattice-r0#1";
        let work =
            Path::new("/a/very/long/state/directory/that/users/may/well/have/runs/v0.4/attempts");
        let root = SocketRoot::create(work).unwrap();
        let p = root.attempt_dir(long, 0, 0).unwrap();
        assert!(p.as_os_str().len() <= MAX_SOCKET_PATH, "{}", p.display());
        assert_ne!(
            socket_dir(root.path(), long),
            socket_dir(root.path(), "other#1")
        );
    }

    /// The run's root is the controller's and private; an attempt's directory is its container
    /// user's and private; a second attempt directory of the same name is refused.
    #[test]
    fn socket_directories_are_private_to_their_owner() {
        let work = tempfile::tempdir().unwrap();
        let root = SocketRoot::create(work.path()).unwrap();
        let m = std::fs::symlink_metadata(root.path()).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700);
        assert_eq!(m.uid(), rustix::process::geteuid().as_raw());
        let sock = root.attempt_dir("s#1", 4242, 4343).unwrap();
        let dir = sock.parent().unwrap();
        let m = std::fs::symlink_metadata(dir).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (4242, 4343, 0o700));
        assert!(
            root.attempt_dir("s#1", 4242, 4343).is_err(),
            "a stale directory is refused"
        );
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        SocketRoot::hand_over(&sock, 4242, 4343).unwrap();
        let m = std::fs::symlink_metadata(&sock).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (4242, 4343, 0o600));
        drop(listener);
        root.remove_attempt("s#1").unwrap();
        assert!(!dir.exists());
        let kept = root.path().to_path_buf();
        drop(root);
        assert!(!kept.exists(), "the run's socket root goes with it");
    }

    #[test]
    fn a_foreign_or_open_directory_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::DirBuilder::new().mode(0o755).create(&d).unwrap();
        let me = rustix::process::geteuid().as_raw();
        assert!(check_private(&d, me).is_err(), "mode 0755 is not private");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        check_private(&d, me).unwrap();
        assert!(
            check_private(&d, me + 1).is_err(),
            "another owner is refused"
        );
        let link = t.path().join("l");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(check_private(&link, me).is_err(), "a link is refused");
    }
}
