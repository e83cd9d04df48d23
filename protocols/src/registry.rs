//! The identity registry `STATE/registry.jsonl`: one hash chain (the ledger's chain rule and JSONL
//! line format) shared by every protocol of a state directory. Entry kinds and payloads
//! (canonical JSON):
//!
//! - `freeze`: `{"v":1,"name","identity","freeze_file":"freezes/NAME.json","freeze_file_digest",
//!   "driver","tree"}` — a name is frozen at most once.
//! - `retire`: `{"v":1,"name","identity","reason"}` — for good; there is no un-retire.
//! - `report`: `{"identity","release_allowed",…,"attestation"}` (the payload of `eval report`'s
//!   ledger entry, plus the signed report attestation `report.intoto.json` as a JSON object) —
//!   what a precondition reads. A chain-valid line is not evidence by itself: anyone who can write
//!   the file can append one, so a precondition is met only when the attestation verifies with a
//!   preregistered key ([`check_preconditions`]), and [`record_report`] refuses a passed report
//!   without one.
//!
//! The registry is read whole and its chain verified on every open: nothing is decided from a
//! registry that does not verify.
//!
//! The chain rule and the line format are eval-core's ([`eval_core::chain`]); the file I/O is
//! here (read whole, append under an exclusive lock) because the registry is small and protocols
//! must not depend on the evidence crate for a file reader.

use crate::error::ProtocolError;
use eval_core::Digest;
use eval_core::chain::{
    Entry, Head, LineError, NewEntry, jsonl_line, parse_jsonl_line, verify_entries,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The registry's file name inside the state directory.
pub const REGISTRY_FILE: &str = "registry.jsonl";
/// The `v` this code writes into `freeze` and `retire` payloads.
pub const REGISTRY_PAYLOAD_VERSION: u32 = 1;

/// The payload of a `freeze` entry: binds a protocol name to its identity and freeze file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeRecord {
    /// Payload version ([`REGISTRY_PAYLOAD_VERSION`]).
    pub v: u32,
    /// The protocol name frozen (at most once per registry).
    pub name: String,
    /// The identity it was frozen as.
    pub identity: Digest,
    /// Relative to the state directory.
    pub freeze_file: String,
    /// Digest of the freeze file's bytes; a freeze file that no longer hashes to it was modified.
    pub freeze_file_digest: Digest,
    /// The controller source digest at freeze time (as in the freeze file).
    pub driver: Digest,
    /// The combined input tree digest (as in the freeze file).
    pub tree: Digest,
}

/// The payload of a `retire` entry: the identity may never run or be frozen again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetireRecord {
    /// Payload version ([`REGISTRY_PAYLOAD_VERSION`]).
    pub v: u32,
    /// The protocol name the identity was frozen under.
    pub name: String,
    /// The retired identity.
    pub identity: Digest,
    /// Why it was retired, as given to `eval retire --reason`.
    pub reason: String,
}

/// The registry as read (and verified) from one state directory.
#[derive(Clone, Debug)]
pub struct Registry {
    /// The registry file (`STATE/registry.jsonl`), whether or not it exists yet.
    pub path: PathBuf,
    /// Every entry, in chain order; the chain verified when it was read.
    pub entries: Vec<Entry>,
    /// The last entry's seq and hash ([`Head::EMPTY`] for an empty registry); appends link to it.
    pub head: Head,
}

impl Registry {
    /// Reads and verifies `STATE/registry.jsonl`; an absent file is an empty registry.
    pub fn open(state: &Path) -> Result<Registry, ProtocolError> {
        let path = state.join(REGISTRY_FILE);
        if !path.exists() {
            return Ok(Registry {
                path,
                entries: Vec::new(),
                head: Head::EMPTY,
            });
        }
        let entries = read_chain(&path)?;
        let report = verify_entries(entries.iter(), None);
        if let Some(failure) = report.error {
            return Err(ProtocolError::Integrity(format!(
                "{}: the registry chain does not verify: {failure}",
                path.display()
            )));
        }
        check_payloads(&path, &entries)?;
        Ok(Registry {
            path,
            entries,
            head: report.head,
        })
    }

    /// Every payload of `kind`; [`check_payloads`] has shown at open that each one parses, so
    /// none is skipped here.
    fn payloads<T: for<'de> Deserialize<'de>>(&self, kind: &str) -> Vec<(u64, T)> {
        self.entries
            .iter()
            .filter(|e| e.kind == kind)
            .filter_map(|e| serde_json::from_slice(&e.payload).ok().map(|p| (e.seq, p)))
            .collect()
    }

    /// The freeze of protocol `name`, if any.
    pub fn frozen(&self, name: &str) -> Option<FreezeRecord> {
        self.payloads::<FreezeRecord>("freeze")
            .into_iter()
            .map(|(_, r)| r)
            .find(|r| r.name == name)
    }

    /// True when protocol `name` has a `freeze` entry.
    pub fn is_frozen(&self, name: &str) -> bool {
        self.frozen(name).is_some()
    }

    /// The identity protocol `name` was frozen as.
    pub fn frozen_identity(&self, name: &str) -> Option<Digest> {
        self.frozen(name).map(|r| r.identity)
    }

    /// The retirement of an identity, if any.
    pub fn retirement(&self, identity: &Digest) -> Option<RetireRecord> {
        self.payloads::<RetireRecord>("retire")
            .into_iter()
            .map(|(_, r)| r)
            .find(|r| r.identity == *identity)
    }

    /// True when protocol `name` was frozen and its identity retired (or a retire names it).
    pub fn is_retired(&self, name: &str) -> bool {
        match self.frozen_identity(name) {
            Some(id) => self.retirement(&id).is_some(),
            None => self
                .payloads::<RetireRecord>("retire")
                .iter()
                .any(|(_, r)| r.name == name),
        }
    }

    /// True when a `report` entry says release is allowed for `identity`.
    pub fn has_passed(&self, identity: &Digest) -> bool {
        self.passed_report(identity).is_some()
    }

    fn append(&mut self, entry: NewEntry) -> Result<(), ProtocolError> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(ProtocolError::io(parent))?;
        }
        append_entry(&self.path, &entry)?;
        // Re-read so later queries see exactly what is on disk.
        let state = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        *self = Registry::open(&state)?;
        Ok(())
    }

    pub(crate) fn append_freeze(&mut self, rec: &FreezeRecord) -> Result<(), ProtocolError> {
        self.append(NewEntry::new("freeze", rec)?)
    }

    pub(crate) fn append_retire(&mut self, rec: &RetireRecord) -> Result<(), ProtocolError> {
        self.append(NewEntry::new("retire", rec)?)
    }
}

/// Appends a `report` entry (the payload `eval report` records; it must carry `identity` and
/// `release_allowed`) for a frozen, unretired identity. This is what satisfies another protocol's
/// precondition.
pub fn record_report(state: &Path, payload: &serde_json::Value) -> Result<(), ProtocolError> {
    let mut reg = Registry::open(state)?;
    let identity = payload
        .get("identity")
        .and_then(|v| v.as_str())
        .and_then(Digest::parse)
        .ok_or_else(|| ProtocolError::State("a report entry needs an `identity` digest".into()))?;
    let Some(allowed) = payload.get("release_allowed").and_then(|v| v.as_bool()) else {
        return Err(ProtocolError::State(
            "a report entry needs a boolean `release_allowed`".into(),
        ));
    };
    // A pass is registered only with the signed attestation that proves it (an unsigned report,
    // or one signed by a key the caller named, is never registered as passed).
    if allowed && !payload.get("attestation").is_some_and(|a| a.is_object()) {
        return Err(ProtocolError::State(
            "a passed report entry needs its signed `attestation`: only a report signed with the preregistered key is registered as passed".into(),
        ));
    }
    let frozen = reg
        .payloads::<FreezeRecord>("freeze")
        .into_iter()
        .any(|(_, r)| r.identity == identity);
    if !frozen {
        return Err(ProtocolError::State(format!(
            "identity {identity} is not frozen in {}",
            reg.path.display()
        )));
    }
    if let Some(r) = reg.retirement(&identity) {
        return Err(ProtocolError::Integrity(format!(
            "identity {identity} ({}) is retired: {}",
            r.name, r.reason
        )));
    }
    reg.append(NewEntry::new("report", payload)?)
}

/// One unmet precondition, in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unmet {
    /// The precondition's protocol name.
    pub protocol: String,
    /// Why it is not met (no pinned identity, not frozen, frozen under another name, retired, no
    /// passing report).
    pub reason: String,
}

/// One met precondition: the evidence that unlocked it (recorded in `run_started`, shown in the
/// report).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Met {
    /// The precondition's protocol name.
    pub protocol: String,
    /// The pinned identity, frozen under that name.
    pub identity: Digest,
    /// The registry entry (seq) of the passed `report` that satisfied it.
    pub report_seq: u64,
    /// That entry's chain hash.
    pub report_entry_hash: Digest,
    /// The report's own digest, when the entry names one (`report_digest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_digest: Option<String>,
}

impl Registry {
    /// The first `report` entry saying release is allowed for `identity` (what it says, not
    /// verified: a precondition also needs its attestation, see [`check_preconditions`]).
    pub fn passed_report(&self, identity: &Digest) -> Option<&Entry> {
        self.passed_reports(identity).next()
    }

    /// Every `report` entry saying release is allowed for `identity`, in chain order.
    pub fn passed_reports<'a>(&'a self, identity: &Digest) -> impl Iterator<Item = &'a Entry> {
        let want = identity.to_string();
        self.entries.iter().filter(move |e| {
            e.kind == "report"
                && e.payload_json().is_ok_and(|v| {
                    v.get("identity").and_then(|i| i.as_str()) == Some(want.as_str())
                        && v.get("release_allowed").and_then(|b| b.as_bool()) == Some(true)
                })
        })
    }

    /// The freeze record of an identity, whatever its name.
    pub fn freeze_of(&self, identity: &Digest) -> Option<FreezeRecord> {
        self.payloads::<FreezeRecord>("freeze")
            .into_iter()
            .map(|(_, r)| r)
            .find(|r| r.identity == *identity)
    }
}

/// Verifies a registry `report` payload's signed attestation for an identity with a public key:
/// `Ok` only when the attestation is genuine, names that identity, allows release and attests
/// the payload's report digest. The signature check lives in the evidence crate (this crate reads
/// key texts only); the controller passes it in.
pub type ReportCheck<'a> =
    &'a dyn Fn(&serde_json::Value, &Digest, &eval_core::keys::PublicKey) -> Result<(), String>;

/// Checks a protocol's preconditions against the registry. A precondition is met only by its
/// *pinned* identity (`identity = "sha256:…"`): that identity must be frozen in this registry under
/// the precondition's protocol name, not retired, and have a passed report whose signed
/// attestation `verify` accepts with the preregistered key — the precondition's own
/// `public_key`, else the dependent protocol's `[signing] public_key` (never a key the caller
/// names). A name alone unlocks nothing: any protocol can be frozen under any name (a renamed demo
/// would otherwise do); a registry line alone unlocks nothing: anyone who can write the state
/// directory can append a chain-valid one.
pub fn unmet_preconditions(
    reg: &Registry,
    protocol: &crate::protocol::Protocol,
    verify: ReportCheck<'_>,
) -> Vec<Unmet> {
    check_preconditions(reg, protocol, verify).1
}

/// [`unmet_preconditions`], also returning the evidence of every met one.
pub fn check_preconditions(
    reg: &Registry,
    protocol: &crate::protocol::Protocol,
    verify: ReportCheck<'_>,
) -> (Vec<Met>, Vec<Unmet>) {
    let mut met = Vec::new();
    let mut out = Vec::new();
    for pre in &protocol.preconditions {
        let unmet = |reason: String| Unmet {
            protocol: pre.protocol.clone(),
            reason,
        };
        let Some(pinned) = &pre.identity else {
            let hint = match reg.frozen_identity(&pre.protocol) {
                Some(d) => format!(
                    "; protocol {} is frozen here as {d}, which you may pin if it is the evaluation you mean",
                    pre.protocol
                ),
                None => String::new(),
            };
            out.push(unmet(format!(
                "the precondition pins no identity: a name alone unlocks nothing; set `identity = \"sha256:…\"` to the frozen identity of the {} evaluation ({}){hint}",
                pre.protocol, pre.reason
            )));
            continue;
        };
        let Some(identity) = Digest::parse(pinned) else {
            out.push(unmet(format!("pinned identity {pinned:?} is not a digest")));
            continue;
        };
        match reg.freeze_of(&identity) {
            None => {
                out.push(unmet(format!(
                    "pinned identity {identity} is not frozen in this state directory ({})",
                    pre.reason
                )));
                continue;
            }
            Some(f) if f.name != pre.protocol => {
                out.push(unmet(format!(
                    "pinned identity {identity} is frozen as protocol {:?}, not {:?}",
                    f.name, pre.protocol
                )));
                continue;
            }
            Some(_) => {}
        }
        let key = match pre.public_key.as_deref() {
            Some(text) => eval_core::keys::PublicKey::parse(text)
                .map(Some)
                .map_err(|e| format!("the precondition's public_key is not a public key: {e}")),
            None => protocol
                .signing_public_key()
                .map_err(|e| format!("the protocol's signing.public_key is not a public key: {e}")),
        };
        let key = match key {
            Ok(Some(key)) => key,
            Ok(None) => {
                out.push(unmet(format!(
                    "no preregistered key to verify identity {identity}'s signed report with: set `public_key` in the precondition or `[signing] public_key` in the protocol ({})",
                    pre.reason
                )));
                continue;
            }
            Err(why) => {
                out.push(unmet(why));
                continue;
            }
        };
        let mut refused = Vec::new();
        let verified = reg.passed_reports(&identity).find(|e| {
            let checked = e
                .payload_json()
                .map_err(|e| e.to_string())
                .and_then(|v| verify(&v, &identity, &key));
            match checked {
                Ok(()) => true,
                Err(why) => {
                    refused.push(format!("seq {}: {why}", e.seq));
                    false
                }
            }
        });
        if let Some(r) = reg.retirement(&identity) {
            out.push(unmet(format!(
                "identity {identity} is retired: {}",
                r.reason
            )));
        } else if let Some(e) = verified {
            met.push(Met {
                protocol: pre.protocol.clone(),
                identity,
                report_seq: e.seq,
                report_entry_hash: e.hash,
                report_digest: e.payload_json().ok().and_then(|v| {
                    v.get("report_digest")
                        .and_then(|d| d.as_str())
                        .map(str::to_owned)
                }),
            });
        } else if !refused.is_empty() {
            out.push(unmet(format!(
                "identity {identity} has no passed report whose signed attestation verifies with key {}: {} ({})",
                key.key_id_text(),
                refused.join("; "),
                pre.reason
            )));
        } else {
            out.push(unmet(format!(
                "identity {identity} has no passed report (release allowed) in the registry ({})",
                pre.reason
            )));
        }
    }
    (met, out)
}

/// Reads every entry of the registry file; a line that is not an entry is an integrity failure
/// (the registry is only ever written by [`append_entry`]).
fn read_chain(path: &Path) -> Result<Vec<Entry>, ProtocolError> {
    let bytes = std::fs::read(path).map_err(ProtocolError::io(path))?;
    let mut out = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        out.push(parse_jsonl_line(line).map_err(|e| match e {
            LineError::NewerFormat { .. } => ProtocolError::State(format!(
                "{}: line {}: {e}; upgrade eval",
                path.display(),
                i + 1
            )),
            LineError::Malformed(reason) => {
                ProtocolError::Integrity(format!("{}: line {}: {reason}", path.display(), i + 1))
            }
        })?);
    }
    Ok(out)
}

/// Appends one entry under an exclusive advisory lock, after verifying the chain as it is on disk
/// (another process may have appended since this registry was opened), and syncs.
fn append_entry(path: &Path, entry: &NewEntry) -> Result<(), ProtocolError> {
    use std::io::Write as _;
    // Never through a link or FIFO planted at the registry's name.
    let mut file = crate::statefs::open_append(path).map_err(ProtocolError::io(path))?;
    file.lock().map_err(ProtocolError::io(path))?;
    let entries = read_chain(path)?;
    let report = verify_entries(entries.iter(), None);
    if let Some(failure) = report.error {
        return Err(ProtocolError::Integrity(format!(
            "{}: the registry chain does not verify, nothing appended: {failure}",
            path.display()
        )));
    }
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let mut line = jsonl_line(&entry.chained(&report.head, now));
    line.push(b'\n');
    file.write_all(&line).map_err(ProtocolError::io(path))?;
    file.sync_all().map_err(ProtocolError::io(path))
}

/// A `freeze` or `retire` whose payload does not parse would be read as no freeze or no
/// retirement (a retired identity runnable again); a `report` that is not a JSON object would be
/// read as not passed. The chain verifies, so this is what was signed off: refused as integrity.
fn check_payloads(path: &Path, entries: &[Entry]) -> Result<(), ProtocolError> {
    for e in entries {
        let parsed = match e.kind.as_str() {
            "freeze" => serde_json::from_slice::<FreezeRecord>(&e.payload).map(drop),
            "retire" => serde_json::from_slice::<RetireRecord>(&e.payload).map(drop),
            "report" => {
                serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&e.payload)
                    .map(drop)
            }
            _ => Ok(()),
        };
        parsed.map_err(|err| {
            ProtocolError::Integrity(format!(
                "{}: seq {}: a {} entry that does not parse: {err}",
                path.display(),
                e.seq,
                e.kind
            ))
        })?;
    }
    Ok(())
}
