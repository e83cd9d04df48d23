//! Shared pieces of the run tests: the `eval` binary, a fresh demo project per test, the engine
//! check, the static binaries, ledger reading and a label sweep that runs even when a test fails.
#![allow(dead_code)]

pub mod account;
pub mod chromium;
pub mod dsh;
pub mod export_tools;
pub mod forgery;
pub mod freeze_cli;
pub mod grader_controls;
pub mod gvisor;
pub mod hostile;
pub mod import_evocode;
pub mod import_harbor;
pub mod import_icae;
pub mod import_router;
pub mod import_v04;
pub mod import_v04_whole;
pub mod plan_cost;
pub mod real_harness;
pub mod thin_arms;

use eval_evidence::ledger::{Entry, LedgerReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn eval_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_eval"))
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn eval(dir: &Path, args: &[&str]) -> Output {
    Command::new(eval_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .output()
        .unwrap()
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[path = "../../../runtimes/tests/e2e/support/docker_policy.rs"]
pub mod docker_policy;

/// True when a Docker engine answers. Without one the test fails, unless `EVAL_SKIP_DOCKER=1`
/// asks for the skip (then it is printed and counted; see [`docker_policy`]).
///
/// A test that gets `true` shares [`DOCKER_TESTS`] (a read hold) until its thread ends: ordinary
/// Docker tests run side by side, as they did when each test file was its own binary (each
/// works in its own temporary project with a unique identity, so its containers, labels, sweeps,
/// proxy ports and state directories are its own). The few that need the machine to themselves
/// use [`docker_available_alone`].
pub fn docker_available() -> bool {
    if !docker_engine_answers() {
        return false;
    }
    hold_docker_lock(false);
    true
}

/// [`docker_available`] for a test that must not share the machine with another Docker test
/// (a write hold on [`DOCKER_TESTS`]): one that floods the engine or the proxy, asserts a peak
/// memory, or runs the 96-slot demo under progress deadlines.
pub fn docker_available_alone() -> bool {
    if !docker_engine_answers() {
        return false;
    }
    hold_docker_lock(true);
    true
}

/// Docker tests of this binary: shared by ordinary ones, exclusive for the few that need the
/// machine alone (see [`docker_available`]).
pub static DOCKER_TESTS: std::sync::RwLock<()> = std::sync::RwLock::new(());

enum DockerHold {
    Shared(std::sync::RwLockReadGuard<'static, ()>),
    Alone(std::sync::RwLockWriteGuard<'static, ()>),
}

thread_local! {
    /// This thread's hold on [`DOCKER_TESTS`], released when the test's thread ends, passed or
    /// failed (a test that fails while holding it does not stop the others: poison is ignored).
    static DOCKER_HOLD: std::cell::RefCell<Option<DockerHold>> =
        const { std::cell::RefCell::new(None) };
}

fn hold_docker_lock(alone: bool) {
    DOCKER_HOLD.with(|hold| {
        let mut hold = hold.borrow_mut();
        // The read hold is let go before the write hold is taken (upgrading in place would
        // deadlock against itself): a thread that ran an ordinary Docker test before (libtest
        // with one test thread may reuse it) can then run one that needs to be alone.
        if alone && matches!(*hold, Some(DockerHold::Shared(_))) {
            *hold = None;
        }
        match (&*hold, alone) {
            (None, false) => {
                let guard = DOCKER_TESTS.read().unwrap_or_else(|p| p.into_inner());
                *hold = Some(DockerHold::Shared(guard));
            }
            (None, true) => {
                let guard = DOCKER_TESTS.write().unwrap_or_else(|p| p.into_inner());
                *hold = Some(DockerHold::Alone(guard));
            }
            (Some(_), _) => {}
        }
    });
}

fn docker_engine_answers() -> bool {
    let probe = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output();
    let engine = match probe {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`docker version` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run `docker`: {e}")),
    };
    docker_policy::require(engine)
}

/// Builds the static in-container binaries once if they are missing.
pub fn static_binaries() {
    use eval_runtimes::static_bins;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if [
            static_bins::SHIM,
            static_bins::FIXTURE_AGENT,
            static_bins::FIXTURE_GRADER,
        ]
        .iter()
        .all(|b| static_bins::locate(b).is_ok())
        {
            return;
        }
        let st = Command::new(repo_root().join("scripts/build-static.sh"))
            .status()
            .unwrap();
        assert!(st.success(), "scripts/build-static.sh failed");
    });
}

/// `eval init` into a fresh directory, made unique (so its identity is unique too).
pub fn demo_project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new().prefix("evrun").tempdir().unwrap();
    let dir = tmp.path().join("proj");
    let o = eval(tmp.path(), &["init", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let p = dir.join("protocols/demo/protocol.toml");
    let mut s = std::fs::read_to_string(&p).unwrap();
    s.push_str(&format!(
        "\n# test instance {} {nanos}\n",
        std::process::id()
    ));
    std::fs::write(&p, s).unwrap();
    (tmp, dir)
}

pub fn edit(path: &Path, f: impl FnOnce(String) -> String) {
    let s = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, f(s)).unwrap();
}

/// Replaces `from` by `to` in a file, insisting that `from` is there (so a changed template
/// fails the test loudly instead of silently testing nothing).
pub fn replace_in(path: &Path, from: &str, to: &str) {
    edit(path, |s| {
        assert!(
            s.contains(from),
            "{} no longer contains {from:?}",
            path.display()
        );
        s.replace(from, to)
    });
}

pub fn entries(ledger: &Path) -> Vec<Entry> {
    LedgerReader::open(ledger).unwrap().entries().unwrap()
}

pub fn payloads(entries: &[Entry], kind: &str) -> Vec<serde_json::Value> {
    entries
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.payload_json().unwrap())
        .collect()
}

/// Containers carrying `label` (`key=value`).
pub fn containers_with(label: &str) -> Vec<String> {
    let o = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={label}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Removes every container with `label` when dropped.
pub struct Sweep(pub String);

impl Drop for Sweep {
    fn drop(&mut self) {
        let ids = containers_with(&self.0);
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .arg("rm")
                .arg("-f")
                .args(&ids)
                .output();
        }
    }
}

/// Recursively collects every file's bytes under `dir` (for key greps).
pub fn all_bytes(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                all_bytes(&p, out);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push((p, b));
            }
        }
    }
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

pub fn identity_of(dir: &Path) -> String {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("runs/freezes/demo.json")).unwrap())
            .unwrap();
    v["identity"].as_str().unwrap().to_owned()
}

/// A demo project whose matrix keeps one task per suite and one repetition: the same arms,
/// infrastructure slots and outcome paths in 9 statistical + 6 infrastructure slots, for the
/// tests that run it several times.
pub fn small_demo_project() -> (tempfile::TempDir, PathBuf) {
    let (tmp, dir) = demo_project();
    let m = dir.join("matrix/demo.toml");
    for (keep, prefix) in [
        ("demo-simple-1", "demo-simple-"),
        ("demo-icae-1", "demo-icae-"),
        ("demo-evocode-1", "demo-evocode-"),
    ] {
        let keep_line = format!("  \"{keep}\",");
        let task_line = format!("  \"{prefix}");
        edit(&m, |s| {
            assert!(s.contains(&keep_line), "{} changed shape", m.display());
            s.lines()
                .filter(|l| *l == keep_line || !l.starts_with(&task_line))
                .map(|l| format!("{l}\n"))
                .collect()
        });
    }
    replace_in(&m, "repetitions = 2", "repetitions = 1");
    (tmp, dir)
}

/// `eval` with extra environment variables.
pub fn eval_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(eval_bin());
    c.args(args)
        .current_dir(dir)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .env_remove("EVAL_TEST_CRASH_AT");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// One task per suite, one repetition: 9 statistical + the 6 infrastructure slots.
pub fn small_matrix(dir: &Path) {
    edit(&dir.join("matrix/demo.toml"), |s| {
        assert!(s.contains("repetitions = 2"));
        s.lines()
            .filter(|l| {
                let t = l.trim();
                !(t.starts_with("\"demo-")
                    && !t.starts_with("\"demo-simple-1\"")
                    && !t.starts_with("\"demo-icae-1\"")
                    && !t.starts_with("\"demo-evocode-1\""))
            })
            .collect::<Vec<_>>()
            .join("\n")
            .replace("repetitions = 2", "repetitions = 1")
    });
}

/// Outcomes recorded so far (for waiting on a run's progress before crashing or tampering with
/// it); 0 while the ledger does not exist yet.
pub fn count_outcomes(ledger: &Path) -> usize {
    outcomes_mentioning(ledger, "")
}

/// Outcomes recorded so far whose payload mentions `needle`.
pub fn outcomes_mentioning(ledger: &Path, needle: &str) -> usize {
    if !ledger.exists() {
        return 0;
    }
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(ledger, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    conn.query_row(
        "SELECT count(*) FROM entries WHERE kind = 'attempt_outcome' AND instr(CAST(payload AS TEXT), ?1) > 0",
        [needle],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n as usize)
    .unwrap_or(0)
}

/// `eval freeze --protocol demo`, which must succeed; returns the identity and the sweep of its
/// containers (held by the test so they go even when it fails).
pub fn freeze_demo(dir: &Path) -> (String, Sweep) {
    let o = eval(dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));
    let identity = identity_of(dir);
    let sweep = Sweep(format!("eval.identity={identity}"));
    (identity, sweep)
}

/// `eval run --matrix demo --upstream fixture` plus `extra` arguments.
pub fn fixture_run(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["run", "--matrix", "demo", "--upstream", "fixture"];
    args.extend_from_slice(extra);
    eval(dir, &args)
}

/// Serves `app` on a fresh loopback port, on `rt` (which the caller keeps alive for as long as
/// the server is needed); returns the address.
pub fn serve_loopback(rt: &tokio::runtime::Runtime, app: axum::Router) -> std::net::SocketAddr {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// v0.4's real upstream inputs (tasks, grader, plugin packages), never copied into this
/// repository: `EVAL_V04_UPSTREAM`, else `../shared/v04-upstream` beside the repository, else
/// `/work/shared/v04-upstream` (a worktree elsewhere on this machine). Missing: the test fails.
pub fn v04_upstream() -> PathBuf {
    let candidates = std::env::var_os("EVAL_V04_UPSTREAM")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            repo_root().join("../shared/v04-upstream"),
            PathBuf::from("/work/shared/v04-upstream"),
        ]);
    let mut tried = Vec::new();
    for dir in candidates {
        if dir.join("simple-tasks.json").is_file() {
            return dir;
        }
        tried.push(dir.display().to_string());
    }
    panic!("v0.4's upstream inputs are not in any of {tried:?}; set EVAL_V04_UPSTREAM")
}

/// `eval report --matrix MATRIX --format json --out DIR/report.json` of a fixture run, parsed. The
/// fixture upstream's evidence never allows a release, so the exit status is 1 whatever the gates.
pub fn fixture_json_report(proj: &Path, matrix: &str) -> serde_json::Value {
    let out = proj.join("report.json");
    let o = eval(
        proj,
        &[
            "report",
            "--matrix",
            matrix,
            "--format",
            "json",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}
