//! Host-side preparation of what a container's non-root user must reach: the attempt's
//! workspace (writable) and its socket (connectable). The controller calls these before create.

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::Path;

use crate::definition::RuntimeDef;
use crate::fault::RuntimeError;

fn io(path: &Path, source: std::io::Error) -> RuntimeError {
    RuntimeError::HostIo {
        path: path.display().to_string(),
        source,
    }
}

fn ids(def: &RuntimeDef) -> Result<(u32, u32), RuntimeError> {
    def.uid_gid().map_err(|detail| {
        RuntimeError::Definition(crate::definition::DefinitionError::Invalid {
            path: def.name.clone(),
            field: "user".to_owned(),
            detail,
        })
    })
}

/// Gives the container's user ownership of the workspace tree (links are not followed).
pub fn prepare_workspace(workspace: &Path, def: &RuntimeDef) -> Result<(), RuntimeError> {
    let (uid, gid) = ids(def)?;
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
pub fn prepare_socket(socket: &Path, def: &RuntimeDef) -> Result<(), RuntimeError> {
    let (uid, gid) = ids(def)?;
    if let Some(dir) = socket.parent() {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(|e| io(dir, e))?;
    }
    chown(socket, Some(uid), Some(gid)).map_err(|e| io(socket, e))?;
    fs::set_permissions(socket, fs::Permissions::from_mode(0o600)).map_err(|e| io(socket, e))
}
