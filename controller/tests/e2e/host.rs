//! The host around a run: stop signals, what a killed session leaves, the state disk, and
//! other state directories on the same engine (issue 33, items 10, 11, 14). Every wait is for
//! observable state (a ledger entry, a container the engine lists), under a hang guard.

use crate::support::hostile::*;
use crate::support::*;
use std::process::{Child, Command, Stdio};

/// A hang guard only: a run that never reaches the awaited state fails instead of hanging.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(600);

/// Mount points under `dir` (`/proc/self/mountinfo`; the test runs in the host's mount
/// namespace, as the controller does).
fn mounts_under(dir: &std::path::Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .filter(|m| std::path::Path::new(m).starts_with(&dir))
        .collect()
}

/// `eval run` of `p`'s matrix against its upstream, with `extra` arguments.
fn run_command(p: &Project, extra: &[&str]) -> Command {
    let mut c = Command::new(eval_bin());
    c.args(["run", "--matrix", "demo", "--upstream", &p.upstream.url()])
        .args(["--api-key-env", KEY_ENV])
        .args(extra)
        .env(KEY_ENV, &p.key)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .current_dir(&p.dir);
    c
}

/// Freezes `p` and starts `eval run` on it in the background.
fn start_run(p: &Project) -> (Child, String) {
    let o = p.freeze();
    assert!(o.status.success(), "freeze: {}", text(&o));
    let identity = identity_of(&p.dir);
    let child = run_command(p, &[])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (child, identity)
}

/// Waits until the hostile agent is inside its attempt: its model call is in the ledger, its
/// container is running and its filesystem is mounted.
fn until_the_agent_runs(child: &mut Child, p: &Project, identity: &str) {
    let ledger = p.dir.join("runs/demo/ledger.sqlite");
    let t0 = std::time::Instant::now();
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the agent ran"
        );
        // The ledger may be mid-creation: not yet readable is "not yet".
        let called = eval_evidence::ledger::LedgerReader::open(&ledger)
            .and_then(|r| r.entries())
            .is_ok_and(|es| {
                payloads(&es, "model_call")
                    .iter()
                    .any(|c| c["attempt"].as_str().is_some_and(|a| a.contains("hostile")))
            });
        let running = Command::new("docker")
            .args([
                "ps",
                "-q",
                "--filter",
                &format!("label=eval.identity={identity}"),
                "--filter",
                "label=eval.arm=hostile",
                "--filter",
                "status=running",
            ])
            .output()
            .unwrap();
        if called && !running.stdout.is_empty() && !mounts_under(&p.dir).is_empty() {
            return;
        }
        assert!(t0.elapsed() < HANG_GUARD, "the hostile agent never ran");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `eval run` stopped with SIGTERM (what `timeout`, systemd, CI runners and Kubernetes send)
/// or SIGHUP ends as Ctrl-C does: exit 2, no container of the run left running, no attempt
/// filesystem left mounted, the ledger verifies. Before, SIGTERM exited 143 and left the agent
/// running and its disk mounted.
#[test]
fn sigterm_and_sighup_stop_a_run_as_ctrl_c_does_leaving_no_container_or_mount() {
    if !docker_available() {
        return;
    }
    static_binaries();
    for signal in ["TERM", "HUP"] {
        let p = Project::new("okcall\n$BB sleep 600\nexit 0\n", &Cfg::default());
        let (mut child, identity) = start_run(&p);
        let _sweep = Sweep(format!("eval.identity={identity}"));
        until_the_agent_runs(&mut child, &p, &identity);
        let st = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(2), "SIG{signal}: {status:?}");
        assert!(
            containers_with(&format!("eval.identity={identity}")).is_empty(),
            "SIG{signal}: containers left"
        );
        assert_eq!(mounts_under(&p.dir), Vec::<String>::new(), "SIG{signal}");
        let ledger = p.dir.join("runs/demo/ledger.sqlite");
        let o = eval(&p.dir, &["ledger", "verify", ledger.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        let finished = payloads(&entries(&ledger), "run_finished");
        assert!(
            finished.last().unwrap()["stopped"].as_str().is_some(),
            "{finished:?}"
        );
    }
}

/// A SIGKILLed session leaves its agent running and its disk mounted; `eval gc` removes both
/// (container, mount, loop device), and only what this state directory's sessions started
/// (`eval.owner=<state id>/<identity>`): a container of the same identity that another state
/// directory started (its own state id) is not gc's to judge and stays. Before, gc swept every
/// container of the identity engine-wide.
#[test]
fn after_a_sigkill_gc_removes_the_sessions_leftovers_and_only_this_state_directorys() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let p = Project::new("okcall\n$BB sleep 600\nexit 0\n", &Cfg::default());
    let (mut child, identity) = start_run(&p);
    let _sweep = Sweep(format!("eval.identity={identity}"));
    until_the_agent_runs(&mut child, &p, &identity);
    let st = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let _ = child.wait();
    assert!(!containers_with(&format!("eval.identity={identity}")).is_empty());
    assert!(!mounts_under(&p.dir).is_empty());

    // Another state directory's container of the same identity, and an image nothing of this
    // state's freezes names (another state directory's, say).
    let state_id = std::fs::read_to_string(p.dir.join("runs/state-id")).unwrap();
    let state_id = state_id.trim();
    let foreign_owner = format!("eval.owner={}/{identity}", "0".repeat(32));
    let own_owner = format!("eval.owner={state_id}/{identity}");
    let own = containers_with(&own_owner);
    let own = own
        .first()
        .expect("the killed session's container carries this state's owner label");
    let image = Command::new("docker")
        .args(["inspect", "--format", "{{.Image}}", own])
        .output()
        .unwrap();
    let image = String::from_utf8_lossy(&image.stdout).trim().to_owned();
    let foreign = Command::new("docker")
        .args([
            "create",
            "--label",
            &format!("eval.identity={identity}"),
            "--label",
            &foreign_owner,
            &image,
            "x",
        ])
        .output()
        .unwrap();
    assert!(foreign.status.success(), "{}", text(&foreign));
    let foreign = String::from_utf8_lossy(&foreign.stdout).trim().to_owned();

    let o = eval(&p.dir, &["gc"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(containers_with(&own_owner).is_empty(), "{}", text(&o));
    assert_eq!(mounts_under(&p.dir), Vec::<String>::new());
    assert!(
        eval_controller_loops_under(&p.dir.join("runs/demo/attempts")).is_empty(),
        "loop devices left"
    );
    assert_eq!(
        containers_with(&foreign_owner),
        vec![foreign[..12].to_owned()],
        "gc removed another state directory's container: {}",
        text(&o)
    );
}

/// Loop devices backed by a file under `dir` (`/sys/block/loop*/loop/backing_file`).
fn eval_controller_loops_under(dir: &std::path::Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
        if let Ok(b) = std::fs::read_to_string(e.path().join("loop/backing_file"))
            && std::path::Path::new(b.trim_end().trim_end_matches(" (deleted)")).starts_with(&dir)
        {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

/// Unmounts the test's tmpfs when dropped.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A state directory on a file system too small for the run's attempts at its concurrency
/// (`concurrency × (workspace + archive headroom)` plus the reserve) is refused before anything
/// is recorded: exit 2 naming the state directory and what it needs, no ledger. Before, every
/// attempt failed its preallocation as `filesystem_capacity`, was retried until out of
/// attempts, and the run ended "complete", exit 0. The file system is a size-limited tmpfs of
/// the test's own.
#[test]
fn a_state_disk_too_small_for_the_concurrency_is_refused_before_anything_is_recorded() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let p = Project::new("okcall\nmetrics\nexit 0\n", &Cfg::default());
    let state = p.tmp.path().join("small-state");
    std::fs::create_dir(&state).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256m", "tmpfs"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "mounting a tmpfs needs root, as eval run does"
    );
    let _tmpfs = Tmpfs(state.clone());
    let s = state.to_str().unwrap();
    let o = eval(&p.dir, &["freeze", "--protocol", "demo", "--state", s]);
    assert!(o.status.success(), "freeze: {}", text(&o));
    let o = run_command(&p, &["--state", s]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains(s) && t.contains("--concurrency"), "{t}");
    assert!(!state.join("demo").exists(), "something was recorded");
    assert!(p.upstream.seen().is_empty(), "the upstream was called");
}
