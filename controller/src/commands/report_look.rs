//! `eval report --look N`: takes a preregistered interim look (`[sequential]`) on the verified
//! ledger, records it as a `look` entry (signed in the transaction that records it when the
//! protocol preregisters a key) and lets the report that follows show it.
//!
//! A look is never taken twice, never out of order, never after the run stopped at a look and
//! never before its fraction of the statistical slots is resolved
//! (`eval_evidence::report::looks::look_refusal`); every refusal is exit 2 with nothing written.

use std::path::Path;
use std::sync::Arc;

use eval_evidence::ledger::{LedgerError, LedgerWriter, NewEntry};
use eval_evidence::report::RunData;
use eval_evidence::report::looks::LookTaken;
use eval_evidence::report::looks::take_look;
use eval_runlog::looks::LOOK;

use crate::status::{Failure, Status};

fn usage(message: String) -> Failure {
    Failure {
        status: Status::Usage,
        message,
    }
}

/// Takes look `look` on `data`, appends its entry to the run's ledger (which must still end at
/// the head `data` was verified at) and adds it to `data` (its head moved to the new one).
pub fn take(
    state: &Path,
    data: &mut RunData,
    look: u32,
    signing_key_file: Option<&Path>,
) -> Result<LookTaken, Failure> {
    let ledger_path = eval_runlog::layout::ledger_path(state, &data.matrix);
    let Some(plan) = data.sequential.clone() else {
        return Err(usage(format!(
            "protocol {} preregisters no interim looks ([sequential]): --look {look} is not a look of it",
            data.protocol
        )));
    };
    if !data.ledger_verified {
        return Err(usage(format!(
            "{}: the ledger does not verify; no look is taken on it",
            ledger_path.display()
        )));
    }
    // A look on signed evidence is signed too, so it is covered like the evidence it judges.
    if data.signed_evidence.is_some() && signing_key_file.is_none() {
        return Err(usage(format!(
            "protocol {} preregisters a signing key: --look needs --signing-key-file so the look is signed",
            data.protocol
        )));
    }
    let taken = take_look(data, &plan, look)
        .map_err(|why| usage(format!("{}: --look {look}: {why}", ledger_path.display())))?;
    let payload = serde_json::to_value(&taken)
        .map_err(|e| usage(format!("cannot serialise the look: {e}")))?;
    let writer = LedgerWriter::open(&ledger_path)?;
    let found = writer.head_blocking()?;
    if found.seq != data.ledger_head.seq || found.hash.to_string() != data.ledger_head.hash {
        return Err(usage(format!(
            "{}: the ledger changed while the look was computed (verified head {}:{}, now {found}); nothing was recorded",
            ledger_path.display(),
            data.ledger_head.seq,
            data.ledger_head.hash
        )));
    }
    let entry = NewEntry::new(LOOK, &payload).map_err(LedgerError::from)?;
    match signing_key_file {
        Some(path) => {
            let key = super::keygen::load_signing_key(Some(path))?;
            if let Some(expected) = eval_protocols::frozen_public_key(state, &data.protocol)? {
                key.ensure_public_matches(&expected)?;
            }
            let origin = eval_evidence::signing::origin_for_identity(&data.identity)?;
            let _checkpointer =
                eval_evidence::signing::Checkpointer::open(Arc::new(key), &origin, &writer)?;
            writer.append_signed_blocking(vec![entry])?;
        }
        None => {
            writer.append_blocking(entry)?;
        }
    }
    let head = writer.head_blocking()?;
    writer.close();
    data.ledger_head.seq = head.seq;
    data.ledger_head.hash = head.hash.to_string();
    data.looks_taken.push(taken.clone());
    eprintln!(
        "{}: {}",
        ledger_path.display(),
        eval_evidence::report::looks::look_line(&taken)
    );
    Ok(taken)
}
