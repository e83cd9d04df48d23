//! Embeds the driver digest: the SHA-256 tree digest of this workspace's source files, so that a
//! frozen protocol can refuse to run under a controller built from other sources.
//!
//! Covered (paths relative to the workspace root, the parent of this crate):
//! - every file named `*.rs`, `Cargo.toml`, `Cargo.lock` or `build.rs`, and
//! - every file under `protocols/init-template/` and `runtimes/fixture/` (embedded in the binary
//!   for `eval init`, see `$OUT_DIR/init_template.rs` written below),
//!
//! found by walking the workspace without following links and skipping `target/`, `runs/` and
//! every directory whose name starts with `.` (`.git`, `.venv`, …). The digest is SHA-256 of an
//! `eval-tree-manifest v1` text (see `protocols/src/tree.rs`) that lists those files only — no
//! directory lines: `f <x|-> <size> sha256:<hex> <path>` (symbolic links: `l - <len>
//! sha256:<digest of the target> <path>`), sorted by path bytes.
//!
//! `cargo:rerun-if-changed` names every covered file and every walked directory (Cargo scans a
//! directory recursively), so adding, removing or editing a source file re-runs this script.

#![allow(clippy::print_stdout)] // cargo reads build-script instructions from stdout

use sha2::{Digest, Sha256};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const SKIP_DIRS: &[&str] = &["target", "runs"];
const SOURCE_NAMES: &[&str] = &["Cargo.toml", "Cargo.lock", "build.rs"];
/// Trees embedded in the binary for `eval init`: (source dir, destination prefix in DIR).
const EMBEDDED_TREES: &[(&str, &str)] = &[
    ("protocols/init-template", ""),
    ("runtimes/fixture", "runtimes/fixture/"),
];

fn covered(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    rel.ends_with(".rs")
        || SOURCE_NAMES.contains(&name)
        || EMBEDDED_TREES
            .iter()
            .any(|(dir, _)| rel.starts_with(&format!("{dir}/")))
}

/// Writes `$OUT_DIR/init_template.rs`: every embedded file as (path in DIR, bytes, executable).
fn write_init_template(root: &Path, files: &[(String, PathBuf)]) {
    let mut out = String::from("pub const FILES: &[(&str, &[u8], bool)] = &[\n");
    for (rel, abs) in files {
        for (dir, dest) in EMBEDDED_TREES {
            if let Some(rest) = rel.strip_prefix(&format!("{dir}/")) {
                let exec = fs::metadata(abs)
                    .map(|m| m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false);
                out.push_str(&format!(
                    "    ({:?}, include_bytes!({:?}), {exec}),\n",
                    format!("{dest}{rest}"),
                    root.join(rel).display().to_string()
                ));
            }
        }
    }
    out.push_str("];\n");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    if let Err(e) = fs::write(out_dir.join("init_template.rs"), out) {
        println!("cargo:warning=cannot write init_template.rs: {e}");
        std::process::exit(1);
    }
}

fn walk(root: &Path, rel: &str, files: &mut Vec<(String, PathBuf)>, dirs: &mut Vec<PathBuf>) {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let Ok(items) = fs::read_dir(&dir) else {
        return;
    };
    for item in items.flatten() {
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        let child = if rel.is_empty() {
            name.to_owned()
        } else {
            format!("{rel}/{name}")
        };
        let Ok(md) = fs::symlink_metadata(item.path()) else {
            continue;
        };
        if md.is_dir() {
            if name.starts_with('.') || (rel.is_empty() && SKIP_DIRS.contains(&name)) {
                continue;
            }
            dirs.push(item.path());
            walk(root, &child, files, dirs);
        } else if covered(&child) {
            files.push((child, item.path()));
        }
    }
}

fn line(rel: &str, abs: &Path) -> std::io::Result<String> {
    let md = fs::symlink_metadata(abs)?;
    if md.file_type().is_symlink() {
        let target = fs::read_link(abs)?;
        let bytes = target.as_os_str().as_bytes();
        return Ok(format!(
            "l - {} sha256:{} {rel}",
            bytes.len(),
            hex::encode(Sha256::digest(bytes))
        ));
    }
    let mut h = Sha256::new();
    let mut f = fs::File::open(abs)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    let exec = if md.permissions().mode() & 0o111 != 0 {
        'x'
    } else {
        '-'
    };
    Ok(format!(
        "f {exec} {size} sha256:{} {rel}",
        hex::encode(h.finalize())
    ))
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or(manifest_dir);
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    walk(&root, "", &mut files, &mut dirs);
    files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut text = String::from("eval-tree-manifest v1\n");
    for (rel, abs) in &files {
        match line(rel, abs) {
            Ok(l) => {
                text.push_str(&l);
                text.push('\n');
            }
            Err(e) => {
                // A build script can only fail loudly; an unreadable source file is a broken tree.
                println!("cargo:warning=driver digest: cannot read {rel}: {e}");
                std::process::exit(1);
            }
        }
        println!("cargo:rerun-if-changed={}", abs.display());
    }
    for d in &dirs {
        println!("cargo:rerun-if-changed={}", d.display());
    }
    write_init_template(&root, &files);
    // Kept beside the build for anyone who wants to see exactly what the digest covers.
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let _ = fs::write(out_dir.join("driver-manifest.txt"), &text);
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    println!("cargo:rustc-env=EVAL_DRIVER_DIGEST=sha256:{digest}");
    println!("cargo:rustc-env=EVAL_DRIVER_FILES={}", files.len());
}
