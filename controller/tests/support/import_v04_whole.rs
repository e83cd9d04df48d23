//! Helpers both halves of `import_v04_whole` use: `tests/it/import_v04_whole.rs` (no Docker) and
//! `tests/e2e/import_v04_whole.rs` (Docker).

use crate::import_evocode::{DOCKERFILE, write_task};
use crate::import_icae::{SUFFIX, cases, copy_tree};
use crate::support::repo_root;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const NAME: &str = "v0.4-real";
pub const EVOCODE: [&str; 3] = [
    "theme_d1_w1_code_build_greenfield_implementation",
    "theme_d1_w5_code_build_integration_e2e_wiring",
    "theme_d6_w1_database_storage_greenfield_implementation",
];
/// v0.4's ICAE tasks' repository keys (benchmark-lock.json), as ICAE's data names them.
pub const ICAE_KEYS: [&str; 6] = [
    "google-gemini__deprecated-generative-ai-js",
    "atom__etch",
    "ahawker__ulid",
    "john-kurkowski__tldextract",
    "containrrr__watchtower",
    "microsoft__typescript-go",
];

pub fn fake(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// EvoCode-Bench task directories under v0.4's three ids (the synthetic 3-round Go task).
pub fn evocode_dir(root: &Path) -> PathBuf {
    let dir = root.join("evocode");
    let scratch = root.join("evocode-src");
    let task = write_task(&scratch, DOCKERFILE);
    for id in EVOCODE {
        copy_tree(&task, &dir.join(id));
    }
    dir
}

/// An ICAE-EVAL root with v0.4's six tasks, each the synthetic `shout` task.
pub fn icae_dir(root: &Path) -> PathBuf {
    let dir = root.join("icae");
    let fixture = |rel: &str| {
        std::fs::read(
            repo_root()
                .join("controller/tests/fixtures/icae-synthetic")
                .join(rel),
        )
        .unwrap()
    };
    let w = |rel: &str, body: &[u8]| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    let mut aliases = serde_json::Map::new();
    let brief = String::from_utf8(fixture("oracle/oracle_data.json")).unwrap();
    for (n, key) in ICAE_KEYS.iter().enumerate() {
        let alias = format!("realcode@{:03}", n + 1);
        aliases.insert(alias.clone(), json!({ "key": key }));
        w(
            &format!("fuzzy_prds/{alias}/start.md"),
            &fixture("start.md"),
        );
        w(
            &format!("user_agent/prd_json/{alias}.json"),
            format!("{{\"task_id\": \"{alias}\", \"oracle_data\": {brief}}}").as_bytes(),
        );
        for (tier, file, body) in cases() {
            w(
                &format!("rcb_tests_repos/{key}/rcb_tests/{tier}/{file}"),
                body.to_string().as_bytes(),
            );
        }
    }
    w(
        "repo_alias.json",
        serde_json::Value::Object(aliases).to_string().as_bytes(),
    );
    w("user_agent/init.md", &fixture("oracle/init.md"));
    w("user_agent/fuzzy_suffix.md", SUFFIX.as_bytes());
    dir
}

pub struct Inputs {
    pub _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub project: PathBuf,
    pub evocode: PathBuf,
    pub icae: PathBuf,
}

pub fn inputs() -> Inputs {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let project = root.join("proj");
    std::fs::create_dir(&project).unwrap();
    Inputs {
        evocode: evocode_dir(&root),
        icae: icae_dir(&root),
        project,
        root,
        _tmp: tmp,
    }
}

/// `eval import v04` with the inputs, `--allow-unpinned` (the synthetic data has no pin), the
/// image records of `records` (an empty directory unless a test writes some) and `extra`.
pub fn import_v04(i: &Inputs, records: &Path, extra: &[&str]) -> std::process::Output {
    let simple = crate::support::v04_upstream();
    let mut args = vec![
        "import".to_owned(),
        "v04".into(),
        "--simple".into(),
        simple.to_str().unwrap().into(),
        "--evocode".into(),
        i.evocode.to_str().unwrap().into(),
        "--icae".into(),
        i.icae.to_str().unwrap().into(),
        "--allow-unpinned".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Command::new(crate::support::eval_bin())
        .args(&args)
        .current_dir(&i.project)
        .env("EVAL_IMAGES_WORK", records)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .output()
        .unwrap()
}

pub fn import_simple(project: &Path, grader: &str, extra: &[&str]) -> std::process::Output {
    crate::grader_controls::import(project, &fake('d'), grader, extra)
}
