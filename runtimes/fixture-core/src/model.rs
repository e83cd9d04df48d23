//! The fixture model: a pure, deterministic function from an OpenAI chat request to the
//! assistant's answer and honest token counts. The controller's embedded fixture upstream wraps
//! it in HTTP; the fixture agent speaks its answer format (`crate::answer`).
//!
//! What it reads from the request: the system message's `fixture-skill: <f>`,
//! `fixture-edits-per-turn: <n>` and `fixture-plan: yes` lines; the first user message holding a
//! ```` ```fixture ```` block (the task); user messages `fixture-answer <id>:\n<text>` (oracle
//! answers); the number of earlier assistant messages (where it is in the task). As an oracle
//! (a system message with a brief after [`ORACLE_BRIEF_MARKER`]), it answers the last user
//! message from the brief's `[[qa]]` by exact match.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::answer::{Answer, Edit, render};
use crate::task::{FixtureTask, parse_prompt};

/// Token usage the fixture model reports, computed honestly from the request and answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// ⌈bytes / 4⌉ of each message's text plus 4 per message, summed over the request.
    pub prompt_tokens: u64,
    /// ⌈bytes / 4⌉ of the answer's content.
    pub completion_tokens: u64,
}

impl Usage {
    /// Prompt plus completion tokens.
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// The fixture model's reply to one chat request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelAnswer {
    /// The assistant message (in the answer format of [`crate::answer`]).
    pub content: String,
    /// Its usage.
    pub usage: Usage,
}

/// A chat request the fixture model cannot answer (a malformed request, not a model failure).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FixtureModelError {
    /// The body has no `messages` array.
    #[error("request has no `messages` array")]
    NoMessages,
    /// The message at this index has no text content.
    #[error("message {0} has no text content")]
    BadMessage(usize),
}

struct Message {
    role: String,
    text: String,
}

fn messages(request: &Value) -> Result<Vec<Message>, FixtureModelError> {
    let list = request
        .get("messages")
        .and_then(Value::as_array)
        .ok_or(FixtureModelError::NoMessages)?;
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or(FixtureModelError::BadMessage(i))?;
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            Some(Value::Null) | None => String::new(),
            Some(_) => return Err(FixtureModelError::BadMessage(i)),
        };
        out.push(Message {
            role: role.to_owned(),
            text,
        });
    }
    Ok(out)
}

fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// Whether a model of `skill` gets requirement `id` of `task` right. Monotone in `skill`.
pub fn gets_right(task: &str, id: &str, skill: f64) -> bool {
    let mut h = Sha256::new();
    h.update(task.as_bytes());
    h.update([0u8]);
    h.update(id.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    let unit = u64::from_be_bytes(first) as f64 / 18_446_744_073_709_551_616.0;
    unit < skill
}

struct Settings {
    skill: f64,
    per_turn: usize,
    plan: bool,
}

fn settings(msgs: &[Message]) -> Settings {
    let mut s = Settings {
        skill: 0.0,
        per_turn: 2,
        plan: false,
    };
    for m in msgs.iter().filter(|m| m.role == "system") {
        for line in m.text.lines() {
            if let Some(v) = line.strip_prefix("fixture-skill:") {
                s.skill = v.trim().parse().unwrap_or(0.0);
            } else if let Some(v) = line.strip_prefix("fixture-edits-per-turn:") {
                s.per_turn = v.trim().parse().unwrap_or(2).max(1);
            } else if let Some(v) = line.strip_prefix("fixture-plan:") {
                s.plan = v.trim() == "yes";
            }
        }
    }
    s
}

/// Oracle answers the conversation carries, by requirement id.
fn oracle_answers(msgs: &[Message]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for m in msgs.iter().filter(|m| m.role == "user") {
        if let Some(rest) = m.text.strip_prefix("fixture-answer ")
            && let Some((id, body)) = rest.split_once(":\n")
        {
            out.insert(id.trim().to_owned(), body.to_owned());
        }
    }
    out
}

fn task_of(msgs: &[Message]) -> Option<FixtureTask> {
    msgs.iter()
        .filter(|m| m.role == "user")
        .find_map(|m| parse_prompt(&m.text).ok())
}

/// The line after which an oracle's system message carries its brief (the controller's oracle
/// prompt owns it: `eval_controller`'s `run::attempt::oracle::ORACLE_BRIEF_MARKER`, which a test
/// there keeps equal to this one).
pub const ORACLE_BRIEF_MARKER: &str = "--- brief ---\n";

/// As an oracle: a system message holding a brief in the scripted-oracle format (`[[qa]]`
/// `question`/`answer`) answers the last user message by exact match.
fn oracle_reply(msgs: &[Message]) -> Option<String> {
    let brief = msgs
        .iter()
        .filter(|m| m.role == "system")
        .find_map(|m| m.text.split_once(ORACLE_BRIEF_MARKER).map(|(_, b)| b))?;
    let question = msgs.iter().rev().find(|m| m.role == "user")?.text.trim();
    let table: toml::Table = toml::from_str(brief).ok()?;
    let answer = table
        .get("qa")
        .and_then(|q| q.as_array())
        .into_iter()
        .flatten()
        .find(|qa| qa.get("question").and_then(|q| q.as_str()) == Some(question))
        .and_then(|qa| qa.get("answer").and_then(|a| a.as_str()))
        .unwrap_or("No further information.");
    Some(answer.to_owned())
}

/// The whole fixture model.
pub fn respond(request: &Value) -> Result<ModelAnswer, FixtureModelError> {
    let msgs = messages(request)?;
    let s = settings(&msgs);
    let assistant_turns = msgs.iter().filter(|m| m.role == "assistant").count();
    let task = task_of(&msgs);
    let oracle = task.is_none().then(|| oracle_reply(&msgs)).flatten();
    let content = match task {
        None => oracle.unwrap_or_else(|| {
            render(
                &Answer {
                    edits: Vec::new(),
                    done: true,
                },
                None,
            )
        }),
        Some(task) if s.plan && assistant_turns == 0 => {
            let plan = format!(
                "{} requirement(s) in {}",
                task.requirements.len(),
                task.task
            );
            render(&Answer::default(), Some(&plan))
        }
        Some(task) => {
            let turn = assistant_turns - usize::from(s.plan);
            let answers = oracle_answers(&msgs);
            let start = turn.saturating_mul(s.per_turn);
            let end = start.saturating_add(s.per_turn);
            let mut answer = Answer {
                edits: Vec::new(),
                done: end >= task.requirements.len(),
            };
            for r in task.requirements.iter().skip(start).take(s.per_turn) {
                let content = if r.ambiguous {
                    Some(answers.get(&r.id).unwrap_or(&r.content).clone())
                } else if gets_right(&task.task, &r.id, s.skill) {
                    Some(r.content.clone())
                } else {
                    r.wrong.clone()
                };
                if let Some(content) = content {
                    answer.edits.push(Edit {
                        path: r.path.clone(),
                        content,
                    });
                }
            }
            render(&answer, None)
        }
    };
    let prompt_tokens = msgs.iter().map(|m| tokens(m.text.len()) + 4).sum();
    let usage = Usage {
        prompt_tokens,
        completion_tokens: tokens(content.len()),
    };
    Ok(ModelAnswer { content, usage })
}

fn usage_json(u: &Usage) -> Value {
    json!({"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total()})
}

/// A non-streaming OpenAI `chat.completion` body for `answer`.
pub fn chat_completion_json(model: &str, id: &str, answer: &ModelAnswer) -> Value {
    json!({
        "id": id, "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.content}, "finish_reason": "stop"}],
        "usage": usage_json(&answer.usage),
    })
}

/// The SSE events (each `data: …\n\n`, ending with `data: [DONE]\n\n`) of a streamed answer; the
/// final usage chunk only when the client asked for it (`stream_options.include_usage`).
pub fn sse_events(model: &str, id: &str, answer: &ModelAnswer, include_usage: bool) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    // Several content chunks so that clients really reassemble a stream.
    let mut rest = answer.content.as_str();
    while !rest.is_empty() {
        let mut cut = rest.len().min(64);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (head, tail) = rest.split_at(cut);
        events.push(chunk(json!({"content": head}), Value::Null));
        rest = tail;
    }
    events.push(chunk(json!({}), json!("stop")));
    if include_usage {
        events.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
                           "choices": [], "usage": usage_json(&answer.usage)}),
        );
    }
    let mut out: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    out.push("data: [DONE]\n\n".to_owned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::parse;

    #[test]
    fn as_an_oracle_it_answers_from_the_brief_by_exact_match() {
        let brief = "[[qa]]\nquestion = \"which?\"\nanswer = \"this one\"\n";
        let req = |q: &str| {
            json!({"messages": [
                {"role": "system", "content": format!("You are the oracle.\n{ORACLE_BRIEF_MARKER}{brief}")},
                {"role": "user", "content": q},
            ]})
        };
        assert_eq!(respond(&req("which?")).unwrap().content, "this one");
        assert_eq!(
            respond(&req("what?")).unwrap().content,
            "No further information."
        );
        // Without a brief it stays the agent's model.
        let plain = json!({"messages": [{"role": "user", "content": "which?"}]});
        assert_ne!(respond(&plain).unwrap().content, "this one");
    }

    const PROMPT: &str = "Fix it.\n```fixture\ntask = \"demo\"\n[[requirement]]\nid = \"r1\"\npath = \"a.txt\"\ncontent = \"good a\\n\"\nwrong = \"bad a\\n\"\n[[requirement]]\nid = \"r2\"\npath = \"b.txt\"\ncontent = \"good b\\n\"\n[[requirement]]\nid = \"r3\"\npath = \"c.txt\"\nambiguous = true\nquestion = \"which?\"\ncontent = \"guess\\n\"\n```\n";

    fn req(skill: f64, extra: &[(&str, &str)]) -> Value {
        let mut msgs = vec![
            json!({"role":"system","content":format!("fixture-skill: {skill}\nfixture-edits-per-turn: 2")}),
            json!({"role":"user","content":PROMPT}),
        ];
        for (role, text) in extra {
            msgs.push(json!({"role": role, "content": text}));
        }
        json!({"model":"m","messages":msgs})
    }

    #[test]
    fn skill_decides_and_turns_progress() {
        let full = respond(&req(1.0, &[])).unwrap();
        let a = parse(&full.content).unwrap();
        assert_eq!(a.edits.len(), 2);
        assert_eq!(a.edits[0].content, "good a\n");
        assert!(!a.done);
        let none = parse(&respond(&req(0.0, &[])).unwrap().content).unwrap();
        assert_eq!(none.edits[0].content, "bad a\n");
        assert_eq!(none.edits.len(), 1, "r2 has no wrong content");
        // Second turn: r3 (ambiguous) with and without the oracle's answer.
        let second = respond(&req(
            1.0,
            &[("assistant", &full.content), ("user", "continue")],
        ))
        .unwrap();
        let b = parse(&second.content).unwrap();
        assert!(b.done);
        assert_eq!(b.edits[0].content, "guess\n");
        let told = respond(&req(
            1.0,
            &[
                ("user", "fixture-answer r3:\nright\n"),
                ("assistant", &full.content),
            ],
        ))
        .unwrap();
        assert_eq!(parse(&told.content).unwrap().edits[0].content, "right\n");
    }

    #[test]
    fn usage_is_honest_and_deterministic() {
        let r = req(0.5, &[]);
        let a = respond(&r).unwrap();
        assert_eq!(a, respond(&r).unwrap());
        assert_eq!(
            a.usage.completion_tokens,
            (a.content.len() as u64).div_ceil(4)
        );
        let sys = "fixture-skill: 0.5\nfixture-edits-per-turn: 2";
        let expect = (sys.len() as u64).div_ceil(4) + 4 + (PROMPT.len() as u64).div_ceil(4) + 4;
        assert_eq!(a.usage.prompt_tokens, expect);
    }

    #[test]
    fn monotone_in_skill() {
        for id in ["a", "b", "c", "d", "e", "f"] {
            if gets_right("t", id, 0.3) {
                assert!(gets_right("t", id, 0.31));
            }
        }
    }

    #[test]
    fn sse_reassembles() {
        let a = respond(&req(1.0, &[])).unwrap();
        let events = sse_events("m", "x", &a, true);
        let mut text = String::new();
        let mut usage = None;
        for e in &events {
            let data = e.strip_prefix("data: ").unwrap().trim_end();
            if data == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(data).unwrap();
            if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
                text.push_str(c);
            }
            if !v["usage"].is_null() {
                usage = Some(v["usage"]["total_tokens"].as_u64().unwrap());
            }
        }
        assert_eq!(text, a.content);
        assert_eq!(usage, Some(a.usage.total()));
    }
}
