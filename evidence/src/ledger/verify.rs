//! Verification: recompute every hash from the stored bytes and check every link.

use super::error::LedgerError;
use super::jsonl::JsonlReader;
use super::store::{LedgerReader, SourceKind, detect_source};
use eval_core::chain::{Head, Verifier, VerifyReport};
use std::path::Path;

/// Verifies a SQLite ledger or a JSONL export (detected from the file's first bytes).
pub fn verify(path: &Path, expect: Option<Head>) -> Result<VerifyReport, LedgerError> {
    let mut v = Verifier::new(expect);
    match detect_source(path)? {
        SourceKind::Sqlite => LedgerReader::open(path)?.for_each(|e| v.push(&e))?,
        SourceKind::Jsonl => {
            for entry in JsonlReader::open(path)? {
                if v.push(&entry?).is_break() {
                    break;
                }
            }
        }
    }
    Ok(v.finish())
}
