//! The hash-chain rule the ledger and the identity registry share: how an entry is hashed, how a
//! chain is verified, and the JSONL line an entry is written as. Pure: the files themselves are
//! read and written by their owners (`eval-evidence` for ledgers and exports, `eval-protocols`
//! for the registry).
//!
//! ```text
//! hash(n) = SHA-256( prev            32 raw bytes: hash(n-1), or 32 zero bytes for n = 1
//!                  ‖ seq             u64, big-endian
//!                  ‖ len(kind)       u32, big-endian
//!                  ‖ kind            UTF-8
//!                  ‖ len(payload)    u64, big-endian
//!                  ‖ payload )       the stored canonical-JSON bytes, verbatim
//! ```
//! Lengths make the framing unambiguous. `recorded_at` is informational and not hashed; anything
//! whose time is evidence carries it inside its payload.
//!
//! The JSONL line, keys sorted (the payload is the stored bytes themselves, not re-serialised, and
//! is read back as the raw bytes found in the line, so an exported chain verifies exactly like the
//! stored one):
//!
//! ```text
//! {"hash":"sha256:…","kind":"note","payload":{…verbatim stored bytes…},"prev":"sha256:…","recorded_at":"…","seq":1,"v":1}
//! ```

use crate::digest::Digest;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::ops::ControlFlow;

/// The hash of entry `seq` (see the module docs for the layout).
pub fn entry_hash(prev: &Digest, seq: u64, kind: &str, payload: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update(prev.0);
    h.update(seq.to_be_bytes());
    h.update((kind.len() as u32).to_be_bytes());
    h.update(kind.as_bytes());
    h.update((payload.len() as u64).to_be_bytes());
    h.update(payload);
    Digest(h.finalize().into())
}

/// A stored entry, exactly as read from a ledger, an export or the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Position in the chain, from 1.
    pub seq: u64,
    /// The previous entry's hash ([`Digest::ZERO`] for seq 1).
    pub prev: Digest,
    /// What the payload is (see [`valid_kind`]).
    pub kind: String,
    /// Canonical JSON bytes, verbatim as stored and hashed.
    pub payload: Vec<u8>,
    /// The stored hash; [`Entry::computed_hash`] is what it must equal.
    pub hash: Digest,
    /// RFC 3339 UTC time of the commit; informational, not hashed.
    pub recorded_at: String,
}

impl Entry {
    /// The hash of the stored fields, recomputed.
    pub fn computed_hash(&self) -> Digest {
        entry_hash(&self.prev, self.seq, &self.kind, &self.payload)
    }

    /// The payload parsed as JSON (for display and queries; never for hashing).
    pub fn payload_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }
}

/// The head of a chain: the last entry's sequence number and hash (0 and [`Digest::ZERO`] when
/// empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The last entry's seq.
    pub seq: u64,
    /// The last entry's hash.
    pub hash: Digest,
}

impl Head {
    /// The head of an empty chain.
    pub const EMPTY: Head = Head {
        seq: 0,
        hash: Digest::ZERO,
    };

    /// Parses `SEQ:sha256:<hex>` (also accepted: `SEQ:<hex>`).
    pub fn parse(text: &str) -> Option<Head> {
        let (seq, hash) = text.split_once(':')?;
        let seq = seq.parse().ok()?;
        let hash = Digest::parse(hash).or_else(|| Digest::from_hex(hash))?;
        Some(Head { seq, hash })
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash)
    }
}

/// Kinds are short lowercase identifiers, so they can never smuggle framing bytes.
pub fn valid_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= 64
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

/// Why an entry cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The kind is not a short lowercase identifier.
    #[error("invalid entry kind {0:?}: kinds are 1-64 characters of a-z, 0-9, '_' and '.'")]
    InvalidKind(String),
    /// The payload does not serialise to JSON.
    #[error("payload is not JSON: {0}")]
    Payload(#[from] serde_json::Error),
}

/// An entry to append: a checked kind and the canonical payload bytes.
#[derive(Clone, Debug)]
pub struct NewEntry {
    kind: String,
    payload: Vec<u8>,
}

impl NewEntry {
    /// Canonicalises `payload` once; these bytes are hashed, stored and exported as they are.
    pub fn new<T: Serialize + ?Sized>(kind: &str, payload: &T) -> Result<Self, ChainError> {
        if !valid_kind(kind) {
            return Err(ChainError::InvalidKind(kind.to_owned()));
        }
        Ok(Self {
            kind: kind.to_owned(),
            payload: crate::canonical::to_vec(payload)?,
        })
    }

    /// The entry's kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The canonical payload bytes that will be hashed and stored.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The entry this becomes when appended after `head`, stamped `recorded_at`.
    pub fn chained(&self, head: &Head, recorded_at: String) -> Entry {
        let seq = head.seq + 1;
        Entry {
            seq,
            prev: head.hash,
            kind: self.kind.clone(),
            payload: self.payload.clone(),
            hash: entry_hash(&head.hash, seq, &self.kind, &self.payload),
            recorded_at,
        }
    }
}

/// What was assigned to an appended entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Its seq.
    pub seq: u64,
    /// Its hash.
    pub hash: Digest,
}

/// Why the chain is broken at a given `seq`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum VerifyFailure {
    /// The stored hash is not the hash of the stored bytes.
    HashMismatch {
        /// The entry whose bytes were altered (or whose hash was).
        seq: u64,
        /// The hash written in the entry.
        stored: Digest,
        /// The hash of the entry's `prev`, `seq`, `kind` and payload as stored.
        computed: Digest,
    },
    /// `prev` is not the previous entry's hash.
    BrokenLink {
        /// The entry whose link does not match.
        seq: u64,
        /// The `prev` the entry carries.
        prev: Digest,
        /// The hash of entry `seq - 1` (zero for seq 1), which `prev` should equal.
        expected: Digest,
    },
    /// A sequence number is missing, repeated or out of order.
    Gap {
        /// The first sequence number that is not where it belongs (= `expected_seq`).
        seq: u64,
        /// The sequence number the next entry should have carried.
        expected_seq: u64,
    },
    /// The entry at the expected head's `seq` has another hash.
    HeadMismatch {
        /// The expected head's sequence number.
        seq: u64,
        /// The hash the caller expected there (a head recorded earlier).
        expected: Digest,
        /// The hash the chain holds at that position.
        found: Digest,
    },
    /// The chain ends before the expected head: its tail was cut off.
    Truncated {
        /// The expected head's sequence number, which the chain does not reach.
        seq: u64,
        /// The last sequence number the chain does hold (0 for an empty chain).
        last_seq: u64,
    },
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
    /// Whether every entry verified and the expected head (if any) was found; `error` is `None` iff
    /// true.
    pub ok: bool,
    /// Entries that verified (all of them when `ok`).
    pub entries: u64,
    /// The last verified entry.
    pub head: Head,
    /// The first failure found, if any; verification stops there.
    pub error: Option<VerifyFailure>,
}

/// Streaming verifier: feed entries in stored order, then [`Verifier::finish`].
pub struct Verifier {
    head: Head,
    expect: Option<Head>,
    failure: Option<VerifyFailure>,
}

impl Verifier {
    /// A verifier for a chain that starts at seq 1; `expect` is a head the chain must contain (the
    /// entry at its seq must have its hash), or `None` to check only internal consistency.
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

    /// Ends verification: also reports [`VerifyFailure::Truncated`] if the chain stopped before the
    /// expected head.
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

/// Version of the JSONL line format (`"v"` in every line).
pub const JSONL_VERSION: u64 = 1;

/// One entry as a JSONL line (without the newline).
pub fn jsonl_line(e: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(e.payload.len() + 256);
    out.extend_from_slice(b"{\"hash\":\"");
    out.extend_from_slice(e.hash.to_string().as_bytes());
    out.extend_from_slice(b"\",\"kind\":");
    out.extend_from_slice(json_string(&e.kind).as_bytes());
    out.extend_from_slice(b",\"payload\":");
    out.extend_from_slice(&e.payload);
    out.extend_from_slice(b",\"prev\":\"");
    out.extend_from_slice(e.prev.to_string().as_bytes());
    out.extend_from_slice(b"\",\"recorded_at\":");
    out.extend_from_slice(json_string(&e.recorded_at).as_bytes());
    out.extend_from_slice(b",\"seq\":");
    out.extend_from_slice(e.seq.to_string().as_bytes());
    out.extend_from_slice(b",\"v\":");
    out.extend_from_slice(JSONL_VERSION.to_string().as_bytes());
    out.push(b'}');
    out
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    #[serde(borrow)]
    hash: &'a str,
    kind: String,
    #[serde(borrow)]
    payload: &'a RawValue,
    #[serde(borrow)]
    prev: &'a str,
    recorded_at: String,
    seq: u64,
    v: u64,
}

/// Why one JSONL line is not an entry.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// Not a line of this format (the reason says what is wrong).
    #[error("{0}")]
    Malformed(String),
    /// Written by a newer format version than [`JSONL_VERSION`].
    #[error("line format version {found} is newer than this eval understands (up to {known})")]
    NewerFormat {
        /// The line's `v`.
        found: u64,
        /// [`JSONL_VERSION`].
        known: u64,
    },
}

/// Parses one JSONL line (without its newline) into the entry it records.
pub fn parse_jsonl_line(bytes: &[u8]) -> Result<Entry, LineError> {
    let line: Line<'_> = serde_json::from_slice(bytes)
        .map_err(|e| LineError::Malformed(format!("not a ledger entry: {e}")))?;
    if line.v > JSONL_VERSION {
        return Err(LineError::NewerFormat {
            found: line.v,
            known: JSONL_VERSION,
        });
    }
    let digest = |field: &str, text: &str| {
        Digest::parse(text)
            .ok_or_else(|| LineError::Malformed(format!("{field} is not a sha256:<hex> digest")))
    };
    Ok(Entry {
        seq: line.seq,
        prev: digest("prev", line.prev)?,
        kind: line.kind,
        payload: line.payload.get().as_bytes().to_vec(),
        hash: digest("hash", line.hash)?,
        recorded_at: line.recorded_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Golden value: a change to the hashed layout must be noticed (and versioned).
    #[test]
    fn hash_layout_is_pinned() {
        let h = entry_hash(&Digest::ZERO, 1, "note", br#"{"text":"hi"}"#);
        let mut manual = Vec::new();
        manual.extend_from_slice(&[0u8; 32]);
        manual.extend_from_slice(&1u64.to_be_bytes());
        manual.extend_from_slice(&4u32.to_be_bytes());
        manual.extend_from_slice(b"note");
        manual.extend_from_slice(&13u64.to_be_bytes());
        manual.extend_from_slice(br#"{"text":"hi"}"#);
        assert_eq!(h, Digest::of(&manual));
        // Computed independently with Python's hashlib and struct.pack(">Q"/">I").
        assert_eq!(
            h.to_string(),
            "sha256:f1097e049a4c125a0b201907a2c7607cbb08aee7127e5c7c607d5cbceddc7381"
        );
    }

    #[test]
    fn head_and_kind_text() {
        let d = Digest::of(b"abc");
        let head = Head { seq: 7, hash: d };
        assert_eq!(Head::parse(&head.to_string()), Some(head));
        assert_eq!(Head::parse(&format!("7:{}", d.hex())), Some(head));
        assert_eq!(Head::parse("x:abc"), None);
        assert!(valid_kind("model_call"));
        assert!(!valid_kind("Bad Kind"));
        assert!(!valid_kind(""));
        assert!(!valid_kind(&"a".repeat(65)));
        assert!(matches!(
            NewEntry::new("no\nnewline", &json!({})),
            Err(ChainError::InvalidKind(_))
        ));
    }

    fn chain(n: u64) -> Vec<Entry> {
        let mut head = Head::EMPTY;
        let mut out = Vec::new();
        for i in 1..=n {
            let e = NewEntry::new("note", &json!({"i": i, "b": "x"}))
                .unwrap()
                .chained(&head, format!("t{i}"));
            head = Head {
                seq: e.seq,
                hash: e.hash,
            };
            out.push(e);
        }
        out
    }

    #[test]
    fn a_well_formed_chain_verifies_to_its_head() {
        let entries = chain(3);
        let report = verify_entries(&entries, None);
        assert!(report.ok, "{:?}", report.error);
        assert_eq!(report.entries, 3);
        assert_eq!(report.head.hash, entries[2].hash);
        // The payload was canonicalised (keys sorted) before hashing.
        assert_eq!(entries[0].payload, br#"{"b":"x","i":1}"#);
    }

    #[test]
    fn a_tampered_payload_is_a_hash_mismatch_at_its_seq() {
        let mut entries = chain(3);
        entries[1].payload = br#"{"b":"y","i":2}"#.to_vec();
        let report = verify_entries(&entries, None);
        assert!(!report.ok);
        assert!(matches!(
            report.error,
            Some(VerifyFailure::HashMismatch { seq: 2, .. })
        ));
        assert_eq!(report.head.seq, 1);
    }

    #[test]
    fn a_rehashed_tampered_entry_breaks_the_next_link() {
        let mut entries = chain(3);
        entries[1].kind = "other".into();
        entries[1].hash = entries[1].computed_hash();
        let report = verify_entries(&entries, None);
        assert!(matches!(
            report.error,
            Some(VerifyFailure::BrokenLink { seq: 3, .. })
        ));
    }

    #[test]
    fn missing_entries_and_cut_tails_are_found() {
        let entries = chain(3);
        let gap = [entries[0].clone(), entries[2].clone()];
        assert!(matches!(
            verify_entries(&gap, None).error,
            Some(VerifyFailure::Gap { seq: 2, .. })
        ));
        let expect = Head {
            seq: 3,
            hash: entries[2].hash,
        };
        assert!(matches!(
            verify_entries(&entries[..2], Some(expect)).error,
            Some(VerifyFailure::Truncated {
                seq: 3,
                last_seq: 2
            })
        ));
        let other = Head {
            seq: 2,
            hash: Digest::ZERO,
        };
        assert!(matches!(
            verify_entries(&entries, Some(other)).error,
            Some(VerifyFailure::HeadMismatch { seq: 2, .. })
        ));
    }

    #[test]
    fn jsonl_lines_round_trip_the_payload_bytes_verbatim() {
        let entries = chain(2);
        for e in &entries {
            let line = jsonl_line(e);
            assert_eq!(&parse_jsonl_line(&line).unwrap(), e);
        }
        assert_eq!(
            String::from_utf8(jsonl_line(&entries[0])).unwrap(),
            format!(
                "{{\"hash\":\"{}\",\"kind\":\"note\",\"payload\":{{\"b\":\"x\",\"i\":1}},\"prev\":\"{}\",\"recorded_at\":\"t1\",\"seq\":1,\"v\":1}}",
                entries[0].hash,
                Digest::ZERO
            )
        );
        let newer = String::from_utf8(jsonl_line(&entries[0]))
            .unwrap()
            .replace("\"v\":1", "\"v\":2");
        assert!(matches!(
            parse_jsonl_line(newer.as_bytes()),
            Err(LineError::NewerFormat { found: 2, known: 1 })
        ));
        let extra = String::from_utf8(jsonl_line(&entries[0]))
            .unwrap()
            .replace("\"v\":1", "\"v\":1,\"x\":0");
        assert!(matches!(
            parse_jsonl_line(extra.as_bytes()),
            Err(LineError::Malformed(_))
        ));
    }
}
