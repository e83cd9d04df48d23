//! The oracle: scripted answers or a model asked through the proxy's `oracle` role.

use super::DockerExecutor;
use super::control::{AttemptControl, Control};
use super::images::ArmImage;
use crate::run::{AttemptReport, AttemptSpec};
use eval_core::fault::FaultCode;
use eval_protocols::TaskBundle;
use eval_protocols::protocol::ModelContract;
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
}

/// The line after which the oracle's system message carries the brief. Production owns it; the
/// fixture model (what `eval demo` answers with) must use the same line, which a test checks.
pub(crate) const ORACLE_BRIEF_MARKER: &str = "--- brief ---\n";

/// The oracle model's system prompt; the brief (the task's oracle file) follows the marker.
const ORACLE_SYSTEM: &str = "You are the oracle of an evaluation task. Answer the agent's clarifying question briefly, from the brief below only; if the brief does not say, answer \"No further information.\"\n";

impl Control {
    /// Asks the oracle model through the proxy, in the attempt's `oracle` role.
    pub(super) async fn ask_model(
        &self,
        id: &str,
        o: &OracleAsk,
        question: &str,
    ) -> Result<String, OracleFailure> {
        use OracleFailure::Unavailable;
        // A poisoned slot is treated as no proxy: the question is answered as unavailable.
        let proxy = self
            .proxy
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
            .ok_or_else(|| Unavailable("the proxy is not running".to_owned()))?;
        let system = format!("{ORACLE_SYSTEM}{ORACLE_BRIEF_MARKER}{}", o.brief);
        let mut body = o.template.clone();
        if o.anthropic {
            body["system"] = json!(system);
            body["messages"] = json!([{"role": "user", "content": question}]);
        } else {
            body["messages"] = json!([
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ]);
        }
        let bytes = serde_json::to_vec(&body).map_err(|e| Unavailable(e.to_string()))?;
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
        if let Some(o) = &task.spec.oracle {
            let suite_cap = self.max_oracle.get(&spec.slot.suite).copied().unwrap_or(0);
            max_questions = o.max_questions.min(suite_cap);
            let text = std::fs::read_to_string(task_dir.join(&o.answers)).map_err(|e| {
                AttemptReport::infra(FaultCode::ControllerError, format!("{}: {e}", o.answers))
            });
            if o.answered_by == eval_protocols::task::OracleAnswerer::Model {
                let Some((_, template, anthropic)) = &self.oracle else {
                    return Err(Box::new(AttemptReport::infra(
                        FaultCode::ControllerError,
                        "the task's oracle is a model but the protocol names no [models.oracle]",
                    )));
                };
                oracle = Some(OracleAsk {
                    template: template.clone(),
                    anthropic: *anthropic,
                    brief: text?,
                });
            } else {
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
        Ok(Arc::new(AttemptControl::new(
            image.0.clone(),
            arm.expected.clone(),
            answers,
            oracle,
            max_questions,
        )))
    }
}

/// The `[[qa]]` question → answer pairs of a scripted oracle file; a question it does not list
/// is answered "No further information.".
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
    let mut out = String::new();
    let mut any = false;
    for line in String::from_utf8_lossy(body).lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(data) else {
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
