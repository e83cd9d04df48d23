//! The identity registry `STATE/registry.jsonl`: one hash chain (the ledger's chain rule and JSONL
//! line format) shared by every protocol of a state directory. Entry kinds and payloads
//! (canonical JSON):
//!
//! - `freeze`: `{"v":1,"name","identity","freeze_file":"freezes/NAME.json","freeze_file_digest",
//!   "driver","tree"}` — a name is frozen at most once.
//! - `retire`: `{"v":1,"name","identity","reason"}` — for good; there is no un-retire.
//! - `report`: `{"identity","release_allowed",…}` (the payload of `eval report`'s ledger entry) —
//!   what a precondition reads.
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
    if payload
        .get("release_allowed")
        .and_then(|v| v.as_bool())
        .is_none()
    {
        return Err(ProtocolError::State(
            "a report entry needs a boolean `release_allowed`".into(),
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
    /// The first `report` entry saying release is allowed for `identity`.
    pub fn passed_report(&self, identity: &Digest) -> Option<&Entry> {
        let want = identity.to_string();
        self.entries
            .iter()
            .filter(|e| e.kind == "report")
            .find(|e| {
                e.payload_json().is_ok_and(|v| {
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

/// Checks a protocol's preconditions against the registry. A precondition is met only by its
/// *pinned* identity (`identity = "sha256:…"`): that identity must be frozen in this registry under
/// the precondition's protocol name, not retired, and have a passed report. A name alone unlocks
/// nothing: any protocol can be frozen under any name (a renamed demo would otherwise do).
pub fn unmet_preconditions(reg: &Registry, protocol: &crate::protocol::Protocol) -> Vec<Unmet> {
    check_preconditions(reg, protocol).1
}

/// [`unmet_preconditions`], also returning the evidence of every met one.
pub fn check_preconditions(
    reg: &Registry,
    protocol: &crate::protocol::Protocol,
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
        if let Some(r) = reg.retirement(&identity) {
            out.push(unmet(format!(
                "identity {identity} is retired: {}",
                r.reason
            )));
        } else if let Some(e) = reg.passed_report(&identity) {
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
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(ProtocolError::io(path))?;
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
