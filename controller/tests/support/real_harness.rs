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

/// The regular files of a tar archive, by path (without a leading `./`), read with the `tar`
/// crate (checksums, ustar prefixes and PAX `path` records as the crate reads them).
pub fn tar_files(archive: &[u8]) -> BTreeMap<String, Vec<u8>> {
    use std::io::Read as _;
    let mut out = BTreeMap::new();
    let mut reader = tar::Archive::new(archive);
    for entry in reader.entries().unwrap() {
        let mut entry = entry.unwrap();
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = String::from_utf8_lossy(&entry.path_bytes())
            .trim_start_matches("./")
            .to_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        out.insert(path, data);
    }
    out
}
