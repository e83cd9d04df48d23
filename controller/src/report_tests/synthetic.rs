#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A finished run without Docker: `eval init`'s demo project (its matrix's repetitions raised to
//! reach the size asked for), frozen as `eval freeze` does, run by the real runner
//! (`run::runner::run_session`, the real ledger writer and artifact store) with an executor that
//! records what a real attempt leaves behind — `model_call` entries with proxy records, an agent
//! log, a grader `score.json` with its checks, a harness transcript, a note — instead of starting
//! containers. For the site's tests and its benchmark (`scripts/bench-site.sh`).

use eval_core::outcome::Outcome;
use eval_core::tokens::TokenCounts;
use eval_engine::{AttemptExecutor, AttemptReport, AttemptSpec, Recorder};
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::{Digest, LedgerWriter, NewEntry};
use eval_runlog::events::{self, ModelCall};
use futures_util::future::BoxFuture;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What an agent writes to attack a page that shows it.
pub const HOSTILE: &str = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\"></pre></details><a href=\"javascript:alert(1)\">x</a>";

/// A project with a finished run of matrix `demo` in `state`.
pub struct Synthetic {
    pub root: PathBuf,
    pub state: PathBuf,
    pub matrix: String,
}

/// How big and how hostile the run is.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Repetitions per (task, arm) in every suite (the demo has 15 tasks × 3 arms per suite
    /// row: 45 statistical slots per repetition, plus 6 infrastructure slots).
    pub repetitions: u32,
    /// Model calls recorded per attempt.
    pub calls: u64,
    /// Put [`HOSTILE`] into everything an agent, a model or a grader controls.
    pub hostile: bool,
}

/// Makes the project in `dir` (which must not exist or be empty) and runs it to the end.
pub fn build(dir: &Path, shape: Shape) -> Synthetic {
    let root = dir.join("project");
    let state = root.join("runs");
    crate::commands::init::run(crate::cli::InitArgs { dir: root.clone() }).unwrap();
    let m = root.join("matrix/demo.toml");
    let text = std::fs::read_to_string(&m).unwrap();
    assert!(
        text.contains("repetitions = 2"),
        "the demo template changed"
    );
    std::fs::write(
        &m,
        text.replace(
            "repetitions = 2",
            &format!("repetitions = {}", shape.repetitions),
        ),
    )
    .unwrap();
    let project = eval_protocols::Project::open(&root);
    eval_protocols::freeze(
        &project,
        "demo",
        &state,
        crate::driver::driver_digest(),
        &eval_engine::image_record::resolve_image_digest,
    )
    .unwrap();
    let admitted = eval_engine::session::gather(
        &project,
        &state,
        "demo",
        None,
        &eval_engine::admission::UpstreamChoice::Fixture,
        crate::driver::driver_digest(),
    )
    .unwrap();
    let refusals = eval_engine::admission::admit(&admitted.facts);
    assert!(refusals.is_empty(), "{refusals:?}");
    let started = eval_engine::session::run_started(
        &admitted,
        4,
        events::UpstreamRecord {
            kind: "fixture".into(),
            url: "fixture".into(),
            ..Default::default()
        },
    );
    let run_dir = eval_runlog::layout::run_dir(&state, "demo");
    std::fs::create_dir_all(&run_dir).unwrap();
    let store = ArtifactStore::open(&eval_runlog::layout::artifacts_dir(&state, "demo")).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let writer = LedgerWriter::open(&eval_runlog::layout::ledger_path(&state, "demo")).unwrap();
        let rec = Recorder::new(writer.clone(), &[], "fixture").unwrap();
        let wire = eval_runlog::wire_log::WireLog::new(
            store.clone(),
            eval_proxy::SecretKey::from_memory(KEY).unwrap().redactor(),
            eval_runlog::wire_log::WireLimits::default(),
        );
        let exec = Arc::new(Fake {
            store,
            shape,
            wire: std::sync::Mutex::new(wire),
        });
        let end = eval_engine::runner::run_session(
            rec,
            started,
            exec,
            Arc::new(eval_engine::QuietProgress),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(end.complete, "{end:?}");
        writer.close();
    });
    Synthetic {
        root,
        state,
        matrix: "demo".into(),
    }
}

struct Fake {
    store: ArtifactStore,
    shape: Shape,
    /// The real wire log (`run::wire_log`), as the ledger bridge drives it in a run.
    wire: std::sync::Mutex<eval_runlog::wire_log::WireLog>,
}

/// The synthetic upstream's key: only ever in memory, redacted from the wire log like a real one.
const KEY: &str = "sk-synthetic0123456789abcdef0123";

/// A request body as a harness sends it: the whole conversation every call, tools resent.
fn request_body(messages: &[String]) -> Vec<u8> {
    format!(
        "{{\"model\":\"deepseek-v4-flash\",\"messages\":[{}],\"stream\":true,\"stream_options\":{{\"include_usage\":true}},\"tools\":[{}]}}",
        messages.join(","),
        ["read_file", "write_file", "bash"]
            .iter()
            .map(|t| format!("{{\"type\":\"function\",\"function\":{{\"name\":\"{t}\",\"description\":\"{}\",\"parameters\":{{\"type\":\"object\"}}}}}}", "the tool's description ".repeat(8)))
            .collect::<Vec<_>>()
            .join(",")
    )
    .into_bytes()
}

/// A DeepSeek-shaped stream: the reply a word per event, a tool call, the stop and usage chunks.
fn reply_stream(text: &str, tool: &str, args: &str) -> Vec<u8> {
    let mut out = String::new();
    for w in text.split_inclusive(' ') {
        let d =
            serde_json::json!({"choices":[{"index":0,"delta":{"content":w},"finish_reason":null}]});
        out.push_str(&format!("data: {d}\n\n"));
    }
    let d = serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":tool,"arguments":args}}]},"finish_reason":null}]});
    out.push_str(&format!("data: {d}\n\n"));
    out.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":120}}\n\ndata: [DONE]\n\n");
    out.into_bytes()
}

/// A score that depends on the task, the arm and the repetition only (so a run is repeatable),
/// with the candidate arms a few points ahead on most tasks.
fn score(spec: &AttemptSpec) -> f64 {
    let h =
        Digest::of(format!("{}/{}/{}", spec.slot.task, spec.slot.arm, spec.slot.rep).as_bytes());
    let base = 40.0 + f64::from(h.hex().as_bytes()[0] % 50);
    let lift = if spec.slot.arm == "native" { 0.0 } else { 6.0 };
    (base + lift).min(100.0)
}

impl AttemptExecutor for Fake {
    fn run<'a>(
        &'a self,
        spec: &'a AttemptSpec,
        rec: Recorder,
        _cancel: CancellationToken,
    ) -> BoxFuture<'a, AttemptReport> {
        Box::pin(async move {
            let hostile = if self.shape.hostile { HOSTILE } else { "" };
            let mut calls = Vec::new();
            let mut tokens = TokenCounts::default();
            let mut messages = vec![
                serde_json::json!({"role": "system", "content": format!("You are a coding agent. {}", "Follow the repository's conventions. ".repeat(40))}).to_string(),
                serde_json::json!({"role": "user", "content": format!("Solve task {} in /workspace.", spec.slot.task)}).to_string(),
            ];
            for i in 1..=self.shape.calls {
                let request = request_body(&messages);
                let reply =
                    format!("Step {i}: I read the failing test and change the function. {hostile}");
                let args = format!("{{\"path\":\"src/step{i}.js\"}}");
                let response = reply_stream(&reply, "read_file", &args);
                let mut r: eval_proxy::CallRecord = serde_json::from_value(serde_json::json!({
                    "attempt_id": spec.attempt, "arm": spec.slot.arm, "role": "agent", "seq": i,
                    "started_at_ms": 0, "method": "POST", "path": "/v1/chat/completions",
                    "model": "deepseek-v4-flash", "upstream_model": null, "stream": true, "status": 200,
                    "upstream_status": 200, "outcome": "ok", "detail": null, "latency_ms": 1.0,
                    "ttfb_ms": null, "usage": null, "spend_usd": 0.0, "reserved_tokens": 10,
                    "request_digest": Digest::of(&request).to_string(),
                    "response_digest": Digest::of(&response).to_string(), "changes": [],
                    "client_disconnected": false
                }))
                .unwrap();
                r.bodies = Some(eval_proxy::CallBodies {
                    request: Some(bytes::Bytes::from(request.clone())),
                    response: Some(bytes::Bytes::from(response)),
                    response_sse: true,
                    response_truncated: false,
                });
                let (wire_artifacts, note) = self.wire.lock().unwrap().store_call(&r).unwrap();
                messages.push(serde_json::json!({"role": "assistant", "content": reply, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": args}}]}).to_string());
                messages.push(serde_json::json!({"role": "tool", "tool_call_id": "call_1", "content": format!("contents of src/step{i}.js\n{hostile}")}).to_string());
                let t = TokenCounts {
                    input: 1_000 * i,
                    output: 120,
                    cached: 800 * (i - 1),
                    reasoning: 40,
                };
                tokens.input += t.input;
                tokens.output += t.output;
                tokens.cached += t.cached;
                tokens.reasoning += t.reasoning;
                let call = ModelCall {
                    schema: events::SCHEMA,
                    attempt: spec.attempt.clone(),
                    role: "agent".into(),
                    seq: i,
                    model: Some("deepseek-v4-flash".into()),
                    status: 200,
                    result: "ok".into(),
                    tokens: t,
                    metered: true,
                    latency_ms: 900 + i * 10,
                    record: serde_json::json!({
                        "seq": i,
                        "path": "/v1/chat/completions",
                        "stream": true,
                        "status": 200,
                        "latency_ms": 900.0 + (i * 10) as f64,
                        "ttfb_ms": 300.0,
                        "spend_usd": 0.0001,
                        "request_digest": r.request_digest,
                        "response_digest": r.response_digest,
                        "detail": if i == 1 && self.shape.hostile { Some(hostile) } else { None },
                        "wire": {"tools": ["read_file", "write_file", "bash"], "system": []},
                    }),
                    artifacts: wire_artifacts,
                    wire_log: Some(note),
                };
                calls.push(NewEntry::new(events::MODEL_CALL, &call).unwrap());
            }
            if !calls.is_empty() {
                rec.append_batch(calls).await.unwrap();
            }
            if self.shape.hostile {
                rec.append(
                    events::ATTEMPT_NOTE,
                    &events::AttemptNote {
                        schema: events::SCHEMA,
                        attempt: spec.attempt.clone(),
                        notes: vec![format!("workspace archive: odd name {hostile}")],
                    },
                )
                .await
                .unwrap();
            }
            let s = score(spec);
            let checks: Vec<serde_json::Value> = (0..5)
                .map(|k| {
                    serde_json::json!({
                        "name": format!("assertion {k}{}", if k == 0 { hostile } else { "" }),
                        "passed": (k as f64) * 20.0 < s,
                        "message": if k == 4 { hostile } else { "" },
                    })
                })
                .collect();
            let score_json = serde_json::json!({
                "metrics": {"score": s, "hidden_score": s, "critical_misses": 0, "regressions": 0},
                "task": spec.slot.task,
                "checks": checks,
            });
            let put = |b: &[u8]| Some(self.store.put_bytes(b).unwrap().to_string());
            let mut log = String::new();
            for i in 0..40 {
                log.push_str(&format!(
                    "[agent] step {i}: editing src/main file of {}\n",
                    spec.slot.task
                ));
            }
            log.push_str(hostile);
            let transcript: String = (1..=self.shape.calls)
                .map(|i| {
                    serde_json::json!({
                        "type": "request",
                        "turn": i,
                        "content": format!("reply {i}: {hostile}"),
                    })
                    .to_string()
                        + "\n"
                })
                .collect();
            let mut artifacts = events::ArtifactDigests {
                workspace: put(format!("workspace of {}", spec.attempt).as_bytes()),
                grader_output: put(&serde_json::to_vec_pretty(&score_json).unwrap()),
                agent_log: put(log.as_bytes()),
                grader_log: put(format!("graded {}\n{hostile}", spec.slot.task).as_bytes()),
                agent_metrics: None,
                transcript: None,
            };
            if self.shape.calls > 0 {
                artifacts.transcript = put(transcript.as_bytes());
            }
            let mut metrics = std::collections::BTreeMap::new();
            for k in ["score", "hidden_score"] {
                metrics.insert(k.to_string(), s);
            }
            metrics.insert("critical_misses".into(), 0.0);
            metrics.insert("regressions".into(), 0.0);
            AttemptReport {
                outcome: Some(Outcome::Completed),
                detail: self.shape.hostile.then(|| format!("graded: {hostile}")),
                model_turns: self.shape.calls,
                tokens,
                metrics,
                artifacts,
                duration_seconds: Some(12.5),
                container_seconds: 14.0,
                prepare_seconds: 0.4,
                accounting: Some("matched".into()),
                harness: Some(events::HarnessAccount {
                    model_turns: self.shape.calls,
                    total_tokens: tokens.total(),
                }),
                ..AttemptReport::default()
            }
        })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<usize, eval_runtimes::RuntimeError>> {
        Box::pin(async { Ok(0) })
    }
}
