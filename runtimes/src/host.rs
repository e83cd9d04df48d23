//! Host-side preparation of what a container's non-root user must reach: the attempt's
//! workspace (writable) and its socket (connectable). The controller calls these before create.

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::Path;

use crate::fault::RuntimeError;

fn io(path: &Path, source: std::io::Error) -> RuntimeError {
    RuntimeError::HostIo {
        path: path.display().to_string(),
        source,
    }
}

/// Gives the container's user (`policy::effective_user`) ownership of the workspace tree
/// (links are not followed).
pub fn prepare_workspace(workspace: &Path, (uid, gid): (u32, u32)) -> Result<(), RuntimeError> {
    fn walk(p: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
        let meta = fs::symlink_metadata(p)?;
        if meta.file_type().is_symlink() {
            return std::os::unix::fs::lchown(p, Some(uid), Some(gid));
        }
        chown(p, Some(uid), Some(gid))?;
        if meta.is_dir() {
            for e in fs::read_dir(p)? {
                walk(&e?.path(), uid, gid)?;
            }
        }
        Ok(())
    }
    walk(workspace, uid, gid).map_err(|e| io(workspace, e))
}

/// Lets the container's user connect to the attempt's socket and traverse its directory, and
/// nobody else write into that directory.
pub fn prepare_socket(socket: &Path, (uid, gid): (u32, u32)) -> Result<(), RuntimeError> {
    if let Some(dir) = socket.parent() {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(|e| io(dir, e))?;
    }
    chown(socket, Some(uid), Some(gid)).map_err(|e| io(socket, e))?;
    fs::set_permissions(socket, fs::Permissions::from_mode(0o600)).map_err(|e| io(socket, e))
}
