//! The hash-chained ledger: SQLite storage, the single writer, verification and JSONL export.

mod entry;
mod error;
mod jsonl;
mod store;
mod verify;
mod writer;

pub use entry::{Digest, Entry, Head, entry_hash, valid_kind};
pub use error::LedgerError;
pub use jsonl::{
    JSONL_VERSION, JsonlReader, append_jsonl, export_jsonl, jsonl_line, read_all as read_jsonl,
};
pub use store::{LEDGER_FORMAT, LEDGER_VERSION, LedgerReader, SourceKind, detect_source};
pub use verify::{Verifier, VerifyFailure, VerifyReport, verify, verify_entries};
pub use writer::{Appended, LedgerWriter, NewEntry};

/// Kinds that people may append from the command line. Every other kind is written only by the
/// controller, so a `run` or `outcome` entry can never be forged with `eval ledger note`.
pub const HUMAN_KINDS: &[&str] = &["note"];
