//! Signed, independently verifiable evidence over the ledger: Ed25519 keys, an RFC 9162 Merkle
//! tree over the entries, C2SP signed-note checkpoints recorded as `checkpoint` entries, inclusion
//! receipts, consistency proofs and the DSSE/in-toto attestation of a report.
//!
//! The hash chain is untouched: the tree is computed from the stored entries, and a checkpoint is
//! an ordinary entry. Every format here is documented in docs/custody.md ("Signatures") and
//! checked by an independent Python verifier in the tests.

mod checkpoint;
mod checkpointer;
mod dsse;
mod error;
mod key;
mod merkle;
mod receipt;
mod scan;
pub(crate) mod signer;

pub use checkpoint::{
    AA_ORIGIN_PREFIX, CHECKPOINT_KIND, CHECKPOINT_PAYLOAD_VERSION, CheckpointPayload,
    SMOKE_ORIGIN_PREFIX, SignedCheckpoint, TreeHead, aa_origin_for_identity, check_evidence_origin,
    is_aa_origin, is_smoke_origin, origin_for_identity, smoke_origin_for_identity,
};
pub use checkpointer::Checkpointer;
pub use dsse::{
    Envelope, EnvelopeSignature, PAYLOAD_TYPE, PREDICATE_TYPE, REPORT_SUBJECT, STATEMENT_TYPE,
    VerifiedAttestation, attest_report, check_registered_report, pae, verify_attestation,
};
pub use error::SigningError;
pub use key::{KEY_NAME, PublicKey, SigningKeyPair, key_id};
pub use merkle::{
    MerkleTree, empty_root, leaf_hash, node_hash, verify_consistency, verify_inclusion,
};
pub use receipt::{
    CONSISTENCY_FORMAT, ConsistencyProof, PROOF_VERSION, RECEIPT_FORMAT, Receipt, ReceiptEntry,
    VerifiedReceipt, prove, prove_consistency, read_consistency_proof, read_receipt,
    verify_consistency_proof, verify_receipt,
};
pub use scan::{
    ANNOTATION_KINDS, CheckpointSummary, RUN_FINISHED_KIND, RUN_STARTED_KIND, RecordedCheckpoint,
    ScanFailure, SignatureReport, verify_entry_signatures, verify_ledger_signatures,
    verify_ledger_signatures_expecting,
};
