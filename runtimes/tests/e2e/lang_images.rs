//! The per-language bases (`runtimes/images/lang/build.sh`, `runtimes/images/evocode-go/build.sh`)
//! and the runtime definitions that name them (`runtimes/dsh/{go,node,python}.toml`,
//! `runtimes/graders/{go,node,python}.toml`).
//!
//! Every agent image runs `dsh --version` and its toolchain, and builds and runs a one-file test,
//! through eval-shim as an agent container of its runtime definition (read-only root, no network,
//! user 65532, the definition's env, tmpfs and limits); every grader base runs a task's one-file
//! test under eval's grader policy through its grader definition. The images come by id from
//! `scripts/ensure-harness-images.sh` (`EVAL_TEST_*_IMAGE`); a missing one fails the test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use eval_runtimes::policy::{self, RoleMounts};
use eval_runtimes::{
    ArmFiles, ImageId, ImageSpec, LoadedDef, Runtime, RuntimeDef, WaitOutcome, run_to_end,
};

/// The image a test runs, by id, from the variable `scripts/ensure-harness-images.sh` prints.
fn image(var: &str) -> ImageId {
    let id = std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run `export $(scripts/ensure-harness-images.sh)` first")
    });
    assert!(
        id.starts_with("sha256:") && id.len() == 71,
        "{var}={id:?} is not an image id"
    );
    ImageId(id)
}

/// A committed definition with its image placeholder replaced by `id`.
fn definition(rel: &str, placeholder: &str, id: &str) -> RuntimeDef {
    let path = project_root().join(rel);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(placeholder),
        "{rel} lacks its placeholder {placeholder}"
    );
    RuntimeDef::parse(&text.replace(placeholder, id), rel).unwrap()
}

const FAKE_ID: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// `runtimes/dsh/{go,node,python,poly}.toml` are `runtimes/dsh/runtime.toml` (the harness wrapper,
/// attestation, arm files, transcript, env) with only their name, image, toolchain variables,
/// scratch and limits changed: a change to the dsh runtime that is not carried over fails here.
#[test]
fn every_language_runtime_is_the_dsh_runtime_but_its_toolchain() {
    let dsh = definition("runtimes/dsh/runtime.toml", "@DSH_IMAGE_ID@", FAKE_ID);
    for (lang, extra_env, exec) in [
        (
            "go",
            &[
                "GOCACHE",
                "GOTMPDIR",
                "GOPATH",
                "GOTOOLCHAIN",
                "GOPROXY",
                "GOTELEMETRY",
            ][..],
            &["/var/cache/agent"][..],
        ),
        ("node", &[][..], &[][..]),
        ("python", &["PYTHONDONTWRITEBYTECODE"][..], &[][..]),
        // Every toolchain in one image: Go's variables and scratch, and Python's.
        (
            "poly",
            &[
                "GOCACHE",
                "GOTMPDIR",
                "GOPATH",
                "GOTOOLCHAIN",
                "GOPROXY",
                "GOTELEMETRY",
                "PYTHONDONTWRITEBYTECODE",
            ][..],
            &["/var/cache/agent"][..],
        ),
    ] {
        let rel = format!("runtimes/dsh/{lang}.toml");
        let placeholder = format!("@DSH_{}_IMAGE_ID@", lang.to_uppercase());
        let mut def = definition(&rel, &placeholder, FAKE_ID);
        assert_eq!(def.name, format!("dsh-{lang}"), "{rel}");
        assert_eq!(def.tmpfs_exec, exec, "{rel}");
        let added: Vec<&str> = def
            .env
            .keys()
            .filter(|k| !dsh.env.contains_key(*k))
            .map(String::as_str)
            .collect();
        assert_eq!(
            added,
            sorted(extra_env),
            "{rel}: variables beyond runtime.toml's"
        );
        for k in extra_env {
            def.env.remove(*k);
        }
        // What may differ, set back to runtime.toml's; everything else must already be equal.
        def.name = dsh.name.clone();
        def.tmpfs_exec = dsh.tmpfs_exec.clone();
        def.limits = dsh.limits.clone();
        assert_eq!(
            def, dsh,
            "{rel} differs from runtimes/dsh/runtime.toml beyond its toolchain"
        );
    }
}

fn sorted<'a>(v: &[&'a str]) -> Vec<&'a str> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// What every agent image must show: the agent user, a read-only root, no network but loopback,
/// and the Harness itself.
const AGENT_PROBE: &str = r#"set -e
echo "uid=$(id -u):$(id -g)"
if touch /probe-root 2>/dev/null; then echo "root=writable"; else echo "root=read-only"; fi
echo "net=$(ls /sys/class/net | tr '\n' ' ')"
echo "dsh=$(dsh --version)"
"#;

/// The line of the dsh wrapper that hands the prompt to dsh: the probe runs in its place.
const DSH_EXEC: &str = "exec dsh --profile headless \"$(cat /task/prompt.md)\"";

/// Runs `script` as the harness of `lang`'s agent runtime (`runtimes/dsh/<lang>.toml` on the
/// image `var` names) through eval-shim, the way an attempt's agent container runs, and returns
/// its output: a baseline arm's image (the base plus the thin layer with the shared profile patch
/// and eval's support plugin), the definition's own wrapper — the offline `dsh plugin add` of the
/// support plugin through the image's pnpm, the patch copied over the profile — with the probe
/// and `script` where dsh would get the prompt. Attestation is left out (the stand-in controller
/// here expects nothing).
async fn run_agent(lang: &str, var: &str, script: &str) -> String {
    let Some(rt) = engine().await else {
        return String::new();
    };
    static_binaries();
    let base = image(var);
    let placeholder = format!("@DSH_{}_IMAGE_ID@", lang.to_uppercase());
    let rel = format!("runtimes/dsh/{lang}.toml");
    let mut def = definition(&rel, &placeholder, &base.0);
    let command = def.harness.command.clone().unwrap();
    assert!(
        command.len() == 3 && command[2].contains(DSH_EXEC),
        "{rel}: the wrapper no longer ends in {DSH_EXEC:?}"
    );
    let probe = format!(
        "cmp /opt/eval/arm/cordis.patch.yml \"$DSH_HOME/profiles/headless/cordis.patch.yml\" || exit 9\n\
         grep -q '\"eval-dsh-support\"' \"$DSH_HOME/profiles/headless/package.json\" && echo support=added\n\
         {AGENT_PROBE}{script}"
    );
    def.harness.command = Some(vec![
        command[0].clone(),
        command[1].clone(),
        command[2].replacen(DSH_EXEC, &probe, 1),
    ]);
    def.attest.paths.clear();
    let sweep = Sweep::new();
    let root = project_root();
    let spec = ImageSpec {
        def: LoadedDef {
            def: def.clone(),
            dir: root.join("runtimes/dsh"),
            path: root.join(&rel),
        },
        arm: ArmFiles {
            profile: Some(root.join("runtimes/dsh/profile.patch.yml")),
            candidate: None,
        },
        labels: sweep.labels(),
    };
    let image = rt.ensure_image(&spec).await.unwrap();
    sweep.image(&image);
    let dirs = attempt_dirs(&def);
    let control = Arc::new(Control {
        expected: BTreeMap::new(),
        answers: BTreeMap::new(),
        seen: Seen::default(),
    });
    let server = serve_socket(&dirs.socket, &def, control);
    let spec = policy::container_spec(
        &def,
        &image,
        &rt.inspect_image(&image).await.unwrap(),
        &facts(&sweep, &unique(&format!("lang-{lang}"))),
        &agent_mounts(&dirs),
    )
    .unwrap();
    let end = run_to_end(&rt, &spec, &[], Duration::from_secs(900), 256 * 1024)
        .await
        .unwrap();
    server.abort();
    let logs = String::from_utf8_lossy(&end.logs).into_owned();
    assert_eq!(end.outcome, WaitOutcome::Exited { code: 0 }, "{logs}");
    for want in [
        "support=added",
        "uid=65532:65532",
        "root=read-only",
        "net=lo \n",
        "dsh=0.1.0-rc.8",
    ] {
        assert!(logs.contains(want), "no {want:?} in:\n{logs}");
    }
    logs
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_agent_image_runs_dsh_and_go_test_read_only_and_network_less() {
    let logs = run_agent(
        "go",
        "EVAL_TEST_DSH_GO_IMAGE",
        r#"go version
mkdir -p /workspace/gt && cd /workspace/gt
printf 'module example.com/gt\n\ngo 1.22\n' > go.mod
printf 'package gt\n\nfunc Add(a, b int) int { return a + b }\n' > add.go
printf 'package gt\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(Add(2, 3))\n\t}\n}\n' > add_test.go
go test -v ./...
"#,
    )
    .await;
    if logs.is_empty() {
        return;
    }
    for want in [
        "go version go1.22.",
        "--- PASS: TestAdd",
        "ok  \texample.com/gt",
    ] {
        assert!(logs.contains(want), "no {want:?} in:\n{logs}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_node_agent_image_runs_dsh_on_its_node_and_the_project_on_node_20() {
    let logs = run_agent(
        "node",
        "EVAL_TEST_DSH_NODE_IMAGE",
        r#"echo "node=$(node --version)"
echo "harness-node=$(/opt/node/bin/node --version)"
cat > /workspace/add.test.mjs <<'EOF'
import test from 'node:test';
import assert from 'node:assert';
test('add', () => assert.strictEqual(2 + 3, 5));
EOF
node --test /workspace/add.test.mjs
"#,
    )
    .await;
    if logs.is_empty() {
        return;
    }
    for want in [
        "node=v20.20.2",
        "harness-node=v22.23.3",
        "# pass 1",
        "# fail 0",
    ] {
        assert!(logs.contains(want), "no {want:?} in:\n{logs}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_agent_image_runs_dsh_and_python_3_11() {
    let logs = run_agent(
        "python",
        "EVAL_TEST_DSH_PYTHON_IMAGE",
        r#"python3 --version
cd /workspace
printf 'import unittest\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(2 + 3, 5)\n' > test_add.py
python3 -m unittest -v test_add
ls -a /workspace
"#,
    )
    .await;
    if logs.is_empty() {
        return;
    }
    for want in ["Python 3.11.", "test_add (test_add.T", "Ran 1 test", "\nOK"] {
        assert!(logs.contains(want), "no {want:?} in:\n{logs}");
    }
    assert!(
        !logs.contains("__pycache__"),
        "PYTHONDONTWRITEBYTECODE did not hold:\n{logs}"
    );
}

/// Grades `files` (workspace) with `hidden` (the task's hidden files, `grade.sh` among them) by
/// `runtimes/graders/<lang>.toml` on the image `var` names, under eval's grader policy; returns
/// the grader's output and its score.
async fn run_grader(
    lang: &str,
    var: &str,
    files: &[(&str, &str)],
    hidden: &[(&str, &str)],
) -> Option<(String, serde_json::Value)> {
    let rt = engine().await?;
    static_binaries();
    let image = image(var);
    let placeholder = format!("@GRADER_{}_IMAGE_ID@", lang.to_uppercase());
    let def = definition(
        &format!("runtimes/graders/{lang}.toml"),
        &placeholder,
        &image.0,
    );
    let sweep = Sweep::new();
    let dirs = attempt_dirs(&def);
    for (path, text) in files {
        std::fs::write(dirs.workspace.join(path), text).unwrap();
    }
    for (path, text) in hidden {
        std::fs::write(dirs.hidden.join(path), text).unwrap();
    }
    let spec = policy::container_spec(
        &def,
        &image,
        &rt.inspect_image(&image).await.unwrap(),
        &facts(&sweep, &unique(&format!("grade-{lang}"))),
        &RoleMounts::Grader {
            workspace: dirs.workspace.clone(),
            hidden: dirs.hidden.clone(),
            out: dirs.out.clone(),
            oracle: None,
        },
    )
    .unwrap();
    let end = run_to_end(&rt, &spec, &[], Duration::from_secs(900), 256 * 1024)
        .await
        .unwrap();
    let logs = String::from_utf8_lossy(&end.logs).into_owned();
    assert_eq!(end.outcome, WaitOutcome::Exited { code: 0 }, "{logs}");
    let score = std::fs::read(dirs.out.join("score.json"))
        .unwrap_or_else(|e| panic!("no score.json ({e}):\n{logs}"));
    Some((logs, serde_json::from_slice(&score).unwrap()))
}

/// The shared tail of every grade.sh here: the test's exit status becomes the score.
const SCORE: &str = r#"if [ "$status" = 0 ]; then s=100; else s=0; fi
printf '{"metrics": {"score": %s}}\n' "$s" > "$3"
echo "grade: tests exit $status"
"#;

fn grade_sh(run: &str) -> String {
    format!("set -u\nstatus=0\n{run} || status=$?\n{SCORE}")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_grader_base_builds_and_runs_a_go_test_under_the_grader_policy() {
    // The grader gets only the image's environment: the script points Go at the exec tmpfs.
    let run = r#"(
  s=/var/cache/grader
  export HOME=$s GOCACHE=$s/go-build GOTMPDIR=$s GOPATH=$s/go GOTOOLCHAIN=local GOPROXY=off
  go version
  cp -r "$1" $s/src && cp "$2/add_test.go" $s/src/ && cd $s/src && go test -v ./...
)"#;
    let Some((logs, score)) = run_grader(
        "go",
        "EVAL_TEST_EVOCODE_GO_IMAGE",
        &[
            ("go.mod", "module example.com/add\n\ngo 1.22\n"),
            (
                "add.go",
                "package add\n\nfunc Add(a, b int) int { return a + b }\n",
            ),
        ],
        &[
            ("grade.sh", &grade_sh(run)),
            (
                "add_test.go",
                "package add\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(Add(2, 3))\n\t}\n}\n",
            ),
        ],
    )
    .await
    else {
        return;
    };
    for want in [
        "go version go1.22.",
        "--- PASS: TestAdd",
        "grade: tests exit 0",
    ] {
        assert!(logs.contains(want), "no {want:?} in:\n{logs}");
    }
    assert_eq!(score["metrics"]["score"], 100, "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_node_grader_base_runs_a_node_test_under_the_grader_policy() {
    let Some((logs, score)) = run_grader(
        "node",
        "EVAL_TEST_GRADER_NODE_IMAGE",
        &[("add.mjs", "export const add = (a, b) => a + b;\n")],
        &[
            (
                "grade.sh",
                &grade_sh("node --version && node --test \"$2/add.test.mjs\""),
            ),
            (
                "add.test.mjs",
                "import test from 'node:test';\nimport assert from 'node:assert';\nimport { add } from '/workspace/add.mjs';\ntest('add', () => assert.strictEqual(add(2, 3), 5));\n",
            ),
        ],
    )
    .await
    else {
        return;
    };
    for want in ["v20.20.2", "# pass 1", "grade: tests exit 0"] {
        assert!(logs.contains(want), "no {want:?} in:\n{logs}");
    }
    assert_eq!(score["metrics"]["score"], 100, "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_grader_base_runs_a_python_test_under_the_grader_policy() {
    let Some((logs, score)) = run_grader(
        "python",
        "EVAL_TEST_GRADER_PYTHON_IMAGE",
        &[("add.py", "def add(a, b):\n    return a + b\n")],
        &[
            (
                "grade.sh",
                &grade_sh(
                    "python3 --version && cd \"$2\" && PYTHONPATH=\"$1\" python3 -B -m unittest -v test_add",
                ),
            ),
            (
                "test_add.py",
                "import unittest\n\nfrom add import add\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
            ),
        ],
    )
    .await
    else {
        return;
    };
    for want in [
        "Python 3.11.",
        "test_add (test_add.T",
        "grade: tests exit 0",
    ] {
        assert!(logs.contains(want), "no {want:?} in:\n{logs}");
    }
    assert_eq!(score["metrics"]["score"], 100, "{logs}");
}
