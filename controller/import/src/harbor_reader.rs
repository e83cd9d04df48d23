//! Harbor's task format as Harbor's own task model reads it (harbor 0.26.0:
//! `harbor/models/task/config.py` `TaskConfig`, `paths.py` `TaskPaths`, `step_name.py`,
//! `task.py` `strip_canary`), shared by `eval import harbor` and `eval import v04-evocode`
//! (EvoCode-Bench is Harbor multi-step). The fields are Harbor's names and types; fields eval
//! does not read are ignored, as pydantic ignores unknown keys. A value of the wrong type is
//! refused naming the file and the field (toml's error names the key).

use super::common::{ImportError, safe_relative};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Bytes of one file and files of one tree the importers read.
pub(super) const MAX_FILE_BYTES: u64 = 4 << 20;
pub(super) const MAX_TREE_FILES: usize = 2000;

/// `TaskConfig`: the fields eval reads.
#[derive(Debug, Default, Deserialize)]
pub struct HarborToml {
    /// `schema_version` (Harbor renames a legacy `version` to it).
    #[serde(default, alias = "version")]
    pub schema_version: Option<String>,
    /// `[task]`: the package name (`org/name`), when the task declares one.
    #[serde(default)]
    pub task: Option<PackageInfo>,
    /// `metadata`: a free table (`dict[str, Any]`).
    #[serde(default)]
    pub metadata: toml::Table,
    #[serde(default)]
    pub agent: Phase,
    #[serde(default)]
    pub verifier: Verifier,
    #[serde(default)]
    pub environment: Environment,
    /// `"mean"` or `"final"`; Harbor defaults a multi-step task to `"mean"`.
    #[serde(default)]
    pub multi_step_reward_strategy: Option<String>,
    #[serde(default)]
    pub steps: Vec<HarborStep>,
}

/// `PackageInfo`: `name` is required and `org/name` (`validate_name_format`).
#[derive(Debug, Default, Deserialize)]
pub struct PackageInfo {
    pub name: String,
}

/// Harbor's `ORG_NAME_PATTERN` (`^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$`), and
/// no `..`.
fn org_name(v: &str) -> bool {
    let part = |p: &str| {
        p.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    matches!(v.split_once('/'), Some((o, n)) if part(o) && part(n)) && !v.contains("..")
}

/// `AgentConfig`: `timeout_sec: float | None`.
#[derive(Debug, Default, Deserialize)]
pub struct Phase {
    #[serde(default)]
    pub timeout_sec: Option<f64>,
}

/// `VerifierConfig`: `timeout_sec: float = 600.0`, `env`, and the separate-environment fields
/// eval refuses (`environment_mode`, `environment`).
#[derive(Debug, Default, Deserialize)]
pub struct Verifier {
    #[serde(default)]
    pub timeout_sec: Option<f64>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub environment_mode: Option<String>,
    #[serde(default)]
    pub environment: Option<toml::Table>,
}

/// `EnvironmentConfig`: resources, the image and the working directory.
#[derive(Debug, Default, Deserialize)]
pub struct Environment {
    #[serde(default)]
    pub build_timeout_sec: Option<f64>,
    #[serde(default)]
    pub docker_image: Option<String>,
    #[serde(default)]
    pub os: Option<String>,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Deprecated `memory = "2G"`, which Harbor migrates to `memory_mb`.
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub storage_mb: Option<u64>,
    #[serde(default)]
    pub gpus: Option<u64>,
    #[serde(default)]
    pub tpu: Option<toml::Table>,
    #[serde(default)]
    pub workdir: Option<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

/// `StepConfig`.
#[derive(Debug, Deserialize)]
pub struct HarborStep {
    pub name: Option<String>,
    #[serde(default)]
    pub agent: Phase,
    #[serde(default)]
    pub verifier: Verifier,
    #[serde(default)]
    pub min_reward: Option<toml::Value>,
}

pub fn harbor(path: impl Into<PathBuf>, why: impl Into<String>) -> ImportError {
    ImportError::Harbor {
        path: path.into(),
        why: why.into(),
    }
}

/// Parses `path` (a task's `task.toml`) as Harbor's `TaskConfig.model_validate_toml` does.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<HarborToml, ImportError> {
    let text = std::str::from_utf8(bytes).map_err(|_| harbor(path, "not UTF-8"))?;
    let spec: HarborToml = toml::from_str(text).map_err(|e| harbor(path, e.to_string()))?;
    if let Some(s) = &spec.multi_step_reward_strategy
        && s != "mean"
        && s != "final"
    {
        return Err(harbor(
            path,
            format!("multi_step_reward_strategy = {s:?}: Harbor knows \"mean\" and \"final\""),
        ));
    }
    if let Some(t) = &spec.task
        && !org_name(&t.name)
    {
        return Err(harbor(
            path,
            format!(
                "task.name = {:?}: not `org/name` (letters, digits, `.`, `_`, `-`)",
                t.name
            ),
        ));
    }
    if let Some(m) = &spec.environment.memory {
        parse_size_mb(m)
            .map_err(|why| harbor(path, format!("environment.memory = {m:?}: {why}")))?;
    }
    Ok(spec)
}

/// The memory in MiB: `memory_mb`, else the deprecated `memory` as Harbor's
/// `_parse_size_to_mb` reads it.
pub fn memory_mb(env: &Environment) -> Option<u64> {
    env.memory_mb
        .or_else(|| env.memory.as_deref().and_then(|m| parse_size_mb(m).ok()))
}

fn parse_size_mb(s: &str) -> Result<u64, String> {
    let s = s.trim().to_ascii_uppercase();
    let (num, scale) = match s.chars().last() {
        Some('G') => (&s[..s.len() - 1], 1024.0),
        Some('M') => (&s[..s.len() - 1], 1.0),
        Some('K') => (&s[..s.len() - 1], 1.0 / 1024.0),
        _ => return Err("expected a size like 1G or 512M".into()),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| "expected a size like 1G or 512M".to_owned())?;
    Ok((v * scale) as u64)
}

/// The declared steps' names, checked as Harbor's `validate_step_name` and
/// `validate_unique_step_names` check them (and as one plain directory name).
pub fn step_names(spec: &HarborToml, toml_path: &Path) -> Result<Vec<String>, ImportError> {
    let mut names: Vec<String> = Vec::new();
    for (i, s) in spec.steps.iter().enumerate() {
        let field = format!("steps[{i}].name");
        let name = s
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| harbor(toml_path, format!("{field} is missing")))?;
        let bad_char = name
            .chars()
            .any(|c| "<>:\"/\\|?*".contains(c) || c.is_control());
        if bad_char
            || name.trim().is_empty()
            || name.ends_with(['.', ' '])
            || name.len() > 255
            || safe_relative(name).is_err()
        {
            return Err(harbor(
                toml_path,
                format!("{field} = {name:?}: not a plain directory name"),
            ));
        }
        if names
            .iter()
            .any(|n| n.to_lowercase() == name.to_lowercase())
        {
            return Err(harbor(
                toml_path,
                format!("{field} = {name:?}: declared twice"),
            ));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// Every task directory of `from` (those with a `task.toml`), sorted; `wanted` (when not empty)
/// selects, each named once and known.
pub fn task_ids(from: &Path, wanted: &[String], max: usize) -> Result<Vec<String>, ImportError> {
    let entries = std::fs::read_dir(from).map_err(|source| ImportError::Read {
        path: from.to_path_buf(),
        source,
    })?;
    let mut ids = Vec::new();
    for e in entries {
        let e = e.map_err(|source| ImportError::Read {
            path: from.to_path_buf(),
            source,
        })?;
        let md = std::fs::symlink_metadata(e.path()).map_err(|source| ImportError::Read {
            path: e.path(),
            source,
        })?;
        if md.is_dir() && std::fs::symlink_metadata(e.path().join("task.toml")).is_ok() {
            let id = e
                .file_name()
                .to_str()
                .map(str::to_owned)
                .ok_or_else(|| harbor(e.path(), "not a UTF-8 name"))?;
            ids.push(id);
        }
    }
    ids.sort();
    if ids.is_empty() {
        return Err(harbor(from, "no task directory (DIR/<task>/task.toml)"));
    }
    if ids.len() > max {
        return Err(harbor(from, format!("more than {max} tasks")));
    }
    let mut want = std::collections::BTreeSet::new();
    for w in wanted {
        if !ids.contains(w) {
            return Err(ImportError::UnknownTask {
                id: w.clone(),
                known: ids.clone(),
            });
        }
        if !want.insert(w.as_str()) {
            return Err(ImportError::TaskTwice(w.clone()));
        }
    }
    Ok(ids
        .iter()
        .filter(|id| want.is_empty() || want.contains(id.as_str()))
        .cloned()
        .collect())
}

/// A Harbor timeout in whole seconds (rounded up), positive and finite.
pub fn timeout_of(
    v: Option<f64>,
    default: u64,
    toml_path: &Path,
    field: &str,
) -> Result<u64, ImportError> {
    match v {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(s.ceil() as u64),
        Some(s) => Err(harbor(
            toml_path,
            format!("{field} = {s}: not a positive number of seconds up to a day"),
        )),
    }
}

/// `strip_canary`: leading canary comment lines (`<!-- …canary… -->`, `# …canary…`) and the
/// blank lines after them are not shown to the agent.
pub fn strip_canary(text: &str) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let canary = |l: &str| {
        let l = l.trim();
        let low = l.to_lowercase();
        low.contains("canary")
            && ((l.starts_with("<!--") && l.ends_with("-->")) || l.starts_with('#'))
    };
    let mut i = 0;
    while i < lines.len() && canary(lines[i]) {
        i += 1;
    }
    while i < lines.len() && lines[i].trim().is_empty() {
        i += 1;
    }
    lines[i..].join("\n")
}

/// Every regular file beneath `root` (relative path → bytes), sorted; links, special files and
/// unsafe names are refused naming the path; sizes and counts are capped.
pub fn read_tree(root: &Path) -> Result<Vec<(String, Vec<u8>)>, ImportError> {
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(harbor(root, "not a directory")),
        Err(source) => {
            return Err(ImportError::Read {
                path: root.to_path_buf(),
                source,
            });
        }
    }
    let read_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Read { path, source }
    };
    let mut out = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let here = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&rel)
        };
        for entry in std::fs::read_dir(&here).map_err(read_err(&here))? {
            let entry = entry.map_err(read_err(&here))?;
            let path = entry.path();
            let name = entry
                .file_name()
                .to_str()
                .map(str::to_owned)
                .ok_or_else(|| harbor(&path, "not a UTF-8 name"))?;
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            safe_relative(&child).map_err(|why| harbor(&path, why))?;
            let md = std::fs::symlink_metadata(&path).map_err(read_err(&path))?;
            if md.is_dir() {
                stack.push(child);
            } else if md.is_file() {
                if md.len() > MAX_FILE_BYTES {
                    return Err(ImportError::TooLarge {
                        path,
                        cap: MAX_FILE_BYTES,
                    });
                }
                let bytes = std::fs::read(&path).map_err(read_err(&path))?;
                out.push((child, bytes));
                if out.len() > MAX_TREE_FILES {
                    return Err(harbor(root, format!("more than {MAX_TREE_FILES} files")));
                }
            } else {
                return Err(ImportError::NotRegular {
                    path,
                    what: "a link or special file".into(),
                });
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_lines_and_the_blank_lines_after_them_are_stripped() {
        let t = "<!-- BENCHMARK DATA canary GUID x -->\n# canary 2\n\n\nDo it.\n# canary kept\n";
        assert_eq!(strip_canary(t), "Do it.\n# canary kept\n");
        assert_eq!(strip_canary("# Title\nbody"), "# Title\nbody");
    }

    #[test]
    fn package_names_are_checked_as_harbors_pattern_checks_them() {
        for ok in ["acme/bench__t1", "a.b/c-d_e", "0/0"] {
            assert!(org_name(ok), "{ok}");
        }
        for bad in [
            "TODO_ORG/{{ADAPTER_ID}}__{task_id}",
            "acme",
            ".a/b",
            "a/.b",
            "a/b/c",
            "a..b/c",
            "a/",
        ] {
            assert!(!org_name(bad), "{bad}");
        }
    }

    #[test]
    fn legacy_memory_sizes_read_as_harbor_reads_them() {
        assert_eq!(parse_size_mb("2G"), Ok(2048));
        assert_eq!(parse_size_mb(" 512m "), Ok(512));
        assert_eq!(parse_size_mb("2048K"), Ok(2));
        assert!(parse_size_mb("2GB").is_err());
    }
}
