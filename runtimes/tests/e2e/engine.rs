//! The runtime against the real Docker engine: policy, fixture agent and grader end to end,
//! escape attempts, attestation, timeout, cleanup.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::*;
use eval_core::fault::FaultCode;
use eval_runtimes::definition::paths;
use eval_runtimes::image::{build, image_id};
use eval_runtimes::policy::{self, RoleMounts};
use eval_runtimes::{Runtime, RuntimeError, WaitOutcome, create_checked, run_to_end, shim_fault};

const NATIVE: &str = r#"
name = "native"
skill = 1.0
stream = true
clarify = "critical"
"#;

fn control(expected: BTreeMap<String, Option<String>>) -> Arc<Control> {
    Arc::new(Control {
        expected,
        answers: BTreeMap::from([("Which port?".to_owned(), "8443\n".to_owned())]),
        seen: Seen::default(),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn policy_is_exactly_what_inspect_reports() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let loaded = fixture_def();
    let def = &loaded.def;
    let dirs = attempt_dirs(def);
    let spec = arm_spec(&sweep, dirs.root.path(), NATIVE, b"plugin v1\n");
    let image = rt.ensure_image(&spec).await.unwrap();
    sweep.image(&image);
    let facts = facts(&sweep, "attempt-policy");
    let mounts = agent_mounts(&dirs);
    let cspec = policy::container_spec(
        def,
        &image,
        &rt.inspect_image(&image).await.unwrap(),
        &facts,
        &mounts,
    )
    .unwrap();
    let key = b"sk-test-key-that-must-never-appear";
    let id = create_checked(&rt, &cspec, &[key]).await.unwrap();
    let i = rt.inspect(&id).await.unwrap();
    let host = i.host_config.clone().unwrap();
    let config = i.config.clone().unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert!(host.cap_add.unwrap_or_default().is_empty());
    assert_eq!(
        host.security_opt,
        Some(vec!["no-new-privileges".to_owned()])
    );
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_ne!(host.privileged, Some(true));
    assert_eq!(host.memory, Some(256 * 1024 * 1024));
    assert_eq!(host.memory_swap, Some(256 * 1024 * 1024));
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    assert_eq!(host.pids_limit, Some(64));
    let tmpfs: BTreeMap<_, _> = host.tmpfs.unwrap().into_iter().collect();
    assert_eq!(
        tmpfs.keys().cloned().collect::<Vec<_>>(),
        vec!["/home/agent".to_owned(), "/tmp".to_owned()]
    );
    assert_eq!(config.user.as_deref(), Some("65532:65532"));
    let mut env = config.env.unwrap();
    env.sort();
    assert_eq!(
        env,
        vec![
            "HOME=/home/agent",
            "OPENAI_API_KEY=eval-no-key",
            "OPENAI_BASE_URL=http://127.0.0.1:8080/v1",
            "PATH=/usr/local/bin:/usr/bin:/bin",
        ]
    );
    let labels = config.labels.unwrap();
    for (k, v) in [
        ("eval.protocol", "rt-test"),
        ("eval.identity", "sha256:0000"),
        ("eval.arm", "arm-a"),
        ("eval.attempt", "attempt-policy"),
        ("eval.role", "agent"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    let mut mounts: Vec<(String, String, bool)> = i
        .mounts
        .unwrap()
        .into_iter()
        .map(|m| (m.destination.unwrap(), m.source.unwrap(), m.rw.unwrap()))
        .collect();
    mounts.sort();
    let socket_dir = dirs.socket.parent().unwrap().display().to_string();
    assert_eq!(
        mounts,
        vec![
            (
                paths::SHIM.to_owned(),
                eval_runtimes::static_bins::locate("eval-shim")
                    .unwrap()
                    .display()
                    .to_string(),
                false
            ),
            (paths::SOCKET_DIR.to_owned(), socket_dir, false),
            (
                paths::PROMPT.to_owned(),
                dirs.prompt.display().to_string(),
                false
            ),
            (
                paths::WORKSPACE.to_owned(),
                dirs.workspace.display().to_string(),
                true
            ),
        ]
    );
    assert_eq!(i.image.as_deref(), Some(image.0.as_str()));
    rt.remove(&id).await.unwrap();

    // A caller that leaks the key into the environment is refused before start, the container
    // is removed, and the error does not show the key.
    let mut leaky = cspec.clone();
    let leaked = format!("LEAK={}", std::str::from_utf8(key).unwrap());
    leaky.body.env.as_mut().unwrap().push(leaked);
    let err = create_checked(&rt, &leaky, &[key]).await.unwrap_err();
    assert_eq!(err.fault(), Some(FaultCode::PolicyViolation));
    assert!(!err.to_string().contains("sk-test-key"), "{err}");
    // An extra mount is refused too.
    let mut extra = cspec.clone();
    extra
        .body
        .host_config
        .as_mut()
        .unwrap()
        .mounts
        .as_mut()
        .unwrap()
        .push(bollard::models::Mount {
            target: Some("/hidden".into()),
            source: Some(dirs.hidden.display().to_string()),
            typ: Some(bollard::models::MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    let err = create_checked(&rt, &extra, &[key]).await.unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::PolicyViolation {
                field: "mounts",
                ..
            }
        ),
        "{err}"
    );
    // A network is refused.
    let mut net = cspec.clone();
    net.body.host_config.as_mut().unwrap().network_mode = Some("bridge".into());
    net.body.network_disabled = None;
    let err = create_checked(&rt, &net, &[key]).await.unwrap_err();
    assert_eq!(err.fault(), Some(FaultCode::PolicyViolation), "{err}");
    // Nothing of this test is left.
    assert_eq!(rt.sweep(&sweep.filter()).await.unwrap(), 0);
}

async fn run_agent(
    rt: &eval_runtimes::DockerRuntime,
    sweep: &Sweep,
    profile: &str,
    candidate: &[u8],
    timeout: Duration,
    tamper: Option<&dyn Fn(&std::path::Path)>,
) -> (eval_runtimes::RunEnd, AttemptDirs, Arc<Control>) {
    let loaded = fixture_def();
    let def = &loaded.def;
    let dirs = attempt_dirs(def);
    let spec = arm_spec(sweep, dirs.root.path(), profile, candidate);
    // "Freeze": the digests the shim must report, computed without an engine.
    let frozen = eval_runtimes::image::expected_attestation(&spec).unwrap();
    if let Some(t) = tamper {
        t(dirs.root.path());
    }
    let image = rt.ensure_image(&spec).await.unwrap();
    sweep.image(&image);
    let c = control(frozen);
    let server = serve_socket(&dirs.socket, def, c.clone());
    let cspec = policy::container_spec(
        def,
        &image,
        &rt.inspect_image(&image).await.unwrap(),
        &facts(sweep, &unique("attempt")),
        &agent_mounts(&dirs),
    )
    .unwrap();
    let end = run_to_end(rt, &cspec, &[b"sk-never"], timeout, 64 * 1024)
        .await
        .unwrap();
    server.abort();
    (end, dirs, c)
}

#[tokio::test(flavor = "multi_thread")]
async fn fixture_agent_and_grader_end_to_end() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let (end, dirs, c) =
        run_agent(&rt, &sweep, NATIVE, b"v1\n", Duration::from_secs(60), None).await;
    let logs = String::from_utf8_lossy(&end.logs).into_owned();
    assert_eq!(end.outcome, WaitOutcome::Exited { code: 0 }, "{logs}");
    assert_eq!(c.seen.attest_calls.load(Ordering::SeqCst), 1);
    let attest = c.seen.last_attest.lock().unwrap().clone().unwrap();
    assert_eq!(attest["paths"].as_array().unwrap().len(), 3);
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("src/world.txt")).unwrap(),
        "world\n"
    );
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("port.txt")).unwrap(),
        "8443\n"
    );
    // The agent's own accounting equals what the model side served.
    let m = read_metrics(&dirs.workspace).unwrap();
    assert!(m.finished);
    assert_eq!(m.model_turns, c.seen.chat_calls.load(Ordering::SeqCst));
    assert_eq!(m.model_turns, 2);
    assert_eq!(m.prompt_tokens, c.seen.prompt_tokens.load(Ordering::SeqCst));
    assert_eq!(
        m.completion_tokens,
        c.seen.completion_tokens.load(Ordering::SeqCst)
    );
    assert_eq!(m.clarification_questions, 1);

    // Grade the final workspace in a second container: workspace read-only, hidden files, /out.
    let loaded = fixture_def();
    let image = image_id(&arm_spec(&sweep, dirs.root.path(), NATIVE, b"v1\n")).unwrap();
    let gspec = policy::container_spec(
        &loaded.def,
        &image,
        &rt.inspect_image(&image).await.unwrap(),
        &facts(&sweep, "grade"),
        &RoleMounts::Grader {
            oracle: None,
            workspace: dirs.workspace.clone(),
            hidden: dirs.hidden.clone(),
            out: dirs.out.clone(),
        },
    )
    .unwrap();
    let g = run_to_end(&rt, &gspec, &[], Duration::from_secs(60), 16 * 1024)
        .await
        .unwrap();
    assert_eq!(
        g.outcome,
        WaitOutcome::Exited { code: 0 },
        "{}",
        String::from_utf8_lossy(&g.logs)
    );
    let score: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dirs.out.join("score.json")).unwrap()).unwrap();
    assert_eq!(score["metrics"]["score"], 100.0);
    assert_eq!(score["metrics"]["hidden_score"], 100.0);
    assert_eq!(score["metrics"]["critical_missed"], 0.0);
    assert_eq!(score["metrics"]["regressions"], 0.0);
    assert_eq!(rt.sweep(&sweep.filter()).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn weaker_arm_scores_lower_without_streaming() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let weak = "name = \"weak\"\nskill = 0.0\nstream = false\nedits_per_turn = 1\n";
    let (end, dirs, c) = run_agent(&rt, &sweep, weak, b"v1\n", Duration::from_secs(60), None).await;
    assert_eq!(
        end.outcome,
        WaitOutcome::Exited { code: 0 },
        "{}",
        String::from_utf8_lossy(&end.logs)
    );
    // skill 0: r1 written wrong, r2 not written, r3 guessed (never asked).
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("hello.txt")).unwrap(),
        "helo\n"
    );
    assert!(!dirs.workspace.join("src/world.txt").exists());
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("port.txt")).unwrap(),
        "0\n"
    );
    let m = read_metrics(&dirs.workspace).unwrap();
    assert_eq!(m.model_turns, 3);
    assert_eq!(m.clarification_questions, 0);
    assert_eq!(
        m.total_tokens,
        c.seen.prompt_tokens.load(Ordering::SeqCst)
            + c.seen.completion_tokens.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn adversarial_agent_cannot_escape() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    // The host's "upstream": a real listener on the host's loopback.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    assert_ne!(port, 8080);
    // Another attempt's files on the host.
    let other = attempt_dirs(&fixture_def().def);
    std::fs::write(other.workspace.join("secret.txt"), "other attempt\n").unwrap();
    let other_ws = other.workspace.join("secret.txt").display().to_string();
    let other_sock = other.socket.display().to_string();
    let key_name = "EVAL_TEST_UPSTREAM_KEY";
    let profile = format!(
        r#"
name = "adversary"
skill = 1.0
[adversarial]
read_env = ["{key_name}", "OPENAI_API_KEY_REAL", "DEEPSEEK_API_KEY"]
connect_tcp = [{port}]
read_paths = ["/hidden/checks.toml", "{other_ws}", "{other_sock}"]
write_paths = ["/etc/evil", "/evil", "/opt/eval/profile.toml", "/usr/local/bin/x", "/task/x", "/run/eval/x", "/tmp/allowed", "/workspace/allowed"]
list_interfaces = true
"#
    );
    let (end, dirs, _c) = run_agent(
        &rt,
        &sweep,
        &profile,
        b"v1\n",
        Duration::from_secs(60),
        None,
    )
    .await;
    let logs = String::from_utf8_lossy(&end.logs).into_owned();
    let m = read_metrics(&dirs.workspace).unwrap_or_else(|| panic!("no metrics; logs: {logs}"));
    let probe = |name: &str| {
        m.probes
            .iter()
            .find(|p| p.probe == name)
            .unwrap_or_else(|| panic!("no probe {name}: {:?}", m.probes))
            .clone()
    };
    for p in &m.probes {
        let allowed =
            p.probe == "write_path:/tmp/allowed" || p.probe == "write_path:/workspace/allowed";
        if allowed {
            assert!(p.ok, "control probe must succeed: {p:?}");
        } else {
            assert!(!p.ok, "escape succeeded: {p:?}");
        }
    }
    assert_eq!(
        probe("interfaces").detail,
        "lo",
        "the netns must hold only lo"
    );
    assert_eq!(
        probe(&format!("connect_tcp:127.0.0.1:{port}")).detail,
        "connection refused"
    );
    assert!(!probe("env_names").detail.contains("KEY_REAL"));
    assert!(m.probes.len() >= 16, "{:?}", m.probes);
    drop(upstream);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_changed_byte_of_the_candidate_stops_the_attempt_before_the_agent() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let tamper = |root: &std::path::Path| {
        let f = root.join("candidate/plugin.js");
        let mut b = std::fs::read(&f).unwrap();
        b[0] ^= 1;
        std::fs::write(&f, b).unwrap();
    };
    let (end, dirs, c) = run_agent(
        &rt,
        &sweep,
        NATIVE,
        b"plugin v1\n",
        Duration::from_secs(60),
        Some(&tamper),
    )
    .await;
    let code = match end.outcome {
        WaitOutcome::Exited { code } => code,
        other => panic!("{other:?}"),
    };
    assert_eq!(shim_fault(code), Some(FaultCode::AttestationMismatch));
    assert_eq!(c.seen.attest_calls.load(Ordering::SeqCst), 1);
    assert_eq!(c.seen.chat_calls.load(Ordering::SeqCst), 0, "the agent ran");
    assert!(read_metrics(&dirs.workspace).is_none(), "the agent ran");
    // Exactly the candidate's digest differs.
    let attest = c.seen.last_attest.lock().unwrap().clone().unwrap();
    let reported: BTreeMap<String, String> = attest["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["path"].as_str().unwrap().to_owned(),
                p["digest"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let differing: Vec<_> = reported
        .iter()
        .filter(|(p, d)| c.expected.get(*p).cloned().flatten().as_deref() != Some(d.as_str()))
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(differing, vec!["/opt/eval/candidate".to_owned()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_past_its_timeout_is_killed_and_removed() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let sleeper = "name = \"sleeper\"\n[adversarial]\nsleep_secs = 120\n";
    let (end, _dirs, c) =
        run_agent(&rt, &sweep, sleeper, b"v1\n", Duration::from_secs(3), None).await;
    assert_eq!(end.outcome, WaitOutcome::TimedOut);
    // Killed before the sleeper's own 120 s would have ended it: that line, not a speed guess.
    assert!(end.elapsed < Duration::from_secs(120), "{:?}", end.elapsed);
    assert_eq!(c.seen.chat_calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        rt.sweep(&sweep.filter()).await.unwrap(),
        0,
        "container left behind"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn image_ids_are_pure_and_loading_is_skipped_when_present() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let dir = tempfile::tempdir().unwrap();
    let spec = arm_spec(&sweep, dir.path(), NATIVE, b"v1\n");
    let a = image_id(&spec).unwrap();
    let b = build(&spec).unwrap();
    assert_eq!(a, b.id);
    assert_eq!(
        b.archive().unwrap(),
        build(&spec).unwrap().archive().unwrap()
    );
    let loaded = rt.ensure_image(&spec).await.unwrap();
    sweep.image(&loaded);
    assert_eq!(loaded, a, "the engine's id is the computed one");
    let t = std::time::Instant::now();
    assert_eq!(rt.ensure_image(&spec).await.unwrap(), a);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "second load not skipped"
    );
    // Another profile byte, another id.
    let other = arm_spec(&sweep, dir.path(), &format!("{NATIVE}\n"), b"v1\n");
    let b = rt.ensure_image(&other).await.unwrap();
    sweep.image(&b);
    assert_ne!(b, a);
    // Pruning this test's images keeps what is asked for and removes the rest.
    assert_eq!(
        rt.prune_images(&sweep.filter(), std::slice::from_ref(&a))
            .await
            .unwrap(),
        1
    );
    assert!(rt.has_image(&a).await.unwrap());
    assert!(!rt.has_image(&b).await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn no_engine_is_a_clear_typed_error() {
    let err = eval_runtimes::DockerRuntime::connect_to("unix:///nonexistent/docker.sock")
        .await
        .unwrap_err();
    assert_eq!(err.fault(), Some(FaultCode::ContainerRuntimeFailure));
    let msg = err.to_string();
    assert!(
        msg.contains("/nonexistent/docker.sock") && msg.contains("no Docker engine"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn api_is_negotiated_down_to_the_engine() {
    let Some(rt) = engine().await else { return };
    let v = rt.api_version();
    let server = rt.docker().version().await.unwrap().api_version.unwrap();
    assert_eq!(v, server, "client speaks the engine's version");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shim_forwards_sigterm_to_the_harness() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let loaded = fixture_def();
    let def = &loaded.def;
    let dirs = attempt_dirs(def);
    let sleeper = "name = \"sleeper\"\n[adversarial]\nsleep_secs = 120\n";
    let spec = arm_spec(&sweep, dirs.root.path(), sleeper, b"v1\n");
    let c = control(eval_runtimes::image::expected_attestation(&spec).unwrap());
    let image = rt.ensure_image(&spec).await.unwrap();
    sweep.image(&image);
    let server = serve_socket(&dirs.socket, def, c.clone());
    let cspec = policy::container_spec(
        def,
        &image,
        &rt.inspect_image(&image).await.unwrap(),
        &facts(&sweep, "sigterm"),
        &agent_mounts(&dirs),
    )
    .unwrap();
    let id = create_checked(&rt, &cspec, &[]).await.unwrap();
    rt.start(&id).await.unwrap();
    let t = std::time::Instant::now();
    while c.seen.attest_calls.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let opts = bollard::query_parameters::KillContainerOptionsBuilder::new()
        .signal("SIGTERM")
        .build();
    rt.docker().kill_container(&id.0, Some(opts)).await.unwrap();
    let out = rt.wait(&id, Duration::from_secs(10)).await.unwrap();
    rt.remove(&id).await.unwrap();
    server.abort();
    // 128 + SIGTERM: the harness died of the forwarded signal; without forwarding the shim
    // (PID 1) would outlive it until the wait timed out.
    assert_eq!(out, WaitOutcome::Exited { code: 143 });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_test_leaves_no_container_behind() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let (tx, rx) = std::sync::mpsc::channel();
    let failed = std::thread::spawn(move || {
        let local = tokio::runtime::Runtime::new().unwrap();
        local.block_on(async {
            let rt = eval_runtimes::DockerRuntime::connect().await.unwrap();
            let sweep = Sweep::new();
            tx.send(sweep.filter()).unwrap();
            let loaded = fixture_def();
            let dirs = attempt_dirs(&loaded.def);
            let spec = arm_spec(&sweep, dirs.root.path(), NATIVE, b"v1\n");
            let image = rt.ensure_image(&spec).await.unwrap();
            sweep.image(&image);
            let cspec = policy::container_spec(
                &loaded.def,
                &image,
                &rt.inspect_image(&image).await.unwrap(),
                &facts(&sweep, "doomed"),
                &agent_mounts(&dirs),
            )
            .unwrap();
            let id = create_checked(&rt, &cspec, &[]).await.unwrap();
            tx.send(id.0.clone()).unwrap();
            panic!("a test failing with a container still there");
        })
    })
    .join();
    assert!(failed.is_err(), "the doomed test must have panicked");
    let filter = rx.recv().unwrap();
    let id = rx.recv().unwrap();
    let gone = rt.inspect(&eval_runtimes::ContainerId(id)).await;
    assert!(
        matches!(gone, Err(RuntimeError::NoSuchContainer { .. })),
        "{gone:?}"
    );
    assert_eq!(rt.sweep(&filter).await.unwrap(), 0);
}

#[test]
fn docker_policy_fails_without_an_engine_unless_skipping_is_asked_for() {
    use crate::support::docker_policy::{DockerPolicy, decide};
    let down = || Err("connection refused".to_owned());
    // An engine that answers always runs the test, whatever the variable says.
    assert_eq!(decide(Ok(()), None), DockerPolicy::Run);
    assert_eq!(decide(Ok(()), Some("1")), DockerPolicy::Run);
    // No engine and no explicit request: the test fails, naming the way out.
    match decide(down(), None) {
        DockerPolicy::Fail(msg) => {
            assert!(msg.contains("connection refused"), "{msg}");
            assert!(msg.contains("EVAL_SKIP_DOCKER=1"), "{msg}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    // Only the exact opt-in skips; anything else still fails.
    assert_eq!(
        decide(down(), Some("1")),
        DockerPolicy::Skip("connection refused".into())
    );
    for v in ["0", "", "yes", "true"] {
        assert!(
            matches!(decide(down(), Some(v)), DockerPolicy::Fail(_)),
            "{v:?} must not skip"
        );
    }
}

/// A round's freeze lists the attempt's running containers, then pauses each: one that ends in
/// between (the engine answers 409 "is not running") is frozen as far as the round cares, never
/// an engine fault that fails the round (`pause_listed`). The container's end is awaited from
/// the engine (`docker wait`), not timed.
#[tokio::test(flavor = "multi_thread")]
async fn a_container_ending_between_listing_and_pausing_counts_as_frozen() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let dir = tempfile::tempdir().unwrap();
    let image = rt
        .ensure_image(&arm_spec(&sweep, dir.path(), NATIVE, b"v1\n"))
        .await
        .unwrap();
    sweep.image(&image);
    let docker = |args: &[&str]| {
        let o = std::process::Command::new("docker")
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    let filter = sweep.filter();
    let id = docker(&[
        "run",
        "-d",
        "--network",
        "none",
        "--label",
        &filter,
        "--entrypoint",
        "/bin/busybox",
        &image.0,
        "sleep",
        "600",
    ]);
    // The listing the freeze takes: the container is running.
    let listed = docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label={filter}"),
        "--filter",
        "status=running",
    ]);
    assert_eq!(listed, id);
    // It ends before the pause reaches it.
    docker(&["kill", &id]);
    docker(&["wait", &id]);
    let ids = vec![id.clone()];
    assert_eq!(rt.pause_listed(&ids, true).await.unwrap(), 1);
    assert_eq!(rt.pause_listed(&ids, false).await.unwrap(), 1);
    // Gone altogether (404) is the same.
    docker(&["rm", "-f", &id]);
    assert_eq!(rt.pause_listed(&ids, true).await.unwrap(), 1);
}
