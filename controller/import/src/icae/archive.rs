//! ICAE's Zenodo archives (`download_scaffold.sh`): `rcb_tests_repos.tar.gz` (the authoritative
//! cases, members `rcb_tests_repos/<key>/rcb_tests/…`) and `icae_prd_bundle.tar.gz` (the gated
//! PRDs, oracle briefs and alias map, extracting to their repo-root paths), pinned by v0.4's
//! `benchmark-lock.json`. Each archive is read once into memory and hashed; the same bytes are
//! decompressed in-process by `flate2`'s `MultiGzDecoder` (every gzip member, as `gzip -dc`
//! reads them; from memory, so what is read is what was hashed) and read with the `tar` crate; only the members the import needs are written, into a private
//! temporary directory laid out as an ICAE root, under the hostile-input rules of `--from DIR`:
//! directories and regular files only, plain names (`safe_relative`), no member twice, caps on
//! a file's bytes, the bytes written, the members read and the bytes decompressed.

use super::super::common::{ImportError, safe_relative};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

pub(super) fn bad(path: impl Into<PathBuf>, why: impl Into<String>) -> ImportError {
    ImportError::Icae {
        path: path.into(),
        why: why.into(),
    }
}

pub const RCB_ARCHIVE: &str = "rcb_tests_repos.tar.gz";
pub const PRD_ARCHIVE: &str = "icae_prd_bundle.tar.gz";
/// v0.4's pins (Plan Lattice 0414dfa `eval/v0.4/benchmark-lock.json` `officialDataAssets`).
pub const PINS: [(&str, &str); 2] = [
    (
        RCB_ARCHIVE,
        "f746c560e724d0dad12d512ead771d91de91d4b3e6051335728c305e2adff204",
    ),
    (
        PRD_ARCHIVE,
        "b054e8f03b3c434ffaec3c4ee6cf712d3f25e5bc7cd7ef9eb0a913026fd827d7",
    ),
];
/// The archive bytes read at most, one file's bytes, all bytes written, members, decompressed.
const MAX_ARCHIVE: u64 = 2 << 30;
const MAX_FILE: u64 = 4 << 20;
const MAX_WRITTEN: u64 = 1 << 30;
const MAX_MEMBERS: usize = 2_000_000;
const MAX_DECOMPRESSED: u64 = 16 << 30;

/// The archive `name` of `from`: its bytes (a regular file, not a link, capped) and sha256.
pub fn read(from: &Path, name: &str) -> Result<(Vec<u8>, String), ImportError> {
    use sha2::{Digest, Sha256};
    let path = from.join(name);
    let fd = rustix::fs::open(
        &path,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::NONBLOCK
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| ImportError::Read {
        path: path.clone(),
        source: e.into(),
    })?;
    let f = std::fs::File::from(fd);
    let meta = f.metadata().map_err(|source| ImportError::Read {
        path: path.clone(),
        source,
    })?;
    if !meta.is_file() {
        return Err(ImportError::NotRegular {
            path,
            what: "not a regular file".into(),
        });
    }
    if meta.len() > MAX_ARCHIVE {
        return Err(ImportError::TooLarge {
            path,
            cap: MAX_ARCHIVE,
        });
    }
    let mut bytes = Vec::new();
    f.take(MAX_ARCHIVE + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ImportError::Read {
            path: path.clone(),
            source,
        })?;
    if bytes.len() as u64 > MAX_ARCHIVE {
        return Err(ImportError::TooLarge {
            path,
            cap: MAX_ARCHIVE,
        });
    }
    let sha = hex::encode(Sha256::digest(&bytes));
    Ok((bytes, sha))
}

/// Writes the members of the gzip-compressed tar `bytes` (the archive at `path`) whose name
/// (without a leading `./`) `keep` accepts beneath `dest`; returns how many files it wrote.
pub fn extract(
    path: &Path,
    bytes: Vec<u8>,
    keep: &dyn Fn(&str) -> bool,
    dest: &Path,
) -> Result<usize, ImportError> {
    let gz = flate2::read::MultiGzDecoder::new(bytes.as_slice());
    read_members(path, gz.take(MAX_DECOMPRESSED), keep, dest)
}

fn read_members(
    path: &Path,
    input: impl Read,
    keep: &dyn Fn(&str) -> bool,
    dest: &Path,
) -> Result<usize, ImportError> {
    let member = |name: &str, why: &str| bad(path, format!("member {name:?}: {why}"));
    // A gzip error (bad magic, a corrupt stream or a CRC mismatch) surfaces here as a read
    // error of the tar reader.
    let read_err = |e: std::io::Error| bad(path, format!("not a gzip-compressed tar archive: {e}"));
    let mut archive = tar::Archive::new(input);
    let mut seen = BTreeSet::new();
    let (mut members, mut files, mut written) = (0usize, 0usize, 0u64);
    for entry in archive.entries().map_err(read_err)? {
        let mut entry = entry.map_err(read_err)?;
        members += 1;
        if members > MAX_MEMBERS {
            return Err(bad(path, format!("more than {MAX_MEMBERS} members")));
        }
        let raw = entry.path_bytes();
        let name = std::str::from_utf8(&raw)
            .map_err(|_| bad(path, "a member's name is not UTF-8"))?
            .to_owned();
        let rel = name
            .strip_prefix("./")
            .unwrap_or(&name)
            .trim_end_matches('/')
            .to_owned();
        if rel.is_empty() || rel == "." || !keep(&rel) {
            continue;
        }
        safe_relative(&rel).map_err(|why| member(&name, why))?;
        if !seen.insert(rel.clone()) {
            return Err(member(&name, "in the archive twice"));
        }
        let kind = entry.header().entry_type();
        let target: PathBuf = dest.join(&rel);
        let write_err = |source| ImportError::Write {
            path: target.clone(),
            source,
        };
        if kind.is_dir() {
            std::fs::create_dir_all(&target).map_err(write_err)?;
            continue;
        }
        if !kind.is_file() {
            return Err(member(&name, "not a regular file or directory"));
        }
        let size = entry.size();
        if size > MAX_FILE {
            return Err(ImportError::TooLarge {
                path: path.join(&rel),
                cap: MAX_FILE,
            });
        }
        written += size;
        if written > MAX_WRITTEN {
            return Err(bad(
                path,
                format!("more than {MAX_WRITTEN} bytes to extract"),
            ));
        }
        let mut body = Vec::new();
        (&mut entry)
            .take(MAX_FILE + 1)
            .read_to_end(&mut body)
            .map_err(read_err)?;
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(write_err)?;
        }
        super::super::common::write_new(&target, &body).map_err(write_err)?;
        files += 1;
    }
    Ok(files)
}
