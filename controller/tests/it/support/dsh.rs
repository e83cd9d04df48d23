//! Support of the DeepSeek Harness tests: a scripted DeepSeek-compatible upstream that drives
//! `dsh --profile headless` through a task with the Harness's real tools (SSE
//! `chat.completion.chunk`s as the DeepSeek API streams them), writes a correct solution for the
//! task it recognises in the prompt, routes with Plan Lattice's `lattice_route` first when the
//! request offers it, and records every request it answered (path, headers, body, usage).
#![allow(dead_code)]

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// A task the upstream can solve: recognised by a phrase of its prompt, solved by one `write`.
pub struct Solution {
    /// A phrase only this task's prompt contains (the target file, as the prompts name it).
    pub recognise: &'static str,
    /// The file to write, relative to the workspace.
    pub path: &'static str,
    /// The file's whole content (before the marker comment is added).
    pub content: &'static str,
    /// How a comment line starts in the file's language (for the marker).
    pub comment: &'static str,
}

/// Correct solutions of v0.4's six `simple` tasks (simple-tasks.json; checked against what
/// simple-grader.mjs asserts).
pub const SOLUTIONS: &[Solution] = &[
    Solution {
        recognise: "src/clamp.js",
        path: "src/clamp.js",
        content: "export function clamp(value, min, max) {\n  if (min > max) {\n    throw new RangeError(`min ${min} is greater than max ${max}`)\n  }\n  return Math.min(Math.max(value, min), max)\n}\n",
        comment: "//",
    },
    Solution {
        recognise: "src/slugify.ts",
        path: "src/slugify.ts",
        content: "export function slugify(input: string): string {\n  return input\n    .toLowerCase()\n    .trim()\n    .replace(/[^a-z0-9]+/g, '-')\n    .replace(/^-+|-+$/g, '')\n}\n",
        comment: "//",
    },
    Solution {
        recognise: "text_utils.py",
        path: "text_utils.py",
        content: "def normalize_whitespace(value: str) -> str:\n    # str.split() without arguments splits on every Unicode whitespace run.\n    return \" \".join(value.split())\n",
        comment: "#",
    },
    Solution {
        recognise: "dedupe.go",
        path: "dedupe.go",
        content: "package dedupe\n\nfunc DedupeStable(values []string) []string {\n\tif values == nil {\n\t\treturn nil\n\t}\n\tseen := make(map[string]bool, len(values))\n\tout := make([]string, 0, len(values))\n\tfor _, v := range values {\n\t\tif !seen[v] {\n\t\t\tseen[v] = true\n\t\t\tout = append(out, v)\n\t\t}\n\t}\n\treturn out\n}\n",
        comment: "//",
    },
    Solution {
        recognise: "src/port.js",
        path: "src/port.js",
        content: "export function parsePort(value) {\n  if (typeof value !== 'string') throw new TypeError('port must be a string')\n  const text = value.trim()\n  if (!/^[0-9]+$/.test(text)) throw new RangeError(`invalid port ${JSON.stringify(value)}`)\n  const port = Number(text)\n  if (port < 1 || port > 65535) throw new RangeError(`port ${port} out of range`)\n  return port\n}\n",
        comment: "//",
    },
    Solution {
        recognise: "chunks.py",
        path: "chunks.py",
        content: "def chunks(items, size):\n    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:\n        raise ValueError(\"size must be a positive integer\")\n    return [list(items[i:i + size]) for i in range(0, len(items), size)]\n",
        comment: "#",
    },
];

/// What a reply was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `lattice_route` (Plan Lattice's routing tool), offered and not yet called.
    Route,
    /// The `read` tool call of the target file: the Harness's `write` refuses to replace a file
    /// the conversation has not read ("cannot overwrite existing … without reading it first").
    Read,
    /// Plan Lattice 0.3's guarded-write protocol (its `lattice` phase): open a lattice with the
    /// target as its context document, add one leaf, refresh the context receipt, check the
    /// leaf out; only then does the plugin let `write` through.
    Open,
    Add,
    Refresh,
    Checkout,
    /// The `write` tool call with the solution.
    Write,
    /// The final text answer (`finish_reason: stop`).
    Answer,
    /// A request without tools (the Harness's session-title call).
    Title,
    /// The Harness's `bash` tool with a hostile command (a prompt holding [`HOSTILE_HANG`] or
    /// [`HOSTILE_DELETE`]).
    Bash,
}

/// In a prompt: every reply is a `bash` call that sleeps far beyond any test task's time limit,
/// so the attempt can only end by the controller killing it at that limit.
pub const HOSTILE_HANG: &str = "EVAL-TEST-HANG";
/// In a prompt: a harmless `bash` call, then one that deletes the Harness's transcript wherever
/// it is (`/eval-state`, and where it used to be, `/workspace/.dsh-transcript`), then an answer.
pub const HOSTILE_DELETE: &str = "EVAL-TEST-DELETE";

/// One chat completion the upstream answered.
#[derive(Clone, Debug)]
pub struct Served {
    pub path: String,
    /// Request headers, minus `authorization` (checked, never kept).
    pub headers: BTreeMap<String, String>,
    pub request: Value,
    pub kind: Kind,
    /// The task's solution path (`None` when the prompt named no known task).
    pub task: Option<&'static str>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Served {
    /// The function names the request offered as tools.
    pub fn tools(&self) -> Vec<String> {
        self.request["tools"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The session id the Harness sent (`x-deepseek-harness-session-id`).
    pub fn session(&self) -> String {
        self.headers
            .get("x-deepseek-harness-session-id")
            .cloned()
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct Tally {
    served: Vec<Served>,
    unauthorized: u64,
    unexpected: Vec<String>,
}

struct Shared {
    key: String,
    marker: String,
    tally: Mutex<Tally>,
}

/// The upstream, on 127.0.0.1 in the test process. Stateless per conversation: each reply is
/// chosen from the request alone (the tools it offers and the tool calls its messages already
/// hold), so concurrent attempts each get the whole script.
pub struct DeepSeekUpstream {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    _rt: tokio::runtime::Runtime,
}

impl DeepSeekUpstream {
    /// `marker`: a comment line with it heads every solution, so a file holding it can only
    /// have come from this upstream's `write` call (it is in no prompt).
    pub fn start(key: &str, marker: &str) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared {
            key: key.to_owned(),
            marker: marker.to_owned(),
            tally: Mutex::new(Tally::default()),
        });
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        rt.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        DeepSeekUpstream {
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

/// The file content the upstream writes for `s`: the marker comment, then the solution.
pub fn solution_text(s: &Solution, marker: &str) -> String {
    format!("{} {marker}\n{}", s.comment, s.content)
}

/// The solution whose phrase the request's first user message holds.
pub fn recognise(request: &Value) -> Option<&'static Solution> {
    let user = request["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "user")?;
    let text = match &user["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    SOLUTIONS.iter().find(|s| text.contains(s.recognise))
}

/// Distinct numbers per step and conversation length, so a dropped, repeated or swapped call
/// shows in any comparison of sums.
pub fn usage_for(step: usize, n_messages: usize) -> (u64, u64) {
    let step = step as u64;
    (1000 + 37 * step + n_messages as u64, 20 + 7 * step)
}

/// The arguments of a `lattice_route` call valid for the schema the request offers: every
/// required property gets a value of its type, the routing ones the values of a small, clear,
/// single-file task (bypass needs no outcome-critical gap, span ≤ 2, gap ≤ 1).
pub fn route_arguments(tool: &Value) -> Value {
    let props = tool["function"]["parameters"]["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut args = serde_json::Map::new();
    for (name, schema) in props {
        let v = match name.as_str() {
            "recommendedLevel" => json!("bypass"),
            "estimatedSteps" => json!(1),
            "executionSpan" | "productDefinitionGap" => json!(0),
            "outcomeCritical" => json!(false),
            "evidence" => json!(["the task names one file and its exact behaviour"]),
            "rationale" => json!("a single-file change with a precise specification"),
            _ => match schema["type"].as_str() {
                Some("string") => match &schema["enum"][0] {
                    Value::Null => json!("n/a"),
                    first => first.clone(),
                },
                Some("integer") | Some("number") => json!(0),
                Some("boolean") => json!(false),
                Some("array") => json!([]),
                _ => json!({}),
            },
        };
        args.insert(name, v);
    }
    Value::Object(args)
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

/// The names of the tool calls the conversation's assistant messages already made.
fn called(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

fn offered(tools: &[Value], name: &str) -> bool {
    tools.iter().any(|t| t["function"]["name"] == name)
}

fn has(done: &[String], name: &str) -> bool {
    done.iter().any(|n| n == name)
}

/// The text of the tool result answering this upstream's call of `name` (its call ids are
/// `call_<name>_<step>`).
fn result_of(messages: &[Value], name: &str) -> Option<String> {
    let prefix = format!("call_{name}_");
    let m = messages.iter().rev().find(|m| {
        m["role"] == "tool"
            && m["tool_call_id"]
                .as_str()
                .is_some_and(|id| id.starts_with(&prefix))
    })?;
    Some(match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    })
}

/// The word after `label` in `text` (up to whitespace, a trailing `.` dropped).
pub fn after(text: &str, label: &str) -> Option<String> {
    let rest = &text[text.find(label)? + label.len()..];
    let word: String = rest
        .trim_start()
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    let word = word.trim_end_matches('.').to_owned();
    (!word.is_empty()).then_some(word)
}

/// A fresh receipt as Plan Lattice 0.3 renders it: (`receiptId`, `expectedRevision`).
pub fn receipt(text: &str) -> Result<(String, u64), String> {
    let id = after(text, "receiptId:").ok_or_else(|| format!("no receiptId in {text:.200}"))?;
    let rev = after(text, "expectedRevision:")
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| format!("no expectedRevision in {text:.200}"))?;
    Ok((id, rev))
}

/// The next call of Plan Lattice 0.3's open → add → refresh → checkout sequence, with values
/// read from the plugin's own earlier tool results in the conversation.
fn lattice_step(
    sol: &Solution,
    messages: &[Value],
    done: &[String],
) -> Result<(Kind, &'static str, Value), String> {
    if !has(done, "lattice_open") {
        return Ok((
            Kind::Open,
            "lattice_open",
            json!({"title": format!("Implement {}", sol.path),
                   "objective": format!("{} implements the task exactly", sol.path),
                   "estimatedSteps": 1,
                   "contextPaths": [sol.path]}),
        ));
    }
    if !has(done, "lattice_add") {
        let opened = result_of(messages, "lattice_open").ok_or("no lattice_open result")?;
        let (id, rev) = receipt(&opened)?;
        return Ok((
            Kind::Add,
            "lattice_add",
            json!({"receiptId": id, "expectedRevision": rev,
                   "title": format!("Write {}", sol.path),
                   "acceptanceCriteria": "the file implements the specification"}),
        ));
    }
    if !has(done, "lattice_refresh_context") {
        return Ok((Kind::Refresh, "lattice_refresh_context", json!({})));
    }
    let added = result_of(messages, "lattice_add").ok_or("no lattice_add result")?;
    let node = after(&added, "Added node").ok_or_else(|| format!("no node id in {added:.200}"))?;
    let refreshed = result_of(messages, "lattice_refresh_context")
        .ok_or("no lattice_refresh_context result")?;
    let (id, rev) = receipt(&refreshed)?;
    Ok((
        Kind::Checkout,
        "lattice_checkout",
        json!({"receiptId": id, "expectedRevision": rev, "nodeId": node}),
    ))
}

async fn handle(
    State(s): State<Arc<Shared>>,
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
    if req["stream"] != true {
        return unexpected("an unstreamed request (the Harness always streams)".into());
    }
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let tools = req["tools"].as_array().cloned().unwrap_or_default();
    let step = messages.iter().filter(|m| m["role"] == "assistant").count();
    let done = called(&messages);
    let task = recognise(&req);
    let route = tools
        .iter()
        .find(|t| t["function"]["name"] == "lattice_route");
    let id = format!("chatcmpl-scripted-{step}");
    let model = req["model"]
        .as_str()
        .unwrap_or("deepseek-v4-flash")
        .to_owned();
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let tool_call = |name: &str, args: &Value| {
        json!({"role": "assistant", "content": "", "tool_calls": [{
            "index": 0, "id": format!("call_{name}_{step}"), "type": "function",
            "function": {"name": name, "arguments": args.to_string()}}]})
    };
    let prompt: String = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect();
    let bash = |command: String| {
        vec![
            chunk(
                tool_call(
                    "bash",
                    &json!({"command": command, "description": "scripted"}),
                ),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ]
    };
    let (kind, chunks) = if !tools.is_empty() && prompt.contains(HOSTILE_HANG) {
        (Kind::Bash, bash("sleep 3600".to_owned()))
    } else if !tools.is_empty()
        && prompt.contains(HOSTILE_DELETE)
        && done.iter().filter(|n| *n == "bash").count() < 2
    {
        // dsh makes a step's records durable once the step's tools have finished, so the
        // transcript exists only from the second step on: a harmless call first, then the
        // deletion (waiting on the file, bounded, never on a clock alone).
        let command = if has(&done, "bash") {
            "i=0; while [ $i -lt 300 ] && ! ls /eval-state/*/*/session.jsonl /workspace/.dsh-transcript/*/*/session.jsonl >/dev/null 2>&1; do sleep 0.1; i=$((i + 1)); done; \
             rm -rf /eval-state/* /workspace/.dsh-transcript; echo removed"
        } else {
            "echo ready"
        };
        (Kind::Bash, bash(command.to_owned()))
    } else if tools.is_empty() {
        (
            Kind::Title,
            vec![chunk(
                json!({"role": "assistant", "content": "Scripted task"}),
                json!("stop"),
            )],
        )
    } else if let Some(route) = route.filter(|_| !done.iter().any(|n| n == "lattice_route")) {
        (
            Kind::Route,
            vec![
                chunk(
                    tool_call("lattice_route", &route_arguments(route)),
                    Value::Null,
                ),
                chunk(json!({}), json!("tool_calls")),
            ],
        )
    } else if let Some(sol) = task.filter(|_| !done.iter().any(|n| n == "read")) {
        let args = json!({"file_path": format!("/workspace/{}", sol.path)});
        (
            Kind::Read,
            vec![
                chunk(tool_call("read", &args), Value::Null),
                chunk(json!({}), json!("tool_calls")),
            ],
        )
    } else if let Some(lattice) = task
        .filter(|_| offered(&tools, "lattice_checkout") && !has(&done, "lattice_checkout"))
        .map(|sol| lattice_step(sol, &messages, &done))
    {
        match lattice {
            Ok((kind, name, args)) => (
                kind,
                vec![
                    chunk(tool_call(name, &args), Value::Null),
                    chunk(json!({}), json!("tool_calls")),
                ],
            ),
            Err(why) => (
                Kind::Answer,
                vec![chunk(
                    json!({"role": "assistant", "content": format!("Stuck: {why}")}),
                    json!("stop"),
                )],
            ),
        }
    } else if let Some(sol) = task.filter(|_| !done.iter().any(|n| n == "write")) {
        let args = json!({"file_path": format!("/workspace/{}", sol.path),
                          "content": solution_text(sol, &s.marker)});
        (
            Kind::Write,
            vec![
                chunk(tool_call("write", &args), Value::Null),
                chunk(json!({}), json!("tool_calls")),
            ],
        )
    } else {
        let text = match task {
            Some(sol) => format!("Implemented {}.", sol.path),
            None => "I do not know this task.".to_owned(),
        };
        (
            Kind::Answer,
            vec![chunk(
                json!({"role": "assistant", "content": text}),
                json!("stop"),
            )],
        )
    };
    let (prompt, completion) = usage_for(step, messages.len());
    let mut sse = String::new();
    for c in &chunks {
        sse.push_str(&format!("data: {c}\n\n"));
    }
    let usage = json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}});
    sse.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    let kept = headers
        .iter()
        .filter(|(k, _)| k.as_str() != "authorization")
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    s.tally.lock().unwrap().served.push(Served {
        path: uri.path().to_owned(),
        headers: kept,
        request: req,
        kind,
        task: task.map(|t| t.path),
        prompt_tokens: prompt,
        completion_tokens: completion,
    });
    (
        [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
        ],
        sse,
    )
        .into_response()
}

/// One line per arm: what the upstream saw of its attempts (the closing note quotes these).
pub fn wire_summary(arm: &str, served: &[&Served]) -> String {
    let first = served.first();
    let ua = first
        .and_then(|s| s.headers.get("user-agent"))
        .map(|u| u.split(' ').next().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let body_keys = first
        .and_then(|s| s.request.as_object())
        .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    let lattice: std::collections::BTreeSet<String> = served
        .iter()
        .flat_map(|s| s.tools())
        .filter(|t| t.starts_with("lattice_"))
        .collect();
    let sessions: std::collections::BTreeSet<String> = served.iter().map(|s| s.session()).collect();
    let (i, o) = served.iter().fold((0, 0), |(a, b), s| {
        (a + s.prompt_tokens, b + s.completion_tokens)
    });
    let list =
        |f: &dyn Fn(&Served) -> String| served.iter().map(|s| f(s)).collect::<Vec<_>>().join(" ");
    format!(
        "arm {arm}: {} calls [{}] tools/call [{}] lattice={lattice:?} sessions={} ua={ua} \
         body={{{body_keys}}} max_tokens={} usage in={i} out={o}",
        served.len(),
        list(&|s| format!("{:?}", s.kind)),
        list(&|s| s.tools().len().to_string()),
        sessions.len(),
        first
            .map(|s| s.request["max_tokens"].clone())
            .unwrap_or_default(),
    )
}

/// Runs `cmd` (stdin closed, output captured) in its own process group under a hang guard (a
/// deadlock detector, not a speed assumption): after `hang_guard_secs` the group is killed.
pub fn guarded(mut cmd: Command, hang_guard_secs: u64) -> std::process::Output {
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    if rx
        .recv_timeout(std::time::Duration::from_secs(hang_guard_secs))
        .is_err()
    {
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{pid}")])
            .status();
        let _ = waiter.join();
        panic!("{cmd:?} hung: still running after {hang_guard_secs} s; killed");
    }
    waiter.join().unwrap().unwrap()
}

/// The bytes of the artifact `name` an `attempt_outcome` references, from matrix `matrix`'s store.
pub fn artifact(dir: &Path, matrix: &str, outcome: &Value, name: &str) -> Vec<u8> {
    let d = outcome["artifacts"][name]
        .as_str()
        .unwrap_or_else(|| panic!("no {name} artifact in {outcome}"));
    let hex = d.strip_prefix("sha256:").unwrap();
    std::fs::read(dir.join(format!(
        "runs/{matrix}/artifacts/sha256/{}/{hex}",
        &hex[..2]
    )))
    .unwrap_or_else(|e| panic!("artifact {d}: {e}"))
}

/// The transcript's session id and its usage chunks, (inputTokens, outputTokens) in order.
pub fn transcript_usage(bytes: &[u8]) -> (String, Vec<(u64, u64)>) {
    let mut session = String::new();
    let mut usage = Vec::new();
    for line in String::from_utf8_lossy(bytes).lines() {
        if line.trim().is_empty() {
            continue;
        }
        let r: Value = serde_json::from_str(line).unwrap();
        if r["type"] == "session" {
            session = r["id"].as_str().unwrap_or_default().to_owned();
        }
        let c = &r["data"]["chunk"];
        if r["type"] == "assistant/chunk" && c["type"] == "usage" {
            usage.push((
                c["usage"]["inputTokens"].as_u64().unwrap(),
                c["usage"]["outputTokens"].as_u64().unwrap(),
            ));
        }
    }
    (session, usage)
}
