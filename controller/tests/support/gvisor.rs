//! gVisor on the test engine: whether the hostile suite runs under it (`EVAL_TEST_ISOLATION`,
//! set by `scripts/test.sh` for its second pass) and the check that the engine can give it.
//! A test that needs `runsc` fails without it, naming the way out; it never skips.

use std::process::Command;

/// The variable that runs every hostile-suite project under `isolation = "gvisor"`.
pub const ISOLATION_ENV: &str = "EVAL_TEST_ISOLATION";

/// `EVAL_TEST_ISOLATION`: unset, empty or `runc` → false (the engine's default runtime);
/// `gvisor` → true. Any other value fails the test naming it (a typo must not silently run the
/// suite under runc a second time).
pub fn suite_under_gvisor() -> bool {
    match std::env::var(ISOLATION_ENV) {
        Err(std::env::VarError::NotPresent) => false,
        Ok(v) if v.is_empty() || v == "runc" => false,
        Ok(v) if v == "gvisor" => true,
        other => panic!("{ISOLATION_ENV}={other:?}: expected unset, `runc` or `gvisor`"),
    }
}

/// The runtimes the engine lists (`docker info` `Runtimes`).
pub fn engine_runtimes() -> Vec<String> {
    let out = Command::new("docker")
        .args(["info", "--format", "{{json .Runtimes}}"])
        .output()
        .expect("docker info runs");
    assert!(
        out.status.success(),
        "docker info: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("docker info's Runtimes is JSON");
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Fails unless the engine has the `runsc` runtime the policy names
/// (`eval_runtimes::policy::GVISOR_RUNTIME`).
pub fn require_runsc() {
    let want = eval_runtimes::policy::GVISOR_RUNTIME;
    let have = engine_runtimes();
    assert!(
        have.iter().any(|r| r == want),
        "this test needs gVisor: the Docker engine has no `{want}` runtime (it lists {have:?}); \
         run scripts/ensure-docker.sh as root (installs Debian's runsc and registers it with \
         dockerd)"
    );
}
