//! Preparing an attempt on the host: its directory, workspace copy and socket directory.

use super::DockerExecutor;
use super::classify::{HostIo, Observations, classify};
use super::container::engine_fault;
use super::control::AttemptControl;
use super::disk::{self, DiskLimits};
use crate::{AttemptReport, AttemptSpec};
use eval_core::fault::FaultCode;
use eval_evidence::ledger::Digest;
use eval_protocols::TaskBundle;
use eval_proxy::{Listen, Role};
use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The attempt's host side while it runs.
pub(super) struct Prepared {
    pub(super) task_dir: PathBuf,
    /// The file mounted at `/task/prompt.md`: the task's `prompt.md`, or for a multi-round
    /// attempt the attempt's own file holding the current round's prompt (`rounds.rs`).
    pub(super) prompt: PathBuf,
    pub(super) workspace: PathBuf,
    pub(super) out: PathBuf,
    /// The harness's state directory (`metrics_root = "state"`), beside the workspace and
    /// never in it.
    pub(super) state: Option<PathBuf>,
    pub(super) socket: PathBuf,
    /// The attempt's oracle record directory, once written for a grader that may read it
    /// (`fn write_oracle_record`).
    pub(super) oracle_record: Option<PathBuf>,
    /// The task bundle's digest, re-hashed at preparation (recorded in `attempt_outcome`).
    pub(super) bundle_digest: eval_core::Digest,
    /// The container user's ids (the socket is handed to them).
    uid: u32,
    gid: u32,
}

/// An attempt that ended before its container: a host write failed (classified by errno).
fn host_fault(what: String, e: &std::io::Error) -> AttemptReport {
    let obs = Observations {
        host_io: Some(HostIo::of(what, e)),
        ..Observations::default()
    };
    let c = classify(&obs);
    AttemptReport::infra(
        c.infra_fault.unwrap_or(FaultCode::ControllerError),
        format!(
            "{}: {e}",
            c.detail.as_deref().unwrap_or("a host write failed")
        ),
    )
}

/// Free space (bytes) and inodes the attempts' filesystem must have before an attempt starts:
/// room for one attempt's workspace, logs and archive. Below it the attempt does not start
/// (`filesystem_capacity` before any container: retried without using a rerun), so a host that
/// is running out fails before an agent runs, not in the middle of one.
pub const FREE_BYTES_RESERVE: u64 = 2 << 30;
/// See [`FREE_BYTES_RESERVE`].
pub const FREE_INODES_RESERVE: u64 = 100_000;

/// Why `(available bytes, available inodes)` is below the reserve, if it is. A filesystem that
/// reports no inode count (0 total) is judged by bytes alone.
pub(super) fn below_reserve(bytes: u64, inodes: u64, total_inodes: u64) -> Option<String> {
    if bytes < FREE_BYTES_RESERVE {
        return Some(format!(
            "{bytes} bytes free, the reserve before an attempt is {FREE_BYTES_RESERVE}"
        ));
    }
    if total_inodes > 0 && inodes < FREE_INODES_RESERVE {
        return Some(format!(
            "{inodes} inodes free, the reserve before an attempt is {FREE_INODES_RESERVE}"
        ));
    }
    None
}

/// The free-space reserve of the filesystem holding `dir`, after `image` bytes are taken for
/// the attempt's own filesystem.
fn reserve_problem(dir: &Path, image: u64) -> Result<Option<String>, std::io::Error> {
    let st = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
    let bytes = st.f_bavail.saturating_mul(st.f_frsize);
    Ok(
        below_reserve(bytes.saturating_sub(image), st.f_favail, st.f_files)
            .map(|why| format!("{why} (after the attempt's own filesystem of {image} bytes)")),
    )
}

impl DockerExecutor {
    /// A fresh attempt directory owned by the container's user `(uid, gid)`
    /// (`policy::effective_user`): the attempt's own filesystem (`disk`, `limits`) holding the
    /// workspace copy and the state directory, the grader's out dir beside it, and the
    /// attempt's private socket directory.
    pub(super) async fn prepare(
        &self,
        spec: &AttemptSpec,
        (uid, gid): (u32, u32),
        task: &TaskBundle,
        dir: &Path,
        (with_state, limits): (bool, Option<DiskLimits>),
    ) -> Result<Prepared, Box<AttemptReport>> {
        if !super::is_attempt_dir(&self.work, dir) {
            return Err(Box::new(AttemptReport::infra(
                FaultCode::ControllerError,
                format!(
                    "slot {}: its attempt directory would leave {}",
                    spec.slot.id,
                    self.work.display()
                ),
            )));
        }
        match reserve_problem(&self.work, limits.map_or(0, |l| l.bytes)) {
            Ok(None) => {}
            Ok(Some(why)) => {
                return Err(Box::new(AttemptReport::infra(
                    FaultCode::FilesystemCapacity,
                    format!("{}: {why}", self.work.display()),
                )));
            }
            Err(e) => {
                return Err(Box::new(host_fault(
                    format!("checking {}", self.work.display()),
                    &e,
                )));
            }
        }
        // Only the copy staged and verified at admission, re-hashed now; never the live project
        // checkout.
        let (task_dir, bundle_digest) = match self.inputs.recheck(&task.dir) {
            Ok((d, digest)) => (d.to_path_buf(), digest),
            Err(e) => {
                return Err(Box::new(AttemptReport::infra(
                    FaultCode::ControllerError,
                    e.to_string(),
                )));
            }
        };
        let fs = match limits {
            Some(_) => dir.join(disk::MOUNT),
            None => dir.to_path_buf(),
        };
        let workspace = fs.join("workspace");
        let out = dir.join("out");
        let state = with_state.then(|| fs.join("state"));
        // Making and mounting the filesystem and copying the seed are blocking work.
        let (d, seed, ws, st, o) = (
            dir.to_path_buf(),
            task_dir.join("workspace"),
            workspace.clone(),
            state.clone(),
            out.clone(),
        );
        let made = super::off_runtime(move || {
            fresh_attempt_dir(&d, limits, &seed, (&ws, st.as_deref(), &o), (uid, gid))
        })
        .await;
        match made {
            Ok(Ok(())) => {}
            Ok(Err(report)) => return Err(report),
            Err(why) => {
                return Err(Box::new(AttemptReport::infra(
                    FaultCode::ControllerError,
                    why,
                )));
            }
        }
        let socket = self
            .sockets
            .attempt_dir(&spec.attempt, uid, gid)
            .map_err(|e| host_fault(format!("the socket directory of {}", spec.attempt), &e))?;
        Ok(Prepared {
            prompt: task_dir.join("prompt.md"),
            task_dir,
            workspace,
            out,
            state,
            socket,
            oracle_record: None,
            bundle_digest,
            uid,
            gid,
        })
    }

    /// Registers the attempt with the control plane and the proxy (its socket, roles and
    /// budgets), then gives the bound socket to the container's user.
    pub(super) async fn register(
        &self,
        spec: &AttemptSpec,
        ctl: &Arc<AttemptControl>,
        p: &Prepared,
    ) -> Result<(), Box<AttemptReport>> {
        self.control.insert(&spec.attempt, ctl.clone());
        let mut roles = BTreeMap::new();
        roles.insert(Role::Agent, self.agent.clone());
        if ctl.oracle.is_some()
            && let Some((role, _, _)) = &self.oracle
        {
            // The oracle role may answer at most the questions the task allows.
            let mut role = role.clone();
            role.budget.max_requests = Some(u64::from(ctl.max_questions));
            // A stateful oracle resends its conversation: the task may bound its tokens.
            let stateful = ctl.oracle.as_ref().and_then(|o| o.stateful.as_ref());
            role.budget.max_tokens = Some(
                stateful
                    .and_then(|st| st.spec.max_tokens)
                    .unwrap_or(self.max_tokens),
            );
            roles.insert(Role::Oracle, role);
        }
        self.proxy
            .register_attempt(eval_proxy::AttemptSpec {
                attempt_id: spec.attempt.clone(),
                arm: spec.slot.arm.clone(),
                session_id: spec.attempt.clone(),
                listen: Listen::Unix(p.socket.clone()),
                roles,
            })
            .await
            .map_err(|e| AttemptReport::infra(FaultCode::ProxyFailure, e.to_string()))?;
        if let Err(e) = SocketRoot::hand_over(&p.socket, p.uid, p.gid) {
            // The attempt never starts: close what was registered.
            if let Err(c) = self.proxy.close_attempt(&spec.attempt) {
                tracing::warn!("closing {}: {c}", spec.attempt);
            }
            return Err(Box::new(host_fault(
                format!("the socket of {}", spec.attempt),
                &e,
            )));
        }
        Ok(())
    }
}

/// Removes a stale attempt directory, makes a fresh one with its own filesystem, copies the
/// seed into it and hands the workspace, state and out directories to the container's user.
fn fresh_attempt_dir(
    dir: &Path,
    limits: Option<DiskLimits>,
    seed: &Path,
    (workspace, state, out): (&Path, Option<&Path>, &Path),
    ids: (u32, u32),
) -> Result<(), Box<AttemptReport>> {
    let shown = dir.display();
    super::remove_attempt_tree(dir)
        .and_then(|()| std::fs::create_dir_all(dir))
        .map_err(|e| host_fault(format!("preparing {shown}"), &e))?;
    if let Some(limits) = limits {
        disk::make(dir, limits).map_err(|e| match e {
            disk::DiskError::Host { what, source } => Box::new(host_fault(what, &source)),
            disk::DiskError::Tool(why) => {
                Box::new(AttemptReport::infra(FaultCode::ControllerError, why))
            }
        })?;
    }
    // A seed that does not fit the runtime's own limit is the protocol's mistake, not the
    // host's capacity: no retry fixes it.
    copy_tree(seed, workspace).map_err(|e| {
        if let Some(limits) = limits.filter(|_| e.raw_os_error().is_some_and(|n| n == 28 || n == 122)) {
            Box::new(AttemptReport::infra(
                FaultCode::ControllerError,
                format!(
                    "the task's workspace does not fit the attempt's filesystem ({} bytes, {} inodes; [limits] workspace_mb, workspace_inodes): {e}",
                    limits.bytes, limits.inodes
                ),
            ))
        } else {
            Box::new(host_fault(format!("preparing {shown}"), &e))
        }
    })?;
    (|| -> std::io::Result<()> {
        if let Some(state) = state {
            std::fs::create_dir_all(state)?;
        }
        std::fs::create_dir_all(out)
    })()
    .map_err(|e| host_fault(format!("preparing {shown}"), &e))?;
    for d in [Some(workspace), state, Some(out)].into_iter().flatten() {
        eval_runtimes::host::prepare_workspace(d, ids).map_err(|e| {
            let f = engine_fault(&e);
            Box::new(AttemptReport::infra(f.code, f.detail))
        })?;
    }
    Ok(())
}

/// The longest socket path a `sockaddr_un` holds (108 bytes with its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

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
fn check_private(dir: &Path, uid: u32) -> std::io::Result<()> {
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
fn socket_dir(root: &Path, attempt: &str) -> PathBuf {
    let hex = Digest::of(attempt.as_bytes()).hex();
    root.join(&hex[..16])
}

/// Copies a task's workspace (files, directories, symlinks as links, exec bits kept).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    if !from.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let ft = std::fs::symlink_metadata(&src)?.file_type();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if ft.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod reserve_tests {
    use super::*;

    #[test]
    fn an_attempt_needs_the_free_space_reserve() {
        assert_eq!(
            below_reserve(FREE_BYTES_RESERVE, FREE_INODES_RESERVE, 1 << 20),
            None
        );
        let why = below_reserve(FREE_BYTES_RESERVE - 1, 1 << 30, 1 << 30).unwrap();
        assert!(why.contains("bytes free"), "{why}");
        let why = below_reserve(u64::MAX, FREE_INODES_RESERVE - 1, 1 << 30).unwrap();
        assert!(why.contains("inodes free"), "{why}");
        // No inode accounting at all (some filesystems report 0): bytes decide.
        assert_eq!(below_reserve(u64::MAX, 0, 0), None);
        // This machine's own work directory can be checked.
        assert!(reserve_problem(&std::env::temp_dir(), 0).is_ok());
        let why = reserve_problem(&std::env::temp_dir(), u64::MAX)
            .unwrap()
            .unwrap();
        assert!(why.contains("own filesystem"), "{why}");
    }
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

    #[test]
    fn copy_tree_keeps_links_and_exec_bits() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        std::fs::write(src.join("d/run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(src.join("d/run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink("d/run.sh", src.join("link")).unwrap();
        let dst = t.path().join("dst");
        copy_tree(&src, &dst).unwrap();
        let mode = std::fs::metadata(dst.join("d/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
        assert_eq!(
            std::fs::read_link(dst.join("link")).unwrap(),
            PathBuf::from("d/run.sh")
        );
    }
}
