//! Agent containers under gVisor (`isolation = "gvisor"`): the protocol's agents run inside
//! gVisor's own kernel through the real `eval run`, and complete. Needs the engine's `runsc`
//! runtime (`scripts/ensure-docker.sh` registers it): without it these tests fail, never skip.
//! The whole hostile suite also runs under gVisor when `EVAL_TEST_ISOLATION=gvisor`
//! (`scripts/test.sh`'s second pass; `support::gvisor`).

use crate::support::hostile::*;
use crate::support::*;

/// An agent that makes model calls through the shim's relay, writes its metrics and exits 0
/// completes under gVisor, for both arms, and ran inside gVisor's kernel, not the host's. With the
/// arm's own `pids` limit on the sandbox's host cgroup (before `policy::gvisor_host_pids`) the
/// Sentry could not clone its next stub and every such attempt ended `agent_error`, status 2.
#[test]
fn agents_under_gvisor_run_in_its_kernel_and_complete() {
    if !docker_available() {
        return;
    }
    static_binaries();
    crate::support::gvisor::require_runsc();
    let cfg = Cfg {
        gvisor: true,
        ..Cfg::default()
    };
    let p = Project::new(
        "echo \"kernel: $(cat /proc/version)\"\nokcall\nokcall\nokcall\nmetrics\nexit 0\n",
        &cfg,
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "completed", "{o}\n{}", r.text);
    assert_eq!(o["model_turns"], 3, "{o}");
    let native = r.native_outcomes();
    assert_eq!(native.len(), 1, "{native:?}");
    assert_eq!(native[0]["outcome"], "completed", "{}", native[0]);
    let log = String::from_utf8_lossy(
        &artifact(&p.dir, &o, "agent_log").expect("the agent's log is stored"),
    )
    .into_owned();
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("kernel: "))
        .unwrap_or_else(|| panic!("no kernel line in the agent's log: {log}"));
    let host = std::fs::read_to_string("/proc/version").unwrap();
    assert_ne!(line.trim(), host.trim(), "the agent saw the host's kernel");
    p.assert_no_leak(&r, &[]);
}

/// A process flood under gVisor is bounded by the sandbox's host cgroup
/// (`policy::gvisor_host_pids`): it ends the agent's own sandbox or its forks fail, an
/// `agent_error` of that attempt, never an infrastructure fault or a redraw, and the sibling arm
/// completes.
#[test]
fn a_process_flood_under_gvisor_ends_only_its_own_attempt() {
    if !docker_available_alone() {
        return;
    }
    static_binaries();
    crate::support::gvisor::require_runsc();
    let cfg = Cfg {
        gvisor: true,
        ..Cfg::default()
    };
    let n = eval_runtimes::policy::gvisor_host_pids(cfg.pids as i64) + 100;
    let p = Project::new(
        &format!(
            "okcall\ni=0\nwhile [ $i -lt {n} ]; do $BB sleep 600 & i=$((i+1)); done 2> \"$W/err\"\necho \"STARTED $i: $($BB head -c 200 \"$W/err\")\"\nexit 1\n"
        ),
        &cfg,
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "agent_error", "{o}\n{}", r.text);
    // Not every process started: the limit held (the sandbox ended, or forks failed).
    let log = String::from_utf8_lossy(&artifact(&p.dir, &o, "agent_log").unwrap_or_default())
        .into_owned();
    assert!(!log.contains(&format!("STARTED {n}:")), "{log}");
    let native = r.native_outcomes();
    assert_eq!(native.len(), 1, "{native:?}");
    assert_eq!(native[0]["outcome"], "completed", "{}", native[0]);
    p.assert_no_leak(&r, &[]);
}

/// `scripts/ensure-docker.sh` registers eval's own runtime (`policy::GVISOR_RUNTIME`,
/// `eval-runsc`) and leaves the machine's `runsc` entry, with the arguments another gVisor user
/// gave it, and every other setting as they were; a second run changes nothing. Before, it
/// rewrote `runtimes.runsc` for every user of the engine. The edit is the script's own
/// (`--write-entry FILE`), on a daemon.json of the test's.
#[test]
fn ensure_docker_registers_evals_own_runtime_and_leaves_the_machines_runsc() {
    let want = eval_runtimes::policy::GVISOR_RUNTIME;
    assert_ne!(
        want, "runsc",
        "eval must not ask for the machine's shared runsc"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("daemon.json");
    let theirs =
        serde_json::json!({"path": "/opt/gvisor/runsc", "runtimeArgs": ["--platform=kvm"]});
    let before = serde_json::json!({
        "debug": true,
        "default-runtime": "runc",
        "runtimes": {"runsc": theirs, "kata": {"path": "/usr/bin/kata-runtime"}},
    });
    std::fs::write(&file, serde_json::to_vec_pretty(&before).unwrap()).unwrap();
    let script = repo_root().join("scripts/ensure-docker.sh");
    let write = || {
        let o = std::process::Command::new("bash")
            .arg(&script)
            .arg("--write-entry")
            .arg(&file)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
    };
    write();
    let after: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(after["runtimes"]["runsc"], theirs, "{after}");
    assert_eq!(after["runtimes"]["kata"], before["runtimes"]["kata"]);
    assert_eq!(after["debug"], true);
    assert_eq!(after["default-runtime"], "runc");
    assert_eq!(
        after["runtimes"][want],
        serde_json::json!({"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--host-uds=open"]}),
        "{after}"
    );
    let once = std::fs::read(&file).unwrap();
    write();
    assert_eq!(
        std::fs::read(&file).unwrap(),
        once,
        "a second run rewrote the file"
    );
}
