//! Per-container cost of the runtime (create → policy check → start → wait → remove through
//! bollard) against `docker run --rm` of the same image, command, mounts and flags, for 50
//! sequential and 50 parallel (concurrency 4) fixture-agent containers. Prints medians, the
//! yardstick from the same run, and their ratio.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[path = "../tests/e2e/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use eval_runtimes::policy;
use eval_runtimes::{DockerRuntime, Runtime, WaitOutcome, run_to_end};
use support::*;

const N: usize = 50;
const CONCURRENCY: usize = 4;
const PROFILE: &str = "name = \"bench\"\nskill = 1.0\nstream = true\n";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// `docker run --rm` with exactly the flags the policy gives the container.
fn docker_run_args(spec: &policy::ContainerSpec) -> Vec<String> {
    let body = &spec.body;
    let host = body.host_config.as_ref().unwrap();
    let mut a = vec![
        "run".to_owned(),
        "--rm".to_owned(),
        "--network=none".to_owned(),
        "--cap-drop=ALL".to_owned(),
        "--security-opt=no-new-privileges".to_owned(),
        "--read-only".to_owned(),
        "--ipc=private".to_owned(),
        format!("--memory={}", host.memory.unwrap()),
        format!("--memory-swap={}", host.memory_swap.unwrap()),
        format!("--cpus={}", host.nano_cpus.unwrap() as f64 / 1e9),
        format!("--pids-limit={}", host.pids_limit.unwrap()),
        format!("--user={}", body.user.as_ref().unwrap()),
        format!("--workdir={}", body.working_dir.as_ref().unwrap()),
    ];
    for (k, v) in host.tmpfs.as_ref().unwrap() {
        a.push(format!("--tmpfs={k}:{v}"));
    }
    for m in host.mounts.as_ref().unwrap() {
        let ro = if m.read_only == Some(true) {
            ",readonly"
        } else {
            ""
        };
        a.push(format!(
            "--mount=type=bind,source={},target={}{ro}",
            m.source.as_ref().unwrap(),
            m.target.as_ref().unwrap()
        ));
    }
    for e in body.env.as_ref().unwrap() {
        a.push(format!("--env={e}"));
    }
    for (k, v) in body.labels.as_ref().unwrap() {
        a.push(format!("--label={k}={v}"));
    }
    let entry = body.entrypoint.as_ref().unwrap();
    a.push(format!("--entrypoint={}", entry[0]));
    a.push(body.image.clone().unwrap());
    a.extend(body.cmd.clone().unwrap());
    a
}

struct Slot {
    _dirs: AttemptDirs,
    server: tokio::task::JoinHandle<()>,
    spec: policy::ContainerSpec,
}

async fn slots(rt: &DockerRuntime, sweep: &Sweep, n: usize) -> Vec<Slot> {
    let loaded = fixture_def();
    let def = &loaded.def;
    let mut out = Vec::new();
    let first = attempt_dirs(def);
    let spec = arm_spec(sweep, first.root.path(), PROFILE, b"bench\n");
    let expected = eval_runtimes::image::expected_attestation(&spec).unwrap();
    let image = rt.ensure_image(&spec).await.unwrap();
    sweep.image(&image);
    for i in 0..n {
        let dirs = attempt_dirs(def);
        let control = Arc::new(Control {
            expected: expected.clone(),
            answers: Default::default(),
            seen: Seen::default(),
        });
        let server = serve_socket(&dirs.socket, def, control);
        let spec = policy::container_spec(
            def,
            &image,
            &rt.inspect_image(&image).await.unwrap(),
            &facts(sweep, &format!("bench-{i}")),
            &agent_mounts(&dirs),
        )
        .unwrap();
        out.push(Slot {
            _dirs: dirs,
            server,
            spec,
        });
    }
    drop(first);
    out
}

async fn ours(rt: &DockerRuntime, slot: &Slot) -> Duration {
    let t = Instant::now();
    let end = run_to_end(rt, &slot.spec, &[b"sk-bench"], Duration::from_secs(120), 0)
        .await
        .unwrap();
    assert_eq!(end.outcome, WaitOutcome::Exited { code: 0 });
    t.elapsed()
}

async fn theirs(slot: &Slot) -> Duration {
    let t = Instant::now();
    let out = tokio::process::Command::new("docker")
        .args(docker_run_args(&slot.spec))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "docker run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed()
}

async fn parallel<F, Fut>(slots: &[Slot], f: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Duration>,
{
    use futures_util::StreamExt;
    let t = Instant::now();
    let times: Vec<Duration> = futures_util::stream::iter(0..slots.len())
        .map(f)
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    (times, t.elapsed())
}

fn report(name: &str, ours: &[Duration], theirs: &[Duration], walls: Option<(Duration, Duration)>) {
    let (mo, mt) = (median(ours.to_vec()), median(theirs.to_vec()));
    println!(
        "{name}: eval runtime median {:.1} ms/container, docker run --rm median {:.1} ms/container, ratio {:.3}",
        mo.as_secs_f64() * 1e3,
        mt.as_secs_f64() * 1e3,
        mo.as_secs_f64() / mt.as_secs_f64()
    );
    if let Some((wo, wt)) = walls {
        println!(
            "{name}: wall for {N}: eval runtime {:.2} s ({:.1} ms/container), docker run --rm {:.2} s ({:.1} ms/container), ratio {:.3}",
            wo.as_secs_f64(),
            wo.as_secs_f64() * 1e3 / N as f64,
            wt.as_secs_f64(),
            wt.as_secs_f64() * 1e3 / N as f64,
            wo.as_secs_f64() / wt.as_secs_f64()
        );
    }
}

#[tokio::main]
async fn main() {
    let Some(rt) = engine().await else {
        println!("no Docker engine; benchmark skipped");
        return;
    };
    static_binaries();
    let sweep = Sweep::new();
    let slots = slots(&rt, &sweep, N).await;
    // Warm-up: one of each, not measured.
    ours(&rt, &slots[0]).await;
    theirs(&slots[0]).await;

    // Sequential, interleaved so that drift in the machine affects both alike.
    let mut o = Vec::new();
    let mut t = Vec::new();
    for s in &slots {
        o.push(ours(&rt, s).await);
        t.push(theirs(s).await);
    }
    report("sequential", &o, &t, None);

    let (po, wo) = parallel(&slots, |i| ours(&rt, &slots[i])).await;
    let (pt, wt) = parallel(&slots, |i| theirs(&slots[i])).await;
    report("parallel x4", &po, &pt, Some((wo, wt)));

    for s in &slots {
        s.server.abort();
    }
    assert_eq!(rt.sweep(&sweep.filter()).await.unwrap(), 0);
}
