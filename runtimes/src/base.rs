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
use crate::image_id::ImageId;
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

/// Reads the base description from a `docker save` archive (`manifest.json` and the config it
/// names), streaming with the `tar` crate: header checksums are checked (a corrupted header is
/// refused), long names and PAX `path` records are read as the crate reads them (by their length
/// prefix), only the top-level JSON files are kept, every other body is skipped with a seek.
/// `want` picks the manifest entry whose config has that id when the archive holds several.
pub fn read_archive(path: &Path, want: Option<&ImageId>) -> Result<BaseImage, RuntimeError> {
    let io = |e: std::io::Error| RuntimeError::HostIo {
        path: path.display().to_string(),
        source: e,
    };
    let bad_tar = |e: std::io::Error| bad_archive(path, format!("not a readable tar archive: {e}"));
    let mut archive = tar::Archive::new(BufReader::new(File::open(path).map_err(io)?));
    let mut small: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for entry in archive.entries_with_seek().map_err(bad_tar)? {
        let mut entry = entry.map_err(bad_tar)?;
        let name = String::from_utf8_lossy(&entry.path_bytes())
            .trim_start_matches("./")
            .to_owned();
        let size = entry.size();
        if entry.header().entry_type().is_file()
            && size <= SMALL_FILE
            && !name.contains('/')
            && name.ends_with(".json")
        {
            let mut body = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            entry.read_to_end(&mut body).map_err(bad_tar)?;
            small.insert(name, body);
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
        // Extended headers (GNU long names and link names, PAX records) are held until the entry
        // they describe is known: dropped with a dropped or rewritten entry, passed on before any
        // other.
        let mut held = Vec::new();
        let mut long_name: Option<String> = None;
        let mut pax_size: Option<u64> = None;
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
            let header = checked_header(&h)?;
            let kind = header.entry_type();
            let own_size = header.entry_size()?;
            if kind.is_gnu_longname() || kind.is_gnu_longlink() || kind.is_pax_local_extensions() {
                let size = own_size;
                let body = self.body(size)?;
                if kind.is_gnu_longname() {
                    let end = body.iter().position(|b| *b == 0).unwrap_or(body.len());
                    long_name = Some(String::from_utf8_lossy(&body[..end]).into_owned());
                } else if kind.is_pax_local_extensions() {
                    if let Some(n) = pax_value(&body, "path") {
                        long_name = Some(n);
                    }
                    // A PAX `size` overrides the next header's size field, as every reader
                    // takes it.
                    if let Some(n) = pax_value(&body, "size").and_then(|v| v.parse().ok()) {
                        pax_size = Some(n);
                    }
                }
                held.extend_from_slice(&h);
                let mut padded = body;
                padded.resize(usize::try_from(size.div_ceil(512) * 512).unwrap_or(0), 0);
                held.extend_from_slice(&padded);
                continue;
            }
            let size = pax_size.take().unwrap_or(own_size);
            let name = long_name
                .take()
                .unwrap_or_else(|| String::from_utf8_lossy(&header.path_bytes()).into_owned());
            let name = name.trim_start_matches("./");
            let regular = kind.is_file();
            if regular && matches!(name, "repositories" | "index.json" | "oci-layout") {
                self.body_skip(size)?;
                held.clear();
                continue;
            }
            if regular && name == "manifest.json" {
                let body = self.body(size)?;
                let new = self.manifest(&body)?;
                let mut out = manifest_header(new.len() as u64)?.as_bytes().to_vec();
                let len = new.len();
                out.extend_from_slice(&new);
                out.resize(512 + len.div_ceil(512) * 512, 0);
                return Ok(Some(out));
            }
            held.extend_from_slice(&h);
            self.pass_entry(header, size, &mut held)?;
            return Ok(Some(held));
        }
    }

    /// Passes an entry's header on (in `held`, after its extended headers): reads an old GNU
    /// sparse file's extension blocks into it and sets how much body follows.
    fn pass_entry(
        &mut self,
        header: &tar::Header,
        size: u64,
        held: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        let kind = header.entry_type();
        if kind.is_gnu_sparse() && header.as_gnu().is_some_and(|g| g.is_extended()) {
            // An old GNU sparse file's map continues in extension blocks before its body.
            let mut ext = tar::GnuExtSparseHeader::new();
            ext.set_is_extended(true);
            while ext.is_extended() {
                self.r.read_exact(ext.as_mut_bytes())?;
                held.extend_from_slice(ext.as_bytes());
            }
        }
        // As Go's archive/tar (what `docker load` reads with): links, devices, directories
        // and FIFOs carry no body whatever their size field says; every other entry (a global
        // PAX header `g` or a sparse file `S` included) carries `size` bytes.
        let header_only = kind.is_hard_link()
            || kind.is_symlink()
            || kind.is_character_special()
            || kind.is_block_special()
            || kind.is_dir()
            || kind.is_fifo();
        self.remaining = if header_only {
            0
        } else {
            size.div_ceil(512) * 512
        };
        Ok(())
    }

    fn body_skip(&mut self, size: u64) -> std::io::Result<()> {
        let padded = size.div_ceil(512) * 512;
        std::io::copy(&mut (&mut self.r).take(padded), &mut std::io::sink())?;
        Ok(())
    }
}

/// `h` as a tar header, refused when its checksum does not match its bytes (a corrupted header
/// would otherwise be read as whatever its bytes happen to say).
fn checked_header(h: &[u8; 512]) -> std::io::Result<&tar::Header> {
    let header = tar::Header::from_byte_slice(h);
    let mut recomputed = header.clone();
    recomputed.set_cksum();
    if header.cksum()? != recomputed.cksum()? {
        return Err(std::io::Error::other(
            "a tar header's checksum does not match its bytes (corrupted archive)",
        ));
    }
    Ok(header)
}

/// The `key` record of a PAX extended header's records (read by their length prefix, as the
/// `tar` crate reads them; a malformed record names nothing).
fn pax_value(records: &[u8], key: &str) -> Option<String> {
    tar::PaxExtensions::new(records)
        .filter_map(Result::ok)
        .find(|r| r.key() == Ok(key))
        .and_then(|r| r.value().ok().map(str::to_owned))
}

/// The ustar header of the rewritten `manifest.json`: a regular file of `size` bytes, mode 0644,
/// owner 0:0, mtime 0.
fn manifest_header(size: u64) -> std::io::Result<tar::Header> {
    let mut h = tar::Header::new_ustar();
    h.set_path("manifest.json")?;
    h.set_size(size);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    Ok(h)
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

    /// A `docker save` archive of one image: its config and manifest (tagged), as written by
    /// `crate::tar`; returns the bytes, the config's header offset and the image id.
    fn saved(extra: impl FnOnce(&mut Vec<u8>)) -> (Vec<u8>, usize, ImageId) {
        let cfg = br#"{"architecture":"amd64","os":"linux","config":{"User":"1:1"},"rootfs":{"type":"layers","diff_ids":["sha256:bb"]}}"#;
        let hex = hex::encode(Sha256::digest(cfg));
        let mut out = Vec::new();
        extra(&mut out);
        let at = out.len();
        let file = |bytes| crate::tar::Body::File { bytes, mode: 0o644 };
        crate::tar::append(&mut out, &format!("{hex}.json"), &file(cfg)).unwrap();
        let manifest = format!(
            r#"[{{"Config":"{hex}.json","RepoTags":["eval-base/x:latest"],"Layers":["bb/layer.tar"]}}]"#
        );
        crate::tar::append(&mut out, "manifest.json", &file(manifest.as_bytes())).unwrap();
        crate::tar::append(&mut out, "repositories", &file(b"{}")).unwrap();
        crate::tar::finish(&mut out);
        (out, at, ImageId(format!("sha256:{hex}")))
    }

    fn untagged(input: &[u8], want: &ImageId) -> std::io::Result<Vec<u8>> {
        let mut u = UntaggedArchive::new(input, want, 512);
        let mut out = Vec::new();
        while let Some(piece) = u.next_chunk()? {
            out.extend_from_slice(&piece);
        }
        Ok(out)
    }

    /// A header whose checksum does not match its bytes (one byte of the config's mtime changed)
    /// is refused by the reader and by the rewriter; a hand-written reader read it as it stood.
    #[test]
    fn a_corrupted_tar_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut bytes, at, id) = saved(|_| {});
        let p = dir.path().join("ok.tar");
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(read_archive(&p, None).unwrap().id, id);
        bytes[at + 140] ^= 0x01;
        std::fs::write(&p, &bytes).unwrap();
        let e = read_archive(&p, None).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
        let e = untagged(&bytes, &id).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
    }

    /// PAX records are read by their length prefix: a record whose value holds a line break
    /// followed by `N path=manifest.json` names no path (a reader splitting on line breaks took
    /// that entry for the manifest and read its bogus body as the image's).
    #[test]
    fn a_pax_record_is_read_by_its_length_prefix_not_split_on_line_breaks() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, _, id) = saved(|_| {});
        let mut spoofed = bytes[..bytes.len() - 1024].to_vec();
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([("comment", &b"x\n9 path=manifest.json"[..])])
            .unwrap();
        let bogus = b"[]";
        let mut h = tar::Header::new_ustar();
        h.set_path("notes.json").unwrap();
        h.set_size(bogus.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, &bogus[..]).unwrap();
        let body = b.into_inner().unwrap();
        spoofed.extend_from_slice(&body[..body.len() - 1024]);
        crate::tar::finish(&mut spoofed);
        let p = dir.path().join("spoofed.tar");
        std::fs::write(&p, &spoofed).unwrap();
        assert_eq!(read_archive(&p, None).unwrap().id, id);
    }

    /// Entries of type `g` (a global PAX header), `K` (a GNU long link name) and `S` (an old GNU
    /// sparse file) carry bodies: the rewriter passes them through byte for byte (it read their
    /// bodies as the next header before), drops `repositories` and untags the manifest.
    #[test]
    fn global_pax_long_link_and_sparse_entries_pass_the_rewriter_intact() {
        let (input, at, id) = saved(|out| {
            let mut b = tar::Builder::new(Vec::new());
            let mut g = tar::Header::new_ustar();
            g.set_path("pax_global_header").unwrap();
            g.set_entry_type(tar::EntryType::XGlobalHeader);
            let records = b"22 comment=from a tool\n";
            g.set_size(records.len() as u64);
            g.set_cksum();
            b.append(&g, &records[..]).unwrap();
            let target = format!("{}/target", "t".repeat(120));
            let mut k = tar::Header::new_gnu();
            k.set_path("././@LongLink").unwrap();
            k.set_entry_type(tar::EntryType::GNULongLink);
            k.set_size(target.len() as u64 + 1);
            k.set_cksum();
            let mut body = target.clone().into_bytes();
            body.push(0);
            b.append(&k, &body[..]).unwrap();
            let mut l = tar::Header::new_gnu();
            l.set_path("link").unwrap();
            l.set_entry_type(tar::EntryType::Symlink);
            l.set_size(0);
            l.set_cksum();
            b.append(&l, &[][..]).unwrap();
            let data = vec![b'S'; 700];
            let mut sp = tar::Header::new_gnu();
            sp.set_path("sparse.bin").unwrap();
            sp.set_entry_type(tar::EntryType::GNUSparse);
            sp.set_size(data.len() as u64);
            if let Some(gnu) = sp.as_gnu_mut() {
                gnu.sparse[0].set_offset(4096);
                gnu.sparse[0].set_length(data.len() as u64);
                gnu.set_real_size(4096 + data.len() as u64);
            }
            sp.set_cksum();
            b.append(&sp, &data[..]).unwrap();
            let body = b.into_inner().unwrap();
            // `into_inner` ends the archive: the end blocks come after the image's files.
            out.extend_from_slice(&body[..body.len() - 1024]);
        });
        let output = untagged(&input, &id).unwrap();
        // Everything before the manifest (the three entries, the config) passes unchanged.
        let manifest_at = at + 1024;
        assert_eq!(output[..manifest_at], input[..manifest_at]);
        let mut archive = tar::Archive::new(&output[..]);
        let mut names = Vec::new();
        for e in archive.entries().unwrap() {
            let mut e = e.unwrap();
            let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
            let mut body = Vec::new();
            e.read_to_end(&mut body).unwrap();
            if name == "manifest.json" {
                let v: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(v[0]["RepoTags"], Value::Null);
            }
            if name == "sparse.bin" {
                assert_eq!(body.len(), 4096 + 700);
                assert!(body[4096..].iter().all(|b| *b == b'S'));
            }
            if name == "link" {
                let link = e.link_name_bytes().unwrap().into_owned();
                assert!(link.ends_with(b"/target") && link.len() == 127, "{link:?}");
            }
            names.push(name);
        }
        assert!(!names.iter().any(|n| n == "repositories"), "{names:?}");
        assert!(names.iter().any(|n| n == "manifest.json"), "{names:?}");
        assert!(names.iter().any(|n| n == "sparse.bin"), "{names:?}");
    }
}
