//! Verification: recompute every hash from the stored bytes and check every link.

use super::entry::{Digest, Entry, Head};
use super::error::LedgerError;
use super::jsonl::JsonlReader;
use super::store::{LedgerReader, SourceKind, detect_source};
use serde::Serialize;
use std::ops::ControlFlow;
use std::path::Path;

/// Why the chain is broken at a given `seq`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum VerifyFailure {
    /// The stored hash is not the hash of the stored bytes.
    HashMismatch {
        seq: u64,
        stored: Digest,
        computed: Digest,
    },
    /// `prev` is not the previous entry's hash.
    BrokenLink {
        seq: u64,
        prev: Digest,
        expected: Digest,
    },
    /// A sequence number is missing, repeated or out of order.
    Gap { seq: u64, expected_seq: u64 },
    /// The entry at the expected head's `seq` has another hash.
    HeadMismatch {
        seq: u64,
        expected: Digest,
        found: Digest,
    },
    /// The chain ends before the expected head: its tail was cut off.
    Truncated { seq: u64, last_seq: u64 },
}

impl VerifyFailure {
    /// The first `seq` at which the chain is wrong.
    pub fn seq(&self) -> u64 {
        match self {
            VerifyFailure::HashMismatch { seq, .. }
            | VerifyFailure::BrokenLink { seq, .. }
            | VerifyFailure::Gap { seq, .. }
            | VerifyFailure::HeadMismatch { seq, .. }
            | VerifyFailure::Truncated { seq, .. } => *seq,
        }
    }
}

impl std::fmt::Display for VerifyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyFailure::HashMismatch {
                seq,
                stored,
                computed,
            } => write!(
                f,
                "seq {seq}: hash mismatch: stored {stored}, computed from the stored bytes {computed}"
            ),
            VerifyFailure::BrokenLink {
                seq,
                prev,
                expected,
            } => write!(
                f,
                "seq {seq}: broken link: prev is {prev}, but entry {} has hash {expected}",
                seq.saturating_sub(1)
            ),
            VerifyFailure::Gap { seq, expected_seq } => write!(
                f,
                "seq {seq}: gap: expected seq {expected_seq} here (an entry is missing, repeated or out of order)"
            ),
            VerifyFailure::HeadMismatch {
                seq,
                expected,
                found,
            } => write!(
                f,
                "seq {seq}: head mismatch: expected hash {expected}, the ledger has {found}"
            ),
            VerifyFailure::Truncated { seq, last_seq } => write!(
                f,
                "seq {seq}: truncated: the expected head is seq {seq}, but the ledger ends at seq {last_seq}"
            ),
        }
    }
}

/// The result of verifying a ledger. `--json` prints exactly this.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    pub ok: bool,
    /// Entries that verified (all of them when `ok`).
    pub entries: u64,
    /// The last verified entry.
    pub head: Head,
    pub error: Option<VerifyFailure>,
}

/// Streaming verifier: feed entries in stored order, then [`Verifier::finish`].
pub struct Verifier {
    head: Head,
    expect: Option<Head>,
    failure: Option<VerifyFailure>,
}

impl Verifier {
    pub fn new(expect: Option<Head>) -> Self {
        Self {
            head: Head::EMPTY,
            expect,
            failure: None,
        }
    }

    /// Checks one entry; returns `Break` at the first failure.
    pub fn push(&mut self, e: &Entry) -> ControlFlow<()> {
        if self.failure.is_some() {
            return ControlFlow::Break(());
        }
        let expected_seq = self.head.seq + 1;
        let failure = if e.seq != expected_seq {
            Some(VerifyFailure::Gap {
                seq: expected_seq.min(e.seq.max(1)),
                expected_seq,
            })
        } else if e.prev != self.head.hash {
            Some(VerifyFailure::BrokenLink {
                seq: e.seq,
                prev: e.prev,
                expected: self.head.hash,
            })
        } else {
            let computed = e.computed_hash();
            if computed != e.hash {
                Some(VerifyFailure::HashMismatch {
                    seq: e.seq,
                    stored: e.hash,
                    computed,
                })
            } else {
                None
            }
        };
        if let Some(f) = failure {
            // A gap is reported at the first seq that is missing.
            let f = match f {
                VerifyFailure::Gap { expected_seq, .. } => VerifyFailure::Gap {
                    seq: expected_seq,
                    expected_seq,
                },
                other => other,
            };
            self.failure = Some(f);
            return ControlFlow::Break(());
        }
        if let Some(x) = self.expect
            && x.seq == e.seq
            && x.hash != e.hash
        {
            self.failure = Some(VerifyFailure::HeadMismatch {
                seq: e.seq,
                expected: x.hash,
                found: e.hash,
            });
            return ControlFlow::Break(());
        }
        self.head = Head {
            seq: e.seq,
            hash: e.hash,
        };
        ControlFlow::Continue(())
    }

    pub fn finish(mut self) -> VerifyReport {
        if self.failure.is_none()
            && let Some(x) = self.expect
            && x.seq > self.head.seq
        {
            self.failure = Some(VerifyFailure::Truncated {
                seq: x.seq,
                last_seq: self.head.seq,
            });
        }
        VerifyReport {
            ok: self.failure.is_none(),
            entries: self.head.seq,
            head: self.head,
            error: self.failure,
        }
    }
}

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

/// Verifies entries already in memory.
pub fn verify_entries<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    expect: Option<Head>,
) -> VerifyReport {
    let mut v = Verifier::new(expect);
    for e in entries {
        if v.push(e).is_break() {
            break;
        }
    }
    v.finish()
}
