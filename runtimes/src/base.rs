//! Base images by content: what a thin arm layer sits on.
//!
//! A base is described by its id, its layers (diff ids) and the part of its config a container
//! sees (`CONFIG_KEYS`). The same description comes from the engine (`docker image inspect`) or
//! from a `docker save` archive's config JSON, normalised so that both give equal values: the
//! arm image id computed from it at freeze equals the one `eval run` gets from the engine.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use crate::fault::RuntimeError;
use crate::image::ImageId;
use eval_core::fault::FaultCode;

/// The config fields a thin arm image inherits from its base. Timestamps, history, builder
/// details are left out: they do not change what runs, and the engine's inspect output and the
/// archive's config JSON spell them differently.
pub const CONFIG_KEYS: [&str; 9] = [
    "Cmd",
    "Entrypoint",
    "Env",
    "ExposedPorts",
    "Labels",
    "StopSignal",
    "User",
    "Volumes",
    "WorkingDir",
];

/// A base image as far as an arm layer depends on it.
#[derive(Debug, Clone, PartialEq)]
pub struct BaseImage {
    /// The base image's id (`sha256:` of its config JSON).
    pub id: ImageId,
    /// Its layers, bottom first (`sha256:<hex>` diff ids).
    pub diff_ids: Vec<String>,
    /// The platform architecture from the base's config (e.g. `amd64`); the arm image copies it.
    pub architecture: String,
    /// The operating system from the base's config (e.g. `linux`); the arm image copies it.
    pub os: String,
    /// The `CONFIG_KEYS` it sets, with nulls and empty values dropped.
    pub config: Map<String, Value>,
}

fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn normalise(config: Option<&Value>) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(Value::Object(c)) = config {
        for k in CONFIG_KEYS {
            if let Some(v) = c.get(k)
                && !empty(v)
            {
                out.insert(k.to_owned(), v.clone());
            }
        }
    }
    out
}

fn bad_archive(path: &Path, detail: String) -> RuntimeError {
    RuntimeError::ImageCreate {
        reference: path.display().to_string(),
        detail,
        fault: FaultCode::ImageMissing,
    }
}

impl BaseImage {
    /// From an image config JSON (as stored in an archive); the id is its sha256.
    pub fn from_config_json(bytes: &[u8]) -> Result<Self, String> {
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("config is not JSON: {e}"))?;
        let diff_ids = v
            .pointer("/rootfs/diff_ids")
            .and_then(Value::as_array)
            .ok_or("config has no rootfs.diff_ids")?
            .iter()
            .map(|d| {
                d.as_str()
                    .map(str::to_owned)
                    .ok_or("a diff id is not a string")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Ok(BaseImage {
            id: ImageId(format!("sha256:{}", hex::encode(Sha256::digest(bytes)))),
            diff_ids,
            architecture: s("architecture"),
            os: s("os"),
            config: normalise(v.get("config")),
        })
    }

    /// From the engine's `docker image inspect`.
    pub fn from_inspect(i: &bollard::models::ImageInspect) -> Result<Self, String> {
        let id = i.id.clone().ok_or("the engine reported no image id")?;
        let config = i
            .config
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| e.to_string())?;
        Ok(BaseImage {
            id: ImageId(id),
            diff_ids: i
                .root_fs
                .as_ref()
                .and_then(|r| r.layers.clone())
                .unwrap_or_default(),
            architecture: i.architecture.clone().unwrap_or_default(),
            os: i.os.clone().unwrap_or_default(),
            config: normalise(config.as_ref()),
        })
    }
}

/// Files of an archive's top level that can be a config or the manifest are kept in memory up to
/// this size; layer bodies are skipped with a seek, so memory does not grow with the image.
const SMALL_FILE: u64 = 4 << 20;

fn octal(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        // GNU base-256 (sizes of 8 GiB and more).
        let mut n: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            n = n.checked_mul(256)? + u64::from(*b);
        }
        return Some(n);
    }
    let s: String = field
        .iter()
        .take_while(|b| **b != 0 && **b != b' ')
        .map(|b| *b as char)
        .collect();
    let s = s.trim();
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// Reads the base description from a `docker save` archive (`manifest.json` and the config it
/// names), streaming: only the top-level JSON files are read, every other body is skipped.
/// `want` picks the manifest entry whose config has that id when the archive holds several.
pub fn read_archive(path: &Path, want: Option<&ImageId>) -> Result<BaseImage, RuntimeError> {
    let io = |e: std::io::Error| RuntimeError::HostIo {
        path: path.display().to_string(),
        source: e,
    };
    let mut f = BufReader::new(File::open(path).map_err(io)?);
    let mut small: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut long_name: Option<String> = None;
    loop {
        let mut h = [0u8; 512];
        match f.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(io(e)),
        }
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let size = octal(&h[124..136])
            .ok_or_else(|| bad_archive(path, "a tar header has a bad size".into()))?;
        let padded = size.div_ceil(512) * 512;
        let flag = h[156];
        let mut name = match long_name.take() {
            Some(n) => n,
            None => {
                let prefix = cstr(&h[345..500]);
                let base = cstr(&h[..100]);
                if prefix.is_empty() || &h[257..262] != b"ustar" {
                    base
                } else {
                    format!("{prefix}/{base}")
                }
            }
        };
        name = name.trim_start_matches("./").to_owned();
        let keep = matches!(flag, b'0' | 0)
            && size <= SMALL_FILE
            && !name.contains('/')
            && name.ends_with(".json");
        if flag == b'L' || flag == b'x' {
            if size > SMALL_FILE {
                return Err(bad_archive(
                    path,
                    "a tar extended header is too large".into(),
                ));
            }
            let mut body = vec![0u8; usize::try_from(size).unwrap_or(0)];
            f.read_exact(&mut body).map_err(io)?;
            f.seek_relative(i64::try_from(padded - size).unwrap_or(0))
                .map_err(io)?;
            if flag == b'L' {
                long_name = Some(cstr(&body));
            } else {
                long_name = String::from_utf8_lossy(&body).lines().find_map(|l| {
                    l.split_once(' ')
                        .and_then(|(_, kv)| kv.strip_prefix("path="))
                        .map(str::to_owned)
                });
            }
            continue;
        }
        if keep {
            let mut body = vec![0u8; usize::try_from(size).unwrap_or(0)];
            f.read_exact(&mut body).map_err(io)?;
            f.seek_relative(i64::try_from(padded - size).unwrap_or(0))
                .map_err(io)?;
            small.insert(name, body);
        } else {
            let skip = i64::try_from(padded)
                .map_err(|_| bad_archive(path, "a tar entry is too large".into()))?;
            f.seek_relative(skip).map_err(io)?;
        }
    }
    let manifest = small.get("manifest.json").ok_or_else(|| {
        bad_archive(
            path,
            "has no manifest.json (not a `docker save` archive)".into(),
        )
    })?;
    let manifest: Value = serde_json::from_slice(manifest)
        .map_err(|e| bad_archive(path, format!("manifest.json is not JSON: {e}")))?;
    let entries = manifest
        .as_array()
        .ok_or_else(|| bad_archive(path, "manifest.json is not a list".into()))?;
    let mut found = Vec::new();
    for e in entries {
        let Some(cfg) = e.get("Config").and_then(Value::as_str) else {
            continue;
        };
        let bytes = small.get(cfg.trim_start_matches("./")).ok_or_else(|| {
            bad_archive(
                path,
                format!("the config {cfg} named by manifest.json is missing"),
            )
        })?;
        let base = BaseImage::from_config_json(bytes).map_err(|d| bad_archive(path, d))?;
        found.push(base);
    }
    match want {
        Some(id) => found
            .into_iter()
            .find(|b| &b.id == id)
            .ok_or_else(|| bad_archive(path, format!("holds no image with id {id}"))),
        None if found.len() == 1 => found
            .pop()
            .ok_or_else(|| bad_archive(path, "holds no image".into())),
        None => Err(bad_archive(
            path,
            format!("holds {} images; set image.id to pick one", found.len()),
        )),
    }
}

/// A `docker save` archive as the engine should load it for image `want`: `manifest.json` holds
/// only `want`'s entry, with its `RepoTags` removed, and the files that name images
/// (`repositories`, `index.json`, `oci-layout`) are left out. `docker load` applies every
/// entry's tags, so loading an archive as it is could point any tag — an `eval-base/*` cache tag
/// the build scripts trust included — at whatever image the archive's author chose; loaded
/// through this, the archive adds one untagged image and changes no name. Every other entry
/// (layers, configs) passes through byte for byte, in `chunk`-sized pieces, so memory does not
/// grow with the image.
pub struct UntaggedArchive<R> {
    r: R,
    want_hex: String,
    chunk: usize,
    /// Body bytes (with padding) of the entry being passed through.
    remaining: u64,
    done: bool,
}

impl<R: Read> UntaggedArchive<R> {
    /// Filters `r` for image `want`.
    pub fn new(r: R, want: &ImageId, chunk: usize) -> Self {
        Self {
            r,
            want_hex: want.0.trim_start_matches("sha256:").to_owned(),
            chunk: chunk.max(512),
            remaining: 0,
            done: false,
        }
    }

    fn body(&mut self, size: u64) -> std::io::Result<Vec<u8>> {
        if size > SMALL_FILE {
            return Err(std::io::Error::other(
                "a tar entry to rewrite is larger than 4 MiB",
            ));
        }
        let padded = size.div_ceil(512) * 512;
        let mut b = vec![0u8; usize::try_from(padded).unwrap_or(0)];
        self.r.read_exact(&mut b)?;
        b.truncate(usize::try_from(size).unwrap_or(0));
        Ok(b)
    }

    /// `manifest.json` reduced to `want`'s entry, untagged.
    fn manifest(&self, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        let bad = |m: String| std::io::Error::other(format!("manifest.json: {m}"));
        let v: Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let entries = v.as_array().ok_or_else(|| bad("not a list".into()))?;
        let names = [
            format!("{}.json", self.want_hex),
            format!("blobs/sha256/{}", self.want_hex),
        ];
        let mut entry = entries
            .iter()
            .find(|e| {
                e.get("Config")
                    .and_then(Value::as_str)
                    .is_some_and(|c| names.iter().any(|n| c.trim_start_matches("./") == n))
            })
            .cloned()
            .ok_or_else(|| bad(format!("no entry for image sha256:{}", self.want_hex)))?;
        if let Some(o) = entry.as_object_mut() {
            o.insert("RepoTags".into(), Value::Null);
        }
        serde_json::to_vec(&Value::Array(vec![entry])).map_err(|e| bad(e.to_string()))
    }

    /// The next piece of the filtered archive; `None` at its end.
    pub fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if self.remaining > 0 {
            let n = self.remaining.min(self.chunk as u64);
            let mut b = vec![0u8; usize::try_from(n).unwrap_or(0)];
            self.r.read_exact(&mut b)?;
            self.remaining -= n;
            return Ok(Some(b));
        }
        if self.done {
            return Ok(None);
        }
        // Extended headers (long names, pax) are held until the entry they describe is known:
        // dropped with a dropped or rewritten entry, passed on before any other.
        let mut held = Vec::new();
        let mut long_name: Option<String> = None;
        loop {
            let mut h = [0u8; 512];
            if let Err(e) = self.r.read_exact(&mut h) {
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    return Err(e);
                }
                self.done = true;
                return Ok(Some(vec![0u8; 1024]));
            }
            if h.iter().all(|b| *b == 0) {
                // The end-of-archive blocks: what follows them is not read by the engine.
                self.done = true;
                return Ok(Some(vec![0u8; 1024]));
            }
            let size = octal(&h[124..136])
                .ok_or_else(|| std::io::Error::other("a tar header has a bad size"))?;
            let flag = h[156];
            if flag == b'L' || flag == b'x' {
                let body = self.body(size)?;
                if flag == b'L' {
                    long_name = Some(cstr(&body));
                } else if let Some(n) = String::from_utf8_lossy(&body).lines().find_map(|l| {
                    l.split_once(' ')
                        .and_then(|(_, kv)| kv.strip_prefix("path="))
                        .map(str::to_owned)
                }) {
                    long_name = Some(n);
                }
                held.extend_from_slice(&h);
                let mut padded = body;
                padded.resize(usize::try_from(size.div_ceil(512) * 512).unwrap_or(0), 0);
                held.extend_from_slice(&padded);
                continue;
            }
            let name = match long_name.take() {
                Some(n) => n,
                None => {
                    let prefix = cstr(&h[345..500]);
                    let base = cstr(&h[..100]);
                    if prefix.is_empty() || &h[257..262] != b"ustar" {
                        base
                    } else {
                        format!("{prefix}/{base}")
                    }
                }
            };
            let name = name.trim_start_matches("./");
            let regular = matches!(flag, b'0' | 0);
            if regular && matches!(name, "repositories" | "index.json" | "oci-layout") {
                self.body_skip(size)?;
                held.clear();
                continue;
            }
            if regular && name == "manifest.json" {
                let body = self.body(size)?;
                let new = self.manifest(&body)?;
                let mut out = ustar_header("manifest.json", new.len() as u64).to_vec();
                let len = new.len();
                out.extend_from_slice(&new);
                out.resize(512 + len.div_ceil(512) * 512, 0);
                return Ok(Some(out));
            }
            held.extend_from_slice(&h);
            self.remaining = size.div_ceil(512) * 512;
            if !matches!(flag, b'0' | 0 | b'7') {
                // Links, directories and the like carry no body whatever their size field says.
                self.remaining = 0;
            }
            return Ok(Some(held));
        }
    }

    fn body_skip(&mut self, size: u64) -> std::io::Result<()> {
        let padded = size.div_ceil(512) * 512;
        std::io::copy(&mut (&mut self.r).take(padded), &mut std::io::sink())?;
        Ok(())
    }
}

/// A ustar header for a regular file `name` (at most 100 bytes) of `size` bytes, mode 0644.
fn ustar_header(name: &str, size: u64) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len().min(100)].copy_from_slice(&name.as_bytes()[..name.len().min(100)]);
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"00000000000\0");
    h[148..156].copy_from_slice(b"        ");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_and_inspect_give_equal_descriptions() {
        let cfg = br#"{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":null,"Labels":{},"WorkingDir":"/w","Hostname":"x"},"rootfs":{"type":"layers","diff_ids":["sha256:aa"]},"history":[]}"#;
        let a = BaseImage::from_config_json(cfg).unwrap();
        assert_eq!(
            a.id.0,
            format!("sha256:{}", hex::encode(Sha256::digest(cfg)))
        );
        // Nulls, empty maps and keys outside CONFIG_KEYS are dropped.
        assert_eq!(
            serde_json::to_string(&a.config).unwrap(),
            r#"{"Env":["PATH=/bin"],"WorkingDir":"/w"}"#
        );
        let inspect = bollard::models::ImageInspect {
            id: Some(a.id.0.clone()),
            architecture: Some("amd64".into()),
            os: Some("linux".into()),
            config: Some(bollard::models::ImageConfig {
                env: Some(vec!["PATH=/bin".into()]),
                working_dir: Some("/w".into()),
                cmd: Some(vec![]),
                labels: Some(Default::default()),
                ..Default::default()
            }),
            root_fs: Some(bollard::models::ImageInspectRootFs {
                typ: "layers".into(),
                layers: Some(vec!["sha256:aa".into()]),
            }),
            ..Default::default()
        };
        assert_eq!(BaseImage::from_inspect(&inspect).unwrap(), a);
    }

    #[test]
    fn reads_a_saved_archive_skipping_layer_bodies() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = br#"{"architecture":"amd64","os":"linux","config":{"User":"1:1"},"rootfs":{"type":"layers","diff_ids":["sha256:bb"]}}"#;
        let cfg_name = format!("{}.json", hex::encode(Sha256::digest(cfg)));
        let mut out = Vec::new();
        let big = vec![7u8; 5 << 20];
        crate::tar::append(&mut out, "bb", &crate::tar::Body::Dir { mode: 0o755 }).unwrap();
        crate::tar::append(
            &mut out,
            "bb/layer.tar",
            &crate::tar::Body::File {
                bytes: &big,
                mode: 0o644,
            },
        )
        .unwrap();
        crate::tar::append(
            &mut out,
            &cfg_name,
            &crate::tar::Body::File {
                bytes: cfg,
                mode: 0o644,
            },
        )
        .unwrap();
        let manifest = format!(r#"[{{"Config":"{cfg_name}","Layers":["bb/layer.tar"]}}]"#);
        crate::tar::append(
            &mut out,
            "manifest.json",
            &crate::tar::Body::File {
                bytes: manifest.as_bytes(),
                mode: 0o644,
            },
        )
        .unwrap();
        crate::tar::finish(&mut out);
        let p = dir.path().join("base.tar");
        std::fs::write(&p, &out).unwrap();
        let b = read_archive(&p, None).unwrap();
        assert_eq!(b.diff_ids, vec!["sha256:bb".to_owned()]);
        assert_eq!(b.config.get("User"), Some(&Value::String("1:1".into())));
        let other = ImageId(format!("sha256:{}", "0".repeat(64)));
        let e = read_archive(&p, Some(&other)).unwrap_err();
        assert!(e.to_string().contains(&other.0), "{e}");
        assert!(read_archive(&p, Some(&b.id)).is_ok());
    }
}
