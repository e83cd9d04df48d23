//! The interim looks a run's ledger records (`look` entries, written by `eval report --look`).

use eval_evidence::ledger::Entry;
use eval_evidence::report::looks::LookTaken;

/// The ledger entry kind of a look.
pub const LOOK: &str = "look";

/// Every look recorded in the ledger, in order (entries that do not parse are left out: replay
/// and verification judge the ledger, not this).
pub fn looks_taken(entries: &[Entry]) -> Vec<LookTaken> {
    entries
        .iter()
        .filter(|e| e.kind == LOOK)
        .filter_map(|e| serde_json::from_slice(&e.payload).ok())
        .collect()
}
