//! The hostile-arm harness: a small project whose `hostile` arm runs a busybox shell script as
//! its harness, a scripted OpenAI-compatible upstream in the test process (whose key the test
//! knows), a host canary file, and the checks every attack shares (nothing secret anywhere, no
//! infrastructure fault, no rerun, no hang).
#![allow(dead_code)]

use crate::support::*;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

/// The environment variable the test passes the upstream key in.
pub const KEY_ENV: &str = "EVAL_HOSTILE_TEST_KEY";

/// Generous bound after which a run counts as hung (a hang detector, not a speed assertion).
const HANG_GUARD_SECS: u64 = 300;

pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------------------------
// Encodings of the key an upstream might reflect (and a leak check must look for).

fn b64(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.len();
        let v = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= n {
                out.push(alphabet[((v >> (18 - 6 * i)) & 63) as usize] as char);
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_std(bytes: &[u8]) -> String {
    b64(
        bytes,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        true,
    )
}

pub fn base64_url(bytes: &[u8]) -> String {
    b64(
        bytes,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
        false,
    )
}

/// Every character as a JSON `\u00XX` escape.
pub fn json_u_escaped(s: &str) -> String {
    s.chars().map(|c| format!("\\u{:04x}", c as u32)).collect()
}

/// Percent-encoding as a URL encoder writes it (unreserved characters stay).
pub fn percent_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The scripted upstream.

/// One request the upstream received, as it received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub authorized: bool,
}

impl Seen {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// What the upstream hands to a `hostile:inspect` request (runs on the host, in the test,
/// while the attempt's container is alive; its answer text goes back to the agent).
pub type Hook = Arc<dyn Fn() -> String + Send + Sync>;

/// Runs (blocking, once) before the first ordinary request is answered: holds the sibling's
/// first model call until a condition the test sets up holds.
pub type Gate = Arc<dyn Fn() + Send + Sync>;

struct Shared {
    key: String,
    seen: Mutex<Vec<Seen>>,
    /// Tokens the upstream itself billed (what a provider would charge).
    billed: Mutex<u64>,
    hook: Mutex<Option<Hook>>,
    gate: Mutex<Option<Gate>>,
}

/// An OpenAI-compatible upstream on 127.0.0.1 in the test process. Ordinary requests get the
/// fixture model's answer (so the fixture agent works against it); requests whose last user
/// message starts with `hostile:` are scripted:
/// - `hostile:status:<code>`: that HTTP status with an OpenAI error body;
/// - `hostile:reflect`: an answer that reflects the key base64-, base64url-, `\u`- and
///   percent-encoded (and raw);
/// - `hostile:bill`: bills the worst case the request asks for (`n`/`best_of` × the largest
///   output limit), as a provider would;
/// - `hostile:inspect`: runs the test's hook and answers with its text.
pub struct Upstream {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    rt: tokio::runtime::Runtime,
}

impl Upstream {
    pub fn start(key: &str) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared {
            key: key.to_owned(),
            seen: Mutex::new(Vec::new()),
            billed: Mutex::new(0),
            hook: Mutex::new(None),
            gate: Mutex::new(None),
        });
        let addr = serve_loopback(
            &rt,
            axum::Router::new()
                .fallback(handle)
                .with_state(shared.clone()),
        );
        Upstream { addr, shared, rt }
    }

    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn billed(&self) -> u64 {
        *self.shared.billed.lock().unwrap()
    }

    pub fn set_hook(&self, hook: Hook) {
        *self.shared.hook.lock().unwrap() = Some(hook);
    }

    pub fn set_gate(&self, gate: Gate) {
        *self.shared.gate.lock().unwrap() = Some(gate);
    }
}

fn error(status: StatusCode, msg: &str) -> Response {
    (
        status,
        axum::Json(
            json!({"error": {"message": msg, "type": "invalid_request_error", "code": null}}),
        ),
    )
        .into_response()
}

fn last_user_text(req: &Value) -> String {
    req["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

fn sse(chunks: Vec<Value>) -> Response {
    let mut body = String::new();
    for c in chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap()
}

/// A streamed (or plain) answer with `content` given as raw JSON string text (already escaped,
/// so `\u` escapes reach the client as escapes) and the given usage.
fn answer_raw(req: &Value, content_json: &str, prompt: u64, completion: u64) -> Response {
    let usage = json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
    let model = req["model"].as_str().unwrap_or("m");
    if req["stream"] == true {
        let head = format!(
            "data: {{\"id\":\"h\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"{content_json}\"}},\"finish_reason\":null}}]}}\n\n"
        );
        let stop = json!({"id":"h","object":"chat.completion.chunk","created":0,"model":model,
            "choices":[{"index":0,"delta":{},"finish_reason":"stop"}]});
        let usage = json!({"id":"h","object":"chat.completion.chunk","created":0,"model":model,
            "choices":[],"usage":usage});
        let body = format!("{head}data: {stop}\n\ndata: {usage}\n\ndata: [DONE]\n\n");
        Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(Body::from(body))
            .unwrap()
    } else {
        let body = format!(
            "{{\"id\":\"h\",\"object\":\"chat.completion\",\"created\":0,\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"{content_json}\"}},\"finish_reason\":\"stop\"}}],\"usage\":{usage}}}"
        );
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap()
    }
}

async fn handle(
    State(s): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorized = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", s.key));
    s.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
            .collect(),
        body: body.to_vec(),
        authorized,
    });
    if !authorized {
        return error(StatusCode::UNAUTHORIZED, "bad key");
    }
    // `GET /models` (the agent's listing, through the proxy, and `eval run`'s preflight) and the
    // preflight's `GET /user/balance`.
    if let Some(r) = super::account::funded(&method, uri.path()) {
        return r;
    }
    if !uri.path().ends_with("/chat/completions") {
        return error(StatusCode::NOT_FOUND, "no such path");
    }
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return error(StatusCode::BAD_REQUEST, "not JSON"),
    };
    let said = last_user_text(&req);
    if let Some(code) = said.strip_prefix("hostile:status:") {
        let code = code.trim().parse::<u16>().unwrap_or(400);
        return error(StatusCode::from_u16(code).unwrap(), "scripted refusal");
    }
    if said.starts_with("hostile:reflect") {
        let k = &s.key;
        let content = format!(
            "raw:{k} b64:{} b64url:{} u:{} pct:{}",
            base64_std(k.as_bytes()),
            base64_url(k.as_bytes()),
            json_u_escaped(k),
            percent_encoded(k)
        );
        *s.billed.lock().unwrap() += 20;
        return answer_raw(&req, &content, 10, 10);
    }
    if said.starts_with("hostile:bill") {
        let out_limit = ["max_tokens", "max_completion_tokens"]
            .iter()
            .filter_map(|k| req[*k].as_u64())
            .max()
            .unwrap_or(16);
        let copies = ["n", "best_of"]
            .iter()
            .filter_map(|k| req[*k].as_u64())
            .max()
            .unwrap_or(1)
            .max(1);
        let completion = out_limit.saturating_mul(copies);
        *s.billed.lock().unwrap() += 10 + completion;
        return answer_raw(&req, "@@done", 10, completion);
    }
    if said.starts_with("hostile:inspect") {
        let hook = s.hook.lock().unwrap().clone();
        let text = match hook {
            Some(h) => tokio::task::spawn_blocking(move || h())
                .await
                .unwrap_or_default(),
            None => String::new(),
        };
        *s.billed.lock().unwrap() += 20;
        let escaped = serde_json::to_string(&text).unwrap();
        return answer_raw(&req, &escaped[1..escaped.len() - 1], 10, 10);
    }
    let gate = s.gate.lock().unwrap().take();
    if let Some(g) = gate {
        let _ = tokio::task::spawn_blocking(move || g()).await;
    }
    let a = match eval_runtimes::fixture_model::respond(&req) {
        Ok(a) => a,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    *s.billed.lock().unwrap() += a.usage.total();
    let model = req["model"].as_str().unwrap_or("m");
    if req["stream"] == true {
        let usage = req["stream_options"]["include_usage"] == true;
        let events = eval_runtimes::fixture_model::sse_events(model, "fx", &a, usage);
        Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(Body::from(events.concat()))
            .unwrap()
    } else {
        axum::Json(eval_runtimes::fixture_model::chat_completion_json(
            model, "fx", &a,
        ))
        .into_response()
    }
}

// ---------------------------------------------------------------------------------------------
// The project.

/// How a test's project differs from the default.
#[derive(Clone, Debug)]
pub struct Cfg {
    pub memory_mb: u64,
    pub pids: u64,
    pub tmpfs_mb: u64,
    /// The attempt's own filesystem (`[limits] workspace_mb`, `workspace_inodes`).
    pub workspace_mb: u64,
    pub workspace_inodes: u64,
    pub metrics_path: String,
    pub attempt_max_tokens: u64,
    pub run_max_tokens: u64,
    pub max_requests: u64,
    pub timeout_seconds: u64,
    /// Run the `icae` task `demo-icae-1` with its clarifying questions answered by the oracle
    /// model (instead of `demo-simple-1`, which has no oracle).
    pub model_oracle: bool,
    pub max_questions: u32,
    /// `[budgets.artifacts] max_bytes`; `None`: the table is absent (the default applies).
    pub artifact_max_bytes: Option<u64>,
    /// `isolation = "gvisor"` in the protocol (every agent container under `runsc`), also set
    /// for every test by `EVAL_TEST_ISOLATION=gvisor` (`support::gvisor`).
    pub gvisor: bool,
}

impl Default for Cfg {
    fn default() -> Self {
        Cfg {
            memory_mb: 256,
            pids: 64,
            tmpfs_mb: 64,
            workspace_mb: 64,
            workspace_inodes: 16384,
            metrics_path: ".eval-agent/metrics.json".into(),
            attempt_max_tokens: 20_000_000,
            run_max_tokens: 600_000_000,
            max_requests: 400,
            timeout_seconds: 120,
            model_oracle: false,
            max_questions: 5,
            artifact_max_bytes: None,
            gvisor: false,
        }
    }
}

/// The busybox prelude every hostile script starts with: applets as functions (the image links
/// only a few), the workspace and base URL, and `call BODY` posting a chat request.
const PRELUDE: &str = r#"
W="$1"; B="$2"; BB=/bin/busybox
for a in ln mkfifo wget nc stat base64 mkdir rm head printf tr seq touch grep sed cut netstat; do
  eval "$a() { $BB $a \"\$@\"; }"
done
req() { printf '{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"%s"}],"temperature":0.0,"max_tokens":32768,"stream":true,"stream_options":{"include_usage":true}%s}' "$1" "$2"; }
call() { wget -q -O - --header 'Content-Type: application/json' --post-data "$(req "$1" "${2:-}")" "$B/chat/completions"; }
CTL="${B%/v1}/_eval"
TURNS=0; TOK=0
okcall() {
  r=$(call hostile:ok "${1:-}") || return 1
  t=$(echo "$r" | grep -o '"total_tokens":[0-9]*' | cut -d: -f2 | head -n 1)
  TURNS=$((TURNS+1)); TOK=$((TOK+${t:-0}))
}
metrics() {
  mkdir -p "$W/.eval-agent"
  printf '{"format":1,"profile":"hostile","model_turns":%s,"prompt_tokens":0,"completion_tokens":0,"total_tokens":%s,"clarification_questions":0,"finished":true,"probes":[]}' "$TURNS" "$TOK" > "$W/.eval-agent/metrics.json"
}
"#;

pub struct Project {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub key: String,
    pub canary: String,
    pub canary_path: PathBuf,
    pub upstream: Upstream,
}

pub struct RunResult {
    pub out: Output,
    /// The controller's peak resident memory (VmHWM, kB) as last seen while it ran.
    pub peak_rss_kb: u64,
    pub text: String,
    pub entries: Vec<eval_evidence::ledger::Entry>,
}

/// Serialises the Docker runs of this binary: each run's attempts then share the machine only
/// with their own sibling, which the flood test relies on (two cores, many engineers).
static RUN_LOCK: Mutex<()> = Mutex::new(());

const PROTOCOL: &str = r#"schema = 1
name = "demo"
title = "Hostile-arm suite"
matrix = "demo"

[[hypotheses]]
id = "H1"
text = "The container boundary holds."

[registration]
sample_size_rationale = "A security test, not a study."
stopping_rule = "Every slot once."
exclusion_rules = ["None."]

@MODELS@
[budgets.attempt]
wall_seconds = 3600
max_requests = @MAXREQ@
max_tokens = @ATTEMPT_TOKENS@

[budgets.run]
max_tokens = @RUN_TOKENS@
max_spend_usd = 500.0
@ARTIFACTS@
[[budgets.prices]]
model = "deepseek-v4-flash"
input_usd_per_mtok = 0.27
cached_input_usd_per_mtok = 0.07
output_usd_per_mtok = 1.10

[[arms]]
id = "native"
description = "The fixture agent (the sibling of every hostile attempt)."
runtime = "runtimes/fixture/runtime.toml"
profile = "protocols/demo/arms/native/profile.toml"
stand_in = true

[[arms]]
id = "hostile"
description = "A busybox script acting as a hostile agent."
runtime = "runtimes/hostile/runtime.toml"
profile = "protocols/demo/arms/hostile/profile.toml"
package = "protocols/demo/arms/hostile/package"
stand_in = true

[suites.@SUITE@]
description = "The hostile suite."
metrics = ["score", "model_turns", "tokens", "duration_seconds"]
max_oracle_calls = @MAXORACLE@

[suites.@SUITE@.controls]
off = "a hostile-arm test project: it tests the proxy and the container boundary, not a grader"

[statistics]
unit = "task"
repetitions = "mean"
resamples = 200
seed = 0
confidence = 0.95
method = "v04-percentile"
report_methods = ["percentile"]
seed_string = "{identity}:{suite}"
exact = "auto"
min_suite_tasks = 1

[missing_data]
rule = "A failed attempt scores 0."
[missing_data.values]
score = 0.0

[reruns]
codes = ["benchmark_service_unavailable", "container_runtime_failure", "filesystem_capacity", "host_network_outage", "oracle_service_unavailable", "runner_crash_before_model_call"]
max_reruns_per_slot = 3
max_infra_attempts = 3

[[gates]]
id = "integrity"
description = "Accounting complete."
[[gates.rules]]
id = "accounting_complete"
statistic = "accounting_complete"
op = "is_true"
"#;

fn runtime_toml(cfg: &Cfg) -> String {
    format!(
        r#"name = "hostile"
user = "65532:65532"
relay_port = 8080
tmpfs = ["/home/agent"]
metrics_path = "{metrics}"

[image]
reference = "eval-runtime/hostile"

[build]
busybox = true
static_binaries = ["eval-fixture-agent", "eval-fixture-grader"]

[harness]
command = ["/bin/sh", "{{candidate}}/attack.sh", "{{workspace}}", "{{base_url}}"]

[grader]
command = ["/usr/local/bin/eval-fixture-grader", "--workspace", "{{workspace}}", "--hidden", "{{hidden}}", "--out", "{{out}}"]

[env]
HOME = "/home/agent"
OPENAI_BASE_URL = "{{base_url}}"

[attest]
paths = ["/usr/local/bin/eval-fixture-agent", "{{profile}}", "{{candidate}}"]

[limits]
memory_mb = {mem}
cpus = 1.0
pids = {pids}
tmpfs_mb = {tmpfs}
workspace_mb = {ws_mb}
workspace_inodes = {ws_inodes}

[arm]
profile = "/opt/eval/profile.toml"
candidate = "/opt/eval/candidate"
"#,
        metrics = cfg.metrics_path,
        mem = cfg.memory_mb,
        pids = cfg.pids,
        tmpfs = cfg.tmpfs_mb,
        ws_mb = cfg.workspace_mb,
        ws_inodes = cfg.workspace_inodes,
    )
}

impl Project {
    /// A fresh project (from `eval init`, made unique) whose `hostile` arm runs `script` (after
    /// the prelude; `@CANARY@` is replaced by the canary's host path) beside a `native` fixture
    /// arm, one repetition each, concurrency 2. Not frozen yet.
    pub fn new(script: &str, cfg: &Cfg) -> Project {
        let (tmp, dir) = demo_project();
        let key = format!(
            "sk-hostile-{}+{}/{}",
            random_hex(12),
            random_hex(6),
            random_hex(6)
        );
        let canary = format!("canary-{}", random_hex(24));
        let canary_path = tmp.path().join("host-canary.txt");
        std::fs::write(&canary_path, &canary).unwrap();

        let suite = if cfg.model_oracle { "icae" } else { "simple" };
        let task = if cfg.model_oracle {
            "demo-icae-1"
        } else {
            "demo-simple-1"
        };
        // The model contract (both roles, with whatever the scaffold allows its harnesses to
        // send) is the demo protocol's own, so this suite follows the contract's format.
        let demo = std::fs::read_to_string(dir.join("protocols/demo/protocol.toml")).unwrap();
        let models = &demo[demo.find("[models.agent]").unwrap()..demo.find("[budgets.").unwrap()];
        let protocol = PROTOCOL
            .replace("@MODELS@", models)
            .replace("@MAXREQ@", &cfg.max_requests.to_string())
            .replace("@ATTEMPT_TOKENS@", &cfg.attempt_max_tokens.to_string())
            .replace("@RUN_TOKENS@", &cfg.run_max_tokens.to_string())
            .replace(
                "@ARTIFACTS@",
                &cfg.artifact_max_bytes
                    .map(|b| format!("\n[budgets.artifacts]\nmax_bytes = {b}\n"))
                    .unwrap_or_default(),
            )
            .replace("@SUITE@", suite)
            .replace("@MAXORACLE@", if cfg.model_oracle { "5" } else { "0" });
        let protocol = if cfg.gvisor || super::gvisor::suite_under_gvisor() {
            super::gvisor::require_runsc();
            protocol.replacen(
                "matrix = \"demo\"\n",
                "matrix = \"demo\"\nisolation = \"gvisor\"\n",
                1,
            )
        } else {
            protocol
        };
        // Unique per test (the identity must differ between tests).
        let protocol = format!("{protocol}\n# hostile test {}\n", random_hex(8));
        std::fs::write(dir.join("protocols/demo/protocol.toml"), protocol).unwrap();
        std::fs::write(
            dir.join("matrix/demo.toml"),
            format!(
                "name = \"demo\"\nprotocol = \"demo\"\ndescription = \"hostile\"\nconcurrency = 2\n\n[order]\nalgorithm = \"chacha8\"\nseed = 1\n\n[[suites]]\nid = \"{suite}\"\ntask_root = \"protocols/demo/tasks/{suite}\"\ntasks = [\"{task}\"]\narms = [\"native\", \"hostile\"]\nbaseline = \"native\"\ncandidate = \"hostile\"\nrepetitions = 1\n"
            ),
        )
        .unwrap();
        let task_toml = dir.join(format!("protocols/demo/tasks/{suite}/{task}/task.toml"));
        replace_in(
            &task_toml,
            "timeout_seconds = 3600",
            &format!("timeout_seconds = {}", cfg.timeout_seconds),
        );
        if cfg.model_oracle {
            replace_in(
                &task_toml,
                "max_questions = 5",
                &format!(
                    "max_questions = {}\nanswered_by = \"model\"",
                    cfg.max_questions
                ),
            );
        }
        std::fs::create_dir_all(dir.join("runtimes/hostile")).unwrap();
        std::fs::write(dir.join("runtimes/hostile/runtime.toml"), runtime_toml(cfg)).unwrap();
        let arm = dir.join("protocols/demo/arms/hostile");
        std::fs::create_dir_all(arm.join("package")).unwrap();
        std::fs::copy(
            dir.join("protocols/demo/arms/native/profile.toml"),
            arm.join("profile.toml"),
        )
        .unwrap();
        let script = script.replace("@CANARY@", canary_path.to_str().unwrap());
        std::fs::write(
            arm.join("package/attack.sh"),
            format!("{PRELUDE}\n{script}\n"),
        )
        .unwrap();
        let upstream = Upstream::start(&key);
        Project {
            tmp,
            dir,
            key,
            canary,
            canary_path,
            upstream,
        }
    }

    pub fn freeze(&self) -> Output {
        eval(&self.dir, &["freeze", "--protocol", "demo"])
    }

    /// Freezes (must succeed) and runs the matrix against the scripted upstream, under a
    /// 1,024 open-file limit (a common default, and what the connection flood must not exhaust),
    /// a 4 GB address-space limit (a controller that reads `/dev/zero` fails instead of taking
    /// the shared machine's memory) and the hang guard.
    pub fn run(&self) -> RunResult {
        self.run_against(&self.upstream.url())
    }

    /// [`Project::run`] against another upstream at `url` that takes this project's key.
    pub fn run_against(&self, url: &str) -> RunResult {
        let o = self.freeze();
        assert!(o.status.success(), "freeze: {}", text(&o));
        let identity = identity_of(&self.dir);
        let _sweep = Sweep(format!("eval.identity={identity}"));
        let _serial = RUN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let child = Command::new("sh")
            .arg("-c")
            .arg("ulimit -n 1024; ulimit -v 4000000; exec \"$0\" \"$@\"")
            .arg(eval_bin())
            .args([
                "run",
                "--matrix",
                "demo",
                "--upstream",
                url,
                "--api-key-env",
                KEY_ENV,
                "--concurrency",
                "2",
            ])
            .env(KEY_ENV, &self.key)
            .env_remove("EVAL_SIGNING_KEY_FILE")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (out, peak_rss_kb) = wait_with_guard(child);
        let text = text(&out);
        let ledger = self.dir.join("runs/demo/ledger.sqlite");
        let entries = if ledger.exists() {
            entries(&ledger)
        } else {
            Vec::new()
        };
        RunResult {
            out,
            peak_rss_kb,
            text,
            entries,
        }
    }

    /// The secrets no output may hold: the key (raw and in its encodings) and the canary.
    pub fn secrets(&self) -> Vec<(String, Vec<u8>)> {
        let k = &self.key;
        let mut v = vec![
            ("key".to_owned(), k.as_bytes().to_vec()),
            ("base64(key)".into(), base64_std(k.as_bytes()).into_bytes()),
            (
                "base64url(key)".into(),
                base64_url(k.as_bytes()).into_bytes(),
            ),
            ("\\u-escaped key".into(), json_u_escaped(k).into_bytes()),
            (
                "percent-encoded key".into(),
                percent_encoded(k).into_bytes(),
            ),
            ("canary".into(), self.canary.as_bytes().to_vec()),
        ];
        // The key's random core alone catches a partial or re-encoded copy of the raw key.
        if let Some(core) = k.strip_prefix("sk-hostile-") {
            v.push(("key core".into(), core.as_bytes()[..24].to_vec()));
        }
        v
    }

    /// Nothing secret in any file under the state dir, nor in the run's output.
    pub fn assert_no_leak(&self, r: &RunResult, extra: &[(String, Vec<u8>)]) {
        let mut files = Vec::new();
        all_bytes(&self.dir.join("runs"), &mut files);
        files.push((PathBuf::from("<eval run stdout>"), r.out.stdout.clone()));
        files.push((PathBuf::from("<eval run stderr>"), r.out.stderr.clone()));
        let mut needles = self.secrets();
        needles.extend(extra.iter().cloned());
        for (p, b) in &files {
            for (what, n) in &needles {
                assert!(!contains(b, n), "{} holds the {what}", p.display());
            }
        }
    }
}

/// `VmHWM` (peak resident set, kB) of a live process.
fn peak_rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Waits for `child`, killing it and failing "hung" after the guard. Also returns the peak
/// resident memory seen: `VmHWM` only grows, so the last reading before exit holds any spike.
pub fn wait_with_guard(mut child: std::process::Child) -> (Output, u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let pid = child.id();
    let waiter = std::thread::spawn(move || {
        let st = child.wait();
        let _ = tx.send(());
        st
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(HANG_GUARD_SECS);
    let mut peak = 0;
    let mut finished = false;
    while std::time::Instant::now() < deadline {
        if let Some(kb) = peak_rss_kb(pid) {
            peak = peak.max(kb);
        }
        if rx
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_ok()
        {
            finished = true;
            break;
        }
    }
    if !finished {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        let _ = waiter.join();
        panic!("eval run hung: still running after {HANG_GUARD_SECS} s; killed");
    }
    let status = waiter.join().unwrap().unwrap();
    let out = Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    };
    (out, peak)
}

impl RunResult {
    pub fn payloads(&self, kind: &str) -> Vec<Value> {
        payloads(&self.entries, kind)
    }

    /// The hostile arm's attempt outcomes.
    pub fn hostile_outcomes(&self) -> Vec<Value> {
        self.payloads("attempt_outcome")
            .into_iter()
            .filter(|o| o["arm"] == "hostile")
            .collect()
    }

    pub fn native_outcomes(&self) -> Vec<Value> {
        self.payloads("attempt_outcome")
            .into_iter()
            .filter(|o| o["arm"] == "native")
            .collect()
    }

    /// The run finished, the hostile attempt ran exactly once and ended as an outcome, not an
    /// infrastructure fault; nothing was rerun.
    pub fn assert_one_final_outcome(&self) -> Value {
        assert!(
            matches!(self.out.status.code(), Some(0 | 1)),
            "eval run exited {:?}: {}",
            self.out.status.code(),
            self.text
        );
        let outs = self.hostile_outcomes();
        assert_eq!(outs.len(), 1, "hostile outcomes: {outs:?}\n{}", self.text);
        let o = outs[0].clone();
        assert_ne!(o["outcome"], "infra_fault", "{o}");
        assert!(o["infra_fault"].is_null(), "{o}");
        assert!(
            self.payloads("rerun").is_empty(),
            "{:?}",
            self.payloads("rerun")
        );
        let started = self
            .payloads("attempt_started")
            .into_iter()
            .filter(|s| s["arm"] == "hostile")
            .count();
        assert_eq!(started, 1, "the hostile slot was redrawn");
        o
    }

    /// The payloads of `kind` belonging to the hostile attempt.
    pub fn hostile(&self, kind: &str) -> Vec<Value> {
        self.payloads(kind)
            .into_iter()
            .filter(|p| {
                p["attempt"]
                    .as_str()
                    .or_else(|| p["record"]["attempt_id"].as_str())
                    .is_some_and(|a| a.contains("-hostile-"))
            })
            .collect()
    }
}

/// The bytes of an artifact named in an outcome (`workspace`, `agent_log`, …), if stored.
pub fn artifact(dir: &Path, outcome: &Value, name: &str) -> Option<Vec<u8>> {
    let d = outcome["artifacts"][name].as_str()?;
    let hex = d.strip_prefix("sha256:")?;
    std::fs::read(dir.join(format!("runs/demo/artifacts/sha256/{}/{hex}", &hex[..2]))).ok()
}

/// Size of the ledger file (and its WAL) in bytes.
pub fn ledger_bytes(dir: &Path) -> u64 {
    ["ledger.sqlite", "ledger.sqlite-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join("runs/demo").join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// The host path mounted at `dest` in the running agent container of the hostile arm.
pub fn hostile_mount(project_dir: &Path, dest: &str) -> Option<PathBuf> {
    let identity = identity_of(project_dir);
    let o = Command::new("docker")
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
        .ok()?;
    for id in String::from_utf8_lossy(&o.stdout).lines() {
        let o = Command::new("docker")
            .args(["inspect", "--format", "{{json .Mounts}}", id])
            .output()
            .ok()?;
        let mounts: Value = serde_json::from_slice(&o.stdout).ok()?;
        for m in mounts.as_array()? {
            // The exact mount, or (for a design that mounts single files below `dest`) the
            // source of the first mount under it.
            let d = m["Destination"].as_str().unwrap_or_default();
            if d == dest || d.starts_with(&format!("{dest}/")) {
                return m["Source"].as_str().map(PathBuf::from);
            }
        }
    }
    None
}
