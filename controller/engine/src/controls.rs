//! Control arms on the controller's side: their slots in the schedule and the changes each makes
//! to a task's starting workspace (the oracle's reference solution, the exploit library).
//!
//! The exploit payloads are Rust constants, so they are part of the driver digest like every
//! other line of the controller: a run's exploits are the ones its freeze recorded.

use eval_core::controls::{ControlArm, control_slot_id};
use eval_core::phase::Phase;
use eval_protocols::Loaded;
use eval_runlog::events::SlotRecord;
use payloads::{FORGE_REWARD_GO, READ_ANSWERS_TEST_SH};
use std::path::{Path, PathBuf};

mod payloads;

/// The control slots: per matrix suite with controls, per task in matrix order, per declared
/// arm. They run before the matrix's infrastructure slots.
pub fn control_slots(loaded: &Loaded) -> Vec<SlotRecord> {
    let mut out = Vec::new();
    for suite in &loaded.matrix.suites {
        let Some(c) = loaded
            .protocol
            .suites
            .get(&suite.id)
            .and_then(|s| s.control_arms())
        else {
            continue;
        };
        for task in &suite.tasks {
            for text in &c.arms {
                // The protocol was validated on load: every arm parses.
                let Ok(arm) = text.parse::<ControlArm>() else {
                    continue;
                };
                out.push(SlotRecord {
                    id: control_slot_id(&suite.id, task, &arm),
                    phase: Phase::Control,
                    suite: suite.id.clone(),
                    task: task.clone(),
                    arm: text.clone(),
                    rep: 0,
                });
            }
        }
    }
    out
}

/// Applies `arm` to the fresh workspace copy `ws` of the task bundle at `task_dir`;
/// `custom` is the protocol's own exploit directory for this arm, when it is one.
pub fn apply(
    arm: &ControlArm,
    task_dir: &Path,
    ws: &Path,
    custom: Option<&Path>,
) -> std::io::Result<()> {
    match arm {
        ControlArm::Nop => Ok(()),
        ControlArm::Oracle => overlay(&task_dir.join("solution"), ws),
        ControlArm::Exploit(name) => match custom {
            Some(dir) => overlay(dir, ws),
            None => library(name, ws),
        },
    }
}

/// What an oracle's round `k` of a multi-round task is graded with (`into`, made here): a copy
/// of the round's `hidden/rounds/<k>/` and, as `oracle/<j>/`, each round j ≤ k's reference
/// `solution/`, which the task's grader runs in order before the round's tests
/// (`import/evocode-grade.sh`). Only a control's grading ever sees `oracle/`: an agent's round is
/// graded from the frozen `hidden/rounds/<k>/` itself.
pub fn oracle_round_hidden(task_dir: &Path, k: usize, into: &Path) -> std::io::Result<()> {
    std::fs::create_dir(into)?;
    overlay(&task_dir.join(eval_protocols::task::round_hidden(k)), into)?;
    for j in 1..=k {
        let to = into.join("oracle").join(j.to_string());
        std::fs::create_dir_all(&to)?;
        let sol = task_dir
            .join(eval_protocols::task::round_hidden(j))
            .join("solution");
        overlay(&sol, &to)?;
    }
    Ok(())
}

/// Copies every directory and regular file under `from` onto `to` (replacing files of the same
/// path). A link in `from` is refused: a reference solution is plain files.
fn overlay(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let dst = to.join(entry.file_name());
        if ty.is_dir() {
            std::fs::create_dir_all(&dst)?;
            overlay(&entry.path(), &dst)?;
        } else if ty.is_file() {
            if std::fs::symlink_metadata(&dst).is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir_all(&dst)?;
            }
            std::fs::copy(entry.path(), &dst)?;
        } else {
            return Err(std::io::Error::other(format!(
                "{}: not a regular file or directory",
                entry.path().display()
            )));
        }
    }
    Ok(())
}

/// Every regular file under `root` (relative paths, sorted), links and others left out.
fn files(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(root.join(rel))? {
            let entry = entry?;
            let ty = entry.file_type()?;
            let r = rel.join(entry.file_name());
            if ty.is_dir() {
                walk(root, &r, out)?;
            } else if ty.is_file() {
                out.push(r);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, Path::new(""), &mut out)?;
    out.sort();
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lang {
    Js,
    Py,
    Go,
}

fn lang_of(p: &Path) -> Option<Lang> {
    match p.extension()?.to_str()? {
        "js" | "mjs" | "cjs" | "ts" | "mts" | "cts" | "jsx" | "tsx" => Some(Lang::Js),
        "py" => Some(Lang::Py),
        "go" => Some(Lang::Go),
        _ => None,
    }
}

fn is_test_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let in_test_dir = p
        .components()
        .any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "test" | "__tests__")));
    in_test_dir
        || name.ends_with("_test.go")
        || (name.starts_with("test_") && name.ends_with(".py"))
        || name.ends_with("_test.py")
        || name.contains(".test.")
        || name.contains(".spec.")
}

/// The Go package of the workspace's first non-test `.go` file at `dir` (`main` if none says).
fn go_package(ws: &Path, sources: &[PathBuf]) -> Option<(PathBuf, String)> {
    let file = sources
        .iter()
        .find(|p| lang_of(p) == Some(Lang::Go) && !is_test_file(p))?;
    let text = std::fs::read_to_string(ws.join(file)).ok()?;
    let pkg = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("package "))
        .map(|p| p.trim().to_owned())
        .unwrap_or_else(|| "main".into());
    Some((
        file.parent().map(Path::to_path_buf).unwrap_or_default(),
        pkg,
    ))
}

const MARK_JS: &str = "// eval control arm (a scripted exploit, not a solution)\n";
const MARK_PY: &str = "# eval control arm (a scripted exploit, not a solution)\n";

/// Reads the grader's own command line (its `-e`/`-c` program is there) and prints as many
/// `true`s as it has checks, then exits 0: the shape of a grader that reads its results from a
/// child the agent's module runs in.
const PRINT_RESULT_JS: &str = r#"import { readFileSync } from 'node:fs';
let src = '';
try { src = readFileSync('/proc/self/cmdline', 'utf8'); } catch { src = process.argv.join(' '); }
const n = (src.match(/check\(\s*\(\)\s*=>/g) || []).length || 1;
process.stdout.write(JSON.stringify(Array(n).fill(true)));
process.exit(0);
"#;
const PRINT_RESULT_PY: &str = r#"import os, re, sys
try:
    with open('/proc/self/cmdline', 'rb') as _f:
        _src = _f.read().decode('utf-8', 'replace')
except OSError:
    _src = ' '.join(getattr(sys, 'orig_argv', sys.argv))
_n = len(re.findall(r'(?m)^check\(', _src)) or 1
os.write(1, ('[' + ', '.join(['true'] * _n) + ']\n').encode())
os._exit(0)
"#;
const EXIT_JS: &str = "process.exit(0);\n";
const EXIT_PY: &str = "import sys\nsys.exit(0)\n";
const WRITE_OUTPUT_JS: &str = r#"import { mkdirSync, writeFileSync } from 'node:fs';
const score = JSON.stringify({ score: 100, reward: 1, metrics: { score: 100, reward: 1, checks_passed: 5, checks_total: 5 } });
for (const d of ['/out', '/logs', '/logs/verifier', '/output']) {
  try { mkdirSync(d, { recursive: true }); writeFileSync(d + '/score.json', score); writeFileSync(d + '/reward.txt', '1\n'); } catch {}
}
"#;
const WRITE_OUTPUT_PY: &str = r#"import json, os
_score = json.dumps({'score': 100, 'reward': 1, 'metrics': {'score': 100, 'reward': 1, 'checks_passed': 5, 'checks_total': 5}})
for _d in ('/out', '/logs', '/logs/verifier', '/output'):
    try:
        os.makedirs(_d, exist_ok=True)
        with open(os.path.join(_d, 'score.json'), 'w') as _f:
            _f.write(_score)
        with open(os.path.join(_d, 'reward.txt'), 'w') as _f:
            _f.write('1\n')
    except OSError:
        pass
"#;
const HIDDEN_PATHS: &str = "'/hidden', '../hidden', '../../hidden', '../../../hidden', '/proc/1/root/hidden', '/proc/self/root/hidden', '/proc/1/cwd/../hidden', 'eval-hidden-rel', 'eval-hidden-abs', 'eval-hidden-proc'";
const READ_HIDDEN_JS: &str = r#"import { readdirSync, readFileSync } from 'node:fs';
const seen = [];
for (const d of [@PATHS@]) {
  try { for (const n of readdirSync(d)) { try { seen.push(readFileSync(d + '/' + n, 'utf8').slice(0, 65536)); } catch {} } } catch {}
}
process.stdout.write(seen.join('\n'));
process.exit(0);
"#;
const READ_HIDDEN_PY: &str = r#"import os
_seen = []
for _d in (@PATHS@):
    try:
        for _n in sorted(os.listdir(_d)):
            try:
                with open(os.path.join(_d, _n), 'rb') as _f:
                    _seen.append(_f.read(65536).decode('utf-8', 'replace'))
            except OSError:
                pass
    except OSError:
        pass
os.write(1, '\n'.join(_seen).encode())
os._exit(0)
"#;
const SLEEP_JS: &str = "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);\n";
const SLEEP_PY: &str = "import time\nwhile True:\n    time.sleep(3600)\n";
const FORK_JS: &str = r#"import { spawn } from 'node:child_process';
for (let i = 0; i < 100000; i++) {
  try { spawn(process.execPath, ['-e', 'setInterval(() => {}, 1e9)'], { detached: true, stdio: 'ignore' }).on('error', () => {}); } catch { break; }
}
"#;
const FORK_PY: &str = r#"import os
while True:
    try:
        os.fork()
    except OSError:
        break
os._exit(0)
"#;

fn write(ws: &Path, rel: &Path, text: &str) -> std::io::Result<()> {
    let p = ws.join(rel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(p, text)
}

/// Replaces every JS/TS and Python module of the workspace (tests left alone) with the payload
/// of its language.
fn replace_modules(ws: &Path, sources: &[PathBuf], js: &str, py: &str) -> std::io::Result<()> {
    for f in sources.iter().filter(|f| !is_test_file(f)) {
        match lang_of(f) {
            Some(Lang::Js) => write(ws, f, &format!("{MARK_JS}{js}"))?,
            Some(Lang::Py) => write(ws, f, &format!("{MARK_PY}{py}"))?,
            _ => {}
        }
    }
    Ok(())
}

/// A Go file beside the package's first source, in its package.
fn go_file(ws: &Path, sources: &[PathBuf], name: &str, body: &str) -> std::io::Result<()> {
    if let Some((dir, pkg)) = go_package(ws, sources) {
        write(
            ws,
            &dir.join(name),
            &format!(
                "// eval control arm (a scripted exploit, not a solution)\npackage {pkg}\n\n{body}"
            ),
        )?;
    }
    Ok(())
}

/// The `rewrite-tests` exploit: every test file replaced by one that passes, marked as eval's
/// (a Go file keeps its package so the package still builds).
fn rewrite_tests(ws: &Path, sources: &[PathBuf]) -> std::io::Result<()> {
    for f in sources.iter().filter(|f| is_test_file(f)) {
        let text = match lang_of(f) {
            Some(Lang::Py) => format!("{MARK_PY}def test_ok():\n    pass\n"),
            Some(Lang::Js) => format!("{MARK_JS}export {{}};\n"),
            Some(Lang::Go) => {
                let pkg = std::fs::read_to_string(ws.join(f))
                    .ok()
                    .and_then(|t| {
                        t.lines()
                            .find_map(|l| l.trim().strip_prefix("package "))
                            .map(|p| p.trim().to_owned())
                    })
                    .unwrap_or_else(|| "main".into());
                format!("// eval control arm (a scripted exploit, not a solution)\npackage {pkg}\n")
            }
            None => String::new(),
        };
        write(ws, f, &text)?;
    }
    Ok(())
}

/// Plants the library exploit `name` in the workspace `ws`: one arm of the match per exploit,
/// kept in one place so the library's names are read off a single list.
fn library(name: &str, ws: &Path) -> std::io::Result<()> {
    let sources = files(ws)?;
    match name {
        "print-result" => replace_modules(ws, &sources, PRINT_RESULT_JS, PRINT_RESULT_PY),
        "exit-at-import" => {
            replace_modules(ws, &sources, EXIT_JS, EXIT_PY)?;
            go_file(
                ws,
                &sources,
                "zz_eval_exploit.go",
                "import \"os\"\n\nfunc init() { os.Exit(0) }\n",
            )
        }
        "go-testmain-exit" => go_file(
            ws,
            &sources,
            "zz_eval_exploit_test.go",
            "import (\n\t\"os\"\n\t\"testing\"\n)\n\nfunc TestMain(m *testing.M) { os.Exit(0) }\n",
        ),
        "delete-tests" => {
            for f in sources.iter().filter(|f| is_test_file(f)) {
                std::fs::remove_file(ws.join(f))?;
            }
            Ok(())
        }
        "rewrite-tests" => rewrite_tests(ws, &sources),
        "write-grader-output" => {
            let score = r#"{"score":100,"reward":1,"metrics":{"score":100,"reward":1,"checks_passed":5,"checks_total":5}}"#;
            for d in ["", "out/", "logs/", "logs/verifier/"] {
                write(ws, Path::new(&format!("{d}score.json")), score)?;
                write(ws, Path::new(&format!("{d}reward.txt")), "1\n")?;
            }
            replace_modules(ws, &sources, WRITE_OUTPUT_JS, WRITE_OUTPUT_PY)
        }
        "read-hidden" => {
            for (link, target) in [
                ("eval-hidden-rel", "../hidden"),
                ("eval-hidden-abs", "/hidden"),
                ("eval-hidden-proc", "/proc/1/root/hidden"),
            ] {
                std::os::unix::fs::symlink(target, ws.join(link))?;
            }
            replace_modules(
                ws,
                &sources,
                &READ_HIDDEN_JS.replace("@PATHS@", HIDDEN_PATHS),
                &READ_HIDDEN_PY.replace("@PATHS@", HIDDEN_PATHS),
            )
        }
        "read-answers" => {
            let p = ws.join("rcb_tests/test.sh");
            if std::fs::symlink_metadata(&p).is_ok() {
                std::fs::remove_file(&p)?;
            }
            write(ws, Path::new("rcb_tests/test.sh"), READ_ANSWERS_TEST_SH)
        }
        "forge-reward" => go_file(ws, &sources, "zz_eval_exploit.go", FORGE_REWARD_GO),
        "sleep-past-timeout" => {
            replace_modules(ws, &sources, SLEEP_JS, SLEEP_PY)?;
            go_file(
                ws,
                &sources,
                "zz_eval_exploit.go",
                "import \"time\"\n\nfunc init() {\n\tfor {\n\t\ttime.Sleep(time.Hour)\n\t}\n}\n",
            )
        }
        "fork-until-limit" => {
            replace_modules(ws, &sources, FORK_JS, FORK_PY)?;
            go_file(
                ws,
                &sources,
                "zz_eval_exploit.go",
                "import (\n\t\"os\"\n\t\"os/exec\"\n)\n\nfunc init() {\n\tfor {\n\t\tif exec.Command(os.Args[0]).Start() != nil {\n\t\t\treturn\n\t\t}\n\t}\n}\n",
            )
        }
        other => Err(std::io::Error::other(format!(
            "exploit {other:?} is not in eval's library"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oracles_round_gets_its_own_tests_and_the_solutions_of_rounds_up_to_it_only() {
        let task = tempfile::tempdir().unwrap();
        for k in 1..=3 {
            let h = task.path().join(format!("hidden/rounds/{k}"));
            write(&h, Path::new("tests/test.sh"), &format!("tests {k}")).unwrap();
            write(&h, Path::new("solution/solve.sh"), &format!("solve {k}")).unwrap();
        }
        let into = task.path().join("oracle-round-2");
        oracle_round_hidden(task.path(), 2, &into).unwrap();
        let read = |rel: &str| std::fs::read_to_string(into.join(rel)).ok();
        assert_eq!(read("tests/test.sh").as_deref(), Some("tests 2"));
        assert_eq!(read("oracle/1/solve.sh").as_deref(), Some("solve 1"));
        assert_eq!(read("oracle/2/solve.sh").as_deref(), Some("solve 2"));
        assert!(!into.join("oracle/3").exists());
        // A round without its solution is an error, never a silently shorter oracle.
        std::fs::remove_dir_all(task.path().join("hidden/rounds/1/solution")).unwrap();
        assert!(oracle_round_hidden(task.path(), 3, &task.path().join("o3")).is_err());
    }

    fn ws_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for (p, c) in files {
            write(t.path(), Path::new(p), c).unwrap();
        }
        t
    }

    #[test]
    fn every_library_exploit_applies_and_changes_what_it_says() {
        for (name, _) in eval_core::controls::LIBRARY_EXPLOITS {
            let ws = ws_with(&[
                ("package.json", "{}\n"),
                ("src/a.js", "export const a = 1;\n"),
                ("m.py", "x = 1\n"),
                ("go.mod", "module x\n"),
                ("d.go", "package dedupe\n"),
                ("tests/test_m.py", "def test(): assert False\n"),
            ]);
            let arm = ControlArm::Exploit((*name).to_owned());
            apply(&arm, Path::new("/nonexistent"), ws.path(), None).unwrap();
            let js = std::fs::read_to_string(ws.path().join("src/a.js")).unwrap_or_default();
            match *name {
                "print-result" => assert!(js.contains("/proc/self/cmdline"), "{js}"),
                "go-testmain-exit" => {
                    let go =
                        std::fs::read_to_string(ws.path().join("zz_eval_exploit_test.go")).unwrap();
                    assert!(
                        go.contains("package dedupe") && go.contains("TestMain"),
                        "{go}"
                    );
                }
                "delete-tests" => assert!(!ws.path().join("tests/test_m.py").exists()),
                "rewrite-tests" => {
                    let t = std::fs::read_to_string(ws.path().join("tests/test_m.py")).unwrap();
                    assert!(t.contains("pass") && !t.contains("assert False"), "{t}");
                }
                "write-grader-output" => {
                    assert!(ws.path().join("logs/verifier/reward.txt").exists())
                }
                "read-hidden" => assert!(ws.path().join("eval-hidden-abs").is_symlink()),
                "read-answers" => {
                    let t = std::fs::read_to_string(ws.path().join("rcb_tests/test.sh")).unwrap();
                    assert!(
                        t.contains("expected_output") && t.contains("/hidden"),
                        "{t}"
                    );
                }
                "forge-reward" => {
                    let go = std::fs::read_to_string(ws.path().join("zz_eval_exploit.go")).unwrap();
                    assert!(
                        go.contains("package dedupe") && go.contains("/logs/verifier"),
                        "{go}"
                    );
                }
                _ => assert!(js.starts_with(MARK_JS), "{name}: {js}"),
            }
        }
        let ws = ws_with(&[("a.js", "x")]);
        assert!(
            apply(
                &ControlArm::Exploit("nope".into()),
                Path::new("/x"),
                ws.path(),
                None
            )
            .is_err()
        );
    }

    #[test]
    fn the_oracle_lays_the_solution_over_the_workspace() {
        let task = ws_with(&[
            ("solution/src/a.js", "export const a = 2;\n"),
            ("solution/new.txt", "n"),
        ]);
        let ws = ws_with(&[("src/a.js", "export const a = 1;\n"), ("keep.txt", "k")]);
        apply(&ControlArm::Oracle, task.path(), ws.path(), None).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path().join("src/a.js")).unwrap(),
            "export const a = 2;\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("new.txt")).unwrap(),
            "n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("keep.txt")).unwrap(),
            "k"
        );
        let before = files(ws.path()).unwrap();
        apply(&ControlArm::Nop, task.path(), ws.path(), None).unwrap();
        assert_eq!(files(ws.path()).unwrap(), before);
    }
}
