//! Freezing, verifying and retiring a protocol identity.
//!
//! A freeze hashes every input root (grouped by role) into one tree manifest over project-relative
//! paths, then names the whole with the identity:
//!
//! ```text
//! eval-freeze v1
//! name <protocol name>
//! tree <digest of the combined tree manifest>
//! driver <digest of the controller's source tree>
//! signing <public key>                    only when the protocol has `[signing] public_key`
//! image <arm id> <digest | none>          one line per arm, sorted by arm id
//! ```
//! identity = SHA-256 of that text. The freeze file `STATE/freezes/NAME.json` (canonical JSON,
//! format `eval-freeze` version 1, no timestamps so it is reproducible) holds the roles, the full
//! manifest, the identity text and, when the protocol names one, `signing_public_key`; the
//! registry entry binds the file's digest.
//!
//! The `signing` line and the `signing_public_key` field are absent (not `none`/`null`) for a
//! protocol without a key, so such freezes keep the exact text and bytes they had before signing
//! existed; readers treat an absent field (or `null`) as "no key named".

use crate::error::ProtocolError;
use crate::project::{Loaded, Project};
use crate::protocol::Arm;
use crate::registry::{FreezeRecord, Registry, RetireRecord};
use crate::tree::{Kind, Manifest, ManifestEntry, TreeError, hash_paths};
use eval_core::Digest;
use eval_core::keys::PublicKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `format` field of every freeze file; a file with another value is refused (exit 3).
pub const FREEZE_FORMAT: &str = "eval-freeze";
/// The freeze-file version this code writes; files with a higher version are refused (exit 3).
pub const FREEZE_VERSION: u32 = 1;

/// The container image an arm names, as recorded at freeze time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// The reference the runtime definition gives (tag or digest), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The content digest, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
    /// How the digest was obtained: `pinned` (the definition names it), `computed` (derived from
    /// the definition's bytes without an engine), `engine` (asked a Docker engine), or `unresolved`
    /// (only the runtime definition's tree digest binds the image).
    pub source: String,
}

/// Resolves an arm's image; the controller supplies one (engine or computed), and
/// [`pinned_image`] is the engine-free fallback.
pub type ImageResolver<'a> = &'a dyn Fn(&Path, &Arm) -> Result<ImageRecord, ProtocolError>;

/// Reads `image` from the arm's runtime definition: `image.digest`, a `…@sha256:<hex>` reference
/// or a bare `sha256:<hex>` pins the digest; anything else is recorded as `unresolved`.
pub fn pinned_image(root: &Path, arm: &Arm) -> Result<ImageRecord, ProtocolError> {
    let file = root.join(&arm.runtime);
    let text = std::fs::read_to_string(&file).map_err(ProtocolError::io(&file))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| ProtocolError::Input {
        file: file.clone(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    let image = table.get("image");
    let reference = image.and_then(|v| {
        v.as_str().map(str::to_owned).or_else(|| {
            v.as_table()
                .and_then(|t| t.get("reference"))
                .and_then(|r| r.as_str())
                .map(str::to_owned)
        })
    });
    let pinned = image
        .and_then(|v| v.as_table())
        .and_then(|t| t.get("digest"))
        .and_then(|d| d.as_str())
        .map(str::to_owned);
    let digest = pinned.as_deref().or(reference.as_deref()).and_then(|r| {
        let hex = r
            .rsplit_once("@sha256:")
            .map(|(_, h)| h)
            .or_else(|| r.strip_prefix("sha256:"))?;
        Digest::from_hex(hex)
    });
    Ok(ImageRecord {
        source: if digest.is_some() {
            "pinned"
        } else {
            "unresolved"
        }
        .into(),
        reference,
        digest,
    })
}

/// A frozen input root and the digest of its subtree (its own manifest, paths relative to it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootRecord {
    /// The root's project-relative path (a file or a directory).
    pub path: String,
    /// The digest of the root's own manifest (paths relative to the root).
    pub digest: Digest,
    /// Who uses it: `protocol`, `matrix`, `task:<suite>/<id>`, `arm:<id>`, `grader:<suite>/<id>`.
    pub used_by: Vec<String>,
}

/// `STATE/freezes/NAME.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreezeDoc {
    /// Always [`FREEZE_FORMAT`].
    pub format: String,
    /// The freeze-file version ([`FREEZE_VERSION`] when written by this code).
    pub version: u32,
    /// The protocol's name (its directory under `protocols/`).
    pub name: String,
    /// The protocol identity: SHA-256 of `identity_text`.
    pub identity: Digest,
    /// The exact text whose SHA-256 is the identity.
    pub identity_text: String,
    /// Digest of the controller's source tree at freeze time; `eval run` refuses a different
    /// driver.
    pub driver: Digest,
    /// Digest of the combined tree manifest over every input root (`manifest` below).
    pub tree: Digest,
    /// The protocol's `[signing] public_key` in canonical text form (`eval+<keyid>+<base64>`);
    /// absent when the protocol names none (version 1 files written before it existed lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_public_key: Option<String>,
    /// Role → roots (`protocol`, `matrix`, `tasks`, `runtimes`, `profiles`, `packages`).
    pub roles: BTreeMap<String, Vec<RootRecord>>,
    /// Arm id → image.
    pub images: BTreeMap<String, ImageRecord>,
    /// Every input root, in the order they were hashed.
    pub inputs: Vec<String>,
    /// The combined tree manifest, one line per entry (header first).
    pub manifest: Vec<String>,
}

impl FreezeDoc {
    /// Parses `manifest` back into a [`Manifest`]; `None` if the lines are not a valid manifest (a
    /// damaged or hand-edited file).
    pub fn manifest(&self) -> Option<Manifest> {
        let mut text = self.manifest.join("\n");
        text.push('\n');
        Manifest::parse(&text)
    }

    /// The frozen signing key, parsed and checked against the identity: the identity text must
    /// hash to the identity and carry exactly this key on its `signing` line (or no such line
    /// when there is no key), so the key cannot be swapped without changing the identity.
    pub fn signing_public_key(&self) -> Result<Option<PublicKey>, ProtocolError> {
        let bad = |why: String| {
            ProtocolError::Integrity(format!("the freeze file of {}: {why}", self.name))
        };
        if Digest::of(self.identity_text.as_bytes()) != self.identity {
            return Err(bad("the identity text does not hash to the identity".into()));
        }
        let line = self
            .identity_text
            .lines()
            .find_map(|l| l.strip_prefix("signing "));
        if line != self.signing_public_key.as_deref() {
            return Err(bad(
                "signing_public_key differs from the identity text's signing line".into(),
            ));
        }
        self.signing_public_key
            .as_deref()
            .map(PublicKey::parse)
            .transpose()
            .map_err(|e| bad(format!("signing_public_key: {e}")))
    }
}

/// The public key frozen with protocol `name` (its `[signing] public_key`), `None` when the
/// protocol names no key. This is what `eval run` and `eval report` compare a signing key's
/// public half with (`SigningKeyPair::ensure_public_matches`). Not frozen: a state error (exit 2);
/// a freeze file that is modified or disagrees with its identity: an integrity error (exit 3).
pub fn frozen_public_key(state: &Path, name: &str) -> Result<Option<PublicKey>, ProtocolError> {
    let (_, _, doc) = load_frozen(state, name)?;
    doc.signing_public_key()
}

/// The text whose SHA-256 is the identity (layout in the module docs); `images` gives one `image`
/// line per arm, in the map's (sorted) order, `none` for an unknown digest.
pub fn identity_text(
    name: &str,
    tree: &Digest,
    driver: &Digest,
    signing: Option<&str>,
    images: &BTreeMap<String, ImageRecord>,
) -> String {
    let mut t = format!("eval-freeze v1\nname {name}\ntree {tree}\ndriver {driver}\n");
    if let Some(key) = signing {
        t.push_str(&format!("signing {key}\n"));
    }
    for (arm, img) in images {
        let d = img
            .digest
            .map(|d| d.to_string())
            .unwrap_or_else(|| "none".into());
        t.push_str(&format!("image {arm} {d}\n"));
    }
    t
}

/// Input roots grouped by role, deduplicated, in a fixed order.
fn roots(l: &Loaded) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut roles: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut add = |role: &str, path: String, user: String| {
        let users = roles
            .entry(role.into())
            .or_default()
            .entry(path)
            .or_default();
        if !users.contains(&user) {
            users.push(user);
        }
    };
    add("protocol", l.protocol_file.clone(), "protocol".into());
    add("matrix", l.matrix_file.clone(), "matrix".into());
    for t in &l.tasks {
        let who = format!("task:{}/{}", t.suite, t.id);
        add("tasks", t.dir.clone(), who);
        add(
            "runtimes",
            runtime_dir(&t.spec.grader.runtime),
            format!("grader:{}/{}", t.suite, t.id),
        );
    }
    for (sid, spec) in &l.protocol.suites {
        for (name, dir) in spec.controls.iter().flat_map(|c| c.exploits.iter()) {
            add("exploits", dir.clone(), format!("exploit:{sid}/{name}"));
        }
    }
    for a in &l.protocol.arms {
        let who = format!("arm:{}", a.id);
        add("runtimes", runtime_dir(&a.runtime), who.clone());
        add("profiles", a.profile.clone(), who.clone());
        if let Some(p) = &a.package {
            add("packages", p.clone(), who.clone());
        }
    }
    roles
}

/// A runtime definition is frozen with its whole directory (recipe files live beside it).
fn runtime_dir(runtime: &str) -> String {
    match runtime.rsplit_once('/') {
        Some((dir, _)) if !dir.is_empty() => dir.to_owned(),
        _ => runtime.to_owned(),
    }
}

fn tree_err(context: &str) -> impl FnOnce(TreeError) -> ProtocolError + '_ {
    move |source| ProtocolError::Tree {
        context: context.to_owned(),
        source,
    }
}

/// Computes the freeze document of a loaded protocol (reads and hashes; writes nothing).
pub fn compute(
    project: &Project,
    l: &Loaded,
    driver: Digest,
    images: ImageResolver<'_>,
) -> Result<FreezeDoc, ProtocolError> {
    let roles = roots(l);
    let inputs: Vec<String> = roles.values().flat_map(|m| m.keys().cloned()).collect();
    let manifest = hash_paths(&project.root, &inputs).map_err(tree_err("freeze inputs"))?;
    // A workspace with history the agent should not see is refused unless declared.
    for t in &l.tasks {
        let ws = format!("{}/workspace/", t.dir);
        if !t.spec.workspace_git
            && let Some(e) = manifest.entries.iter().find(|e| {
                e.path
                    .strip_prefix(&ws)
                    .is_some_and(|rest| rest.split('/').any(|c| c == ".git"))
            })
        {
            return Err(ProtocolError::field(
                project.root.join(&t.dir).join("task.toml"),
                "workspace_git",
                format!(
                    "{} is a git history inside the agent's workspace; remove it or declare `workspace_git = true`",
                    e.path
                ),
            ));
        }
        if let Some(o) = &t.spec.oracle {
            let system = o.stateful.as_ref().map(|st| st.system_prompt.as_str());
            let files = std::iter::once(("oracle.answers", o.answers.as_str()))
                .chain(system.map(|f| ("oracle.stateful.system_prompt", f)));
            for (field, file) in files {
                let p = format!("{}/{}", t.dir, file.trim_start_matches("./"));
                if !manifest
                    .entries
                    .iter()
                    .any(|e| e.path == p && e.kind == Kind::File)
                {
                    return Err(ProtocolError::field(
                        project.root.join(&t.dir).join("task.toml"),
                        field,
                        format!("{p}: no such file"),
                    ));
                }
            }
        }
    }
    let mut image_map = BTreeMap::new();
    for a in &l.protocol.arms {
        image_map.insert(a.id.clone(), images(&project.root, a)?);
    }
    let tree = manifest.digest();
    // Canonical text form, so spacing in the TOML cannot make two spellings of one key.
    let signing = l
        .protocol
        .signing_public_key()
        .map_err(|m| {
            ProtocolError::field(project.root.join(&l.protocol_file), "signing.public_key", m)
        })?
        .map(|k| k.to_string());
    let text = identity_text(
        &l.protocol.name,
        &tree,
        &driver,
        signing.as_deref(),
        &image_map,
    );
    let role_records = roles
        .into_iter()
        .map(|(role, paths)| {
            let recs = paths
                .into_iter()
                .map(|(path, used_by)| RootRecord {
                    digest: manifest.subtree(&path).digest(),
                    path,
                    used_by,
                })
                .collect();
            (role, recs)
        })
        .collect();
    Ok(FreezeDoc {
        format: FREEZE_FORMAT.into(),
        version: FREEZE_VERSION,
        name: l.protocol.name.clone(),
        identity: Digest::of(text.as_bytes()),
        identity_text: text,
        driver,
        tree,
        signing_public_key: signing,
        roles: role_records,
        images: image_map,
        inputs,
        manifest: manifest.text().lines().map(str::to_owned).collect(),
    })
}

/// What `freeze` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FreezeOutcome {
    /// A new identity was recorded in the registry and its freeze file written.
    Frozen {
        /// The new protocol identity.
        identity: Digest,
        /// The freeze file written (`STATE/freezes/NAME.json`).
        file: PathBuf,
    },
    /// The inputs hash to the identity already registered under this name; nothing was recorded.
    AlreadyFrozen {
        /// The existing identity.
        identity: Digest,
        /// Its freeze file (restored if it had been deleted).
        file: PathBuf,
    },
}

/// Where protocol `name`'s freeze file lives under the state directory.
pub fn freeze_file(state: &Path, name: &str) -> PathBuf {
    state.join("freezes").join(format!("{name}.json"))
}

/// Loads, hashes and (unless identical bytes are already frozen) records protocol `name`.
/// Input errors happen before anything is written.
pub fn freeze(
    project: &Project,
    name: &str,
    state: &Path,
    driver: Digest,
    images: ImageResolver<'_>,
) -> Result<FreezeOutcome, ProtocolError> {
    let loaded = project.load(name)?;
    let mut reg = Registry::open(state)?;
    if reg.is_retired(name) {
        return Err(ProtocolError::Integrity(format!(
            "protocol {name} is retired and can never be frozen again; use a new protocol name (with registration.supersedes)"
        )));
    }
    if let Some(s) = &loaded.protocol.registration.supersedes
        && reg.is_frozen(&s.name)
        && !reg.is_retired(&s.name)
    {
        return Err(ProtocolError::State(format!(
            "protocol {name} supersedes {}, which is frozen but not retired: retire it first (`eval retire --protocol {} --reason …`)",
            s.name, s.name
        )));
    }
    let doc = compute(project, &loaded, driver, images)?;
    let bytes = eval_core::canonical::to_vec(&doc)
        .map_err(|e| ProtocolError::State(format!("cannot encode the freeze file: {e}")))?;
    let file = freeze_file(state, name);
    if let Some(prev) = reg.frozen(name) {
        if prev.identity == doc.identity {
            // Identical bytes: nothing to record. Restore a deleted freeze file (it is
            // reproducible), but never overwrite one that differs from the registered digest.
            if !file.exists() && Digest::of(&bytes) == prev.freeze_file_digest {
                write_atomic(&file, &bytes)?;
            }
            return Ok(FreezeOutcome::AlreadyFrozen {
                identity: prev.identity,
                file,
            });
        }
        let changes = match read_doc(state, &prev) {
            Ok(old) => describe_changes(&old, &doc),
            Err(e) => vec![format!("(the recorded freeze file cannot be read: {e})")],
        };
        return Err(ProtocolError::Integrity(format!(
            "protocol {name} is already frozen as {} and these inputs changed:\n  {}\nA frozen identity is never reused for other bytes: use a new protocol name (copy protocols/{name} to e.g. protocols/{name}-2, set registration.supersedes, retire {name}) and freeze that.",
            prev.identity,
            changes.join("\n  ")
        )));
    }
    write_atomic(&file, &bytes)?;
    reg.append_freeze(&FreezeRecord {
        v: crate::registry::REGISTRY_PAYLOAD_VERSION,
        name: name.into(),
        identity: doc.identity,
        freeze_file: format!("freezes/{name}.json"),
        freeze_file_digest: Digest::of(&bytes),
        driver: doc.driver,
        tree: doc.tree,
    })?;
    Ok(FreezeOutcome::Frozen {
        identity: doc.identity,
        file,
    })
}

fn write_atomic(file: &Path, bytes: &[u8]) -> Result<(), ProtocolError> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(ProtocolError::io(dir))?;
    }
    crate::statefs::replace_file(file, bytes).map_err(ProtocolError::io(file))
}

/// The registry, `name`'s freeze record and its freeze file, checked against each other. Not
/// frozen: a state error (exit 2); a freeze file that disagrees with its record: integrity (exit
/// 3).
fn load_frozen(
    state: &Path,
    name: &str,
) -> Result<(Registry, FreezeRecord, FreezeDoc), ProtocolError> {
    let reg = Registry::open(state)?;
    let rec = reg.frozen(name).ok_or_else(|| {
        ProtocolError::State(format!(
            "protocol {name} is not frozen in {} (run `eval freeze --protocol {name}` first)",
            state.display()
        ))
    })?;
    let doc = read_doc(state, &rec)?;
    if doc.identity != rec.identity || doc.name != name {
        return Err(ProtocolError::Integrity(format!(
            "the freeze file of {name} does not match its registry entry"
        )));
    }
    Ok((reg, rec, doc))
}

/// Reads the freeze file a registry record names, refusing one whose bytes are not the recorded
/// ones.
pub fn read_doc(state: &Path, rec: &FreezeRecord) -> Result<FreezeDoc, ProtocolError> {
    let file = state.join(&rec.freeze_file);
    let bytes = std::fs::read(&file).map_err(|e| {
        ProtocolError::Integrity(format!(
            "{}: cannot read the freeze file: {e}",
            file.display()
        ))
    })?;
    if Digest::of(&bytes) != rec.freeze_file_digest {
        return Err(ProtocolError::Integrity(format!(
            "{}: the freeze file was modified (its digest is not the one the registry recorded)",
            file.display()
        )));
    }
    let doc: FreezeDoc = serde_json::from_slice(&bytes).map_err(|e| {
        ProtocolError::Integrity(format!("{}: not a freeze file: {e}", file.display()))
    })?;
    if doc.format != FREEZE_FORMAT || doc.version > FREEZE_VERSION {
        return Err(ProtocolError::Integrity(format!(
            "{}: format {} v{} is not one this eval reads",
            file.display(),
            doc.format,
            doc.version
        )));
    }
    Ok(doc)
}

/// One difference between frozen and current inputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// The project-relative path that changed (for `image`, the arm's runtime definition).
    pub path: String,
    /// `modified`, `missing`, `added`, `unreadable`, `image`.
    pub change: String,
    /// Human-readable frozen vs. current state (kind, exec bit, size, digest; or the image
    /// digests).
    pub detail: String,
}

fn entry_detail(e: &ManifestEntry) -> String {
    format!(
        "{} {} {} bytes {}",
        match e.kind {
            Kind::File => "file",
            Kind::Symlink => "link",
            Kind::Dir => "dir",
        },
        if e.exec { "x" } else { "-" },
        e.size,
        e.digest
            .map(|d| d.to_string())
            .unwrap_or_else(|| "-".into())
    )
}

/// Differences between two manifests, by path.
pub fn diff_manifests(old: &Manifest, new: &Manifest) -> Vec<Drift> {
    let old_map: BTreeMap<&str, &ManifestEntry> =
        old.entries.iter().map(|e| (e.path.as_str(), e)).collect();
    let new_map: BTreeMap<&str, &ManifestEntry> =
        new.entries.iter().map(|e| (e.path.as_str(), e)).collect();
    let mut out = Vec::new();
    for (p, o) in &old_map {
        match new_map.get(p) {
            None => out.push(Drift {
                path: (*p).into(),
                change: "missing".into(),
                detail: format!("frozen: {}", entry_detail(o)),
            }),
            Some(n) if n != o => out.push(Drift {
                path: (*p).into(),
                change: "modified".into(),
                detail: format!("frozen: {}; now: {}", entry_detail(o), entry_detail(n)),
            }),
            Some(_) => {}
        }
    }
    for (p, n) in &new_map {
        if !old_map.contains_key(p) {
            out.push(Drift {
                path: (*p).into(),
                change: "added".into(),
                detail: format!("now: {}", entry_detail(n)),
            });
        }
    }
    out.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    out
}

fn describe_changes(old: &FreezeDoc, new: &FreezeDoc) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(o), Some(n)) = (old.manifest(), new.manifest()) {
        out.extend(
            diff_manifests(&o, &n)
                .into_iter()
                .map(|d| format!("{} {} ({})", d.change, d.path, d.detail)),
        );
    }
    if old.driver != new.driver {
        out.push(format!(
            "driver: frozen {} but this eval binary is {} (the controller's source changed)",
            old.driver, new.driver
        ));
    }
    if old.signing_public_key != new.signing_public_key {
        let show = |k: &Option<String>| k.clone().unwrap_or_else(|| "none".into());
        out.push(format!(
            "signing public key: frozen {}, now {}",
            show(&old.signing_public_key),
            show(&new.signing_public_key)
        ));
    }
    for (arm, img) in &new.images {
        if old.images.get(arm) != Some(img) {
            let show = |i: Option<&ImageRecord>| match i {
                Some(i) => format!(
                    "{} ({})",
                    i.digest
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "none".into()),
                    i.source
                ),
                None => "no such arm".into(),
            };
            out.push(format!(
                "image of arm {arm}: frozen {}, now {}",
                show(old.images.get(arm)),
                show(Some(img))
            ));
        }
    }
    for arm in old.images.keys() {
        if !new.images.contains_key(arm) {
            out.push(format!("arm {arm} was removed"));
        }
    }
    if out.is_empty() {
        out.push("(the identity text differs)".into());
    }
    out
}

/// The result of `verify`.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// The protocol verified.
    pub name: String,
    /// Its registered identity.
    pub identity: Digest,
    /// Whether that identity has been retired (verification still runs).
    pub retired: bool,
    /// Every difference between the frozen inputs and the files now; empty means the inputs are
    /// intact.
    pub drift: Vec<Drift>,
    /// The controller source digest recorded at freeze time.
    pub frozen_driver: Digest,
    /// The running controller's source digest, as passed by the caller.
    pub current_driver: Digest,
}

impl VerifyReport {
    /// True when no input drifted (the driver is reported separately by
    /// [`VerifyReport::driver_matches`]).
    pub fn clean(&self) -> bool {
        self.drift.is_empty()
    }

    /// True when the running controller is the one the protocol was frozen with.
    pub fn driver_matches(&self) -> bool {
        self.frozen_driver == self.current_driver
    }
}

/// Recomputes every frozen root's digests from the files as they are now and lists what drifted.
/// It works from the frozen list of inputs, so it reports drift even when the protocol no longer
/// parses. The running binary's driver digest is compared and reported, but it is not drift of
/// the inputs (`eval run` refuses a different driver on its own).
pub fn verify(
    project: &Project,
    name: &str,
    state: &Path,
    current_driver: Digest,
    images: ImageResolver<'_>,
) -> Result<VerifyReport, ProtocolError> {
    let (reg, rec, doc) = load_frozen(state, name)?;
    let frozen = doc.manifest().ok_or_else(|| {
        ProtocolError::Integrity(format!(
            "the freeze file of {name} holds no readable manifest"
        ))
    })?;
    let mut drift = Vec::new();
    let mut current = Manifest::default();
    for input in &doc.inputs {
        match hash_paths(&project.root, std::slice::from_ref(input)) {
            Ok(m) => current.entries.extend(m.entries),
            Err(TreeError::Missing { .. }) => {}
            Err(e) => drift.push(Drift {
                path: input.clone(),
                change: "unreadable".into(),
                detail: e.to_string(),
            }),
        }
    }
    current
        .entries
        .sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    current.entries.dedup_by(|a, b| a.path == b.path);
    drift.extend(diff_manifests(&frozen, &current));
    // Images: re-resolve from the current definitions where the protocol still loads.
    if let Ok(loaded) = project.load(name) {
        for a in &loaded.protocol.arms {
            if let Some(old) = doc.images.get(&a.id)
                && let Ok(now) = images(&project.root, a)
                && now.digest != old.digest
            {
                drift.push(Drift {
                    path: a.runtime.clone(),
                    change: "image".into(),
                    detail: format!(
                        "arm {}: frozen image {}, now {}",
                        a.id,
                        old.digest
                            .map(|d| d.to_string())
                            .unwrap_or_else(|| "none".into()),
                        now.digest
                            .map(|d| d.to_string())
                            .unwrap_or_else(|| "none".into())
                    ),
                });
            }
        }
    }
    Ok(VerifyReport {
        name: name.into(),
        identity: rec.identity,
        retired: reg.retirement(&rec.identity).is_some(),
        drift,
        frozen_driver: doc.driver,
        current_driver,
    })
}

/// What `retire` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetireOutcome {
    /// A `retire` entry was appended to the registry.
    Retired {
        /// The identity now retired.
        identity: Digest,
    },
    /// The identity was retired before; nothing was recorded.
    AlreadyRetired {
        /// The retired identity.
        identity: Digest,
        /// The reason given when it was retired (not the one passed this time).
        reason: String,
    },
}

/// Appends a `retire` entry for protocol `name`'s frozen identity.
pub fn retire(name: &str, state: &Path, reason: &str) -> Result<RetireOutcome, ProtocolError> {
    if reason.trim().is_empty() {
        return Err(ProtocolError::State("--reason must say why".into()));
    }
    let mut reg = Registry::open(state)?;
    let identity = reg.frozen_identity(name).ok_or_else(|| {
        ProtocolError::State(format!(
            "protocol {name} is not frozen in {}: there is no identity to retire",
            state.display()
        ))
    })?;
    if let Some(r) = reg.retirement(&identity) {
        return Ok(RetireOutcome::AlreadyRetired {
            identity,
            reason: r.reason,
        });
    }
    reg.append_retire(&RetireRecord {
        v: crate::registry::REGISTRY_PAYLOAD_VERSION,
        name: name.into(),
        identity,
        reason: reason.into(),
    })?;
    Ok(RetireOutcome::Retired { identity })
}
