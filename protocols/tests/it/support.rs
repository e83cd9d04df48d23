//! The project every protocol test starts from: a copy of the `eval init` template with the
//! fixture runtime, a state directory beside it, and a fixed driver digest.

use eval_evidence::ledger::Digest;
use eval_protocols::protocol::Arm;
use eval_protocols::{FreezeOutcome, ImageRecord, ProtocolError, pinned_image};
use std::fs;
use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn copy_dir(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// A project with protocol `demo`, plus a state directory beside it.
pub struct Fixture {
    pub _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub state: PathBuf,
}

pub fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("proj");
    copy_dir(&repo().join("protocols/init-template"), &root);
    copy_dir(
        &repo().join("runtimes/fixture"),
        &root.join("runtimes/fixture"),
    );
    let state = tmp.path().join("state");
    Fixture {
        _tmp: tmp,
        root,
        state,
    }
}

pub const DRIVER: Digest = Digest([7; 32]);

pub fn images(root: &Path, arm: &Arm) -> Result<ImageRecord, ProtocolError> {
    pinned_image(root, arm)
}

pub fn identity(o: &FreezeOutcome) -> Digest {
    match o {
        FreezeOutcome::Frozen { identity, .. } | FreezeOutcome::AlreadyFrozen { identity, .. } => {
            *identity
        }
    }
}
