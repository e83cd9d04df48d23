//! What an export needs from a run's ledger beyond what `eval show` reads for one attempt: the
//! ledger's head (an export is a derived view of the chain up to it), each attempt's
//! `attempt_started` and `attempt_outcome` entries by seq and hash, when each of its entries was
//! committed, and where its clarifications sit in ledger order. One pass over the ledger.

use crate::commands::error::CommandError;
use crate::status::Failure;
use eval_evidence::ledger::LedgerReader;
use eval_runlog::events;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// An entry named by its place in the chain and its hash.
#[derive(Clone, Debug, Serialize)]
pub struct EntryRef {
    pub seq: u64,
    pub hash: String,
}

/// One attempt's entries, as the chain holds them.
#[derive(Clone, Debug, Default)]
pub struct AttemptFacts {
    pub slot: String,
    pub number: u32,
    pub suite: String,
    pub arm: String,
    pub started: Option<EntryRef>,
    pub outcome: Option<EntryRef>,
    /// The image the agent ran in (`attempt_outcome.image`).
    pub image: Option<String>,
    /// Seqs of its `clarification` entries, in ledger order (the order `eval show` lists them).
    pub clarifications: Vec<u64>,
    /// Commit time (`recorded_at`) of each of its entries, by seq.
    pub recorded_at: BTreeMap<u64, String>,
}

/// The run as an export sees it.
pub struct RunFacts {
    pub ledger: PathBuf,
    /// `None` for an empty ledger.
    pub head: Option<EntryRef>,
    /// The run's `run_started`.
    pub run: Option<events::RunStarted>,
    /// Every attempt, by id, in `attempt_started` order (`order`).
    pub attempts: BTreeMap<String, AttemptFacts>,
    pub order: Vec<String>,
}

#[derive(Deserialize)]
struct Named {
    attempt: Option<String>,
    #[serde(default)]
    image: Option<String>,
}

/// Reads the facts of `matrix`'s run in `state` (exit 2 when there is no run).
pub fn read(state: &Path, matrix: &str) -> Result<RunFacts, Failure> {
    let path = eval_runlog::layout::ledger_path(state, matrix);
    if !path.exists() {
        return Err(CommandError::NoRun {
            matrix: matrix.to_owned(),
            state: state.to_path_buf(),
            path,
        }
        .into());
    }
    let reader = LedgerReader::open(&path)?;
    let mut facts = RunFacts {
        ledger: path,
        head: None,
        run: None,
        attempts: BTreeMap::new(),
        order: Vec::new(),
    };
    reader.for_each(|e| {
        let here = EntryRef {
            seq: e.seq,
            hash: e.hash.to_string(),
        };
        match e.kind.as_str() {
            events::RUN_STARTED if facts.run.is_none() => {
                facts.run = serde_json::from_slice(&e.payload).ok();
            }
            events::ATTEMPT_STARTED => {
                if let Ok(s) = serde_json::from_slice::<events::AttemptStarted>(&e.payload) {
                    facts.order.push(s.attempt.clone());
                    let a = facts.attempts.entry(s.attempt).or_default();
                    a.slot = s.slot;
                    a.number = s.number;
                    a.suite = s.suite;
                    a.arm = s.arm;
                    a.started = Some(here.clone());
                    a.recorded_at.insert(e.seq, e.recorded_at.clone());
                }
            }
            events::MODEL_CALL
            | events::CLARIFICATION
            | events::ATTEMPT_OUTCOME
            | events::ROUND_STARTED
            | events::ROUND_FINISHED => {
                if let Ok(Named {
                    attempt: Some(id),
                    image,
                }) = serde_json::from_slice::<Named>(&e.payload)
                    && let Some(a) = facts.attempts.get_mut(&id)
                {
                    a.recorded_at.insert(e.seq, e.recorded_at.clone());
                    match e.kind.as_str() {
                        events::CLARIFICATION => a.clarifications.push(e.seq),
                        events::ATTEMPT_OUTCOME => {
                            a.outcome = Some(here.clone());
                            a.image = image;
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        facts.head = Some(here);
        ControlFlow::Continue(())
    })?;
    Ok(facts)
}

impl RunFacts {
    /// The attempts `selection` names, as `eval show` resolves a name (`<slot>#<n>`, or a slot
    /// for its latest attempt); every attempt in ledger order when `selection` is empty.
    pub fn select(&self, selection: &[String]) -> Result<Vec<String>, Failure> {
        if selection.is_empty() {
            return Ok(self.order.clone());
        }
        let mut out: Vec<String> = Vec::new();
        for name in selection {
            let id = if self.attempts.contains_key(name) {
                Some(name.clone())
            } else {
                self.attempts
                    .iter()
                    .filter(|(_, a)| &a.slot == name)
                    .max_by_key(|(_, a)| a.number)
                    .map(|(id, _)| id.clone())
            };
            let Some(id) = id else {
                return Err(Failure::usage(format!(
                    "{}: no attempt {name:?} (attempts are named <slot>#<n>, as `eval ledger show {} --kind attempt_started` lists them)",
                    self.ledger.display(),
                    self.ledger.display()
                )));
            };
            if !out.contains(&id) {
                out.push(id);
            }
        }
        Ok(out)
    }
}

/// A file name for `attempt` (`<slot>#<n>` → `<slot>.<n>`), made safe as the site names its
/// pages (`site::safe_name`): no name reaches outside the output directory or shares another's.
pub fn file_stem(attempt: &str) -> String {
    eval_report::site::safe_name(&attempt.replace('#', "."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_stay_inside_the_output_directory() {
        assert_eq!(file_stem("stat-a-1#2"), "stat-a-1.2");
        for hostile in ["../x#1", "a/b#1", ".hidden#1"] {
            let s = file_stem(hostile);
            assert!(!s.contains('/') && !s.starts_with('.'), "{s}");
        }
        assert_ne!(file_stem("a/b#1"), file_stem("a_b#1"));
    }
}
