//! The report attestation: an in-toto Statement v1 in a DSSE envelope, signed with the run's key.
//!
//! ```text
//! PAE(type, body) = "DSSEv1" SP len(type) SP type SP len(body) SP body     (len: ASCII decimal)
//! envelope  = {"payload": base64(statement), "payloadType": "application/vnd.in-toto+json",
//!              "signatures": [{"keyid": "eval+1a2b3c4d", "sig": base64(Ed25519(PAE))}]}
//! statement = {"_type": "https://in-toto.io/Statement/v1",
//!              "predicate": {"driver_digest", "final_checkpoint": {"note","origin","root",
//!                            "seq","tree_size"}, "identity", "verdict"},
//!              "predicateType": "urn:eval:report-attestation:v1",
//!              "subject": [{"digest": {"sha256": hex}, "name": "report.json"}]}
//! ```
//! The statement is canonical JSON; the signature covers PAE of the exact payload bytes.

use super::checkpoint::SignedCheckpoint;
use super::scan::RecordedCheckpoint;
use super::{PublicKey, SigningError, SigningKeyPair};
use crate::ledger::Digest;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The DSSE payload type of the attestation (an in-toto statement).
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The in-toto statement `_type` the attestation uses.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The predicate type naming eval's report-attestation predicate (version 1).
pub const PREDICATE_TYPE: &str = "urn:eval:report-attestation:v1";
/// The subject name of the JSON report.
pub const REPORT_SUBJECT: &str = "report.json";

/// DSSE's pre-authentication encoding.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + payload_type.len() + 32);
    out.extend_from_slice(
        format!(
            "DSSEv1 {} {payload_type} {} ",
            payload_type.len(),
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(body);
    out
}

/// A DSSE envelope: a base64 payload, its type, and signatures over their pre-authentication
/// encoding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The statement's canonical JSON, base64 (standard alphabet).
    pub payload: String,
    /// The payload's media type ([`PAYLOAD_TYPE`]); signed together with the payload.
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// One signature per signing key.
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature of a DSSE envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    /// The signer's key id text (`eval+<hex>`); a hint for choosing the key, not trusted.
    #[serde(default)]
    pub keyid: String,
    /// Base64 Ed25519 signature over [`pae`] of the payload type and the decoded payload.
    pub sig: String,
}

/// Builds and signs the attestation of a report (returns the envelope as canonical JSON bytes).
pub fn attest_report(
    report_json: &[u8],
    identity: &str,
    driver_digest: &Digest,
    final_checkpoint: &RecordedCheckpoint,
    verdict: &serde_json::Value,
    key: &SigningKeyPair,
) -> Result<Vec<u8>, SigningError> {
    let cp = &final_checkpoint.checkpoint;
    let statement = json!({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": REPORT_SUBJECT, "digest": {"sha256": Digest::of(report_json).hex()}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "identity": identity,
            "driver_digest": driver_digest,
            "final_checkpoint": {
                "seq": final_checkpoint.seq,
                "origin": cp.head.origin,
                "tree_size": cp.head.tree_size,
                "root": cp.head.root,
                "note": cp.note(),
            },
            "verdict": verdict,
        },
    });
    let body = crate::canonical::to_vec(&statement)?;
    let sig = key.sign(&pae(PAYLOAD_TYPE, &body));
    let envelope = Envelope {
        payload: B64.encode(&body),
        payload_type: PAYLOAD_TYPE.into(),
        signatures: vec![EnvelopeSignature {
            keyid: key.public().key_id_text(),
            sig: B64.encode(sig),
        }],
    };
    Ok(crate::canonical::to_vec(&envelope)?)
}

/// What a verified attestation says.
#[derive(Clone, Debug)]
pub struct VerifiedAttestation {
    /// The whole decoded in-toto statement.
    pub statement: serde_json::Value,
    /// SHA-256 of the attested JSON report.
    pub report_digest: Digest,
    /// The protocol identity the predicate names.
    pub identity: String,
    /// The signed checkpoint the report was computed up to (from the predicate's note).
    pub final_checkpoint: SignedCheckpoint,
    /// The predicate's verdict object, as attested.
    pub verdict: serde_json::Value,
}

/// Verifies an envelope: a signature by `key` over PAE(payloadType, payload), an in-toto v1
/// statement of our predicate type, and a final checkpoint that `key` signed too. When
/// `report_json` is given, its digest must be the subject's.
pub fn verify_attestation(
    envelope_json: &[u8],
    key: &PublicKey,
    report_json: Option<&[u8]>,
) -> Result<VerifiedAttestation, SigningError> {
    let bad = |m: String| SigningError::BadSignature(m);
    let env: Envelope = serde_json::from_slice(envelope_json)
        .map_err(|e| SigningError::Proof(format!("not a DSSE envelope: {e}")))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(SigningError::Proof(format!(
            "payloadType is {:?}, not {PAYLOAD_TYPE:?}",
            env.payload_type
        )));
    }
    let body = B64
        .decode(&env.payload)
        .map_err(|_| SigningError::Proof("the payload is not base64".into()))?;
    let message = pae(&env.payload_type, &body);
    let mut signed = false;
    for s in &env.signatures {
        let Ok(raw) = B64.decode(&s.sig) else {
            continue;
        };
        let Ok(sig) = <[u8; 64]>::try_from(raw.as_slice()) else {
            continue;
        };
        if key.verify(&message, &sig).is_ok() {
            signed = true;
            break;
        }
    }
    if !signed {
        return Err(bad(format!(
            "no signature in the envelope verifies with key {}",
            key.key_id_text()
        )));
    }
    let statement: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| SigningError::Proof(format!("the statement is not JSON: {e}")))?;
    let field = |path: &[&str]| -> Option<&serde_json::Value> {
        path.iter().try_fold(&statement, |v, k| v.get(k))
    };
    let proof = |m: &str| SigningError::Proof(m.to_owned());
    if field(&["_type"]).and_then(|v| v.as_str()) != Some(STATEMENT_TYPE) {
        return Err(proof("the statement is not an in-toto Statement v1"));
    }
    if field(&["predicateType"]).and_then(|v| v.as_str()) != Some(PREDICATE_TYPE) {
        return Err(proof("the statement is not an eval report attestation"));
    }
    let report_digest = statement
        .get("subject")
        .and_then(|s| s.as_array())
        .and_then(|s| {
            s.iter()
                .find(|s| s.get("name").and_then(|n| n.as_str()) == Some(REPORT_SUBJECT))
        })
        .and_then(|s| s.get("digest")?.get("sha256")?.as_str())
        .and_then(Digest::from_hex)
        .ok_or_else(|| proof("the statement has no report.json subject with a sha256 digest"))?;
    if let Some(report) = report_json
        && Digest::of(report) != report_digest
    {
        return Err(SigningError::Proof(format!(
            "the report's digest {} is not the attested {report_digest}",
            Digest::of(report)
        )));
    }
    let note = field(&["predicate", "final_checkpoint", "note"])
        .and_then(|v| v.as_str())
        .ok_or_else(|| proof("the predicate has no final checkpoint"))?;
    let cp = SignedCheckpoint::parse(note)?;
    cp.verify(key)?;
    let fc = field(&["predicate", "final_checkpoint"]);
    let agrees = fc.and_then(|v| v.get("tree_size")?.as_u64()) == Some(cp.head.tree_size)
        && fc.and_then(|v| v.get("origin")?.as_str()) == Some(cp.head.origin.as_str())
        && fc.and_then(|v| v.get("root")?.as_str()) == Some(cp.head.root.to_string().as_str());
    if !agrees {
        return Err(proof(
            "the final checkpoint's fields disagree with its signed note",
        ));
    }
    // A signed statement without them says nothing about which run or what verdict it attests:
    // refused, not shown as an empty identity and a null verdict.
    let identity = field(&["predicate", "identity"])
        .and_then(|v| v.as_str())
        .filter(|i| !i.is_empty())
        .ok_or_else(|| proof("the predicate has no identity"))?
        .to_owned();
    let verdict = field(&["predicate", "verdict"])
        .filter(|v| v.is_object())
        .cloned()
        .ok_or_else(|| proof("the predicate has no verdict"))?;
    Ok(VerifiedAttestation {
        identity,
        verdict,
        report_digest,
        final_checkpoint: cp,
        statement,
    })
}

/// Checks a registry `report` payload (what `eval report` registers: the report entry's payload
/// plus `attestation`, the signed envelope of `report.intoto.json` as a JSON object) for
/// `identity` with the preregistered `key`: the attestation verifies with `key`, names `identity`,
/// its final checkpoint is the real run's (origin `eval/<identity>`, never a smoke run's), its
/// verdict allows release, and it attests the payload's `report_digest`. This is what a
/// precondition rests on; the registry line alone is anyone's to write.
pub fn check_registered_report(
    payload: &serde_json::Value,
    identity: &str,
    key: &PublicKey,
) -> Result<(), String> {
    let envelope = payload.get("attestation").filter(|a| a.is_object()).ok_or(
        "it carries no signed report attestation (an unsigned report, or a line written by hand)",
    )?;
    let bytes = serde_json::to_vec(envelope).map_err(|e| e.to_string())?;
    let v = verify_attestation(&bytes, key, None).map_err(|e| e.to_string())?;
    if v.identity != identity {
        return Err(format!(
            "its attestation is for identity {}, not {identity}",
            v.identity
        ));
    }
    let origin = super::origin_for_identity(identity).map_err(|e| e.to_string())?;
    if v.final_checkpoint.head.origin != origin {
        return Err(format!(
            "its attestation's checkpoint is of log {:?}, not the run's {origin:?}",
            v.final_checkpoint.head.origin
        ));
    }
    if v.verdict.get("release_allowed") != Some(&serde_json::Value::Bool(true)) {
        return Err("its attestation's verdict does not allow release".into());
    }
    let named = payload.get("report_digest").and_then(|d| d.as_str());
    if named != Some(v.report_digest.to_string().as_str()) {
        return Err(format!(
            "its attestation attests report {}, the entry names {}",
            v.report_digest,
            named.unwrap_or("none")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// A registry payload as `eval report` registers it: the report entry's fields and the
    /// attestation of `report` signed by `key` with a checkpoint of log `origin`.
    fn registered(key: &SigningKeyPair, identity: &str, origin: &str, allowed: bool) -> Value {
        let report = br#"{"report":1}"#;
        let head = super::super::TreeHead {
            origin: origin.to_owned(),
            tree_size: 3,
            root: Digest::of(b"root"),
        };
        let checkpoint = RecordedCheckpoint {
            seq: 4,
            checkpoint: SignedCheckpoint::sign(head, key).unwrap(),
        };
        let envelope = attest_report(
            report,
            identity,
            &Digest::of(b"driver"),
            &checkpoint,
            &json!({"release_allowed": allowed}),
            key,
        )
        .unwrap();
        json!({
            "identity": identity,
            "release_allowed": true,
            "report_digest": Digest::of(report).to_string(),
            "attestation": serde_json::from_slice::<Value>(&envelope).unwrap(),
        })
    }

    #[test]
    fn a_registered_report_counts_only_with_an_attestation_by_the_preregistered_key() {
        let id = format!("sha256:{}", "ab".repeat(32));
        let real = format!("eval/{id}");
        let key = SigningKeyPair::generate(super::super::KEY_NAME).unwrap();
        let pk = key.public().clone();
        let good = registered(&key, &id, &real, true);
        assert_eq!(check_registered_report(&good, &id, &pk), Ok(()));
        // A hand-written line: no attestation at all.
        let mut bare = good.clone();
        bare.as_object_mut().unwrap().remove("attestation");
        let e = check_registered_report(&bare, &id, &pk).unwrap_err();
        assert!(e.contains("no signed report attestation"), "{e}");
        // Signed by a key the caller chose (every field right, the key not preregistered).
        let other = SigningKeyPair::generate(super::super::KEY_NAME).unwrap();
        let e = check_registered_report(&registered(&other, &id, &real, true), &id, &pk);
        assert!(e.unwrap_err().contains("no signature"));
        // Another identity's attestation, a smoke run's log, a failed verdict, another report.
        let other_id = format!("sha256:{}", "cd".repeat(32));
        let e = check_registered_report(&registered(&key, &other_id, &real, true), &id, &pk);
        assert!(e.unwrap_err().contains("not sha256:abab"));
        let smoke = format!("eval-smoke/{id}");
        let e = check_registered_report(&registered(&key, &id, &smoke, true), &id, &pk);
        assert!(e.unwrap_err().contains("eval-smoke/"));
        let e = check_registered_report(&registered(&key, &id, &real, false), &id, &pk);
        assert!(e.unwrap_err().contains("does not allow release"));
        let mut swapped = good.clone();
        swapped["report_digest"] = json!(Digest::of(b"another report").to_string());
        let e = check_registered_report(&swapped, &id, &pk);
        assert!(e.unwrap_err().contains("attests report"));
    }

    #[test]
    fn pae_matches_the_dsse_spec_example() {
        // From the DSSE protocol document: PAE("http://example.com/HelloWorld", "hello world").
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }
}
