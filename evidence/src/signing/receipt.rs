//! Self-contained inclusion receipts and consistency proofs, verifiable with nothing but the
//! public key (formats in docs/custody.md; `evidence/tests/verify_receipt.py` checks both).
//!
//! Receipt (`eval-receipt`, v1), canonical JSON:
//! ```text
//! {"checkpoint": <signed note text>, "checkpoint_seq": N, "entry": {"hash","kind",
//!  "payload_base64","prev","recorded_at","seq"}, "format":"eval-receipt",
//!  "inclusion_proof":["sha256:…",…], "key_id":"eval+1a2b3c4d", "leaf_index": seq-1,
//!  "tree_size": N, "v":1}
//! ```
//! Consistency proof (`eval-consistency`, v1): `{"format","from": note,"proof":[…],"to": note,"v":1}`.

use super::checkpoint::SignedCheckpoint;
use super::merkle::{leaf_hash, verify_consistency, verify_inclusion};
use super::scan::LedgerScan;
use super::{PublicKey, SigningError};
use crate::ledger::{Digest, Entry};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `format` of a receipt document (`eval prove`'s output).
pub const RECEIPT_FORMAT: &str = "eval-receipt";
/// The `format` of a consistency-proof document.
pub const CONSISTENCY_FORMAT: &str = "eval-consistency";
/// Version of both documents.
pub const PROOF_VERSION: u64 = 1;

/// An entry as a receipt carries it: the payload as base64 of the exact stored bytes, so a
/// verifier hashes exactly what the ledger hashed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptEntry {
    /// The entry's sequence number.
    pub seq: u64,
    /// The previous entry's hash.
    pub prev: Digest,
    /// The entry's kind.
    pub kind: String,
    /// The stored payload bytes, base64 (standard alphabet).
    pub payload_base64: String,
    /// The entry's chain hash.
    pub hash: Digest,
    /// The ledger's commit time (informational, not hashed).
    pub recorded_at: String,
}

impl ReceiptEntry {
    /// The receipt form of a stored entry.
    pub fn from_entry(e: &Entry) -> Self {
        ReceiptEntry {
            seq: e.seq,
            prev: e.prev,
            kind: e.kind.clone(),
            payload_base64: B64.encode(&e.payload),
            hash: e.hash,
            recorded_at: e.recorded_at.clone(),
        }
    }

    /// The entry back; fails if the payload is not base64.
    pub fn to_entry(&self) -> Result<Entry, String> {
        Ok(Entry {
            seq: self.seq,
            prev: self.prev,
            kind: self.kind.clone(),
            payload: B64
                .decode(&self.payload_base64)
                .map_err(|_| "entry.payload_base64 is not base64".to_owned())?,
            hash: self.hash,
            recorded_at: self.recorded_at.clone(),
        })
    }
}

/// Proof that one entry is in a ledger covered by a signed checkpoint, checkable without the
/// ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// Always [`RECEIPT_FORMAT`].
    pub format: String,
    /// Document version ([`PROOF_VERSION`]).
    pub v: u64,
    /// The entry proven.
    pub entry: ReceiptEntry,
    /// The entry's 0-based leaf index (seq − 1).
    pub leaf_index: u64,
    /// The size of the checkpoint's tree.
    pub tree_size: u64,
    /// RFC 9162 inclusion proof from the entry's leaf to the checkpoint's root.
    pub inclusion_proof: Vec<Digest>,
    /// The signed note of the checkpoint whose tree includes the entry.
    pub checkpoint: String,
    /// Where that checkpoint is recorded in the ledger.
    pub checkpoint_seq: u64,
    /// `name+keyid` of the key that signed the checkpoint.
    pub key_id: String,
}

/// What a verified receipt establishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedReceipt {
    /// The entry, with its chain hash rechecked.
    pub entry: Entry,
    /// The log the checkpoint is of (`eval/<identity>`).
    pub origin: String,
    /// The signed tree size.
    pub tree_size: u64,
    /// The signed root.
    pub root: Digest,
}

/// Builds the receipt of entry `seq` of the ledger (or export) at `path`, against the ledger's
/// latest checkpoint. The whole ledger is verified on the way (chain, checkpoint roots and
/// consistency; signatures are the receipt verifier's job).
pub fn prove(path: &Path, seq: u64) -> Result<Receipt, SigningError> {
    let scan = LedgerScan::new(None, Some(seq)).run(path)?.into_result()?;
    let entry = scan.kept.clone().ok_or_else(|| {
        SigningError::NotCovered(format!(
            "{}: there is no entry {seq} (the ledger ends at seq {})",
            path.display(),
            scan.head().seq
        ))
    })?;
    let last = scan.last_checkpoint.as_ref().ok_or_else(|| {
        SigningError::NotCovered(format!(
            "{}: the ledger holds no signed checkpoint yet",
            path.display()
        ))
    })?;
    let size = last.checkpoint.head.tree_size;
    if seq > size {
        return Err(SigningError::NotCovered(format!(
            "{}: entry {seq} is not covered by a signed checkpoint yet (the last one, seq {}, covers entries 1..{size})",
            path.display(),
            last.seq
        )));
    }
    let proof = scan
        .tree
        .inclusion_proof(seq - 1, size)
        .ok_or_else(|| SigningError::Integrity("no inclusion proof can be made".into()))?;
    Ok(Receipt {
        format: RECEIPT_FORMAT.into(),
        v: PROOF_VERSION,
        entry: ReceiptEntry::from_entry(&entry),
        leaf_index: seq - 1,
        tree_size: size,
        inclusion_proof: proof,
        checkpoint: last.checkpoint.note().to_owned(),
        checkpoint_seq: last.seq,
        key_id: last.checkpoint.key_ids().join(","),
    })
}

/// Reads a receipt file, refusing another format or a newer version.
pub fn read_receipt(path: &Path) -> Result<Receipt, SigningError> {
    read_document(path, RECEIPT_FORMAT, "a receipt")
}

/// Reads a versioned JSON document of the given `format` (refusing other formats and newer
/// versions) into `T`; errors name the file.
fn read_document<T: serde::de::DeserializeOwned>(
    path: &Path,
    format: &str,
    what: &str,
) -> Result<T, SigningError> {
    let bytes = std::fs::read(path).map_err(SigningError::io(path))?;
    let doc = |reason: String| SigningError::Document {
        path: path.to_path_buf(),
        reason,
    };
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| doc(format!("not JSON: {e}")))?;
    check_format(&v, format).map_err(doc)?;
    serde_json::from_value(v).map_err(|e| doc(format!("not {what}: {e}")))
}

fn check_format(v: &serde_json::Value, format: &str) -> Result<(), String> {
    if v.get("format").and_then(|f| f.as_str()) != Some(format) {
        return Err(format!(
            "not an {format} document (\"format\" is not {format:?})"
        ));
    }
    match v.get("v").and_then(|n| n.as_u64()) {
        Some(n) if n <= PROOF_VERSION => Ok(()),
        Some(n) => Err(format!(
            "{format} version {n} is newer than this eval understands ({PROOF_VERSION}); upgrade eval"
        )),
        None => Err("\"v\" is missing".into()),
    }
}

/// Verifies a receipt offline: the entry's hash, the checkpoint's signature by `key`, and the
/// inclusion of the entry's leaf in the checkpoint's tree.
pub fn verify_receipt(r: &Receipt, key: &PublicKey) -> Result<VerifiedReceipt, SigningError> {
    let proof_err = SigningError::Proof;
    if r.format != RECEIPT_FORMAT || r.v > PROOF_VERSION {
        return Err(proof_err(format!(
            "not an {RECEIPT_FORMAT} v{PROOF_VERSION} document"
        )));
    }
    let entry = r.entry.to_entry().map_err(proof_err)?;
    if entry.computed_hash() != entry.hash {
        return Err(proof_err(format!(
            "entry {}: its hash {} is not the hash of its bytes ({})",
            entry.seq,
            entry.hash,
            entry.computed_hash()
        )));
    }
    if entry.seq == 0 || r.leaf_index != entry.seq - 1 {
        return Err(proof_err(format!(
            "leaf index {} is not entry seq {} - 1",
            r.leaf_index, entry.seq
        )));
    }
    let cp = SignedCheckpoint::parse(&r.checkpoint)?;
    cp.verify(key)?;
    // Genuine, but a smoke run's: it proves an entry of a rehearsal, never evidence.
    if super::is_smoke_origin(&cp.head.origin) {
        return Err(proof_err(format!(
            "the receipt is of log {:?}: a smoke run's entry, never evidence",
            cp.head.origin
        )));
    }
    if super::is_aa_origin(&cp.head.origin) {
        return Err(proof_err(format!(
            "the receipt is of log {:?}: an A/A calibration run's entry, never evidence for a release",
            cp.head.origin
        )));
    }
    if cp.head.tree_size != r.tree_size {
        return Err(proof_err(format!(
            "tree size {} is not the checkpoint's {}",
            r.tree_size, cp.head.tree_size
        )));
    }
    verify_inclusion(
        r.leaf_index,
        cp.head.tree_size,
        &leaf_hash(&entry),
        &r.inclusion_proof,
        &cp.head.root,
    )
    .map_err(proof_err)?;
    Ok(VerifiedReceipt {
        entry,
        origin: cp.head.origin.clone(),
        tree_size: cp.head.tree_size,
        root: cp.head.root,
    })
}

/// Proof that one signed checkpoint's tree extends another's (the log was only appended to).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyProof {
    /// Always [`CONSISTENCY_FORMAT`].
    pub format: String,
    /// Document version ([`PROOF_VERSION`]).
    pub v: u64,
    /// The older checkpoint's signed note.
    pub from: String,
    /// The newer checkpoint's signed note.
    pub to: String,
    /// RFC 9162 consistency proof between the two roots.
    pub proof: Vec<Digest>,
}

/// Proves from the ledger at `path` that checkpoint `to` extends checkpoint `from`. Both must be
/// checkpoints of this ledger: their roots are recomputed from its entries.
pub fn prove_consistency(
    path: &Path,
    from: &SignedCheckpoint,
    to: &SignedCheckpoint,
) -> Result<ConsistencyProof, SigningError> {
    let (a, b) = (&from.head, &to.head);
    if a.origin != b.origin {
        return Err(SigningError::Inconsistent(format!(
            "the checkpoints are of different logs ({:?} and {:?})",
            a.origin, b.origin
        )));
    }
    if a.tree_size > b.tree_size {
        return Err(SigningError::Rewind(format!(
            "--from has tree size {}, larger than --to's {}; swap them",
            a.tree_size, b.tree_size
        )));
    }
    let scan = LedgerScan::new(None, None).run(path)?.into_result()?;
    for (which, h) in [("--from", a), ("--to", b)] {
        match scan.tree.root(h.tree_size) {
            None => {
                return Err(SigningError::NotCovered(format!(
                    "{which}: tree size {} is beyond the ledger's {} entries",
                    h.tree_size,
                    scan.tree.len()
                )));
            }
            Some(root) if root != h.root => {
                return Err(SigningError::Inconsistent(format!(
                    "{which}: the checkpoint's root for size {} is {}, but this ledger's is {root}",
                    h.tree_size, h.root
                )));
            }
            Some(_) => {}
        }
    }
    let proof = scan
        .tree
        .consistency_proof(a.tree_size, b.tree_size)
        .ok_or_else(|| SigningError::Integrity("no consistency proof can be made".into()))?;
    Ok(ConsistencyProof {
        format: CONSISTENCY_FORMAT.into(),
        v: PROOF_VERSION,
        from: from.note().to_owned(),
        to: to.note().to_owned(),
        proof,
    })
}

/// Verifies a consistency proof offline: both checkpoints signed by `key`, same origin, and the
/// proof connecting their roots.
pub fn verify_consistency_proof(
    p: &ConsistencyProof,
    key: &PublicKey,
) -> Result<(SignedCheckpoint, SignedCheckpoint), SigningError> {
    if p.format != CONSISTENCY_FORMAT || p.v > PROOF_VERSION {
        return Err(SigningError::Proof(format!(
            "not an {CONSISTENCY_FORMAT} v{PROOF_VERSION} document"
        )));
    }
    let from = SignedCheckpoint::parse(&p.from)?;
    let to = SignedCheckpoint::parse(&p.to)?;
    from.verify(key)?;
    to.verify(key)?;
    if from.head.origin != to.head.origin {
        return Err(SigningError::Proof(
            "the checkpoints are of different logs".into(),
        ));
    }
    verify_consistency(
        from.head.tree_size,
        to.head.tree_size,
        &from.head.root,
        &to.head.root,
        &p.proof,
    )
    .map_err(SigningError::Proof)?;
    Ok((from, to))
}

/// Reads a consistency-proof file, refusing another format or a newer version.
pub fn read_consistency_proof(path: &Path) -> Result<ConsistencyProof, SigningError> {
    read_document(path, CONSISTENCY_FORMAT, "a consistency proof")
}
