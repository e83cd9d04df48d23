//! The filesystem side of the attestation: the digest of a path as it is inside the container,
//! in the form `eval_core::attest` defines (see there for the layout).

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use eval_core::attest::{TreeEntry, link_digest, tree_digest_of};
use sha2::{Digest, Sha256};

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
    Ok(eval_core::Digest(h.finalize().into()).to_string())
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
        Ok(link_digest(&target.to_string_lossy()))
    } else if ft.is_dir() {
        let mut entries = Vec::new();
        walk(path, "", &mut entries)?;
        Ok(tree_digest_of(entries))
    } else {
        file_digest(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eval_core::attest::bytes_digest;

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
        std::os::unix::fs::symlink("sub/a", dir.join("l")).unwrap();
        assert_eq!(path_digest(&dir.join("l")).unwrap(), link_digest("sub/a"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
