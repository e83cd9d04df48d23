//! Helpers both halves of `thin_arms` use: `tests/it/thin_arms.rs` (no Docker) and
//! `tests/e2e/thin_arms.rs` (Docker).

use crate::support::*;
use std::path::Path;

/// Turns the project's fixture runtime into one over a base: no `[build]`, `image_lines` as the
/// `[image]` table, only the arm's own files attested.
pub fn make_thin(proj: &Path, image_lines: &str) {
    let def = proj.join("runtimes/fixture/runtime.toml");
    replace_in(
        &def,
        "[image]\nreference = \"eval-runtime/fixture\"\n",
        &format!("[image]\n{image_lines}\n"),
    );
    replace_in(
        &def,
        "[build]\nbusybox = true\nstatic_binaries = [\"eval-fixture-agent\", \"eval-fixture-grader\"]\n",
        "",
    );
    replace_in(
        &def,
        "paths = [\"/usr/local/bin/eval-fixture-agent\", \"{profile}\", \"{candidate}\"]",
        "paths = [\"{profile}\", \"{candidate}\"]",
    );
}
