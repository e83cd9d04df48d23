//! The ```` ```fixture ```` block a task's `prompt.md` carries: the requirements the fixture model
//! can fulfil and the fixture agent can ask about.

use serde::{Deserialize, Serialize};

/// The parsed fixture block: a task name and the file edits that solve it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureTask {
    /// The task's name; with a requirement id it decides (deterministically) whether a model of a
    /// given skill gets that requirement right.
    pub task: String,
    /// The requirements, in the order the model works through them (`[[requirement]]`).
    #[serde(default, rename = "requirement")]
    pub requirements: Vec<Requirement>,
}

/// One file the task needs written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// The requirement's id, unique within the task.
    pub id: String,
    /// Relative to the workspace; the edit replaces the whole file.
    pub path: String,
    /// The correct content, or for an ambiguous requirement the model's (wrong) guess.
    #[serde(default)]
    pub content: String,
    /// What a model that gets the requirement wrong writes; absent = it writes nothing.
    #[serde(default)]
    pub wrong: Option<String>,
    /// Whether the requirement cannot be got right without asking: the model writes the oracle's
    /// answer if it has one, else its guess in `content`.
    #[serde(default)]
    pub ambiguous: bool,
    /// The clarifying question the agent may ask the oracle about this requirement.
    #[serde(default)]
    pub question: Option<String>,
}

/// A prompt whose fixture block cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The prompt has no fixture block at all.
    #[error("the prompt has no ```fixture block")]
    NoBlock,
    /// The block's closing fence is missing.
    #[error("the prompt's ```fixture block is not closed")]
    Unclosed,
    /// The block is not valid TOML of the expected shape.
    #[error("the prompt's ```fixture block: {0}")]
    Toml(#[from] toml::de::Error),
    /// A requirement's path is absolute or climbs out of the workspace.
    #[error("requirement {id}: path {path:?} must be relative and stay inside the workspace")]
    Path {
        /// The requirement's id.
        id: String,
        /// The offending path.
        path: String,
    },
}

const OPEN: &str = "```fixture";

/// Finds and parses the first ```` ```fixture ```` block in `text`.
pub fn parse_prompt(text: &str) -> Result<FixtureTask, TaskError> {
    let mut lines = text.lines();
    let mut found = false;
    for line in lines.by_ref() {
        if line.trim_end() == OPEN {
            found = true;
            break;
        }
    }
    if !found {
        return Err(TaskError::NoBlock);
    }
    let mut body = String::new();
    let mut closed = false;
    for line in lines {
        if line.trim_end() == "```" {
            closed = true;
            break;
        }
        body.push_str(line);
        body.push('\n');
    }
    if !closed {
        return Err(TaskError::Unclosed);
    }
    let task: FixtureTask = toml::from_str(&body)?;
    for r in &task.requirements {
        if !is_safe_relative(&r.path) {
            return Err(TaskError::Path {
                id: r.id.clone(),
                path: r.path.clone(),
            });
        }
    }
    Ok(task)
}

/// A relative `/`-separated path with no `..`, `.` or empty component.
pub fn is_safe_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_block_and_refuses_escapes() {
        let prompt = "# Task\nDo it.\n```fixture\ntask = \"t\"\n[[requirement]]\nid = \"r1\"\npath = \"a/b.txt\"\ncontent = \"x\\n\"\n```\nafter\n";
        let t = parse_prompt(prompt).unwrap();
        assert_eq!(t.task, "t");
        assert_eq!(t.requirements[0].path, "a/b.txt");
        assert!(matches!(parse_prompt("none"), Err(TaskError::NoBlock)));
        let bad = prompt.replace("a/b.txt", "../b.txt");
        assert!(matches!(parse_prompt(&bad), Err(TaskError::Path { .. })));
        assert!(matches!(
            parse_prompt("```fixture\ntask = \"t\"\n"),
            Err(TaskError::Unclosed)
        ));
    }
}
