//! `eval show ATTEMPT`: one attempt's story, read from its run's ledger and artifact store — what
//! it was (slot, task, arm), how it ended and by which rule, every model call in order with the
//! messages it added and the reply, the Harness's tool calls, the grader's result, the artifacts.
//!
//! It reads; it does not verify the chain (that is `eval ledger verify`), but every artifact it
//! reads is checked against its digest (a mismatch exits 3). `--json` is `eval.show/1`,
//! documented in docs/show.md; its fields are only ever added to.

use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::{Entry, LedgerReader};
use eval_runlog::events;
use eval_runlog::wire_log::{self, Conversations, Reply};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// `format` of `eval show --json`.
pub const FORMAT: &str = "eval.show/1";

/// Longest message text the terminal view prints before it says how much more there is.
const TEXT_VIEW_CHARS: usize = 2_000;

/// One attempt, as `eval show --json` prints it.
#[derive(Debug, Serialize)]
pub struct AttemptView {
    pub format: &'static str,
    pub matrix: String,
    pub identity: Option<String>,
    pub fixture_evidence: bool,
    pub attempt: String,
    pub slot: String,
    pub number: u32,
    pub phase: Value,
    pub suite: String,
    pub task: String,
    pub arm: String,
    pub rep: u32,
    pub rerun_of: Option<u32>,
    pub session: u32,
    pub started_at: String,
    /// `None` while the attempt is still running (or was lost without an outcome yet).
    pub outcome: Option<OutcomeView>,
    pub model_turns: u64,
    pub tokens: eval_core::tokens::TokenCounts,
    pub spend_usd: f64,
    pub calls: Vec<CallView>,
    pub clarifications: Vec<Value>,
    /// The Harness's tool calls from its session transcript, in order (absent: no transcript).
    pub harness_tool_calls: Option<Vec<HarnessToolCall>>,
    /// The grader's `score.json` (its metrics and any per-check results it wrote).
    pub grader: Option<Value>,
    pub artifacts: Vec<ArtifactView>,
    /// Wire-log artifacts of the calls (counted, not listed: they are in each call).
    pub wire_log_artifacts: u64,
    /// A multi-round attempt's rounds, in round order (docs/rounds.md); absent (empty) for a
    /// single-round attempt, so its output is what it always was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<RoundView>,
}

/// One round of a multi-round attempt, from its `round_started` and `round_finished` entries
/// (either may be missing: a round never begun has only the latter, an open one only the former).
#[derive(Debug, Serialize)]
pub struct RoundView {
    pub round: u32,
    /// `passed`, `failed`, `unreached` (as `round_finished` says), or `open` when the round
    /// began and has no `round_finished` (the attempt is running, or was lost inside it).
    pub status: String,
    pub failures: Vec<String>,
    pub harness: Option<events::RoundHarness>,
    /// `scored`, `unscorable`, `not_run`, `unreached`; `None` while open.
    pub graded: Option<String>,
    pub detail: Option<String>,
    pub metrics: BTreeMap<String, f64>,
    /// The proxy meter's, as `round_finished` records them (`None` while open).
    pub model_turns: Option<u64>,
    pub tokens: Option<u64>,
    /// From `round_started` (`None` for a round never begun).
    pub timeout_seconds: Option<u64>,
    pub max_tokens: Option<u64>,
    pub prompt_digest: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// Ledger seqs of the two entries.
    pub started_entry: Option<u64>,
    pub finished_entry: Option<u64>,
    /// The proxy numbers (`call`) of the attempt's model calls recorded in this round: those
    /// after its `round_started` and before the next round's, in ledger order.
    pub calls: Vec<u64>,
    /// The round's `snapshot`, `grader_output`, `grader_log`, `test_output`, `reward`.
    pub artifacts: Vec<ArtifactView>,
}

/// Folds an attempt's `round_started`, `round_finished` and `model_call` entries, fed in ledger
/// order, into its rounds; each call belongs to the round whose `round_started` came last before
/// it (`eval show` and the site's attempt page both use it).
#[derive(Debug, Default)]
pub(crate) struct RoundsSeen {
    rounds: BTreeMap<u32, RoundView>,
    current: Option<u32>,
}

impl RoundsSeen {
    fn at(&mut self, k: u32) -> &mut RoundView {
        self.rounds.entry(k).or_insert_with(|| RoundView {
            round: k,
            status: "open".into(),
            failures: Vec::new(),
            harness: None,
            graded: None,
            detail: None,
            metrics: BTreeMap::new(),
            model_turns: None,
            tokens: None,
            timeout_seconds: None,
            max_tokens: None,
            prompt_digest: None,
            started_at: None,
            finished_at: None,
            started_entry: None,
            finished_entry: None,
            calls: Vec::new(),
            artifacts: Vec::new(),
        })
    }

    pub(crate) fn started(&mut self, entry: u64, s: events::RoundStarted) {
        let r = self.at(s.round);
        r.timeout_seconds = Some(s.timeout_seconds);
        r.max_tokens = s.max_tokens;
        r.prompt_digest = Some(s.prompt_digest);
        r.started_at = Some(s.started_at);
        r.started_entry = Some(entry);
        self.current = Some(s.round);
    }

    /// `sizes` gives an artifact's bytes in the store (`None`: missing).
    pub(crate) fn finished(
        &mut self,
        entry: u64,
        f: events::RoundFinished,
        sizes: impl Fn(&str) -> Option<u64>,
    ) {
        let a = &f.artifacts;
        let artifacts = [
            ("snapshot", &a.snapshot),
            ("grader_output", &a.grader_output),
            ("grader_log", &a.grader_log),
            ("test_output", &a.test_output),
            ("reward", &a.reward),
        ]
        .into_iter()
        .filter_map(|(name, d)| {
            d.as_ref().map(|d| ArtifactView {
                name: name.to_owned(),
                digest: d.clone(),
                bytes: sizes(d),
            })
        })
        .collect();
        let r = self.at(f.round);
        r.status = f.status;
        r.failures = f.failures;
        r.harness = f.harness;
        r.graded = Some(f.graded);
        r.detail = f.detail;
        r.metrics = f.metrics;
        r.model_turns = Some(f.model_turns);
        r.tokens = Some(f.tokens);
        r.finished_at = Some(f.finished_at);
        r.finished_entry = Some(entry);
        r.artifacts = artifacts;
    }

    /// Tags call `call` (the proxy's number) with the round it was recorded in; `None` before
    /// any round began (and always for a single-round attempt).
    pub(crate) fn call(&mut self, call: u64) -> Option<u32> {
        let k = self.current?;
        self.at(k).calls.push(call);
        Some(k)
    }

    /// The rounds in round order.
    pub(crate) fn into_views(self) -> Vec<RoundView> {
        self.rounds.into_values().collect()
    }
}

/// Bytes of an artifact in `store` (`None` when it is not there or `digest` is not one).
fn stored_bytes(store: &ArtifactStore, digest: &str) -> Option<u64> {
    eval_evidence::ledger::Digest::parse(digest)
        .and_then(|dg| std::fs::metadata(store.path_of(&dg)).ok())
        .map(|m| m.len())
}

#[derive(Debug, Serialize)]
pub struct OutcomeView {
    pub outcome: Value,
    pub infra_fault: Option<Value>,
    pub detail: Option<String>,
    /// The row of the classification table ("Classifying an attempt") that decided it.
    pub rule: Rule,
    pub accounting: Option<String>,
    pub closed_by_controller: bool,
    pub prepare_seconds: f64,
    pub duration_seconds: f64,
    pub container_seconds: f64,
    pub finished_at: String,
}

#[derive(Debug, Serialize, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The table's row (`"1"` … `"13"`, `"5a"`, `"5b"`), or `"resume"` for the closing rule.
    pub row: &'static str,
    pub text: &'static str,
}

#[derive(Debug, Serialize)]
pub struct CallView {
    /// The ledger seq of the `model_call` entry.
    pub entry: u64,
    /// The proxy's number of the call within the attempt (arrival order).
    pub call: u64,
    pub role: String,
    pub model: Option<String>,
    pub path: Option<String>,
    pub stream: bool,
    pub status: u16,
    pub result: String,
    pub detail: Option<String>,
    pub tokens: eval_core::tokens::TokenCounts,
    pub metered: bool,
    pub incomplete: bool,
    pub latency_ms: u64,
    pub ttfb_ms: Option<f64>,
    pub spend_usd: f64,
    pub request_digest: Option<String>,
    pub response_digest: Option<String>,
    /// The round the call was recorded in (a multi-round attempt's only; see [`RoundView`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    pub request: Option<RequestView>,
    pub reply: Option<ReplyView>,
    pub wire_log: Option<wire_log::WireNote>,
}

#[derive(Debug, Serialize)]
pub struct RequestView {
    pub messages: usize,
    /// Messages taken from an earlier request of the attempt; the rest are `new_messages`.
    pub kept: usize,
    pub new_messages: Vec<MessageView>,
    pub node: String,
}

#[derive(Debug, Serialize)]
pub struct MessageView {
    pub role: Option<String>,
    /// The text of the message (content parts' texts joined by newlines).
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<wire_log::ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_chars: Option<usize>,
    /// The message as sent.
    pub raw: Box<serde_json::value::RawValue>,
}

#[derive(Debug, Serialize)]
pub struct ReplyView {
    pub kind: String,
    pub model: Option<String>,
    pub text: String,
    pub reasoning_chars: usize,
    /// The reasoning text itself: not in `eval.show/1` (which counts it), but exports carry it.
    #[serde(skip)]
    pub reasoning: String,
    pub tool_calls: Vec<wire_log::ToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Value>,
    pub error: Option<Value>,
    pub truncated: bool,
    pub artifact: String,
}

#[derive(Debug, Serialize)]
pub struct HarnessToolCall {
    pub call_id: Option<String>,
    pub name: Option<String>,
    pub arguments: Option<String>,
    /// The result's text blocks, joined (absent: no result recorded).
    pub result: Option<String>,
    pub is_error: bool,
}

#[derive(Debug, Serialize)]
pub struct ArtifactView {
    pub name: String,
    pub digest: String,
    /// Bytes in the store (absent when the object is missing).
    pub bytes: Option<u64>,
}

/// The row of "Classifying an attempt" that decides an outcome, read back from what the receipt
/// records (the outcome, its infra code and detail); `classify` itself is the authority.
pub fn rule_of(outcome: &str, infra: Option<&str>, detail: Option<&str>) -> Rule {
    let d = detail.unwrap_or("");
    let (row, text) = match (outcome, infra) {
        (_, Some("interrupted_before_model_call")) => (
            "resume",
            "the attempt was lost before any model call (closed by rule on resume; rerun)",
        ),
        (_, Some("filesystem_capacity")) if d.contains("reading the attempt's files") => {
            ("4", "reading the agent's leftovers hit a host failure")
        }
        (_, Some("filesystem_capacity")) => (
            "1",
            "a write of the controller's own failed with ENOSPC, EDQUOT or EIO",
        ),
        (_, Some("controller_error")) => (
            "1",
            "a write of the controller's own failed (not a capacity error)",
        ),
        (_, Some("attestation_mismatch")) => {
            ("3", "the shim's attestation differs from the frozen arm")
        }
        (_, Some("oracle_service_unavailable")) => (
            "5",
            "the oracle service failed an in-bounds clarifying question",
        ),
        (_, Some("upstream_account_refused")) => (
            "5a",
            "the upstream refused the run's key or the account is out of balance",
        ),
        (_, Some("provider_unavailable")) => (
            "5b",
            "the agent exited non-zero after the provider failed its last call",
        ),
        (_, Some("host_network_outage")) => (
            "6",
            "the upstream failed before any model call was answered",
        ),
        (_, Some(_)) if d.starts_with("the grader could not run") => {
            ("7", "the grader container could not run at all")
        }
        (_, Some(_)) => (
            "2",
            "the engine failed the agent's container (or its preparation)",
        ),
        ("interrupted", None) => (
            "resume",
            "the attempt was lost after a model call (closed by rule on resume; never rerun)",
        ),
        ("timeout", None) => ("8", "the container was killed at its time limit"),
        ("contract_violation", None) => ("9", "a call outside the model contract"),
        ("budget_exhausted", None) => ("10", "a call refused over budget"),
        ("accounting_mismatch", None) => (
            "12",
            "completed, and the harness's metrics file disagrees, is missing or is unreadable",
        ),
        ("agent_error", None) if d.contains("grader") || d.contains("score.json") => {
            ("13", "the grader ran but gave no usable score")
        }
        ("agent_error", None) => ("11", "the agent exited non-zero (or without attesting)"),
        ("completed", None) => ("11", "the agent exited 0"),
        _ => ("?", "an outcome this eval does not know"),
    };
    Rule { row, text }
}

/// Why an attempt cannot be shown. The command maps it to its exit status: a missing run or
/// attempt is the caller's (2), evidence that does not read back as written is integrity (3),
/// a ledger error is classified by the ledger.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("no run of matrix {matrix:?} in {state} (no {path})")]
    NoRun {
        matrix: String,
        state: PathBuf,
        path: PathBuf,
    },
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Integrity(String),
    #[error(transparent)]
    Ledger(#[from] eval_evidence::LedgerError),
}

fn integrity(message: String) -> ViewError {
    ViewError::Integrity(message)
}

/// Reads one attempt of `matrix` in `state`. `attempt` is `<slot>#<n>`, or a slot alone (its
/// latest attempt).
pub fn build(state: &Path, matrix: &str, attempt: &str) -> Result<AttemptView, ViewError> {
    let path = eval_runlog::layout::ledger_path(state, matrix);
    if !path.exists() {
        return Err(ViewError::NoRun {
            matrix: matrix.to_owned(),
            state: state.to_path_buf(),
            path,
        });
    }
    let reader = LedgerReader::open(&path)?;
    let mut run: Option<events::RunStarted> = None;
    let mut started: Vec<events::AttemptStarted> = Vec::new();
    reader.for_each_of_kind(events::RUN_STARTED, |e| {
        if run.is_none() {
            run = serde_json::from_slice(&e.payload).ok();
        }
        ControlFlow::Continue(())
    })?;
    reader.for_each_of_kind(events::ATTEMPT_STARTED, |e| {
        if let Ok(s) = serde_json::from_slice::<events::AttemptStarted>(&e.payload)
            && (s.attempt == attempt || s.slot == attempt)
        {
            started.push(s);
        }
        ControlFlow::Continue(())
    })?;
    // A slot alone names its latest attempt.
    let Some(start) = started
        .iter()
        .find(|s| s.attempt == attempt)
        .or_else(|| started.iter().max_by_key(|s| s.number))
        .cloned()
    else {
        return Err(ViewError::Usage(format!(
            "{}: no attempt {attempt:?} (attempts are named <slot>#<n>, as `eval ledger show {} --kind attempt_started` lists them)",
            path.display(),
            path.display()
        )));
    };
    let id = start.attempt.clone();
    // Only entries naming this attempt are decoded: a byte search first, so a large ledger costs
    // a scan, not a parse of every entry.
    let needle = format!(
        "\"attempt\":{}",
        serde_json::to_string(&id).unwrap_or_default()
    );
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut mine: Vec<Entry> = Vec::new();
    reader.for_each(|e| {
        if finder.find(&e.payload).is_some() {
            mine.push(e);
        }
        ControlFlow::Continue(())
    })?;
    let store = ArtifactStore::open(&eval_runlog::layout::artifacts_dir(state, matrix))
        .map_err(|e| ViewError::Usage(e.to_string()))?;
    let mut conv = Conversations::new(&store);
    let mut calls = Vec::new();
    let mut clarifications = Vec::new();
    let mut outcome: Option<events::AttemptOutcome> = None;
    let mut wire_arts = 0u64;
    let mut rounds = RoundsSeen::default();
    for e in &mine {
        match e.kind.as_str() {
            events::MODEL_CALL => {
                let c: events::ModelCall = serde_json::from_slice(&e.payload).map_err(|err| {
                    integrity(format!(
                        "{}: entry {} is not a model_call: {err}",
                        path.display(),
                        e.seq
                    ))
                })?;
                if c.attempt != id {
                    continue;
                }
                wire_arts += c.artifacts.len() as u64;
                let round = rounds.call(c.seq);
                let mut view = call_view(&mut conv, e.seq, c)?;
                view.round = round;
                calls.push(view);
            }
            events::ROUND_STARTED => {
                if let Ok(r) = serde_json::from_slice::<events::RoundStarted>(&e.payload)
                    && r.attempt == id
                {
                    rounds.started(e.seq, r);
                }
            }
            events::ROUND_FINISHED => {
                if let Ok(r) = serde_json::from_slice::<events::RoundFinished>(&e.payload)
                    && r.attempt == id
                {
                    rounds.finished(e.seq, r, |d| stored_bytes(&store, d));
                }
            }
            events::CLARIFICATION => {
                if let Ok(v) = serde_json::from_slice::<Value>(&e.payload)
                    && v.get("attempt").and_then(Value::as_str) == Some(id.as_str())
                {
                    clarifications.push(v);
                }
            }
            events::ATTEMPT_OUTCOME => {
                if let Ok(o) = serde_json::from_slice::<events::AttemptOutcome>(&e.payload)
                    && o.attempt == id
                {
                    outcome = Some(o);
                }
            }
            _ => {}
        }
    }
    let spend_usd = calls.iter().map(|c| c.spend_usd).sum();
    let (model_turns, tokens) = match &outcome {
        Some(o) => (o.model_turns, o.tokens),
        None => {
            let mut t = eval_core::tokens::TokenCounts::default();
            for c in calls.iter().filter(|c| !c.incomplete) {
                t.input += c.tokens.input;
                t.output += c.tokens.output;
                t.cached += c.tokens.cached;
                t.reasoning += c.tokens.reasoning;
            }
            (
                calls.iter().filter(|c| c.metered && !c.incomplete).count() as u64,
                t,
            )
        }
    };
    let mut artifacts = Vec::new();
    let mut harness_tool_calls = None;
    let mut grader = None;
    if let Some(o) = &outcome {
        let a = &o.artifacts;
        for (name, d) in [
            ("workspace", &a.workspace),
            ("grader_output", &a.grader_output),
            ("agent_log", &a.agent_log),
            ("grader_log", &a.grader_log),
            ("agent_metrics", &a.agent_metrics),
            ("transcript", &a.transcript),
        ] {
            if let Some(d) = d {
                let bytes = stored_bytes(&store, d);
                artifacts.push(ArtifactView {
                    name: name.to_owned(),
                    digest: d.clone(),
                    bytes,
                });
            }
        }
        if let Some(d) = &a.transcript {
            harness_tool_calls = Some(harness_calls(&conv.get(d).map_err(integrity)?));
        }
        if let Some(d) = &a.grader_output {
            let bytes = conv.get(d).map_err(integrity)?;
            grader =
                Some(serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(&bytes).into_owned())
                }));
        }
    }
    let outcome = outcome.map(|o| {
        let oc = serde_json::to_value(o.outcome).unwrap_or(Value::Null);
        let infra = o
            .infra_fault
            .map(|f| serde_json::to_value(f).unwrap_or(Value::Null));
        let rule = rule_of(
            oc.as_str().unwrap_or(""),
            infra.as_ref().and_then(Value::as_str),
            o.detail.as_deref(),
        );
        OutcomeView {
            outcome: oc,
            infra_fault: infra,
            detail: o.detail,
            rule,
            accounting: o.accounting,
            closed_by_controller: o.closed_by_controller,
            prepare_seconds: o.prepare_seconds,
            duration_seconds: o.duration_seconds,
            container_seconds: o.container_seconds,
            finished_at: o.finished_at,
        }
    });
    Ok(AttemptView {
        format: FORMAT,
        matrix: matrix.to_owned(),
        identity: run.as_ref().map(|r| r.identity.clone()),
        fixture_evidence: run.as_ref().is_some_and(|r| r.fixture_evidence),
        attempt: id,
        slot: start.slot,
        number: start.number,
        phase: serde_json::to_value(start.phase).unwrap_or(Value::Null),
        suite: start.suite,
        task: start.task,
        arm: start.arm,
        rep: start.rep,
        rerun_of: start.rerun_of,
        session: start.session,
        started_at: start.started_at,
        outcome,
        model_turns,
        tokens,
        spend_usd,
        calls,
        clarifications,
        harness_tool_calls,
        grader,
        artifacts,
        wire_log_artifacts: wire_arts,
        rounds: rounds.into_views(),
    })
}

/// One call as `eval show` (and the report site's attempt page) reads it from the wire log.
pub fn call_view(
    conv: &mut Conversations<'_>,
    seq: u64,
    c: events::ModelCall,
) -> Result<CallView, ViewError> {
    let r = &c.record;
    let s = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
    let request = match c.artifacts.get(wire_log::names::REQUEST) {
        Some(d) => {
            let read = conv.read(d).map_err(integrity)?;
            let kept = read.node.keep;
            let new_messages = read.messages[kept.min(read.messages.len())..]
                .iter()
                .filter_map(|m| message_view(m))
                .collect();
            Some(RequestView {
                messages: read.messages.len(),
                kept,
                new_messages,
                node: d.clone(),
            })
        }
        None => None,
    };
    let reply = if let Some(d) = c.artifacts.get(wire_log::names::REPLY) {
        let bytes = conv.get(d).map_err(integrity)?;
        let reply: Reply =
            serde_json::from_slice(&bytes).map_err(|e| integrity(format!("reply {d}: {e}")))?;
        Some(reply_view(reply, d))
    } else if let Some(d) = c.artifacts.get(wire_log::names::RESPONSE) {
        Some(reply_view(
            wire_log::reply_of_body(&conv.get(d).map_err(integrity)?),
            d,
        ))
    } else {
        None
    };
    Ok(CallView {
        entry: seq,
        call: c.seq,
        role: c.role,
        model: c.model,
        path: s("path"),
        stream: r.get("stream").and_then(Value::as_bool).unwrap_or(false),
        status: c.status,
        result: c.result,
        detail: s("detail"),
        tokens: c.tokens,
        metered: c.metered,
        incomplete: r
            .get("incomplete")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        latency_ms: c.latency_ms,
        ttfb_ms: r.get("ttfb_ms").and_then(Value::as_f64),
        spend_usd: r.get("spend_usd").and_then(Value::as_f64).unwrap_or(0.0),
        request_digest: s("request_digest"),
        response_digest: s("response_digest"),
        round: None,
        request,
        reply,
        wire_log: c.wire_log,
    })
}

fn reply_view(r: Reply, artifact: &str) -> ReplyView {
    ReplyView {
        kind: r.kind,
        model: r.model,
        reasoning_chars: r.reasoning.chars().count(),
        reasoning: r.reasoning,
        text: r.text,
        tool_calls: r.tool_calls,
        finish_reason: r.finish_reason,
        usage: r.usage,
        error: r.error,
        truncated: r.truncated,
        artifact: artifact.to_owned(),
    }
}

/// Text of a message's `content`: a string, or the texts of its parts (OpenAI `text` parts,
/// Anthropic `text`/`tool_result` blocks).
fn content_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => p.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("tool_result") => Some(content_text(p.get("content"))),
                Some("tool_use") => p.get("input").map(Value::to_string),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn message_view(raw: &str) -> Option<MessageView> {
    let v: Value = serde_json::from_str(raw).ok()?;
    let tool_calls = v
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, tc)| {
            let f = tc.get("function");
            wire_log::ToolCall {
                index: i as u64,
                id: tc.get("id").and_then(Value::as_str).map(str::to_owned),
                name: f
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                arguments: f
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            }
        })
        .collect();
    Some(MessageView {
        role: v.get("role").and_then(Value::as_str).map(str::to_owned),
        text: content_text(v.get("content")),
        tool_call_id: v
            .get("tool_call_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        tool_calls,
        reasoning_chars: v
            .get("reasoning_content")
            .and_then(Value::as_str)
            .map(|r| r.chars().count()),
        raw: serde_json::value::RawValue::from_string(raw.to_owned()).ok()?,
    })
}

/// The Harness's `tool/call` and `tool/result` events (dsh's session JSONL:
/// `tool/call {callId, name, arguments}`, `tool/result {message: {content: [{type:
/// "tool-result", toolCallId, content, isError}]}}`), paired by call id, in the order called.
pub(crate) fn harness_calls(jsonl: &[u8]) -> Vec<HarnessToolCall> {
    let mut out: Vec<HarnessToolCall> = Vec::new();
    let text = String::from_utf8_lossy(jsonl);
    for line in text.lines().filter(|l| l.contains("\"tool/")) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let data = v.get("data");
        let str_at = |p: &str| {
            data.and_then(|d| d.pointer(p))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match v.get("type").and_then(Value::as_str) {
            Some("tool/call") => out.push(HarnessToolCall {
                call_id: str_at("/callId"),
                name: str_at("/name"),
                arguments: str_at("/arguments"),
                result: None,
                is_error: false,
            }),
            Some("tool/result") => {
                let block = data.and_then(|d| d.pointer("/message/content/0"));
                let id = block
                    .and_then(|b| b.get("toolCallId"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let result = block
                    .and_then(|b| b.get("content"))
                    .map(|c| content_text(Some(c)))
                    .unwrap_or_default();
                let is_error = block
                    .and_then(|b| b.get("isError"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                match out
                    .iter_mut()
                    .rev()
                    .find(|c| c.result.is_none() && c.call_id == id)
                {
                    Some(c) => {
                        c.result = Some(result);
                        c.is_error = is_error;
                    }
                    None => out.push(HarnessToolCall {
                        call_id: id,
                        name: None,
                        arguments: None,
                        result: Some(result),
                        is_error,
                    }),
                }
            }
            _ => {}
        }
    }
    out
}

struct Paint(bool);

impl Paint {
    fn bold(&self, s: &str) -> String {
        if self.0 {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
    fn dim(&self, s: &str) -> String {
        if self.0 {
            format!("\x1b[2m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
}

/// Control characters other than newline and tab are shown escaped: a model's or an agent's
/// text must not drive the reader's terminal.
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn clip(s: &str) -> String {
    let n = s.chars().count();
    if n <= TEXT_VIEW_CHARS {
        return clean(s);
    }
    let head: String = s.chars().take(TEXT_VIEW_CHARS).collect();
    format!(
        "{}… ({} more characters; --json has all)",
        clean(&head),
        n - TEXT_VIEW_CHARS
    )
}

fn indent(s: &str, by: &str) -> String {
    s.lines().map(|l| format!("{by}{l}\n")).collect()
}

pub fn render_text(v: &AttemptView, colour: bool) -> String {
    use std::fmt::Write as _;
    let p = Paint(colour);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} {}  (matrix {}{})",
        p.bold("attempt"),
        v.attempt,
        v.matrix,
        if v.fixture_evidence {
            ", FIXTURE upstream: not evidence"
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "  slot {}  suite {}  task {}  arm {}  rep {}{}  session {}",
        v.slot,
        v.suite,
        v.task,
        v.arm,
        v.rep,
        v.rerun_of
            .map(|n| format!("  rerun of #{n}"))
            .unwrap_or_default(),
        v.session
    );
    render_outcome(&mut o, &p, v);
    let _ = writeln!(
        o,
        "  turns {}  tokens in {} (cached {}) out {} (reasoning {})  spend ${:.4}",
        v.model_turns,
        v.tokens.input,
        v.tokens.cached,
        v.tokens.output,
        v.tokens.reasoning,
        v.spend_usd
    );
    if !v.rounds.is_empty() {
        render_rounds(&mut o, &p, &v.rounds);
    }
    let _ = writeln!(o, "\n{} ({})", p.bold("model calls"), v.calls.len());
    for c in &v.calls {
        render_call(&mut o, &p, c);
    }
    render_clarifications(&mut o, &p, &v.clarifications);
    render_tail(&mut o, &p, v);
    o
}

/// The attempt's outcome lines: its outcome and fault, the rule that gave it, its detail and
/// accounting, and its times; or that it has none yet.
fn render_outcome(o: &mut String, p: &Paint, v: &AttemptView) {
    use std::fmt::Write as _;
    match &v.outcome {
        Some(out) => {
            let _ = writeln!(
                o,
                "  {} {}{}",
                p.bold("outcome"),
                out.outcome.as_str().unwrap_or("?"),
                out.infra_fault
                    .as_ref()
                    .and_then(Value::as_str)
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            );
            let _ = writeln!(o, "    rule {}: {}", out.rule.row, out.rule.text);
            if let Some(d) = &out.detail {
                let _ = writeln!(o, "    detail: {}", clean(d));
            }
            if let Some(a) = &out.accounting {
                let _ = writeln!(o, "    accounting: {a}");
            }
            let _ = writeln!(
                o,
                "  started {}  finished {}  prepare {:.1}s  agent {:.1}s  containers {:.1}s{}",
                v.started_at,
                out.finished_at,
                out.prepare_seconds,
                out.duration_seconds,
                out.container_seconds,
                if out.closed_by_controller {
                    "  (closed by the controller)"
                } else {
                    ""
                }
            );
        }
        None => {
            let _ = writeln!(
                o,
                "  {} none yet (started {})",
                p.bold("outcome"),
                v.started_at
            );
        }
    }
}

/// One model call: its heading line, its detail, the new messages of its request, the wire
/// log's omissions and its reply.
fn render_call(o: &mut String, p: &Paint, c: &CallView) {
    use std::fmt::Write as _;
    let _ = writeln!(
        o,
        "{}",
        p.bold(&format!(
            "── call {}{} ({}{}) {} {}  in {} cached {} out {}  {} ms{}",
            c.call,
            c.round.map(|k| format!(" [round {k}]")).unwrap_or_default(),
            c.role,
            if c.stream { ", stream" } else { "" },
            c.status,
            c.result,
            c.tokens.input,
            c.tokens.cached,
            c.tokens.output,
            c.latency_ms,
            if c.incomplete { "  INCOMPLETE" } else { "" }
        ))
    );
    if let Some(d) = &c.detail {
        let _ = writeln!(o, "   {}", clean(d));
    }
    render_request(o, p, c.request.as_ref());
    if let Some(w) = c.wire_log.as_ref().and_then(|w| w.omitted.as_ref()) {
        let _ = writeln!(o, "   {}", p.dim(&format!("wire log: {w}")));
    }
    if let Some(r) = &c.reply {
        render_reply(o, r);
    }
}

/// A call's request as the wire log holds it: how many messages and which are new, each new
/// message's text and tool calls.
fn render_request(o: &mut String, p: &Paint, request: Option<&RequestView>) {
    use std::fmt::Write as _;
    match request {
        Some(r) => {
            let _ = writeln!(
                o,
                "   {}",
                p.dim(&format!(
                    "{} messages, {} new",
                    r.messages,
                    r.messages - r.kept
                ))
            );
            for m in &r.new_messages {
                let _ = writeln!(
                    o,
                    "   > {}{}{}",
                    m.role.as_deref().unwrap_or("?"),
                    m.tool_call_id
                        .as_ref()
                        .map(|i| format!(" (result of {i})"))
                        .unwrap_or_default(),
                    m.reasoning_chars
                        .map(|n| format!(" [reasoning {n} chars]"))
                        .unwrap_or_default()
                );
                if !m.text.is_empty() {
                    o.push_str(&indent(&clip(&m.text), "     "));
                }
                for t in &m.tool_calls {
                    let _ = writeln!(
                        o,
                        "     tool call {}({})",
                        t.name.as_deref().unwrap_or("?"),
                        clip(&t.arguments)
                    );
                }
            }
        }
        None => {
            let _ = writeln!(o, "   {}", p.dim("(no request in the wire log)"));
        }
    }
}

/// A call's reply: finish reason, reasoning and truncation, its text, tool calls and error.
fn render_reply(o: &mut String, r: &ReplyView) {
    use std::fmt::Write as _;
    let _ = writeln!(
        o,
        "   < reply{}{}{}",
        r.finish_reason
            .as_ref()
            .map(|f| format!(" ({f})"))
            .unwrap_or_default(),
        if r.reasoning_chars > 0 {
            format!(" [reasoning {} chars]", r.reasoning_chars)
        } else {
            String::new()
        },
        if r.truncated { " TRUNCATED" } else { "" }
    );
    if !r.text.is_empty() {
        o.push_str(&indent(&clip(&r.text), "     "));
    }
    for t in &r.tool_calls {
        let _ = writeln!(
            o,
            "     tool call {}({})",
            t.name.as_deref().unwrap_or("?"),
            clip(&t.arguments)
        );
    }
    if let Some(e) = &r.error {
        let _ = writeln!(o, "     error: {}", clip(&e.to_string()));
    }
}

/// The clarifying questions section (nothing when the attempt asked none), with a stateful
/// oracle's record of each question.
fn render_clarifications(o: &mut String, p: &Paint, clarifications: &[Value]) {
    use std::fmt::Write as _;
    if !clarifications.is_empty() {
        let _ = writeln!(
            o,
            "\n{} ({})",
            p.bold("clarifying questions"),
            clarifications.len()
        );
        for c in clarifications {
            let q = c.get("question").and_then(Value::as_str).unwrap_or("");
            let a = c
                .get("answer")
                .and_then(Value::as_str)
                .unwrap_or("(refused)");
            let _ = writeln!(o, "  ? {}\n    {}", clip(q), clip(a));
            // A stateful oracle's record: what the question triggered, by digest.
            if let Some(turn) = c.get("turn") {
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("-");
                let recorded = c.get("recorded").map_or("-".to_owned(), Value::to_string);
                let _ = writeln!(
                    o,
                    "    turn {turn} {}: question {} reply {} recorded {}",
                    s("source"),
                    s("question_sha256"),
                    s("reply_sha256"),
                    clip(&recorded)
                );
            }
        }
    }
}

/// The closing sections: the harness's tool calls, the grader's result and the artifacts.
fn render_tail(o: &mut String, p: &Paint, v: &AttemptView) {
    use std::fmt::Write as _;
    if let Some(calls) = &v.harness_tool_calls {
        let _ = writeln!(o, "\n{} ({})", p.bold("harness tool calls"), calls.len());
        for t in calls {
            let _ = writeln!(
                o,
                "  {}({}){}",
                t.name.as_deref().unwrap_or("?"),
                clip(t.arguments.as_deref().unwrap_or("")),
                if t.is_error { "  ERROR" } else { "" }
            );
            if let Some(r) = &t.result {
                o.push_str(&indent(&clip(r), "    = "));
            }
        }
    }
    if let Some(g) = &v.grader {
        let _ = writeln!(o, "\n{}", p.bold("grader"));
        let _ = writeln!(o, "  {}", clip(&g.to_string()));
    }
    let _ = writeln!(o, "\n{}", p.bold("artifacts"));
    for a in &v.artifacts {
        let _ = writeln!(
            o,
            "  {:<14} {}  {}",
            a.name,
            a.digest,
            a.bytes
                .map(|b| format!("{b} bytes"))
                .unwrap_or_else(|| "MISSING".into())
        );
    }
    let _ = writeln!(
        o,
        "  wire log: {} artifacts over {} calls",
        v.wire_log_artifacts,
        v.calls.len()
    );
}

/// The rounds section of the text view: a line per round (status, why it failed, how its
/// harness ended, its grade, turns, tokens, calls), then its metrics and artifacts.
fn render_rounds(o: &mut String, p: &Paint, rounds: &[RoundView]) {
    use std::fmt::Write as _;
    let _ = writeln!(o, "\n{} ({})", p.bold("rounds"), rounds.len());
    for r in rounds {
        let harness = match &r.harness {
            None => "-".to_owned(),
            Some(h) => format!(
                "{}{}{}{}",
                h.exit.map(|e| format!("exit {e}")).unwrap_or_default(),
                h.signal.map(|s| format!(" signal {s}")).unwrap_or_default(),
                if h.timed_out { " timed out" } else { "" },
                if h.with_container {
                    " (with the container)"
                } else {
                    ""
                }
            )
            .trim()
            .to_owned(),
        };
        let opt = |n: Option<u64>| n.map_or("-".to_owned(), |n| n.to_string());
        let _ = writeln!(
            o,
            "  round {} {}{}  harness {}  graded {}  turns {}  tokens {}  calls {}",
            r.round,
            p.bold(&r.status),
            if r.failures.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.failures.join(", "))
            },
            if harness.is_empty() { "-" } else { &harness },
            r.graded.as_deref().unwrap_or("-"),
            opt(r.model_turns),
            opt(r.tokens),
            if r.calls.is_empty() {
                "-".to_owned()
            } else {
                r.calls
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }
        );
        if let Some(d) = &r.detail {
            let _ = writeln!(o, "    detail: {}", clean(d));
        }
        if !r.metrics.is_empty() {
            let m: Vec<String> = r.metrics.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(o, "    metrics {}", clean(&m.join(" ")));
        }
        for a in &r.artifacts {
            let _ = writeln!(
                o,
                "    {:<14} {}  {}",
                a.name,
                a.digest,
                a.bytes
                    .map(|b| format!("{b} bytes"))
                    .unwrap_or_else(|| "MISSING".into())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_table_row_is_named() {
        assert_eq!(rule_of("timeout", None, None).row, "8");
        assert_eq!(rule_of("completed", None, None).row, "11");
        assert_eq!(
            rule_of("agent_error", None, Some("score.json: missing")).row,
            "13"
        );
        assert_eq!(
            rule_of("infra_fault", Some("host_network_outage"), None).row,
            "6"
        );
        assert_eq!(
            rule_of(
                "infra_fault",
                Some("container_runtime_failure"),
                Some("the grader could not run: x")
            )
            .row,
            "7"
        );
        assert_eq!(
            rule_of("infra_fault", Some("interrupted_before_model_call"), None).row,
            "resume"
        );
    }

    /// A hand-built ledger: a 3-round attempt (round 2 over budget with `stop`, so round 3 is
    /// unreached) whose calls fall before, between and after the round entries, beside a
    /// single-round attempt whose view has no rounds at all.
    #[test]
    fn each_round_and_each_call_of_a_multi_round_attempt_are_shown_by_ledger_order() {
        use eval_evidence::ledger::{LedgerWriter, NewEntry};
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path();
        let ledger = eval_runlog::layout::ledger_path(state, "demo");
        std::fs::create_dir_all(ledger.parent().unwrap()).unwrap();
        let store =
            ArtifactStore::open(&eval_runlog::layout::artifacts_dir(state, "demo")).unwrap();
        let snap = store
            .put_bytes(b"round one's workspace")
            .unwrap()
            .to_string();
        let w = LedgerWriter::open(&ledger).unwrap();
        let put = |kind: &str, v: Value| {
            w.append_blocking(NewEntry::new(kind, &v).unwrap()).unwrap();
        };
        let started = |a: &str, slot: &str| {
            serde_json::json!({"schema": 1, "attempt": a, "slot": slot, "number": 1,
                "phase": "statistical", "suite": "evocode", "task": "t", "arm": "x", "rep": 1,
                "rerun_of": null, "session": 1, "started_at": "2026-01-01T00:00:00Z"})
        };
        let call = |a: &str, seq: u64, tokens: u64| {
            serde_json::to_value(events::ModelCall {
                schema: 1,
                attempt: a.into(),
                role: "agent".into(),
                seq,
                model: Some("m".into()),
                status: 200,
                result: "ok".into(),
                tokens: eval_core::tokens::TokenCounts {
                    input: tokens,
                    ..Default::default()
                },
                metered: true,
                latency_ms: 1,
                record: serde_json::json!({}),
                artifacts: BTreeMap::new(),
                wire_log: None,
            })
            .unwrap()
        };
        let round_started = |k: u32, max: Option<u64>| {
            serde_json::to_value(events::RoundStarted {
                schema: 1,
                attempt: "m#1".into(),
                round: k,
                rounds: 3,
                timeout_seconds: 300,
                max_tokens: max,
                prompt_digest: format!("sha256:{k}"),
                started_at: format!("t{k}"),
            })
            .unwrap()
        };
        let finished = |k: u32, status: &str, graded: &str, turns: u64, tokens: u64| {
            let mut f = events::RoundFinished {
                schema: 1,
                attempt: "m#1".into(),
                round: k,
                status: status.into(),
                failures: Vec::new(),
                harness: None,
                graded: graded.into(),
                detail: None,
                metrics: BTreeMap::new(),
                model_turns: turns,
                tokens,
                artifacts: RoundArtifacts::default(),
                finished_at: format!("f{k}"),
            };
            match k {
                1 => {
                    f.harness = Some(events::RoundHarness {
                        exit: Some(0),
                        ..Default::default()
                    });
                    f.metrics.insert("score".into(), 100.0);
                    f.artifacts.snapshot = Some(snap.clone());
                    f.artifacts.grader_log = Some(format!("sha256:{}", "0".repeat(64)));
                }
                2 => {
                    f.failures = vec!["over_budget".into()];
                    f.harness = Some(events::RoundHarness {
                        exit: None,
                        signal: Some(9),
                        timed_out: true,
                        with_container: false,
                    });
                    f.detail = Some("no score.json".into());
                }
                _ => {}
            }
            serde_json::to_value(f).unwrap()
        };
        use events::RoundArtifacts;
        put(events::ATTEMPT_STARTED, started("m#1", "m"));
        put(events::ATTEMPT_STARTED, started("s#1", "s"));
        put(events::ROUND_STARTED, round_started(1, None));
        put(events::MODEL_CALL, call("m#1", 1, 10));
        put(events::MODEL_CALL, call("s#1", 1, 99));
        put(events::MODEL_CALL, call("m#1", 2, 20));
        put(
            events::ROUND_FINISHED,
            finished(1, "passed", "scored", 2, 30),
        );
        put(events::ROUND_STARTED, round_started(2, Some(50)));
        put(events::MODEL_CALL, call("m#1", 3, 70));
        put(
            events::ROUND_FINISHED,
            finished(2, "failed", "unscorable", 1, 70),
        );
        put(
            events::ROUND_FINISHED,
            finished(3, "unreached", "unreached", 0, 0),
        );
        w.close();

        let v = build(state, "demo", "m#1").unwrap();
        let calls: Vec<(u64, Option<u32>)> = v.calls.iter().map(|c| (c.call, c.round)).collect();
        assert_eq!(calls, [(1, Some(1)), (2, Some(1)), (3, Some(2))]);
        let j = serde_json::to_value(&v).unwrap();
        let r = j["rounds"].as_array().unwrap();
        assert_eq!(r.len(), 3, "{j:#}");
        assert_eq!(j["calls"][2]["round"], 2);
        let r1 = &r[0];
        assert_eq!(r1["round"], 1);
        assert_eq!(r1["status"], "passed");
        assert_eq!(r1["harness"]["exit"], 0);
        assert_eq!(r1["graded"], "scored");
        assert_eq!(r1["metrics"]["score"], 100.0);
        assert_eq!(r1["model_turns"], 2);
        assert_eq!(r1["tokens"], 30);
        assert_eq!(r1["calls"], serde_json::json!([1, 2]));
        assert_eq!(r1["prompt_digest"], "sha256:1");
        assert_eq!(r1["started_entry"], 3);
        assert_eq!(r1["finished_entry"], 7);
        assert_eq!(r1["artifacts"][0]["name"], "snapshot");
        assert_eq!(r1["artifacts"][0]["digest"], snap.as_str());
        assert_eq!(r1["artifacts"][0]["bytes"], 21);
        assert_eq!(r1["artifacts"][1]["name"], "grader_log");
        assert_eq!(r1["artifacts"][1]["bytes"], Value::Null, "not in the store");
        let r2 = &r[1];
        assert_eq!(r2["status"], "failed");
        assert_eq!(r2["failures"], serde_json::json!(["over_budget"]));
        assert_eq!(r2["harness"]["signal"], 9);
        assert_eq!(r2["harness"]["timed_out"], true);
        assert_eq!(r2["max_tokens"], 50);
        assert_eq!(r2["calls"], serde_json::json!([3]));
        assert_eq!(r2["detail"], "no score.json");
        let r3 = &r[2];
        assert_eq!(r3["status"], "unreached");
        assert_eq!(r3["harness"], Value::Null);
        assert_eq!(r3["started_entry"], Value::Null);
        assert_eq!(r3["calls"], serde_json::json!([]));
        let t = render_text(&v, false);
        assert!(t.contains("\nrounds (3)\n"), "{t}");
        assert!(
            t.contains(
                "  round 1 passed  harness exit 0  graded scored  turns 2  tokens 30  calls 1,2\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("  round 2 failed (over_budget)  harness signal 9 timed out  graded unscorable  turns 1  tokens 70  calls 3\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "  round 3 unreached  harness -  graded unreached  turns 0  tokens 0  calls -\n"
            ),
            "{t}"
        );
        assert!(t.contains("    metrics score=100\n"), "{t}");
        assert!(t.contains("── call 3 [round 2] (agent)"), "{t}");

        // The single-round attempt beside it: no `rounds`, no call's `round`, no text section.
        let s = build(state, "demo", "s#1").unwrap();
        let j = serde_json::to_value(&s).unwrap();
        assert!(j.get("rounds").is_none(), "{j:#}");
        assert!(j["calls"][0].get("round").is_none(), "{j:#}");
        let t = render_text(&s, false);
        assert!(!t.contains("round"), "{t}");
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(clean("a\x1b[2Jb\nc"), "a\\u{1b}[2Jb\nc");
    }

    #[test]
    fn harness_results_pair_with_their_calls_in_order() {
        let jsonl = [
            r#"{"type":"tool/call","seq":3,"data":{"turn":1,"step":1,"callId":"a","name":"bash","arguments":"{\"cmd\":\"ls\"}"}}"#,
            r#"{"type":"tool/call","seq":4,"data":{"turn":1,"step":1,"callId":"b","name":"read","arguments":"{}"}}"#,
            r#"{"type":"tool/result","seq":5,"data":{"turn":1,"step":1,"message":{"role":"user","content":[{"type":"tool-result","toolCallId":"b","content":[{"type":"text","text":"B"}]}]}}}"#,
            r#"{"type":"tool/result","seq":6,"data":{"turn":1,"step":1,"message":{"role":"user","content":[{"type":"tool-result","toolCallId":"a","content":[{"type":"text","text":"A"}],"isError":true}]}}}"#,
        ]
        .join("\n");
        let calls = harness_calls(jsonl.as_bytes());
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name.as_deref(), Some("bash"));
        assert_eq!(calls[0].result.as_deref(), Some("A"));
        assert!(calls[0].is_error);
        assert_eq!(calls[1].result.as_deref(), Some("B"));
    }
}
