//! The report attestation (`report.intoto.json`): written by `eval report`, checked by
//! `eval report --verify FILE --public-key KEY`.

use super::error::CommandError;
use super::keygen::parse_public_key;
use super::proofs::write_atomically;
use crate::status::{CmdResult, Failure, Status};
use eval_evidence::ledger::Digest;
use eval_evidence::signing::{self, REPORT_SUBJECT, RecordedCheckpoint, SigningKeyPair};
use std::path::Path;

/// Signs an in-toto Statement v1 (in a DSSE envelope) whose subject is the digest of
/// `report_json` and whose predicate names the identity, the driver digest, the run's final
/// checkpoint and the verdict; writes it to `out_path` (normally `report.intoto.json` next to
/// `report.json`); returns the envelope written (what `eval report` registers with a pass).
pub fn write_report_attestation(
    report_json: &[u8],
    identity: &str,
    driver_digest: &Digest,
    final_checkpoint: &RecordedCheckpoint,
    verdict: &serde_json::Value,
    key: &SigningKeyPair,
    out_path: &Path,
) -> Result<Vec<u8>, Failure> {
    let envelope = signing::attest_report(
        report_json,
        identity,
        driver_digest,
        final_checkpoint,
        verdict,
        key,
    )?;
    write_atomically(out_path, &envelope)?;
    Ok(envelope)
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
    // A verdict is only worth its report: without report.json the attestation proves nothing a
    // release could rest on.
    let report = match std::fs::read(&report_path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CommandError::AttestedReportMissing(report_path).into());
        }
        Err(e) => return Err(CommandError::path(&report_path)(e).into()),
    };
    let v = signing::verify_attestation(&envelope, &key, Some(&report)).map_err(|source| {
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
    println!("ok: {} matches the attested digest", report_path.display());
    // The attestation is genuine; whether it allows a release is what it attests.
    let attested = v
        .verdict
        .get("exit_status")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or_else(|| {
            if v.verdict.get("release_allowed") == Some(&serde_json::Value::Bool(true)) {
                0
            } else {
                1
            }
        });
    Ok(match attested {
        0 => Status::Ok,
        3 => Status::Integrity,
        _ => Status::GateNotPassed,
    })
}
