//! `eval import v04` (issue 34): v0.4's real `simple` inputs (`../shared/v04-upstream`),
//! synthetic EvoCode tasks under v0.4's three ids (Harbor layout, `import_evocode::write_task`) and
//! a synthetic ICAE root for v0.4's six tasks (ICAE's layout, `import_icae`'s fixtures) become one
//! protocol and one matrix: `eval plan` lists exactly `protocols/v0.4`'s 6 + 90 slots in v0.4's
//! order; the protocol carries every v0.4 gate rule (EvoCode's `task_count` and bootstrap rules
//! included), H1–H3, the seven arms, the oracle role and the Harness's contract; images come from
//! build records or `--image`, and a missing one exits 2 naming its build script.
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/import_v04_whole.rs`.

pub(crate) use crate::support::import_v04_whole::*;
use crate::support::{eval, text};

/// With the engine and the three base images: `eval freeze` of the composed protocol exits 0.
#[test]
fn freeze_of_the_whole_v04_exits_0() {
    assert!(
        crate::support::docker_available(),
        "this test needs the Docker engine"
    );
    let mut images = Vec::new();
    for (name, var) in [
        ("dsh-poly", "EVAL_TEST_DSH_POLY_IMAGE"),
        ("v04-grader", "EVAL_TEST_V04_GRADER_IMAGE"),
        ("evocode-go", "EVAL_TEST_EVOCODE_GO_IMAGE"),
    ] {
        let id = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: `set -a; . /tmp/warm/images.env` or scripts/ensure-harness-images.sh")
        });
        images.push("--image".to_owned());
        images.push(format!("{name}={}", id.trim()));
    }
    let i = inputs();
    let extra: Vec<&str> = images.iter().map(String::as_str).collect();
    let o = import_v04(&i, &i.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&i.project, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("preconditions: none pinned"),
        "{}",
        text(&o)
    );
}

/// The finding of issue 34 through `eval run`: imported with no flag about grading, v0.4's
/// `simple-js-clamp` is checked by its control arms, the one-line cheat (`exploit:print-result`:
/// a module printing a passing result at import) scores 100 under v0.4's grader, and `eval report`
/// refuses the release naming it. (The fixture agent stands in for the Harness; the control slots
/// run no agent.)
#[test]
fn the_one_line_cheat_is_refused_by_default() {
    assert!(
        crate::support::docker_available(),
        "this test needs the Docker engine"
    );
    let grader = std::env::var("EVAL_TEST_V04_GRADER_IMAGE")
        .expect("EVAL_TEST_V04_GRADER_IMAGE: `set -a; . /tmp/warm/images.env`");
    crate::support::static_binaries();
    let (_t, proj) = crate::support::demo_project();
    let o = import_simple(&proj, grader.trim(), &["--tasks", "simple-js-clamp"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    crate::grader_controls::swap_in_fixture_arms(&proj);
    let report = crate::grader_controls::freeze_run_report(&proj);
    let reasons = report["reasons"].to_string();
    assert!(
        reasons.contains("exploit:print-result scored 100 on simple/simple-js-clamp"),
        "{reasons}"
    );
    let cells = report["grader_validity"].as_array().unwrap();
    assert!(
        cells
            .iter()
            .any(|c| c["arm"] == "oracle" && c["task"] == "simple-js-clamp" && c["ok"] == true),
        "{cells:?}"
    );
}
