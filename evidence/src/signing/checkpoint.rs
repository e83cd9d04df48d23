//! Checkpoints as C2SP signed notes (`c2sp.org/tlog-checkpoint`, `c2sp.org/signed-note`):
//!
//! ```text
//! eval/<identity>\n                     origin
//! 1234\n                                tree size, decimal
//! <base64 of the 32-byte root hash>\n
//! \n
//! — eval <base64(key id u32be ‖ 64-byte Ed25519 signature)>\n
//! ```
//! The signature covers the note text: every byte up to and including the newline that ends the
//! root line (and any extension lines, which `eval` never writes but accepts and leaves signed).

use super::{PublicKey, SigningError, SigningKeyPair};
use crate::ledger::Digest;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

/// The ledger entry kind of a checkpoint.
pub const CHECKPOINT_KIND: &str = "checkpoint";
/// Version of the checkpoint entry payload.
pub const CHECKPOINT_PAYLOAD_VERSION: u64 = 1;

const SIG_PREFIX: &str = "\u{2014} ";

/// The origin line for an identity: `eval/<identity>`.
pub fn origin_for_identity(identity: &str) -> Result<String, SigningError> {
    let origin = format!("eval/{identity}");
    check_origin(&origin)?;
    Ok(origin)
}

/// The origin prefix of a smoke run's log: `eval-smoke/<identity>`. A smoke run signs under an
/// origin of its own, so none of its checkpoints, receipts or attestations can pass for the real
/// run's (`eval/<identity>`) with only the public key to check them.
pub const SMOKE_ORIGIN_PREFIX: &str = "eval-smoke/";

/// The origin line of an identity's smoke runs: `eval-smoke/<identity>`.
pub fn smoke_origin_for_identity(identity: &str) -> Result<String, SigningError> {
    let origin = format!("{SMOKE_ORIGIN_PREFIX}{identity}");
    check_origin(&origin)?;
    Ok(origin)
}

/// True for a smoke run's log.
pub fn is_smoke_origin(origin: &str) -> bool {
    origin.starts_with(SMOKE_ORIGIN_PREFIX)
}

/// The origin prefix of an A/A calibration run's log (`eval run --aa`): `eval-aa/<identity>`.
/// Like a smoke run's, none of its checkpoints, receipts or attestations can pass for the real
/// run's: an A/A run is never evidence for a release.
pub const AA_ORIGIN_PREFIX: &str = "eval-aa/";

/// The origin line of an identity's A/A calibration runs: `eval-aa/<identity>`.
pub fn aa_origin_for_identity(identity: &str) -> Result<String, SigningError> {
    let origin = format!("{AA_ORIGIN_PREFIX}{identity}");
    check_origin(&origin)?;
    Ok(origin)
}

/// True for an A/A calibration run's log.
pub fn is_aa_origin(origin: &str) -> bool {
    origin.starts_with(AA_ORIGIN_PREFIX)
}

/// Evidence of `identity` is signed under `eval/<identity>` and nothing else: a smoke run's log
/// (or another identity's) is refused, whatever its signatures.
pub fn check_evidence_origin(origin: &str, identity: &str) -> Result<(), SigningError> {
    if is_smoke_origin(origin) {
        return Err(SigningError::Integrity(format!(
            "the checkpoints are of log {origin:?}: a smoke run's, never evidence"
        )));
    }
    if is_aa_origin(origin) {
        return Err(SigningError::Integrity(format!(
            "the checkpoints are of log {origin:?}: an A/A calibration run's, never evidence for a release"
        )));
    }
    let want = origin_for_identity(identity)?;
    if origin != want {
        return Err(SigningError::Integrity(format!(
            "the checkpoints are of log {origin:?}, not this run's {want:?}"
        )));
    }
    Ok(())
}

pub(crate) fn check_origin(origin: &str) -> Result<(), SigningError> {
    let ok = !origin.is_empty()
        && origin.len() <= 255
        && origin.bytes().all(|b| b.is_ascii_graphic() && b != b'+');
    if ok {
        Ok(())
    } else {
        Err(SigningError::Origin(origin.to_owned()))
    }
}

/// A tree head: which log, how many leaves, which root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeHead {
    /// The log's name, `eval/<identity>`: a checkpoint of one protocol's ledger cannot pass for
    /// another's.
    pub origin: String,
    /// How many ledger entries (1..=tree_size) the tree covers.
    pub tree_size: u64,
    /// The RFC 9162 Merkle root over those entries (leaves per [`super::merkle::leaf_hash`]).
    pub root: Digest,
}

impl TreeHead {
    /// The note text that is signed.
    pub fn note_text(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.tree_size,
            B64.encode(self.root.0)
        )
    }
}

/// A signed checkpoint: the tree head, the exact signed text, and its signatures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedCheckpoint {
    /// The tree head the note states.
    pub head: TreeHead,
    /// The full note: text, blank line, signature lines.
    note: String,
    /// Length of the signed text within `note`.
    text_len: usize,
    signatures: Vec<NoteSignature>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct NoteSignature {
    name: String,
    key_id: u32,
    sig: [u8; 64],
}

impl SignedCheckpoint {
    /// Signs `head` with `key`; fails only for an origin that breaks the note format.
    pub fn sign(head: TreeHead, key: &SigningKeyPair) -> Result<SignedCheckpoint, SigningError> {
        check_origin(&head.origin)?;
        let text = head.note_text();
        let sig = key.sign(text.as_bytes());
        let mut blob = Vec::with_capacity(68);
        blob.extend_from_slice(&key.public().id().to_be_bytes());
        blob.extend_from_slice(&sig);
        let note = format!(
            "{text}\n{SIG_PREFIX}{} {}\n",
            key.public().name(),
            B64.encode(blob)
        );
        SignedCheckpoint::parse(&note)
    }

    /// Parses a signed note (no signature is checked here; see [`Self::verify`]).
    pub fn parse(note: &str) -> Result<SignedCheckpoint, SigningError> {
        let bad = |why: &str| SigningError::Note(why.to_owned());
        let split = note
            .rfind("\n\n")
            .ok_or_else(|| bad("no blank line before the signatures"))?;
        let text = &note[..split + 1];
        let sig_block = &note[split + 2..];
        if text.contains("\n\n") || text.starts_with('\n') {
            return Err(bad("empty line inside the note text"));
        }
        let mut lines = text.strip_suffix('\n').unwrap_or(text).split('\n');
        let origin = lines.next().ok_or_else(|| bad("no origin line"))?;
        check_origin(origin).map_err(|_| bad("the origin line is not a valid origin"))?;
        let size_text = lines.next().ok_or_else(|| bad("no tree size line"))?;
        let size_ok = !size_text.is_empty()
            && size_text.bytes().all(|b| b.is_ascii_digit())
            && (size_text == "0" || !size_text.starts_with('0'));
        let tree_size: u64 = size_text
            .parse()
            .ok()
            .filter(|_| size_ok)
            .ok_or_else(|| bad("the tree size is not a decimal number"))?;
        let root_text = lines.next().ok_or_else(|| bad("no root hash line"))?;
        let root = B64
            .decode(root_text)
            .ok()
            .and_then(|r| Digest::from_slice(&r))
            .ok_or_else(|| bad("the root hash is not 32 bytes of base64"))?;
        if !sig_block.ends_with('\n') {
            return Err(bad("the signature block does not end with a newline"));
        }
        let mut signatures = Vec::new();
        for line in sig_block[..sig_block.len() - 1].split('\n') {
            let rest = line.strip_prefix(SIG_PREFIX).ok_or_else(|| {
                bad("a signature line does not start with an em dash and a space")
            })?;
            let (name, b64) = rest
                .split_once(' ')
                .ok_or_else(|| bad("a signature line has no key name"))?;
            let blob = B64
                .decode(b64)
                .map_err(|_| bad("a signature is not valid base64"))?;
            if blob.len() < 4 {
                return Err(bad("a signature is too short"));
            }
            let key_id = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]);
            // Signatures of other types or lengths are not ours to judge; keep Ed25519 ones.
            if let Ok(sig) = <[u8; 64]>::try_from(&blob[4..]) {
                signatures.push(NoteSignature {
                    name: name.to_owned(),
                    key_id,
                    sig,
                });
            }
        }
        if signatures.is_empty() {
            return Err(bad("the note carries no signature"));
        }
        Ok(SignedCheckpoint {
            head: TreeHead {
                origin: origin.to_owned(),
                tree_size,
                root,
            },
            note: note.to_owned(),
            text_len: text.len(),
            signatures,
        })
    }

    /// Checks that `key` signed this note (signatures by other keys are ignored, as C2SP says).
    pub fn verify(&self, key: &PublicKey) -> Result<(), SigningError> {
        let text = &self.note.as_bytes()[..self.text_len];
        let mine: Vec<&NoteSignature> = self
            .signatures
            .iter()
            .filter(|s| s.name == key.name() && s.key_id == key.id())
            .collect();
        if mine.is_empty() {
            let found: Vec<String> = self
                .signatures
                .iter()
                .map(|s| format!("{}+{:08x}", s.name, s.key_id))
                .collect();
            return Err(SigningError::BadSignature(format!(
                "checkpoint {} @ {} is not signed by key {} (signed by {})",
                self.head.origin,
                self.head.tree_size,
                key.key_id_text(),
                found.join(", ")
            )));
        }
        for s in mine {
            key.verify(text, &s.sig).map_err(|_| {
                SigningError::BadSignature(format!(
                    "checkpoint {} @ {}: the signature by {} does not match the note",
                    self.head.origin,
                    self.head.tree_size,
                    key.key_id_text()
                ))
            })?;
        }
        Ok(())
    }

    /// The full signed note text.
    pub fn note(&self) -> &str {
        &self.note
    }

    /// `name+keyid` of every signature on the note.
    pub fn key_ids(&self) -> Vec<String> {
        self.signatures
            .iter()
            .map(|s| format!("{}+{:08x}", s.name, s.key_id))
            .collect()
    }

    /// The payload of the `checkpoint` ledger entry that records this checkpoint.
    pub fn entry_payload(&self) -> CheckpointPayload {
        CheckpointPayload {
            v: CHECKPOINT_PAYLOAD_VERSION,
            origin: self.head.origin.clone(),
            tree_size: self.head.tree_size,
            root: self.head.root,
            keys: self.key_ids(),
            note: self.note.clone(),
        }
    }

    /// Reads a checkpoint from a file holding either the signed note itself or a JSON document
    /// (a receipt, a checkpoint payload) whose `checkpoint` or `note` field holds it.
    pub fn read_file(path: &std::path::Path) -> Result<SignedCheckpoint, SigningError> {
        let text = std::fs::read_to_string(path).map_err(SigningError::io(path))?;
        let doc = |reason: String| SigningError::Document {
            path: path.to_path_buf(),
            reason,
        };
        if text.trim_start().starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| doc(format!("not JSON: {e}")))?;
            let note = v
                .get("checkpoint")
                .or_else(|| v.get("note"))
                .and_then(|n| n.as_str())
                .ok_or_else(|| doc("no \"checkpoint\" or \"note\" string field".into()))?;
            return SignedCheckpoint::parse(note).map_err(|e| doc(e.to_string()));
        }
        SignedCheckpoint::parse(&text).map_err(|e| doc(e.to_string()))
    }
}

/// The payload of a `checkpoint` ledger entry. `note` is authoritative; the other fields repeat
/// it for queries and must agree with it (verification checks that they do).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointPayload {
    /// Payload version.
    pub v: u64,
    /// The note's origin (repeated from `note`).
    pub origin: String,
    /// The note's tree size (repeated from `note`).
    pub tree_size: u64,
    /// The note's root hash (repeated from `note`).
    pub root: Digest,
    /// `name+keyid` of every signature on the note (repeated from `note`).
    pub keys: Vec<String>,
    /// The full signed note, verbatim: the authoritative copy.
    pub note: String,
}

impl CheckpointPayload {
    /// Parses and cross-checks a stored payload; returns the note it carries.
    pub fn parse(bytes: &[u8]) -> Result<SignedCheckpoint, String> {
        let p: CheckpointPayload = serde_json::from_slice(bytes)
            .map_err(|e| format!("malformed checkpoint payload: {e}"))?;
        if p.v > CHECKPOINT_PAYLOAD_VERSION {
            return Err(format!(
                "checkpoint payload version {} is newer than this eval understands ({CHECKPOINT_PAYLOAD_VERSION}); upgrade eval",
                p.v
            ));
        }
        let signed = SignedCheckpoint::parse(&p.note).map_err(|e| e.to_string())?;
        if signed.head.origin != p.origin
            || signed.head.tree_size != p.tree_size
            || signed.head.root != p.root
            || signed.key_ids() != p.keys
        {
            return Err("the checkpoint payload's fields disagree with its signed note".into());
        }
        Ok(signed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::KEY_NAME;

    #[test]
    fn note_round_trips_and_tampering_is_caught() {
        let key = SigningKeyPair::from_seed(KEY_NAME, [1u8; 32]).unwrap();
        let head = TreeHead {
            origin: "eval/test".into(),
            tree_size: 5,
            root: Digest::of(b"x"),
        };
        let signed = SignedCheckpoint::sign(head.clone(), &key).unwrap();
        assert!(signed.note().starts_with("eval/test\n5\n"));
        assert!(signed.note().contains("\n\n\u{2014} eval "));
        let parsed = SignedCheckpoint::parse(signed.note()).unwrap();
        assert_eq!(parsed.head, head);
        parsed.verify(key.public()).unwrap();
        let tampered = signed.note().replacen("\n5\n", "\n6\n", 1);
        let t = SignedCheckpoint::parse(&tampered).unwrap();
        assert!(matches!(
            t.verify(key.public()),
            Err(SigningError::BadSignature(_))
        ));
        let other = SigningKeyPair::from_seed(KEY_NAME, [2u8; 32]).unwrap();
        assert!(parsed.verify(other.public()).is_err());
        assert!(SignedCheckpoint::parse("eval/test\n05\nAAAA\n\n\u{2014} eval AAAA\n").is_err());
        let payload = crate::canonical::to_vec(&signed.entry_payload()).unwrap();
        assert_eq!(CheckpointPayload::parse(&payload).unwrap(), signed);
    }
}
