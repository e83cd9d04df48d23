//! Content-addressed runtime images, written by this crate in the `docker save` layout.
//!
//! One layer (a deterministic tar: sorted paths, owner 0:0, mtime 0), a config JSON with sorted
//! keys and fixed timestamps, `manifest.json` and `repositories`. The image id is the sha256 of
//! the config JSON, so it is a pure function of the inputs: `image_id` computes it without an
//! engine (for `eval freeze`), and `DockerRuntime::ensure_image` loads the archive only when
//! the engine lacks that id.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use eval_core::attest::{TreeEntry, bytes_digest, link_digest, tree_digest_of};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::base::BaseImage;
use crate::definition::{LoadedDef, paths};
use crate::fault::RuntimeError;
use crate::static_bins;
use crate::tar;

pub use crate::image_id::ImageId;

/// An arm's own files, placed at the definition's `arm.profile` and `arm.candidate` paths.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArmFiles {
    /// The arm's harness profile file, if the arm has one.
    pub profile: Option<PathBuf>,
    /// A file or a directory (the candidate package); absent for a baseline arm.
    pub candidate: Option<PathBuf>,
}

/// Everything an arm's image is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSpec {
    /// The runtime definition (with its directory) the image is built from.
    pub def: LoadedDef,
    /// The arm's profile and candidate package placed into the image.
    pub arm: ArmFiles,
    /// Image labels (part of the config, hence of the id); tests use them to sweep images.
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    File { bytes: Vec<u8>, exec: bool },
    Dir { mode: u32 },
    Link(String),
}

/// The image's root filesystem, keyed by path without the leading `/` (sorted bytewise, so a
/// directory precedes its contents).
#[derive(Debug, Default)]
struct Layer {
    nodes: BTreeMap<String, Node>,
}

const BUSYBOX: &str = "/bin/busybox";
const APPLETS: [&str; 10] = [
    "sh", "ls", "cat", "sleep", "echo", "env", "id", "true", "false", "wc",
];
const IMAGE_PATH: &str = "PATH=/usr/local/bin:/usr/bin:/bin";

fn io_err(path: &Path, source: std::io::Error) -> RuntimeError {
    RuntimeError::HostIo {
        path: path.display().to_string(),
        source,
    }
}

fn input_err(path: &Path, detail: &str) -> RuntimeError {
    RuntimeError::Definition(crate::definition::DefinitionError::Invalid {
        path: path.display().to_string(),
        field: "build".to_owned(),
        detail: detail.to_owned(),
    })
}

impl Layer {
    fn dir(&mut self, path: &str, mode: u32) {
        let mut acc = String::new();
        for part in path.trim_matches('/').split('/').filter(|p| !p.is_empty()) {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            self.nodes
                .entry(acc.clone())
                .or_insert(Node::Dir { mode: 0o755 });
        }
        if let Some(Node::Dir { mode: m }) = self.nodes.get_mut(path.trim_matches('/')) {
            *m = mode;
        }
    }

    fn put(&mut self, path: &str, node: Node) {
        let rel = path.trim_start_matches('/').to_owned();
        if let Some((parent, _)) = rel.rsplit_once('/') {
            self.dir(parent, 0o755);
        }
        self.nodes.insert(rel, node);
    }

    /// Copies a host file or directory tree to `dest`; links are kept as links.
    fn copy(&mut self, src: &Path, dest: &str) -> Result<(), RuntimeError> {
        let meta = fs::symlink_metadata(src).map_err(|e| io_err(src, e))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let t = fs::read_link(src).map_err(|e| io_err(src, e))?;
            self.put(dest, Node::Link(t.to_string_lossy().into_owned()));
        } else if ft.is_dir() {
            self.dir(dest, 0o755);
            let mut names: Vec<_> = fs::read_dir(src)
                .map_err(|e| io_err(src, e))?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()
                .map_err(|e| io_err(src, e))?;
            names.sort();
            for n in names {
                let child = format!("{}/{}", dest.trim_end_matches('/'), n.to_string_lossy());
                self.copy(&src.join(&n), &child)?;
            }
        } else if ft.is_file() {
            let bytes = fs::read(src).map_err(|e| io_err(src, e))?;
            let exec = meta.permissions().mode() & 0o111 != 0;
            self.put(dest, Node::File { bytes, exec });
        } else {
            return Err(input_err(
                src,
                "only files, directories and links can go into an image",
            ));
        }
        Ok(())
    }

    fn tar(&self) -> Result<Vec<u8>, RuntimeError> {
        let mut out = Vec::new();
        for (path, node) in &self.nodes {
            let body = match node {
                Node::File { bytes, exec } => tar::Body::File {
                    bytes,
                    mode: if *exec { 0o755 } else { 0o644 },
                },
                Node::Dir { mode } => tar::Body::Dir { mode: *mode },
                Node::Link(t) => tar::Body::Symlink { target: t },
            };
            tar::append(&mut out, path, &body)
                .map_err(|e| input_err(Path::new(path), &e.to_string()))?;
        }
        tar::finish(&mut out);
        Ok(out)
    }

    /// The attestation digest of container path `path`, as the shim will compute it.
    fn digest_of(&self, path: &str) -> Option<String> {
        let rel = path.trim_matches('/');
        match self.nodes.get(rel)? {
            Node::File { bytes, .. } => Some(bytes_digest(bytes)),
            Node::Link(t) => Some(link_digest(t)),
            Node::Dir { .. } => {
                let prefix = format!("{rel}/");
                let entries = self
                    .nodes
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, n)| {
                        let path = k.as_bytes()[prefix.len()..].to_vec();
                        match n {
                            Node::File { bytes, exec } => TreeEntry {
                                path,
                                kind: "file",
                                exec: *exec,
                                value: bytes_digest(bytes),
                            },
                            Node::Dir { .. } => TreeEntry {
                                path,
                                kind: "dir",
                                exec: false,
                                value: String::new(),
                            },
                            Node::Link(t) => TreeEntry {
                                path,
                                kind: "link",
                                exec: false,
                                value: t.clone(),
                            },
                        }
                    })
                    .collect();
                Some(tree_digest_of(entries))
            }
        }
    }
}

fn build_layer(spec: &ImageSpec) -> Result<Layer, RuntimeError> {
    let def = &spec.def.def;
    let (uid, gid) = def.uid_gid().map_err(|d| input_err(&spec.def.path, &d))?;
    let mut layer = Layer::default();
    for d in [
        "bin",
        "etc",
        "usr/local/bin",
        "opt/eval",
        "proc",
        "sys",
        "dev",
        "task",
        ".eval",
        "run/eval",
        "hidden",
        "out",
    ] {
        layer.dir(d, 0o755);
    }
    layer.dir(paths::WORKSPACE, 0o755);
    layer.dir("tmp", 0o1777);
    layer.put(
        "/etc/passwd",
        Node::File {
            bytes: format!(
                "root:x:0:0:root:/root:/bin/sh\nagent:x:{uid}:{gid}:agent:/tmp:/bin/sh\n"
            )
            .into_bytes(),
            exec: false,
        },
    );
    layer.put(
        "/etc/group",
        Node::File {
            bytes: format!("root:x:0:\nagent:x:{gid}:\n").into_bytes(),
            exec: false,
        },
    );
    if let Some(build) = &def.build {
        if build.busybox {
            layer.copy(Path::new(BUSYBOX), BUSYBOX)?;
            for a in APPLETS {
                layer.put(&format!("/bin/{a}"), Node::Link("busybox".to_owned()));
            }
        }
        for name in &build.static_binaries {
            let src = static_bins::locate(name)?;
            layer.copy(&src, &format!("/usr/local/bin/{name}"))?;
        }
        for f in &build.files {
            let src = spec.def.dir.join(&f.src);
            layer.copy(&src, &f.dest)?;
            if f.executable
                && let Some(Node::File { exec, .. }) =
                    layer.nodes.get_mut(f.dest.trim_start_matches('/'))
            {
                *exec = true;
            }
        }
    }
    if let Some(p) = &spec.arm.profile {
        layer.copy(p, &def.arm.profile)?;
    }
    if let Some(c) = &spec.arm.candidate {
        layer.copy(c, &def.arm.candidate)?;
    }
    // The runtime's own files, identical in every arm of it (`[[arm.file]]`).
    for f in &def.arm.files {
        layer.copy(&spec.def.dir.join(&f.src), &f.dest)?;
    }
    Ok(layer)
}

/// Canonical JSON (sorted keys, no whitespace) whatever serde_json's map ordering is.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(x) = m.get(*k) {
                    canonical(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn sha_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A built image archive and its identity.
pub struct Built {
    /// The image id (`sha256:` of the config JSON), which the engine will report for it.
    pub id: ImageId,
    /// The reference the image is loaded under: `<repo>:id-<first 16 hex digits of the id>`.
    pub tag: String,
    /// The diff id (`sha256:` of the uncompressed tar) of the one layer this build adds.
    pub layer_diff_id: String,
    /// The base's layers (diff ids) a thin arm image sits on; they are listed in the archive's
    /// manifest but not stored in it (the engine has them already).
    pub base_layers: Vec<String>,
    layer: Layer,
    layer_tar: Vec<u8>,
    config: Vec<u8>,
}

const EPOCH: &str = "1970-01-01T00:00:00Z";

/// Builds the layer and config in memory (no engine).
pub fn build(spec: &ImageSpec) -> Result<Built, RuntimeError> {
    let def = &spec.def.def;
    if def.build.is_none() {
        return Err(RuntimeError::ImageMissing {
            reference: def.image.reference.clone(),
        });
    }
    if def.image.archive.is_some() {
        return Err(input_err(
            &spec.def.path,
            "`image.archive` names a base image; a definition with [build] builds its own",
        ));
    }
    let layer = build_layer(spec)?;
    let layer_tar = layer.tar()?;
    let diff_id = format!("sha256:{}", sha_hex(&layer_tar));
    let mut labels = serde_json::Map::new();
    labels.insert("eval.runtime".into(), json!(def.name));
    for (k, v) in &spec.labels {
        labels.insert(k.clone(), json!(v));
    }
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "created": EPOCH,
        "config": {
            "User": def.user_or_default(),
            "Env": [IMAGE_PATH],
            "WorkingDir": paths::WORKSPACE,
            "Labels": Value::Object(labels),
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": EPOCH, "created_by": "eval-runtimes image builder"}],
    });
    let mut text = String::new();
    canonical(&config, &mut text);
    let config = text.into_bytes();
    let id = ImageId(format!("sha256:{}", sha_hex(&config)));
    let tag = format!("{}:id-{}", tag_repo(def), &id.hex()[..16]);
    Ok(Built {
        id,
        tag,
        layer_diff_id: diff_id,
        base_layers: Vec::new(),
        layer,
        layer_tar,
        config,
    })
}

/// The repository part of the tag an arm image gets (the reference without its tag, or a fixed
/// name when the definition gives none).
fn tag_repo(def: &crate::definition::RuntimeDef) -> String {
    let r = def.image.reference.split('@').next().unwrap_or("");
    let repo = r
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .map(|(r, _)| r)
        .unwrap_or(r);
    if repo.is_empty() {
        "eval-arm".to_owned()
    } else {
        repo.to_owned()
    }
}

/// An arm's thin image: the profile and candidate package in one deterministic layer on top of
/// `base`, whose config (the `CONFIG_KEYS` part) it inherits. Its id depends on the base (its
/// id, layers and config) and the layer bytes only, so freeze computes it from the same
/// description `eval run` gets from the engine.
pub fn build_thin(spec: &ImageSpec, base: &BaseImage) -> Result<Built, RuntimeError> {
    let def = &spec.def.def;
    let mut layer = Layer::default();
    if let Some(p) = &spec.arm.profile {
        layer.copy(p, &def.arm.profile)?;
    }
    if let Some(c) = &spec.arm.candidate {
        layer.copy(c, &def.arm.candidate)?;
    }
    // The runtime's own files, identical in every arm of it (`[[arm.file]]`).
    for f in &def.arm.files {
        layer.copy(&spec.def.dir.join(&f.src), &f.dest)?;
    }
    let layer_tar = layer.tar()?;
    let diff_id = format!("sha256:{}", sha_hex(&layer_tar));
    let mut inner = base.config.clone();
    let mut labels = match inner.remove("Labels") {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    labels.insert("eval.runtime".into(), json!(def.name));
    for (k, v) in &spec.labels {
        labels.insert(k.clone(), json!(v));
    }
    inner.insert("Labels".into(), Value::Object(labels));
    let mut diff_ids: Vec<Value> = base.diff_ids.iter().map(|d| json!(d)).collect();
    diff_ids.push(json!(diff_id));
    let config = json!({
        "architecture": base.architecture,
        "os": base.os,
        "created": EPOCH,
        "config": Value::Object(inner),
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": EPOCH, "created_by": format!("eval arm layer on {}", base.id)}],
    });
    let mut text = String::new();
    canonical(&config, &mut text);
    let config = text.into_bytes();
    let id = ImageId(format!("sha256:{}", sha_hex(&config)));
    let tag = format!("{}:id-{}", tag_repo(def), &id.hex()[..16]);
    Ok(Built {
        id,
        tag,
        layer_diff_id: diff_id,
        base_layers: base.diff_ids.clone(),
        layer,
        layer_tar,
        config,
    })
}

/// The attestation digests of an arm's attested paths that its own files determine, computed
/// without the base (what `eval run` admits a thin arm with). A path outside the arm's files
/// is `None` here: it lies in the base, which its id already pins.
pub fn arm_attestation(spec: &ImageSpec) -> Result<BTreeMap<String, Option<String>>, RuntimeError> {
    let def = &spec.def.def;
    if def.build.is_some() {
        return expected_attestation(spec);
    }
    let empty = BaseImage {
        id: ImageId(String::new()),
        diff_ids: Vec::new(),
        architecture: String::new(),
        os: String::new(),
        config: serde_json::Map::new(),
    };
    Ok(build_thin(spec, &empty)?.expected_attestation(def))
}

impl Built {
    /// The `docker save` archive (what `docker load` / bollard's `import_image` read).
    pub fn archive(&self) -> Result<Vec<u8>, RuntimeError> {
        let layer_dir = self.layer_diff_id.trim_start_matches("sha256:").to_owned();
        let config_name = format!("{}.json", self.id.hex());
        let (repo, tag) = self.tag.rsplit_once(':').unwrap_or((&self.tag, "latest"));
        let layers: Vec<String> = self
            .base_layers
            .iter()
            .chain(std::iter::once(&self.layer_diff_id))
            .map(|d| format!("{}/layer.tar", d.trim_start_matches("sha256:")))
            .collect();
        let mut manifest = String::new();
        canonical(
            &json!([{"Config": config_name, "RepoTags": [self.tag], "Layers": layers}]),
            &mut manifest,
        );
        let mut repositories = String::new();
        canonical(&json!({repo: {tag: layer_dir}}), &mut repositories);
        let mut out = Vec::new();
        let wrap = |e: tar::TarError| input_err(Path::new(&e.0), "path too long");
        tar::append(&mut out, &layer_dir, &tar::Body::Dir { mode: 0o755 }).map_err(wrap)?;
        tar::append(
            &mut out,
            &format!("{layer_dir}/layer.tar"),
            &tar::Body::File {
                bytes: &self.layer_tar,
                mode: 0o644,
            },
        )
        .map_err(wrap)?;
        tar::append(
            &mut out,
            &config_name,
            &tar::Body::File {
                bytes: &self.config,
                mode: 0o644,
            },
        )
        .map_err(wrap)?;
        tar::append(
            &mut out,
            "manifest.json",
            &tar::Body::File {
                bytes: manifest.as_bytes(),
                mode: 0o644,
            },
        )
        .map_err(wrap)?;
        tar::append(
            &mut out,
            "repositories",
            &tar::Body::File {
                bytes: repositories.as_bytes(),
                mode: 0o644,
            },
        )
        .map_err(wrap)?;
        tar::finish(&mut out);
        Ok(out)
    }

    /// Attestation digests the shim will report for the definition's attested paths, from the
    /// image's own bytes; `None` for a path the image does not hold.
    pub fn expected_attestation(
        &self,
        def: &crate::definition::RuntimeDef,
    ) -> BTreeMap<String, Option<String>> {
        def.attested_paths()
            .into_iter()
            .map(|p| {
                let d = self.layer.digest_of(&p);
                (p, d)
            })
            .collect()
    }

    /// The image's config JSON bytes, exactly as hashed into the id.
    pub fn config_json(&self) -> &[u8] {
        &self.config
    }
}

/// The image id of an arm's image, computed without an engine (what `eval freeze` records).
pub fn image_id(spec: &ImageSpec) -> Result<ImageId, RuntimeError> {
    Ok(build(spec)?.id)
}

/// The digests the shim must report for `spec`'s attested paths (what `eval freeze` records and
/// the controller compares `/_eval/attest` with).
pub fn expected_attestation(
    spec: &ImageSpec,
) -> Result<BTreeMap<String, Option<String>>, RuntimeError> {
    Ok(build(spec)?.expected_attestation(&spec.def.def))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// `[[arm.file]]` lands in every arm's thin layer with the same digest (a baseline without
    /// a package included), and the arm's own files still differ.
    #[test]
    fn every_arm_carries_the_runtimes_arm_files_and_attests_them_alike() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("support")).unwrap();
        std::fs::write(root.join("support/index.js"), "export const name = 's'\n").unwrap();
        std::fs::write(root.join("support/package.json"), "{}\n").unwrap();
        let id = format!("sha256:{}", "a".repeat(64));
        let path = root.join("runtime.toml");
        std::fs::write(
            &path,
            format!(
                "name = \"t\"\n[image]\nid = \"{id}\"\n[harness]\ncommand = [\"/a\"]\n\
                 [attest]\npaths = [\"{{profile}}\", \"{{candidate}}\", \"/opt/eval/support\"]\n\
                 [arm]\nprofile = \"/opt/eval/arm/p\"\ncandidate = \"/opt/eval/arm/c\"\n\
                 [[arm.file]]\nsrc = \"support\"\ndest = \"/opt/eval/support\"\n"
            ),
        )
        .unwrap();
        let def = crate::RuntimeDef::load(&path).unwrap();
        std::fs::write(root.join("a.yml"), "- a\n").unwrap();
        std::fs::write(root.join("b.yml"), "- b\n").unwrap();
        std::fs::write(root.join("b.tgz"), "pkg").unwrap();
        let spec = |profile: &str, candidate: Option<&str>| ImageSpec {
            def: def.clone(),
            arm: ArmFiles {
                profile: Some(root.join(profile)),
                candidate: candidate.map(|c| root.join(c)),
            },
            labels: BTreeMap::new(),
        };
        let a = arm_attestation(&spec("a.yml", None)).unwrap();
        let b = arm_attestation(&spec("b.yml", Some("b.tgz"))).unwrap();
        let support = a["/opt/eval/support"].clone().unwrap();
        assert!(support.starts_with("sha256:"), "{support}");
        assert_eq!(b["/opt/eval/support"].as_deref(), Some(support.as_str()));
        assert_ne!(a["/opt/eval/arm/p"], b["/opt/eval/arm/p"]);
        assert_eq!(
            a["/opt/eval/arm/c"], None,
            "the baseline's package is absent"
        );
        // The digest is the directory's tree digest: a changed byte changes it.
        std::fs::write(root.join("support/index.js"), "export const name = 'x'\n").unwrap();
        let c = arm_attestation(&spec("a.yml", None)).unwrap();
        assert_ne!(c["/opt/eval/support"].as_deref(), Some(support.as_str()));
    }
}
