//! Shared pieces of the engine tests: engine discovery, static binaries, label sweeps that run
//! even when a test panics, attempt directories, and a stand-in for the controller's side of the
//! attempt socket (attestation, the fixture model, clarifying questions).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use eval_runtimes::fixture_model;
use eval_runtimes::image::ImageId;
use eval_runtimes::policy::{AttemptFacts, RoleMounts};
use eval_runtimes::{ArmFiles, DockerRuntime, ImageSpec, Runtime, RuntimeDef, static_bins};
use serde_json::{Value, json};

pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub mod docker_policy;

/// The engine, or `None` when it does not answer and `EVAL_SKIP_DOCKER=1` asks for the skip
/// (see [`docker_policy`]); without that variable a missing engine fails the test.
pub async fn engine() -> Option<DockerRuntime> {
    match DockerRuntime::connect().await {
        Ok(d) => Some(d),
        Err(e) => {
            docker_policy::require(Err(e.to_string()));
            None
        }
    }
}

static BUILT: std::sync::Once = std::sync::Once::new();

/// Makes sure the static binaries exist (runs scripts/build-static.sh once if not).
pub fn static_binaries() {
    BUILT.call_once(|| {
        if static_bins::locate(static_bins::SHIM).is_ok()
            && static_bins::locate(static_bins::FIXTURE_AGENT).is_ok()
            && static_bins::locate(static_bins::FIXTURE_GRADER).is_ok()
        {
            return;
        }
        let status = std::process::Command::new(project_root().join("scripts/build-static.sh"))
            .status()
            .unwrap();
        assert!(status.success(), "scripts/build-static.sh failed");
    });
}

pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Removes every container and image labelled `eval.test=<label>` when dropped, so nothing is
/// left behind even when the test fails.
pub struct Sweep {
    pub label: String,
    pub images: Arc<Mutex<Vec<ImageId>>>,
}

impl Sweep {
    pub fn new() -> Self {
        Sweep {
            label: unique("rt"),
            images: Arc::default(),
        }
    }
    pub fn filter(&self) -> String {
        format!("eval.test={}", self.label)
    }
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("eval.test".to_owned(), self.label.clone())])
    }
    pub fn image(&self, id: &ImageId) {
        self.images.lock().unwrap().push(id.clone());
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let filter = self.filter();
        let images = self.images.lock().unwrap().clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                if let Ok(d) = DockerRuntime::connect().await {
                    let _ = d.sweep(&filter).await;
                    for i in &images {
                        let _ = d.remove_image(i).await;
                    }
                }
            });
        })
        .join();
    }
}

pub fn fixture_def() -> eval_runtimes::LoadedDef {
    RuntimeDef::load(&project_root().join("runtimes/fixture/runtime.toml")).unwrap()
}

pub const PROMPT: &str = r#"# Task: greet

Write the greeting files.

```fixture
task = "rt-greet"

[[requirement]]
id = "r1"
path = "hello.txt"
content = "hello\n"
wrong = "helo\n"

[[requirement]]
id = "r2"
path = "src/world.txt"
content = "world\n"

[[requirement]]
id = "r3"
path = "port.txt"
ambiguous = true
question = "Which port?"
content = "0\n"
```
"#;

pub const CHECKS: &str = r#"
[[check]]
id = "hello"
path = "hello.txt"
equals = "hello\n"
points = 40
[[check]]
id = "world"
path = "src/world.txt"
equals = "world\n"
points = 30
[[check]]
id = "port"
path = "port.txt"
equals = "8443\n"
points = 30
critical = true
[[check]]
id = "keep"
path = "keep.txt"
contains = "keep"
points = 0
regression = true
[alias]
hidden_score = "score"
"#;

/// One attempt's host directories: workspace, prompt, hidden, out, socket dir.
pub struct AttemptDirs {
    pub root: tempfile::TempDir,
    pub workspace: PathBuf,
    pub prompt: PathBuf,
    pub hidden: PathBuf,
    pub out: PathBuf,
    pub socket: PathBuf,
}

pub fn attempt_dirs(def: &RuntimeDef) -> AttemptDirs {
    let root = tempfile::Builder::new().prefix("evrt").tempdir().unwrap();
    let base = root.path().to_path_buf();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let workspace = base.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("keep.txt"), "keep me\n").unwrap();
    eval_runtimes::host::prepare_workspace(&workspace, def.uid_gid().unwrap()).unwrap();
    let prompt = base.join("prompt.md");
    std::fs::write(&prompt, PROMPT).unwrap();
    let hidden = base.join("hidden");
    std::fs::create_dir_all(&hidden).unwrap();
    std::fs::write(hidden.join("checks.toml"), CHECKS).unwrap();
    let out = base.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let (uid, gid) = def.uid_gid().unwrap();
    std::os::unix::fs::chown(&out, Some(uid), Some(gid)).unwrap();
    let sockdir = base.join("sock");
    std::fs::create_dir_all(&sockdir).unwrap();
    let socket = sockdir.join("attempt.sock");
    AttemptDirs {
        root,
        workspace,
        prompt,
        hidden,
        out,
        socket,
    }
}

pub fn facts(sweep: &Sweep, attempt: &str) -> AttemptFacts {
    AttemptFacts {
        protocol: "rt-test".into(),
        identity: "sha256:0000".into(),
        arm: "arm-a".into(),
        attempt: attempt.into(),
        extra_labels: sweep.labels(),
    }
}

pub fn agent_mounts(d: &AttemptDirs) -> RoleMounts {
    RoleMounts::Agent {
        workspace: d.workspace.clone(),
        prompt: d.prompt.clone(),
        socket: d.socket.clone(),
        shim: static_bins::locate(static_bins::SHIM).unwrap(),
        state: None,
    }
}

/// An arm image spec with `profile` text and a candidate package file.
pub fn arm_spec(sweep: &Sweep, dir: &Path, profile: &str, candidate: &[u8]) -> ImageSpec {
    let p = dir.join("profile.toml");
    std::fs::write(&p, profile).unwrap();
    let c = dir.join("candidate");
    std::fs::create_dir_all(&c).unwrap();
    std::fs::write(c.join("plugin.js"), candidate).unwrap();
    ImageSpec {
        def: fixture_def(),
        arm: ArmFiles {
            profile: Some(p),
            candidate: Some(c),
        },
        labels: sweep.labels(),
    }
}

/// What the stand-in controller saw on one attempt socket.
#[derive(Default)]
pub struct Seen {
    pub attest_calls: AtomicU64,
    pub chat_calls: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub clarify_calls: AtomicU64,
    pub last_attest: Mutex<Option<Value>>,
}

pub struct Control {
    pub expected: BTreeMap<String, Option<String>>,
    pub answers: BTreeMap<String, String>,
    pub seen: Seen,
}

async fn attest(State(c): State<Arc<Control>>, body: String) -> Response {
    c.seen.attest_calls.fetch_add(1, Ordering::SeqCst);
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    *c.seen.last_attest.lock().unwrap() = Some(v.clone());
    let ok = match serde_json::from_value::<eval_core::attest::AttestReport>(v) {
        Ok(report) => report.mismatches(&c.expected).is_empty(),
        Err(_) => false,
    };
    axum::Json(json!({"ok": ok})).into_response()
}

async fn chat(State(c): State<Arc<Control>>, body: String) -> Response {
    let req: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let answer = match fixture_model::respond(&req) {
        Ok(a) => a,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    c.seen.chat_calls.fetch_add(1, Ordering::SeqCst);
    c.seen
        .prompt_tokens
        .fetch_add(answer.usage.prompt_tokens, Ordering::SeqCst);
    c.seen
        .completion_tokens
        .fetch_add(answer.usage.completion_tokens, Ordering::SeqCst);
    let model = req["model"].as_str().unwrap_or("m").to_owned();
    if req["stream"].as_bool() == Some(true) {
        let include = req["stream_options"]["include_usage"].as_bool() == Some(true);
        let events = fixture_model::sse_events(&model, "cmpl-1", &answer, include);
        let stream = futures_util::stream::iter(
            events
                .into_iter()
                .map(|e| Ok::<_, std::io::Error>(axum::body::Bytes::from(e))),
        );
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap()
    } else {
        axum::Json(fixture_model::chat_completion_json(
            &model, "cmpl-1", &answer,
        ))
        .into_response()
    }
}

async fn clarify(State(c): State<Arc<Control>>, body: String) -> Response {
    c.seen.clarify_calls.fetch_add(1, Ordering::SeqCst);
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let q = v["question"].as_str().unwrap_or("");
    match c.answers.get(q) {
        Some(a) => axum::Json(json!({"answer": a})).into_response(),
        None => axum::Json(json!({"answer": "No further information."})).into_response(),
    }
}

/// Serves the controller's side of an attempt socket until the returned handle is aborted.
pub fn serve_socket(
    socket: &Path,
    def: &RuntimeDef,
    control: Arc<Control>,
) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    eval_runtimes::host::prepare_socket(socket, def.uid_gid().unwrap()).unwrap();
    let app = Router::new()
        .route("/_eval/attest", post(attest))
        .route("/v1/chat/completions", post(chat))
        .route("/_eval/clarify", post(clarify))
        .with_state(control);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

pub fn read_metrics(workspace: &Path) -> Option<eval_runtimes::fixture::metrics::AgentMetrics> {
    let p = workspace.join(eval_runtimes::fixture::metrics::METRICS_PATH);
    let bytes = std::fs::read(p).ok()?;
    Some(serde_json::from_slice(&bytes).unwrap())
}
