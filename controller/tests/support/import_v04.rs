//! Helpers both halves of `import_v04` use: `tests/it/import_v04.rs` (no Docker) and
//! `tests/e2e/import_v04.rs` (Docker).

use crate::support::eval;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DSH_ENV: &str = "EVAL_TEST_DSH_POLY_IMAGE";
pub const GRADER_ENV: &str = "EVAL_TEST_V04_GRADER_IMAGE";
pub const NAME: &str = "simple-real";
pub const PACKAGES: [&str; 2] = [
    "dsh-plan-lattice-0.3.0.tgz",
    "dsh-plan-lattice-0.4.0-rc.3.tgz",
];

pub fn upstream() -> PathBuf {
    crate::support::v04_upstream()
}

/// An image id that is well-formed but names nothing (enough for everything but freeze and run).
pub fn fake_id(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

pub fn import(project: &Path, from: &Path, extra: &[&str]) -> std::process::Output {
    let (dsh, grader) = (fake_id('d'), fake_id('e'));
    import_with(project, from, &dsh, &grader, extra)
}

pub fn import_with(
    project: &Path,
    from: &Path,
    dsh: &str,
    grader: &str,
    extra: &[&str],
) -> std::process::Output {
    let from = from.to_str().unwrap();
    let mut args = vec![
        "import",
        "v04-simple",
        "--from",
        from,
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

/// Every file beneath `dir` (relative path → bytes).
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

pub fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    std::fs::create_dir(&dir).unwrap();
    (tmp, dir)
}

/// Grades `workspace` with the imported task's grader through eval's grader container policy
/// (`policy::container_spec` with the imported grader runtime: read-only root, noexec /tmp, the
/// exec scratch tmpfs, no network, workspace and hidden read-only) and returns `score.json`.
pub async fn grade(
    rt: &eval_runtimes::DockerRuntime,
    def: &eval_runtimes::RuntimeDef,
    image: &eval_runtimes::ImageId,
    task_dir: &Path,
    workspace: &Path,
    scratch: &Path,
    label: &str,
) -> (Value, String) {
    use eval_runtimes::Runtime as _;
    let out = scratch.join(format!("out-{label}"));
    std::fs::create_dir(&out).unwrap();
    let config = rt.inspect_image(image).await.unwrap();
    let ids = eval_runtimes::policy::effective_user(def, &config).unwrap();
    eval_runtimes::host::prepare_workspace(&out, ids).unwrap();
    let facts = eval_runtimes::AttemptFacts {
        protocol: NAME.into(),
        identity: "test".into(),
        arm: "grader".into(),
        attempt: format!("import-v04-{label}"),
        extra_labels: BTreeMap::from([("eval.test".to_owned(), "import_v04".to_owned())]),
    };
    let spec = eval_runtimes::container_spec(
        def,
        image,
        &config,
        &facts,
        &eval_runtimes::RoleMounts::Grader {
            oracle: None,
            workspace: workspace.to_path_buf(),
            hidden: task_dir.join("hidden"),
            out: out.clone(),
        },
    )
    .unwrap();
    let end = eval_runtimes::run_to_end(rt, &spec, &[], Duration::from_secs(600), 64 * 1024)
        .await
        .unwrap();
    let logs = String::from_utf8_lossy(&end.logs).into_owned();
    assert_eq!(
        end.outcome,
        eval_runtimes::WaitOutcome::Exited { code: 0 },
        "{label}: {logs}"
    );
    let score = serde_json::from_slice(&std::fs::read(out.join("score.json")).unwrap())
        .unwrap_or_else(|e| panic!("{label}: {e}: {logs}"));
    (score, logs)
}
