//! No function over 100 lines on the run path (issue 35): the crates a run goes through — the
//! engine, the runtimes, the proxy, the run log, the upstreams, and the archive writer of the
//! evidence crate — are read when a run goes wrong, and a function that long cannot be read at
//! once. Counted from the line of `fn` to its closing brace; tests (`#[cfg(test)]` items,
//! `tests.rs`, `*_tests.rs`) are left out.

use super::{rust_files, workspace_root};

const LIMIT: usize = 100;

/// The run path, relative to the workspace root (a directory, or one file).
const RUN_PATH: &[&str] = &[
    "controller/engine/src",
    "runtimes/src",
    "proxy/src",
    "controller/runlog/src",
    "controller/upstreams/src",
    "evidence/src/artifacts.rs",
];

/// `src` with comments, string, byte-string, raw-string and character literals blanked (their
/// newlines kept), so that a brace inside them is not counted and a line number still holds.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let word_start = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(end) = word_start.then(|| raw_string_end(b, i)).flatten() {
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('{', '\'', '\u{7b}'); a lifetime ('a) has no closing quote.
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            let end = len.map_or(i + 1, |l| i + l);
            blank(&mut out, i, end);
            i = end;
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Where a raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `i` ends, if one starts there.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let j = i + usize::from(b[i] == b'b');
    if b.get(j) != Some(&b'r') {
        return None;
    }
    let hashes = b[j + 1..].iter().take_while(|&&c| c == b'#').count();
    if b.get(j + 1 + hashes) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let body = j + 2 + hashes;
    b[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map(|p| body + p + close.len())
}

/// The index just past the brace that closes the block opening at `open`.
fn block_end(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// Each function with a body in `src` that is longer than `limit` lines: (name, first line, lines).
fn long_functions(src: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let code = code_only(src);
    let b = code.as_bytes();
    let line_of = |at: usize| b[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    // The items under `#[cfg(test)]` (a test module, a test helper) are left out.
    let mut skipped: Vec<(usize, usize)> = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        if let Some(p) = b[at..].iter().position(|&c| c == b'{' || c == b';')
            && b[at + p] == b'{'
        {
            skipped.push((at, block_end(b, at + p)));
        }
    }
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        let word = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
        let name: String = code[at + 3..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !word || name.is_empty() || skipped.iter().any(|&(s, e)| s <= at && at < e) {
            continue;
        }
        let Some(p) = b[at..].iter().position(|&c| c == b'{' || c == b';') else {
            continue;
        };
        if b[at + p] == b';' {
            continue; // a declaration without a body
        }
        let lines = line_of(block_end(b, at + p) - 1) - line_of(at) + 1;
        if lines > limit {
            out.push((name, line_of(at), lines));
        }
    }
    out
}

#[test]
fn no_function_on_the_run_path_is_over_100_lines() {
    let root = workspace_root();
    let mut files = Vec::new();
    for rel in RUN_PATH {
        let p = root.join(rel);
        if p.is_dir() {
            files.extend(rust_files(&p));
        } else {
            files.push(p);
        }
    }
    assert!(files.len() > 50, "the run path's sources are found");
    let mut long = Vec::new();
    for f in files {
        let name = f.file_name().unwrap_or_default().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        for (func, line, lines) in long_functions(&text, LIMIT) {
            long.push(format!("{rel}:{line} {func}: {lines} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {LIMIT} lines on the run path (split each into named steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_scan_counts_bodies_and_ignores_braces_in_literals_comments_and_tests() {
    let body = |n: usize| "    let _ = 1;\n".repeat(n);
    // 3 lines of frame + 98 of body = 101 lines; braces in literals and comments do not end it.
    let long = format!(
        "fn long() {{\n    let s = \"}}}}\"; let c = '}}'; let r = r#\"}}\"#; // }}\n{}}}\n",
        body(98)
    );
    let short = format!("fn short<'a>(x: &'a str) {{\n{}}}\n", body(98));
    let tested = format!(
        "#[cfg(test)]\nmod tests {{\n    fn in_tests() {{\n{}    }}\n}}\n",
        body(200)
    );
    let declared =
        "trait T {\n    fn declared(&self);\n}\nconst F: fn() = f; /* fn commented() { */\n";
    let src = format!("{long}{short}{tested}{declared}");
    let found = long_functions(&src, LIMIT);
    assert_eq!(found, vec![("long".to_owned(), 1, 101)], "{found:?}");
    assert_eq!(
        long_functions(&src, 99).len(),
        2,
        "the 100-line one at a lower limit"
    );
}
