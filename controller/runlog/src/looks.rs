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

/// The look a run's ledger says it stopped at (efficacy or futility), if any: such a run stays
/// stopped. An unreadable ledger stops nothing here (admission judges it).
pub fn stopped_at_look(path: &std::path::Path) -> Option<LookTaken> {
    use eval_evidence::ledger::{self, LedgerReader};
    if !path.exists() {
        return None;
    }
    let entries = LedgerReader::open(path).and_then(|r| r.entries()).ok()?;
    let verified = ledger::verify_entries(&entries, None);
    let entries = &entries[..entries.len().min(verified.entries as usize)];
    let looks = looks_taken(entries);
    eval_evidence::report::looks::stopped_at(&looks).cloned()
}
