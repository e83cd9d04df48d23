//! What eval reads of a Harbor task's `environment/Dockerfile` (the engine builds the image
//! itself): the base images it names (each must already be in the engine), its final working
//! directory (the workspace, Harbor's WORKDIR), and which files of `environment/` it copies into
//! that directory (the agent's starting workspace). Nothing else is interpreted.

use super::super::common::safe_relative;
use super::super::evocode::instructions;
use std::collections::BTreeMap;

/// A Dockerfile as eval reads it.
#[derive(Debug, Default, PartialEq)]
pub struct Read {
    /// The images the stages start from (not earlier stages), in order.
    pub bases: Vec<String>,
    /// The final stage's working directory, if it sets one (absolute).
    pub workdir: Option<String>,
    /// Copies of the final stage: (absolute destination as written, resolved against the working
    /// directory then, sources relative to the context).
    copies: Vec<(String, Vec<String>)>,
}

/// Reads `text`, or names the line (1-based) it cannot read and why.
pub fn read(text: &str) -> Result<Read, (usize, String)> {
    let mut r = Read::default();
    let mut stages: Vec<String> = Vec::new();
    let mut cwd = String::from("/");
    for (line, instr) in instructions(text) {
        let refuse = |why: String| Err((line, format!("`{instr}`: {why}")));
        let (kw, rest) = instr
            .split_once(char::is_whitespace)
            .map_or((instr.as_str(), ""), |(k, r)| (k, r.trim()));
        let words: Vec<&str> = rest.split_whitespace().collect();
        match kw.to_ascii_uppercase().as_str() {
            "FROM" => {
                let args: Vec<&str> = words
                    .iter()
                    .copied()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                let Some(image) = args.first() else {
                    return refuse("names no image".into());
                };
                if image.contains('$') {
                    return refuse("a base named through ARG cannot be checked at import".into());
                }
                if !stages.iter().any(|s| s.eq_ignore_ascii_case(image)) {
                    r.bases.push((*image).to_owned());
                }
                if let [_, as_kw, name] = args.as_slice()
                    && as_kw.eq_ignore_ascii_case("as")
                {
                    stages.push((*name).to_owned());
                }
                cwd = "/".into();
                r.workdir = None;
                r.copies.clear();
            }
            "WORKDIR" => {
                if rest.contains('$') {
                    return refuse("a working directory through a variable".into());
                }
                cwd = resolve(&cwd, rest.trim_matches('"'));
                r.workdir = Some(cwd.clone());
            }
            "COPY" | "ADD" => {
                if words.iter().any(|w| w.starts_with("--from")) {
                    continue;
                }
                let parts: Vec<&str> = words
                    .iter()
                    .copied()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                let Some((dest, srcs)) = parts.split_last().filter(|(_, s)| !s.is_empty()) else {
                    return refuse("not `COPY SRC… DEST`".into());
                };
                if rest.starts_with('[') || rest.contains('$') {
                    return refuse(
                        "only the plain form `COPY SRC… DEST`, without variables".into(),
                    );
                }
                let mut d = resolve(&cwd, dest);
                if dest.ends_with('/') || srcs.len() > 1 {
                    d.push('/');
                }
                r.copies
                    .push((d, srcs.iter().map(|s| (*s).to_owned()).collect()));
            }
            _ => {}
        }
    }
    if r.bases.is_empty() {
        return Err((0, "no FROM".into()));
    }
    Ok(r)
}

/// `path` against the working directory `cwd`, `.` and `..` resolved.
fn resolve(cwd: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for p in joined.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

impl Read {
    /// The files of the context (`files`: paths beneath `environment/`) that the final stage
    /// copies into `workdir`: workspace path → context path. A source that names nothing, or
    /// a wildcard, is refused naming it.
    pub fn workspace(
        &self,
        workdir: &str,
        files: &[String],
    ) -> Result<BTreeMap<String, String>, String> {
        let mut out = BTreeMap::new();
        for (dest, srcs) in &self.copies {
            for src in srcs {
                let s = src.trim_start_matches("./").trim_end_matches('/');
                if s.contains(['*', '?', '[']) || (s != "." && safe_relative(s).is_err()) {
                    return Err(format!("COPY {src}: not a plain path inside environment/"));
                }
                let mut found = false;
                for f in files {
                    let (rel, is_dir_copy) = if s == "." {
                        (Some(f.as_str()), true)
                    } else if f == s {
                        (f.rsplit('/').next(), false)
                    } else {
                        (f.strip_prefix(&format!("{s}/")), true)
                    };
                    let Some(rel) = rel else { continue };
                    found = true;
                    let target = if is_dir_copy || dest.ends_with('/') {
                        format!("{}/{rel}", dest.trim_end_matches('/'))
                    } else {
                        dest.clone()
                    };
                    if let Some(w) =
                        target.strip_prefix(&format!("{}/", workdir.trim_end_matches('/')))
                    {
                        out.insert(w.to_owned(), f.clone());
                    }
                }
                if !found && !src.contains("://") {
                    return Err(format!("COPY {src}: environment/ has no such file"));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_workdir_and_workspace_copies_are_read() {
        let d = "FROM golang:1.22 AS build\nRUN go version\nFROM build\nFROM ubuntu:24.04\nWORKDIR /srv\nWORKDIR app\nCOPY src/ ./\nCOPY README.md notes.txt ./docs/\nCOPY --from=build /x /y\nCOPY tool.sh /usr/local/bin/tool\n";
        let r = read(d).unwrap();
        assert_eq!(r.bases, vec!["golang:1.22", "ubuntu:24.04"]);
        assert_eq!(r.workdir.as_deref(), Some("/srv/app"));
        let files: Vec<String> = [
            "Dockerfile",
            "src/main.py",
            "src/lib/a.py",
            "README.md",
            "notes.txt",
            "tool.sh",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let w = r.workspace("/srv/app", &files).unwrap();
        let got: Vec<(&str, &str)> = w.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("docs/README.md", "README.md"),
                ("docs/notes.txt", "notes.txt"),
                ("lib/a.py", "src/lib/a.py"),
                ("main.py", "src/main.py"),
            ]
        );
        assert!(
            r.workspace("/srv/app", &files[..1])
                .unwrap_err()
                .contains("src/")
        );
    }

    #[test]
    fn what_cannot_be_checked_is_refused_by_line() {
        for (text, line, why) in [
            ("ARG B=x\nFROM $B\n", 2, "ARG"),
            ("WORKDIR /app\n", 0, "no FROM"),
            ("FROM a\nWORKDIR $HOME\n", 2, "variable"),
            ("FROM a\n\nCOPY [\"x\", \"/app/\"]\n", 3, "plain form"),
        ] {
            let (l, msg) = read(text).expect_err(text);
            assert_eq!(l, line, "{text}: {msg}");
            assert!(msg.contains(why), "{text}: {msg}");
        }
    }
}
