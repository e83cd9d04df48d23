//! The report attestation (`report.intoto.json`): written by `eval report`, checked by
//! `eval report --verify FILE --public-key KEY`.

use super::error::CommandError;
use super::keygen::parse_public_key;
use super::proofs::write_atomically;
use crate::exit::{CmdResult, Failure, Status};
use eval_evidence::ledger::Digest;
use eval_evidence::signing::{self, REPORT_SUBJECT, RecordedCheckpoint, SigningKeyPair};
use std::path::Path;

/// Signs an in-toto Statement v1 (in a DSSE envelope) whose subject is the digest of
/// `report_json` and whose predicate names the identity, the driver digest, the run's final
/// checkpoint and the verdict; writes it to `out_path` (normally `report.intoto.json` next to
/// `report.json`).
#[allow(dead_code)] // called by `eval report`
pub fn write_report_attestation(
    report_json: &[u8],
    identity: &str,
    driver_digest: &Digest,
    final_checkpoint: &RecordedCheckpoint,
    verdict: &serde_json::Value,
    key: &SigningKeyPair,
    out_path: &Path,
) -> Result<(), Failure> {
    let envelope = signing::attest_report(
        report_json,
        identity,
        driver_digest,
        final_checkpoint,
        verdict,
        key,
    )?;
    write_atomically(out_path, &envelope)
}

/// `eval report --verify FILE --public-key KEY`: the envelope's signature, the statement, the
/// final checkpoint's signature, and — when `report.json` sits next to FILE — the report's digest.
#[allow(dead_code)] // called at the start of `eval report` when --verify is given
pub fn verify_report_attestation(file: &Path, public_key: Option<&str>) -> CmdResult {
    let key_arg = public_key.ok_or(CommandError::VerifyNeedsKey)?;
    let key = parse_public_key(key_arg)?;
    let envelope = std::fs::read(file).map_err(CommandError::path(file))?;
    let report_path = file
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join(REPORT_SUBJECT);
    let report = match std::fs::read(&report_path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(CommandError::path(&report_path)(e).into()),
    };
    let v = signing::verify_attestation(&envelope, &key, report.as_deref()).map_err(|source| {
        CommandError::Attestation {
            path: file.to_path_buf(),
            source,
        }
    })?;
    let cp = &v.final_checkpoint.head;
    println!(
        "ok: {} attests report {} for identity {}; final checkpoint {} @ {} (root {}); verdict {}; signed by {}",
        file.display(),
        v.report_digest,
        v.identity,
        cp.origin,
        cp.tree_size,
        cp.root,
        v.verdict,
        key.key_id_text()
    );
    match report {
        Some(_) => println!("ok: {} matches the attested digest", report_path.display()),
        None => println!(
            "note: {} is not next to the attestation; its digest was not compared",
            report_path.display()
        ),
    }
    Ok(Status::Ok)
}
