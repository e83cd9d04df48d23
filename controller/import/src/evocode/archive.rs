//! EvoCode-Bench's dataset archive (`archives/evocodebench_wotraj.tar.zst` of the Hugging Face
//! dataset, V04-SUITES.md): a zstd-compressed tar whose members are `<root>/<task>/…` (the real
//! one's root is `evocodebench_wotraj/`, Plan Lattice v27 `manifest.mjs` `TASK_RELATIVE_PATH`).
//!
//! The archive's bytes are read once into memory and hashed (`fn pinned`); extraction decodes
//! those same bytes, so what is extracted is what was hashed. Extraction (`fn extract`) writes
//! only the selected tasks' members into a private temporary directory under the same
//! hostile-input rules as `read_tree`: only directories and regular files (no links, devices,
//! FIFOs), every member name plain (`safe_relative`: no `..`, no absolute path, no `.git`), no
//! member twice, and caps on one file's bytes, the files and bytes written, the members read and
//! the bytes decompressed. The import then reads the temporary directory as it reads `--from
//! DIR`.

use super::super::common::{ImportError, safe_relative};
use super::super::harbor_reader::{MAX_FILE_BYTES, MAX_TREE_FILES, harbor};
use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

/// The most tasks one import reads.
pub(super) const MAX_TASKS: usize = 100;

/// The dataset archive's sha256 (dataset commit `9fcae3e5539d1c0e85e2481fe06bd6af42cc4bc6`,
/// 70,121,019 bytes; Plan Lattice `main` `eval/long-system/v27/frozen-manifest.json`).
pub const ARCHIVE_SHA256: &str = "a13d0cb47574282372c59366217ac68d895ff49d1387c81098b058f739906184";
/// What the archive's file name ends with (`--from` is read as the archive when it does).
pub const ARCHIVE_SUFFIX: &str = ".tar.zst";
/// Bytes decompressed at most (the whole tar, selected or not): a bound on a decompression bomb.
const MAX_DECOMPRESSED: u64 = 4 << 30;
/// Members read at most.
const MAX_MEMBERS: usize = 200_000;
/// zstd's window at most: the `zstd` tool's own default decoding limit (`--memory=128MB`).
const MAX_WINDOW: u64 = 128 << 20;

/// The archive's tasks extracted into a private temporary directory, removed when dropped.
pub struct Extracted {
    _dir: tempfile::TempDir,
    /// The directory holding `<task>/task.toml`: read like `--from DIR`.
    pub root: PathBuf,
}

/// The sha256 of `bytes`, refused when it is not [`ARCHIVE_SHA256`] unless `allow_unpinned`;
/// the message names both digests.
pub fn pinned(path: &Path, bytes: &[u8], allow_unpinned: bool) -> Result<String, ImportError> {
    use sha2::{Digest, Sha256};
    let got = hex::encode(Sha256::digest(bytes));
    if got != ARCHIVE_SHA256 && !allow_unpinned {
        return Err(ImportError::ArchiveUnpinned {
            path: path.to_path_buf(),
            got,
            want: ARCHIVE_SHA256,
        });
    }
    Ok(got)
}

/// Extracts the members of `bytes` (the archive at `path`) beneath `<root>/<task>/` for the
/// tasks `wanted` names (every task when it is empty) into a private temporary directory. An
/// id `wanted` names that the archive lacks is refused with the ids it has.
pub fn extract(path: &Path, bytes: &[u8], wanted: &[String]) -> Result<Extracted, ImportError> {
    let dir = tempfile::Builder::new()
        .prefix("eval-evocode-")
        .tempdir()
        .map_err(|source| ImportError::Read {
            path: std::env::temp_dir(),
            source,
        })?;
    let bad = |member: &str, why: String| harbor(path, format!("member {member:?}: {why}"));
    let read_err =
        |source: std::io::Error| harbor(path, format!("not a zstd-compressed tar: {source}"));
    let decoder = Frames::new(bytes).map_err(read_err)?;
    let mut archive = tar::Archive::new(Bounded {
        inner: decoder,
        left: MAX_DECOMPRESSED,
    });
    let mut root: Option<String> = None;
    let mut tasks = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let (mut files, mut written) = (0usize, 0u64);
    let mut members = 0usize;
    for entry in archive.entries().map_err(read_err)? {
        let mut entry = entry.map_err(read_err)?;
        members += 1;
        if members > MAX_MEMBERS {
            return Err(harbor(path, format!("more than {MAX_MEMBERS} members")));
        }
        let raw = entry.path_bytes();
        let name = std::str::from_utf8(&raw)
            .map_err(|_| harbor(path, "a member's name is not UTF-8"))?
            .to_owned();
        let rel = name
            .strip_prefix("./")
            .unwrap_or(&name)
            .trim_end_matches('/');
        if rel.is_empty() || rel == "." {
            continue;
        }
        safe_relative(rel).map_err(|why| bad(&name, why.into()))?;
        let mut parts = rel.splitn(3, '/');
        let top = parts.next().unwrap_or_default();
        match &root {
            Some(r) if r != top => {
                return Err(bad(
                    &name,
                    format!("outside the archive's one top-level directory {r:?}"),
                ));
            }
            Some(_) => {}
            None => root = Some(top.to_owned()),
        }
        let kind = entry.header().entry_type();
        let Some(task) = parts.next() else {
            if !kind.is_dir() {
                return Err(bad(
                    &name,
                    "the top level holds only the task directories' parent".into(),
                ));
            }
            continue;
        };
        if tasks.insert(task.to_owned()) && tasks.len() > MAX_TASKS * 100 {
            return Err(harbor(
                path,
                "more task directories than the importer reads",
            ));
        }
        if !(wanted.is_empty() || wanted.iter().any(|w| w == task)) {
            continue;
        }
        if !seen.insert(rel.to_owned()) {
            return Err(bad(&name, "in the archive twice".into()));
        }
        let target = dir.path().join(rel);
        let write_err = |source| ImportError::Write {
            path: target.clone(),
            source,
        };
        if kind.is_dir() {
            std::fs::create_dir_all(&target).map_err(write_err)?;
            continue;
        }
        if !kind.is_file() {
            return Err(bad(
                &name,
                "a link or special file; the importer reads only directories and regular files"
                    .into(),
            ));
        }
        let size = entry.header().size().map_err(read_err)?;
        if size > MAX_FILE_BYTES {
            return Err(bad(&name, format!("larger than {MAX_FILE_BYTES} bytes")));
        }
        files += 1;
        written += size;
        if files > MAX_TASKS * MAX_TREE_FILES || written > MAX_DECOMPRESSED / 4 {
            return Err(harbor(path, "more files or bytes than the importer reads"));
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(write_err)?;
        }
        let mut body = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        (&mut entry)
            .take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut body)
            .map_err(read_err)?;
        if body.len() as u64 != size {
            return Err(bad(&name, "its size is not its header's".into()));
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(write_err)?;
        f.write_all(&body).map_err(write_err)?;
    }
    let Some(root) = root else {
        return Err(harbor(path, "an empty archive"));
    };
    for w in wanted {
        if !tasks.contains(w) {
            return Err(ImportError::UnknownTask {
                id: w.clone(),
                known: tasks.into_iter().collect(),
            });
        }
    }
    let root = dir.path().join(root);
    if !root.is_dir() {
        return Err(harbor(path, "no task directory (<root>/<task>/task.toml)"));
    }
    Ok(Extracted { _dir: dir, root })
}

/// Every zstd frame of the input in turn (the `zstd` tool decodes concatenated frames as one
/// stream, and a multi-threaded compressor may write several).
struct Frames<'a> {
    inner: Option<ruzstd::decoding::StreamingDecoder<&'a [u8], ruzstd::decoding::FrameDecoder>>,
}

impl<'a> Frames<'a> {
    fn new(bytes: &'a [u8]) -> std::io::Result<Self> {
        let d = ruzstd::decoding::StreamingDecoder::new_with_max_window_size(bytes, MAX_WINDOW)
            .map_err(std::io::Error::other)?;
        Ok(Frames { inner: Some(d) })
    }
}

impl Read for Frames<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let Some(d) = self.inner.as_mut() else {
                return Ok(0);
            };
            let n = d.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let Some(done) = self.inner.take() else {
                return Ok(0);
            };
            let (mut rest, decoder) = done.into_parts();
            if rest.fill_buf()?.is_empty() {
                return Ok(0);
            }
            self.inner = Some(
                ruzstd::decoding::StreamingDecoder::new_with_decoder(rest, decoder)
                    .map_err(std::io::Error::other)?,
            );
        }
    }
}

/// A reader that fails, rather than ends, past `left` bytes (a truncated tar would read as a
/// shorter archive).
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            std::io::Error::other(format!(
                "decompresses to more than {MAX_DECOMPRESSED} bytes"
            ))
        })?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zst(bytes: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(bytes, ruzstd::encoding::CompressionLevel::Fastest)
    }

    #[test]
    fn concatenated_frames_decode_as_one_stream() {
        let mut two = zst(b"first frame, ");
        two.extend(zst(b"second frame"));
        let mut out = Vec::new();
        Frames::new(&two).unwrap().read_to_end(&mut out).unwrap();
        assert_eq!(out, b"first frame, second frame");
    }

    #[test]
    fn more_than_the_cap_fails_instead_of_ending() {
        let mut r = Bounded {
            inner: &b"0123456789"[..],
            left: 4,
        };
        let mut out = Vec::new();
        assert!(r.read_to_end(&mut out).is_err());
    }
}
