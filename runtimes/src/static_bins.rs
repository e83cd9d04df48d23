//! Finding the statically linked in-container binaries (`eval-shim`, `eval-fixture-agent`,
//! `eval-fixture-grader`) at run time.
//!
//! Search order, first static ELF wins: `$EVAL_STATIC_DIR/<name>`; next to the running
//! executable; `$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/<name>`;
//! `<project root>/target/x86_64-unknown-linux-gnu/release/<name>`. A dynamically linked
//! build of the same name (what `cargo build` puts in `target/debug`) is skipped: it would not
//! start in a busybox image.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The in-container helper every agent container starts with (it attests paths and talks to the
/// proxy over its socket).
pub const SHIM: &str = "eval-shim";
/// The fixture agent, the stand-in harness of the fixture runtime.
pub const FIXTURE_AGENT: &str = "eval-fixture-agent";
/// The fixture grader, which scores fixture tasks.
pub const FIXTURE_GRADER: &str = "eval-fixture-grader";
const TRIPLE_DIR: &str = "x86_64-unknown-linux-gnu/release";

#[derive(Debug, thiserror::Error)]
#[error(
    "static binary {name} not found (looked in: {looked}); build it with `scripts/build-static.sh` or point EVAL_STATIC_DIR at a directory holding it"
)]
/// No static build of a needed binary was found; the message says where it looked and how to build
/// one.
pub struct StaticBinaryError {
    /// The binary's file name.
    pub name: String,
    /// The candidate paths tried, in search order.
    pub looked: String,
}

fn candidates(name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os("EVAL_STATIC_DIR") {
        out.push(PathBuf::from(dir).join(name));
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        out.push(dir.join(name));
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        out.push(PathBuf::from(dir).join(TRIPLE_DIR).join(name));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    out.push(root.join("target").join(TRIPLE_DIR).join(name));
    out
}

/// Whether `path` is an ELF executable without a program interpreter (statically linked).
pub fn is_static_elf(path: &Path) -> bool {
    let Ok(mut f) = fs::File::open(path) else {
        return false;
    };
    let mut head = Vec::new();
    if f.by_ref().take(64 * 1024).read_to_end(&mut head).is_err() || head.len() < 64 {
        return false;
    }
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return false; // only 64-bit little-endian
    }
    let u16_at = |o: usize| head.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u64_at = |o: usize| {
        head.get(o..o + 8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    for i in 0..usize::from(phnum) {
        let at = phoff as usize + i * usize::from(phentsize);
        match head.get(at..at + 4) {
            Some(t) if t == [3, 0, 0, 0] => return false, // PT_INTERP
            Some(_) => {}
            None => return false,
        }
    }
    true
}

/// The path of static binary `name`.
pub fn locate(name: &str) -> Result<PathBuf, StaticBinaryError> {
    let list = candidates(name);
    for c in &list {
        if is_static_elf(c) {
            return Ok(c.clone());
        }
    }
    Err(StaticBinaryError {
        name: name.to_owned(),
        looked: list
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busybox_is_static_and_this_test_is_not() {
        assert!(is_static_elf(Path::new("/bin/busybox")));
        let me = std::env::current_exe().unwrap();
        assert!(!is_static_elf(&me));
        assert!(!is_static_elf(Path::new("/etc/hostname")));
    }

    #[test]
    fn missing_names_the_fix() {
        let e = locate("no-such-eval-binary").unwrap_err();
        assert!(e.to_string().contains("scripts/build-static.sh"));
    }
}
