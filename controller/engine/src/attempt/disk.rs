//! The attempt's own filesystem: a preallocated ext4 image, loop-mounted on the host inside the
//! attempt's directory, holding the agent's workspace and state directory.
//!
//! Why: a workspace on the host's filesystem lets an agent take the host's space (`fallocate`)
//! or inodes (millions of empty files), and the host running out is `filesystem_capacity`, a
//! rerunnable infrastructure fault — an agent that fills the disk only when it is failing would
//! get free redraws. On its own filesystem an agent can only fill its own: `ENOSPC` inside it is
//! what the agent did, the attempt's outcome. The image is preallocated (`fallocate`) before
//! the attempt, so the host cannot take the space back while the agent runs (a sparse image on
//! a full host would turn the agent's writes into I/O errors that look like its own failure);
//! a host without the room fails here, before any container, which is retried without using a
//! rerun.
//!
//! Layout of an attempt directory (`STATE/<matrix>/attempts/<slot>-a<n>/`):
//! `disk.img` (the image), `fs/` (its mount point; `fs/workspace`, `fs/state`) and `out/` (the
//! grader's, on the host: a full agent filesystem never takes the grader's output).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The image file's name in the attempt directory.
pub const IMAGE: &str = "disk.img";
/// The mount point's name in the attempt directory.
pub const MOUNT: &str = "fs";

/// The size and inode count of an attempt's filesystem (`[limits] workspace_mb`,
/// `workspace_inodes` of the arm's runtime definition, frozen with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskLimits {
    pub bytes: u64,
    pub inodes: u64,
}

impl DiskLimits {
    pub fn of(l: &eval_runtimes::definition::Limits) -> Self {
        Self {
            bytes: l.workspace_mb.saturating_mul(1 << 20),
            inodes: l.workspace_inodes,
        }
    }
}

/// Why the filesystem could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// Writing the image on the host failed (classified by errno: `ENOSPC` is the host's
    /// capacity).
    #[error("{what}: {source}")]
    Host {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A tool (`mkfs.ext4`, `mount`) is missing or refused: the machine is not set up.
    #[error("{0}")]
    Tool(String),
}

/// Makes `dir/disk.img` (`limits.bytes`, preallocated), an ext4 filesystem in it with
/// `limits.inodes` inodes and no reserved blocks, and mounts it at `dir/fs` (`nosuid`, `nodev`).
/// Returns the mount point. `dir` exists and is empty of these names.
pub fn make(dir: &Path, limits: DiskLimits) -> Result<PathBuf, DiskError> {
    let image = dir.join(IMAGE);
    let mount = dir.join(MOUNT);
    let host = |what: &str| {
        let what = format!("{what} {}", image.display());
        move |source| DiskError::Host { what, source }
    };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&image)
        .map_err(host("creating"))?;
    rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, limits.bytes)
        .map_err(|e| host("preallocating")(e.into()))?;
    f.sync_all().map_err(host("syncing"))?;
    drop(f);
    // No journal (the filesystem lives as long as one attempt), no reserved blocks (the agent
    // gets all of it), `nodiscard` (discarding would punch the preallocation back out of the
    // image), inode tables initialised lazily (`noinit_itable` below: never in the background).
    run(Command::new(tool("mkfs.ext4"))
        .args(["-q", "-F", "-m", "0", "-b", "4096", "-N"])
        .arg(limits.inodes.to_string())
        .args([
            "-O",
            "^has_journal,^resize_inode",
            "-E",
            "lazy_itable_init=1,nodiscard,root_owner=0:0",
            "-L",
            "eval-attempt",
        ])
        .arg(&image))?;
    std::fs::create_dir(&mount).map_err(host("creating the mount point of"))?;
    run(Command::new(tool("mount"))
        .args([
            "-t",
            "ext4",
            "-o",
            "loop,nosuid,nodev,noatime,noinit_itable",
        ])
        .arg(&image)
        .arg(&mount))?;
    Ok(mount)
}

/// `name` from `PATH`, else from `/usr/sbin` or `/sbin` (a user's `PATH` on Debian often lacks
/// them), else `name` itself (the error then says what is missing).
fn tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn run(cmd: &mut Command) -> Result<(), DiskError> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            DiskError::Tool(format!(
                "{shown}: {e} (an attempt's filesystem needs mkfs.ext4 from e2fsprogs and mount, as root)"
            ))
        })?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: String = err.trim().chars().take(600).collect();
    Err(DiskError::Tool(format!(
        "{shown} ended with {}: {tail}",
        out.status
    )))
}

/// Whether `path` is the root of a filesystem other than its parent's.
fn is_mount_point(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let Some(parent) = path.parent() else {
        return Ok(false);
    };
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !m.file_type().is_dir() {
        return Ok(false);
    }
    Ok(m.dev() != std::fs::symlink_metadata(parent)?.dev())
}

/// Unmounts `dir/fs` if it is mounted (the loop device goes with it: `mount -o loop` sets
/// autoclear). Busy (a process still holds it): detached, freed when the last user goes.
pub fn unmount(dir: &Path) -> std::io::Result<()> {
    use rustix::mount::{UnmountFlags, unmount};
    let mount = dir.join(MOUNT);
    if !is_mount_point(&mount)? {
        return Ok(());
    }
    match unmount(&mount, UnmountFlags::NOFOLLOW) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::BUSY) => {
            unmount(&mount, UnmountFlags::NOFOLLOW | UnmountFlags::DETACH).map_err(Into::into)
        }
        Err(e) => Err(e.into()),
    }
}

/// Unmounts every attempt filesystem left mounted under `work` (a session killed mid-attempt),
/// then detaches every loop device still backed by an attempt image under it: their
/// directories are removed when their slot runs again, but a mount or a loop device would
/// outlive them.
pub fn unmount_stale(work: &Path) {
    let Ok(entries) = std::fs::read_dir(work) else {
        return;
    };
    for entry in entries.flatten() {
        if let Err(e) = unmount(&entry.path()) {
            tracing::warn!(
                "{}: unmounting a stale attempt filesystem: {e}",
                entry.path().display()
            );
        }
    }
    for dev in loops_under(work) {
        if let Err(e) = run(Command::new(tool("losetup")).arg("-d").arg(&dev)) {
            tracing::warn!("{}: detaching a stale attempt disk: {e}", dev.display());
        }
    }
}

/// Loop devices whose backing file is an attempt image under `work` (`/sys/block/loop*/loop/
/// backing_file`, which names a deleted file with a ` (deleted)` suffix).
pub fn loops_under(work: &Path) -> Vec<PathBuf> {
    let work = std::fs::canonicalize(work).unwrap_or_else(|_| work.to_path_buf());
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(backing) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let backing = backing.trim_end_matches('\n');
        let backing = backing.strip_suffix(" (deleted)").unwrap_or(backing);
        let backing = Path::new(backing);
        if backing.starts_with(&work) && backing.file_name() == Some(IMAGE.as_ref()) {
            out.push(Path::new("/dev").join(&name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_limits_are_the_definitions() {
        let l = eval_runtimes::definition::Limits {
            workspace_mb: 64,
            workspace_inodes: 4096,
            ..Default::default()
        };
        assert_eq!(
            DiskLimits::of(&l),
            DiskLimits {
                bytes: 64 << 20,
                inodes: 4096
            }
        );
    }

    #[test]
    fn a_plain_directory_is_no_mount_point_and_unmounting_it_does_nothing() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join(MOUNT)).unwrap();
        assert!(!is_mount_point(&t.path().join(MOUNT)).unwrap());
        assert!(!is_mount_point(&t.path().join("absent")).unwrap());
        unmount(t.path()).unwrap();
        assert!(t.path().join(MOUNT).is_dir());
    }

    /// The filesystem holds what its limits say and no more: a preallocation past its size and
    /// a file flood past its inodes both end in `ENOSPC` inside it, and the host's image never
    /// grows past the limit. Needs root (mount), as the controller does.
    #[test]
    fn an_attempt_filesystem_is_bounded_in_bytes_and_inodes_and_goes_away() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("slot-a1");
        std::fs::create_dir(&dir).unwrap();
        let limits = DiskLimits {
            bytes: 16 << 20,
            inodes: 1024,
        };
        let fs = make(&dir, limits).unwrap();
        assert!(is_mount_point(&fs).unwrap());
        let st = rustix::fs::statvfs(&fs).unwrap();
        assert!(
            st.f_blocks * st.f_frsize <= limits.bytes,
            "{} blocks",
            st.f_blocks
        );
        assert!(st.f_files <= 2 * limits.inodes, "{} inodes", st.f_files);
        let image = std::fs::metadata(dir.join(IMAGE)).unwrap();
        assert_eq!(image.len(), limits.bytes);
        use std::os::unix::fs::MetadataExt;
        assert!(
            image.blocks() * 512 >= limits.bytes,
            "the image is preallocated"
        );

        let big = std::fs::File::create(fs.join("big")).unwrap();
        let e = rustix::fs::fallocate(&big, rustix::fs::FallocateFlags::empty(), 0, 64 << 20)
            .unwrap_err();
        assert_eq!(e, rustix::io::Errno::NOSPC);
        drop(big);
        let mut made = 0u64;
        let err = loop {
            match std::fs::File::create(fs.join(format!("f{made}"))) {
                Ok(_) => made += 1,
                Err(e) => break e,
            }
            assert!(made <= 4 * limits.inodes, "no inode limit");
        };
        assert_eq!(err.raw_os_error(), Some(28), "{err}");
        assert_eq!(
            std::fs::metadata(dir.join(IMAGE)).unwrap().len(),
            limits.bytes
        );

        // Removing the attempt unmounts it first, then removes the image and the mount point.
        crate::attempt::remove_attempt_tree(&dir).unwrap();
        assert!(!dir.exists());
    }
}
