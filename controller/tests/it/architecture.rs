//! The crate picture in ARCHITECTURE.md ("Code map"), checked against every crate's `Cargo.toml`:
//! dependencies point one way, and a new arrow has to be argued for in the document and here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Every workspace member's package name and the workspace crates it uses as normal dependencies.
fn workspace_edges() -> Vec<(String, BTreeSet<String>)> {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let ws: toml::Table = toml::from_str(&text).unwrap();
    let members = ws["workspace"]["members"].as_array().unwrap();
    let mut names = BTreeSet::new();
    let mut manifests = Vec::new();
    for m in members {
        let dir = root.join(m.as_str().unwrap());
        let t: toml::Table =
            toml::from_str(&std::fs::read_to_string(dir.join("Cargo.toml")).unwrap()).unwrap();
        names.insert(t["package"]["name"].as_str().unwrap().to_owned());
        manifests.push(t);
    }
    manifests
        .into_iter()
        .map(|t| {
            let name = t["package"]["name"].as_str().unwrap().to_owned();
            let deps = t
                .get("dependencies")
                .and_then(|d| d.as_table())
                .map(|d| {
                    d.keys()
                        .filter(|k| names.contains(k.as_str()))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            (name, deps)
        })
        .collect()
}

/// What each crate may use, as ARCHITECTURE.md's code map says. A crate missing here fails the
/// test: a new crate needs its place in the picture first.
fn allowed(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "eval-controller" => &[
            "eval-core",
            "eval-proxy",
            "eval-protocols",
            "eval-matrix",
            "eval-runtimes",
            "eval-evidence",
        ],
        // Issue 14: protocols speaks the shared vocabulary (eval-core), not the evidence crate.
        "eval-protocols" => &["eval-core", "eval-matrix"],
        "eval-runtimes" => &["eval-core", "eval-fixture-core"],
        "eval-matrix" | "eval-proxy" | "eval-evidence" | "eval-fixture-core" => &["eval-core"],
        "eval-shim" | "eval-fixture-agent" | "eval-fixture-grader" => {
            &["eval-core", "eval-fixture-core"]
        }
        // The leaf: the shared vocabulary depends on no workspace crate.
        "eval-core" => &[],
        _ => return None,
    })
}

#[test]
fn every_crate_depends_only_on_what_the_architecture_allows() {
    let edges = workspace_edges();
    assert!(edges.len() >= 6, "the workspace lists its members");
    let mut problems = Vec::new();
    for (name, deps) in &edges {
        let Some(ok) = allowed(name) else {
            problems.push(format!("{name} has no place in ARCHITECTURE.md's code map"));
            continue;
        };
        for d in deps {
            if !ok.contains(&d.as_str()) {
                problems.push(format!("{name} depends on {d}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn only_the_controller_uses_the_proxy_or_the_runtimes() {
    for (name, deps) in workspace_edges() {
        if name == "eval-controller" {
            continue;
        }
        assert!(
            !deps.contains("eval-proxy") && !deps.contains("eval-runtimes"),
            "{name} uses {deps:?}"
        );
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// No circle between the commands and the exit mapping: `exit.rs` names the commands' error
/// types, so the commands may use only the status vocabulary (`status.rs`), which names nothing
/// of the crate.
#[test]
fn the_commands_use_the_status_vocabulary_never_the_exit_mapping() {
    let src = workspace_root().join("controller/src");
    let commands = rust_files(&src.join("commands"));
    assert!(commands.len() >= 10, "the commands are found");
    for f in commands {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            !text.contains("crate::exit"),
            "{} uses crate::exit; commands use crate::status",
            f.display()
        );
    }
    let status = std::fs::read_to_string(src.join("status.rs")).unwrap();
    assert!(
        !status.contains("crate::") && !status.contains("super::"),
        "status.rs is a leaf and names no module of the crate"
    );
}
