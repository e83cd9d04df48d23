//! Support of the real-harness test: a scripted OpenAI-compatible upstream that drives
//! mini-swe-agent through a task with bash tool calls and keeps its own tally of what it served,
//! and a reader for the workspace archives `eval run` stores (plain ustar/PAX, as
//! `ArtifactStore::put_dir` writes them).
#![allow(dead_code)]

use super::serve_loopback;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// mini-swe-agent's protocol: each reply is one call of its `bash` tool; a command whose output
/// starts with this line ends the task (`info.exit_status = "Submitted"`).
pub const SUBMIT: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// One chat completion the upstream answered (only authorised ones are answered).
#[derive(Clone, Debug)]
pub struct Served {
    /// The step: how many assistant messages the request already carried.
    pub step: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The request body as JSON.
    pub request: Value,
}

#[derive(Default)]
struct Tally {
    served: Vec<Served>,
    /// Requests refused because they did not carry the key (the proxy must always inject it).
    unauthorized: u64,
    /// Requests the script cannot answer (streamed, not a chat completion, not JSON).
    unexpected: Vec<String>,
}

struct Shared {
    key: String,
    script: Vec<String>,
    tally: Mutex<Tally>,
}

/// The upstream, on 127.0.0.1 in the test process. It is stateless per conversation: the reply
/// to a request depends only on how many assistant turns the request's `messages` hold, so two
/// attempts (two arms) talking to it at once each get the whole script.
pub struct ScriptedUpstream {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    _rt: tokio::runtime::Runtime,
}

impl ScriptedUpstream {
    /// `script`: the bash commands of steps 0, 1, …; past the end, the last one is repeated.
    pub fn start(key: &str, script: Vec<String>) -> Self {
        assert!(!script.is_empty());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared {
            key: key.to_owned(),
            script,
            tally: Mutex::new(Tally::default()),
        });
        let addr = serve_loopback(
            &rt,
            axum::Router::new()
                .fallback(handle)
                .with_state(shared.clone()),
        );
        ScriptedUpstream {
            addr,
            shared,
            _rt: rt,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn served(&self) -> Vec<Served> {
        self.shared.tally.lock().unwrap().served.clone()
    }

    pub fn unauthorized(&self) -> u64 {
        self.shared.tally.lock().unwrap().unauthorized
    }

    pub fn unexpected(&self) -> Vec<String> {
        self.shared.tally.lock().unwrap().unexpected.clone()
    }
}

fn error(status: StatusCode, msg: &str) -> Response {
    (
        status,
        axum::Json(
            json!({"error": {"message": msg, "type": "invalid_request_error", "code": null}}),
        ),
    )
        .into_response()
}

/// Distinct, step-dependent numbers, so a meter that drops, repeats or swaps a call is caught.
pub fn usage_for(step: usize, n_messages: usize) -> (u64, u64) {
    let step = step as u64;
    (100 + 17 * step + n_messages as u64, 7 + 3 * step)
}

async fn handle(
    State(s): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorized = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", s.key));
    if !authorized {
        s.tally.lock().unwrap().unauthorized += 1;
        return error(StatusCode::UNAUTHORIZED, "bad key");
    }
    // `eval run`'s preflight reads the account endpoints before the session.
    if let Some(r) = super::account::funded(&method, uri.path()) {
        return r;
    }
    let unexpected = |what: String| {
        s.tally.lock().unwrap().unexpected.push(what.clone());
        error(StatusCode::BAD_REQUEST, &what)
    };
    if !uri.path().ends_with("/chat/completions") {
        return unexpected(format!("path {}", uri.path()));
    }
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return unexpected(format!("not JSON: {e}")),
    };
    if req["stream"] == true {
        return unexpected("a streamed request (litellm's openai provider does not stream)".into());
    }
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let step = messages.iter().filter(|m| m["role"] == "assistant").count();
    let command = s.script[step.min(s.script.len() - 1)].clone();
    let (prompt, completion) = usage_for(step, messages.len());
    s.tally.lock().unwrap().served.push(Served {
        step,
        prompt_tokens: prompt,
        completion_tokens: completion,
        request: req.clone(),
    });
    axum::Json(json!({
        "id": format!("chatcmpl-scripted-{step}"),
        "object": "chat.completion",
        "created": 0,
        "model": req["model"].as_str().unwrap_or("scripted"),
        "choices": [{
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": format!("Step {}.", step + 1),
                "tool_calls": [{
                    "id": format!("call_{step}"),
                    "type": "function",
                    "function": {"name": "bash", "arguments": json!({"command": command}).to_string()},
                }],
            },
        }],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }))
    .into_response()
}

// ---------------------------------------------------------------------------------------------
// The stored workspace archive.

fn octal(field: &[u8]) -> u64 {
    let s = String::from_utf8_lossy(field);
    u64::from_str_radix(s.trim_matches(|c: char| c == '\0' || c == ' '), 8).unwrap_or(0)
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// The regular files of a tar archive, by path (without a leading `./`). Understands ustar's
/// prefix field and a PAX `x` header's `path` record, which is all `put_dir` writes.
pub fn tar_files(archive: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    let mut pax_path: Option<String> = None;
    while at + 512 <= archive.len() {
        let h = &archive[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let size = octal(&h[124..136]) as usize;
        let kind = h[156];
        let data_at = at + 512;
        let data = &archive[data_at..(data_at + size).min(archive.len())];
        let mut name = cstr(&h[0..100]);
        let prefix = cstr(&h[345..500]);
        if !prefix.is_empty() {
            name = format!("{prefix}/{name}");
        }
        match kind {
            b'x' => {
                // Records are `LEN key=value\n`.
                let text = String::from_utf8_lossy(data);
                pax_path = text.lines().find_map(|l| {
                    l.split_once(' ')
                        .and_then(|(_, kv)| kv.strip_prefix("path="))
                        .map(str::to_owned)
                });
            }
            b'0' | 0 => {
                let path = pax_path.take().unwrap_or(name);
                let path = path.trim_start_matches("./").to_owned();
                out.insert(path, data.to_vec());
            }
            _ => pax_path = None,
        }
        at = data_at + size.div_ceil(512) * 512;
    }
    out
}
