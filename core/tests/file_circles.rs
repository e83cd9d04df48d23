//! No circles of files (issue 35): within each crate of the workspace, the files of `src/` that
//! import each other must form a graph without cycles, so that every file can be read after the
//! files it depends on and a change to a leaf never has to be understood together with its users.
//!
//! The scan is a small Rust lexer, not a compiler: it follows each crate root's `mod x;`
//! declarations to find the module tree, then takes an edge from a file to the file that defines
//! the module a path names, for every `crate::`, `self::`, `super::` path (in `use` trees and in
//! code) and every path that starts with a module declared in the current module. A path whose
//! last segments name an item resolves to the file of the longest module prefix; a name that
//! module imports with `use` (a re-export or a private import seen by its children) is followed
//! to where it comes from. Declaring a child with `mod x;` is not an edge; using it is.
//! A glob import (`pub use x::*`) is followed for a name that `x` defines or imports itself.
//! `#[cfg(test)]` items and `tests.rs` / `*_tests.rs` files are left out: tests may reach
//! anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Circles allowed for now: a circle is reported unless every file in it starts with one of these
/// prefixes, each with why it waits. Empty: the workspace has none (issue 35 broke the last, the
/// importers', by moving what they share into `controller/import/src/common.rs`).
const PENDING: &[(&str, &str)] = &[];

#[test]
fn no_file_circles_in_any_crate_outside_the_pending_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("core/ sits in the workspace root");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let members = workspace_members(&manifest);
    assert!(
        members.iter().any(|m| m == "core"),
        "the workspace members list was not parsed: {members:?}"
    );
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).ok();
    let mut graph = Graph::default();
    for member in &members {
        let Some(cargo) = read(&format!("{member}/Cargo.toml")) else {
            continue;
        };
        if !cargo.lines().any(|l| l.trim() == "[package]") {
            continue;
        }
        for crate_root in crate_roots(root, member) {
            scan_crate(&crate_root, &read, &mut graph);
        }
    }
    // A scanner that found nothing would pass vacuously: the workspace has well over a hundred
    // files and hundreds of intra-crate imports.
    assert!(
        graph.files.len() > 100,
        "only {} files scanned",
        graph.files.len()
    );
    assert!(
        graph.edge_count() > 200,
        "only {} edges found",
        graph.edge_count()
    );

    let mut report = String::new();
    for circle in graph.circles() {
        let pending = PENDING
            .iter()
            .any(|(prefix, _)| circle.iter().all(|f| f.starts_with(prefix)));
        if !pending {
            report.push_str(&graph.describe(&circle));
        }
    }
    assert!(
        report.is_empty(),
        "circles of files that import each other (break each by moving the shared items to a \
         leaf module both use, or by inverting one dependency):\n{report}"
    );
}

/// The crate roots of a member: `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, `src/bin/*/main.rs`.
fn crate_roots(root: &Path, member: &str) -> Vec<String> {
    let mut roots = Vec::new();
    for name in ["lib.rs", "main.rs"] {
        let rel = format!("{member}/src/{name}");
        if root.join(&rel).is_file() {
            roots.push(rel);
        }
    }
    if let Ok(entries) = std::fs::read_dir(root.join(member).join("src/bin")) {
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let file = format!("{member}/src/bin/{name}");
            let nested = format!("{file}/main.rs");
            if name.ends_with(".rs") {
                roots.push(file);
            } else if root.join(&nested).is_file() {
                roots.push(nested);
            }
        }
    }
    roots
}

/// The quoted entries of `[workspace] members = [...]`.
fn workspace_members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members") else {
        return Vec::new();
    };
    let rest = &manifest[start..];
    let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) else {
        return Vec::new();
    };
    rest[open + 1..close]
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Lexer: identifiers, `::` and single punctuation, with comments, strings, chars, lifetimes and
// numbers dropped. Each token carries its line.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Sep,
    Punct(char),
}

fn lex(src: &str) -> Vec<(Tok, u32)> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let mut line = 1u32;
    let mut i = 0;
    // Skips a quoted string starting at the opening quote; returns the index after it.
    let skip_string = |mut i: usize, line: &mut u32| {
        i += 1;
        while i < c.len() && c[i] != '"' {
            if c[i] == '\\' {
                i += 1;
            }
            if at(i) == '\n' {
                *line += 1;
            }
            i += 1;
        }
        i + 1
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(i, &mut line);
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                // An escaped char literal: up to the closing quote.
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or label.
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while at(i).is_alphanumeric()
                || at(i) == '_'
                || (at(i) == '.' && at(i + 1).is_ascii_digit())
            {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix
                && (at(i) == '"' || (at(i) == '#' && (at(i + 1) == '"' || at(i + 1) == '#')))
            {
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1; // the opening quote
                loop {
                    if i >= c.len() {
                        break;
                    }
                    if c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            } else if word == "r" && at(i) == '#' {
                // A raw identifier.
                let start = i + 1;
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
                out.push((Tok::Ident(c[start..i].iter().collect()), line));
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(i, &mut line);
            } else if word == "b" && at(i) == '\'' {
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    if c[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            } else {
                out.push((Tok::Ident(word), line));
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::Sep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Scanner: one file's child-module declarations, its `use` imports per module, and every path
// it names, each with the module it is written in.

#[derive(Clone, Debug)]
enum Head {
    Crate,
    /// `self` is `Super(0)`, `super::super` is `Super(2)`.
    Super(usize),
    /// A path starting with a plain identifier: a child module of the current one, or not ours.
    Rel,
}

#[derive(Clone, Debug)]
struct RawPath {
    scope: Vec<String>,
    head: Head,
    segs: Vec<String>,
    line: u32,
}

#[derive(Default)]
struct FileScan {
    /// Modules declared with `mod x;` (a file to find), as (module path, inline directory).
    file_mods: Vec<(Vec<String>, Vec<String>)>,
    /// Modules declared inline with `mod x { ... }`.
    inline_mods: Vec<Vec<String>>,
    /// (module, name it binds, the path it names).
    imports: Vec<(Vec<String>, String, RawPath)>,
    /// (module, the path of a module it imports everything of with `*`).
    globs: Vec<(Vec<String>, RawPath)>,
    /// (module, name of an item it defines at its top level).
    defines: Vec<(Vec<String>, String)>,
    paths: Vec<RawPath>,
    /// `#![cfg(test)]` at the top: the whole file is test code.
    test_only: bool,
}

fn ident(t: Option<&(Tok, u32)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

fn is(t: Option<&(Tok, u32)>, p: char) -> bool {
    matches!(t, Some((Tok::Punct(q), _)) if *q == p)
}

fn is_sep(t: Option<&(Tok, u32)>) -> bool {
    matches!(t, Some((Tok::Sep, _)))
}

/// Index just past the bracket group opening at `i`.
fn skip_group(toks: &[(Tok, u32)], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < toks.len() {
        match toks[i].0 {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Index just past the item starting at `i`: up to a `;` outside brackets or the end of its
/// first top-level `{}` block.
fn skip_item(toks: &[(Tok, u32)], mut i: usize) -> usize {
    // Further attributes first.
    while is(toks.get(i), '#') && is(toks.get(i + 1), '[') {
        i = skip_group(toks, i + 1);
    }
    let mut depth = 0i32;
    while i < toks.len() {
        match toks[i].0 {
            Tok::Punct(';') if depth == 0 => return i + 1,
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

fn is_cfg_test(attr: &[(Tok, u32)]) -> bool {
    let words: Vec<String> = attr
        .iter()
        .map(|(t, _)| match t {
            Tok::Ident(s) => s.clone(),
            Tok::Sep => "::".into(),
            Tok::Punct(p) => p.to_string(),
        })
        .collect();
    let text = words.concat();
    text == "[cfg(test)]" || text.starts_with("[cfg(all(test,")
}

/// The head of a path read from its first segments: `crate`, `self`, `super::super`, or plain.
fn split_head(segs: &[String]) -> (Head, Vec<String>) {
    match segs.first().map(String::as_str) {
        Some("crate") => (Head::Crate, segs[1..].to_vec()),
        Some("self") => (Head::Super(0), segs[1..].to_vec()),
        Some("super") => {
            let n = segs.iter().take_while(|s| *s == "super").count();
            (Head::Super(n), segs[n..].to_vec())
        }
        _ => (Head::Rel, segs.to_vec()),
    }
}

/// One leaf of a `use` tree: its full path, the name it binds (none for a glob).
struct UseLeaf {
    segs: Vec<String>,
    binds: Option<String>,
}

fn parse_use_tree(
    toks: &[(Tok, u32)],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<UseLeaf>,
) -> usize {
    if is(toks.get(i), '{') {
        i += 1;
        while i < toks.len() && !is(toks.get(i), '}') {
            let before = i;
            i = parse_use_tree(toks, i, prefix.clone(), out);
            if is(toks.get(i), ',') {
                i += 1;
            }
            if i == before {
                i += 1;
            }
        }
        return i + 1;
    }
    if is(toks.get(i), '*') {
        out.push(UseLeaf {
            segs: prefix,
            binds: None,
        });
        return i + 1;
    }
    let mut segs = prefix;
    while let Some(name) = ident(toks.get(i)) {
        segs.push(name.to_string());
        i += 1;
        if !is_sep(toks.get(i)) {
            break;
        }
        i += 1;
        if is(toks.get(i), '{') || is(toks.get(i), '*') {
            return parse_use_tree(toks, i, segs, out);
        }
    }
    let mut binds = segs.last().cloned();
    if ident(toks.get(i)) == Some("as") {
        binds = ident(toks.get(i + 1)).map(str::to_string);
        i += 2;
    }
    if segs.last().map(String::as_str) == Some("self") {
        segs.pop();
        if binds.as_deref() == Some("self") {
            binds = segs.last().cloned();
        }
    }
    if !segs.is_empty() {
        out.push(UseLeaf { segs, binds });
    }
    i
}

fn scan_file(src: &str) -> FileScan {
    let toks = lex(src);
    let mut scan = FileScan::default();
    // Inline modules open in this file: (name, brace depth inside it).
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let mut scope: Vec<String> = Vec::new();
    while i < toks.len() {
        let at_module_level = depth == stack.last().map_or(0, |(_, d)| *d);
        match &toks[i].0 {
            Tok::Punct('#') if is(toks.get(i + 1), '!') && is(toks.get(i + 2), '[') => {
                let end = skip_group(&toks, i + 2);
                if is_cfg_test(&toks[i + 2..end]) && depth == 0 {
                    scan.test_only = true;
                    return scan;
                }
                i = end;
            }
            Tok::Punct('#') if is(toks.get(i + 1), '[') => {
                let end = skip_group(&toks, i + 1);
                i = if is_cfg_test(&toks[i + 1..end]) {
                    skip_item(&toks, end)
                } else {
                    end
                };
            }
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                    scope.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(w) if w == "pub" && is(toks.get(i + 1), '(') => {
                // `pub(in crate::a)` names a module for visibility, not for use.
                i = skip_group(&toks, i + 1);
            }
            Tok::Ident(w) if w == "mod" && ident(toks.get(i + 1)).is_some() => {
                let name = ident(toks.get(i + 1)).unwrap_or_default().to_string();
                let mut path = scope.clone();
                path.push(name.clone());
                if is(toks.get(i + 2), '{') {
                    scan.inline_mods.push(path);
                    depth += 1;
                    stack.push((name.clone(), depth));
                    scope.push(name);
                    i += 3;
                } else {
                    scan.file_mods.push((path, scope.clone()));
                    i += 2;
                }
            }
            Tok::Ident(w)
                if at_module_level
                    && matches!(
                        w.as_str(),
                        "struct" | "enum" | "fn" | "trait" | "type" | "const" | "static" | "union"
                    )
                    && ident(toks.get(i + 1)).is_some() =>
            {
                let name = ident(toks.get(i + 1)).unwrap_or_default().to_string();
                scan.defines.push((scope.clone(), name));
                i += 2;
            }
            Tok::Ident(w) if w == "use" && !is_sep(toks.get(i + 1)) => {
                let line = toks[i].1;
                let mut leaves = Vec::new();
                let end = parse_use_tree(&toks, i + 1, Vec::new(), &mut leaves);
                for leaf in leaves {
                    let (head, segs) = split_head(&leaf.segs);
                    let raw = RawPath {
                        scope: scope.clone(),
                        head,
                        segs,
                        line,
                    };
                    if at_module_level {
                        match leaf.binds {
                            Some(name) => scan.imports.push((scope.clone(), name, raw.clone())),
                            None => scan.globs.push((scope.clone(), raw.clone())),
                        }
                    }
                    scan.paths.push(raw);
                }
                i = end.max(i + 1);
            }
            Tok::Ident(_) if is_sep(toks.get(i + 1)) => {
                let preceded = i > 0
                    && (is_sep(toks.get(i - 1))
                        || is(toks.get(i - 1), '.')
                        || is(toks.get(i - 1), '$'));
                let line = toks[i].1;
                let mut segs = Vec::new();
                while let Some(name) = ident(toks.get(i)) {
                    segs.push(name.to_string());
                    i += 1;
                    if !(is_sep(toks.get(i)) && ident(toks.get(i + 1)).is_some()) {
                        break;
                    }
                    i += 1;
                }
                if !preceded {
                    let (head, segs) = split_head(&segs);
                    scan.paths.push(RawPath {
                        scope: scope.clone(),
                        head,
                        segs,
                        line,
                    });
                }
            }
            _ => i += 1,
        }
    }
    scan
}

// ---------------------------------------------------------------------------------------------
// One crate: the module tree from its root, then each path resolved to the file of its module.

#[derive(Default)]
struct Graph {
    files: BTreeSet<String>,
    /// from -> to -> the first path that made the edge, as `line: path`.
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

fn is_test_file(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// Scans the crate whose root file is `root_file` (relative path, read through `read`) into
/// `graph`.
fn scan_crate(root_file: &str, read: &dyn Fn(&str) -> Option<String>, graph: &mut Graph) {
    // module path -> defining file; inline modules map to the file that holds them.
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut scans: Vec<(String, Vec<String>, FileScan)> = Vec::new();
    // (file, its module path, the directory its child files live in)
    let root_dir = root_file
        .rsplit_once('/')
        .map_or("", |(d, _)| d)
        .to_string();
    let Some(root_src) = read(root_file) else {
        return;
    };
    let mut queue = vec![(
        root_file.to_string(),
        root_src,
        Vec::<String>::new(),
        root_dir,
    )];
    while let Some((file, src, module, dir)) = queue.pop() {
        let scan = scan_file(&src);
        if scan.test_only {
            continue;
        }
        modules.insert(module.clone(), file.clone());
        graph.files.insert(file.clone());
        for inline in &scan.inline_mods {
            let mut full = module.clone();
            full.extend(inline.iter().cloned());
            modules.insert(full, file.clone());
        }
        for (decl, inline_scope) in &scan.file_mods {
            let name = decl.last().cloned().unwrap_or_default();
            let mut child_dir = dir.clone();
            for s in inline_scope {
                child_dir = format!("{child_dir}/{s}");
            }
            let flat = format!("{child_dir}/{name}.rs");
            let nested = format!("{child_dir}/{name}/mod.rs");
            let mut full = module.clone();
            full.extend(decl.iter().cloned());
            for (candidate, its_dir) in [
                (flat, format!("{child_dir}/{name}")),
                (nested, format!("{child_dir}/{name}")),
            ] {
                if is_test_file(&candidate) {
                    break;
                }
                if let Some(src) = read(&candidate) {
                    queue.push((candidate, src, full.clone(), its_dir));
                    break;
                }
            }
        }
        scans.push((file, module, scan));
    }

    let mut imports: BTreeMap<(Vec<String>, String), RawPath> = BTreeMap::new();
    for (_, module, scan) in &scans {
        for (scope, name, raw) in &scan.imports {
            let mut at = module.clone();
            at.extend(scope.iter().cloned());
            let mut raw = raw.clone();
            raw.scope = at.clone();
            imports.entry((at, name.clone())).or_insert(raw);
        }
    }
    let mut globs: BTreeMap<Vec<String>, Vec<RawPath>> = BTreeMap::new();
    let mut defines: BTreeSet<(Vec<String>, String)> = BTreeSet::new();
    for (_, module, scan) in &scans {
        for (scope, raw) in &scan.globs {
            let mut at = module.clone();
            at.extend(scope.iter().cloned());
            let mut raw = raw.clone();
            raw.scope = at.clone();
            globs.entry(at).or_default().push(raw);
        }
        for (scope, name) in &scan.defines {
            let mut at = module.clone();
            at.extend(scope.iter().cloned());
            defines.insert((at, name.clone()));
        }
    }
    let crate_ = Crate {
        modules,
        imports,
        globs,
        defines,
    };
    for (file, module, scan) in &scans {
        for raw in &scan.paths {
            let mut raw = raw.clone();
            let mut scope = module.clone();
            scope.extend(raw.scope.iter().cloned());
            raw.scope = scope;
            let Some(abs) = crate_.absolute(&raw) else {
                continue;
            };
            let Some(target) = crate_.resolve(&abs, 0) else {
                continue;
            };
            if target != *file {
                graph
                    .edges
                    .entry(file.clone())
                    .or_default()
                    .entry(target.clone())
                    .or_insert_with(|| format!("line {}: {}", raw.line, show(&raw)));
            }
        }
    }
}

fn show(raw: &RawPath) -> String {
    let head = match raw.head {
        Head::Crate => vec!["crate".to_string()],
        Head::Super(0) => vec!["self".to_string()],
        Head::Super(n) => vec!["super".to_string(); n],
        Head::Rel => vec![],
    };
    [head, raw.segs.clone()].concat().join("::")
}

struct Crate {
    modules: BTreeMap<Vec<String>, String>,
    imports: BTreeMap<(Vec<String>, String), RawPath>,
    globs: BTreeMap<Vec<String>, Vec<RawPath>>,
    defines: BTreeSet<(Vec<String>, String)>,
}

impl Crate {
    /// The absolute module path a written path names, or None if it leaves the crate.
    fn absolute(&self, raw: &RawPath) -> Option<Vec<String>> {
        match raw.head {
            Head::Crate => Some(raw.segs.clone()),
            Head::Super(n) => {
                let keep = raw.scope.len().checked_sub(n)?;
                Some([raw.scope[..keep].to_vec(), raw.segs.clone()].concat())
            }
            Head::Rel => {
                let first = raw.segs.first()?;
                let mut child = raw.scope.clone();
                child.push(first.clone());
                self.modules
                    .contains_key(&child)
                    .then(|| [raw.scope.clone(), raw.segs.clone()].concat())
            }
        }
    }

    /// The file that defines what `abs` names: the longest module prefix, following a name that
    /// module imports. None when an import leads out of the crate.
    fn resolve(&self, abs: &[String], hops: usize) -> Option<String> {
        let len = (0..=abs.len())
            .rev()
            .find(|&n| self.modules.contains_key(&abs[..n]))?;
        let module = &abs[..len];
        if len < abs.len() && hops < 16 {
            if let Some(raw) = self.imports.get(&(module.to_vec(), abs[len].clone())) {
                let mut target = self.absolute(raw)?;
                target.extend(abs[len + 1..].iter().cloned());
                return self.resolve(&target, hops + 1);
            }
            // Not defined here: a glob import whose module defines or imports the name.
            let name = &abs[len];
            if !self.defines.contains(&(module.to_vec(), name.clone())) {
                for glob in self.globs.get(module).into_iter().flatten() {
                    let Some(from) = self.absolute(glob) else {
                        continue;
                    };
                    if self.defines.contains(&(from.clone(), name.clone()))
                        || self.imports.contains_key(&(from.clone(), name.clone()))
                    {
                        let mut target = from;
                        target.extend(abs[len..].iter().cloned());
                        return self.resolve(&target, hops + 1);
                    }
                }
            }
        }
        self.modules.get(module).cloned()
    }
}

impl Graph {
    fn edge_count(&self) -> usize {
        self.edges.values().map(BTreeMap::len).sum()
    }

    /// Strongly connected components of more than one file (Tarjan), each sorted.
    fn circles(&self) -> Vec<Vec<String>> {
        let names: Vec<&String> = self.files.iter().collect();
        let index: BTreeMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let adj: Vec<Vec<usize>> = names
            .iter()
            .map(|n| {
                self.edges
                    .get(*n)
                    .map(|m| m.keys().filter_map(|t| index.get(t).copied()).collect())
                    .unwrap_or_default()
            })
            .collect();
        struct T<'a> {
            adj: &'a [Vec<usize>],
            idx: Vec<Option<usize>>,
            low: Vec<usize>,
            on: Vec<bool>,
            stack: Vec<usize>,
            next: usize,
            out: Vec<Vec<usize>>,
        }
        fn visit(t: &mut T, v: usize) {
            t.idx[v] = Some(t.next);
            t.low[v] = t.next;
            t.next += 1;
            t.stack.push(v);
            t.on[v] = true;
            for k in 0..t.adj[v].len() {
                let w = t.adj[v][k];
                match t.idx[w] {
                    None => {
                        visit(t, w);
                        t.low[v] = t.low[v].min(t.low[w]);
                    }
                    Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                    _ => {}
                }
            }
            if Some(t.low[v]) == t.idx[v] {
                let mut comp = Vec::new();
                while let Some(w) = t.stack.pop() {
                    t.on[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    t.out.push(comp);
                }
            }
        }
        let n = names.len();
        let mut t = T {
            adj: &adj,
            idx: vec![None; n],
            low: vec![0; n],
            on: vec![false; n],
            stack: Vec::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in 0..n {
            if t.idx[v].is_none() {
                visit(&mut t, v);
            }
        }
        let mut circles: Vec<Vec<String>> = t
            .out
            .into_iter()
            .map(|c| {
                let mut c: Vec<String> = c.into_iter().map(|i| names[i].clone()).collect();
                c.sort();
                c
            })
            .collect();
        circles.sort();
        circles
    }

    /// A circle and the edges inside it, each with the path that made it.
    fn describe(&self, circle: &[String]) -> String {
        let mut s = format!(
            "- circle of {} files: {}\n",
            circle.len(),
            circle.join(", ")
        );
        for from in circle {
            for (to, why) in self.edges.get(from).into_iter().flatten() {
                if circle.contains(to) {
                    s.push_str(&format!("    {from} -> {to} ({why})\n"));
                }
            }
        }
        s
    }
}

// ---------------------------------------------------------------------------------------------
// The resolver on tiny crates.

fn graph_of(files: &[(&str, &str)]) -> Graph {
    let map: BTreeMap<String, String> = files
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect();
    let mut graph = Graph::default();
    scan_crate("k/src/lib.rs", &|p: &str| map.get(p).cloned(), &mut graph);
    graph
}

fn edges_of(graph: &Graph) -> Vec<(String, String)> {
    graph
        .edges
        .iter()
        .flat_map(|(f, m)| m.keys().map(move |t| (f.clone(), t.clone())))
        .collect()
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[test]
fn two_files_that_use_each_other_are_a_circle() {
    let g = graph_of(&[
        ("k/src/lib.rs", "mod a;\nmod b;\n"),
        ("k/src/a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "k/src/b.rs",
            "pub struct B;\nfn f() { let _ = crate::a::A; }\n",
        ),
    ]);
    assert_eq!(
        g.circles(),
        vec![vec!["k/src/a.rs".to_string(), "k/src/b.rs".to_string()]]
    );
}

#[test]
fn declaring_a_child_module_is_not_an_edge_but_using_it_is() {
    let g = graph_of(&[
        ("k/src/lib.rs", "pub mod a;\npub struct Root;\n"),
        ("k/src/a.rs", "use crate::Root;\n"),
    ]);
    assert_eq!(edges_of(&g), vec![pair("k/src/a.rs", "k/src/lib.rs")]);
    assert!(g.circles().is_empty());

    let g = graph_of(&[
        (
            "k/src/lib.rs",
            "pub mod a;\npub struct Root;\nfn f() { a::g(); }\n",
        ),
        ("k/src/a.rs", "use crate::Root;\npub fn g() {}\n"),
    ]);
    assert_eq!(g.circles().len(), 1, "lib uses a::g and a uses crate::Root");
}

#[test]
fn an_item_path_resolves_to_the_file_of_its_module() {
    let g = graph_of(&[
        ("k/src/lib.rs", "mod a;\nmod user;\n"),
        ("k/src/a.rs", "pub mod b;\npub struct Item;\n"),
        ("k/src/a/b/mod.rs", "pub fn f() {}\n"),
        (
            "k/src/user.rs",
            "fn u() { crate::a::b::f(); let _ = crate::a::Item; }\n",
        ),
    ]);
    assert_eq!(
        edges_of(&g),
        vec![
            pair("k/src/user.rs", "k/src/a.rs"),
            pair("k/src/user.rs", "k/src/a/b/mod.rs")
        ]
    );
}

#[test]
fn super_and_use_groups_resolve_relative_to_the_writing_module() {
    let g = graph_of(&[
        ("k/src/lib.rs", "mod p;\n"),
        ("k/src/p/mod.rs", "mod c;\nmod d;\npub struct Shared;\n"),
        ("k/src/p/c.rs", "use super::{Shared, d::{self, D}};\n"),
        ("k/src/p/d.rs", "pub struct D;\n"),
    ]);
    assert_eq!(
        edges_of(&g),
        vec![
            pair("k/src/p/c.rs", "k/src/p/d.rs"),
            pair("k/src/p/c.rs", "k/src/p/mod.rs")
        ]
    );
}

#[test]
fn a_re_export_is_followed_to_the_file_that_defines_the_item() {
    // lib re-exports a's item and a uses b's item through the root: no edge to lib.rs, so no
    // circle lib -> a -> lib.
    let g = graph_of(&[
        (
            "k/src/lib.rs",
            "mod a;\nmod b;\npub use a::A;\npub use b::B;\n",
        ),
        ("k/src/a.rs", "use crate::B;\npub struct A;\n"),
        ("k/src/b.rs", "pub struct B;\n"),
    ]);
    assert!(g.circles().is_empty(), "{:?}", edges_of(&g));
    assert!(edges_of(&g).contains(&pair("k/src/a.rs", "k/src/b.rs")));
}

#[test]
fn a_glob_re_export_is_followed_for_the_names_its_module_defines() {
    let g = graph_of(&[
        ("k/src/lib.rs", "mod r;\nmod user;\n"),
        (
            "k/src/r/mod.rs",
            "mod data;\npub use data::*;\npub struct Own;\n",
        ),
        ("k/src/r/data.rs", "pub struct RunData;\n"),
        ("k/src/user.rs", "use crate::r::{Own, RunData};\n"),
    ]);
    assert_eq!(
        edges_of(&g),
        vec![
            pair("k/src/r/mod.rs", "k/src/r/data.rs"),
            pair("k/src/user.rs", "k/src/r/data.rs"),
            pair("k/src/user.rs", "k/src/r/mod.rs"),
        ]
    );
}

#[test]
fn test_modules_test_files_comments_and_strings_make_no_edge() {
    let g = graph_of(&[
        ("k/src/lib.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n"),
        (
            "k/src/a.rs",
            "// crate::b::X\nconst S: &str = \"crate::b::X\";\n#[cfg(test)]\nmod t { use crate::b::X; }\n",
        ),
        ("k/src/b.rs", "use crate::a::S;\n"),
        ("k/src/tests.rs", "use crate::a::S; use crate::b::X;\n"),
    ]);
    assert_eq!(edges_of(&g), vec![pair("k/src/b.rs", "k/src/a.rs")]);
    assert!(!g.files.contains("k/src/tests.rs"));
}

#[test]
fn workspace_members_are_read_from_the_manifest() {
    let m = workspace_members("[workspace]\nresolver = \"3\"\nmembers = [\"core\", \"a/b\"]\n");
    assert_eq!(m, vec!["core".to_string(), "a/b".to_string()]);
}
