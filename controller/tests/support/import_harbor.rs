//! Helpers both halves of `import_harbor` use: `tests/it/import_harbor.rs` (no Docker) and
//! `tests/e2e/import_harbor.rs` (Docker). Harbor's template task is copied from Harbor's own
//! wheel at test time (the one `scripts/ensure-python.sh` fetches beside `EVAL_TEST_PYTHON`'s
//! venv), never committed; the two-step task is written here in Harbor's format.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The interpreter with Harbor's wheel on its path (`scripts/ensure-python.sh`).
pub fn python() -> String {
    std::env::var("EVAL_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "EVAL_TEST_PYTHON is not set: run `export EVAL_TEST_PYTHON=$(scripts/ensure-python.sh)`"
        )
    })
}

/// Harbor's wheel: `<venv>/wheels/harbor-*.whl`, beside `<venv>/bin/python`.
pub fn harbor_wheel() -> PathBuf {
    let py = PathBuf::from(python());
    let wheels = py.parent().and_then(Path::parent).unwrap().join("wheels");
    std::fs::read_dir(&wheels)
        .unwrap_or_else(|e| panic!("{}: {e}", wheels.display()))
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("harbor-")
        })
        .unwrap_or_else(|| panic!("no harbor-*.whl in {}", wheels.display()))
}

/// Extracts Harbor's `harbor/cli/template-task/` (what `harbor tasks init` copies) to `dest`.
pub fn template_task(dest: &Path) {
    from_wheel("harbor/cli/template-task/", dest);
}

/// Extracts the task template of Harbor's adapter template
/// (`harbor/cli/template-adapter/task-template/`, what an adapter renders per task) to `dest`.
pub fn adapter_task_template(dest: &Path) {
    from_wheel("harbor/cli/template-adapter/task-template/", dest);
}

/// Every file of Harbor's wheel under `prefix`, to `dest`.
fn from_wheel(prefix: &str, dest: &Path) {
    let script = "import sys, zipfile, os\n\
        z = zipfile.ZipFile(sys.argv[1]); pre = sys.argv[3]\n\
        for n in z.namelist():\n\
        \x20   if n.startswith(pre) and not n.endswith('/'):\n\
        \x20       p = os.path.join(sys.argv[2], n[len(pre):]); os.makedirs(os.path.dirname(p), exist_ok=True)\n\
        \x20       open(p, 'wb').write(z.read(n))\n";
    let o = Command::new(python())
        .args(["-c", script])
        .arg(harbor_wheel())
        .arg(dest)
        .arg(prefix)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dest.join("task.toml").is_file() && dest.join("environment/Dockerfile").is_file());
}

/// Harbor's template task filled in as its author would: an instruction, a solve.sh that
/// writes `greeting.txt`, a test.sh that writes reward 1 when it says `hello` (else 0); its
/// `FROM ubuntu:24.04` replaced by `base` (nothing can be pulled here).
pub fn filled_template(dest: &Path, base: &str) {
    template_task(dest);
    let append = |rel: &str, more: &str| {
        let p = dest.join(rel);
        let mut s = std::fs::read_to_string(&p).unwrap();
        s.push('\n');
        s.push_str(more);
        std::fs::write(p, s).unwrap();
    };
    std::fs::write(
        dest.join("instruction.md"),
        "Write `hello` to greeting.txt.\n",
    )
    .unwrap();
    append("solution/solve.sh", "echo hello > greeting.txt\n");
    append(
        "tests/test.sh",
        "if [ \"$(cat greeting.txt 2>/dev/null)\" = hello ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    );
    let d = dest.join("environment/Dockerfile");
    let s = std::fs::read_to_string(&d).unwrap();
    assert!(s.starts_with("FROM ubuntu:24.04\n"), "{s}");
    std::fs::write(
        d,
        s.replacen("FROM ubuntu:24.04", &format!("FROM {base}"), 1),
    )
    .unwrap();
}

/// A two-step task in Harbor's multi-step layout: step `make` creates `out/a.txt`, step
/// `extend` appends to it; the workspace starts with `notes.txt`, which the Dockerfile copies
/// into its WORKDIR `/work`. Step `extend`'s verifier writes reward.json, `make`'s reward.txt;
/// `extend`'s tests read `WANT_B` from the image's `ENV`, as Harbor's verifier sees it.
pub fn two_step_task(dest: &Path, base: &str) {
    let w = |rel: &str, body: &str| {
        let p = dest.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    w(
        "task.toml",
        "schema_version = \"1.4\"\nmulti_step_reward_strategy = \"mean\"\n\n[metadata]\nname = \"two-steps\"\n\n\
         [agent]\ntimeout_sec = 300.5\n\n[verifier]\ntimeout_sec = 120\n\n[environment]\nbuild_timeout_sec = 300.0\ncpus = 2.0\nmemory = \"1G\"\nstorage_mb = 512\n\n\
         [[steps]]\nname = \"make\"\n[steps.verifier]\ntimeout_sec = 60\n[steps.verifier.env]\nWANT = \"a\"\n\n\
         [[steps]]\nname = \"extend\"\n[steps.agent]\ntimeout_sec = 200\n",
    );
    w(
        "environment/Dockerfile",
        &format!("FROM {base}\nWORKDIR /work\nCOPY notes.txt ./\nENV WANT_B=b\n"),
    );
    w("environment/notes.txt", "keep me\n");
    w(
        "steps/make/instruction.md",
        "<!-- canary GUID 1234 -->\n\nCreate out/a.txt holding `a`.\n",
    );
    w(
        "steps/make/tests/test.sh",
        "#!/bin/bash\nif [ \"$(cat out/a.txt 2>/dev/null)\" = \"$WANT\" ] && [ -f notes.txt ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    );
    w(
        "steps/make/solution/solve.sh",
        "#!/bin/bash\nmkdir -p out && echo a > out/a.txt\n",
    );
    w(
        "steps/extend/instruction.md",
        "Append a line `b` to out/a.txt.\n",
    );
    w(
        "steps/extend/tests/test.sh",
        "#!/bin/bash\nif [ \"$(cat out/a.txt 2>/dev/null)\" = \"$(printf 'a\\n%s' \"$WANT_B\")\" ]; then r=1; else r=0; fi\necho \"{\\\"reward\\\": $r}\" > /logs/verifier/reward.json\n",
    );
    w(
        "steps/extend/solution/solve.sh",
        "#!/bin/bash\necho b >> out/a.txt\n",
    );
}

/// Harbor's own `TaskConfig` parser on `task_toml`: the fields eval reads, as JSON (`toml`,
/// which Harbor imports only to write task.toml, is stubbed: the wheel is on the path without
/// its dependencies). `Err` carries Harbor's validation message.
pub fn harbor_config(task_toml: &Path) -> Result<serde_json::Value, String> {
    let script = r#"import sys, json, types
sys.modules.setdefault("toml", types.ModuleType("toml"))
from harbor.models.task.config import TaskConfig
c = TaskConfig.model_validate_toml(open(sys.argv[1]).read())
steps = [{"agent_timeout_sec": s.agent.timeout_sec if s.agent.timeout_sec is not None else c.agent.timeout_sec,
          "verifier_timeout_sec": s.verifier.timeout_sec, "env": s.verifier.env} for s in c.steps or []]
if not steps:
    steps = [{"agent_timeout_sec": c.agent.timeout_sec, "verifier_timeout_sec": c.verifier.timeout_sec,
              "env": c.verifier.env}]
print(json.dumps({"schema_version": c.schema_version, "task_name": c.task.name if c.task else None, "build_timeout_sec": c.environment.build_timeout_sec,
                  "cpus": c.environment.cpus, "memory_mb": c.environment.memory_mb,
                  "storage_mb": c.environment.storage_mb, "name": c.metadata.get("name"),
                  "step_names": [s.name for s in c.steps or []], "steps": steps}))
"#;
    let o = Command::new(python())
        .args(["-c", script])
        .arg(task_toml)
        .output()
        .unwrap();
    if o.status.success() {
        Ok(serde_json::from_slice(&o.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}
