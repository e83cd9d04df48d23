//! The oracle: scripted answers or a model asked through the proxy's `oracle` role.

use super::control::Control;
use eval_protocols::protocol::ModelContract;
use serde_json::{Value, json};

/// How to ask the oracle model: a request body without messages, and the task's brief.
#[derive(Clone)]
pub(super) struct OracleAsk {
    pub(super) template: Value,
    pub(super) anthropic: bool,
    pub(super) brief: String,
}

/// The oracle model's system prompt; the brief (the task's oracle file) follows the marker.
const ORACLE_SYSTEM: &str = "You are the oracle of an evaluation task. Answer the agent's clarifying question briefly, from the brief below only; if the brief does not say, answer \"No further information.\"\n";

impl Control {
    /// Asks the oracle model through the proxy, in the attempt's `oracle` role.
    pub(super) async fn ask_model(
        &self,
        id: &str,
        o: &OracleAsk,
        question: &str,
    ) -> Result<String, String> {
        let proxy = self
            .proxy
            .lock()
            .ok()
            .and_then(|slot| slot.clone())
            .ok_or_else(|| "the proxy is not running".to_owned())?;
        let system = format!(
            "{ORACLE_SYSTEM}{}{}",
            eval_runtimes::fixture_model::ORACLE_BRIEF_MARKER,
            o.brief
        );
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
        let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
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
            .map_err(|e| e.to_string())?;
        if !reply.status.is_success() {
            return Err(format!("the oracle model answered {}", reply.status));
        }
        answer_text(&reply.body).ok_or_else(|| "the oracle model's reply has no text".to_owned())
    }
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
    let anthropic = m.api == eval_protocols::protocol::ApiKind::AnthropicMessages;
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
}
