//! The accounting cross-check of the harness's own metrics against the proxy's meter.
//!
//! A runtime that declares a metrics file (`metrics_path`) promises the cross-check, so a file
//! that is missing, not a regular file, larger than [`MAX_METRICS_BYTES`] or not the expected
//! JSON fails it (`metrics_missing` / `metrics_unreadable`), and a completed attempt becomes
//! `accounting_mismatch` — it is never silently `harness: null`.
//!
//! Two formats (`metrics_format`): eval's own JSON counts, and the DeepSeek Harness's session
//! transcript (plain JSONL), whose usage chunks are summed here. The transcript is the agent's
//! file like any other: read beneath the workspace without following links, bounded by
//! [`MAX_TRANSCRIPT_BYTES`], and any line that is not the expected JSON makes it unreadable.

use super::archive::store_bytes;
use super::classify::Accounting;
use super::executor::Seen;
use crate::AttemptReport;
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::leftovers::{Beneath, LeftoverError};
use eval_runlog::events::HarnessAccount;
use eval_runtimes::RuntimeDef;
use eval_runtimes::definition::{MetricsFormat, MetricsRoot};
use serde_json::Value;
use std::path::{Component, Path};

/// The largest harness metrics file read.
pub const MAX_METRICS_BYTES: u64 = 1024 * 1024;

/// The largest harness transcript read. A DeepSeek Harness transcript of a simple task is
/// 30–60 KB per model call (every request's context is in it); 16 MiB holds a few hundred calls
/// and bounds what a hostile agent can make the controller read and store.
pub const MAX_TRANSCRIPT_BYTES: u64 = 16 * 1024 * 1024;

/// Entries listed per directory while finding a `*` component of the metrics path in the
/// state directory: the Harness makes one project and one session directory; an agent that fills
/// the directory costs this many reads, then the transcript is unreadable.
pub const MAX_STATE_ENTRIES: usize = 64;

/// Reads the declared metrics file from the workspace (never following a link out of it) or
/// the state directory, stores it, cross-checks it, then removes the harness's bookkeeping from
/// the workspace so neither the grader nor the archive sees it. Blocking file work: called off
/// the async runtime (`super::off_runtime`).
pub(super) fn cross_check(
    store: &ArtifactStore,
    def: &RuntimeDef,
    ws: &Beneath,
    state: Option<&Path>,
    seen: &mut Seen,
    report: &mut AttemptReport,
) {
    let Some(rel) = &def.metrics_path else {
        seen.obs.accounting = Accounting::NotDeclared;
        report.accounting = Some(seen.obs.accounting.as_str().to_owned());
        return;
    };
    let format = def.metrics_format;
    let cap = match format {
        MetricsFormat::EvalJson => MAX_METRICS_BYTES,
        MetricsFormat::DshSessionJsonl => MAX_TRANSCRIPT_BYTES,
    };
    let read = read_metrics(def, rel, ws, state, cap);
    if let Ok(bytes) = &read {
        match format {
            MetricsFormat::EvalJson => {
                report.artifacts.agent_metrics =
                    store_bytes(store, "the harness's metrics", bytes, seen);
            }
            MetricsFormat::DshSessionJsonl => {
                report.artifacts.transcript =
                    store_bytes(store, "the harness's transcript", bytes, seen);
            }
        }
    }
    if let Err(e) = &read
        && e.is_host_fault()
    {
        seen.leftover("the harness's metrics", e);
    }
    let proxy = (report.model_turns, report.tokens.total());
    let (accounting, harness) = account(format, read, proxy);
    seen.obs.accounting = accounting;
    report.accounting = Some(seen.obs.accounting.as_str().to_owned());
    report.harness = harness;
    if def.metrics_root == MetricsRoot::Workspace
        && let Some(top) = bookkeeping_root(rel)
        && let Err(e) = ws.remove(&top)
    {
        seen.leftover("removing the harness's bookkeeping", &e);
    }
}

/// The declared metrics file at `rel`. Under `metrics_root = "state"` it is outside the
/// workspace, found at the definition's fixed depth by the controller itself (no wrapper moves
/// it), so a killed container's transcript is read as far as the harness flushed it; with
/// `metrics_sessions`, the child sessions beside it are read too ([`read_sessions`]).
fn read_metrics(
    def: &RuntimeDef,
    rel: &str,
    ws: &Beneath,
    state: Option<&Path>,
    cap: u64,
) -> Result<Vec<u8>, LeftoverError> {
    match (def.metrics_root, state) {
        (MetricsRoot::Workspace, _) => ws.read_file(rel, cap),
        (MetricsRoot::State, Some(dir)) => {
            let st = Beneath::open(dir)?;
            match &def.metrics_sessions {
                None => st.read_found(rel, MAX_STATE_ENTRIES, cap),
                Some(all) => read_sessions(&st, rel, all, cap),
            }
        }
        (MetricsRoot::State, None) => Err(LeftoverError::NotFound { path: rel.into() }),
    }
}

/// Every session file of the attempt (`metrics_sessions`): the root, which `root` must find
/// exactly once, then each child session in path order, all within `cap` bytes together. The
/// result is one transcript: the files concatenated, each starting with its own `session` header
/// line (a newline added after a file the harness left without one), so the stored artifact is
/// recounted by the same rule ([`dsh_transcript_counts`]).
fn read_sessions(st: &Beneath, root: &str, all: &str, cap: u64) -> Result<Vec<u8>, LeftoverError> {
    let files = st.read_found_all(all, MAX_STATE_ENTRIES, cap)?;
    let (roots, children): (Vec<_>, Vec<_>) = files
        .into_iter()
        .partition(|(path, _)| eval_runtimes::definition::metrics_pattern_matches(root, path));
    if roots.len() > 1 {
        return Err(LeftoverError::BadPath {
            path: root.into(),
            reason: "more than one entry matches a `*` component",
        });
    }
    let Some((_, mut out)) = roots.into_iter().next() else {
        return Err(LeftoverError::NotFound { path: root.into() });
    };
    for (_, bytes) in children {
        if !out.is_empty() && !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.extend_from_slice(&bytes);
    }
    Ok(out)
}

/// The cross-check of what was read against the proxy's (turns, tokens).
pub(super) fn account(
    format: MetricsFormat,
    read: Result<Vec<u8>, LeftoverError>,
    proxy: (u64, u64),
) -> (Accounting, Option<HarnessAccount>) {
    let bytes = match read {
        Ok(b) => b,
        Err(LeftoverError::NotFound { .. }) => return (Accounting::MetricsMissing, None),
        Err(e) => return (Accounting::MetricsUnreadable(e.to_string()), None),
    };
    let counted = match format {
        MetricsFormat::EvalJson => eval_json_counts(&bytes),
        MetricsFormat::DshSessionJsonl => dsh_transcript_counts(&bytes),
    };
    let (turns, total) = match counted {
        Ok(c) => c,
        Err(e) => return (Accounting::MetricsUnreadable(e), None),
    };
    let harness = HarnessAccount {
        model_turns: turns,
        total_tokens: total,
    };
    match accounting_mismatch((turns, total), proxy) {
        Some(why) => (Accounting::Mismatch(why), Some(harness)),
        None => (Accounting::Matched, Some(harness)),
    }
}

/// eval's own metrics object: (`model_turns`, `total_tokens`).
fn eval_json_counts(bytes: &[u8]) -> Result<(u64, u64), String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let count = |field: &str| {
        v.get(field)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{field} is not a count"))
    };
    Ok((count("model_turns")?, count("total_tokens")?))
}

/// The DeepSeek Harness transcript: every `assistant/chunk` record whose chunk is a usage chunk
/// is one model call of the agent loop. Its tokens are the Harness's billed total: its counts are
/// disjoint (dsh `TokenUsage`: `inputTokens` = prompt − cache hits), so billed input is
/// `inputTokens + cacheReadTokens + cacheWriteTokens`, and `reasoningTokens` is already inside
/// `outputTokens` (never added) — the same total as the proxy's `prompt_tokens +
/// completion_tokens`. The Harness writes a usage chunk only when a stream reached `[DONE]`, which
/// is the proxy's rule for a turn too (a cut call is counted apart on both sides). Packed chunk
/// rows (`text-chunks`, …; `packChunks: true`) are deltas, never usage, and are skipped like
/// every other record, but every line must be a JSON object and every usage chunk must carry
/// both counts (the optional ones, when present, must be counts): a transcript the agent
/// tampered into another shape is unreadable, never read as "no calls".
///
/// A transcript may hold several sessions (the root and its children, [`read_sessions`]), each
/// from its `session` header line on. A forked child (`subagent_fork`) starts with a copy of its
/// parent's history: its header's `seedLength` counts those inherited events (seq 0 to
/// seedLength − 1, dsh `SessionHeader`), whose usage chunks are the parent's calls, already
/// counted in the parent's file, so they are skipped.
fn dsh_transcript_counts(bytes: &[u8]) -> Result<(u64, u64), String> {
    let mut turns: u64 = 0;
    let mut total: u64 = 0;
    // Events of the current session inherited from its parent.
    let mut seed: u64 = 0;
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let n = i + 1;
        let rec: Value =
            serde_json::from_slice(line).map_err(|e| format!("line {n} is not JSON: {e}"))?;
        if !rec.is_object() {
            return Err(format!("line {n} is not a JSON object"));
        }
        if rec["type"] == "session" {
            seed = match &rec["seedLength"] {
                Value::Null => 0,
                v => v.as_u64().ok_or_else(|| {
                    format!("line {n}: the session header's seedLength is not a count")
                })?,
            };
            continue;
        }
        if rec["type"] != "assistant/chunk" || rec["data"]["chunk"]["type"] != "usage" {
            continue;
        }
        if seed > 0 {
            let seq = rec["seq"]
                .as_u64()
                .ok_or_else(|| format!("line {n}: a usage chunk of a seeded session has no seq"))?;
            if seq < seed {
                continue;
            }
        }
        let usage = &rec["data"]["chunk"]["usage"];
        let count = |field: &str| {
            usage[field]
                .as_u64()
                .ok_or_else(|| format!("line {n}: the usage chunk's {field} is not a count"))
        };
        let optional = |field: &str| match &usage[field] {
            Value::Null => Ok(0),
            v => v
                .as_u64()
                .ok_or_else(|| format!("line {n}: the usage chunk's {field} is not a count")),
        };
        let (input, output) = (count("inputTokens")?, count("outputTokens")?);
        let (read, write) = (optional("cacheReadTokens")?, optional("cacheWriteTokens")?);
        // Checked like the others, never added: it is a part of `outputTokens`.
        optional("reasoningTokens")?;
        turns += 1;
        total = [input, read, write, output]
            .into_iter()
            .try_fold(total, u64::checked_add)
            .ok_or_else(|| format!("line {n}: token counts overflow"))?;
    }
    Ok((turns, total))
}

/// The top directory (or file) of the metrics path: the harness's bookkeeping, removed before
/// grading. `None` for a path that is not a plain relative one (nothing is removed then).
fn bookkeeping_root(rel: &str) -> Option<String> {
    match Path::new(rel).components().next() {
        Some(Component::Normal(c)) => c.to_str().map(str::to_owned),
        _ => None,
    }
}

/// The accounting cross-check: the harness's own (turns, tokens) must equal the proxy's meter.
pub fn accounting_mismatch(harness: (u64, u64), proxy: (u64, u64)) -> Option<String> {
    (harness != proxy).then(|| {
        format!(
            "the harness reports {} model turns and {} tokens, the proxy metered {} and {}",
            harness.0, harness.1, proxy.0, proxy.1
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn accounting_must_match_exactly() {
        assert_eq!(accounting_mismatch((3, 1200), (3, 1200)), None);
        let why = accounting_mismatch((3, 1200), (4, 1200)).unwrap();
        assert!(
            why.contains("3 model turns") && why.contains("metered 4"),
            "{why}"
        );
        assert!(accounting_mismatch((3, 1199), (3, 1200)).is_some());
    }

    #[test]
    fn a_declared_metrics_file_must_be_there_and_well_formed() {
        let ok = br#"{"model_turns": 2, "total_tokens": 30}"#.to_vec();
        let j = MetricsFormat::EvalJson;
        let (a, h) = account(j, Ok(ok.clone()), (2, 30));
        assert_eq!(a, Accounting::Matched);
        assert_eq!(h.map(|h| (h.model_turns, h.total_tokens)), Some((2, 30)));
        let (a, _) = account(j, Ok(ok), (3, 30));
        assert!(matches!(a, Accounting::Mismatch(_)), "{a:?}");
        let missing = LeftoverError::NotFound { path: "m".into() };
        assert_eq!(
            account(j, Err(missing), (0, 0)).0,
            Accounting::MetricsMissing
        );
        let fifo = LeftoverError::NotRegular {
            path: "m".into(),
            kind: "fifo",
        };
        let (a, h) = account(j, Err(fifo), (0, 0));
        assert_eq!(a.as_str(), "metrics_unreadable");
        assert!(h.is_none());
        // Absent counts are not zeros: they fail the cross-check even when the proxy saw none.
        let (a, _) = account(j, Ok(br#"{"model_turns": 0}"#.to_vec()), (0, 0));
        assert_eq!(a.as_str(), "metrics_unreadable", "{a:?}");
        let (a, _) = account(j, Ok(b"not json".to_vec()), (0, 0));
        assert_eq!(a.as_str(), "metrics_unreadable");
    }

    /// A usage chunk as the Harness writes it (runtimes/images/dsh smoke, 0.1.0-rc.8).
    fn usage_line(seq: u64, input: u64, output: u64) -> String {
        format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":1,"data":{{"turn":1,"step":{seq},"chunk":{{"type":"usage","usage":{{"inputTokens":{input},"outputTokens":{output}}}}}}}}}"#
        )
    }

    #[test]
    fn the_dsh_transcript_sums_its_usage_chunks_only() {
        let d = MetricsFormat::DshSessionJsonl;
        // The assistant/message record repeats the same usage: counting it too would double.
        let transcript = [
            r#"{"type":"session","version":1,"id":"s","cwd":"/workspace"}"#.to_owned(),
            r#"{"type":"assistant/chunk","seq":2,"data":{"chunk":{"type":"text-delta","text":"hi"}}}"#.to_owned(),
            usage_line(3, 1003, 11),
            r#"{"type":"assistant/message","seq":4,"data":{"message":{"role":"assistant"},"usage":{"inputTokens":1003,"outputTokens":11}}}"#.to_owned(),
            String::new(),
            usage_line(5, 1036, 16),
        ]
        .join("\n");
        let (a, h) = account(
            d,
            Ok(transcript.clone().into_bytes()),
            (2, 1003 + 11 + 1036 + 16),
        );
        assert_eq!(a, Accounting::Matched, "{a:?}");
        assert_eq!(h.map(|h| (h.model_turns, h.total_tokens)), Some((2, 2066)));
        // One call the proxy metered and the transcript lacks (a title call left on): mismatch.
        let (a, h) = account(d, Ok(transcript.into_bytes()), (3, 2066 + 1049));
        assert!(matches!(a, Accounting::Mismatch(_)), "{a:?}");
        assert_eq!(h.map(|h| h.model_turns), Some(2));
        // An empty transcript is zero calls, which only matches a proxy that saw none.
        assert_eq!(account(d, Ok(Vec::new()), (0, 0)).0, Accounting::Matched);
        assert!(matches!(
            account(d, Ok(Vec::new()), (1, 10)).0,
            Accounting::Mismatch(_)
        ));
    }

    /// A usage chunk as dsh's `mapUsage` (llm-deepseek/src/translate.ts) writes DeepSeek's usage
    /// object: `inputTokens` = prompt − hits, the hits as `cacheReadTokens`, `reasoningTokens`
    /// a part of `outputTokens`.
    fn dsh_usage_line(seq: u64, prompt: u64, hits: u64, completion: u64, reasoning: u64) -> String {
        format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":1,"data":{{"turn":1,"step":{seq},"chunk":{{"type":"usage","usage":{{"inputTokens":{},"outputTokens":{completion},"cacheReadTokens":{hits},"reasoningTokens":{reasoning}}}}}}}}}"#,
            prompt - hits
        )
    }

    /// The proxy meters DeepSeek's `prompt_tokens` (hits included) + `completion_tokens`
    /// (reasoning included); the Harness's disjoint counts add up to the same billed total.
    #[test]
    fn cache_hits_and_reasoning_count_as_the_harness_bills_them() {
        let d = MetricsFormat::DshSessionJsonl;
        // DEEPSEEK-WIRE.md's documented usage object, then a call hitting almost all of it.
        let t = [
            dsh_usage_line(1, 283, 256, 69, 24),
            dsh_usage_line(2, 420, 384, 51, 0),
        ]
        .join("\n");
        let billed = 283 + 69 + 420 + 51;
        let (a, h) = account(d, Ok(t.clone().into_bytes()), (2, billed));
        assert_eq!(a, Accounting::Matched, "{a:?}");
        assert_eq!(h.map(|h| h.total_tokens), Some(billed));
        // Counting the disjoint input alone (hits left out) or adding reasoning again: mismatch.
        let (a, _) = account(d, Ok(t.clone().into_bytes()), (2, billed - 256 - 384));
        assert!(matches!(a, Accounting::Mismatch(_)), "{a:?}");
        let (a, _) = account(d, Ok(t.into_bytes()), (2, billed + 24));
        assert!(matches!(a, Accounting::Mismatch(_)), "{a:?}");
        // Cache writes (Anthropic-style providers) are billed input too.
        let w = r#"{"type":"assistant/chunk","data":{"chunk":{"type":"usage","usage":{"inputTokens":10,"outputTokens":5,"cacheWriteTokens":7}}}}"#;
        assert_eq!(
            account(d, Ok(w.as_bytes().to_vec()), (1, 22)).0,
            Accounting::Matched
        );
        // An optional count that is not a count is tampering.
        let bad = r#"{"type":"assistant/chunk","data":{"chunk":{"type":"usage","usage":{"inputTokens":10,"outputTokens":5,"cacheReadTokens":"7"}}}}"#;
        let (a, _) = account(d, Ok(bad.as_bytes().to_vec()), (1, 22));
        assert!(
            matches!(&a, Accounting::MetricsUnreadable(m) if m.contains("cacheReadTokens")),
            "{a:?}"
        );
    }

    /// A transcript of a real-sized attempt as dsh writes it with `packChunks: true`
    /// (core/session/src/chunk-rows.ts): per call a user/tool record, one packed reasoning row
    /// and one packed text row (one entry per token delta, `dt` gaps), the usage and finish
    /// chunks one per line, and the `assistant/message` repeating the whole text.
    fn real_sized_transcript(calls: u64, tokens_per_call: u64, packed: bool) -> (Vec<u8>, u64) {
        use std::fmt::Write as _;
        let mut out = String::from(
            r#"{"type":"session","version":1,"id":"0f6c0d3e-5a1b-4c2e-9d7f-1a2b3c4d5e6f","cwd":"/workspace"}"#,
        );
        out.push('\n');
        let mut seq = 1;
        let mut billed = 0;
        let tool_result = "x".repeat(2000);
        for call in 0..calls {
            let _ = writeln!(
                out,
                r#"{{"type":"tool/result","seq":{seq},"time":1767225600000,"data":{{"turn":1,"step":{call},"content":"{tool_result}"}}}}"#
            );
            seq += 1;
            let reasoning = tokens_per_call * 3 / 4;
            let text = tokens_per_call - reasoning;
            for (kind, delta, n, index) in [
                ("reasoning", "reasoning-delta", reasoning, 0),
                ("text", "text-delta", text, 1),
            ] {
                if packed {
                    let texts = vec![r#""tok ""#; n as usize].join(",");
                    let dt = vec!["12"; n as usize - 1].join(",");
                    let _ = writeln!(
                        out,
                        r#"{{"type":"{kind}-chunks","seq0":{seq},"time0":1767225600000,"data":{{"turn":1,"step":{call},"index":{index},"dt":[{dt}],"texts":[{texts}]}}}}"#
                    );
                } else {
                    for k in 0..n {
                        let _ = writeln!(
                            out,
                            r#"{{"type":"assistant/chunk","seq":{},"time":1767225600000,"data":{{"turn":1,"step":{call},"chunk":{{"type":"{delta}","index":{index},"text":"tok "}}}}}}"#,
                            seq + k
                        );
                    }
                }
                seq += n;
            }
            let prompt = 30_000 + 500 * call;
            let hits = prompt - 400;
            out.push_str(&dsh_usage_line(
                seq,
                prompt,
                hits,
                tokens_per_call,
                reasoning,
            ));
            out.push('\n');
            billed += prompt + tokens_per_call;
            let _ = writeln!(
                out,
                r#"{{"type":"assistant/chunk","seq":{},"time":1767225600000,"data":{{"turn":1,"step":{call},"chunk":{{"type":"finish","reason":{{"kind":"tool-calls"}}}}}}}}"#,
                seq + 1
            );
            let whole = "tok ".repeat(text as usize);
            let _ = writeln!(
                out,
                r#"{{"type":"assistant/message","seq":{},"time":1767225600000,"data":{{"message":{{"role":"assistant","content":[{{"type":"reasoning","text":"{}"}},{{"type":"text","text":"{whole}"}}]}}}}}}"#,
                seq + 2,
                "tok ".repeat(reasoning as usize)
            );
            seq += 3;
        }
        (out.into_bytes(), billed)
    }

    /// The DeepSeek Harness's runtime as `eval import` writes it, with its image id filled in.
    fn dsh_runtime() -> RuntimeDef {
        let text = include_str!("../../../../runtimes/dsh/runtime.toml")
            .replace("@DSH_IMAGE_ID@", &format!("sha256:{}", "0".repeat(64)));
        RuntimeDef::parse(&text, "runtime.toml").unwrap()
    }

    /// A root session whose agent forked a child (`subagent_fork`: the child's file starts with
    /// a copy of the root's history, `seedLength` events) and spawned another (`subagent`:
    /// unseeded), each in its own `<uuid>/session.jsonl` beside the root, as dsh writes them
    /// (session-persistence-jsonl `logPath`, subagent `childSessionMeta`). The proxy metered
    /// every call of all three sessions once; the cross-check reads every file and skips the
    /// inherited copy.
    #[test]
    fn child_sessions_are_read_beside_the_root_and_their_inherited_history_is_not_recounted() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("state/--workspace--");
        let header = |id: &str, extra: &str| {
            format!(
                r#"{{"type":"session","version":1,"id":"{id}","createdAt":1767225600000,"cwd":"/workspace"{extra}}}"#
            )
        };
        let turn_end =
            |seq: u64| format!(r#"{{"type":"turn/end","seq":{seq},"time":1,"data":{{"turn":1}}}}"#);
        let a = dsh_usage_line(1, 283, 256, 69, 24);
        let files = [
            (
                "session-7f3a",
                vec![
                    header("session-7f3a", r#","delegationDepth":0"#),
                    a.clone(),
                    turn_end(2),
                    dsh_usage_line(4, 900, 640, 40, 10),
                ],
            ),
            (
                "0f6c0d3e-5a1b-4c2e-9d7f-1a2b3c4d5e6f",
                vec![
                    header(
                        "0f6c0d3e-5a1b-4c2e-9d7f-1a2b3c4d5e6f",
                        r#","parentSession":"session-7f3a","seedLength":3,"origin":"subagent","delegationDepth":1"#,
                    ),
                    a.clone(),
                    turn_end(2),
                    dsh_usage_line(4, 700, 576, 30, 5),
                ],
            ),
            (
                "9b1e2f00-1111-4222-8333-444455556666",
                vec![
                    header(
                        "9b1e2f00-1111-4222-8333-444455556666",
                        r#","parentSession":"session-7f3a","origin":"subagent","delegationDepth":1"#,
                    ),
                    dsh_usage_line(1, 120, 0, 20, 8),
                ],
            ),
        ];
        for (dir, lines) in &files {
            std::fs::create_dir_all(project.join(dir)).unwrap();
            std::fs::write(
                project.join(dir).join("session.jsonl"),
                lines.join("\n") + "\n",
            )
            .unwrap();
        }
        let ws_dir = tmp.path().join("ws");
        std::fs::create_dir(&ws_dir).unwrap();
        let ws = Beneath::open(&ws_dir).unwrap();
        let state = tmp.path().join("state");
        let def = dsh_runtime();
        let rel = def.metrics_path.clone().unwrap();
        let proxy = (4, (283 + 69) + (900 + 40) + (700 + 30) + (120 + 20));
        let read = read_metrics(&def, &rel, &ws, Some(&state), MAX_TRANSCRIPT_BYTES);
        let bytes = read.as_ref().unwrap().clone();
        let (a, h) = account(def.metrics_format, read, proxy);
        assert_eq!(a, Accounting::Matched, "{a:?}");
        assert_eq!(h.map(|h| (h.model_turns, h.total_tokens)), Some(proxy));
        // The stored transcript is the root first, then the children, each from its header on.
        assert!(
            bytes.starts_with(
                header("session-7f3a", "")
                    .split(",\"createdAt")
                    .next()
                    .unwrap()
                    .as_bytes()
            )
        );
        assert_eq!(
            bytes
                .split(|b| *b == b'\n')
                .filter(|l| l.starts_with(br#"{"type":"session""#))
                .count(),
            3
        );
        // The root alone (no `metrics_sessions`) misses the children's calls: the mismatch the
        // Harness's child sessions gave before.
        let root_only = RuntimeDef {
            metrics_sessions: None,
            ..def.clone()
        };
        let (a, _) = account(
            def.metrics_format,
            read_metrics(&root_only, &rel, &ws, Some(&state), MAX_TRANSCRIPT_BYTES),
            proxy,
        );
        assert!(matches!(a, Accounting::Mismatch(_)), "{a:?}");
        // A seeded child's usage without a seq cannot be told inherited or own: unreadable.
        let (a, _) = account(
            def.metrics_format,
            Ok(format!("{}\n{}", header("c", r#","seedLength":2"#), r#"{"type":"assistant/chunk","data":{"chunk":{"type":"usage","usage":{"inputTokens":1,"outputTokens":1}}}}"#).into_bytes()),
            (0, 0),
        );
        assert!(
            matches!(&a, Accounting::MetricsUnreadable(m) if m.contains("seq")),
            "{a:?}"
        );
        // Two roots are refused, never one picked.
        std::fs::create_dir_all(project.join("session-other")).unwrap();
        std::fs::write(project.join("session-other/session.jsonl"), b"").unwrap();
        let two = read_metrics(&def, &rel, &ws, Some(&state), MAX_TRANSCRIPT_BYTES).unwrap_err();
        assert!(two.to_string().contains("more than one"), "{two}");
    }

    /// Hundreds of calls and 240k output tokens (reasoning included) fit under the cap with
    /// packed rows and are counted right; the same attempt one delta per line would not fit,
    /// which is why the runtime's profile writes packed rows.
    #[test]
    fn a_real_sized_packed_transcript_stays_under_the_cap() {
        let (calls, per_call) = (400, 600);
        let (packed, billed) = real_sized_transcript(calls, per_call, true);
        assert!(
            (packed.len() as u64) < MAX_TRANSCRIPT_BYTES / 2,
            "{} bytes for {} output tokens",
            packed.len(),
            calls * per_call
        );
        let d = MetricsFormat::DshSessionJsonl;
        let (a, h) = account(d, Ok(packed), (calls, billed));
        assert_eq!(a, Accounting::Matched, "{a:?}");
        assert_eq!(h.map(|h| h.model_turns), Some(calls));
        let (unpacked, _) = real_sized_transcript(calls, per_call, false);
        assert!(
            unpacked.len() as u64 > MAX_TRANSCRIPT_BYTES,
            "one delta per line: {} bytes",
            unpacked.len()
        );
    }

    /// The runtime's profile patch writes packed rows (dsh's default), never one delta per line.
    #[test]
    fn the_dsh_profile_packs_chunk_rows() {
        let patch = include_str!("../../../../runtimes/dsh/profile.patch.yml");
        assert!(patch.contains("packChunks: true"), "{patch}");
        assert!(!patch.contains("packChunks: false"), "{patch}");
    }

    #[test]
    fn a_tampered_dsh_transcript_is_unreadable_not_zero() {
        let d = MetricsFormat::DshSessionJsonl;
        let cases = [
            (format!("{}\nnot json", usage_line(1, 5, 5)), "line 2 is not JSON"),
            ("[1, 2]".to_owned(), "line 1 is not a JSON object"),
            (
                r#"{"type":"assistant/chunk","data":{"chunk":{"type":"usage","usage":{"inputTokens":"5","outputTokens":1}}}}"#.to_owned(),
                "inputTokens is not a count",
            ),
            (
                r#"{"type":"assistant/chunk","data":{"chunk":{"type":"usage","usage":{"inputTokens":5}}}}"#.to_owned(),
                "outputTokens is not a count",
            ),
            (
                format!("{}\n{}", usage_line(1, u64::MAX, 0), usage_line(2, 1, 0)),
                "overflow",
            ),
        ];
        for (text, why) in cases {
            let (a, h) = account(d, Ok(text.into_bytes()), (1, 10));
            match a {
                Accounting::MetricsUnreadable(m) => assert!(m.contains(why), "{m} vs {why}"),
                other => panic!("{why}: {other:?}"),
            }
            assert!(h.is_none());
        }
        let missing = LeftoverError::NotFound { path: "t".into() };
        assert_eq!(
            account(d, Err(missing), (1, 1)).0,
            Accounting::MetricsMissing
        );
        let big = LeftoverError::TooLarge {
            path: "t".into(),
            limit: MAX_TRANSCRIPT_BYTES,
        };
        assert_eq!(
            account(d, Err(big), (1, 1)).0.as_str(),
            "metrics_unreadable"
        );
    }

    #[test]
    fn only_a_plain_relative_top_is_removed() {
        assert_eq!(
            bookkeeping_root(".eval-agent/metrics.json").as_deref(),
            Some(".eval-agent")
        );
        assert_eq!(bookkeeping_root("../x"), None);
        assert_eq!(bookkeeping_root("/etc/x"), None);
    }
}
