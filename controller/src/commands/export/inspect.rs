//! A run as Inspect logs (`inspect_ai`'s `.json` log format, version 2): one log per suite and
//! arm, one sample per task × repetition (the repetition is Inspect's epoch), built from what
//! `eval report` reads — the run data (`report_data::build`: each slot's final attempt, its
//! metric by the report's own rule `pairs::metric_value`, the meter's tokens) — and each sample's
//! conversation as `eval show` reads it from the wire log.

use super::facts::RunFacts;
use crate::status::Failure;
use eval_core::phase::Phase;
use eval_core::tokens::TokenCounts;
use eval_evidence::gates::pairs;
use eval_evidence::report::RunData;
use eval_report::show::{self, AttemptView};
use serde_json::{Value, json};
use std::path::Path;

/// `eval.metadata.format` of a log `eval` wrote.
pub const FORMAT: &str = "eval.inspect/1";

/// The logs of `data`'s run: (file stem, log).
pub fn logs(state: &Path, data: &RunData, run: &RunFacts) -> Result<Vec<(String, Value)>, Failure> {
    let finals = pairs::final_attempts(data);
    let mut out = Vec::new();
    for suite in &data.suites {
        let metric = eval_evidence::report::build::primary_metric(data, &suite.id);
        let mut arms = vec![suite.baseline.clone(), suite.candidate.clone()];
        arms.extend(suite.other_arms.iter().cloned());
        arms.dedup();
        let mut seen = std::collections::BTreeSet::new();
        for arm in arms.into_iter().filter(|a| seen.insert(a.clone())) {
            let mut chosen: Vec<_> = finals
                .values()
                .filter(|a| a.phase == Phase::Statistical && a.suite == suite.id && a.arm == arm)
                .copied()
                .collect();
            chosen.sort_by(|a, b| (&a.task, a.rep).cmp(&(&b.task, b.rep)));
            let mut views = Vec::new();
            for a in &chosen {
                let id = format!("{}#{}", a.slot, a.attempt);
                views.push(show::build(state, &data.matrix, &id)?);
            }
            // The contract's model, as the agent's calls name it.
            let model = views
                .iter()
                .flat_map(|v| &v.calls)
                .find(|c| c.role == "agent")
                .and_then(|c| c.model.clone())
                .unwrap_or_else(|| "unknown".to_owned());
            let samples: Vec<Value> = chosen
                .iter()
                .zip(&views)
                .map(|(a, view)| {
                    let score = pairs::metric_value(data, a, &metric).ok();
                    sample(view, a.rep, &metric, score, &a.metrics, &model)
                })
                .collect();
            // The meter's consumption of the suite and arm: every attempt but controls, as the
            // report's accounting sums it.
            let mut used = TokenCounts::default();
            for a in data
                .attempts
                .iter()
                .filter(|a| a.phase != Phase::Control && a.suite == suite.id && a.arm == arm)
            {
                used.add(&a.tokens);
            }
            let scored: Vec<f64> = samples
                .iter()
                .filter_map(|s| {
                    s.pointer("/scores/eval_grader/value")
                        .and_then(Value::as_f64)
                })
                .collect();
            let mean = if scored.is_empty() {
                Value::Null
            } else {
                json!(scored.iter().sum::<f64>() / scored.len() as f64)
            };
            let epochs = chosen.iter().map(|a| a.rep).max().unwrap_or(1);
            let task_ids: Vec<&str> = {
                let mut t: Vec<&str> = chosen.iter().map(|a| a.task.as_str()).collect();
                t.dedup();
                t
            };
            let created = run.run.as_ref().map_or_else(
                || "1970-01-01T00:00:00Z".to_owned(),
                |r| r.started_at.clone(),
            );
            let log = json!({
                "version": 2,
                "status": "success",
                "eval": {
                    "eval_id": format!("{}:{}:{}", data.identity, suite.id, arm),
                    "run_id": data.identity,
                    "created": created,
                    "task": suite.id,
                    "task_id": format!("{}/{}", suite.id, arm),
                    "task_version": 0,
                    "solver": arm,
                    "dataset": {"name": suite.id, "samples": task_ids.len(), "sample_ids": task_ids},
                    "model": model,
                    "config": {"epochs": epochs},
                    "metadata": {
                        "format": FORMAT,
                        "matrix": data.matrix,
                        "protocol": data.protocol,
                        "identity": data.identity,
                        "suite": suite.id,
                        "arm": arm,
                        "baseline": suite.baseline,
                        "metric": metric,
                        "fixture_upstream": data.fixture_upstream,
                        "ledger": run.ledger.display().to_string(),
                        "ledger_head": data.ledger_head,
                        "ledger_verified": data.ledger_verified,
                        "derived_from": "a view of the ledger at ledger_head; the ledger and its artifacts are the evidence (`eval ledger verify LEDGER --artifacts`), this log is not signed",
                    },
                },
                "plan": {"name": arm, "steps": [{"solver": arm, "params": {"arm": arm}}]},
                "results": {
                    "total_samples": samples.len(),
                    "completed_samples": samples.len(),
                    "scores": [{
                        "name": "eval_grader",
                        "scorer": "eval_grader",
                        "params": {"metric": metric},
                        "metrics": {"mean": {"name": "mean", "value": mean}},
                    }],
                },
                "stats": {
                    "started_at": created,
                    "completed_at": created,
                    "model_usage": {model.clone(): usage(&used)},
                },
                "samples": samples,
            });
            // Inspect lists a directory's `.json` logs by name: an ISO time first
            // (`log_file_pattern` in inspect_ai/log/_file.py), then the task.
            let stamp: String = created
                .chars()
                .take(19)
                .collect::<String>()
                .replace(':', "-");
            let name = format!("{stamp}_{}_{arm}", suite.id);
            out.push((super::facts::file_stem(&name), log));
        }
    }
    Ok(out)
}

/// A log's bytes with its top-level fields in Inspect's order: its reader streams the header
/// (`version` first) and stops at `samples`, so `samples` must come last.
pub fn encode(log: &Value) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = b"{\n".to_vec();
    let keys = [
        "version", "status", "eval", "plan", "results", "stats", "samples",
    ];
    let present: Vec<&str> = keys.into_iter().filter(|k| log.get(*k).is_some()).collect();
    for (i, k) in present.iter().enumerate() {
        out.extend_from_slice(format!("  {}: ", serde_json::to_string(k)?).as_bytes());
        out.extend_from_slice(&serde_json::to_vec(&log[*k])?);
        out.extend_from_slice(if i + 1 < present.len() { b",\n" } else { b"\n" });
    }
    out.extend_from_slice(b"}\n");
    Ok(out)
}

fn usage(t: &TokenCounts) -> Value {
    json!({
        "input_tokens": t.input,
        "output_tokens": t.output,
        "total_tokens": t.total(),
        "input_tokens_cache_read": t.cached,
        "reasoning_tokens": t.reasoning,
    })
}

/// One sample: the conversation of the attempt's agent calls, its score, its usage.
fn sample(
    view: &AttemptView,
    rep: u32,
    metric: &str,
    score: Option<f64>,
    metrics: &std::collections::BTreeMap<String, f64>,
    model: &str,
) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    let mut last_reply: Option<String> = None;
    let mut last_output = Value::Null;
    for c in view.calls.iter().filter(|c| c.role == "agent") {
        if let Some(req) = &c.request {
            let mut echo = last_reply.is_some();
            for m in &req.new_messages {
                let role = m.role.as_deref().unwrap_or("user");
                if role == "assistant" && echo && last_reply.as_deref() == Some(m.text.as_str()) {
                    echo = false;
                    continue;
                }
                echo = false;
                let mut msg = match role {
                    "system" | "developer" => json!({"role": "system", "content": m.text}),
                    "assistant" => json!({"role": "assistant", "content": m.text,
                        "tool_calls": tool_calls(m.tool_calls.iter())}),
                    "tool" => json!({"role": "tool", "content": m.text,
                        "tool_call_id": m.tool_call_id}),
                    _ => json!({"role": "user", "content": m.text}),
                };
                msg["source"] = json!("input");
                messages.push(msg);
            }
        }
        if let Some(r) = &c.reply {
            let mut content = vec![];
            if !r.reasoning.is_empty() {
                content.push(json!({"type": "reasoning", "reasoning": r.reasoning}));
            }
            content.push(json!({"type": "text", "text": r.text}));
            let msg = json!({
                "role": "assistant",
                "content": content,
                "source": "generate",
                "model": r.model.clone().or_else(|| c.model.clone()),
                "tool_calls": tool_calls(r.tool_calls.iter()),
            });
            last_output = json!({
                "model": r.model.clone().or_else(|| c.model.clone()).unwrap_or_default(),
                "choices": [{"message": msg, "stop_reason": stop_reason(r.finish_reason.as_deref())}],
                "usage": usage(&c.tokens),
            });
            messages.push(msg);
            last_reply = Some(r.text.clone());
        } else {
            last_reply = None;
        }
    }
    let input = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let mut s = json!({
        "id": view.task,
        "epoch": rep,
        "input": input,
        "target": "",
        "messages": messages,
        "model_usage": {model: usage(&view.tokens)},
        "metadata": {
            "attempt": view.attempt,
            "slot": view.slot,
            "arm": view.arm,
            "repetition": view.rep,
            "outcome": view.outcome.as_ref().map(|o| o.outcome.clone()),
            "model_turns": view.model_turns,
            "spend_usd": view.spend_usd,
        },
        "total_time": view.outcome.as_ref().map(|o| o.duration_seconds),
    });
    if !last_output.is_null() {
        s["output"] = last_output;
    }
    if let Some(v) = score {
        s["scores"] = json!({"eval_grader": {
            "value": v,
            "explanation": format!("metric {metric:?} of the grader (the report's value)"),
            "metadata": {"metrics": metrics},
        }});
    }
    s
}

fn tool_calls<'a>(calls: impl Iterator<Item = &'a eval_runlog::wire_log::ToolCall>) -> Value {
    let v: Vec<Value> = calls
        .enumerate()
        .map(|(i, t)| {
            let arguments = match serde_json::from_str::<Value>(&t.arguments) {
                Ok(Value::Object(o)) => Value::Object(o),
                _ => json!({"input": t.arguments}),
            };
            json!({
                "id": t.id.clone().unwrap_or_else(|| format!("call-{i}")),
                "function": t.name.clone().unwrap_or_default(),
                "arguments": arguments,
                "type": "function",
            })
        })
        .collect();
    if v.is_empty() { Value::Null } else { json!(v) }
}

/// Inspect's stop reasons from an OpenAI/Anthropic finish reason.
fn stop_reason(r: Option<&str>) -> &'static str {
    match r {
        Some("stop" | "end_turn" | "stop_sequence") => "stop",
        Some("length" | "max_tokens") => "max_tokens",
        Some("tool_calls" | "tool_use") => "tool_calls",
        Some("content_filter") => "content_filter",
        _ => "unknown",
    }
}
