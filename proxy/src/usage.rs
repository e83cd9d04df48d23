//! Token usage as the upstream reported it, read from OpenAI-compatible (incl. DeepSeek) and
//! Anthropic response bodies and stream events.

use eval_core::tokens::TokenCounts;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ApiKind;

/// Normalised token counts of one call, plus the upstream's own `usage` object verbatim. Richer
/// than the shared [`TokenCounts`] (cache writes, DeepSeek's cache misses, the raw object) and
/// serialized under the proxy's record names; [`Usage::tokens`] gives the shared counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// All prompt tokens, cached ones included (Anthropic: input + cache read + cache creation).
    pub input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// Prompt tokens served from cache (OpenAI `cached_tokens`, DeepSeek
    /// `prompt_cache_hit_tokens`, Anthropic `cache_read_input_tokens`).
    pub cached_input_tokens: u64,
    /// Prompt tokens written to cache (Anthropic `cache_creation_input_tokens`).
    pub cache_creation_tokens: u64,
    /// DeepSeek `prompt_cache_miss_tokens`, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_miss_tokens: Option<u64>,
    /// OpenAI/DeepSeek `completion_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: u64,
    /// The upstream's final `usage` object (Anthropic streams: `message_start` usage with the
    /// fields of the last `message_delta` usage replacing it).
    pub raw: Value,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// The counts the ledger records for this call (cache writes stay in `raw`: they are
    /// priced, not counted apart).
    pub fn tokens(&self) -> TokenCounts {
        TokenCounts {
            input: self.input_tokens,
            output: self.output_tokens,
            cached: self.cached_input_tokens,
            reasoning: self.reasoning_tokens,
        }
    }

    /// Reads an OpenAI-compatible `usage` object.
    pub fn from_openai(u: &Value) -> Option<Self> {
        let obj = u.as_object()?;
        let n = |v: Option<&Value>| v.and_then(Value::as_u64);
        let prompt = n(obj.get("prompt_tokens"))?;
        let completion = n(obj.get("completion_tokens")).unwrap_or(0);
        let cached = n(u.pointer("/prompt_tokens_details/cached_tokens"))
            .or_else(|| n(obj.get("prompt_cache_hit_tokens")))
            .unwrap_or(0);
        Some(Self {
            input_tokens: prompt,
            output_tokens: completion,
            cached_input_tokens: cached,
            cache_creation_tokens: 0,
            cache_miss_tokens: n(obj.get("prompt_cache_miss_tokens")),
            reasoning_tokens: n(u.pointer("/completion_tokens_details/reasoning_tokens"))
                .unwrap_or(0),
            raw: u.clone(),
        })
    }

    /// Reads an Anthropic `usage` object (complete, as in a non-streaming response).
    pub fn from_anthropic(u: &Value) -> Option<Self> {
        let obj = u.as_object()?;
        let n = |k: &str| obj.get(k).and_then(Value::as_u64).unwrap_or(0);
        if !obj.contains_key("input_tokens") && !obj.contains_key("output_tokens") {
            return None;
        }
        let read = n("cache_read_input_tokens");
        let creation = n("cache_creation_input_tokens");
        Some(Self {
            input_tokens: n("input_tokens") + read + creation,
            output_tokens: n("output_tokens"),
            cached_input_tokens: read,
            cache_creation_tokens: creation,
            cache_miss_tokens: None,
            reasoning_tokens: 0,
            raw: u.clone(),
        })
    }

    /// Reads the usage of a complete (non-streaming) response body.
    pub fn from_body(api: ApiKind, body: &Value) -> Option<Self> {
        Self::from_usage(api, body.get("usage")?)
    }

    /// Reads a `usage` object of the given API's shape.
    pub fn from_usage(api: ApiKind, u: &Value) -> Option<Self> {
        match api {
            ApiKind::OpenAiChat => Self::from_openai(u),
            ApiKind::AnthropicMessages => Self::from_anthropic(u),
        }
    }
}

/// Follows a stream's events and keeps the latest usage. Usage is always replaced, never summed:
/// OpenAI sends it once (or cumulatively per chunk with some gateways) and Anthropic's
/// `message_delta` usage is cumulative.
#[derive(Debug)]
pub struct StreamUsage {
    api: ApiKind,
    /// Anthropic: the raw usage object, merged field by field as events arrive.
    merged: serde_json::Map<String, Value>,
    latest: Option<Usage>,
    /// The model the stream said answered.
    pub model: Option<String>,
    /// The API's own end of the stream was seen (OpenAI `[DONE]`, Anthropic `message_stop`):
    /// without it a client such as the DeepSeek Harness discards the call's usage, so the call
    /// is incomplete however much of it arrived.
    pub ended: bool,
    /// The last non-null `finish_reason` (OpenAI-compatible) or `stop_reason` (Anthropic).
    pub finish_reason: Option<String>,
}

impl StreamUsage {
    /// A meter for one stream of `api`.
    pub fn new(api: ApiKind) -> Self {
        Self {
            api,
            merged: serde_json::Map::new(),
            latest: None,
            model: None,
            ended: false,
            finish_reason: None,
        }
    }

    /// Looks at one event's data as the stream's bytes (what [`crate::sse::SseScanner`] hands
    /// on): the same answer as [`StreamUsage::observe`] on its UTF-8 reading, without building
    /// anything for the events that cannot carry the model or usage.
    pub fn observe_bytes(&mut self, data: &[u8]) -> bool {
        if data != b"[DONE]" && !self.interesting(data) {
            return false;
        }
        match std::str::from_utf8(data) {
            Ok(s) => self.observe(s),
            Err(_) => self.observe(&String::from_utf8_lossy(data)),
        }
    }

    /// Whether an event's data (other than `[DONE]`) can change the meter. Most events are
    /// content deltas: decoding only the ones that can carry the model, usage or a finish reason
    /// keeps the meter cheap on long streams. DeepSeek writes `"usage":null` in every chunk and a
    /// token delta carries `"finish_reason":null`, so an OpenAI event is decoded only when some
    /// `"usage"` or `"finish_reason"` in it is followed by something other than `null` (a
    /// superset of the events where either is set; decoding decides the rest).
    fn interesting(&self, data: &[u8]) -> bool {
        match self.api {
            ApiKind::OpenAiChat => {
                self.model.is_none()
                    || has_non_null(data, &KEYS.usage)
                    || has_non_null(data, &KEYS.finish_reason)
            }
            ApiKind::AnthropicMessages => {
                KEYS.message_start.find(data).is_some()
                    || KEYS.message_delta.find(data).is_some()
                    || KEYS.message_stop.find(data).is_some()
            }
        }
    }

    /// Looks at one event's data. Returns true when the event is an OpenAI usage-only chunk
    /// (no choices, only usage) — the chunk a client that did not ask for usage must not see.
    pub fn observe(&mut self, data: &str) -> bool {
        if data == "[DONE]" {
            self.ended |= self.api == ApiKind::OpenAiChat;
            return false;
        }
        if !self.interesting(data.as_bytes()) {
            return false;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return false;
        };
        match self.api {
            ApiKind::OpenAiChat => {
                if self.model.is_none() {
                    self.model = v.get("model").and_then(Value::as_str).map(str::to_owned);
                }
                if let Some(r) = v
                    .get("choices")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find_map(|c| c.get("finish_reason").and_then(Value::as_str))
                {
                    self.finish_reason = Some(r.to_owned());
                }
                let usage = v.get("usage").filter(|u| u.is_object());
                if let Some(u) = usage.and_then(Usage::from_openai) {
                    self.latest = Some(u);
                }
                let no_choices = v
                    .get("choices")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty);
                usage.is_some() && no_choices
            }
            ApiKind::AnthropicMessages => {
                let u = match v.get("type").and_then(Value::as_str) {
                    Some("message_start") => {
                        if self.model.is_none() {
                            self.model = v
                                .pointer("/message/model")
                                .and_then(Value::as_str)
                                .map(str::to_owned);
                        }
                        v.pointer("/message/usage")
                    }
                    Some("message_delta") => {
                        if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                            self.finish_reason = Some(r.to_owned());
                        }
                        v.get("usage")
                    }
                    Some("message_stop") => {
                        self.ended = true;
                        None
                    }
                    _ => None,
                };
                if let Some(Value::Object(fields)) = u {
                    for (k, val) in fields {
                        if !val.is_null() {
                            self.merged.insert(k.clone(), val.clone());
                        }
                    }
                    self.latest = Usage::from_anthropic(&Value::Object(self.merged.clone()));
                }
                false
            }
        }
    }

    /// The latest usage seen.
    pub fn usage(&self) -> Option<&Usage> {
        self.latest.as_ref()
    }

    /// The latest usage seen, taken.
    pub fn into_usage(self) -> Option<Usage> {
        self.latest
    }
}

/// The searchers of the keys the meter looks for, built once per process: building a searcher
/// costs more than running it over a token-sized event (`memmem::find` builds one per call).
struct Keys {
    usage: memchr::memmem::Finder<'static>,
    finish_reason: memchr::memmem::Finder<'static>,
    message_start: memchr::memmem::Finder<'static>,
    message_delta: memchr::memmem::Finder<'static>,
    message_stop: memchr::memmem::Finder<'static>,
}

static KEYS: std::sync::LazyLock<Keys> = std::sync::LazyLock::new(|| Keys {
    usage: memchr::memmem::Finder::new(b"\"usage\""),
    finish_reason: memchr::memmem::Finder::new(b"\"finish_reason\""),
    message_start: memchr::memmem::Finder::new(b"\"message_start\""),
    message_delta: memchr::memmem::Finder::new(b"\"message_delta\""),
    message_stop: memchr::memmem::Finder::new(b"\"message_stop\""),
});

/// Whether some occurrence of the searcher's key (quoted) in `data` is followed (after optional
/// JSON whitespace and the colon) by anything but `null`.
fn has_non_null(data: &[u8], key: &memchr::memmem::Finder<'static>) -> bool {
    let key_len = key.needle().len();
    let skip_ws = |mut i: usize| {
        while data
            .get(i)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            i += 1;
        }
        i
    };
    key.find_iter(data).any(|at| {
        let i = skip_ws(at + key_len);
        if data.get(i) != Some(&b':') {
            // Not a key (a string value "usage"): a decoder would find no usage here either,
            // but deciding that is the decoder's job.
            return true;
        }
        let i = skip_ws(i + 1);
        data.get(i..i + 4) != Some(&b"null"[..])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn anthropic_message_delta_replaces_never_adds() {
        let mut s = StreamUsage::new(ApiKind::AnthropicMessages);
        s.observe(&json!({"type":"message_start","message":{"model":"m","usage":{"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":2,"output_tokens":1}}}).to_string());
        s.observe(&json!({"type":"message_delta","usage":{"output_tokens":7}}).to_string());
        s.observe(&json!({"type":"message_delta","usage":{"output_tokens":9}}).to_string());
        let u = s.usage().unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cached_input_tokens,
                u.cache_creation_tokens
            ),
            (17, 9, 5, 2)
        );
    }

    /// DeepSeek's per-token chunks (`"usage":null`) are skipped undecoded; the finish chunk and
    /// the trailing usage-only chunk are read; the result is the same as decoding every event.
    #[test]
    fn null_usage_chunks_are_skipped_and_real_usage_is_read() {
        let model = json!({"id":"x","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""}}],"usage":null}).to_string();
        let token = json!({"id":"x","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"tok"}}],"usage":null}).to_string();
        let spaced =
            "{\"choices\":[{\"delta\":{\"content\":\"no usage\"}}], \"usage\" :\n null}".to_owned();
        let finish = json!({"id":"x","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}).to_string();
        let trailing = json!({"id":"x","model":"deepseek-reasoner","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14}}).to_string();
        let mut s = StreamUsage::new(ApiKind::OpenAiChat);
        assert!(!s.observe_bytes(model.as_bytes()));
        assert_eq!(s.model.as_deref(), Some("deepseek-reasoner"));
        for d in [&token, &spaced] {
            assert!(!has_non_null(d.as_bytes(), &KEYS.usage), "{d}");
            assert!(!s.observe_bytes(d.as_bytes()));
        }
        assert!(s.usage().is_none());
        assert!(has_non_null(finish.as_bytes(), &KEYS.usage));
        assert!(
            !s.observe_bytes(finish.as_bytes()),
            "the finish chunk has choices"
        );
        assert_eq!(s.usage().unwrap().output_tokens, 3);
        assert!(s.observe_bytes(trailing.as_bytes()), "usage-only");
        assert_eq!(s.usage().unwrap().output_tokens, 4);
        assert!(!s.observe_bytes(b"[DONE]"));
    }

    #[test]
    fn deepseek_and_openai_cache_fields() {
        let d = Usage::from_openai(&json!({"prompt_tokens":100,"completion_tokens":20,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36,"completion_tokens_details":{"reasoning_tokens":12}})).unwrap();
        assert_eq!(
            (
                d.cached_input_tokens,
                d.cache_miss_tokens,
                d.reasoning_tokens
            ),
            (64, Some(36), 12)
        );
        let o = Usage::from_openai(&json!({"prompt_tokens":100,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":50}})).unwrap();
        assert_eq!(o.cached_input_tokens, 50);
    }

    /// The ledger's counts of a call: every field from its own reading, cache writes not
    /// counted apart (they are inside `input` already).
    #[test]
    fn tokens_are_the_ledgers_counts_of_the_call() {
        let u = Usage::from_anthropic(&json!({"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":2,"output_tokens":7})).unwrap();
        assert_eq!(
            u.tokens(),
            TokenCounts {
                input: 17,
                output: 7,
                cached: 5,
                reasoning: 0
            }
        );
        let d = Usage::from_openai(&json!({"prompt_tokens":100,"completion_tokens":20,"prompt_cache_hit_tokens":64,"completion_tokens_details":{"reasoning_tokens":12}})).unwrap();
        let t = d.tokens();
        assert_eq!(
            (t.input, t.output, t.cached, t.reasoning),
            (100, 20, 64, 12)
        );
        assert_eq!(t.total(), d.total_tokens());
    }
}
