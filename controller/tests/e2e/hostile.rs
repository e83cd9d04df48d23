//! The hostile-arm suite (issue 11): an arm whose harness is a busybox shell script acting as a
//! hostile agent, run through the real `eval run` against a scripted upstream whose key the test
//! knows, with a host canary file of random contents. Each test is one attack and asserts the
//! secure result: no secret in any artifact, ledger entry, report or output; an agent-caused
//! failure is an outcome (never an infrastructure fault, never rerun); the attestation cannot
//! be flipped; a flooding agent does not change its sibling's outcome; budgets hold; the
//! controller never hangs. Runs are serialised inside this binary (see `support::hostile`).

use crate::support::hostile::*;
use crate::support::*;
use std::sync::{Arc, Mutex};

/// The shared Docker policy: without an engine the test fails, unless `EVAL_SKIP_DOCKER=1`
/// asks for a (printed, counted) skip.
macro_rules! need_docker {
    () => {
        if !docker_available() {
            return;
        }
        static_binaries();
    };
}

/// [`need_docker!`] for an attack that must have the machine alone (a flood, a memory peak):
/// no other Docker test of this binary runs beside it (see `support::docker_available_alone`).
macro_rules! need_docker_alone {
    () => {
        if !docker_available_alone() {
            return;
        }
        static_binaries();
    };
}

// ---------------------------------------------------------------------------------------------
// 0. The control: the harness itself can pass, so a failure below is the attack's.

#[test]
fn a_well_behaved_script_completes_and_leaks_nothing() {
    need_docker!();
    let p = Project::new("okcall\nmetrics\nexit 0\n", &Cfg::default());
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "completed", "{o}");
    assert_eq!(o["model_turns"], 1, "{o}");
    assert_eq!(r.native_outcomes()[0]["outcome"], "completed");
    p.assert_no_leak(&r, &[]);
}

// ---------------------------------------------------------------------------------------------
// 1. What the agent leaves at `metrics_path`.

/// Runs a script that replaces the metrics file, then makes one honest call and exits 0.
fn metrics_attack(setup: &str) -> (Project, RunResult) {
    let p = Project::new(
        &format!("mkdir -p \"$W/.eval-agent\"\n{setup}\nokcall\nexit 0\n"),
        &Cfg::default(),
    );
    let r = p.run();
    (p, r)
}

#[test]
fn metrics_link_to_proc_self_environ_stores_no_key() {
    need_docker!();
    let (p, r) = metrics_attack("ln -sf /proc/self/environ \"$W/.eval-agent/metrics.json\"");
    r.assert_one_final_outcome();
    p.assert_no_leak(&r, &[]);
}

#[test]
fn metrics_link_to_a_host_file_stores_none_of_it() {
    need_docker!();
    let (p, r) = metrics_attack("ln -sf @CANARY@ \"$W/.eval-agent/metrics.json\"");
    r.assert_one_final_outcome();
    p.assert_no_leak(&r, &[]);
}

#[test]
fn metrics_link_to_etc_shadow_stores_none_of_it() {
    need_docker!();
    let (p, r) = metrics_attack("ln -sf /etc/shadow \"$W/.eval-agent/metrics.json\"");
    r.assert_one_final_outcome();
    // Only checkable where the test can read the file itself (the controller runs as the
    // same user).
    let shadow = std::fs::read("/etc/shadow")
        .ok()
        .filter(|b| b.len() >= 16)
        .map(|b| vec![("/etc/shadow".to_owned(), b)])
        .unwrap_or_default();
    p.assert_no_leak(&r, &shadow);
}

#[test]
fn metrics_fifo_does_not_hang_the_controller() {
    need_docker!();
    // The hang guard in `run` fails the test if the controller blocks opening the FIFO.
    let (p, r) = metrics_attack("mkfifo \"$W/.eval-agent/metrics.json\"");
    r.assert_one_final_outcome();
    p.assert_no_leak(&r, &[]);
}

#[test]
fn metrics_link_to_dev_zero_does_not_exhaust_the_controller() {
    need_docker_alone!();
    // Under the run's address-space limit a controller that reads without a cap fails its
    // allocation instead of taking the machine's memory; either way its peak shows it.
    let (p, r) = metrics_attack("ln -sf /dev/zero \"$W/.eval-agent/metrics.json\"");
    r.assert_one_final_outcome();
    assert!(
        r.peak_rss_kb < 512 * 1024,
        "the controller's resident memory peaked at {} MB",
        r.peak_rss_kb / 1024
    );
    p.assert_no_leak(&r, &[]);
}

// ---------------------------------------------------------------------------------------------
// 2. What the grader and the archive read from the workspace.

#[test]
fn workspace_links_to_host_files_reach_neither_the_grader_nor_the_archive() {
    need_docker!();
    // The fixture grader reads `src/part1.py` … `src/part5.py` (demo-simple-1's checks): links
    // there point at the host canary and the controller's environment.
    let p = Project::new(
        r#"mkdir -p "$W/src" "$W/deep"
ln -sf @CANARY@ "$W/src/part1.py"
ln -sf /proc/self/environ "$W/src/part2.py"
ln -sf @CANARY@ "$W/deep/canary"
ln -sf /proc/self/environ "$W/environ"
okcall
metrics
exit 0
"#,
        &Cfg::default(),
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert!(
        artifact(&p.dir, &o, "workspace").is_some(),
        "the workspace was not archived: {o}"
    );
    p.assert_no_leak(&r, &[]);
}

#[test]
fn odd_workspace_entries_are_archived_and_never_rerun() {
    need_docker!();
    let p = Project::new(
        r#"printf 'agent bytes\n' > "$W/$(printf 'bad\377name')"
mkfifo "$W/fifo"
call hostile:inspect > /dev/null
okcall
metrics
exit 0
"#,
        &Cfg::default(),
    );
    // A Unix socket in the workspace: busybox cannot bind one, so the host binds it (into the
    // attempt's workspace mount) while the agent waits on its `hostile:inspect` call.
    let bound = Arc::new(Mutex::new(None::<std::os::unix::net::UnixListener>));
    let dir = p.dir.clone();
    let slot = bound.clone();
    p.upstream.set_hook(Arc::new(move || {
        let Some(ws) = hostile_mount(&dir, "/workspace") else {
            return "no workspace".into();
        };
        match std::os::unix::net::UnixListener::bind(ws.join("agent.sock")) {
            Ok(l) => {
                *slot.lock().unwrap() = Some(l);
                "bound".into()
            }
            Err(e) => format!("bind failed: {e}"),
        }
    }));
    let r = p.run();
    assert!(
        bound.lock().unwrap().is_some(),
        "the socket was never placed in the workspace: {}",
        r.text
    );
    let o = r.assert_one_final_outcome();
    assert!(
        artifact(&p.dir, &o, "workspace").is_some(),
        "the workspace was not archived: {o}"
    );
    p.assert_no_leak(&r, &[]);
}

// ---------------------------------------------------------------------------------------------
// 3. Failures the agent causes are outcomes.

#[test]
fn an_upstream_4xx_the_agent_caused_is_an_outcome_not_an_infra_fault() {
    need_docker!();
    let p = Project::new(
        "call hostile:status:400 > /dev/null\nexit 1\n",
        &Cfg::default(),
    );
    let r = p.run();
    assert!(
        p.upstream
            .seen()
            .iter()
            .any(|s| s.authorized && s.body.windows(18).any(|w| w == b"hostile:status:400")),
        "the in-contract request never reached the upstream: {}",
        r.text
    );
    r.assert_one_final_outcome();
    p.assert_no_leak(&r, &[]);
}

#[test]
fn a_20_mb_clarifying_question_is_an_outcome_and_not_recorded_whole() {
    need_docker!();
    let cfg = Cfg {
        model_oracle: true,
        attempt_max_tokens: 1_000_000,
        ..Cfg::default()
    };
    let p = Project::new(
        r#"{ printf '{"question":"'; head -c 20000000 /dev/zero | tr '\0' q; printf '"}'; } > /tmp/q.json
wget -q -O - --header 'Content-Type: application/json' --post-file /tmp/q.json "$CTL/clarify" > /dev/null
rm -f /tmp/q.json
okcall
metrics
exit 0
"#,
        &cfg,
    );
    let r = p.run();
    r.assert_one_final_outcome();
    let size = ledger_bytes(&p.dir);
    assert!(
        size < 2_000_000,
        "the ledger grew to {size} bytes: the question was recorded whole"
    );
    for c in r.hostile("clarification") {
        let q = c["question"].as_str().map_or(0, str::len);
        assert!(
            q < 100_000,
            "a clarification entry holds {q} bytes of question"
        );
    }
    p.assert_no_leak(&r, &[]);
}

// ---------------------------------------------------------------------------------------------
// 4. Attestation.

#[test]
fn a_second_attestation_from_the_harness_cannot_flip_the_verdict() {
    need_docker!();
    let p = Project::new(
        r#"wget -q -O - --header 'Content-Type: application/json' --post-data '{"format":1,"paths":[{"path":"/opt/eval/profile.toml","digest":"sha256:0000"}]}' "$CTL/attest" > /dev/null
wget -q -O - --header 'Content-Type: application/json' --post-data 'garbage' "$CTL/attest" > /dev/null
okcall
metrics
exit 0
"#,
        &Cfg::default(),
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    let att = r.hostile("attestation");
    assert_eq!(
        att.len(),
        1,
        "the harness's attestations were recorded as attestations: {att:?}"
    );
    assert_eq!(att[0]["ok"], true, "{att:?}");
    assert_eq!(o["outcome"], "completed", "{o}");
    assert_eq!(o["model_turns"], 1, "{o}");
}

// ---------------------------------------------------------------------------------------------
// 5. Paths in the runtime definition.

fn escaping_metrics_path_is_refused(metrics_path: &str) {
    // A directory a clean-up that follows `metrics_path` out of the workspace would delete.
    let cfg = Cfg {
        metrics_path: metrics_path.to_owned(),
        ..Cfg::default()
    };
    let p = Project::new("okcall\nexit 0\n", &cfg);
    let sentinel = p.tmp.path().join("sentinel");
    std::fs::create_dir_all(sentinel.join("inner")).unwrap();
    std::fs::write(sentinel.join("inner/keep"), b"keep").unwrap();
    let o = p.freeze();
    let t = text(&o);
    // Never run a definition like this (the clean-up of today's code could remove `/`).
    assert_eq!(
        o.status.code(),
        Some(2),
        "freeze accepted {metrics_path:?}: {t}"
    );
    assert!(
        t.contains("metrics_path"),
        "the message names no field: {t}"
    );
    assert!(!p.dir.join("runs/freezes/demo.json").exists());
    assert!(sentinel.join("inner/keep").exists());
    assert!(p.canary_path.exists());
}

#[test]
fn a_metrics_path_climbing_out_of_the_workspace_is_refused_at_freeze() {
    need_docker!();
    escaping_metrics_path_is_refused("../../../../etc/hostname");
}

#[test]
fn an_absolute_metrics_path_is_refused_at_freeze() {
    need_docker!();
    escaping_metrics_path_is_refused("/etc/hostname");
}

// ---------------------------------------------------------------------------------------------
// 6. Proxy limits.

/// True once the ledger holds an outcome of an attempt of `arm` (read while the run writes).
fn arm_has_ended(dir: &std::path::Path, arm: &str) -> bool {
    let ledger = dir.join("runs/demo/ledger.sqlite");
    ledger.exists()
        && eval_evidence::ledger::LedgerReader::open(&ledger)
            .and_then(|l| l.entries())
            .map(|es| {
                payloads(&es, "attempt_outcome")
                    .iter()
                    .any(|o| o["arm"] == arm)
            })
            .unwrap_or(false)
}

#[test]
fn a_connection_flood_does_not_change_a_sibling_attempt() {
    need_docker_alone!();
    let cfg = Cfg {
        pids: 8192,
        memory_mb: 2048,
        timeout_seconds: 240,
        ..Cfg::default()
    };
    // Opens 1,500 connections to the relay (more than the controller's 1,024 open files; the
    // shim spends threads per connection, so the container's pid limit bounds the count) that
    // never send a byte (each `nc` reads a FIFO nobody writes), says so in the workspace, and
    // holds them until the test releases it.
    let p = Project::new(
        r#"mkfifo /tmp/hold
exec 3<>/tmp/hold
for i in $(seq 1500); do $BB nc 127.0.0.1 8080 <&3 >/dev/null 2>&1 & done
last=0; still=0
for i in $(seq 600); do
  n=$(netstat -tn 2>/dev/null | grep -c ':8080 .*ESTABLISHED')
  [ "${n:-0}" -ge 2000 ] && break
  if [ "${n:-0}" -le "$last" ]; then still=$((still+1)); else still=0; fi
  [ "$still" -ge 25 ] && break
  last=${n:-0}
  sleep 0.2
done
echo "$n" > "$W/flood-ready"
while ! [ -e "$W/release" ]; do sleep 0.2; done
exit 0
"#,
        &cfg,
    );
    // The sibling's first model call waits (in the upstream) until the flood is in place, so
    // everything after it (its next calls, its archive, its grader) runs under the flood.
    let dir = p.dir.clone();
    let flooded = Arc::new(Mutex::new(None::<String>));
    let seen_flood = flooded.clone();
    p.upstream.set_gate(Arc::new(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(200);
        while std::time::Instant::now() < deadline {
            if let Some(ws) = hostile_mount(&dir, "/workspace")
                && let Ok(s) = std::fs::read_to_string(ws.join("flood-ready"))
            {
                *seen_flood.lock().unwrap() = Some(s);
                return;
            }
            // A flooder that died before it was ready will never be.
            if arm_has_ended(&dir, "hostile") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }));
    // Releases the flooder once the sibling's outcome is in the ledger.
    let dir = p.dir.clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    let releaser = std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let native_done = arm_has_ended(&dir, "native");
            if native_done && let Some(ws) = hostile_mount(&dir, "/workspace") {
                let _ = std::fs::write(ws.join("release"), b"go");
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    });
    let r = p.run();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    releaser.join().unwrap();
    let ready = flooded.lock().unwrap().clone();
    let log = r
        .hostile_outcomes()
        .first()
        .and_then(|o| artifact(&p.dir, o, "agent_log"))
        .unwrap_or_default();
    if ready.is_none() && crate::support::gvisor::suite_under_gvisor() {
        // Under gVisor's ptrace platform each of the 1,500 processes is a host stub process of
        // the sandbox, inside the arm's memory: the sandbox may die of the flood before it is in
        // place (as `gvisor::a_process_flood_under_gvisor_ends_only_its_own_attempt` shows for a
        // process flood). Then what must hold is that it ended only its own attempt, as the
        // agent's error and never a rerunnable fault; the sibling's checks below still apply.
        let hostile = r.hostile_outcomes();
        assert_eq!(hostile.len(), 1, "{hostile:?}");
        assert_eq!(hostile[0]["outcome"], "agent_error", "{}", hostile[0]);
        assert!(hostile[0]["infra_fault"].is_null(), "{}", hostile[0]);
    } else {
        assert!(
            ready.is_some(),
            "the flood never got in place before the sibling's first call: {}\nagent log: {}",
            r.text,
            String::from_utf8_lossy(&log)
        );
    }
    let native = r.native_outcomes();
    assert_eq!(
        native.len(),
        1,
        "the sibling was faulted and rerun under the flood: {native:?}"
    );
    assert_eq!(
        native[0]["outcome"],
        "completed",
        "the sibling's outcome changed under the flood ({} connections): {}",
        ready.unwrap_or_default().trim(),
        native[0]
    );
    assert!(native[0]["infra_fault"].is_null(), "{}", native[0]);
    r.assert_one_final_outcome();
    assert!(r.payloads("rerun").is_empty());
}

#[test]
fn output_multipliers_never_exceed_the_token_budget() {
    need_docker!();
    let budget = 200_000;
    let cfg = Cfg {
        attempt_max_tokens: budget,
        run_max_tokens: 2 * budget,
        ..Cfg::default()
    };
    // The scripted upstream bills what each request asks for: `n`/`best_of` copies of the
    // largest output limit, as a provider would.
    let p = Project::new(
        r#"call hostile:bill ',"n":700' > /dev/null
call hostile:bill ',"best_of":50' > /dev/null
call hostile:bill ',"max_completion_tokens":999999' > /dev/null
exit 0
"#,
        &cfg,
    );
    let r = p.run();
    r.assert_one_final_outcome();
    let metered: u64 = r
        .hostile("model_call")
        .iter()
        .map(|c| {
            c["tokens"]["input"].as_u64().unwrap_or(0) + c["tokens"]["output"].as_u64().unwrap_or(0)
        })
        .sum();
    assert!(
        metered <= budget,
        "metered {metered} tokens, budget {budget}"
    );
    // The provider's own bill covers the sibling's calls too; the run budget binds it.
    let billed = p.upstream.billed();
    assert!(
        billed <= budget,
        "the upstream billed {billed} tokens against an attempt budget of {budget}"
    );
}

#[test]
fn a_models_listing_is_refused_or_recorded_before_it_reaches_the_upstream() {
    need_docker!();
    let p = Project::new(
        "wget -q -O - \"$B/models\" > /dev/null\nokcall\nmetrics\nexit 0\n",
        &Cfg::default(),
    );
    let r = p.run();
    r.assert_one_final_outcome();
    // `eval run`'s preflight lists the models and reads the balance before any attempt: the
    // upstream's first two requests. What the agent reached is everything after them.
    let seen = p.upstream.seen();
    let preflight: Vec<_> = seen
        .iter()
        .take(2)
        .map(|s| (&*s.method, &*s.path))
        .collect();
    assert_eq!(
        preflight,
        [("GET", "/v1/models"), ("GET", "/v1/user/balance")],
        "{}",
        r.text
    );
    let seen = &seen[2..];
    let listed = seen
        .iter()
        .filter(|s| s.method == "GET" && s.path.ends_with("/models"))
        .count();
    let started = r.hostile("model_call_started");
    let started_listing = started
        .iter()
        .filter(|s| s["path"].as_str().is_some_and(|p| p.ends_with("/models")))
        .count();
    assert!(
        listed <= started_listing,
        "the upstream served {listed} model listing(s), the ledger recorded {started_listing} as started: {started:?}"
    );
    // Every hostile request the upstream saw was recorded as started first.
    let hostile_seen = seen
        .iter()
        .filter(|s| {
            (s.method == "GET" && s.path.ends_with("/models"))
                || s.body.windows(8).any(|w| w == b"hostile:")
        })
        .count();
    assert!(
        hostile_seen <= started.len(),
        "the upstream saw {hostile_seen} hostile requests, {} were recorded as started",
        started.len()
    );
}

#[test]
fn unlisted_body_parameters_and_client_headers_never_reach_the_upstream() {
    need_docker!();
    let p = Project::new(
        r#"call hostile:ok ',"logit_bias":{"50256":-100}' > /dev/null
call hostile:ok ',"seed":7' > /dev/null
call hostile:ok ',"max_completion_tokens":999999' > /dev/null
wget -q -O - --header 'Content-Type: application/json' --header 'OpenAI-Organization: org-hostile' --header 'anthropic-beta: hostile-beta' --header 'X-HTTP-Method-Override: DELETE' --post-data "$(req hostile:headers '')" "$B/chat/completions" > /dev/null
exit 0
"#,
        &Cfg::default(),
    );
    let r = p.run();
    r.assert_one_final_outcome();
    for s in p.upstream.seen() {
        let body = s.json();
        for k in ["logit_bias", "seed", "max_completion_tokens"] {
            assert!(
                body.get(k).is_none(),
                "the upstream received body parameter {k}: {body}"
            );
        }
        for (h, v) in &s.headers {
            assert!(
                ![
                    "openai-organization",
                    "anthropic-beta",
                    "x-http-method-override"
                ]
                .contains(&h.as_str()),
                "the upstream received client header {h}: {v}"
            );
        }
    }
    let refused = r
        .hostile("model_call")
        .iter()
        .filter(|c| c["result"] == "contract_violation")
        .count();
    assert!(
        refused >= 3,
        "{refused} of the 3 calls with unlisted parameters were refused: {:?}",
        r.hostile("model_call")
    );
}

#[test]
fn clarification_spam_keeps_the_ledger_small() {
    need_docker!();
    // 1,000 questions of 4 kB each to a task without an oracle: every one is refused.
    let p = Project::new(
        r#"Q=$(head -c 4000 /dev/zero | tr '\0' q)
for i in $(seq 1000); do
  wget -q -O - --header 'Content-Type: application/json' --post-data "{\"question\":\"$i $Q\"}" "$CTL/clarify" > /dev/null 2>&1
done
okcall
metrics
exit 0
"#,
        &Cfg::default(),
    );
    let r = p.run();
    r.assert_one_final_outcome();
    let size = ledger_bytes(&p.dir);
    assert!(
        size < 2_000_000,
        "1,000 refused 4 kB questions grew the ledger to {size} bytes"
    );
}

#[test]
fn a_key_the_upstream_reflects_in_any_encoding_never_reaches_the_agent() {
    need_docker!();
    let p = Project::new(
        r#"call hostile:reflect > "$W/received.txt"
cat "$W/received.txt"
okcall
metrics
exit 0
"#,
        &Cfg::default(),
    );
    let r = p.run();
    assert!(
        p.upstream
            .seen()
            .iter()
            .any(|s| s.authorized && s.body.windows(15).any(|w| w == b"hostile:reflect")),
        "the reflecting request never reached the upstream: {}",
        r.text
    );
    let o = r.assert_one_final_outcome();
    // The archived workspace and the agent log hold what the agent received.
    for name in ["workspace", "agent_log"] {
        let bytes = artifact(&p.dir, &o, name).unwrap_or_else(|| panic!("no {name}: {o}"));
        for (what, n) in p.secrets() {
            assert!(!contains(&bytes, &n), "the agent's {name} holds the {what}");
        }
    }
    p.assert_no_leak(&r, &[]);
}

#[test]
fn attempt_sockets_are_private_to_their_attempt() {
    need_docker!();
    let p = Project::new(
        r#"ls -la /run/eval > "$W/inside.txt"
call hostile:inspect > /dev/null
okcall
metrics
exit 0
"#,
        &Cfg::default(),
    );
    // While the attempt runs: the host directory behind /run/eval and what it holds.
    let dir = p.dir.clone();
    let found = Arc::new(Mutex::new(None::<(u32, u32, Vec<(String, u32)>)>));
    let slot = found.clone();
    p.upstream.set_hook(Arc::new(move || {
        use std::os::unix::fs::MetadataExt;
        let Some(mut host) = hostile_mount(&dir, "/run/eval") else {
            return "no socket mount".into();
        };
        // A socket mounted on its own: judge the directory that holds it on the host.
        if !host.is_dir() {
            host.pop();
        }
        let Ok(m) = std::fs::metadata(&host) else {
            return "no socket dir".into();
        };
        let entries = std::fs::read_dir(&host)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let m = std::fs::symlink_metadata(e.path()).ok()?;
                        Some((e.file_name().to_string_lossy().into_owned(), m.mode()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        *slot.lock().unwrap() = Some((m.mode(), m.uid(), entries));
        "inspected".into()
    }));
    let r = p.run();
    r.assert_one_final_outcome();
    let (mode, uid, entries) = found
        .lock()
        .unwrap()
        .clone()
        .unwrap_or_else(|| panic!("the socket directory was never inspected: {}", r.text));
    assert_eq!(
        mode & 0o077,
        0,
        "the host socket directory has mode {:o}",
        mode & 0o7777
    );
    let me = std::fs::metadata(p.tmp.path()).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    });
    assert!(
        me.is_ok_and(|me| me == uid) || uid == 65532,
        "the socket directory is owned by uid {uid}"
    );
    assert_eq!(
        entries.len(),
        1,
        "the attempt sees other sockets: {entries:?}"
    );
    for (name, m) in &entries {
        assert_eq!(m & 0o007, 0, "socket {name} has mode {:o}", m & 0o7777);
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Matrix bounds.

#[test]
fn a_huge_repetition_count_is_refused_by_plan() {
    let p = Project::new("exit 0\n", &Cfg::default());
    replace_in(
        &p.dir.join("matrix/demo.toml"),
        "repetitions = 1",
        "repetitions = 3000000",
    );
    // Under an address-space limit: today's code would otherwise take ~19 GB.
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000; exec \"$0\" \"$@\"")
        .arg(eval_bin())
        .args(["plan", "--matrix", "demo"])
        .current_dir(&p.dir)
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("repetitions"), "the message names no field: {t}");
}

// ---------------------------------------------------------------------------------------------
// 8. The disk: an agent can fill only its own filesystem, and a full one is its outcome — so an
// agent that fills the disk only when it is failing gets no redraw.

/// The agent's log as stored, as text.
fn agent_log(p: &Project, o: &serde_json::Value) -> String {
    String::from_utf8_lossy(&artifact(&p.dir, o, "agent_log").expect("the agent's log is stored"))
        .into_owned()
}

#[test]
fn an_agent_that_fallocates_past_its_filesystem_fails_on_its_own_and_is_not_redrawn() {
    need_docker!();
    // 256 MiB asked of a 64 MiB filesystem: refused at once inside it (before this design the
    // host's disk took it). Then the agent fails, as a gaming agent would when losing.
    let p = Project::new(
        r#"okcall
if $BB fallocate -l 256M "$W/reserve" 2> "$W/err"; then echo "FALLOCATE-SUCCEEDED"; fi
echo "FALLOCATE: $($BB cat "$W/err")"
$BB fallocate -l 200M "$W/second" 2>&1 | $BB head -c 200
exit 1
"#,
        &Cfg::default(),
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "agent_error", "{o}");
    let log = agent_log(&p, &o);
    assert!(!log.contains("FALLOCATE-SUCCEEDED"), "{log}");
    assert!(log.contains("No space left on device"), "{log}");
    p.assert_no_leak(&r, &[]);
}

#[test]
fn an_inode_flood_fills_only_the_agents_own_filesystem_and_is_not_redrawn() {
    need_docker!();
    let cfg = Cfg {
        workspace_inodes: 4096,
        ..Cfg::default()
    };
    // Empty files until the filesystem has no inode left (a redirection, no fork each; not on
    // `:`, whose failed redirection would end the shell).
    let p = Project::new(
        r#"okcall
$BB mkdir "$W/flood"
i=0
while true > "$W/flood/f$i"; do i=$((i+1)); [ $i -lt 100000 ] || break; done 2> "$W/err"
echo "MADE $i FILES: $($BB cat "$W/err")"
exit 1
"#,
        &cfg,
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "agent_error", "{o}");
    let log = agent_log(&p, &o);
    let made: u64 = log
        .split("MADE ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in the log: {log:?}\n{o}\n{}", r.text));
    assert!(
        made < 4096,
        "{made} files in a filesystem of 4096 inodes: {log}"
    );
    assert!(log.contains("No space left on device"), "{log}");
    // The flood is still archived, every entry of it (within the archive's entry cap).
    assert!(artifact(&p.dir, &o, "workspace").is_some(), "{o}");
    p.assert_no_leak(&r, &[]);
}

#[test]
fn a_log_flood_is_cut_at_the_engines_limit_and_is_not_redrawn() {
    need_docker!();
    // 64 MiB on stdout, then the test looks at the engine's own log file of the running
    // container (its `LogPath`) while the agent waits on an inspect call.
    let p = Project::new(
        r#"okcall
$BB yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef | $BB head -c 67108864
call hostile:inspect > /dev/null
exit 1
"#,
        &Cfg::default(),
    );
    let sizes = Arc::new(Mutex::new(Vec::<u64>::new()));
    let (dir, seen) = (p.dir.clone(), sizes.clone());
    p.upstream.set_hook(Arc::new(move || {
        let identity = identity_of(&dir);
        let ps = std::process::Command::new("docker")
            .args([
                "ps",
                "-q",
                "--filter",
                &format!("label=eval.identity={identity}"),
                "--filter",
                "label=eval.arm=hostile",
                "--filter",
                "label=eval.role=agent",
            ])
            .output()
            .unwrap();
        for id in String::from_utf8_lossy(&ps.stdout).lines() {
            let o = std::process::Command::new("docker")
                .args(["inspect", "--format", "{{.LogPath}}", id])
                .output()
                .unwrap();
            let path = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            if let Ok(m) = std::fs::metadata(&path) {
                seen.lock().unwrap().push(m.len());
            }
        }
        "inspected".into()
    }));
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "agent_error", "{o}");
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(
        sizes.len(),
        1,
        "the engine's log file was not found: {}",
        r.text
    );
    // 8 MiB (`max-size=8m`, one file); the JSON framing of each line is inside that bound.
    assert!(
        sizes[0] <= 8 << 20,
        "the engine's log holds {} bytes of a 64 MiB flood",
        sizes[0]
    );
    let log = artifact(&p.dir, &o, "agent_log").expect("the agent's log is stored");
    assert!(log.len() <= 256 * 1024, "{} bytes of log stored", log.len());
    p.assert_no_leak(&r, &[]);
}

#[test]
fn a_4_gib_sparse_file_is_archived_by_its_data_and_is_not_redrawn() {
    need_docker!();
    // 4 GiB of apparent size in a 64 MiB filesystem, 4 KiB of it data: before, the archive
    // wrote all 4 GiB to the host's store.
    let p = Project::new(
        r#"okcall
$BB truncate -s 4G "$W/sparse.img"
printf 'agent data' | $BB dd of="$W/sparse.img" bs=4096 seek=1000 conv=notrunc 2> /dev/null
$BB ls -ls "$W/sparse.img"
metrics
exit 0
"#,
        &Cfg::default(),
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "completed", "{o}\n{}", agent_log(&p, &o));
    let archive = artifact(&p.dir, &o, "workspace").expect("the workspace is archived");
    assert!(
        archive.len() < 1 << 20,
        "a 4 GiB sparse file took {} archive bytes",
        archive.len()
    );
    let notes: Vec<serde_json::Value> = r.hostile("attempt_note");
    let text = serde_json::to_string(&notes).unwrap();
    assert!(
        text.contains("sparse.img\\\": sparse file of 4294967296 bytes"),
        "{text}"
    );
    p.assert_no_leak(&r, &[]);
}

#[test]
fn artifacts_past_the_runs_budget_are_the_attempts_outcome_and_not_redrawn() {
    need_docker!();
    // 4 MiB of data in the workspace, a run budget of 3 MiB: the archive is refused, and that
    // is the attempt's outcome — not the rerunnable `filesystem_capacity` a full store gave.
    let cfg = Cfg {
        artifact_max_bytes: Some(3 << 20),
        ..Cfg::default()
    };
    let p = Project::new(
        r#"okcall
$BB dd if=/dev/urandom of="$W/blob" bs=1048576 count=4 2> /dev/null
metrics
exit 0
"#,
        &cfg,
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "agent_error", "{o}");
    let detail = o["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("artifact quota"), "{o}");
    assert!(o["artifacts"]["workspace"].is_null(), "{o}");
    assert!(o["artifacts"]["grader_output"].is_null(), "not graded: {o}");
    assert!(
        o["metrics"]
            .as_object()
            .is_none_or(|m| m.get("score").is_none()),
        "{o}"
    );
    // The sibling's artifacts fit: the budget is the run's, and it only refused the flood.
    let native = &r.native_outcomes()[0];
    assert_eq!(native["outcome"], "completed", "{native}");
    assert!(!native["artifacts"]["workspace"].is_null(), "{native}");
    let stored: u64 = walk_bytes(&p.dir.join("runs/demo/artifacts/sha256"));
    assert!(stored <= 3 << 20, "{stored} bytes stored");
    p.assert_no_leak(&r, &[]);
}

/// Bytes of the files under `dir`.
fn walk_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        total += if m.is_dir() {
            walk_bytes(&e.path())
        } else {
            m.len()
        };
    }
    total
}

// ---------------------------------------------------------------------------------------------
// 9. The paths a task expects (EvoCode-Bench's): the workspace at `/app` where a runtime declares
// `workspace`, and a writable, executable `/usr/local/bin` (`tmpfs_exec`) for build outputs,
// without giving up the read-only root or the non-root user.

/// Asserted from inside the agent's container; each failure is its own exit status.
const APP_PROBE: &str = r#"
[ "$W" = /app ] || exit 11
[ "$(pwd)" = /app ] || exit 12
[ "$($BB id -u)" != 0 ] || exit 13
[ "$($BB id -g)" != 0 ] || exit 13
if $BB touch /root-probe 2>/dev/null; then exit 14; fi
if $BB touch /usr/bin/probe 2>/dev/null; then exit 15; fi
printf '#!/bin/sh\necho built-ok\n' > /usr/local/bin/tool || exit 16
$BB chmod 755 /usr/local/bin/tool || exit 17
[ "$(/usr/local/bin/tool)" = built-ok ] || exit 18
printf '#!/bin/sh\necho ran\n' > /tmp/tool && $BB chmod 755 /tmp/tool
if /tmp/tool 2>/dev/null; then exit 19; fi
mkdir -p "$W/src"
echo "demo-simple-1-r1-ok uid=$($BB id -u) $(/usr/local/bin/tool)" > "$W/src/part1.py"
okcall
metrics
exit 0
"#;

#[test]
fn a_workspace_declared_at_app_and_an_exec_bin_keep_the_root_read_only_and_the_user_non_root() {
    need_docker!();
    let p = Project::new(APP_PROBE, &Cfg::default());
    // The agent's runtime: the workspace at /app, /usr/local/bin a writable exec tmpfs (so the
    // image's own /usr/local/bin programs are neither run nor attested here).
    let hostile = p.dir.join("runtimes/hostile/runtime.toml");
    replace_in(
        &hostile,
        "tmpfs = [\"/home/agent\"]\n",
        "tmpfs = [\"/home/agent\"]\nworkspace = \"/app\"\ntmpfs_exec = [\"/usr/local/bin\"]\n",
    );
    replace_in(
        &hostile,
        "[grader]\ncommand = [\"/usr/local/bin/eval-fixture-grader\", \"--workspace\", \"{workspace}\", \"--hidden\", \"{hidden}\", \"--out\", \"{out}\"]\n",
        "",
    );
    replace_in(
        &hostile,
        "paths = [\"/usr/local/bin/eval-fixture-agent\", \"{profile}\", \"{candidate}\"]",
        "paths = [\"{profile}\", \"{candidate}\"]",
    );
    // The grader's (and the native arm's) runtime declares /app too: the grader finds the
    // workspace there or scores nothing.
    replace_in(
        &p.dir.join("runtimes/fixture/runtime.toml"),
        "tmpfs = [\"/home/agent\"]\n",
        "tmpfs = [\"/home/agent\"]\nworkspace = \"/app\"\n",
    );
    let r = p.run();
    let o = r.assert_one_final_outcome();
    assert_eq!(o["outcome"], "completed", "{o}\n{}", agent_log(&p, &o));
    assert_eq!(o["metrics"]["checks_passed"].as_f64(), Some(1.0), "{o}");
    assert_eq!(o["metrics"]["score"].as_f64(), Some(20.0), "{o}");
    let n = &r.native_outcomes()[0];
    assert_eq!(n["outcome"], "completed", "{n}");
    assert!(n["metrics"]["score"].as_f64().unwrap_or(0.0) > 0.0, "{n}");
    p.assert_no_leak(&r, &[]);
}
