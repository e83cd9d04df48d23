//! `eval import v04-evocode`: a synthetic 3-round Go task written here in the Harbor multi-step
//! layout of EvoCode-Bench (never the benchmark's own hidden data) imported into a temporary
//! project: it becomes a multi-round bundle (one prompt and one hidden test directory per round,
//! eval's grader wrapper beside each), the three arms of v0.4's EvoCode suite and a protocol that
//! plans and freezes; refusals (unpinned directories, a Dockerfile line eval cannot translate, a
//! step directory [[steps]] does not declare) exit 2 naming the file and line, and write nothing.
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/import_evocode.rs`.

pub(crate) use crate::support::import_evocode::*;
use crate::support::{eval, text};

/// `eval freeze` needs images the engine has: the dsh base, and for the grader any image the
/// engine holds (the test checks the freeze of what the import wrote, not the grader's content;
/// `EVAL_TEST_V04_GRADER_IMAGE` stands in for runtimes/images/evocode-go/build.sh's).
#[test]
fn freeze_of_the_imported_evocode_protocol_exits_0() {
    if !crate::support::docker_available() {
        return;
    }
    let var = |v: &str| {
        std::env::var(v).unwrap_or_else(|_| {
            panic!("{v} is not set: run `export $(scripts/ensure-harness-images.sh)` first")
        })
    };
    let (dsh, grader) = (
        var("EVAL_TEST_DSH_POLY_IMAGE"),
        var("EVAL_TEST_V04_GRADER_IMAGE"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("tasks");
    write_task(&from, DOCKERFILE);
    let proj = project(tmp.path());
    let o = import_with(
        &proj,
        &from,
        dsh.trim(),
        grader.trim(),
        &["--allow-unpinned"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["freeze", "--protocol", "evocode"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["verify", "--protocol", "evocode"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
