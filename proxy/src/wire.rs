//! What a request offered the model, recorded per call without the bodies: the names of the tools
//! it carries and a digest of each system-prompt section (and of each paragraph of a section).
//! This is what a metric computed "from the wire" reads (a plugin's route shows only in the tools
//! and the system prompt of the harness's requests), and it is recorded by the proxy — the one
//! channel the agent's container cannot rewrite after the fact.
//!
//! Everything is bounded, so a hostile request cannot make its record large: at most
//! [`MAX_TOOLS`] names of at most [`MAX_NAME_BYTES`] bytes, [`MAX_SECTIONS`] sections of
//! [`MAX_PARAGRAPHS`] paragraph digests, a heading of at most [`MAX_HEADING_BYTES`] bytes; what is
//! cut is flagged (`*_truncated`), never silently dropped.

use std::borrow::Cow;

use eval_core::contract::ApiKind;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};

use crate::request::ParsedRequest;

/// Tool names recorded per call.
pub const MAX_TOOLS: usize = 256;
/// Bytes of one tool name (cut at a character boundary).
pub const MAX_NAME_BYTES: usize = 128;
/// System-prompt sections recorded per call.
pub const MAX_SECTIONS: usize = 64;
/// Paragraph digests recorded per section.
pub const MAX_PARAGRAPHS: usize = 64;
/// Bytes of a section's heading (its first line, cut at a character boundary).
pub const MAX_HEADING_BYTES: usize = 96;

/// The request's shape as the proxy forwarded it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireShape {
    /// The names of the tools the request offers, in the order sent; `None` when the request has
    /// no `tools` member (an empty list is `Some([])`).
    pub tools: Option<Vec<String>>,
    /// More than [`MAX_TOOLS`] tools, or a name longer than [`MAX_NAME_BYTES`], was cut.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tools_truncated: bool,
    /// The system prompt's sections, in order, over every system message (OpenAI: messages of
    /// role `system`; Anthropic: the top-level `system`).
    pub system: Vec<SystemSection>,
    /// More than [`MAX_SECTIONS`] sections (or paragraphs of one) were cut.
    #[serde(default, skip_serializing_if = "is_false")]
    pub system_truncated: bool,
}

/// One section of a system prompt: a digest of its exact bytes and of each of its paragraphs.
///
/// The DeepSeek Harness renders its sections joined by a blank line and does not delimit them on
/// the wire, so a section here starts at the beginning of a system message and at every line
/// starting with `#` that follows a blank line (the Harness's and Plan Lattice's sections open
/// with a Markdown heading). Paragraphs are the pieces between blank lines (`\n\n`), exact bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemSection {
    /// The section's first line when it is a Markdown heading (starts with `#`; empty
    /// otherwise), at most [`MAX_HEADING_BYTES`] bytes.
    pub heading: String,
    /// Bytes of the section.
    pub bytes: u64,
    /// `sha256:<hex>` of the section's bytes.
    pub digest: String,
    /// `sha256:<hex>` of each paragraph, in order.
    pub paragraphs: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `sha256:<hex>` of `s`: the form every digest of the wire shape takes.
pub fn text_digest(s: &str) -> String {
    crate::digest::digest_text(&Sha256::digest(s.as_bytes()))
}

fn cut(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

#[derive(Deserialize)]
struct Msg<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<Func<'a>>,
}

#[derive(Deserialize)]
struct Func<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// A content value (a string, or an array of parts with `text`) as one text; anything else is
/// no text.
fn content_text(raw: &RawValue) -> Option<String> {
    if let Ok(s) = serde_json::from_str::<Cow<'_, str>>(raw.get()) {
        return Some(s.into_owned());
    }
    let parts = serde_json::from_str::<Vec<Part<'_>>>(raw.get()).ok()?;
    Some(
        parts
            .into_iter()
            .filter_map(|p| p.text)
            .collect::<Vec<_>>()
            .join(""),
    )
}

/// The wire shape of a parsed request. A member of an unexpected shape gives no names or
/// sections (the contract check, not this, decides whether such a request is forwarded).
pub fn shape(api: ApiKind, req: &ParsedRequest) -> WireShape {
    let mut out = WireShape::default();
    if let Some(raw) = req.raw("tools") {
        let tools = serde_json::from_str::<Vec<Tool<'_>>>(raw).unwrap_or_default();
        let mut names = Vec::new();
        for t in tools {
            if names.len() == MAX_TOOLS {
                out.tools_truncated = true;
                break;
            }
            let name = t
                .function
                .and_then(|f| f.name)
                .or(t.name)
                .unwrap_or_default();
            let (n, was_cut) = cut(&name, MAX_NAME_BYTES);
            out.tools_truncated |= was_cut;
            names.push(n.to_owned());
        }
        out.tools = Some(names);
    }
    let mut texts = Vec::new();
    match api {
        ApiKind::OpenAiChat => {
            if let Some(raw) = req.raw("messages") {
                for m in serde_json::from_str::<Vec<Msg<'_>>>(raw).unwrap_or_default() {
                    if m.role.as_deref() == Some("system")
                        && let Some(t) = m.content.and_then(content_text)
                    {
                        texts.push(t);
                    }
                }
            }
        }
        ApiKind::AnthropicMessages => {
            if let Some(raw) = req.raw("system")
                && let Ok(v) = serde_json::from_str::<&RawValue>(raw)
                && let Some(t) = content_text(v)
            {
                texts.push(t);
            }
        }
    }
    for t in &texts {
        for section in sections(t) {
            if out.system.len() == MAX_SECTIONS {
                out.system_truncated = true;
                return out;
            }
            // Only a Markdown heading is named; a first line of prose is body, and stays out.
            let first = section.lines().next().unwrap_or("");
            let first = if first.starts_with('#') { first } else { "" };
            let (heading, _) = cut(first, MAX_HEADING_BYTES);
            let mut paragraphs = Vec::new();
            for p in section.split("\n\n") {
                if paragraphs.len() == MAX_PARAGRAPHS {
                    out.system_truncated = true;
                    break;
                }
                paragraphs.push(text_digest(p));
            }
            out.system.push(SystemSection {
                heading: heading.to_owned(),
                bytes: section.len() as u64,
                digest: text_digest(section),
                paragraphs,
            });
        }
    }
    out
}

/// `text` split before every `\n\n#`: each piece is one section (without the separating blank
/// line), as the Harness joined them.
fn sections(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut from = 0;
    while let Some(i) = text[from..].find("\n\n#") {
        let at = from + i;
        out.push(&text[start..at]);
        start = at + 2;
        from = start;
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parse(v: serde_json::Value) -> ParsedRequest {
        ParsedRequest::parse(Bytes::from(v.to_string())).expect("json")
    }

    #[test]
    fn tools_and_sections_of_an_openai_request() {
        let probe = "## Plan Lattice route probe\n\nCall lattice_route first.";
        let system = format!("# Persona\n\nYou are dsh.\n\n{probe}\n\n## Tail\nx");
        let r = parse(serde_json::json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "## not a system section"},
            ],
            "tools": [
                {"type": "function", "function": {"name": "read", "parameters": {}}},
                {"type": "function", "function": {"name": "lattice_route"}},
            ],
        }));
        let s = shape(ApiKind::OpenAiChat, &r);
        assert_eq!(
            s.tools,
            Some(vec!["read".to_owned(), "lattice_route".to_owned()])
        );
        let headings: Vec<_> = s.system.iter().map(|x| x.heading.as_str()).collect();
        assert_eq!(
            headings,
            ["# Persona", "## Plan Lattice route probe", "## Tail"]
        );
        assert_eq!(s.system[1].digest, text_digest(probe));
        assert_eq!(s.system[1].bytes, probe.len() as u64);
        assert_eq!(
            s.system[1].paragraphs,
            [
                text_digest("## Plan Lattice route probe"),
                text_digest("Call lattice_route first.")
            ]
        );
        // The bodies are not in the record.
        let json = serde_json::to_string(&s).expect("json");
        assert!(!json.contains("You are dsh"), "{json}");
        assert!(!s.tools_truncated && !s.system_truncated);
    }

    #[test]
    fn no_tools_member_is_none_and_parts_are_joined() {
        let r = parse(serde_json::json!({
            "messages": [{"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        }));
        let s = shape(ApiKind::OpenAiChat, &r);
        assert_eq!(s.tools, None);
        assert_eq!(s.system.len(), 1);
        assert_eq!(s.system[0].digest, text_digest("ab"));
        assert_eq!(s.system[0].heading, "", "prose is not a heading");
        let a = parse(serde_json::json!({"system": "## S\n\nx", "tools": [{"name": "t"}]}));
        let s = shape(ApiKind::AnthropicMessages, &a);
        assert_eq!(s.tools, Some(vec!["t".to_owned()]));
        assert_eq!(s.system[0].heading, "## S");
    }

    #[test]
    fn a_hostile_request_gets_a_bounded_record() {
        let tools: Vec<_> = (0..MAX_TOOLS + 10)
            .map(|i| serde_json::json!({"function": {"name": format!("t{i}{}", "é".repeat(100))}}))
            .collect();
        let system = (0..MAX_SECTIONS + 5)
            .map(|i| format!("# {i}{}", "\n\np".repeat(MAX_PARAGRAPHS + 3)))
            .collect::<Vec<_>>()
            .join("\n\n");
        let r = parse(serde_json::json!({
            "messages": [{"role": "system", "content": system}],
            "tools": tools,
        }));
        let s = shape(ApiKind::OpenAiChat, &r);
        let names = s.tools.as_ref().expect("tools");
        assert_eq!(names.len(), MAX_TOOLS);
        assert!(names.iter().all(|n| n.len() <= MAX_NAME_BYTES));
        assert!(s.tools_truncated);
        assert_eq!(s.system.len(), MAX_SECTIONS);
        assert!(
            s.system
                .iter()
                .all(|x| x.paragraphs.len() <= MAX_PARAGRAPHS)
        );
        assert!(s.system_truncated);
    }
}
