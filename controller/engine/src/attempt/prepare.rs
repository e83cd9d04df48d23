//! Preparing an attempt on the host: its directory, workspace copy and socket directory.

use super::classify::engine_fault;
use super::classify::{HostIo, Observations, classify};
use super::control::AttemptControl;
use super::disk::{self, DiskLimits};
use super::executor::{DockerExecutor, is_attempt_dir, off_runtime};
use super::sockets::SocketRoot;
use crate::inputs::copy_tree;
use crate::{AttemptReport, AttemptSpec};
use eval_core::fault::FaultCode;
use eval_protocols::TaskBundle;
use eval_proxy::{Listen, Role};
use std::collections::BTreeMap;
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
        if !is_attempt_dir(&self.work, dir) {
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
        let made = off_runtime(move || {
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
    remove_attempt_tree(dir)
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

/// Removes an attempt directory whose contents the agent shaped. `std::fs::remove_dir_all`
/// recurses with one open directory and one stack frame per level, so a tree thousands of levels
/// deep would take the controller's file descriptors (failing sibling attempts) or its stack;
/// `Beneath::remove` holds a bounded number of descriptors and never follows a link.
pub(crate) fn remove_attempt_tree(dir: &Path) -> std::io::Result<()> {
    // The attempt's own filesystem first: its files go with it, and removing through a mount
    // would only empty it.
    match disk::unmount(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let root = eval_evidence::leftovers::Beneath::open(dir).map_err(std::io::Error::other)?;
    for entry in entries {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else {
            return Err(std::io::Error::other(format!(
                "{}: a top-level entry the controller did not make",
                dir.display()
            )));
        };
        root.remove(name).map_err(std::io::Error::other)?;
    }
    std::fs::remove_dir(dir)
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
