//! What the ledger says about each attempt, for its page: every entry that names the attempt,
//! parsed with the run's own event types (`run::events`), in ledger order.

use crate::show::{RoundView, RoundsSeen};
use eval_evidence::ledger::Entry;
use eval_runlog::events;
use std::collections::BTreeMap;

/// One attempt's entries.
#[derive(Debug, Default)]
pub struct AttemptDetail {
    /// `attempt_started`, with its ledger seq.
    pub started: Option<(u64, events::AttemptStarted)>,
    /// `attempt_outcome`, with its ledger seq.
    pub outcome: Option<(u64, events::AttemptOutcome)>,
    /// `model_call` entries in ledger order, each with its ledger seq.
    pub calls: Vec<(u64, events::ModelCall)>,
    /// Calls started (`model_call_started`) that have no `model_call`: in flight when the attempt
    /// ended (their proxy seq).
    pub unfinished_calls: Vec<u64>,
    pub clarifications: Vec<events::Clarification>,
    pub agent_events: Vec<events::AgentEvent>,
    pub notes: Vec<String>,
    pub attestation: Option<events::Attestation>,
    /// The `rerun` entry that opened this attempt, when it is a rerun.
    pub rerun: Option<events::Rerun>,
    /// A multi-round attempt's rounds in round order (`show::RoundsSeen`); empty otherwise.
    /// Their artifacts' `bytes` are not filled in here (the page asks the store).
    pub rounds: Vec<RoundView>,
    /// The round each `model_call` was recorded in, by the call's ledger seq (multi-round only).
    pub call_rounds: BTreeMap<u64, u32>,
}

/// Every attempt's entries, by attempt id (`<slot>#<n>`). Entries that do not parse as their
/// kind's type are left out here: the report's replay already judged the ledger, and the page
/// shows what the report read.
pub fn collect(entries: &[Entry]) -> BTreeMap<String, AttemptDetail> {
    let mut out: BTreeMap<String, AttemptDetail> = BTreeMap::new();
    let mut started_calls: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut rounds: BTreeMap<String, RoundsSeen> = BTreeMap::new();
    for e in entries {
        let p = &e.payload;
        match e.kind.as_str() {
            events::ATTEMPT_STARTED => {
                if let Ok(a) = serde_json::from_slice::<events::AttemptStarted>(p) {
                    let id = a.attempt.clone();
                    out.entry(id).or_default().started = Some((e.seq, a));
                }
            }
            events::ATTEMPT_OUTCOME => {
                if let Ok(o) = serde_json::from_slice::<events::AttemptOutcome>(p) {
                    let id = o.attempt.clone();
                    out.entry(id).or_default().outcome = Some((e.seq, o));
                }
            }
            events::MODEL_CALL => {
                if let Ok(c) = serde_json::from_slice::<events::ModelCall>(p) {
                    let id = c.attempt.clone();
                    let round = rounds.get_mut(&id).and_then(|r| r.call(c.seq));
                    let d = out.entry(id).or_default();
                    if let Some(k) = round {
                        d.call_rounds.insert(e.seq, k);
                    }
                    d.calls.push((e.seq, c));
                }
            }
            events::ROUND_STARTED => {
                if let Ok(r) = serde_json::from_slice::<events::RoundStarted>(p) {
                    rounds
                        .entry(r.attempt.clone())
                        .or_default()
                        .started(e.seq, r);
                }
            }
            events::ROUND_FINISHED => {
                if let Ok(r) = serde_json::from_slice::<events::RoundFinished>(p) {
                    rounds
                        .entry(r.attempt.clone())
                        .or_default()
                        .finished(e.seq, r, |_| None);
                }
            }
            events::MODEL_CALL_STARTED => {
                if let Ok(c) = serde_json::from_slice::<events::ModelCallStarted>(p) {
                    started_calls.entry(c.attempt).or_default().push(c.seq);
                }
            }
            events::CLARIFICATION => {
                if let Ok(c) = serde_json::from_slice::<events::Clarification>(p) {
                    let id = c.attempt.clone();
                    out.entry(id).or_default().clarifications.push(c);
                }
            }
            events::AGENT_EVENT => {
                if let Ok(a) = serde_json::from_slice::<events::AgentEvent>(p) {
                    let id = a.attempt.clone();
                    out.entry(id).or_default().agent_events.push(a);
                }
            }
            events::ATTEMPT_NOTE => {
                if let Ok(n) = serde_json::from_slice::<events::AttemptNote>(p) {
                    out.entry(n.attempt).or_default().notes.extend(n.notes);
                }
            }
            events::ATTESTATION => {
                if let Ok(a) = serde_json::from_slice::<events::Attestation>(p) {
                    let id = a.attempt.clone();
                    out.entry(id).or_default().attestation = Some(a);
                }
            }
            events::RERUN => {
                if let Ok(r) = serde_json::from_slice::<events::Rerun>(p) {
                    let id = r.attempt.clone();
                    out.entry(id).or_default().rerun = Some(r);
                }
            }
            _ => {}
        }
    }
    for (attempt, seen) in rounds {
        out.entry(attempt).or_default().rounds = seen.into_views();
    }
    for (attempt, seqs) in started_calls {
        let d = out.entry(attempt).or_default();
        d.unfinished_calls = seqs
            .into_iter()
            .filter(|s| !d.calls.iter().any(|(_, c)| c.seq == *s))
            .collect();
    }
    out
}
