//! Where a run lives on disk and how its kind is named: `STATE/<matrix>/` for the real run,
//! `STATE/<matrix>.smoke/` for its smoke run, the ledger and artifact store inside. The engine
//! writes there and the report side reads there, so both take the names from here.

use eval_evidence::ledger::LedgerReader;
use std::path::Path;

/// `STATE/<matrix>/`: where one matrix's run lives.
pub fn run_dir(state: &std::path::Path, matrix: &str) -> std::path::PathBuf {
    state.join(matrix)
}

/// `STATE/<matrix>/ledger.sqlite`.
pub fn ledger_path(state: &std::path::Path, matrix: &str) -> std::path::PathBuf {
    run_dir(state, matrix).join("ledger.sqlite")
}

/// `STATE/<matrix>/artifacts/`.
pub fn artifacts_dir(state: &std::path::Path, matrix: &str) -> std::path::PathBuf {
    run_dir(state, matrix).join("artifacts")
}

/// The `smoke_run` ledger kind: this ledger is a smoke run's, never evidence.
pub const SMOKE_RUN: &str = "smoke_run";

/// The run directory name of a matrix's smoke run: `STATE/<matrix>.smoke/`, beside the real
/// run's `STATE/<matrix>/`, so it shares nothing with it (ledger, budgets, slots, artifacts).
pub fn smoke_run_name(matrix: &str) -> String {
    format!("{matrix}.smoke")
}

/// Whether the ledger of `run_name` in `state` is a smoke run's (it holds a `smoke_run` entry).
pub fn is_smoke_run(state: &Path, run_name: &str) -> bool {
    has_entry_of_kind(state, run_name, SMOKE_RUN)
}

/// Whether the ledger of `run_name` in `state` exists and holds an entry of `kind`.
fn has_entry_of_kind(state: &Path, run_name: &str, kind: &str) -> bool {
    let path = ledger_path(state, run_name);
    if !path.exists() {
        return false;
    }
    let Ok(r) = LedgerReader::open(&path) else {
        return false;
    };
    let mut found = false;
    let _ = r.for_each_of_kind(kind, |_| {
        found = true;
        std::ops::ControlFlow::Break(())
    });
    found
}

/// `UpstreamRecord.kind` of the built-in model-free upstream.
pub const MODEL_FREE: &str = "model-free";

/// The `aa_run` ledger kind: this ledger is an A/A calibration run's (`eval run --aa`), never
/// evidence for a release. Written before each session's `run_started`; its payload
/// ([`AaRun`]) names the arm each candidate copies.
pub const AA_RUN: &str = "aa_run";

/// The payload of an `aa_run` entry.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AaRun {
    pub schema: u32,
    pub matrix: String,
    pub protocol: String,
    pub identity: String,
    /// Each suite's candidate arm and the baseline arm whose definition it ran.
    pub copies: Vec<eval_protocols::aa::AaCopy>,
    /// Always false: an A/A run is never evidence for a release.
    pub evidence: bool,
}

/// The run directory name of a matrix's A/A calibration run: `STATE/<matrix>.aa/`, beside the
/// real run's and the smoke run's.
pub fn aa_run_name(matrix: &str) -> String {
    format!("{matrix}.aa")
}

/// The `aa_run` entry of `entries` (the first that parses), if the ledger is an A/A run's. The
/// caller passes the verified entries only: the marker is part of the hash chain (and covered
/// by the run's signed checkpoints), so a ledger is an A/A run's by its content, never its path.
pub fn aa_run_entry(entries: &[eval_evidence::ledger::Entry]) -> Option<AaRun> {
    entries
        .iter()
        .filter(|e| e.kind == AA_RUN)
        .find_map(|e| serde_json::from_slice(&e.payload).ok())
}

/// Whether the ledger of `run_name` in `state` is an A/A calibration run's (it holds an
/// `aa_run` entry).
pub fn is_aa_run(state: &Path, run_name: &str) -> bool {
    has_entry_of_kind(state, run_name, AA_RUN)
}
