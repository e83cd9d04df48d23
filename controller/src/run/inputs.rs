//! Task inputs staged at admission: every task bundle the run uses (prompt, workspace seed,
//! `hidden/` with its grader files, oracle answers) is copied once into controller-owned,
//! content-addressed storage (`STATE/<matrix>/inputs/<tree digest hex>/`) and verified there
//! against the freeze's manifest. Attempts read, copy and mount only from that copy, so a file of
//! the project checkout swapped during the run (and restored before the report) cannot change what
//! an attempt was given or how it was graded.

use eval_protocols::{Manifest, TaskBundle, TreeError, hash_tree};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where each task bundle's verified copy is, by the bundle's project-relative directory.
#[derive(Clone, Debug, Default)]
pub struct TaskInputs {
    dirs: BTreeMap<String, PathBuf>,
}

impl TaskInputs {
    /// The staged copy of the bundle at `task_dir` (project-relative), if it was staged.
    pub fn dir(&self, task_dir: &str) -> Option<&Path> {
        self.dirs.get(task_dir).map(PathBuf::as_path)
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
            crate::run::attempt::copy_tree(&root.join(&task.dir), &tmp).map_err(io(&tmp))?;
            // The project may have changed since admission's drift check: verify the copy itself.
            if let Err(e) = check(&task.dir, &want, &tmp) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            std::fs::rename(&tmp, &dest).map_err(io(&dest))?;
        } else {
            check(&task.dir, &want, &dest)?;
        }
        dirs.insert(task.dir.clone(), dest);
    }
    Ok(TaskInputs { dirs })
}
