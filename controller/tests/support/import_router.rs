//! Helpers both halves of `import_router` use: `tests/it/import_router.rs` (no Docker) and
//! `tests/e2e/import_router.rs` (Docker).

use crate::support::eval;
use std::path::{Path, PathBuf};

pub const PACKAGE: &str = "dsh-plan-lattice-0.4.0-rc.3.tgz";

pub fn upstream() -> PathBuf {
    crate::support::v04_upstream()
}

pub fn import(project: &Path, from: &Path, extra: &[&str]) -> std::process::Output {
    let pkg = upstream().join(PACKAGE);
    let id = format!("sha256:{}", "d".repeat(64));
    let mut args = vec![
        "import",
        "v04-router",
        "--from",
        from.to_str().unwrap(),
        "--package",
        pkg.to_str().unwrap(),
        "--dsh-image",
        &id,
    ];
    args.extend_from_slice(extra);
    eval(project, &args)
}

pub fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    std::fs::create_dir(&dir).unwrap();
    (tmp, dir)
}

pub fn tasks(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub trait TapMkdir {
    fn tap_mkdir(self) -> PathBuf;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> PathBuf {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}
