//! The oracle: scripted answers or a model asked through the proxy's `oracle` role.

use super::control::{AttemptControl, Control};
use super::executor::ArmImage;
use super::executor::DockerExecutor;
use super::oracle_ask::*;
use crate::{AttemptReport, AttemptSpec};
use eval_core::fault::FaultCode;
use eval_protocols::TaskBundle;
use eval_protocols::protocol::ModelContract;
use eval_runtimes::ImageId;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

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
    use eval_protocols::task::{OracleConstraints, ReplyFormat, StatefulOracle};

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
