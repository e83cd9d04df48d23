//! The official `openai` Python package talks to the proxy like any harness would.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;
use eval_proxy::*;

fn python() -> String {
    if let Ok(p) = std::env::var("EVAL_TEST_PYTHON")
        && !p.is_empty()
    {
        return p;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/ensure-python.sh"))
        .output()
        .expect("run scripts/ensure-python.sh");
    assert!(
        out.status.success(),
        "ensure-python.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

const SCRIPT: &str = r#"
import json, sys, openai
client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
r = client.chat.completions.create(
    model=sys.argv[3], messages=[{"role": "user", "content": "usage:21:8"}],
    temperature=0, extra_headers={"x-test-script": "openai-json"})
out = {"plain": r.choices[0].message.content, "plain_usage": r.usage.prompt_tokens}
chunks = client.chat.completions.create(
    model=sys.argv[3], messages=[{"role": "user", "content": "usage:34:13"}],
    stream=True, extra_headers={"x-test-script": "openai-stream"})
text, saw_usage = "", False
for c in chunks:
    if c.usage is not None:
        saw_usage = True
    for ch in c.choices:
        text += ch.delta.content or ""
out["streamed"] = text
out["stream_saw_usage"] = saw_usage
try:
    client.chat.completions.create(model="other-model", messages=[{"role": "user", "content": "x"}])
except openai.PermissionDeniedError as e:
    out["refused"] = e.status_code
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_client_works_through_the_proxy() {
    let py = python();
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let meter = dir.path().join("meter.jsonl");
    let sink = std::sync::Arc::new(JsonlSink::open(&meter).unwrap());
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink);
    cfg.tcp_listen = Some("127.0.0.1:0".parse().unwrap());
    let proxy = Proxy::start(cfg).await.unwrap();
    let reg = proxy
        .register_attempt(spec(
            "py",
            Listen::Token,
            {
                // The client sends `temperature` on top of the default list.
                let mut c = Contract::model_only(MODEL);
                c.allowed_params = Some(
                    ["messages", "stream", "stream_options", "temperature"]
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                );
                c
            },
            Budget::default(),
        ))
        .await
        .unwrap();
    let base = format!("http://{}/v1", reg.tcp_addr.unwrap());
    let token = reg.token.clone().unwrap();
    let out = tokio::process::Command::new(&py)
        .arg("-c")
        .arg(SCRIPT)
        .arg(&base)
        .arg(&token)
        .arg(MODEL)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "python failed:\n{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["plain"], "usage:21:8");
    assert_eq!(v["plain_usage"], 21);
    assert_eq!(v["streamed"], "Helusage:34:13lo there");
    assert_eq!(
        v["stream_saw_usage"], false,
        "the proxy's usage request leaked into the client's stream"
    );
    assert_eq!(v["refused"], 403);
    proxy
        .close_attempt_and_wait("py", Duration::from_secs(5))
        .await
        .unwrap();
    proxy.shutdown(Duration::from_secs(5)).await;
    let lines = std::fs::read_to_string(&meter).unwrap();
    let recs: Vec<CallRecord> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0].usage.as_ref().unwrap().input_tokens, 21);
    assert_eq!(recs[1].usage.as_ref().unwrap().input_tokens, 34);
    assert_eq!(recs[1].usage.as_ref().unwrap().output_tokens, 13);
    assert_eq!(recs[2].outcome, CallOutcome::ContractViolation);
    for s in up.seen() {
        assert_eq!(
            s.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    for hay in [stdout.as_bytes(), stderr.as_bytes(), lines.as_bytes()] {
        assert!(!contains(hay, KEY));
    }
}
