//! One attempt as an ATIF trajectory (Harbor's Agent Trajectory Interchange Format, RFC 0001;
//! models in `harbor/models/trajectories/`), built from the attempt as `eval show` reads it.
//!
//! The mapping (docs/export.md): each new message of a request is a `system` or `user` step, or
//! an observation (a tool result, attached to the agent step whose tool call it answers); each of
//! the agent's model calls is an `agent` step with its reply, tool calls, reasoning and metrics
//! (the meter's tokens, cache reads included, and the call's spend); a round boundary is a
//! `system` step; each clarifying question the simulated user answered is a `user` step (its own
//! model calls in the step's `extra`). The root `extra` names the ledger head and the attempt's
//! entries by hash: the trajectory is a derived view of signed evidence, not evidence itself.

use super::facts::{AttemptFacts, RunFacts};
use eval_report::show::{AttemptView, CallView};
use serde_json::{Value, json};
use std::collections::HashMap;

/// The ATIF version written (the fields used are all in v1.7).
pub const SCHEMA_VERSION: &str = "ATIF-v1.7";

/// `extra.format` of a trajectory `eval` wrote.
pub const FORMAT: &str = "eval.atif/1";

/// Builds the trajectory of `view` (whose entries `facts` and `attempt` describe).
pub fn trajectory(view: &AttemptView, run: &RunFacts, attempt: &AttemptFacts) -> Value {
    let mut b = Builder::default();
    // Calls and clarifications in ledger order.
    let mut events: Vec<(u64, Event<'_>)> = view
        .calls
        .iter()
        .map(|c| (c.entry, Event::Call(c)))
        .collect();
    events.extend(
        attempt
            .clarifications
            .iter()
            .zip(&view.clarifications)
            .map(|(seq, v)| (*seq, Event::Clarification(*seq, v))),
    );
    events.sort_by_key(|(seq, _)| *seq);
    let mut round: Option<u32> = None;
    for (_, ev) in events {
        match ev {
            Event::Call(c) if c.role != "agent" => b.simulated_user.push(call_extra(c)),
            Event::Call(c) => {
                if c.round.is_some() && c.round != round {
                    round = c.round;
                    b.round_step(view, c.round, attempt);
                }
                b.call(c, attempt);
            }
            Event::Clarification(seq, v) => b.clarification(seq, v, attempt),
        }
    }
    b.harness_results(view);
    if b.steps.is_empty() {
        b.steps.push(json!({
            "step_id": 1,
            "source": "system",
            "message": format!("attempt {} made no model call", view.attempt),
        }));
    }
    let (mut prompt, mut completion, mut cached, mut cost) = (0u64, 0u64, 0u64, 0f64);
    for s in &b.steps {
        if let Some(m) = s.get("metrics") {
            let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
            prompt += n("prompt_tokens");
            completion += n("completion_tokens");
            cached += n("cached_tokens");
            cost += m.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0);
        }
    }
    let model = view
        .calls
        .iter()
        .find(|c| c.role == "agent")
        .and_then(|c| c.model.clone());
    let identity = run.run.as_ref().map(|r| r.identity.clone());
    let head = run.head.as_ref().map(|h| format!("{}:{}", h.seq, h.hash));
    let mut agent = json!({
        "name": view.arm,
        "version": attempt.image.clone().unwrap_or_else(|| "unknown".into()),
        "extra": {"arm": view.arm, "image": attempt.image},
    });
    if let Some(m) = &model {
        agent["model_name"] = json!(m);
    }
    let mut extra = json!({
        "format": FORMAT,
        "matrix": view.matrix,
        "identity": identity,
        "fixture_evidence": view.fixture_evidence,
        "attempt": view.attempt,
        "slot": view.slot,
        "number": view.number,
        "phase": view.phase,
        "suite": view.suite,
        "task": view.task,
        "arm": view.arm,
        "repetition": view.rep,
        "rerun_of": view.rerun_of,
        "session": view.session,
        "started_at": view.started_at,
        "outcome": view.outcome,
        "grader": view.grader,
        "model_turns": view.model_turns,
        "tokens": view.tokens,
        "spend_usd": view.spend_usd,
        "artifacts": view.artifacts,
        "clarifications": view.clarifications.len(),
        "evidence": {
            "derived_from": "the ledger below; verify it with `eval ledger verify LEDGER --artifacts`",
            "ledger": run.ledger.display().to_string(),
            "ledger_head": run.head,
            "attempt_started": attempt.started,
            "attempt_outcome": attempt.outcome,
            "model_calls": view.calls.iter().map(|c| json!({"seq": c.entry, "request_digest": c.request_digest, "response_digest": c.response_digest})).collect::<Vec<_>>(),
        },
    });
    if !view.rounds.is_empty() {
        extra["rounds"] = json!(view.rounds);
    }
    if !b.simulated_user.is_empty() {
        extra["simulated_user_calls_unmatched"] = json!(b.simulated_user);
    }
    let steps = b.steps.len();
    let mut t = json!({
        "schema_version": SCHEMA_VERSION,
        "session_id": format!("{}/{}", view.matrix, identity.as_deref().unwrap_or("unknown")),
        "trajectory_id": view.attempt,
        "agent": agent,
        "steps": b.steps,
        "notes": format!(
            "A derived view of eval's ledger {} at head {}: attempt {} (task {}, arm {}, repetition {}). The ledger and its artifacts are the evidence; this file is not signed.",
            run.ledger.display(),
            head.as_deref().unwrap_or("(empty)"),
            view.attempt, view.task, view.arm, view.rep
        ),
        "final_metrics": {
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_cached_tokens": cached,
            "total_cost_usd": cost,
            "total_steps": steps,
            "extra": {
                "receipt_model_turns": view.model_turns,
                "receipt_tokens": view.tokens,
                "reasoning_tokens": view.calls.iter().filter(|c| c.role == "agent").map(|c| c.tokens.reasoning).sum::<u64>(),
            },
        },
        "extra": extra,
    });
    strip_nulls(&mut t);
    t
}

enum Event<'a> {
    Call(&'a CallView),
    Clarification(u64, &'a Value),
}

#[derive(Default)]
struct Builder {
    steps: Vec<Value>,
    /// Tool call id → index of the agent step that made it.
    tool_steps: HashMap<String, usize>,
    /// The text of the last reply, whose echo opens the next request.
    last_reply: Option<String>,
    /// The simulated user's model calls not yet attached to a clarification.
    simulated_user: Vec<Value>,
}

impl Builder {
    fn push(&mut self, mut step: Value) -> usize {
        let i = self.steps.len();
        step["step_id"] = json!(i + 1);
        self.steps.push(step);
        i
    }

    fn round_step(&mut self, view: &AttemptView, round: Option<u32>, attempt: &AttemptFacts) {
        let Some(k) = round else { return };
        let r = view.rounds.iter().find(|r| r.round == k);
        let mut step = json!({
            "source": "system",
            "message": format!("round {k} of {} began", view.rounds.len()),
            "extra": {
                "round": k,
                "status": r.map(|r| r.status.clone()),
                "graded": r.and_then(|r| r.graded.clone()),
                "metrics": r.map(|r| r.metrics.clone()),
                "prompt_digest": r.and_then(|r| r.prompt_digest.clone()),
                "round_started_entry": r.and_then(|r| r.started_entry),
                "round_finished_entry": r.and_then(|r| r.finished_entry),
            },
        });
        if let Some(t) = r
            .and_then(|r| r.started_entry)
            .and_then(|s| attempt.recorded_at.get(&s))
        {
            step["timestamp"] = json!(t);
        }
        self.push(step);
    }

    fn call(&mut self, c: &CallView, attempt: &AttemptFacts) {
        let mut echo_pending = self.last_reply.is_some();
        if let Some(req) = &c.request {
            for m in &req.new_messages {
                let raw: Value = serde_json::from_str(m.raw.get()).unwrap_or(Value::Null);
                match m.role.as_deref() {
                    Some("assistant") => {
                        // The previous reply, sent back as context: already its own step.
                        if echo_pending && self.last_reply.as_deref() == Some(m.text.as_str()) {
                            echo_pending = false;
                            continue;
                        }
                        echo_pending = false;
                        let calls = tool_calls(
                            m.tool_calls
                                .iter()
                                .map(|t| (t.id.clone(), t.name.clone(), t.arguments.as_str())),
                            c.entry,
                        );
                        let mut step = json!({
                            "source": "agent",
                            "message": m.text,
                            "is_copied_context": true,
                            "extra": {"from_request_of_entry": c.entry},
                        });
                        let ids = ids_of(&calls);
                        if !calls.is_empty() {
                            step["tool_calls"] = json!(calls);
                        }
                        let i = self.push(step);
                        for id in ids {
                            self.tool_steps.insert(id, i);
                        }
                    }
                    Some("tool") => {
                        let id = m.tool_call_id.clone().unwrap_or_default();
                        self.observe(&id, json!(m.text), c.entry);
                    }
                    Some(role @ ("system" | "developer")) => {
                        self.push(json!({
                            "source": "system",
                            "message": m.text,
                            "extra": {"role": role, "entry": c.entry},
                        }));
                    }
                    role => {
                        // Anthropic carries tool results as `tool_result` blocks of a user
                        // message: each is an observation; the rest of the text is the user's.
                        let mut text = Vec::new();
                        let mut blocks = false;
                        if let Some(parts) = raw.get("content").and_then(Value::as_array) {
                            for p in parts {
                                match p.get("type").and_then(Value::as_str) {
                                    Some("tool_result") => {
                                        blocks = true;
                                        let id = p
                                            .get("tool_use_id")
                                            .and_then(Value::as_str)
                                            .unwrap_or_default()
                                            .to_owned();
                                        let content = content_of(p.get("content"));
                                        self.observe(&id, json!(content), c.entry);
                                    }
                                    Some("text") => text.push(
                                        p.get("text")
                                            .and_then(Value::as_str)
                                            .unwrap_or_default()
                                            .to_owned(),
                                    ),
                                    _ => {}
                                }
                            }
                        }
                        let message = if blocks {
                            text.join("\n")
                        } else {
                            m.text.clone()
                        };
                        if !blocks || !message.is_empty() {
                            self.push(json!({
                                "source": "user",
                                "message": message,
                                "extra": {"role": role, "entry": c.entry},
                            }));
                        }
                    }
                }
            }
        }
        let mut step = json!({"source": "agent", "llm_call_count": 1});
        if let Some(t) = attempt.recorded_at.get(&c.entry) {
            step["timestamp"] = json!(t);
        }
        let mut extra = call_extra(c);
        let mut ids = Vec::new();
        match &c.reply {
            Some(r) => {
                step["message"] = json!(r.text);
                if !r.reasoning.is_empty() {
                    step["reasoning_content"] = json!(r.reasoning);
                }
                if let Some(m) = r.model.clone().or_else(|| c.model.clone()) {
                    step["model_name"] = json!(m);
                }
                let calls = tool_calls(
                    r.tool_calls
                        .iter()
                        .map(|t| (t.id.clone(), t.name.clone(), t.arguments.as_str())),
                    c.entry,
                );
                ids = ids_of(&calls);
                if !calls.is_empty() {
                    step["tool_calls"] = json!(calls);
                }
                extra["finish_reason"] = json!(r.finish_reason);
                extra["truncated"] = json!(r.truncated);
                extra["error"] = json!(r.error);
                self.last_reply = Some(r.text.clone());
            }
            None => {
                step["message"] = json!(c.detail.clone().unwrap_or_default());
                if let Some(m) = &c.model {
                    step["model_name"] = json!(m);
                }
                self.last_reply = None;
            }
        }
        step["metrics"] = json!({
            "prompt_tokens": c.tokens.input,
            "completion_tokens": c.tokens.output,
            "cached_tokens": c.tokens.cached,
            "cost_usd": c.spend_usd,
            "extra": {"reasoning_tokens": c.tokens.reasoning, "metered": c.metered, "incomplete": c.incomplete},
        });
        step["extra"] = extra;
        let i = self.push(step);
        for id in ids {
            self.tool_steps.insert(id, i);
        }
    }

    /// A tool result: an observation of the agent step whose tool call it answers, or a step
    /// of its own when no recorded step made that call.
    fn observe(&mut self, id: &str, content: Value, entry: u64) {
        let result = json!({"source_call_id": id, "content": content, "extra": {"entry": entry}});
        match self.tool_steps.get(id) {
            Some(&i) => push_result(&mut self.steps[i], result),
            None => {
                self.push(json!({
                    "source": "system",
                    "message": format!("result of tool call {id:?}, whose call is not in the wire log"),
                    "observation": {"results": [{"content": content, "extra": {"entry": entry, "tool_call_id": id}}]},
                }));
            }
        }
    }

    fn clarification(&mut self, seq: u64, v: &Value, attempt: &AttemptFacts) {
        let s = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
        let answer = v.get("answer").and_then(Value::as_str);
        let mut step = json!({
            "source": "user",
            "message": answer.unwrap_or("(the question was refused)"),
            "extra": {
                "clarification": {
                    "entry": seq,
                    "index": s("index"),
                    "question": s("question"),
                    "source": s("source"),
                    "turn": s("turn"),
                    "recorded": s("recorded"),
                },
                "simulated_user_calls": std::mem::take(&mut self.simulated_user),
            },
        });
        if let Some(t) = attempt.recorded_at.get(&seq) {
            step["timestamp"] = json!(t);
        }
        self.push(step);
    }

    /// Tool calls the wire log never saw answered (the agent's last ones, or a harness that
    /// does not send results back): their results from the Harness's own transcript.
    fn harness_results(&mut self, view: &AttemptView) {
        let Some(calls) = &view.harness_tool_calls else {
            return;
        };
        for h in calls {
            let (Some(id), Some(result)) = (&h.call_id, &h.result) else {
                continue;
            };
            let Some(&i) = self.tool_steps.get(id) else {
                continue;
            };
            let answered = self.steps[i]
                .pointer("/observation/results")
                .and_then(Value::as_array)
                .is_some_and(|rs| rs.iter().any(|r| r["source_call_id"] == json!(id)));
            if !answered {
                push_result(
                    &mut self.steps[i],
                    json!({"source_call_id": id, "content": result, "extra": {"from": "harness_transcript", "is_error": h.is_error}}),
                );
            }
        }
    }
}

fn push_result(step: &mut Value, result: Value) {
    if step.get("observation").is_none() {
        step["observation"] = json!({"results": []});
    }
    if let Some(rs) = step
        .pointer_mut("/observation/results")
        .and_then(Value::as_array_mut)
    {
        rs.push(result);
    }
}

/// What a call's step carries beyond ATIF's fields: where it is in the ledger and how it went.
fn call_extra(c: &CallView) -> Value {
    json!({
        "entry": c.entry,
        "call": c.call,
        "role": c.role,
        "round": c.round,
        "path": c.path,
        "stream": c.stream,
        "status": c.status,
        "result": c.result,
        "detail": c.detail,
        "tokens": c.tokens,
        "spend_usd": c.spend_usd,
        "latency_ms": c.latency_ms,
        "ttfb_ms": c.ttfb_ms,
        "request_digest": c.request_digest,
        "response_digest": c.response_digest,
    })
}

/// ATIF tool calls: `arguments` must be an object, so arguments that are not a JSON object are
/// kept as `{"input": …}` with the text as written in `extra.arguments_raw`; a call without an
/// id gets one from its entry and index.
fn tool_calls<'a>(
    calls: impl Iterator<Item = (Option<String>, Option<String>, &'a str)>,
    entry: u64,
) -> Vec<Value> {
    calls
        .enumerate()
        .map(|(i, (id, name, args))| {
            let id = id.unwrap_or_else(|| format!("eval-{entry}-{i}"));
            let mut call = json!({"tool_call_id": id, "function_name": name.unwrap_or_default()});
            match serde_json::from_str::<Value>(args) {
                Ok(Value::Object(o)) => call["arguments"] = Value::Object(o),
                parsed => {
                    let input = parsed.unwrap_or_else(|_| json!(args));
                    call["arguments"] = json!({"input": input});
                    call["extra"] = json!({"arguments_raw": args});
                }
            }
            call
        })
        .collect()
}

fn ids_of(calls: &[Value]) -> Vec<String> {
    calls
        .iter()
        .filter_map(|c| c["tool_call_id"].as_str().map(str::to_owned))
        .collect()
}

/// A tool result's content as text: a string, or its text blocks joined.
fn content_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// ATIF's optional fields are omitted rather than null (its models accept both; other readers
/// need not). `extra` maps and tool arguments are left as they are: their nulls are values.
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            for (k, x) in m.iter_mut() {
                if k != "extra" && k != "arguments" {
                    strip_nulls(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}
