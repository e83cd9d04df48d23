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
