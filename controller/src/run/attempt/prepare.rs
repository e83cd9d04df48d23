//! Preparing an attempt on the host: its directory, workspace copy and socket directory.

use eval_evidence::ledger::Digest;
use std::path::{Path, PathBuf};

/// A short directory for the attempt's socket: a Unix socket path must fit in 108 bytes, and
/// state directories and slot ids (v0.4's are up to ~80 characters) can be long.
pub(super) fn socket_dir(work: &Path, attempt: &str) -> PathBuf {
    let hex = Digest::of(attempt.as_bytes()).hex();
    sockets_root(work).join(&hex[..16])
}

/// Where all of one run's attempt sockets live (removed whole by the resume sweep: only the
/// process holding the ledger's writer lock uses it).
pub(super) fn sockets_root(work: &Path) -> PathBuf {
    let hex = Digest::of(work.display().to_string().as_bytes()).hex();
    std::env::temp_dir().join(format!("evs-{}", &hex[..16]))
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
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn socket_paths_stay_short_for_long_slot_ids() {
        let long =
            "infra-evocode-theme_d1_w1_code_build_greenfield_implementation-v0.4-lattice-r0#1";
        let work =
            Path::new("/a/very/long/state/directory/that/users/may/well/have/runs/v0.4/attempts");
        let p = socket_dir(work, long).join("a.sock");
        assert!(p.as_os_str().len() < 100, "{}", p.display());
        assert_ne!(socket_dir(work, long), socket_dir(work, "other#1"));
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
