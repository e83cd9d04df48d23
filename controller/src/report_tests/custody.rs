#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Writes into the state directory never go through a link planted there (`eval report` may run
//! as root): the attack is a symbolic link at the name of a file eval is about to write, pointing
//! at a host file.

use crate::report_tests::synthetic::{Shape, build};

#[test]
fn a_planted_symlink_in_the_state_directory_is_refused_and_its_target_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let run = build(
        tmp.path(),
        Shape {
            repetitions: 1,
            calls: 1,
            hostile: false,
        },
    );
    let host = tmp.path().join("host-file");
    std::fs::write(&host, b"host bytes\n").unwrap();

    // `report.json` in the run directory.
    let planted = eval_runlog::layout::run_dir(&run.state, &run.matrix).join("report.json");
    std::os::unix::fs::symlink(&host, &planted).unwrap();
    let data = eval_report::data::build(
        &run.root,
        &run.state,
        &run.matrix,
        &crate::driver::running(),
    )
    .unwrap();
    let e = crate::commands::report::publish(&data, &run.state, None).unwrap_err();
    assert!(e.message.contains("symbolic link"), "{}", e.message);
    assert_eq!(std::fs::read(&host).unwrap(), b"host bytes\n");
    assert!(planted.is_symlink());

    // The registry, appended to: a link at its name (here to a copy of it, so the chain would
    // verify through it) is refused, and the copy gains nothing.
    let registry = run.state.join("registry.jsonl");
    let copy = tmp.path().join("registry-copy.jsonl");
    std::fs::copy(&registry, &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    std::fs::remove_file(&registry).unwrap();
    std::os::unix::fs::symlink(&copy, &registry).unwrap();
    let identity = data.identity.clone();
    let e = eval_protocols::record_report(
        &run.state,
        &serde_json::json!({"identity": identity, "release_allowed": false}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read(&copy).unwrap(), before);
}
