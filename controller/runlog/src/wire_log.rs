//! The readable wire log: each model call's redacted request and response, stored as artifacts
//! the `model_call` entry references, so that an attempt's log grows linearly with its
//! conversation.
//!
//! A conversation resends its whole history on every call. A request is therefore stored as a
//! *request node* (`eval.wire.request/1`): the messages it shares with an earlier node of the
//! same attempt (`base`, `keep`: the longest common prefix of message digests among the attempt's
//! last [`HEADS`] conversations, so interleaved child sessions still share), the messages it
//! adds (`append`, their exact bytes), and the bytes around the `messages` array (`head`,
//! `tail`: their own artifacts, content-addressed, so the tool schemas a harness resends on every
//! call are stored once). The original body is exactly `head + join(",", messages) + tail`, and
//! its SHA-256 is the record's `request_digest`.
//!
//! A streamed response is stored reassembled (`eval.wire.reply/1`: text, reasoning, tool calls,
//! usage, finish reason) — DeepSeek sends one event per token, ~50× the text — and re-redacted,
//! because reassembly joins deltas the proxy's stream redactor saw apart. A whole response body
//! is stored as it is (its digest is the record's `response_digest`).
//!
//! Caps: per call, the proxy keeps at most [`WireLimits::per_call_response_bytes`] of a stream;
//! per attempt, at most [`WireLimits::per_attempt_bytes`] are stored, after which calls carry
//! `wire_log.omitted` and nothing more is written for the attempt.

use eval_evidence::artifacts::ArtifactStore;
use eval_proxy::{CallRecord, Redactor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, HashMap};

/// `format` of a request node.
pub const REQUEST_FORMAT: &str = "eval.wire.request/1";
/// `format` of a reassembled streamed reply.
pub const REPLY_FORMAT: &str = "eval.wire.reply/1";
/// Conversations per attempt a new request may extend (its base is chosen among them).
pub const HEADS: usize = 8;
/// Attempts whose conversation heads are remembered at once (least recently used forgotten: a
/// forgotten attempt's next request is stored whole, which is correct, only larger).
const ATTEMPTS_REMEMBERED: usize = 256;

/// The wire log's caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireLimits {
    /// Bytes of new artifacts one attempt may add to the store.
    pub per_attempt_bytes: u64,
    /// Bytes of one streamed response the proxy keeps (what is past it is cut, flagged).
    pub per_call_response_bytes: usize,
}

impl Default for WireLimits {
    fn default() -> Self {
        Self {
            per_attempt_bytes: 64 * 1024 * 1024,
            per_call_response_bytes: 8 * 1024 * 1024,
        }
    }
}

/// A stored request (see the module docs). Reconstruct with [`Conversations`].
#[derive(Debug, Serialize, Deserialize)]
pub struct RequestNode {
    pub format: String,
    /// An earlier node of the same attempt whose first `keep` messages this one starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    #[serde(default)]
    pub keep: usize,
    /// The messages after the kept ones, byte for byte as sent.
    #[serde(default)]
    pub append: Vec<Box<RawValue>>,
    /// Artifact holding the body's bytes before the first message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Artifact holding the body's bytes after the last message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<String>,
    /// A body that is not an object with a non-empty `messages` array joined by `,`: the whole
    /// body is this artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// Messages in the request (kept + appended).
    #[serde(default)]
    pub messages: usize,
    /// Bytes of the original body.
    pub bytes: usize,
}

/// One tool call of a reply, its arguments as the model wrote them (a JSON text, usually).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub index: u64,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: String,
}

/// A response as a reader wants it: reassembled from a stream, or read from a whole body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub format: String,
    /// `sse` (reassembled from a stream) or `json` (read from a whole body) or `other` (a body
    /// that is neither: only `bytes` is known).
    pub kind: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub reasoning: String,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub usage: Option<Value>,
    /// An error object the upstream sent (an error body, or an `error` event mid-stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// SSE data events read (streams).
    #[serde(default)]
    pub events: u64,
    /// Bytes of the response read.
    #[serde(default)]
    pub bytes: u64,
    /// The response was cut at the per-call cap before it ended.
    #[serde(default)]
    pub truncated: bool,
}

/// What the wire log did for one call, in its `model_call` entry (`wire_log`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireNote {
    /// Messages in the request.
    #[serde(default)]
    pub messages: usize,
    /// Of those, taken from an earlier request of the attempt.
    #[serde(default)]
    pub kept: usize,
    /// Bytes this call added to the artifact store (objects already there count 0).
    #[serde(default)]
    pub stored_bytes: u64,
    /// The streamed response went past the per-call cap and is cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub response_truncated: bool,
    /// Why nothing (or not everything) of this call was stored: the attempt's cap was reached,
    /// or the store failed. The record's digests remain the evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<String>,
}

struct Head {
    node: String,
    messages: Vec<[u8; 32]>,
}

#[derive(Default)]
struct AttemptWire {
    stored: u64,
    capped: bool,
    heads: Vec<Head>,
    used: u64,
}

/// Stores calls' bodies (one per session, driven by the ledger bridge's single task).
pub struct WireLog {
    store: ArtifactStore,
    redactor: Redactor,
    limits: WireLimits,
    attempts: HashMap<String, AttemptWire>,
    clock: u64,
}

/// Artifact names in a `model_call` entry's `artifacts`.
pub mod names {
    pub const REQUEST: &str = "request";
    pub const REQUEST_HEAD: &str = "request_head";
    pub const REQUEST_TAIL: &str = "request_tail";
    pub const REQUEST_RAW: &str = "request_raw";
    /// A reassembled stream (`eval.wire.reply/1`).
    pub const REPLY: &str = "reply";
    /// A whole response body, as the upstream sent it (redacted).
    pub const RESPONSE: &str = "response";
}

/// A message's position in its body.
struct Spans {
    /// Byte ranges of each message.
    messages: Vec<(usize, usize)>,
}

/// Finds the top-level `messages` array's elements in `body`, when it is an object with a
/// non-empty `messages` array whose elements are separated by exactly `,` (what every JSON
/// serialiser in use writes); `None` otherwise (the body is then stored whole).
fn spans(body: &[u8]) -> Option<Spans> {
    #[derive(Deserialize)]
    struct Msgs<'a> {
        #[serde(borrow)]
        messages: Vec<&'a RawValue>,
    }
    let m: Msgs<'_> = serde_json::from_slice(body).ok()?;
    if m.messages.is_empty() {
        return None;
    }
    let base = body.as_ptr() as usize;
    let mut out = Vec::with_capacity(m.messages.len());
    for r in &m.messages {
        let s = r.get().as_ptr() as usize - base;
        let e = s + r.get().len();
        if body.get(s..e) != Some(r.get().as_bytes()) {
            return None;
        }
        out.push((s, e));
    }
    if out
        .windows(2)
        .any(|w| body.get(w[0].1..w[1].0) != Some(&b","[..]))
    {
        return None;
    }
    Some(Spans { messages: out })
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

impl WireLog {
    pub fn new(store: ArtifactStore, redactor: Redactor, limits: WireLimits) -> Self {
        Self {
            store,
            redactor,
            limits,
            attempts: HashMap::new(),
            clock: 0,
        }
    }

    /// Stores what `r` carries and returns the artifacts to reference from its entry and the
    /// note; `None` when the record carries no bodies (bodies not kept, or refused before its
    /// body was read).
    pub fn store_call(&mut self, r: &CallRecord) -> Option<(BTreeMap<String, String>, WireNote)> {
        let attempt = r.attempt_id.clone()?;
        let bodies = r.bodies.as_ref()?;
        self.clock += 1;
        let clock = self.clock;
        if !self.attempts.contains_key(&attempt) && self.attempts.len() >= ATTEMPTS_REMEMBERED {
            let oldest = self
                .attempts
                .iter()
                .min_by_key(|(_, a)| a.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.attempts.remove(&k);
            }
        }
        let mut st = self.attempts.remove(&attempt).unwrap_or_default();
        st.used = clock;
        let out = self.store_bodies(&mut st, r, bodies);
        self.attempts.insert(attempt, st);
        Some(out)
    }

    fn store_bodies(
        &self,
        st: &mut AttemptWire,
        r: &CallRecord,
        bodies: &eval_proxy::CallBodies,
    ) -> (BTreeMap<String, String>, WireNote) {
        let mut arts = BTreeMap::new();
        let mut note = WireNote {
            response_truncated: bodies.response_truncated,
            ..WireNote::default()
        };
        if st.capped {
            note.omitted = Some(self.cap_reason());
            return (arts, note);
        }
        // Everything this call would store, built before anything is written, so the cap is
        // all-or-nothing per call.
        let mut objects: Vec<(&'static str, Vec<u8>)> = Vec::new();
        let mut new_head = None;
        if let Some(body) = &bodies.request {
            let (node, head) = self.request_node(st, body, &mut objects);
            note.messages = node.messages;
            note.kept = node.keep;
            match serde_json::to_vec(&node) {
                Ok(b) => objects.push((names::REQUEST, b)),
                Err(e) => note.omitted = Some(format!("cannot serialise the request node: {e}")),
            }
            new_head = head;
        }
        if let Some(resp) = &bodies.response {
            if bodies.response_sse {
                let reply = reassemble(api_of(r), resp, bodies.response_truncated);
                match serde_json::to_vec(&reply) {
                    Ok(b) => objects.push((names::REPLY, self.redact(b))),
                    Err(e) => note.omitted = Some(format!("cannot serialise the reply: {e}")),
                }
            } else {
                objects.push((names::RESPONSE, self.redact(resp.to_vec())));
            }
        }
        let new_bytes: u64 = objects
            .iter()
            .filter(|(_, b)| !self.store.contains(&eval_evidence::ledger::Digest::of(b)))
            .map(|(_, b)| b.len() as u64)
            .sum();
        if st.stored + new_bytes > self.limits.per_attempt_bytes {
            st.capped = true;
            note.omitted = Some(self.cap_reason());
            return (arts, note);
        }
        for (name, bytes) in objects {
            match self.store.put_bytes(&bytes) {
                Ok(d) => {
                    arts.insert(name.to_owned(), d.to_string());
                }
                Err(e) => {
                    note.omitted = Some(format!("the artifact store failed: {e}"));
                    return (BTreeMap::new(), note);
                }
            }
        }
        st.stored += new_bytes;
        note.stored_bytes = new_bytes;
        if let (Some((based_on, messages)), Some(node)) = (new_head, arts.get(names::REQUEST)) {
            // The conversation this request extended is now this one; another starts a head.
            if let Some(i) = based_on {
                st.heads.remove(i);
            }
            st.heads.push(Head {
                node: node.clone(),
                messages,
            });
            if st.heads.len() > HEADS {
                st.heads.remove(0);
            }
        }
        (arts, note)
    }

    fn cap_reason(&self) -> String {
        format!(
            "the attempt's wire log reached its cap of {} bytes",
            self.limits.per_attempt_bytes
        )
    }

    fn redact(&self, b: Vec<u8>) -> Vec<u8> {
        self.redactor.redact(bytes::Bytes::from(b)).0.to_vec()
    }

    /// The node for `body`, the extra objects it needs (head, tail or raw) pushed to `objects`,
    /// and — for a message list — (the head it extended, its message digests).
    #[allow(
        clippy::type_complexity,
        reason = "a private helper's pair, named at its one caller"
    )]
    fn request_node(
        &self,
        st: &AttemptWire,
        body: &[u8],
        objects: &mut Vec<(&'static str, Vec<u8>)>,
    ) -> (RequestNode, Option<(Option<usize>, Vec<[u8; 32]>)>) {
        let Some(sp) = spans(body) else {
            let raw = self.redact(body.to_vec());
            let d = eval_evidence::ledger::Digest::of(&raw).to_string();
            objects.push((names::REQUEST_RAW, raw));
            let node = RequestNode {
                format: REQUEST_FORMAT.into(),
                base: None,
                keep: 0,
                append: Vec::new(),
                head: None,
                tail: None,
                raw: Some(d),
                messages: 0,
                bytes: body.len(),
            };
            return (node, None);
        };
        let digests: Vec<[u8; 32]> = sp.messages.iter().map(|&(s, e)| sha(&body[s..e])).collect();
        let best = st
            .heads
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let lcp = h
                    .messages
                    .iter()
                    .zip(&digests)
                    .take_while(|(a, b)| a == b)
                    .count();
                (i, lcp)
            })
            .filter(|&(_, lcp)| lcp > 0)
            .max_by_key(|&(i, lcp)| (lcp, i));
        let keep = best.map_or(0, |(_, l)| l);
        // Only a head this request wholly extends is replaced by it; a divergent one stays.
        let extended = best
            .filter(|&(i, l)| st.heads[i].messages.len() == l)
            .map(|(i, _)| i);
        let append = sp.messages[keep..]
            .iter()
            .filter_map(|&(s, e)| {
                std::str::from_utf8(&body[s..e])
                    .ok()
                    .and_then(|t| RawValue::from_string(t.to_owned()).ok())
            })
            .collect::<Vec<_>>();
        let (first, last) = (sp.messages[0].0, sp.messages[sp.messages.len() - 1].1);
        let head = self.redact(body[..first].to_vec());
        let tail = self.redact(body[last..].to_vec());
        let hd = eval_evidence::ledger::Digest::of(&head).to_string();
        let td = eval_evidence::ledger::Digest::of(&tail).to_string();
        objects.push((names::REQUEST_HEAD, head));
        objects.push((names::REQUEST_TAIL, tail));
        let node = RequestNode {
            format: REQUEST_FORMAT.into(),
            base: best.map(|(i, _)| st.heads[i].node.clone()),
            keep,
            append,
            head: Some(hd),
            tail: Some(td),
            raw: None,
            messages: digests.len(),
            bytes: body.len(),
        };
        (node, Some((extended, digests)))
    }
}

/// The API a record's call used, from its path.
fn api_of(r: &CallRecord) -> eval_proxy::ApiKind {
    if r.path.ends_with("/messages") {
        eval_proxy::ApiKind::AnthropicMessages
    } else {
        eval_proxy::ApiKind::OpenAiChat
    }
}

fn str_of(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

/// Reassembles an SSE response (OpenAI-compatible chunks or Anthropic events).
pub fn reassemble(api: eval_proxy::ApiKind, sse: &[u8], truncated: bool) -> Reply {
    let mut reply = Reply {
        format: REPLY_FORMAT.into(),
        kind: "sse".into(),
        bytes: sse.len() as u64,
        truncated,
        ..Reply::default()
    };
    let mut parser = eval_proxy::sse::SseParser::new();
    let mut events = parser.push(sse);
    events.extend(parser.finish());
    // Anthropic: content block index → tool call position.
    let mut blocks: BTreeMap<u64, usize> = BTreeMap::new();
    for ev in events {
        let Some(data) = ev.data else { continue };
        if data.trim() == "[DONE]" {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        reply.events += 1;
        if let Some(e) = v.get("error") {
            reply.error = Some(e.clone());
        }
        match api {
            eval_proxy::ApiKind::OpenAiChat => openai_chunk(&mut reply, &v),
            eval_proxy::ApiKind::AnthropicMessages => anthropic_event(&mut reply, &mut blocks, &v),
        }
    }
    reply
}

fn openai_chunk(reply: &mut Reply, v: &Value) {
    if let Some(m) = str_of(v.get("model")) {
        reply.model = Some(m);
    }
    if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
        reply.usage = Some(u.clone());
    }
    let Some(choices) = v.get("choices").and_then(Value::as_array) else {
        return;
    };
    for c in choices {
        if c.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
            continue;
        }
        if let Some(f) = str_of(c.get("finish_reason")) {
            reply.finish_reason = Some(f);
        }
        let Some(d) = c.get("delta") else { continue };
        if let Some(t) = d.get("content").and_then(Value::as_str) {
            reply.text.push_str(t);
        }
        if let Some(t) = d.get("reasoning_content").and_then(Value::as_str) {
            reply.reasoning.push_str(t);
        }
        for tc in d
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
            let pos = match reply.tool_calls.iter().position(|t| t.index == index) {
                Some(p) => p,
                None => {
                    reply.tool_calls.push(ToolCall {
                        index,
                        ..ToolCall::default()
                    });
                    reply.tool_calls.len() - 1
                }
            };
            let t = &mut reply.tool_calls[pos];
            if let Some(id) = str_of(tc.get("id")) {
                t.id = Some(id);
            }
            if let Some(f) = tc.get("function") {
                if let Some(n) = str_of(f.get("name")) {
                    t.name = Some(n);
                }
                if let Some(a) = f.get("arguments").and_then(Value::as_str) {
                    t.arguments.push_str(a);
                }
            }
        }
    }
}

fn anthropic_event(reply: &mut Reply, blocks: &mut BTreeMap<u64, usize>, v: &Value) {
    let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
    match v.get("type").and_then(Value::as_str) {
        Some("message_start") => {
            let m = v.get("message");
            reply.model = str_of(m.and_then(|m| m.get("model")));
            if let Some(u) = m.and_then(|m| m.get("usage")) {
                reply.usage = Some(u.clone());
            }
        }
        Some("content_block_start") => {
            let b = v.get("content_block");
            if b.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use") {
                reply.tool_calls.push(ToolCall {
                    index,
                    id: str_of(b.and_then(|b| b.get("id"))),
                    name: str_of(b.and_then(|b| b.get("name"))),
                    arguments: String::new(),
                });
                blocks.insert(index, reply.tool_calls.len() - 1);
            }
        }
        Some("content_block_delta") => {
            let d = v.get("delta");
            match d.and_then(|d| d.get("type")).and_then(Value::as_str) {
                Some("text_delta") => {
                    if let Some(t) = d.and_then(|d| d.get("text")).and_then(Value::as_str) {
                        reply.text.push_str(t);
                    }
                }
                Some("thinking_delta") => {
                    if let Some(t) = d.and_then(|d| d.get("thinking")).and_then(Value::as_str) {
                        reply.reasoning.push_str(t);
                    }
                }
                Some("input_json_delta") => {
                    if let (Some(&p), Some(t)) = (
                        blocks.get(&index),
                        d.and_then(|d| d.get("partial_json"))
                            .and_then(Value::as_str),
                    ) {
                        reply.tool_calls[p].arguments.push_str(t);
                    }
                }
                _ => {}
            }
        }
        Some("message_delta") => {
            if let Some(s) = str_of(v.get("delta").and_then(|d| d.get("stop_reason"))) {
                reply.finish_reason = Some(s);
            }
            // Anthropic's usage here is cumulative: it replaces.
            if let Some(u) = v.get("usage") {
                match reply.usage.as_mut().and_then(Value::as_object_mut) {
                    Some(o) => {
                        for (k, x) in u.as_object().into_iter().flatten() {
                            o.insert(k.clone(), x.clone());
                        }
                    }
                    None => reply.usage = Some(u.clone()),
                }
            }
        }
        _ => {}
    }
}

/// Reads a whole response body as a reply (OpenAI `choices[0].message`, Anthropic `content`
/// blocks, or an `error` object).
pub fn reply_of_body(body: &[u8]) -> Reply {
    let mut reply = Reply {
        format: REPLY_FORMAT.into(),
        kind: "json".into(),
        bytes: body.len() as u64,
        ..Reply::default()
    };
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        reply.kind = "other".into();
        return reply;
    };
    reply.model = str_of(v.get("model"));
    reply.usage = v.get("usage").filter(|u| !u.is_null()).cloned();
    reply.error = v.get("error").cloned();
    if let Some(c) = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    {
        reply.finish_reason = str_of(c.get("finish_reason"));
        if let Some(m) = c.get("message") {
            reply.text = str_of(m.get("content")).unwrap_or_default();
            reply.reasoning = str_of(m.get("reasoning_content")).unwrap_or_default();
            for (i, tc) in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let f = tc.get("function");
                reply.tool_calls.push(ToolCall {
                    index: i as u64,
                    id: str_of(tc.get("id")),
                    name: str_of(f.and_then(|f| f.get("name"))),
                    arguments: str_of(f.and_then(|f| f.get("arguments"))).unwrap_or_default(),
                });
            }
        }
    }
    if let Some(blocks) = v.get("content").and_then(Value::as_array) {
        reply.finish_reason = str_of(v.get("stop_reason"));
        for (i, b) in blocks.iter().enumerate() {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => reply
                    .text
                    .push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
                Some("thinking") => reply
                    .reasoning
                    .push_str(b.get("thinking").and_then(Value::as_str).unwrap_or("")),
                Some("tool_use") => reply.tool_calls.push(ToolCall {
                    index: i as u64,
                    id: str_of(b.get("id")),
                    name: str_of(b.get("name")),
                    arguments: b.get("input").map(Value::to_string).unwrap_or_default(),
                }),
                _ => {}
            }
        }
    }
    reply
}

/// Reads request nodes back into their message lists, remembering every node it has read (so a
/// whole attempt, read in ledger order, costs one read per node).
pub struct Conversations<'a> {
    store: &'a ArtifactStore,
    nodes: HashMap<String, std::rc::Rc<Vec<std::rc::Rc<str>>>>,
}

/// One request as read back.
pub struct ReadRequest {
    pub node: RequestNode,
    /// Every message of the request, in order.
    pub messages: std::rc::Rc<Vec<std::rc::Rc<str>>>,
}

impl<'a> Conversations<'a> {
    pub fn new(store: &'a ArtifactStore) -> Self {
        Self {
            store,
            nodes: HashMap::new(),
        }
    }

    /// Reads the node `digest` (checking its bytes against the digest) and its messages.
    pub fn read(&mut self, digest: &str) -> Result<ReadRequest, String> {
        let node: RequestNode = serde_json::from_slice(&self.get(digest)?)
            .map_err(|e| format!("request node {digest}: {e}"))?;
        let mut messages: Vec<std::rc::Rc<str>> = Vec::with_capacity(node.messages);
        if let Some(base) = &node.base {
            let prior = match self.nodes.get(base) {
                Some(p) => p.clone(),
                None => self.read(base)?.messages,
            };
            let kept = prior.get(..node.keep).ok_or_else(|| {
                format!(
                    "request node {digest} keeps {} messages of {base}, which has {}",
                    node.keep,
                    prior.len()
                )
            })?;
            messages.extend(kept.iter().cloned());
        }
        messages.extend(node.append.iter().map(|m| std::rc::Rc::from(m.get())));
        let messages = std::rc::Rc::new(messages);
        self.nodes.insert(digest.to_owned(), messages.clone());
        Ok(ReadRequest { node, messages })
    }

    /// The original request body, byte for byte (its SHA-256 is the record's `request_digest`).
    #[cfg(test)]
    pub fn body(&mut self, req: &ReadRequest) -> Result<Vec<u8>, String> {
        if let Some(raw) = &req.node.raw {
            return self.get(raw);
        }
        let mut out = Vec::with_capacity(req.node.bytes);
        if let Some(h) = &req.node.head {
            out.extend_from_slice(&self.get(h)?);
        }
        for (i, m) in req.messages.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(m.as_bytes());
        }
        if let Some(t) = &req.node.tail {
            out.extend_from_slice(&self.get(t)?);
        }
        Ok(out)
    }

    /// An artifact's bytes, checked against its digest.
    pub fn get(&self, digest: &str) -> Result<Vec<u8>, String> {
        let d = eval_evidence::ledger::Digest::parse(digest)
            .ok_or_else(|| format!("{digest:?} is not a sha256 digest"))?;
        self.store.get(&d).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use eval_proxy::{CallBodies, SecretKey};

    const KEY: &str = "sk-wirelogtestkey0123456789abcdef";

    fn record(
        attempt: &str,
        seq: u64,
        request: &[u8],
        response: Option<(&[u8], bool)>,
    ) -> CallRecord {
        let mut r: CallRecord = serde_json::from_value(serde_json::json!({
            "attempt_id": attempt, "arm": "a", "role": "agent", "seq": seq,
            "started_at_ms": 0, "method": "POST", "path": "/v1/chat/completions",
            "model": "m", "upstream_model": null, "stream": true, "status": 200,
            "upstream_status": 200, "outcome": "ok", "detail": null, "latency_ms": 1.0,
            "ttfb_ms": null, "usage": null, "spend_usd": 0.0, "reserved_tokens": 10,
            "request_digest": eval_evidence::ledger::Digest::of(request).to_string(),
            "response_digest": null, "changes": [], "client_disconnected": false
        }))
        .unwrap();
        r.bodies = Some(CallBodies {
            request: Some(bytes::Bytes::copy_from_slice(request)),
            response: response.map(|(b, _)| bytes::Bytes::copy_from_slice(b)),
            response_sse: response.is_some_and(|(_, sse)| sse),
            response_truncated: false,
        });
        r
    }

    fn log(dir: &std::path::Path, limits: WireLimits) -> WireLog {
        let store = ArtifactStore::open(dir).unwrap();
        WireLog::new(
            store,
            SecretKey::from_memory(KEY).unwrap().redactor(),
            limits,
        )
    }

    /// A conversation as a harness sends it: the whole history every call, tools resent.
    fn body(messages: &[String]) -> Vec<u8> {
        format!(
            "{{\"model\":\"m\",\"messages\":[{}],\"stream\":true,\"tools\":[{}]}}",
            messages.join(","),
            (0..20)
                .map(|i| format!("{{\"type\":\"function\",\"function\":{{\"name\":\"tool{i}\",\"description\":\"{}\"}}}}", "d".repeat(200)))
                .collect::<Vec<_>>()
                .join(",")
        )
        .into_bytes()
    }

    fn sse(text: &str) -> Vec<u8> {
        let mut out = String::new();
        for ch in text.chars() {
            let d = serde_json::json!({"choices":[{"index":0,"delta":{"content":ch.to_string()},"finish_reason":null}],"usage":null});
            out.push_str(&format!("data: {d}\n\n"));
        }
        out.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
        out.into_bytes()
    }

    fn store_bytes(dir: &std::path::Path) -> (u64, Vec<Vec<u8>>) {
        let mut total = 0;
        let mut all = Vec::new();
        for d in std::fs::read_dir(dir.join("sha256")).unwrap() {
            for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
                let b = std::fs::read(f.unwrap().path()).unwrap();
                total += b.len() as u64;
                all.push(b);
            }
        }
        (total, all)
    }

    /// 300 calls of one growing conversation: what is stored stays within 2× of the final
    /// conversation's bytes (the final request plus every reply's text), and every request reads
    /// back byte for byte, in order, its digest the record's.
    #[test]
    fn a_growing_conversation_is_stored_linearly_and_reads_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = log(dir.path(), WireLimits::default());
        let mut msgs = vec![format!(
            "{{\"role\":\"system\",\"content\":\"{}\"}}",
            "s".repeat(2000)
        )];
        let mut entries = Vec::new();
        let mut replies_text = 0;
        for seq in 1..=300u64 {
            msgs.push(format!(
                "{{\"role\":\"user\",\"content\":\"turn {seq} {}\"}}",
                "u".repeat(300)
            ));
            let req = body(&msgs);
            let answer = format!("answer {seq} {}", "a".repeat(200));
            replies_text += answer.len();
            let r = record("s#1", seq, &req, Some((&sse(&answer), true)));
            let (arts, note) = w.store_call(&r).unwrap();
            assert_eq!(note.omitted, None);
            assert_eq!(note.messages, msgs.len());
            if seq > 1 {
                // The previous request's messages; the assistant's answer and the new turn are
                // appended.
                assert_eq!(
                    note.kept,
                    msgs.len() - 2,
                    "call {seq} extends call {}",
                    seq - 1
                );
            }
            entries.push((arts, req));
            msgs.push(format!(
                "{{\"role\":\"assistant\",\"content\":\"{answer}\"}}"
            ));
        }
        let final_conversation = body(&msgs).len() + replies_text;
        let (stored, _) = store_bytes(dir.path());
        assert!(
            stored <= 2 * final_conversation as u64,
            "stored {stored} bytes for a final conversation of {final_conversation}"
        );
        let store = ArtifactStore::open(dir.path()).unwrap();
        let mut conv = Conversations::new(&store);
        for (i, (arts, req)) in entries.iter().enumerate() {
            let read = conv.read(&arts[names::REQUEST]).unwrap();
            let back = conv.body(&read).unwrap();
            assert!(back == *req, "call {} reads back as sent", i + 1);
            let reply: Reply =
                serde_json::from_slice(&conv.get(&arts[names::REPLY]).unwrap()).unwrap();
            assert_eq!(reply.text, format!("answer {} {}", i + 1, "a".repeat(200)));
            assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
        }
    }

    /// Two conversations interleaved (a parent and its child session): each extends its own
    /// history, not the other's.
    #[test]
    fn interleaved_conversations_each_extend_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = log(dir.path(), WireLimits::default());
        let mut a = vec!["{\"role\":\"system\",\"content\":\"parent\"}".to_owned()];
        let mut b = vec!["{\"role\":\"system\",\"content\":\"child\"}".to_owned()];
        for seq in 0..10u64 {
            let (conv, name) = if seq % 2 == 0 {
                (&mut a, "p")
            } else {
                (&mut b, "c")
            };
            conv.push(format!("{{\"role\":\"user\",\"content\":\"{name}{seq}\"}}"));
            let (_, note) = w
                .store_call(&record("s#1", seq + 1, &body(conv), None))
                .unwrap();
            if seq >= 2 {
                assert_eq!(note.kept, conv.len() - 1, "call {seq}");
            }
        }
    }

    /// The key, streamed one character per event (so no single upstream chunk holds it), is
    /// not in any stored byte: the reassembled reply is redacted again. Nor is a key the request
    /// carried in one of its messages.
    #[test]
    fn no_stored_byte_holds_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = log(dir.path(), WireLimits::default());
        let redactor = SecretKey::from_memory(KEY).unwrap().redactor();
        let req = body(&[format!(
            "{{\"role\":\"user\",\"content\":\"my key is {KEY}\"}}"
        )]);
        // The proxy hands over redacted bodies; the stream's chunks were each clean.
        let req = redactor.redact(bytes::Bytes::from(req)).0.to_vec();
        let stream = sse(&format!("here it is: {KEY}!"));
        assert!(!redactor.contains_key(stream.split(|&c| c == b'\n').next().unwrap()));
        let (arts, _) = w
            .store_call(&record("s#1", 1, &req, Some((&stream, true))))
            .unwrap();
        let (_, all) = store_bytes(dir.path());
        for b in &all {
            assert!(!redactor.contains_key(b), "{}", String::from_utf8_lossy(b));
            assert!(!b.windows(KEY.len()).any(|x| x == KEY.as_bytes()));
        }
        let store = ArtifactStore::open(dir.path()).unwrap();
        let reply: Reply = serde_json::from_slice(
            &store
                .get(&eval_evidence::ledger::Digest::parse(&arts[names::REPLY]).unwrap())
                .unwrap(),
        )
        .unwrap();
        assert!(reply.text.contains("[REDACTED]"), "{}", reply.text);
    }

    /// Past the attempt's cap nothing more is stored and every later call says so; another
    /// attempt has its own cap.
    #[test]
    fn the_attempt_cap_stops_storing_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let limits = WireLimits {
            per_attempt_bytes: 20_000,
            ..WireLimits::default()
        };
        let mut w = log(dir.path(), limits);
        let mut msgs = Vec::new();
        let mut omitted_from = None;
        for seq in 1..=40u64 {
            msgs.push(format!(
                "{{\"role\":\"user\",\"content\":\"{seq}{}\"}}",
                "x".repeat(1000)
            ));
            let (arts, note) = w
                .store_call(&record("s#1", seq, &body(&msgs), None))
                .unwrap();
            match (&note.omitted, omitted_from) {
                (Some(why), _) => {
                    assert!(why.contains("cap of 20000 bytes"), "{why}");
                    assert!(arts.is_empty());
                    omitted_from.get_or_insert(seq);
                }
                (None, Some(from)) => panic!("call {seq} stored after the cap was hit at {from}"),
                (None, None) => assert!(arts.contains_key(names::REQUEST)),
            }
        }
        assert!(omitted_from.is_some());
        let (stored, _) = store_bytes(dir.path());
        assert!(stored <= 20_000, "{stored}");
        let (_, note) = w
            .store_call(&record("s#2", 1, &body(&msgs[..1]), None))
            .unwrap();
        assert_eq!(note.omitted, None);
    }

    /// A body without a messages array is stored whole and reads back exactly.
    #[test]
    fn a_body_without_messages_is_stored_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = log(dir.path(), WireLimits::default());
        for req in [
            &b"not json"[..],
            b"{\"model\":\"m\",\"messages\":[]}",
            b"{\"messages\":[1 , 2]}",
        ] {
            let (arts, _) = w.store_call(&record("s#1", 1, req, None)).unwrap();
            let store = ArtifactStore::open(dir.path()).unwrap();
            let mut conv = Conversations::new(&store);
            let read = conv.read(&arts[names::REQUEST]).unwrap();
            assert_eq!(conv.body(&read).unwrap(), req);
        }
    }

    /// Tool calls split anywhere (DeepSeek's fragments sharing `index`) come back whole, and
    /// reasoning apart from text.
    #[test]
    fn a_stream_reassembles_tool_calls_and_reasoning() {
        let chunks = [
            r#"{"model":"deepseek-chat","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""}}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"read","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1}}"#,
        ];
        let s: String = chunks
            .iter()
            .map(|c| format!("data: {c}\n\n"))
            .collect::<String>()
            + "data: [DONE]\n\n";
        let r = reassemble(eval_proxy::ApiKind::OpenAiChat, s.as_bytes(), false);
        assert_eq!(r.reasoning, "think");
        assert_eq!(r.text, "");
        assert_eq!(r.model.as_deref(), Some("deepseek-chat"));
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].name.as_deref(), Some("bash"));
        assert_eq!(r.tool_calls[0].arguments, "{\"cmd\":\"ls\"}");
        assert_eq!(r.tool_calls[1].id.as_deref(), Some("c2"));
    }
}
