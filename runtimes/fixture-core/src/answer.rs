//! The fixture model's answer format (assistant `content`), line based:
//! `@@edit <path>` … `@@end` (whole-file content between), `@@plan <text>`, `@@done`.

/// One `@@edit` block: a whole file's new content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The file, relative to the workspace (the agent refuses unsafe paths).
    pub path: String,
    /// The file's full content; ends with a newline unless empty.
    pub content: String,
}

/// A parsed answer: the edits to apply and whether the model says it is finished.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    /// Edits in answer order.
    pub edits: Vec<Edit>,
    /// The answer contained `@@done`.
    pub done: bool,
}

/// An answer that cannot be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnswerError {
    /// An `@@edit` block with no `@@end` (the path is given).
    #[error("@@edit {0} is not closed by @@end")]
    Unclosed(String),
}

/// The answer text the fixture model sends; `plan` adds an `@@plan` line first.
pub fn render(answer: &Answer, plan: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(plan) = plan {
        out.push_str("@@plan ");
        out.push_str(plan);
        out.push('\n');
    }
    for e in &answer.edits {
        out.push_str("@@edit ");
        out.push_str(&e.path);
        out.push('\n');
        out.push_str(&e.content);
        if !e.content.is_empty() && !e.content.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("@@end\n");
    }
    if answer.done {
        out.push_str("@@done\n");
    }
    out
}

/// Parses an answer. Unknown lines outside an edit are ignored (models chat).
/// A file's content always ends with a newline unless it is empty.
pub fn parse(text: &str) -> Result<Answer, AnswerError> {
    let mut answer = Answer::default();
    let mut current: Option<Edit> = None;
    for line in text.lines() {
        if let Some(edit) = current.as_mut() {
            if line == "@@end" {
                if let Some(e) = current.take() {
                    answer.edits.push(e);
                }
            } else {
                edit.content.push_str(line);
                edit.content.push('\n');
            }
            continue;
        }
        if let Some(path) = line.strip_prefix("@@edit ") {
            current = Some(Edit {
                path: path.trim().to_owned(),
                content: String::new(),
            });
        } else if line.trim_end() == "@@done" {
            answer.done = true;
        }
    }
    if let Some(e) = current {
        return Err(AnswerError::Unclosed(e.path));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let a = Answer {
            edits: vec![
                Edit {
                    path: "a.txt".into(),
                    content: "one\ntwo\n".into(),
                },
                Edit {
                    path: "empty".into(),
                    content: String::new(),
                },
            ],
            done: true,
        };
        let text = render(&a, Some("think"));
        assert_eq!(parse(&text).unwrap(), a);
        assert_eq!(
            parse("@@edit x\nabc\n"),
            Err(AnswerError::Unclosed("x".into()))
        );
    }
}
