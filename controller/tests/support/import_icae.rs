//! Helpers both halves of `import_icae` use: `tests/it/import_icae.rs` (no Docker) and
//! `tests/e2e/import_icae.rs` (Docker).

use crate::support::{repo_root, text};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

pub const PACKAGE: &str = "dsh-plan-lattice-0.4.0-rc.3.tgz";
pub const TASK: &str = "icae-python-01";
pub const KEY: &str = "ahawker__ulid";
pub const ALIAS: &str = "realcode@007";

pub fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(
        repo_root()
            .join("controller/tests/fixtures/icae-synthetic")
            .join(rel),
    )
    .unwrap()
}

/// ICAE's Clarification block in its shape (an `**Oracle**` paragraph with the endpoint and a
/// `str.format` body), written here.
pub const SUFFIX: &str = "---\n\n## Clarification\n\nThis PRD leaves details open on purpose; a requirements oracle knows them.\n\n**Oracle** — POST `http://{host}:{query_port}/`\n```\n{{\"append_id\":\"{append_id}\",\"task_id\":\"{task_id}\",\"question\":\"...\"}}\n```\nAnswer is in `data`. Budget shown in `status.remaining`.\n\nAsk before you code.\n";

/// The synthetic task's cases: `shout` reads its input and prints it upper-cased with `!`; an
/// empty input prints `EMPTY` (hidden constraint C001); a `list:` input prints a JSON array
/// (its expected_output is a JSON value, compared as json.dumps writes it).
pub fn cases() -> [(&'static str, &'static str, Value); 3] {
    [
        (
            "public_test_cases",
            "basic.json",
            json!({"cases": [{"input": "hi", "expected_output": "HI!\n"}]}),
        ),
        (
            "test_cases",
            "hidden.json",
            json!({"cases": [
                {"input": "abc", "expected_output": "ABC!\n"},
                {"input": "", "expected_output": "EMPTY\n"},
                {"input": "list:a,b", "expected_output": ["A", "B"]},
            ]}),
        ),
        (
            "enhanced_test_cases",
            "more.json",
            json!({"cases": [
                {"input": "x y", "expected_output": "X Y!\n"},
                {"input": "q", "expected_output": "Q!!\n"},
            ]}),
        ),
    ]
}

/// Writes a synthetic ICAE root for `icae-python-01` (and nothing for the other five).
pub fn write_root(dir: &Path) {
    let w = |rel: &str, body: &[u8]| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    w(
        "repo_alias.json",
        json!({ALIAS: {"key": KEY, "username": "ahawker", "repo_name": "ulid", "language": "Python"},
               "realcode@008": {"key": "someone__other", "language": "Go"}})
        .to_string()
        .as_bytes(),
    );
    w(
        &format!("fuzzy_prds/{ALIAS}/start.md"),
        fixture("start.md").as_slice(),
    );
    w("user_agent/init.md", &fixture("oracle/init.md"));
    w("user_agent/fuzzy_suffix.md", SUFFIX.as_bytes());
    // The brief's bytes as they are (its key order is what the oracle must see).
    let brief = String::from_utf8(fixture("oracle/oracle_data.json")).unwrap();
    w(
        &format!("user_agent/prd_json/{ALIAS}.json"),
        format!("{{\"task_id\": \"{ALIAS}\", \"oracle_data\": {brief}}}").as_bytes(),
    );
    for (tier, file, body) in cases() {
        w(
            &format!("rcb_tests_repos/{KEY}/rcb_tests/{tier}/{file}"),
            body.to_string().as_bytes(),
        );
    }
    // Not a case file (evaluate.py globs *.json): left out.
    w(
        &format!("rcb_tests_repos/{KEY}/rcb_tests/test_cases/README.txt"),
        b"notes",
    );
}

pub fn import(
    project: &Path,
    from: &Path,
    dsh: &str,
    grader: &str,
    extra: &[&str],
) -> std::process::Output {
    import_env(project, from, dsh, grader, extra, &[])
}

/// [`import`] with `env` set for `eval`.
pub fn import_env(
    project: &Path,
    from: &Path,
    dsh: &str,
    grader: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let pkg = crate::support::v04_upstream().join(PACKAGE);
    let mut args = vec![
        "import",
        "v04-icae",
        "--from",
        from.to_str().unwrap(),
        "--package",
        pkg.to_str().unwrap(),
        "--dsh-image",
        dsh,
        "--grader-image",
        grader,
    ];
    args.extend_from_slice(extra);
    crate::support::eval_env(project, &args, env)
}

pub fn project(tmp: &Path) -> PathBuf {
    let dir = tmp.join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub const ONE: [&str; 3] = ["--allow-unpinned", "--tasks", TASK];

pub const SHOUT_PY: &str = "import json, sys\ns = sys.stdin.read()\nif s.startswith('list:'):\n    print(json.dumps([x.upper() for x in s[5:].split(',')]), end='')\nelse:\n    print(s.upper() + '!')\n";
pub const TEST_SH: &str = "#!/bin/bash\nset -u\ndir=public_test_cases\n[ \"${1:-}\" = --cases-dir ] && dir=\"$2\"\ncd \"$(dirname \"$0\")/..\"\npython3 - \"$dir\" <<'PY'\nimport json, pathlib, subprocess, sys\nd = sys.argv[1]\nout = pathlib.Path('rcb_tests/stdout') / d\nout.mkdir(parents=True, exist_ok=True)\nfor f in sorted(pathlib.Path('rcb_tests', d).glob('*.json')):\n    for i, c in enumerate(json.loads(f.read_text())['cases']):\n        assert 'expected_output' not in c, 'the answers reached test.sh'\n        r = subprocess.run([sys.executable, 'shout.py'], input=c['input'], capture_output=True, text=True)\n        (out / f'{f.stem}@{i + 1:03}.txt').write_text(r.stdout)\nPY\n";

/// By hand, from evaluate.py's rules: public `hi` → `HI!` passes (1/1); hidden `abc` passes,
/// the empty input prints `!` (C001 missed) and fails, `list:a,b` prints `["A", "B"]`, which is
/// json.dumps of the expected array, and passes (2/3); enhanced `x y` passes, `q` expects `Q!!`
/// and fails (1/2). hidden_score = 100 x (2 + 1) / (3 + 2) = 60.
pub const HAND_SCORE: f64 = 60.0;

pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// `tar -czf` of `members` of `root` into `out` (the host's GNU tar, as Zenodo's were made).
pub fn tgz(root: &Path, out: &Path, members: &[&str]) {
    let o = std::process::Command::new("tar")
        .arg("-czf")
        .arg(out)
        .arg("-C")
        .arg(root)
        .args(members)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}
