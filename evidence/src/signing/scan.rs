//! One streaming pass over a ledger that verifies the chain, builds the Merkle tree and checks
//! every `checkpoint` entry against the tree, its predecessor and (when given) the public key.
//! Receipts, consistency proofs, `ledger verify --public-key` and the [`super::Checkpointer`] all
//! rest on this pass, so they agree on what a valid checkpoint is.

use super::checkpoint::{CHECKPOINT_KIND, CheckpointPayload, SignedCheckpoint};
use super::merkle::{MerkleTree, leaf_hash, verify_consistency};
use super::{PublicKey, SigningError};
use crate::ledger::{
    Digest, Entry, Head, JsonlReader, LedgerReader, SourceKind, Verifier, detect_source,
};
use serde::Serialize;
use std::ops::ControlFlow;
use std::path::Path;

/// A checkpoint as recorded in a ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedCheckpoint {
    /// The `seq` of the `checkpoint` entry (always greater than the tree size it signs).
    pub seq: u64,
    /// The parsed signed checkpoint.
    pub checkpoint: SignedCheckpoint,
}

/// Why a ledger's signed evidence does not hold, and where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScanFailure {
    /// The first entry at fault (0 when the fault is the ledger as a whole).
    pub seq: u64,
    /// `chain`, `malformed_checkpoint`, `future_tree_size`, `root_mismatch`, `rewind`,
    /// `origin_changed`, `inconsistent`, `bad_signature`, `no_checkpoint` or `unsigned_tail`.
    pub reason: &'static str,
    /// What is wrong, for the user.
    pub message: String,
}

impl std::fmt::Display for ScanFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

pub(crate) struct LedgerScan {
    chain: Verifier,
    head: Head,
    pub tree: MerkleTree,
    key: Option<PublicKey>,
    pub last_checkpoint: Option<RecordedCheckpoint>,
    pub checkpoints: u64,
    pub failure: Option<ScanFailure>,
    keep_seq: Option<u64>,
    pub kept: Option<Entry>,
    /// The last entry that is run evidence (any kind but [`ANNOTATION_KINDS`]).
    pub last_evidence_seq: u64,
    /// Evidence entries not covered by the last verified checkpoint, oldest first.
    uncovered: std::collections::VecDeque<u64>,
    /// The first of those whose kind is in [`SIGNED_AT_ONCE_KINDS`].
    uncovered_signed_at_once: Option<u64>,
    pub last_run_started: u64,
    pub last_run_finished: u64,
}

/// Kinds that record something *about* a run after the fact rather than the run itself: they
/// may follow the run's final checkpoint without making its evidence incomplete (a report made
/// without the private key appends an unsigned `report` entry).
pub const ANNOTATION_KINDS: &[&str] = &[CHECKPOINT_KIND, "report", "note"];
/// The controller's session markers: a ledger whose last marker is `run_finished` is a finished
/// run, whose every evidence entry must be covered by a signed checkpoint.
pub const RUN_STARTED_KIND: &str = "run_started";
/// The session marker a run's controller appends when the run ends.
pub const RUN_FINISHED_KIND: &str = "run_finished";
/// Kinds the controller signs in the transaction that records them (it signs every append of a
/// signing run): one of them outside every checkpoint is a forger who dropped the checkpoints
/// after a rewritten entry, or appended it without the key. Either way the evidence is not whole,
/// finished run or not.
pub const SIGNED_AT_ONCE_KINDS: &[&str] = &["attempt_outcome", RUN_FINISHED_KIND];

impl LedgerScan {
    pub fn new(key: Option<PublicKey>, keep_seq: Option<u64>) -> Self {
        Self::expecting(key, keep_seq, None)
    }

    /// Also requires the chain to contain `expect` (see [`crate::ledger::verify`]).
    pub fn expecting(key: Option<PublicKey>, keep_seq: Option<u64>, expect: Option<Head>) -> Self {
        Self {
            chain: Verifier::new(expect),
            head: Head::EMPTY,
            tree: MerkleTree::new(),
            key,
            last_checkpoint: None,
            checkpoints: 0,
            failure: None,
            keep_seq,
            kept: None,
            last_evidence_seq: 0,
            uncovered: std::collections::VecDeque::new(),
            uncovered_signed_at_once: None,
            last_run_started: 0,
            last_run_finished: 0,
        }
    }

    /// The last entry that verified.
    pub fn head(&self) -> Head {
        self.head
    }

    pub fn push(&mut self, e: &Entry) -> ControlFlow<()> {
        if self.failure.is_some() {
            return ControlFlow::Break(());
        }
        if self.chain.push(e).is_break() {
            let chain = std::mem::replace(&mut self.chain, Verifier::new(None)).finish();
            let (seq, message) = match chain.error {
                Some(f) => (f.seq(), f.to_string()),
                None => (e.seq, format!("seq {}: the chain does not verify", e.seq)),
            };
            return self.fail(seq, "chain", message);
        }
        if e.kind == CHECKPOINT_KIND
            && let Err((reason, message)) = self.check_checkpoint(e)
        {
            return self.fail(e.seq, reason, format!("seq {}: {message}", e.seq));
        }
        self.tree.push(leaf_hash(e));
        self.head = Head {
            seq: e.seq,
            hash: e.hash,
        };
        if self.keep_seq == Some(e.seq) {
            self.kept = Some(e.clone());
        }
        if !ANNOTATION_KINDS.contains(&e.kind.as_str()) {
            self.last_evidence_seq = e.seq;
            self.uncovered.push_back(e.seq);
            if SIGNED_AT_ONCE_KINDS.contains(&e.kind.as_str())
                && self.uncovered_signed_at_once.is_none()
            {
                self.uncovered_signed_at_once = Some(e.seq);
            }
        }
        match e.kind.as_str() {
            RUN_STARTED_KIND => self.last_run_started = e.seq,
            RUN_FINISHED_KIND => self.last_run_finished = e.seq,
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn fail(&mut self, seq: u64, reason: &'static str, message: String) -> ControlFlow<()> {
        self.failure = Some(ScanFailure {
            seq,
            reason,
            message,
        });
        ControlFlow::Break(())
    }

    fn check_checkpoint(&mut self, e: &Entry) -> Result<(), (&'static str, String)> {
        let cp = CheckpointPayload::parse(&e.payload).map_err(|m| ("malformed_checkpoint", m))?;
        let head = &cp.head;
        // Leaves 1..seq-1 are in the tree now; a checkpoint signs only entries before it.
        let Some(root) = self.tree.root(head.tree_size) else {
            return Err((
                "future_tree_size",
                format!(
                    "the checkpoint claims tree size {} but only {} entries precede it",
                    head.tree_size,
                    self.tree.len()
                ),
            ));
        };
        if root != head.root {
            return Err((
                "root_mismatch",
                format!(
                    "the checkpoint's root for tree size {} is {}, but the entries give {root}",
                    head.tree_size, head.root
                ),
            ));
        }
        if let Some(prev) = &self.last_checkpoint {
            let p = &prev.checkpoint.head;
            if head.tree_size < p.tree_size {
                return Err((
                    "rewind",
                    format!(
                        "tree size {} is smaller than the previous checkpoint's {} (seq {})",
                        head.tree_size, p.tree_size, prev.seq
                    ),
                ));
            }
            if head.origin != p.origin {
                return Err((
                    "origin_changed",
                    format!(
                        "origin {:?} differs from the previous checkpoint's {:?}",
                        head.origin, p.origin
                    ),
                ));
            }
            // No proof exists when the new tree size is beyond the entries scanned so far: a
            // checkpoint claiming entries the ledger does not hold is inconsistent, said so.
            let proof = self
                .tree
                .consistency_proof(p.tree_size, head.tree_size)
                .ok_or_else(|| {
                    (
                        "inconsistent",
                        format!(
                            "no consistency proof from tree size {} to {}: the ledger holds fewer entries",
                            p.tree_size, head.tree_size
                        ),
                    )
                })?;
            verify_consistency(p.tree_size, head.tree_size, &p.root, &head.root, &proof)
                .map_err(|m| ("inconsistent", m))?;
        }
        if let Some(key) = &self.key {
            cp.verify(key)
                .map_err(|err| ("bad_signature", err.to_string()))?;
        }
        self.checkpoints += 1;
        while self.uncovered.front().is_some_and(|s| *s <= head.tree_size) {
            self.uncovered.pop_front();
        }
        if self
            .uncovered_signed_at_once
            .is_some_and(|s| s <= head.tree_size)
        {
            self.uncovered_signed_at_once = None;
        }
        self.last_checkpoint = Some(RecordedCheckpoint {
            seq: e.seq,
            checkpoint: cp,
        });
        Ok(())
    }

    /// Streams the ledger or export at `path` through the scan.
    pub fn run(mut self, path: &Path) -> Result<Self, SigningError> {
        match detect_source(path)? {
            SourceKind::Sqlite => LedgerReader::open(path)?.for_each(|e| self.push(&e))?,
            SourceKind::Jsonl => {
                for entry in JsonlReader::open(path)? {
                    if self.push(&entry?).is_break() {
                        break;
                    }
                }
            }
        }
        Ok(self)
    }

    /// The failure as an error, for callers that cannot go on from a broken ledger.
    pub fn into_result(self) -> Result<Self, SigningError> {
        match &self.failure {
            None => Ok(self),
            Some(f) => Err(match f.reason {
                "rewind" => SigningError::Rewind(f.message.clone()),
                "inconsistent" | "origin_changed" => SigningError::Inconsistent(f.message.clone()),
                "bad_signature" => SigningError::BadSignature(f.message.clone()),
                _ => SigningError::Integrity(f.message.clone()),
            }),
        }
    }
}

/// A short description of a checkpoint for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckpointSummary {
    /// The `seq` of the `checkpoint` entry.
    pub seq: u64,
    /// The log's origin (`eval/<identity>`).
    pub origin: String,
    /// How many entries the checkpoint covers.
    pub tree_size: u64,
    /// The signed Merkle root.
    pub root: Digest,
}

/// The outcome of `verify_ledger_signatures` (what `ledger verify --public-key --json` prints).
#[derive(Clone, Debug, Serialize)]
pub struct SignatureReport {
    /// True when the chain, every checkpoint and the coverage rules all hold (`error` is `None`).
    pub ok: bool,
    /// Entries whose chain verified.
    pub entries: u64,
    /// The last verified entry.
    pub head: Head,
    /// Checkpoints that verified.
    pub checkpoints: u64,
    /// The last checkpoint that verified, if any.
    pub last_checkpoint: Option<CheckpointSummary>,
    /// Entries after the last verified checkpoint's tree (not yet covered by a signature; the
    /// final checkpoint entry itself is always one of them).
    pub unsigned_tail: u64,
    /// The ledger is a run whose last session marker is `run_finished`.
    pub finished: bool,
    /// The first evidence entry (not a `checkpoint`, `report` or `note`) that no verified
    /// checkpoint covers, if any. On a finished run this is an `unsigned_tail` failure.
    pub first_unsigned_evidence: Option<u64>,
    /// The public key the signatures were checked with, in text form.
    pub key: String,
    /// The first failure, if any; verification stops there.
    pub error: Option<ScanFailure>,
}

/// Verifies the chain, every checkpoint's signature with `key`, that every checkpoint's root is
/// the root of the entries before it, and that each is consistent with its predecessor. A ledger
/// without any checkpoint fails (`no_checkpoint`): nothing in it is signed.
pub fn verify_ledger_signatures(
    path: &Path,
    key: &PublicKey,
) -> Result<SignatureReport, SigningError> {
    verify_ledger_signatures_expecting(path, key, None)
}

/// [`verify_ledger_signatures`] that also requires the chain to reach `expect` (SEQ:HASH), as
/// `ledger verify --expect-head` does.
pub fn verify_ledger_signatures_expecting(
    path: &Path,
    key: &PublicKey,
    expect: Option<Head>,
) -> Result<SignatureReport, SigningError> {
    let scan = LedgerScan::expecting(Some(key.clone()), None, expect).run(path)?;
    Ok(signature_report(scan, key, expect))
}

/// [`verify_ledger_signatures_expecting`] over entries already in memory: a caller that runs
/// several checks reads the ledger once and gives every check the same snapshot, so a file
/// swapped between reads cannot show one ledger to the checks and another to the report.
pub fn verify_entry_signatures(
    entries: &[Entry],
    key: &PublicKey,
    expect: Option<Head>,
) -> SignatureReport {
    let mut scan = LedgerScan::expecting(Some(key.clone()), None, expect);
    for e in entries {
        if scan.push(e).is_break() {
            break;
        }
    }
    signature_report(scan, key, expect)
}

fn signature_report(scan: LedgerScan, key: &PublicKey, expect: Option<Head>) -> SignatureReport {
    let head = scan.head();
    let mut error = scan.failure.clone();
    if error.is_none()
        && let Some(x) = expect
        && x.seq > head.seq
    {
        error = Some(ScanFailure {
            seq: x.seq,
            reason: "chain",
            message: crate::ledger::VerifyFailure::Truncated {
                seq: x.seq,
                last_seq: head.seq,
            }
            .to_string(),
        });
    }
    if error.is_none() && scan.last_checkpoint.is_none() {
        error = Some(ScanFailure {
            seq: 0,
            reason: "no_checkpoint",
            message: "the ledger holds no signed checkpoint".into(),
        });
    }
    let covered = scan
        .last_checkpoint
        .as_ref()
        .map_or(0, |c| c.checkpoint.head.tree_size);
    let finished = scan.last_run_finished > scan.last_run_started;
    let first_unsigned_evidence = scan.uncovered.front().copied();
    if error.is_none()
        && !finished
        && let Some(seq) = scan.uncovered_signed_at_once
    {
        // Dropping `run_finished` must not turn a cut into a run that is merely "not finished":
        // the controller signs right after every outcome, so an unsigned outcome is a cut.
        error = Some(ScanFailure {
            seq,
            reason: "unsigned_tail",
            message: format!(
                "seq {seq}: an attempt outcome or run end is covered by no signed checkpoint (the last covers 1..{covered}); the controller signs right after each one, so the ledger was cut or rewritten (after a crash, resume the run first)"
            ),
        });
    }
    if error.is_none()
        && finished
        && let Some(first) = first_unsigned_evidence
    {
        // A forger who rewrote an entry can drop every checkpoint after it: the chain and the
        // remaining checkpoints still verify, so only the rule that a finished run is signed
        // to its end catches the cut.
        error = Some(ScanFailure {
            seq: first,
            reason: "unsigned_tail",
            message: format!(
                "seq {first}: the run finished (run_finished at seq {}) but entries {first}..{} are covered by no signed checkpoint (the last covers 1..{covered})",
                scan.last_run_finished, scan.last_evidence_seq
            ),
        });
    }
    let last = scan.last_checkpoint.as_ref().map(|c| CheckpointSummary {
        seq: c.seq,
        origin: c.checkpoint.head.origin.clone(),
        tree_size: c.checkpoint.head.tree_size,
        root: c.checkpoint.head.root,
    });
    SignatureReport {
        ok: error.is_none(),
        entries: head.seq,
        head,
        checkpoints: scan.checkpoints,
        unsigned_tail: head
            .seq
            .saturating_sub(last.as_ref().map_or(0, |c| c.tree_size)),
        last_checkpoint: last,
        finished,
        first_unsigned_evidence,
        key: key.to_string(),
        error,
    }
}
