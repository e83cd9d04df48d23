//! Which state directory a container belongs to. Several state directories share one engine
//! (projects, test suites, a second checkout), and the same frozen identity can run in more than
//! one of them; each sweep (a session's start, `eval gc`) judges liveness only in its own state
//! directory, so it must only ever reach containers its own state directory's sessions started.
//! Each state directory gets a random id (`STATE/state-id`, made once, never rewritten) and every
//! container a session starts carries `eval.owner=<state id>/<identity>`; the sweeps go by that
//! label, never by the identity alone.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The label naming the state directory and identity a container was started for.
pub const LABEL_OWNER: &str = "eval.owner";
/// The state directory's id file.
pub const STATE_ID_FILE: &str = "state-id";

fn valid(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// This state directory's id: read from `STATE/state-id` (no link followed), or, with `create`,
/// made (`O_EXCL`: two sessions starting at once agree on the one that was written first).
/// `Ok(None)`: none yet and not asked to make one.
pub fn state_id(state: &Path, create: bool) -> std::io::Result<Option<String>> {
    let path = state.join(STATE_ID_FILE);
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_nofollow())
            .open(&path)?;
        let mut s = String::new();
        Read::by_ref(&mut f).take(64).read_to_string(&mut s)?;
        let s = s.trim().to_owned();
        if valid(&s) {
            Ok(s)
        } else {
            Err(std::io::Error::other(format!(
                "{}: not a state id (32 hex digits)",
                path.display()
            )))
        }
    };
    match read() {
        Ok(id) => return Ok(Some(id)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(state)?;
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    let id = hex::encode(buf);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)
    {
        Ok(mut f) => {
            f.write_all(format!("{id}\n").as_bytes())?;
            f.sync_all()?;
            Ok(Some(id))
        }
        // Another session made it first: its id is the state directory's.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read().map(Some),
        Err(e) => Err(e),
    }
}

fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// `eval.owner=<state id>/<identity>`: the filter of a sweep.
pub fn owner_label(state_id: &str, identity: &str) -> String {
    format!("{LABEL_OWNER}={}", owner_value(state_id, identity))
}

/// The label's value.
pub fn owner_value(state_id: &str, identity: &str) -> String {
    format!("{state_id}/{identity}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_state_id_is_made_once_and_read_back_and_a_link_is_refused() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(state_id(t.path(), false).unwrap(), None);
        let a = state_id(t.path(), true).unwrap().unwrap();
        assert!(valid(&a));
        assert_eq!(state_id(t.path(), true).unwrap().unwrap(), a);
        assert_eq!(state_id(t.path(), false).unwrap().unwrap(), a);
        let other = tempfile::tempdir().unwrap();
        let b = state_id(other.path(), true).unwrap().unwrap();
        assert_ne!(a, b);
        // A planted link to another state's id is not followed.
        let planted = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            other.path().join(STATE_ID_FILE),
            planted.path().join(STATE_ID_FILE),
        )
        .unwrap();
        assert!(state_id(planted.path(), true).is_err());
    }
}
