//! The attestation wire format: what the shim reports for each attested path and what the
//! controller expects. One definition for both sides so they cannot disagree; the filesystem walk
//! that feeds it is the shim's (`runtimes/shim/src/attest.rs`), the in-memory one the image
//! builder's (`eval_runtimes::image`).
//!
//! - regular file: `sha256:` of its bytes;
//! - directory: `sha256:` of the tree listing `eval-tree-v1\n` followed by, for every entry below
//!   it sorted bytewise by relative `/`-separated path, `kind NUL exec NUL path NUL value \n`
//!   where kind is `file` | `dir` | `link`, exec is `x` or `-`, value is the file's content digest,
//!   the link's target, or empty for a directory. Links are recorded, never followed.
//! - symlink: `sha256:` of `link NUL <target>`.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

fn hex_digest(bytes: impl AsRef<[u8]>) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes.as_ref())))
}

/// The `sha256:<hex>` digest of a byte string.
pub fn bytes_digest(bytes: &[u8]) -> String {
    hex_digest(bytes)
}

/// The digest of a symbolic link to `target` (links are recorded, never followed).
pub fn link_digest(target: &str) -> String {
    let mut bytes = b"link\0".to_vec();
    bytes.extend_from_slice(target.as_bytes());
    hex_digest(bytes)
}

/// One entry of a tree listing, as the tree digest encodes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TreeEntry {
    /// The entry's path relative to the attested directory, `/`-separated, as raw bytes.
    pub path: Vec<u8>,
    /// `file`, `dir` or `link`.
    pub kind: &'static str,
    /// Whether the file has an executable bit (always false for directories and links).
    pub exec: bool,
    /// The file's content digest, the link's target, or empty for a directory.
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

/// The body the shim POSTs to `/_eval/attest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttestReport {
    /// Version of this wire format; currently 1.
    pub format: u32,
    /// One entry per `--attest` path the shim was given, in that order.
    pub paths: Vec<AttestedPath>,
}

/// One attested path; `digest` is `None` when the path does not exist (a baseline arm has no
/// candidate package) or cannot be read (`error` says why, by kind only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttestedPath {
    /// The in-container path, exactly as passed to the shim's `--attest`.
    pub path: String,
    /// The path's digest (see the module docs), or `None` if it is absent or unreadable.
    pub digest: Option<String>,
    /// The I/O error kind's text when `digest` is `None` (e.g. `entity not found` for an absent
    /// path, `permission denied`); never a message that could carry file contents.
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

    fn file(path: &str, exec: bool, bytes: &[u8]) -> TreeEntry {
        TreeEntry {
            path: path.as_bytes().to_vec(),
            kind: "file",
            exec,
            value: bytes_digest(bytes),
        }
    }

    #[test]
    fn the_tree_listing_is_pinned_and_order_free() {
        let dir = TreeEntry {
            path: b"sub".to_vec(),
            kind: "dir",
            exec: false,
            value: String::new(),
        };
        let a = file("sub/a", true, b"abd");
        let d = tree_digest_of(vec![a.clone(), dir.clone()]);
        assert_eq!(d, tree_digest_of(vec![dir.clone(), a.clone()]));
        let mut text = b"eval-tree-v1\n".to_vec();
        text.extend_from_slice(b"dir\0-\0sub\0\n");
        text.extend_from_slice(format!("file\0x\0sub/a\0{}\n", bytes_digest(b"abd")).as_bytes());
        assert_eq!(d, bytes_digest(&text));
        // One byte, the mode, or the kind changes the digest.
        assert_ne!(
            d,
            tree_digest_of(vec![dir.clone(), file("sub/a", false, b"abd")])
        );
        assert_ne!(
            d,
            tree_digest_of(vec![dir.clone(), file("sub/a", true, b"abc")])
        );
        assert_eq!(link_digest("x"), bytes_digest(b"link\0x"));
        assert_eq!(
            bytes_digest(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn mismatches_name_missing_extra_and_repeated_paths() {
        let path = |p: &str, d: Option<&str>| AttestedPath {
            path: p.into(),
            digest: d.map(str::to_owned),
            error: None,
        };
        let report = AttestReport {
            format: 1,
            paths: vec![path("/a", Some("sha256:1"))],
        };
        let mut expected = std::collections::BTreeMap::new();
        expected.insert("/a".to_owned(), Some("sha256:1".to_owned()));
        assert!(report.mismatches(&expected).is_empty());
        expected.insert("/b".to_owned(), None);
        assert_eq!(report.mismatches(&expected), vec!["/b".to_owned()]);
        let twice = AttestReport {
            format: 1,
            paths: vec![path("/a", Some("sha256:1")), path("/a", Some("sha256:1"))],
        };
        expected.remove("/b");
        assert_eq!(
            twice.mismatches(&expected),
            vec!["(a path reported twice)".to_owned()]
        );
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(
            json,
            r#"{"format":1,"paths":[{"path":"/a","digest":"sha256:1"}]}"#
        );
    }
}
