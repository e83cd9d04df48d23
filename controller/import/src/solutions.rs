//! `--solutions DIR`: each imported task's reference solution (`DIR/<task id>/…`, plain files)
//! becomes the task's frozen `solution/`, and the protocol gets the suite's control arms and the
//! `grader_valid` integrity rule.

use super::common::ImportError;
use std::path::Path;

/// Control arms of the imported suite: the oracle, the nop, and every library exploit that ends
/// by itself. `sleep-past-timeout` and `fork-until-limit` are left out: against v0.4's grader
/// each costs its 120 s child timeout per check (they are in the library for a protocol to add).
pub const IMPORTED_CONTROLS: &[&str] = &[
    "oracle",
    "nop",
    "exploit:print-result",
    "exploit:exit-at-import",
    "exploit:go-testmain-exit",
    "exploit:delete-tests",
    "exploit:write-grader-output",
    "exploit:read-hidden",
];

/// eval's own reference solutions of v0.4's six `simple` tasks (`simple-solutions/`, our code,
/// not v0.4's): task id, file, bytes. An import given no `--solutions DIR` and no
/// `--no-controls` writes them as the tasks' `solution/`, so v0.4's grader is checked by default.
const BUILTIN: [(&str, &str, &[u8]); 6] = [
    (
        "simple-js-clamp",
        "src/clamp.js",
        include_bytes!("simple-solutions/simple-js-clamp/src/clamp.js"),
    ),
    (
        "simple-ts-slugify",
        "src/slugify.ts",
        include_bytes!("simple-solutions/simple-ts-slugify/src/slugify.ts"),
    ),
    (
        "simple-python-whitespace",
        "text_utils.py",
        include_bytes!("simple-solutions/simple-python-whitespace/text_utils.py"),
    ),
    (
        "simple-go-dedupe",
        "dedupe.go",
        include_bytes!("simple-solutions/simple-go-dedupe/dedupe.go"),
    ),
    (
        "simple-js-parse-port",
        "src/port.js",
        include_bytes!("simple-solutions/simple-js-parse-port/src/port.js"),
    ),
    (
        "simple-python-chunks",
        "chunks.py",
        include_bytes!("simple-solutions/simple-python-chunks/chunks.py"),
    ),
];

/// The built-in reference solution of task `id`, as `read` returns a directory's; a task eval
/// has none for is refused naming it (with the two ways on).
pub fn builtin(id: &str) -> Result<Vec<(String, Vec<u8>)>, ImportError> {
    let files: Vec<(String, Vec<u8>)> = BUILTIN
        .iter()
        .filter(|(task, _, _)| *task == id)
        .map(|(_, rel, bytes)| ((*rel).to_owned(), bytes.to_vec()))
        .collect();
    if files.is_empty() {
        return Err(ImportError::Solution {
            path: id.into(),
            why: "eval has no reference solution built in for this task: pass --solutions DIR, or --no-controls to leave v0.4's grader unchecked (the report then says so)".into(),
        });
    }
    Ok(files)
}

/// The protocol text with the statement that the suite runs without control arms.
pub fn without_controls(protocol: &str) -> String {
    protocol.replacen(
        "max_oracle_calls = 0\n",
        &format!(
            "max_oracle_calls = 0\n\n# No control arms (imported with --no-controls): v0.4's grader is not checked against a\n# reference solution, a nop or eval's exploits; every report discloses it as a warning.\n[suites.simple.controls]\noff = {NO_CONTROLS_REASON:?}\n"
        ),
        1,
    )
}

/// The `[suites.simple.controls] off` reason `--no-controls` writes.
pub const NO_CONTROLS_REASON: &str = "imported with --no-controls: v0.4's grader is not checked against a reference solution, a nop or eval's exploits";

/// The most bytes one solution file may have, and files one task's solution may hold.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
const MAX_FILES: usize = 1000;

/// Every file of `dir/<id>`, as (relative path, bytes), sorted; links, special files, unsafe
/// or non-UTF-8 names, and an empty or missing directory are refused naming the path.
pub fn read(dir: &Path, id: &str) -> Result<Vec<(String, Vec<u8>)>, ImportError> {
    let root = dir.join(id);
    let bad = |path: &Path, why: String| ImportError::Solution {
        path: path.to_path_buf(),
        why,
    };
    match std::fs::symlink_metadata(&root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(bad(
                &root,
                "the reference solution must be a directory".into(),
            ));
        }
        Err(e) => {
            return Err(bad(
                &root,
                format!("task {id:?} has no reference solution in --solutions ({e})"),
            ));
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let here = if rel.is_empty() {
            root.clone()
        } else {
            root.join(&rel)
        };
        let entries = std::fs::read_dir(&here).map_err(|e| bad(&here, e.to_string()))?;
        for entry in entries {
            let entry = entry.map_err(|e| bad(&here, e.to_string()))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                return Err(bad(&path, "not a UTF-8 name".into()));
            };
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            super::common::safe_relative(&child).map_err(|why| bad(&path, why.into()))?;
            let md = std::fs::symlink_metadata(&path).map_err(|e| bad(&path, e.to_string()))?;
            if md.is_dir() {
                stack.push(child);
            } else if md.is_file() {
                if md.len() > MAX_FILE_BYTES {
                    return Err(bad(&path, format!("over {MAX_FILE_BYTES} bytes")));
                }
                let bytes = std::fs::read(&path).map_err(|e| bad(&path, e.to_string()))?;
                out.push((child, bytes));
                if out.len() > MAX_FILES {
                    return Err(bad(&root, format!("more than {MAX_FILES} files")));
                }
            } else {
                return Err(bad(
                    &path,
                    "a link or special file (a solution is plain files)".into(),
                ));
            }
        }
    }
    if out.is_empty() {
        return Err(bad(&root, "the reference solution is empty".into()));
    }
    out.sort();
    Ok(out)
}

/// The protocol text with `[suites.simple.controls]` and the `grader_valid` rule added.
pub fn with_controls(protocol: &str) -> String {
    let arms = IMPORTED_CONTROLS
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let controls = format!(
        "max_oracle_calls = 0\n\n# Control arms, graded by this suite's own grader before any statistical slot (no agent,\n# no model call): the oracle applies each task's solution/ (--solutions, else eval's own), the nop\n# changes nothing, each exploit is one of eval's scripted cheats. grader_valid: every oracle\n# scores >= pass_at_least, every nop below it, no exploit above its task's nop.\n[suites.simple.controls]\narms = [{arms}]\nmetric = \"score\"\nalso_report = [\"hardened_score\"]\npass_at_least = 100\n"
    );
    let rule = "statistic = \"accounting_complete\"\nop = \"is_true\"\n";
    protocol
        .replacen("max_oracle_calls = 0\n", &controls, 1)
        .replacen(
            rule,
            &format!(
                "{rule}[[gates.rules]]\nid = \"grader_valid\"\nstatistic = \"grader_valid\"\nop = \"is_true\"\n"
            ),
            1,
        )
}

/// The protocol text with the hardened grading gating: the `simple` gate's score rule and the
/// control arms read `hardened_score`; v0.4's `score` is still graded and reported beside it.
pub fn hardened_gates(protocol: &str) -> String {
    protocol
        .replacen(
            "id = \"score_noninferiority\"\nstatistic = \"pair_diff_mean\"\nmetric = \"score\"\n",
            "id = \"score_noninferiority\"\nstatistic = \"pair_diff_mean\"\nmetric = \"hardened_score\"\n",
            1,
        )
        .replacen(
            "metric = \"score\"\nalso_report = [\"hardened_score\"]\n",
            "metric = \"hardened_score\"\nalso_report = [\"score\"]\n",
            1,
        )
}
