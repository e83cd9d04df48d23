//! Task inputs staged at admission: every task bundle the run uses (prompt, workspace seed,
//! `hidden/` with its grader files, oracle answers) is copied once into controller-owned,
//! content-addressed storage (`STATE/<matrix>/inputs/<tree digest hex>/`) and verified there
//! against the freeze's manifest. Attempts read, copy and mount only from that copy, so a file of
//! the project checkout swapped during the run (and restored before the report) cannot change what
//! an attempt was given or how it was graded.
//!
//! The staged copy lives in the state directory, which is not immutable either: each bundle is
//! re-hashed right before every attempt's preparation and every grading ([`TaskInputs::recheck`])
//! and a copy that is no longer the frozen bundle is refused (the attempt is an infrastructure
//! fault, never graded); `attempt_outcome` records the bundle digest the attempt was prepared
//! and graded with (`bundle_digest`).

use eval_core::Digest;
use eval_protocols::{Manifest, TaskBundle, TreeError, hash_tree};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where each task bundle's verified copy is, by the bundle's project-relative directory.
#[derive(Clone, Debug, Default)]
pub struct TaskInputs {
    dirs: BTreeMap<String, (PathBuf, Manifest)>,
}

impl TaskInputs {
    /// The staged copy of the bundle at `task_dir` (project-relative), if it was staged.
    pub fn dir(&self, task_dir: &str) -> Option<&Path> {
        self.dirs.get(task_dir).map(|(d, _)| d.as_path())
    }

    /// The staged copy of the bundle at `task_dir`, re-hashed now against the freeze: its
    /// directory and the bundle digest it has, or why it may not be used (not staged, or changed
    /// since staging — a swap in the state directory mid-run).
    pub fn recheck(&self, task_dir: &str) -> Result<(&Path, Digest), InputsError> {
        let (dir, want) = self
            .dirs
            .get(task_dir)
            .ok_or_else(|| InputsError::Mismatch {
                task: task_dir.to_owned(),
                detail: "no staged copy of its inputs".into(),
            })?;
        check(task_dir, want, dir)?;
        Ok((dir.as_path(), want.digest()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    /// The copy could not be made (exit 2).
    #[error("{path}: staging the task inputs: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The copy is not what the freeze recorded (exit 3).
    #[error("task bundle {task}: {detail}")]
    Mismatch { task: String, detail: String },
    /// Hashing the copy failed.
    #[error("task bundle {task}: hashing its staged copy: {source}")]
    Tree {
        task: String,
        #[source]
        source: TreeError,
    },
}

impl InputsError {
    /// True when the inputs are not the frozen bytes (exit 3), not a host failure (exit 2).
    pub fn is_integrity(&self) -> bool {
        matches!(self, Self::Mismatch { .. } | Self::Tree { .. })
    }
}

/// The frozen manifest of one bundle: the freeze's entries below `dir/`, relative to it.
fn frozen_bundle(frozen: &Manifest, dir: &str) -> Manifest {
    let prefix = format!("{dir}/");
    let entries = frozen
        .entries
        .iter()
        .filter_map(|e| {
            let rel = e.path.strip_prefix(&prefix)?;
            let mut e = e.clone();
            e.path = rel.to_owned();
            Some(e)
        })
        .collect();
    Manifest { entries }
}

/// The first line in which two manifests differ, for the message.
fn first_difference(want: &Manifest, got: &Manifest) -> String {
    let (w, g) = (want.text(), got.text());
    for (a, b) in w.lines().zip(g.lines()) {
        if a != b {
            return format!("frozen `{a}`, copied `{b}`");
        }
    }
    format!(
        "frozen {} entries, copied {}",
        want.entries.len(),
        got.entries.len()
    )
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InputsError {
    let path = path.to_path_buf();
    move |source| InputsError::Io { path, source }
}

fn check(task: &str, want: &Manifest, copy: &Path) -> Result<(), InputsError> {
    let got = hash_tree(copy).map_err(|source| InputsError::Tree {
        task: task.to_owned(),
        source,
    })?;
    if got.digest() != want.digest() {
        return Err(InputsError::Mismatch {
            task: task.to_owned(),
            detail: format!(
                "its copy {} is not the frozen bundle ({})",
                copy.display(),
                first_difference(want, &got)
            ),
        });
    }
    Ok(())
}

/// Copies and verifies every bundle of `tasks` from the project at `root` into
/// `run_dir/inputs/`. A copy already there (an earlier session) is re-verified, never trusted.
pub fn stage(
    root: &Path,
    run_dir: &Path,
    tasks: &[TaskBundle],
    frozen: &Manifest,
) -> Result<TaskInputs, InputsError> {
    let base = run_dir.join("inputs");
    std::fs::create_dir_all(&base).map_err(io(&base))?;
    // Absolute: the copies are bind-mounted, and the container policy takes absolute paths only.
    let base = std::fs::canonicalize(&base).map_err(io(&base))?;
    let mut dirs = BTreeMap::new();
    for task in tasks {
        if dirs.contains_key(&task.dir) {
            continue;
        }
        let want = frozen_bundle(frozen, &task.dir);
        if want.entries.is_empty() {
            return Err(InputsError::Mismatch {
                task: task.dir.clone(),
                detail: "the freeze records no file of it".into(),
            });
        }
        let hex = want.digest().to_string().replace("sha256:", "");
        let dest = base.join(&hex);
        if !dest.exists() {
            let tmp = base.join(format!(".staging-{hex}-{}", std::process::id()));
            if tmp.exists() {
                std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
            }
            copy_tree(&root.join(&task.dir), &tmp).map_err(io(&tmp))?;
            // The project may have changed since admission's drift check: verify the copy itself.
            if let Err(e) = check(&task.dir, &want, &tmp) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            std::fs::rename(&tmp, &dest).map_err(io(&dest))?;
        } else {
            check(&task.dir, &want, &dest)?;
        }
        dirs.insert(task.dir.clone(), (dest, want));
    }
    Ok(TaskInputs { dirs })
}

/// [`TaskInputs::recheck`] right before a grading: `Err` (why, in words) unless the staged copy
/// still is the bundle the attempt was prepared with (`prepared`).
pub fn recheck_for_grading(
    inputs: &TaskInputs,
    task_dir: &str,
    prepared: &Digest,
) -> Result<(), String> {
    match inputs.recheck(task_dir) {
        Ok((_, d)) if d == *prepared => Ok(()),
        Ok((_, d)) => Err(format!(
            "task bundle {task_dir}: prepared with {prepared}, now {d}; not graded"
        )),
        Err(e) => Err(format!("{e}; not graded")),
    }
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
    use super::*;

    /// The attack: `hidden/checks.toml` of the staged copy swapped after staging (and restored
    /// afterwards). The re-hash before preparation and before grading refuses the swapped copy
    /// and names the bundle; the restored copy is the frozen bundle again, with its digest.
    #[test]
    fn a_staged_bundle_swapped_mid_run_is_refused_before_prepare_and_grading() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("inputs/b");
        std::fs::create_dir_all(dir.join("hidden")).unwrap();
        std::fs::write(dir.join("prompt.md"), b"do it\n").unwrap();
        let checks = dir.join("hidden/checks.toml");
        let five = b"[[check]]\n[[check]]\n[[check]]\n[[check]]\n[[check]]\n";
        std::fs::write(&checks, five).unwrap();
        let want = hash_tree(&dir).unwrap();
        let digest = want.digest();
        let inputs = TaskInputs {
            dirs: [("tasks/t".to_owned(), (dir.clone(), want))].into(),
        };
        let (d, got) = inputs.recheck("tasks/t").unwrap();
        assert_eq!((d, got), (dir.as_path(), digest));
        assert!(recheck_for_grading(&inputs, "tasks/t", &digest).is_ok());

        std::fs::write(&checks, b"[[check]]\n").unwrap();
        let e = inputs.recheck("tasks/t").unwrap_err();
        assert!(e.is_integrity(), "{e}");
        assert!(e.to_string().contains("tasks/t"), "{e}");
        let e = recheck_for_grading(&inputs, "tasks/t", &digest).unwrap_err();
        assert!(e.contains("not graded"), "{e}");

        std::fs::write(&checks, five).unwrap();
        assert_eq!(inputs.recheck("tasks/t").unwrap().1, digest);
        // A bundle that was never staged is refused too, never read from elsewhere.
        assert!(inputs.recheck("tasks/other").is_err());
    }
}
