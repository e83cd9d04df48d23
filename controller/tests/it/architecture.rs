//! The crate picture in ARCHITECTURE.md ("Code map"), checked against every crate's `Cargo.toml`:
//! dependencies point one way, and a new arrow has to be argued for in the document and here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod function_length;

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
            "eval-upstreams",
            "eval-runlog",
            "eval-report",
            "eval-engine",
            "eval-import",
        ],
        // The only crate that starts containers or the proxy.
        "eval-engine" => &[
            "eval-core",
            "eval-proxy",
            "eval-protocols",
            "eval-matrix",
            "eval-runtimes",
            "eval-evidence",
            "eval-runlog",
            "eval-upstreams",
        ],
        // The read side: never the engine. It reads runtime definitions (declared metrics) and
        // the proxy's wire shapes, and starts neither.
        "eval-report" => &[
            "eval-core",
            "eval-evidence",
            "eval-protocols",
            "eval-runlog",
            "eval-runtimes",
            "eval-proxy",
        ],
        // The importers write project files from checked inputs and start nothing: Harbor's
        // environment images are built by the engine through a builder the controller hands in.
        "eval-import" => &[
            "eval-core",
            "eval-protocols",
            "eval-matrix",
            "eval-runtimes",
        ],
        // The built-in upstreams answer from the runtimes crate's fixture model and know nothing
        // of runs.
        "eval-upstreams" => &["eval-runtimes"],
        // What a run records: pure data over the ledger and the proxy's call records.
        "eval-runlog" => &["eval-core", "eval-evidence", "eval-protocols", "eval-proxy"],
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
fn only_the_controller_crates_use_the_proxy_or_the_runtimes() {
    for (name, deps) in workspace_edges() {
        // The runlog reads the proxy's call records; the upstreams answer from the runtimes'
        // fixture model; the importers read runtime definitions and write them. None of them
        // starts a proxy or a container.
        if [
            "eval-controller",
            "eval-runlog",
            "eval-upstreams",
            "eval-report",
            "eval-engine",
            "eval-import",
        ]
        .contains(&name.as_str())
        {
            continue;
        }
        assert!(
            !deps.contains("eval-proxy") && !deps.contains("eval-runtimes"),
            "{name} uses {deps:?}"
        );
    }
}

/// Only the engine starts containers or the proxy for a run: no other crate's sources name the
/// calls that do (`DockerRuntime::connect`, `Proxy::start`), except two commands that say why.
#[test]
fn only_the_engine_starts_containers_or_the_proxy() {
    let root = workspace_root().join("controller");
    // `eval proxy` runs the proxy alone for a manual check (no container, no run); `eval gc`
    // connects to remove what eval labelled, never to start anything.
    let allowed = ["src/commands/proxy.rs", "src/commands/gc.rs"];
    let mut checked = 0;
    for krate in [
        "src",
        "runlog/src",
        "upstreams/src",
        "report/src",
        "import/src",
    ] {
        for f in rust_files(&root.join(krate)) {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&f).unwrap();
            checked += 1;
            if allowed.contains(&rel.as_str()) || rel.starts_with("src/report_tests/") {
                continue;
            }
            for call in ["DockerRuntime::connect", "Proxy::start"] {
                assert!(
                    !text.contains(call),
                    "controller/{rel} calls {call}: that is the engine's"
                );
            }
        }
    }
    assert!(checked > 40, "the sources are found");
    let engine = rust_files(&root.join("engine/src"))
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<String>();
    assert!(engine.contains("DockerRuntime::connect") && engine.contains("Proxy::start"));
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

/// One HTML renderer (issue 35): the one-page report and the site share `evidence/src/html/`;
/// no other source of the report side draws an SVG or escapes HTML itself, and the shared module
/// imports nothing of the report (it stays a leaf both can use).
#[test]
fn one_html_renderer() {
    let root = workspace_root();
    let html = root.join("evidence/src/html");
    let mut checked = 0;
    for dir in ["evidence/src", "controller/report/src", "controller/src"] {
        for f in rust_files(&root.join(dir)) {
            let rel = f.strip_prefix(&root).unwrap().display().to_string();
            let text = std::fs::read_to_string(&f).unwrap();
            checked += 1;
            if f.starts_with(&html) {
                assert!(
                    !text.contains("crate::report") && !text.contains("super::super"),
                    "{rel}: the shared renderer takes strings and numbers, never a report"
                );
                continue;
            }
            if rel.starts_with("controller/src/report_tests/") {
                continue;
            }
            for own in ["<svg", "fn esc(", "\"&amp;\""] {
                assert!(
                    !text.contains(own),
                    "{rel} has its own `{own}`: use evidence/src/html/"
                );
            }
        }
    }
    assert!(checked > 60, "the sources are found");
    let forest = std::fs::read_to_string(html.join("forest.rs")).unwrap();
    assert!(forest.contains("<svg class=\\\"forest\\\""));
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

/// Every file and directory of the workspace, relative to its root (`target/`, `runs/` and
/// dot-directories left out), and the text of every Rust source among them.
fn tree() -> (BTreeSet<String>, BTreeSet<String>, Vec<(String, String)>) {
    fn walk(root: &Path, dir: &Path, files: &mut BTreeSet<String>, dirs: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if name.starts_with('.') || name == "target" || name == "runs" {
                    continue;
                }
                dirs.insert(rel);
                walk(root, &p, files, dirs);
            } else {
                files.insert(rel);
            }
        }
    }
    let root = workspace_root();
    let (mut files, mut dirs) = (BTreeSet::new(), BTreeSet::new());
    walk(&root, &root, &mut files, &mut dirs);
    let sources = files
        .iter()
        .filter(|f| f.ends_with(".rs"))
        .map(|f| (f.clone(), std::fs::read_to_string(root.join(f)).unwrap()))
        .collect();
    (files, dirs, sources)
}

/// The code spans of a Markdown text outside fenced blocks.
fn code_spans(doc: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            spans.push(span.to_owned());
        }
    }
    spans
}

/// Names a Rust source declares (`fn`, `mod`, `const`, `static`, `macro_rules!`, types).
fn declared(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
        .filter(|w| !w.is_empty())
        .collect();
    for w in words.windows(2) {
        if matches!(
            w[0],
            "fn" | "mod"
                | "const"
                | "static"
                | "macro_rules!"
                | "struct"
                | "enum"
                | "trait"
                | "type"
        ) {
            names.insert(w[1].to_owned());
        }
    }
    names
}

/// Whether `p` (relative, perhaps abbreviated to its last components) names an entry of `set`.
fn resolves(p: &str, set: &BTreeSet<String>) -> bool {
    let p = p.trim_end_matches('/');
    set.iter().any(|f| f == p || f.ends_with(&format!("/{p}")))
}

const EXTERNAL: &[&str] = &[
    "std",
    "tokio",
    "tokio_util",
    "serde",
    "serde_json",
    "rusqlite",
    "bollard",
    "hyper",
    "reqwest",
    "axum",
    "clap",
    "ed25519_dalek",
    "statrs",
    "rand_chacha",
    "tracing",
    "scipy",
];

/// What one code span of the document names that does not exist, if anything.
fn missing(
    span: &str,
    files: &BTreeSet<String>,
    dirs: &BTreeSet<String>,
    srcs: &Srcs,
) -> Option<String> {
    let is_ident = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    let snake = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    let upper = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    if let Some(name) = span.strip_prefix("fn ") {
        return (!srcs.declared.contains(name)).then(|| format!("`{span}`"));
    }
    if span.contains(char::is_whitespace) {
        return None;
    }
    // `path.rs::item`: the file exists and declares the item.
    if let Some((path, item)) = span.split_once(".rs::") {
        let path = format!("{path}.rs");
        let Some((_, text)) = srcs
            .files
            .iter()
            .find(|(f, _)| *f == path || f.ends_with(&format!("/{path}")))
        else {
            return Some(format!("`{span}`: no file {path}"));
        };
        let last = item.rsplit("::").next().unwrap_or(item);
        return (!declared(text).contains(last)).then(|| format!("`{span}`: {path} has no {last}"));
    }
    // A path of the tree: relative, a source's extension or a directory's trailing slash, no
    // placeholder (`<name>`, `NAME`, `$VAR`).
    let path_chars = span
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
    if path_chars && !span.starts_with('/') && !span.starts_with("..") {
        let placeholder = span.split('/').any(|c| {
            let stem = c.split('.').next().unwrap_or("");
            !stem.is_empty() && stem.chars().all(|x| x.is_ascii_uppercase() || x == '_')
        });
        let ext = span.rsplit('.').next().unwrap_or("");
        let checked = if span.contains('/') {
            // A directory of one component (`runs/`, `solution/`) is as often one `eval`
            // writes as one of the tree: only longer ones are checked.
            (span.ends_with('/') && span.trim_end_matches('/').contains('/'))
                || (!span.rsplit('/').next().unwrap_or("").is_empty()
                    && ["rs", "py", "sh", "toml", "mjs", "md", "yml", "lock"].contains(&ext)
                    && span.rsplit('/').next().unwrap_or("").contains('.'))
        } else {
            ext == "rs" && span.contains('.')
        };
        if checked && !placeholder {
            let found = if span.ends_with('/') {
                resolves(span, dirs)
            } else {
                resolves(span, files)
            };
            return (!found).then(|| format!("`{span}`: no such path"));
        }
        if !span.contains("::") {
            // A bare type name.
            if is_ident(span) && span.starts_with(|c: char| c.is_ascii_uppercase()) && !upper(span)
            {
                return (!srcs.words.contains(span)).then(|| format!("`{span}`: no such name"));
            }
            return None;
        }
    }
    // A Rust path: every segment of ours exists.
    let segs: Vec<&str> = span.split("::").collect();
    if segs.len() < 2 || !segs.iter().all(|s| is_ident(s)) || EXTERNAL.contains(&segs[0]) {
        return None;
    }
    for (i, s) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let ok = if matches!(*s, "crate" | "super" | "self") || s.starts_with("eval_") {
            true
        } else if upper(s) {
            srcs.declared.contains(*s)
        } else if snake(s) {
            srcs.declared.contains(*s)
                || (!last
                    && (resolves(&format!("{s}.rs"), files) || resolves(&format!("{s}/"), dirs)))
        } else {
            srcs.words.contains(*s)
        };
        if !ok {
            return Some(format!("`{span}`: no {s}"));
        }
    }
    None
}

/// The Rust sources, what they declare and every word in them.
struct Srcs {
    files: Vec<(String, String)>,
    declared: BTreeSet<String>,
    words: BTreeSet<String>,
}

impl Srcs {
    /// Indexes `sources` (path, text): every declared name and every word.
    fn index(sources: Vec<(String, String)>) -> Srcs {
        let mut declared_all = BTreeSet::new();
        let mut words = BTreeSet::new();
        for (_, text) in &sources {
            declared_all.extend(declared(text));
            words.extend(
                text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .map(str::to_owned),
            );
        }
        Srcs {
            files: sources,
            declared: declared_all,
            words,
        }
    }
}

/// The documents whose references are checked: ARCHITECTURE.md and every page under `docs/` (the
/// long explanations moved there from ARCHITECTURE.md, issue 35), relative to the root.
fn documents() -> Vec<String> {
    let root = workspace_root();
    let mut docs = vec!["ARCHITECTURE.md".to_owned()];
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// A link's target, relative to the document `doc` (itself relative to the root), as a path
/// relative to the root; `None` when it climbs out of the repository.
fn link_target(doc: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = doc.split('/').collect();
    parts.pop();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// ARCHITECTURE.md and the `docs/` pages name only what exists: every path they give
/// (`controller/engine/src/lib.rs`, or abbreviated to its last components, `run/mod.rs`), every
/// `fn name`, every Rust path (`policy::container_spec`, `Recorder::fatal`,
/// `eval_core::budget::WIRE_METRICS`), every `file.rs::item`, every type name and every link to a
/// file of the repository (relative to the document).
#[test]
fn every_path_and_function_the_architecture_document_names_exists() {
    let root = workspace_root();
    let (files, dirs, sources) = tree();
    let srcs = Srcs::index(sources);
    let docs = documents();
    assert!(
        docs.iter().any(|d| d == "docs/custody.md"),
        "the docs pages are found"
    );
    let mut problems = Vec::new();
    let mut all_spans = 0;
    for doc_path in &docs {
        let doc = std::fs::read_to_string(root.join(doc_path)).unwrap();
        let spans = code_spans(&doc);
        if doc_path == "ARCHITECTURE.md" {
            assert!(spans.len() > 150, "the map's code spans are found");
        }
        all_spans += spans.len();
        problems.extend(
            spans
                .iter()
                .filter_map(|s| missing(s, &files, &dirs, &srcs))
                .map(|p| format!("{doc_path}: {p}")),
        );
        for link in doc.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or("");
            let path = target.split('#').next().unwrap_or("");
            if path.is_empty() || path.contains("://") {
                continue;
            }
            let found = link_target(doc_path, path)
                .is_some_and(|p| files.contains(&p) || dirs.contains(p.trim_end_matches('/')));
            if !found {
                problems.push(format!("{doc_path}: link ({target}): no such file"));
            }
        }
    }
    assert!(all_spans > 1000, "the documents' code spans are found");
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md or a docs/ page names what does not exist:\n{problems:#?}"
    );
}

/// Links resolve from the page that holds them: `../ARCHITECTURE.md` from `docs/`, `docs/x.md`
/// from the root, and nothing outside the repository.
#[test]
fn links_resolve_relative_to_their_document() {
    assert_eq!(
        link_target("docs/custody.md", "../ARCHITECTURE.md").as_deref(),
        Some("ARCHITECTURE.md")
    );
    assert_eq!(
        link_target("ARCHITECTURE.md", "docs/runs.md").as_deref(),
        Some("docs/runs.md")
    );
    assert_eq!(
        link_target("docs/runs.md", "show.md").as_deref(),
        Some("docs/show.md")
    );
    assert_eq!(link_target("docs/runs.md", "../../etc/passwd"), None);
}

/// The reference check itself catches a wrong path, a wrong function and a wrong item of a file.
#[test]
fn the_reference_check_refuses_what_does_not_exist() {
    let (files, dirs, sources) = tree();
    let srcs = Srcs::index(sources);
    for good in [
        "controller/engine/src/lib.rs",
        "engine/src/lib.rs",
        "fn container_spec",
        "policy::container_spec",
        "report/src/power.rs::power_rows",
        "eval_core::budget::WIRE_METRICS",
        "Recorder::fatal",
        "controller/tests/it/",
    ] {
        assert_eq!(missing(good, &files, &dirs, &srcs), None, "{good}");
    }
    // Built at run time, so that this file itself does not declare or mention them.
    let none = ["no_such_", "item_anywhere"].concat();
    let bads = [
        format!("controller/engine/src/{none}.rs"),
        format!("fn {none}"),
        format!("policy::{none}"),
        format!("commands/freeze.rs::{none}"),
        format!("eval_core::budget::{}", none.to_uppercase()),
        ["NoSuch", "TypeAnywhere"].concat(),
        format!("controller/tests/{none}/"),
    ];
    for bad in &bads {
        assert!(missing(bad, &files, &dirs, &srcs).is_some(), "{bad}");
    }
}

/// The controller is a binary, so `#![deny(missing_docs)]` in `main.rs` checks only what it
/// exports (nothing but the crate's own doc); what keeps its modules documented is this: every
/// source file of the controller opens (after its inner attributes) with a `//!` doc saying
/// what the module owns.
#[test]
fn every_controller_module_says_what_it_owns() {
    let src = workspace_root().join("controller/src");
    let files = rust_files(&src);
    assert!(files.len() > 40, "the controller's sources are found");
    let mut undocumented = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let first = text
            .lines()
            .find(|l| !l.trim().is_empty() && !l.starts_with("#!["))
            .unwrap_or("");
        if !first.starts_with("//!") {
            undocumented.push(f.display().to_string());
        }
    }
    assert!(
        undocumented.is_empty(),
        "modules without a //! doc: {undocumented:#?}"
    );
}
