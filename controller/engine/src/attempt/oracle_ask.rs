//! What an oracle question and its answer are, apart from asking: the ask and its failures, the
//! stateful reply format, the records and metrics of the questions, the request body. The control
//! plane (which receives the agent's questions) and the oracle (which asks the model) both import
//! it, so neither imports the other's caller.

use eval_protocols::TaskBundle;
use eval_protocols::task::{OracleConstraints, ReplyFormat, StatefulOracle, dotted};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// Why the oracle model gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum OracleFailure {
    /// The upstream answered 4xx (not 429): the question itself was refused (the agent's doing).
    Refused(String),
    /// Transport, 5xx/429, a reply without text, the proxy not running: the service's doing.
    Unavailable(String),
}

impl std::fmt::Display for OracleFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OracleFailure::Refused(w) | OracleFailure::Unavailable(w) => f.write_str(w),
        }
    }
}

/// How to ask the oracle model: a request body without messages, and the task's brief.
#[derive(Clone)]
pub(super) struct OracleAsk {
    pub(super) template: Value,
    pub(super) anthropic: bool,
    pub(super) brief: String,
    /// Set for a stateful oracle (`answered_by = "stateful"`): its system message and reply
    /// format; the conversation itself is the attempt's ([`super::control::AttemptControl`]).
    pub(super) stateful: Option<Stateful>,
}

/// A stateful oracle of one task, as the attempt asks it.
#[derive(Clone, Debug)]
pub(super) struct Stateful {
    /// The whole system message: the frozen prompt, the heading, the brief (ICAE's
    /// `build_system_prompt`).
    pub(super) system: String,
    pub(super) spec: StatefulOracle,
}

/// What a stateful oracle's reply gave: the answer for the agent, the recorded field, and
/// why the reply was malformed (then the answer is the task's fallback).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ParsedReply {
    pub(super) answer: String,
    pub(super) recorded: Option<Value>,
    pub(super) malformed: Option<String>,
    /// The answer is the fallback: the reply was malformed.
    pub(super) fallback: bool,
}

/// ICAE's system message (`user_agent.py`, `build_system_prompt`): the prompt, a blank line,
/// the heading, the brief (fenced when the task says), a final newline.
pub(super) fn stateful_system(prompt: &str, brief: &str, st: &StatefulOracle) -> String {
    match &st.brief_fence {
        Some(info) => format!(
            "{prompt}\n\n{}\n```{info}\n{brief}\n```\n",
            st.brief_heading
        ),
        None => format!("{prompt}\n\n{}\n{brief}\n", st.brief_heading),
    }
}

/// Reads a stateful oracle's reply as its format says. `json` follows ICAE's `parse_reply`: the
/// text from the first `{` to the last `}` (so a fenced or prefixed object still parses) must
/// be a JSON object. Its reply field must be a string; without it the reply is malformed and the
/// agent gets the fallback. A missing record field is recorded as absent (ICAE reads a missing
/// `triggers_hit` as none) and noted, the reply still passes.
pub(super) fn parse_reply(text: &str, st: &StatefulOracle) -> ParsedReply {
    let fallback = |why: String| ParsedReply {
        answer: st.fallback_answer.clone(),
        recorded: None,
        malformed: Some(why),
        fallback: true,
    };
    if st.reply == ReplyFormat::Text {
        return ParsedReply {
            answer: text.to_owned(),
            recorded: None,
            malformed: None,
            fallback: false,
        };
    }
    let object = match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if a < b => text.get(a..=b).unwrap_or(text),
        _ => return fallback("the reply holds no JSON object".to_owned()),
    };
    let v = match serde_json::from_str::<Value>(object) {
        Ok(v) if v.is_object() => v,
        Ok(_) => return fallback("the reply is JSON but not an object".to_owned()),
        Err(e) => return fallback(format!("the reply is not JSON: {e}")),
    };
    let reply_field = st.reply_field.as_deref().unwrap_or("reply");
    let Some(answer) = dotted(&v, reply_field).and_then(Value::as_str) else {
        return fallback(format!("the reply has no string {reply_field:?}"));
    };
    let (recorded, malformed) = match st.record_field.as_deref() {
        None => (None, None),
        Some(f) => match dotted(&v, f) {
            Some(r) => (Some(r.clone()), None),
            None => (
                None,
                Some(format!("the reply has no {f:?} (recorded as absent)")),
            ),
        },
    };
    ParsedReply {
        answer: answer.to_owned(),
        recorded,
        malformed,
        fallback: false,
    }
}

/// The constraint ids no recorded field names, in the brief's order: v0.4's
/// `criticalRequirementsMissed` (ICAE `main.py`, `_calc_repo_stats`: `missed = [c for c in
/// all_constraint_ids if c not in triggered]`). A recorded value counts as the ids it holds when
/// it is an array of strings (ICAE's `triggers_hit`); anything else names none.
pub(super) fn missed_constraints(ids: &[String], recorded: &[Value]) -> Vec<String> {
    let triggered: std::collections::BTreeSet<&str> = recorded
        .iter()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    ids.iter()
        .filter(|id| !triggered.contains(id.as_str()))
        .cloned()
        .collect()
}

/// One reply's record field as kept (docs/oracle.md, "The oracle's own record"): the model
/// that fills it reads the agent's question verbatim, so an injected question can make it name
/// anything. Kept: the strings that are ids of the brief, each once, at most `cap`, in the
/// reply's order; the rest is returned as given, to be recorded as dropped. A value that is not
/// an array keeps nothing (it named no id before either).
pub(super) fn guard_triggers(recorded: &Value, ids: &[String], cap: u32) -> (Value, Vec<Value>) {
    let Some(items) = recorded.as_array() else {
        return (json!([]), vec![recorded.clone()]);
    };
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut kept: Vec<Value> = Vec::new();
    let mut dropped = Vec::new();
    for item in items {
        let of_brief = item.as_str().is_some_and(|s| ids.iter().any(|id| id == s));
        if of_brief && !kept.contains(item) && kept.len() < cap {
            kept.push(item.clone());
        } else {
            dropped.push(item.clone());
        }
    }
    (Value::Array(kept), dropped)
}

/// The words of a run [`brief_overlap`] compares.
const QUOTE_RUN: usize = 8;

/// The share of the brief's distinct runs of [`QUOTE_RUN`] words (lowercased, split at anything
/// not alphanumeric, so JSON punctuation does not matter) that `reply` contains: 0 for an
/// answer of its own words, 1 for the brief recited. A brief shorter than a run is one run.
pub(super) fn brief_overlap(brief: &str, reply: &str) -> f64 {
    let words = |t: &str| -> Vec<String> {
        t.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let (b, r) = (words(brief), words(reply));
    let n = QUOTE_RUN.min(b.len());
    if n == 0 {
        return 0.0;
    }
    let runs: std::collections::BTreeSet<&[String]> = b.windows(n).collect();
    let quoted: std::collections::BTreeSet<&[String]> =
        r.windows(n).filter(|w| runs.contains(w)).collect();
    quoted.len() as f64 / runs.len() as f64
}

/// The attempt's oracle record (`record.json`, docs/oracle.md): every answered question's
/// `clarification` entry as recorded, and, with `[oracle.constraints]`, the brief's ids, those no
/// entry's `recorded` array names, and those without the scaffolding. One function for a run
/// (`AttemptControl::oracle_record`, from the entries it appended) and `eval regrade` (from the
/// run's ledger, `fn regrade_record`), so a regrade's grader reads the bytes the original read.
pub(crate) fn oracle_record(
    questions: &[eval_runlog::events::Clarification],
    constraints: Option<&(Vec<String>, OracleConstraints)>,
) -> Value {
    let mut record = json!({"format": 1, "questions": questions});
    if let Some((ids, c)) = constraints {
        let recorded: Vec<Value> = questions
            .iter()
            .filter_map(|q| q.recorded.clone())
            .collect();
        let missed = missed_constraints(ids, &recorded);
        let substantive: Vec<&String> = missed.iter().filter(|id| !c.is_scaffolding(id)).collect();
        record["constraints"] =
            json!({"ids": ids, "missed": missed, "missed_substantive": substantive});
    }
    record
}

/// The oracle record `eval regrade` gives a grader of a task declaring `grader_reads_record`:
/// [`oracle_record`] of the attempt's `clarification` entries in the run's ledger, with the
/// constraints read from the verified input copy's brief (`task_dir`) as a run reads them
/// (`attempt_control`: only a model's brief lists constraints). `None`: the task's grader reads
/// no record.
pub(crate) fn regrade_record(
    task: &TaskBundle,
    task_dir: &Path,
    questions: &[eval_runlog::events::Clarification],
) -> Result<Option<Value>, String> {
    let Some(o) = task.spec.oracle.as_ref().filter(|o| o.grader_reads_record) else {
        return Ok(None);
    };
    let constraints = match &o.constraints {
        Some(c) if o.answered_by != eval_protocols::task::OracleAnswerer::Scripted => {
            let brief = std::fs::read_to_string(task_dir.join(&o.answers))
                .map_err(|e| format!("{}: {e}", o.answers))?;
            let ids = c.ids(&brief).map_err(|e| format!("{}: {e}", o.answers))?;
            Some((ids, c.clone()))
        }
        _ => None,
    };
    Ok(Some(oracle_record(questions, constraints.as_ref())))
}

/// The oracle metrics of an attempt (`eval_core::budget::ORACLE_METRICS`): v0.4's raw count of
/// missed constraints, and the count without the task's declared scaffolding ids (ICAE's briefs
/// list architecture and harness ids, e.g. `ARCH001`, `HARNESS001`, `TC_*`, among the hidden
/// constraints; a question can hardly be expected to "trigger" them, so v0.4's count penalises
/// every arm for them alike and only the substantive count measures asking).
pub(super) fn oracle_metrics(
    ids: &[String],
    c: &OracleConstraints,
    recorded: &[Value],
) -> BTreeMap<String, f64> {
    let missed = missed_constraints(ids, recorded);
    let substantive = missed.iter().filter(|id| !c.is_scaffolding(id)).count();
    BTreeMap::from([
        ("oracle_constraints_missed".to_owned(), missed.len() as f64),
        (
            "oracle_constraints_missed_substantive".to_owned(),
            substantive as f64,
        ),
    ])
}

/// The line after which the oracle's system message carries the brief. Production owns it; the
/// fixture model (what `eval demo` answers with) must use the same line, which a test checks.
pub(crate) const ORACLE_BRIEF_MARKER: &str = "--- brief ---\n";

/// The oracle model's system prompt; the brief (the task's oracle file) follows the marker.
pub(super) const ORACLE_SYSTEM: &str = "You are the oracle of an evaluation task. Answer the agent's clarifying question briefly, from the brief below only; if the brief does not say, answer \"No further information.\"\n";

/// The oracle request: the template with the system message and the conversation (the
/// user/assistant turns, the new question last), in the API's shape.
pub(super) fn oracle_body(o: &OracleAsk, system: &str, turns: &[Value]) -> Value {
    let mut body = o.template.clone();
    if o.anthropic {
        body["system"] = json!(system);
        body["messages"] = json!(turns);
    } else {
        let mut messages = vec![json!({"role": "system", "content": system})];
        messages.extend(turns.iter().cloned());
        body["messages"] = json!(messages);
    }
    body
}
