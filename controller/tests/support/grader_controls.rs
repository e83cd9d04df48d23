//! Helpers both halves of `grader_controls` use: `tests/it/grader_controls.rs` (no Docker) and
//! `tests/e2e/grader_controls.rs` (Docker).

use crate::support::{eval, fixture_json_report, replace_in, repo_root, text};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub const NAME: &str = "simple-real";
pub const PACKAGES: [&str; 2] = [
    "dsh-plan-lattice-0.3.0.tgz",
    "dsh-plan-lattice-0.4.0-rc.3.tgz",
];
pub const TASKS: [&str; 6] = [
    "simple-js-clamp",
    "simple-ts-slugify",
    "simple-python-whitespace",
    "simple-go-dedupe",
    "simple-js-parse-port",
    "simple-python-chunks",
];

pub fn solutions() -> PathBuf {
    repo_root().join("controller/import/src/simple-solutions")
}

pub fn import(project: &Path, dsh: &str, grader: &str, extra: &[&str]) -> std::process::Output {
    let from = crate::support::v04_upstream();
    let mut args = vec![
        "import",
        "v04-simple",
        "--from",
        from.to_str().unwrap(),
        "--protocol",
        NAME,
        "--dsh-image",
        dsh,
        "--grader-image",
        grader,
    ];
    args.extend_from_slice(extra);
    eval(project, &args)
}

pub fn fake(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// Freezes the imported protocol, runs it on the fixture upstream and returns its JSON report,
/// which refuses the release (exit 1: fixture evidence, whatever the grader).
pub fn freeze_run_report(proj: &Path) -> Value {
    let o = eval(proj, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(proj, &["run", "--matrix", NAME, "--upstream", "fixture"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    fixture_json_report(proj, NAME)
}

/// The imported protocol with the fixture runtime in place of the Harness for its three arms
/// (the statistical slots run the fixture agent; control slots run no agent at all), v0.4's
/// agent contract, one repetition.
pub fn swap_in_fixture_arms(proj: &Path) {
    let protocol = proj.join(format!("protocols/{NAME}/protocol.toml"));
    let original = std::fs::read_to_string(&protocol).unwrap();
    let mut swapped = original.replace(
        "runtime = \"runtimes/dsh-poly/runtime.toml\"",
        "runtime = \"runtimes/fixture/runtime.toml\"",
    );
    for arm in ["native", "v0.3-always", "v0.4-auto"] {
        swapped = swapped.replace(
            &format!("protocols/{NAME}/arms/{arm}/cordis.patch.yml"),
            &format!("protocols/demo/arms/{arm}/profile.toml"),
        );
    }
    for (arm, pkg) in [("v0.3-always", PACKAGES[0]), ("v0.4-auto", PACKAGES[1])] {
        swapped = swapped.replace(
            &format!("protocols/{NAME}/arms/{arm}/{pkg}"),
            &format!("protocols/demo/arms/{arm}/package"),
        );
    }
    std::fs::write(&protocol, swapped).unwrap();
    replace_in(&protocol, "equals = 256000", "equals = 32768");
    replace_in(
        &proj.join(format!("matrix/{NAME}.toml")),
        "repetitions = 2",
        "repetitions = 1",
    );
}
