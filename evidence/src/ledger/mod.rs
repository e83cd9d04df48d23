//! The hash-chained ledger: SQLite storage, the single writer, verification and JSONL export.

mod error;
mod jsonl;
mod store;
mod verify;
mod writer;

// The chain rule is eval-core's (shared with the identity registry); re-exported because it is
// this module's vocabulary too.
pub use error::LedgerError;
pub use eval_core::chain::{
    Appended, Entry, Head, NewEntry, Verifier, VerifyFailure, VerifyReport, entry_hash, valid_kind,
    verify_entries,
};
pub use eval_core::digest::Digest;
pub use jsonl::{
    JSONL_VERSION, JsonlReader, append_jsonl, export_jsonl, jsonl_line, read_all as read_jsonl,
};
pub(crate) use store::scan_conn;
pub use store::{LEDGER_FORMAT, LEDGER_VERSION, LedgerReader, SourceKind, detect_source};
pub use verify::verify;
pub use writer::LedgerWriter;

/// Kinds that people may append from the command line. Every other kind is written only by the
/// controller, so a `run` or `outcome` entry can never be forged with `eval ledger note`.
pub const HUMAN_KINDS: &[&str] = &["note"];
