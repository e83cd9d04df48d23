//! Preconditions met only by signed evidence. A registry `report` line is anyone's to write who
//! can write the state directory, so `eval run` (admission) and `eval report` (again, as a reason)
//! accept a precondition only when the passed report's signed attestation, registered with it,
//! verifies with the preregistered key ([`eval_protocols::check_preconditions`] picks the key;
//! [`eval_evidence::signing::check_registered_report`] checks the attestation).

use eval_core::Digest;
use eval_protocols::{Met, Registry, Unmet};
use std::path::Path;

/// The attestation check `eval_protocols::check_preconditions` runs on each passed report.
pub fn verify_registered(
    payload: &serde_json::Value,
    identity: &Digest,
    key: &eval_core::keys::PublicKey,
) -> Result<(), String> {
    let key = eval_evidence::signing::PublicKey::try_from(key).map_err(|e| e.to_string())?;
    eval_evidence::signing::check_registered_report(payload, &identity.to_string(), &key)
}

/// The protocol's met and unmet preconditions, each met one by a verified signed report.
pub fn check(reg: &Registry, protocol: &eval_protocols::Protocol) -> (Vec<Met>, Vec<Unmet>) {
    eval_protocols::check_preconditions(reg, protocol, &verify_registered)
}

/// `eval report`'s re-check (`RunData::preconditions_unmet`): one reason per precondition of
/// `protocol` that the registry of `state` does not meet by signed evidence now (a registry line
/// admitted by older code, an identity retired since, a report that no longer verifies).
pub fn recheck(state: &Path, protocol: &eval_protocols::Protocol) -> Vec<String> {
    if protocol.preconditions.is_empty() {
        return Vec::new();
    }
    let reg = match Registry::open(state) {
        Ok(r) => r,
        Err(e) => return vec![format!("the preconditions could not be re-checked: {e}")],
    };
    check(&reg, protocol)
        .1
        .into_iter()
        .map(|u| format!("precondition {:?} is not met: {}", u.protocol, u.reason))
        .collect()
}
