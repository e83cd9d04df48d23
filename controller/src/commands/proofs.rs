//! `eval ledger prove`, `ledger verify-receipt`, `ledger consistency` and
//! `ledger verify --public-key`: the signed-evidence side of the ledger commands.

use super::error::CommandError;
use super::keygen::parse_public_key;
use crate::cli::{
    LedgerConsistencyArgs, LedgerProveArgs, LedgerVerifyArgs, LedgerVerifyReceiptArgs,
};
use crate::status::{CmdResult, Failure, Status};
use eval_evidence::ledger::Head;
use eval_evidence::signing::{self, SignedCheckpoint, SigningError};
use std::path::{Path, PathBuf};

/// The proof commands' own failures; each kind's exit status is decided in `exit::proof_status`.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    #[error("--seq: entries are numbered from 1")]
    SeqZero,
    /// The receipt does not prove what it claims (a signing error of any kind, the key's
    /// included: a receipt that does not verify under the given key is not evidence).
    #[error("{path}: {source}")]
    ReceiptDoesNotVerify {
        path: PathBuf,
        #[source]
        source: SigningError,
    },
    /// `ledger verify --public-key`: the first failure of the chain or its checkpoints.
    #[error(
        "{path}: {message} ({reason}; {entries} entries and {checkpoints} checkpoints verified before it)"
    )]
    SignaturesDoNotVerify {
        path: PathBuf,
        message: String,
        reason: &'static str,
        entries: u64,
        checkpoints: u64,
    },
    /// Serialising the command's own output (`what`: "the proof", "the report").
    #[error("encoding {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("encoding {path}: {source}")]
    EncodeFile {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl ProofError {
    fn encode(what: &'static str) -> impl FnOnce(serde_json::Error) -> ProofError {
        move |source| ProofError::Encode { what, source }
    }
}

pub fn prove(args: LedgerProveArgs) -> CmdResult {
    if args.seq == 0 {
        return Err(ProofError::SeqZero.into());
    }
    let receipt = signing::prove(&args.path, args.seq)?;
    write_json(&args.out, &receipt)?;
    println!(
        "wrote receipt {}: entry {} ({}) is leaf {} of the tree of size {} signed at seq {} by {}",
        args.out.display(),
        receipt.entry.seq,
        receipt.entry.kind,
        receipt.leaf_index,
        receipt.tree_size,
        receipt.checkpoint_seq,
        receipt.key_id
    );
    Ok(Status::Ok)
}

pub fn verify_receipt(args: LedgerVerifyReceiptArgs) -> CmdResult {
    let key = parse_public_key(&args.public_key)?;
    let receipt = signing::read_receipt(&args.receipt)?;
    let v = signing::verify_receipt(&receipt, &key).map_err(|source| {
        ProofError::ReceiptDoesNotVerify {
            path: args.receipt.clone(),
            source,
        }
    })?;
    println!(
        "ok: entry {} ({}, {}) is in {} at tree size {} (root {}), signed by {}",
        v.entry.seq,
        v.entry.kind,
        v.entry.hash,
        v.origin,
        v.tree_size,
        v.root,
        key.key_id_text()
    );
    Ok(Status::Ok)
}

pub fn consistency(args: LedgerConsistencyArgs) -> CmdResult {
    let from = SignedCheckpoint::read_file(&args.from)?;
    let to = SignedCheckpoint::read_file(&args.to)?;
    let proof = signing::prove_consistency(&args.path, &from, &to)?;
    let text = serde_json::to_string_pretty(&proof).map_err(ProofError::encode("the proof"))?;
    println!("{text}");
    Ok(Status::Ok)
}

/// `ledger verify --public-key KEY`: the chain, and every checkpoint's signature, root and
/// consistency with its predecessor. Exit 3 on any failure (or when nothing is signed).
pub fn verify_signed(args: &LedgerVerifyArgs, key_arg: &str, expect: Option<Head>) -> CmdResult {
    let key = parse_public_key(key_arg)?;
    // With `--artifacts`, one read of the ledger for both checks (see `ledger::verify`).
    let (report, snapshot) = match args.artifacts.is_some() {
        true => {
            let entries = super::ledger_checks::read_entries(&args.path)?;
            let report = signing::verify_entry_signatures(&entries, &key, expect);
            (report, Some(entries))
        }
        false => (
            signing::verify_ledger_signatures_expecting(&args.path, &key, expect)?,
            None,
        ),
    };
    let artifacts = if report.ok {
        super::ledger_checks::check_artifacts(args, snapshot.as_deref())
    } else {
        super::ledger_checks::ArtifactCheck::NotAsked
    };
    if args.json {
        let mut v = serde_json::to_value(&report).map_err(ProofError::encode("the report"))?;
        let mut ok = report.ok;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("signatures".into(), true.into());
            obj.insert("artifacts_verified".into(), artifacts.verified().into());
            if let super::ledger_checks::ArtifactCheck::Failed { seq, message } = &artifacts {
                ok = false;
                obj.insert("ok".into(), false.into());
                obj.insert(
                    "error".into(),
                    serde_json::json!({"reason": "artifact", "seq": seq, "message": message}),
                );
            }
        }
        println!("{v}");
        return Ok(if ok { Status::Ok } else { Status::Integrity });
    }
    match &report.error {
        None => {
            artifacts.to_result(args)?;
            let last = report.last_checkpoint.as_ref();
            println!(
                "ok: {} entries verify; head {}; {} checkpoints signed by {} verify; the last (seq {}) covers entries 1..{} of {}{}",
                report.entries,
                report.head,
                report.checkpoints,
                key.key_id_text(),
                last.map_or(0, |c| c.seq),
                last.map_or(0, |c| c.tree_size),
                last.map_or("", |c| c.origin.as_str()),
                artifacts.suffix()
            );
            Ok(Status::Ok)
        }
        Some(f) => Err(ProofError::SignaturesDoNotVerify {
            path: args.path.clone(),
            message: f.message.clone(),
            reason: f.reason,
            entries: report.entries,
            checkpoints: report.checkpoints,
        }
        .into()),
    }
}

/// Writes pretty JSON through a temporary file and a rename, so no half-written file remains.
pub(super) fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Failure> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| ProofError::EncodeFile {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    write_atomically(path, &bytes)
}

pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    eval_protocols::statefs::replace_file(path, bytes)
        .map_err(|e| CommandError::path(path)(e).into())
}
