//! The oracle: scripted answers or a model asked through the proxy's `oracle` role.

use super::DockerExecutor;
use super::control::{AttemptControl, Control};
use super::images::ArmImage;
use crate::{AttemptReport, AttemptSpec};
use eval_core::fault::FaultCode;
use eval_protocols::TaskBundle;
use eval_protocols::protocol::ModelContract;
use eval_protocols::task::{OracleConstraints, ReplyFormat, StatefulOracle, dotted};
use eval_runtimes::ImageId;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Why the oracle model gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum OracleFailure {
    /// The upstream answered 4xx (not 429): the question itself was refused (the agent's doing).
    Refused(String),
    /// Transport, 5xx/429, a reply without text, the proxy not running: the service's doing.
    Unavailable(String),
}

impl std::fmt::Display for OracleFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OracleFailure::Refused(w) | OracleFailure::Unavailable(w) => f.write_str(w),
        }
    }
}

/// How to ask the oracle model: a request body without messages, and the task's brief.
#[derive(Clone)]
pub(super) struct OracleAsk {
    pub(super) template: Value,
    pub(super) anthropic: bool,
    pub(super) brief: String,
    /// Set for a stateful oracle (`answered_by = "stateful"`): its system message and reply
    /// format; the conversation itself is the attempt's ([`super::control::AttemptControl`]).
    pub(super) stateful: Option<Stateful>,
}

/// A stateful oracle of one task, as the attempt asks it.
#[derive(Clone, Debug)]
pub(super) struct Stateful {
    /// The whole system message: the frozen prompt, the heading, the brief (ICAE's
    /// `build_system_prompt`).
    pub(super) system: String,
    pub(super) spec: StatefulOracle,
}

/// What a stateful oracle's reply gave: the answer for the agent, the recorded field, and
/// why the reply was malformed (then the answer is the task's fallback).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ParsedReply {
    pub(super) answer: String,
    pub(super) recorded: Option<Value>,
    pub(super) malformed: Option<String>,
    /// The answer is the fallback: the reply was malformed.
    pub(super) fallback: bool,
}

/// ICAE's system message (`user_agent.py`, `build_system_prompt`): the prompt, a blank line,
/// the heading, the brief (fenced when the task says), a final newline.
pub(super) fn stateful_system(prompt: &str, brief: &str, st: &StatefulOracle) -> String {
    match &st.brief_fence {
        Some(info) => format!(
            "{prompt}\n\n{}\n```{info}\n{brief}\n```\n",
            st.brief_heading
        ),
        None => format!("{prompt}\n\n{}\n{brief}\n", st.brief_heading),
    }
}

/// Reads a stateful oracle's reply as its format says. `json` follows ICAE's `parse_reply`: the
/// text from the first `{` to the last `}` (so a fenced or prefixed object still parses) must
/// be a JSON object. Its reply field must be a string; without it the reply is malformed and the
/// agent gets the fallback. A missing record field is recorded as absent (ICAE reads a missing
/// `triggers_hit` as none) and noted, the reply still passes.
pub(super) fn parse_reply(text: &str, st: &StatefulOracle) -> ParsedReply {
    let fallback = |why: String| ParsedReply {
        answer: st.fallback_answer.clone(),
        recorded: None,
        malformed: Some(why),
        fallback: true,
    };
    if st.reply == ReplyFormat::Text {
        return ParsedReply {
            answer: text.to_owned(),
            recorded: None,
            malformed: None,
            fallback: false,
        };
    }
    let object = match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if a < b => text.get(a..=b).unwrap_or(text),
        _ => return fallback("the reply holds no JSON object".to_owned()),
    };
    let v = match serde_json::from_str::<Value>(object) {
        Ok(v) if v.is_object() => v,
        Ok(_) => return fallback("the reply is JSON but not an object".to_owned()),
        Err(e) => return fallback(format!("the reply is not JSON: {e}")),
    };
    let reply_field = st.reply_field.as_deref().unwrap_or("reply");
    let Some(answer) = dotted(&v, reply_field).and_then(Value::as_str) else {
        return fallback(format!("the reply has no string {reply_field:?}"));
    };
    let (recorded, malformed) = match st.record_field.as_deref() {
        None => (None, None),
        Some(f) => match dotted(&v, f) {
            Some(r) => (Some(r.clone()), None),
            None => (
                None,
                Some(format!("the reply has no {f:?} (recorded as absent)")),
            ),
        },
    };
    ParsedReply {
        answer: answer.to_owned(),
        recorded,
        malformed,
        fallback: false,
    }
}

/// The constraint ids no recorded field names, in the brief's order: v0.4's
/// `criticalRequirementsMissed` (ICAE `main.py`, `_calc_repo_stats`: `missed = [c for c in
/// all_constraint_ids if c not in triggered]`). A recorded value counts as the ids it holds when
/// it is an array of strings (ICAE's `triggers_hit`); anything else names none.
pub(super) fn missed_constraints(ids: &[String], recorded: &[Value]) -> Vec<String> {
    let triggered: std::collections::BTreeSet<&str> = recorded
        .iter()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    ids.iter()
        .filter(|id| !triggered.contains(id.as_str()))
        .cloned()
        .collect()
}

/// One reply's record field as kept (docs/oracle.md, "The oracle's own record"): the model
/// that fills it reads the agent's question verbatim, so an injected question can make it name
/// anything. Kept: the strings that are ids of the brief, each once, at most `cap`, in the
/// reply's order; the rest is returned as given, to be recorded as dropped. A value that is not
/// an array keeps nothing (it named no id before either).
pub(super) fn guard_triggers(recorded: &Value, ids: &[String], cap: u32) -> (Value, Vec<Value>) {
    let Some(items) = recorded.as_array() else {
        return (json!([]), vec![recorded.clone()]);
    };
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut kept: Vec<Value> = Vec::new();
    let mut dropped = Vec::new();
    for item in items {
        let of_brief = item.as_str().is_some_and(|s| ids.iter().any(|id| id == s));
        if of_brief && !kept.contains(item) && kept.len() < cap {
            kept.push(item.clone());
        } else {
            dropped.push(item.clone());
        }
    }
    (Value::Array(kept), dropped)
}

/// The words of a run [`brief_overlap`] compares.
const QUOTE_RUN: usize = 8;

/// The share of the brief's distinct runs of [`QUOTE_RUN`] words (lowercased, split at anything
/// not alphanumeric, so JSON punctuation does not matter) that `reply` contains: 0 for an
/// answer of its own words, 1 for the brief recited. A brief shorter than a run is one run.
pub(super) fn brief_overlap(brief: &str, reply: &str) -> f64 {
    let words = |t: &str| -> Vec<String> {
        t.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let (b, r) = (words(brief), words(reply));
    let n = QUOTE_RUN.min(b.len());
    if n == 0 {
        return 0.0;
    }
    let runs: std::collections::BTreeSet<&[String]> = b.windows(n).collect();
    let quoted: std::collections::BTreeSet<&[String]> =
        r.windows(n).filter(|w| runs.contains(w)).collect();
    quoted.len() as f64 / runs.len() as f64
}

/// The attempt's oracle record (`record.json`, docs/oracle.md): every answered question's
/// `clarification` entry as recorded, and, with `[oracle.constraints]`, the brief's ids, those no
/// entry's `recorded` array names, and those without the scaffolding. One function for a run
/// (`AttemptControl::oracle_record`, from the entries it appended) and `eval regrade` (from the
/// run's ledger, `fn regrade_record`), so a regrade's grader reads the bytes the original read.
pub(crate) fn oracle_record(
    questions: &[eval_runlog::events::Clarification],
    constraints: Option<&(Vec<String>, OracleConstraints)>,
) -> Value {
    let mut record = json!({"format": 1, "questions": questions});
    if let Some((ids, c)) = constraints {
        let recorded: Vec<Value> = questions
            .iter()
            .filter_map(|q| q.recorded.clone())
            .collect();
        let missed = missed_constraints(ids, &recorded);
        let substantive: Vec<&String> = missed.iter().filter(|id| !c.is_scaffolding(id)).collect();
        record["constraints"] =
            json!({"ids": ids, "missed": missed, "missed_substantive": substantive});
    }
    record
}

/// The oracle record `eval regrade` gives a grader of a task declaring `grader_reads_record`:
/// [`oracle_record`] of the attempt's `clarification` entries in the run's ledger, with the
/// constraints read from the verified input copy's brief (`task_dir`) as a run reads them
/// (`attempt_control`: only a model's brief lists constraints). `None`: the task's grader reads
/// no record.
pub(crate) fn regrade_record(
    task: &TaskBundle,
    task_dir: &Path,
    questions: &[eval_runlog::events::Clarification],
) -> Result<Option<Value>, String> {
    let Some(o) = task.spec.oracle.as_ref().filter(|o| o.grader_reads_record) else {
        return Ok(None);
    };
    let constraints = match &o.constraints {
        Some(c) if o.answered_by != eval_protocols::task::OracleAnswerer::Scripted => {
            let brief = std::fs::read_to_string(task_dir.join(&o.answers))
                .map_err(|e| format!("{}: {e}", o.answers))?;
            let ids = c.ids(&brief).map_err(|e| format!("{}: {e}", o.answers))?;
            Some((ids, c.clone()))
        }
        _ => None,
    };
    Ok(Some(oracle_record(questions, constraints.as_ref())))
}

/// The oracle metrics of an attempt (`eval_core::budget::ORACLE_METRICS`): v0.4's raw count of
/// missed constraints, and the count without the task's declared scaffolding ids (ICAE's briefs
/// list architecture and harness ids, e.g. `ARCH001`, `HARNESS001`, `TC_*`, among the hidden
/// constraints; a question can hardly be expected to "trigger" them, so v0.4's count penalises
/// every arm for them alike and only the substantive count measures asking).
pub(super) fn oracle_metrics(
    ids: &[String],
    c: &OracleConstraints,
    recorded: &[Value],
) -> BTreeMap<String, f64> {
    let missed = missed_constraints(ids, recorded);
    let substantive = missed.iter().filter(|id| !c.is_scaffolding(id)).count();
    BTreeMap::from([
        ("oracle_constraints_missed".to_owned(), missed.len() as f64),
        (
            "oracle_constraints_missed_substantive".to_owned(),
            substantive as f64,
        ),
    ])
}

/// The line after which the oracle's system message carries the brief. Production owns it; the
/// fixture model (what `eval demo` answers with) must use the same line, which a test checks.
pub(crate) const ORACLE_BRIEF_MARKER: &str = "--- brief ---\n";

/// The oracle model's system prompt; the brief (the task's oracle file) follows the marker.
const ORACLE_SYSTEM: &str = "You are the oracle of an evaluation task. Answer the agent's clarifying question briefly, from the brief below only; if the brief does not say, answer \"No further information.\"\n";

/// The oracle request: the template with the system message and the conversation (the
/// user/assistant turns, the new question last), in the API's shape.
pub(super) fn oracle_body(o: &OracleAsk, system: &str, turns: &[Value]) -> Value {
    let mut body = o.template.clone();
    if o.anthropic {
        body["system"] = json!(system);
        body["messages"] = json!(turns);
    } else {
        let mut messages = vec![json!({"role": "system", "content": system})];
        messages.extend(turns.iter().cloned());
        body["messages"] = json!(messages);
    }
    body
}

impl Control {
    /// Asks the oracle model through the proxy, in the attempt's `oracle` role, one question
    /// alone (`answered_by = "model"`).
    pub(super) async fn ask_model(
        &self,
        id: &str,
        o: &OracleAsk,
        question: &str,
    ) -> Result<String, OracleFailure> {
        let system = format!("{ORACLE_SYSTEM}{ORACLE_BRIEF_MARKER}{}", o.brief);
        let body = oracle_body(o, &system, &[json!({"role": "user", "content": question})]);
        self.oracle_request(id, o, &body).await
    }

    /// Sends one oracle request through the proxy and reads its answer's text.
    pub(super) async fn oracle_request(
        &self,
        id: &str,
        o: &OracleAsk,
        body: &Value,
    ) -> Result<String, OracleFailure> {
        use OracleFailure::Unavailable;
        // A poisoned slot is treated as no proxy: the question is answered as unavailable.
        let proxy = self
            .proxy
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
            .ok_or_else(|| Unavailable("the proxy is not running".to_owned()))?;
        let bytes = serde_json::to_vec(body).map_err(|e| Unavailable(e.to_string()))?;
        let mut headers = http::HeaderMap::new();
        if o.anthropic {
            headers.insert(
                "anthropic-version",
                http::HeaderValue::from_static("2023-06-01"),
            );
        }
        let reply = proxy
            .oracle_call(id, headers, bytes.into())
            .await
            .map_err(|e| Unavailable(e.to_string()))?;
        let status = reply.status;
        if let Some(outcome) = reply.refused_by_proxy {
            // The proxy's own refusal (the oracle role's budget or wall time, the contract):
            // caused by the questions, never an outage of the oracle service.
            return Err(OracleFailure::Refused(format!(
                "the proxy refused the oracle call ({}, {status})",
                outcome.as_str()
            )));
        }
        if status.is_client_error() && status != http::StatusCode::TOO_MANY_REQUESTS {
            return Err(OracleFailure::Refused(format!(
                "the oracle model refused the question ({status})"
            )));
        }
        if !status.is_success() {
            return Err(Unavailable(format!("the oracle model answered {status}")));
        }
        // A 2xx answer without text (a refusal, `content: null`) comes from a healthy service:
        // the question drew it.
        answer_text(&reply.body).ok_or_else(|| {
            OracleFailure::Refused("the oracle model's reply has no text".to_owned())
        })
    }
}

impl DockerExecutor {
    /// The attempt's control-plane state: its expected attestation and its oracle (scripted
    /// answers from the task's hidden files, never mounted for the agent, or the oracle model).
    pub(super) fn attempt_control(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        arm: &ArmImage,
        image: &ImageId,
        task_dir: &Path,
    ) -> Result<Arc<AttemptControl>, Box<AttemptReport>> {
        let mut answers = BTreeMap::new();
        let mut max_questions = 0;
        let mut oracle = None;
        let mut catch_all = eval_protocols::task::DEFAULT_CATCH_ALL.to_owned();
        let mut constraints = None;
        if let Some(o) = &task.spec.oracle {
            let suite_cap = self.max_oracle.get(&spec.slot.suite).copied().unwrap_or(0);
            max_questions = o.max_questions.min(suite_cap);
            // The task bundle is frozen (and verified): a file of it that cannot be read is the
            // controller's problem, never silently "no brief".
            let read = |rel: &str| {
                std::fs::read_to_string(task_dir.join(rel)).map_err(|e| {
                    Box::new(AttemptReport::infra(
                        FaultCode::ControllerError,
                        format!("{rel}: {e}"),
                    ))
                })
            };
            let text = read(&o.answers);
            if o.answered_by != eval_protocols::task::OracleAnswerer::Scripted {
                let Some((_, template, anthropic)) = &self.oracle else {
                    return Err(Box::new(AttemptReport::infra(
                        FaultCode::ControllerError,
                        "the task's oracle is a model but the protocol names no [models.oracle]",
                    )));
                };
                let brief = text?;
                let stateful = match &o.stateful {
                    Some(st) => Some(Stateful {
                        system: stateful_system(&read(&st.system_prompt)?, &brief, st),
                        spec: st.clone(),
                    }),
                    None => None,
                };
                if let Some(c) = &o.constraints {
                    let ids = c.ids(&brief).map_err(|e| {
                        Box::new(AttemptReport::infra(
                            FaultCode::ControllerError,
                            format!("{}: {e}", o.answers),
                        ))
                    })?;
                    constraints = Some((ids, c.clone()));
                }
                oracle = Some(OracleAsk {
                    template: template.clone(),
                    anthropic: *anthropic,
                    brief,
                    stateful,
                });
            } else {
                o.catch_all().clone_into(&mut catch_all);
                // The task bundle is frozen: an answers file that cannot be read or parsed is the
                // controller's problem, never silently "no answers".
                answers = scripted_answers(&text?).map_err(|e| {
                    Box::new(AttemptReport::infra(
                        FaultCode::ControllerError,
                        format!("{}: {e}", o.answers),
                    ))
                })?;
            }
        }
        let mut ctl = AttemptControl::new(
            image.0.clone(),
            arm.expected.clone(),
            answers,
            oracle,
            max_questions,
        );
        ctl.catch_all = catch_all;
        ctl.constraints = constraints;
        ctl.guard = self
            .oracle_guard
            .get(&spec.slot.suite)
            .cloned()
            .unwrap_or_default();
        Ok(Arc::new(ctl))
    }
}

/// The `[[qa]]` question → answer pairs of a scripted oracle file; a question it does not list
/// gets the task's `catch_all` answer.
fn scripted_answers(text: &str) -> Result<BTreeMap<String, String>, toml::de::Error> {
    let mut answers = BTreeMap::new();
    let v = toml::from_str::<toml::Table>(text)?;
    for item in v.get("qa").and_then(|q| q.as_array()).into_iter().flatten() {
        if let (Some(q), Some(a)) = (
            item.get("question").and_then(|x| x.as_str()),
            item.get("answer").and_then(|x| x.as_str()),
        ) {
            answers.insert(q.to_owned(), a.to_owned());
        }
    }
    Ok(answers)
}

/// The oracle request a contract allows: its model, every fixed parameter (and a bound for a
/// required one), and streaming as it demands; the messages are added per question.
pub(super) fn oracle_template(m: &ModelContract) -> Value {
    let mut body = json!({"model": m.model});
    for (name, b) in &m.params {
        let v = b.equals.or(if b.required { b.max.or(b.min) } else { None });
        if let Some(v) = v {
            body[name] = if v.fract() == 0.0 && v.abs() < 1e15 {
                json!(v as i64)
            } else {
                json!(v)
            };
        }
    }
    let anthropic = m.api == eval_core::contract::ApiKind::AnthropicMessages;
    if anthropic && body.get("max_tokens").is_none() {
        body["max_tokens"] = json!(1024);
    }
    if m.stream == Some(true) {
        body["stream"] = json!(true);
        if m.stream_usage && !anthropic {
            body["stream_options"] = json!({"include_usage": true});
        }
    }
    body
}

/// The text of a model's answer: a JSON body (OpenAI `choices[0].message.content`, Anthropic
/// `content[].text`) or an SSE stream (their delta forms).
pub(super) fn answer_text(body: &[u8]) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(t) = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
        {
            return Some(t.to_owned());
        }
        return v.get("content").and_then(Value::as_array).map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        });
    }
    // The proxy's parser: the SSE specification's framing (a `data:` field over several lines
    // is one value joined by `\n`; CR, LF and CRLF all end a line), as the proxy meters it.
    let mut parser = eval_proxy::sse::SseParser::new();
    let mut events = parser.push(body);
    events.extend(parser.finish());
    let mut out = String::new();
    let mut any = false;
    for event in events {
        let Some(v) = event
            .data
            .and_then(|d| serde_json::from_str::<Value>(&d).ok())
        else {
            continue;
        };
        let piece = v
            .pointer("/choices/0/delta/content")
            .or_else(|| v.pointer("/delta/text"))
            .and_then(Value::as_str);
        if let Some(t) = piece {
            out.push_str(t);
            any = true;
        }
    }
    any.then_some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_scripted_oracle_file_that_does_not_parse_is_an_error_not_silence() {
        let ok = scripted_answers("[[qa]]\nquestion = \"q\"\nanswer = \"a\"\n").unwrap();
        assert_eq!(ok.get("q").map(String::as_str), Some("a"));
        assert!(scripted_answers("[[qa]\nquestion = ").is_err());
    }

    #[test]
    fn oracle_answers_are_read_from_json_and_streams() {
        let json_body = br#"{"choices":[{"message":{"content":"yes"}}]}"#;
        assert_eq!(answer_text(json_body).as_deref(), Some("yes"));
        let sse = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a \"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(answer_text(sse).as_deref(), Some("a b"));
        let anthropic = br#"{"content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}"#;
        assert_eq!(answer_text(anthropic).as_deref(), Some("xy"));
        assert_eq!(answer_text(b"data: [DONE]\n\n"), None);
    }

    /// The SSE specification's framing: a `data:` field split over lines is one JSON value, and a
    /// bare CR ends a line as LF does. A line-by-line reader lost both answers' pieces.
    #[test]
    fn oracle_stream_answers_with_multiline_data_and_cr_endings_are_read_whole() {
        let multiline = b"data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"multi\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(answer_text(multiline).as_deref(), Some("multi"));
        let cr = b"event: content_block_delta\rdata: {\"delta\":{\"text\":\"a\"}}\r\rdata: {\"delta\":{\"text\":\"b\"}}\r\r";
        assert_eq!(answer_text(cr).as_deref(), Some("ab"));
    }

    #[test]
    fn oracle_templates_carry_the_contracts_fixed_parameters() {
        let m: ModelContract = toml::from_str(
            "api = \"openai-chat\"\nmodel = \"m\"\nstream = true\nstream_usage = true\n[params.temperature]\nequals = 0.0\nrequired = true\n[params.max_tokens]\nequals = 512.0\n",
        )
        .unwrap();
        let t = oracle_template(&m);
        assert_eq!(t["model"], "m");
        assert_eq!(t["max_tokens"], json!(512));
        assert_eq!(t["stream"], true);
        assert_eq!(t["stream_options"]["include_usage"], true);
    }

    fn icae_like(reply: ReplyFormat) -> StatefulOracle {
        StatefulOracle {
            system_prompt: "hidden/init.md".into(),
            brief_heading: "# Injected oracle_data (your single source of truth)".into(),
            brief_fence: Some("json".into()),
            reply,
            reply_field: (reply == ReplyFormat::Json).then(|| "reply".into()),
            record_field: (reply == ReplyFormat::Json).then(|| "_internal_log.triggers_hit".into()),
            fallback_answer: "FALLBACK".into(),
            max_tokens: None,
        }
    }

    /// ICAE's `build_system_prompt`: `f"{INIT_PROMPT}\n\n# Injected oracle_data (your single
    /// source of truth)\n```json\n{injected}\n```\n"`.
    #[test]
    fn the_stateful_system_message_is_icaes_composition() {
        let st = icae_like(ReplyFormat::Json);
        assert_eq!(
            stateful_system("INIT", "{\"a\": 1}", &st),
            "INIT\n\n# Injected oracle_data (your single source of truth)\n```json\n{\"a\": 1}\n```\n"
        );
        let plain = StatefulOracle {
            brief_fence: None,
            ..st
        };
        assert_eq!(
            stateful_system("P", "B", &plain),
            "P\n\n# Injected oracle_data (your single source of truth)\nB\n"
        );
    }

    /// ICAE's `parse_reply`: the first `{` to the last `}` is the object; only the reply field
    /// is the answer; a reply that is not an object with it falls back (and says why).
    #[test]
    fn stateful_replies_are_parsed_as_icae_does_and_malformed_ones_fall_back() {
        let st = icae_like(ReplyFormat::Json);
        let ok = parse_reply(
            "```json\n{\"_internal_log\": {\"triggers_hit\": [\"C1\"]}, \"reply\": \"Yes.\"}\n```",
            &st,
        );
        assert_eq!(
            ok,
            ParsedReply {
                answer: "Yes.".into(),
                recorded: Some(json!(["C1"])),
                malformed: None,
                fallback: false,
            }
        );
        let no_log = parse_reply("{\"reply\": \"No.\"}", &st);
        assert_eq!((no_log.answer.as_str(), no_log.fallback), ("No.", false));
        assert_eq!(no_log.recorded, None);
        assert!(no_log.malformed.unwrap().contains("triggers_hit"));
        for bad in [
            "plain prose, no object",
            "{not json}",
            "[1, 2]",
            "{\"_internal_log\": {}}",
            "{\"reply\": 42}",
            "} backwards {",
        ] {
            let p = parse_reply(bad, &st);
            assert!(p.fallback, "{bad}");
            assert_eq!(p.answer, "FALLBACK", "{bad}");
            assert_eq!(p.recorded, None, "{bad}");
            assert!(p.malformed.is_some(), "{bad}");
        }
        let text = parse_reply("{\"reply\": \"x\"}", &icae_like(ReplyFormat::Text));
        assert_eq!(text.answer, "{\"reply\": \"x\"}");
        assert!(!text.fallback && text.malformed.is_none());
    }

    /// v0.4's `criticalRequirementsMissed` (ICAE `_calc_repo_stats`) and the substantive count,
    /// by hand: ids C1, C2, ARCH001, TC_1; C1 triggered twice, junk recorded values name nothing.
    #[test]
    fn missed_constraints_are_the_brief_ids_no_question_triggered() {
        let ids: Vec<String> = ["C1", "C2", "ARCH001", "TC_1"].map(String::from).to_vec();
        let c = OracleConstraints {
            list: "hidden_constraints".into(),
            id_field: "constraint_id".into(),
            scaffolding: vec!["ARCH001".into(), "TC_*".into()],
        };
        let recorded = [
            json!(["C1"]),
            json!([]),
            json!("C2"),
            json!({"C2": true}),
            json!(["C1", "UNKNOWN", 7]),
        ];
        assert_eq!(
            missed_constraints(&ids, &recorded),
            ["C2", "ARCH001", "TC_1"]
        );
        let m = oracle_metrics(&ids, &c, &recorded);
        assert_eq!(m["oracle_constraints_missed"], 3.0);
        assert_eq!(m["oracle_constraints_missed_substantive"], 1.0);
        let none = oracle_metrics(&ids, &c, &[]);
        assert_eq!(none["oracle_constraints_missed"], 4.0);
        assert_eq!(none["oracle_constraints_missed_substantive"], 2.0);
        assert_eq!(
            oracle_metrics(&ids, &c, &[json!(["TC_1", "C2", "C1", "ARCH001"])])["oracle_constraints_missed"],
            0.0
        );
    }

    #[test]
    fn the_fixture_oracle_reads_the_brief_after_the_production_marker() {
        // The demo's fixture model finds the brief by this marker; a drift would make every
        // fixture oracle answer "no further information" without failing anything else.
        assert_eq!(
            super::ORACLE_BRIEF_MARKER,
            eval_runtimes::fixture_model::ORACLE_BRIEF_MARKER
        );
        assert!(super::ORACLE_BRIEF_MARKER.ends_with('\n'));
        assert!(!super::ORACLE_SYSTEM.contains(super::ORACLE_BRIEF_MARKER.trim_end()));
    }
}
