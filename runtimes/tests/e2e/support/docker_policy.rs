//! Whether a test that needs a Docker engine runs, fails or is skipped. One policy for every
//! test binary (the controller's test support includes this file too): a plain `cargo test`
//! without an engine FAILS, so CI cannot be green without running the engine tests; skipping
//! happens only when `EVAL_SKIP_DOCKER=1` asks for it, and then every skip is printed with a
//! running count (written past the test harness's capture, so it shows for passing tests).

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable that asks for Docker tests to be skipped when no engine answers.
pub const SKIP_VAR: &str = "EVAL_SKIP_DOCKER";

#[derive(Debug, PartialEq, Eq)]
pub enum DockerPolicy {
    Run,
    Skip(String),
    Fail(String),
}

/// `engine` is the engine probe's result; `skip` the value of [`SKIP_VAR`], if set.
pub fn decide(engine: Result<(), String>, skip: Option<&str>) -> DockerPolicy {
    match engine {
        Ok(()) => DockerPolicy::Run,
        Err(why) if skip == Some("1") => DockerPolicy::Skip(why),
        Err(why) => DockerPolicy::Fail(format!(
            "no Docker engine answers ({why}); this test needs one. Start an engine, or set \
             {SKIP_VAR}=1 to skip the Docker tests explicitly"
        )),
    }
}

static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// Applies the policy for the current test: true to run it, false when it is skipped (after
/// printing the skip and the count so far); panics when no engine answers and skipping was not
/// asked for.
pub fn require(engine: Result<(), String>) -> bool {
    let skip = std::env::var(SKIP_VAR).ok();
    match decide(engine, skip.as_deref()) {
        DockerPolicy::Run => true,
        DockerPolicy::Skip(why) => {
            let n = SKIPPED.fetch_add(1, Ordering::SeqCst) + 1;
            let test = std::thread::current()
                .name()
                .unwrap_or("<unnamed test>")
                .to_owned();
            let bin = std::env::current_exe()
                .ok()
                .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
                .unwrap_or_default();
            // Straight to the stderr handle: the harness captures only the print macros.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED Docker test {test} ({SKIP_VAR}=1; {why}) — {n} Docker test(s) skipped so far in {bin}"
            );
            false
        }
        DockerPolicy::Fail(msg) => panic!("{msg}"),
    }
}
