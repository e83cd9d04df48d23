//! Attestation digests: what the shim reports for each attested path and what the controller
//! expects. One function for both sides so they cannot disagree.
//!
//! - regular file: `sha256:` of its bytes;
//! - directory: `sha256:` of the tree listing `eval-tree-v1\n` followed by, for every entry below
//!   it sorted bytewise by relative `/`-separated path, `kind NUL exec NUL path NUL value \n`
//!   where kind is `file` | `dir` | `link`, exec is `x` or `-`, value is the file's content digest,
//!   the link's target, or empty for a directory. Links are recorded, never followed.
//! - symlink: `sha256:` of `link NUL <target>`.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

fn hex_digest(bytes: impl AsRef<[u8]>) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes.as_ref())))
}

/// The `sha256:<hex>` digest of a byte string.
pub fn bytes_digest(bytes: &[u8]) -> String {
    hex_digest(bytes)
}

fn file_digest(path: &Path) -> io::Result<String> {
    let mut f = fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

/// One entry of a tree listing, as the tree digest encodes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TreeEntry {
    pub path: Vec<u8>,
    pub kind: &'static str,
    pub exec: bool,
    pub value: String,
}

/// The tree digest of a listing (entries in any order; they are sorted here).
pub fn tree_digest_of(mut entries: Vec<TreeEntry>) -> String {
    entries.sort();
    let mut text = b"eval-tree-v1\n".to_vec();
    for e in &entries {
        text.extend_from_slice(e.kind.as_bytes());
        text.push(0);
        text.push(if e.exec { b'x' } else { b'-' });
        text.push(0);
        text.extend_from_slice(&e.path);
        text.push(0);
        text.extend_from_slice(e.value.as_bytes());
        text.push(b'\n');
    }
    hex_digest(text)
}

fn walk(root: &Path, rel: &str, out: &mut Vec<TreeEntry>) -> io::Result<()> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    for entry in fs::read_dir(&dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let child = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let meta = fs::symlink_metadata(entry.path())?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = fs::read_link(entry.path())?;
            out.push(TreeEntry {
                path: child.into_bytes(),
                kind: "link",
                exec: false,
                value: target.to_string_lossy().into_owned(),
            });
        } else if ft.is_dir() {
            out.push(TreeEntry {
                path: child.clone().into_bytes(),
                kind: "dir",
                exec: false,
                value: String::new(),
            });
            walk(root, &child, out)?;
        } else if ft.is_file() {
            out.push(TreeEntry {
                path: child.into_bytes(),
                kind: "file",
                exec: meta.permissions().mode() & 0o111 != 0,
                value: file_digest(&entry.path())?,
            });
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a file, directory or link", entry.path().display()),
            ));
        }
    }
    Ok(())
}

/// The attestation digest of `path` (see the module doc).
pub fn path_digest(path: &Path) -> io::Result<String> {
    let meta = fs::symlink_metadata(path)?;
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = fs::read_link(path)?;
        let mut bytes = b"link\0".to_vec();
        bytes.extend_from_slice(target.to_string_lossy().as_bytes());
        Ok(hex_digest(bytes))
    } else if ft.is_dir() {
        let mut entries = Vec::new();
        walk(path, "", &mut entries)?;
        Ok(tree_digest_of(entries))
    } else {
        file_digest(path)
    }
}

/// The body the shim POSTs to `/_eval/attest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttestReport {
    pub format: u32,
    pub paths: Vec<AttestedPath>,
}

/// One attested path; `digest` is `None` when the path does not exist (a baseline arm has no
/// candidate package) or cannot be read (`error` says why, by kind only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttestedPath {
    pub path: String,
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl AttestReport {
    /// The reported digests by path.
    pub fn digests(&self) -> std::collections::BTreeMap<String, Option<String>> {
        self.paths
            .iter()
            .map(|p| (p.path.clone(), p.digest.clone()))
            .collect()
    }

    /// Paths whose reported digest differs from `expected` (missing, extra or different);
    /// empty means the attestation holds.
    pub fn mismatches(
        &self,
        expected: &std::collections::BTreeMap<String, Option<String>>,
    ) -> Vec<String> {
        let got = self.digests();
        let mut out: Vec<String> = expected
            .iter()
            .filter(|(p, d)| got.get(*p) != Some(*d))
            .map(|(p, _)| p.clone())
            .collect();
        out.extend(got.keys().filter(|p| !expected.contains_key(*p)).cloned());
        if got.len() != self.paths.len() {
            out.push("(a path reported twice)".to_owned());
        }
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_change_with_one_byte_and_mode() {
        let dir = std::env::temp_dir().join(format!("eval-attest-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("sub/a"), b"abc").unwrap();
        let d1 = path_digest(&dir).unwrap();
        assert_eq!(
            path_digest(&dir.join("sub/a")).unwrap(),
            bytes_digest(b"abc")
        );
        fs::write(dir.join("sub/a"), b"abd").unwrap();
        let d2 = path_digest(&dir).unwrap();
        assert_ne!(d1, d2);
        fs::set_permissions(dir.join("sub/a"), fs::Permissions::from_mode(0o755)).unwrap();
        assert_ne!(d2, path_digest(&dir).unwrap());
        // The listing form agrees with the walk.
        let listing = vec![
            TreeEntry {
                path: b"sub/a".to_vec(),
                kind: "file",
                exec: true,
                value: bytes_digest(b"abd"),
            },
            TreeEntry {
                path: b"sub".to_vec(),
                kind: "dir",
                exec: false,
                value: String::new(),
            },
        ];
        assert_eq!(tree_digest_of(listing), path_digest(&dir).unwrap());
        let report = AttestReport {
            format: 1,
            paths: vec![AttestedPath {
                path: "/a".into(),
                digest: Some("sha256:1".into()),
                error: None,
            }],
        };
        let mut expected = std::collections::BTreeMap::new();
        expected.insert("/a".to_owned(), Some("sha256:1".to_owned()));
        assert!(report.mismatches(&expected).is_empty());
        expected.insert("/b".to_owned(), None);
        assert_eq!(report.mismatches(&expected), vec!["/b".to_owned()]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
