//! `eval-fixture-agent`: the deterministic stand-in harness used by tests and the demo.
//!
//! Reads the task prompt, calls the model through the shim's relay with plain HTTP/1.1 (OpenAI
//! chat; streaming with `stream_options.include_usage` or not, as the profile says), applies the
//! file edits the model answers with to the workspace, runs at most `max_turns` model calls, may
//! ask clarifying questions through `POST /_eval/clarify`, and writes its own metrics file.
//! Adversarial profiles also try to escape the container and record each attempt as a probe.
//!
//! Must never: connect to anything but 127.0.0.1, write outside the workspace except in probes,
//! or print a value read from the environment.

mod http;
mod probes;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use eval_fixture_core::answer;
use eval_fixture_core::metrics::{AGENT_DIR, AgentMetrics, METRICS_PATH};
use eval_fixture_core::profile::{ClarifyPolicy, Profile};
use eval_fixture_core::task::{FixtureTask, is_safe_relative, parse_prompt};
use serde_json::{Value, json};

struct Args {
    prompt: PathBuf,
    workspace: PathBuf,
    base_url: String,
    profile: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut prompt, mut workspace, mut base_url, mut profile) = (None, None, None, None);
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--prompt" => prompt = Some(PathBuf::from(v)),
            "--workspace" => workspace = Some(PathBuf::from(v)),
            "--base-url" => base_url = Some(v),
            "--profile" => profile = Some(PathBuf::from(v)),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        prompt: prompt.ok_or("--prompt is required")?,
        workspace: workspace.ok_or("--workspace is required")?,
        base_url: base_url.ok_or("--base-url is required")?,
        profile: profile.ok_or("--profile is required")?,
    })
}

fn log(msg: &str) {
    let _ = writeln!(std::io::stderr(), "eval-fixture-agent: {msg}");
}

struct Agent {
    profile: Profile,
    origin: http::Origin,
    workspace: PathBuf,
    metrics: AgentMetrics,
}

struct Reply {
    content: String,
    prompt_tokens: u64,
    completion_tokens: u64,
}

fn usage_of(v: &Value) -> Option<(u64, u64)> {
    let u = v.get("usage")?;
    Some((
        u.get("prompt_tokens")?.as_u64()?,
        u.get("completion_tokens")?.as_u64()?,
    ))
}

fn parse_reply(body: &[u8], stream: bool) -> Result<Reply, String> {
    let (content, usage) = if stream {
        let text = String::from_utf8_lossy(body);
        let mut content = String::new();
        let mut usage = None;
        for line in text.lines() {
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                break;
            }
            let v: Value =
                serde_json::from_str(data).map_err(|e| format!("bad stream chunk: {e}"))?;
            if let Some(c) = v
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
            {
                content.push_str(c);
            }
            if let Some(u) = usage_of(&v) {
                usage = Some(u);
            }
        }
        (content, usage)
    } else {
        let v: Value = serde_json::from_slice(body).map_err(|e| format!("bad response: {e}"))?;
        let content = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        (content, usage_of(&v))
    };
    let (prompt_tokens, completion_tokens) = usage.ok_or("the response carried no usage")?;
    Ok(Reply {
        content,
        prompt_tokens,
        completion_tokens,
    })
}

impl Agent {
    fn call_model(&mut self, messages: &[Value]) -> Result<Reply, String> {
        let p = &self.profile;
        let model = p.adversarial.model_override.as_ref().unwrap_or(&p.model);
        let max_tokens = p.adversarial.max_tokens_override.unwrap_or(p.max_tokens);
        let mut body = json!({
            "model": model, "messages": messages, "temperature": p.temperature,
            "max_tokens": max_tokens, "stream": p.stream,
        });
        if p.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        let path = format!("{}/chat/completions", self.origin.prefix);
        let resp = http::post_json(
            &self.origin,
            &path,
            body.to_string().as_bytes(),
            Duration::from_secs(600),
        )
        .map_err(|e| format!("model call failed: {e}"))?;
        if resp.status != 200 {
            return Err(format!(
                "model call refused with HTTP {}: {}",
                resp.status,
                String::from_utf8_lossy(&resp.body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
        let reply = parse_reply(&resp.body, p.stream)?;
        self.metrics.model_turns += 1;
        self.metrics.prompt_tokens += reply.prompt_tokens;
        self.metrics.completion_tokens += reply.completion_tokens;
        self.metrics.total_tokens += reply.prompt_tokens + reply.completion_tokens;
        Ok(reply)
    }

    fn ask(&mut self, question: &str) -> Option<String> {
        let body = json!({"question": question}).to_string();
        let resp = http::post_json(
            &self.origin,
            "/_eval/clarify",
            body.as_bytes(),
            Duration::from_secs(600),
        )
        .ok()?;
        self.metrics.clarification_questions += 1;
        if resp.status != 200 {
            return None;
        }
        let v: Value = serde_json::from_slice(&resp.body).ok()?;
        v.get("answer").and_then(Value::as_str).map(str::to_owned)
    }

    fn apply(&self, edit: &answer::Edit) -> Result<(), String> {
        if !is_safe_relative(&edit.path)
            || edit.path == AGENT_DIR
            || edit.path.starts_with(&format!("{AGENT_DIR}/"))
        {
            return Err(format!("refusing edit of {:?}", edit.path));
        }
        let path = self.workspace.join(&edit.path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        fs::write(&path, &edit.content).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn system_message(&self) -> String {
        let p = &self.profile;
        let mut s = format!(
            "You are the eval fixture agent.\nfixture-skill: {}\nfixture-edits-per-turn: {}\n",
            p.skill, p.edits_per_turn
        );
        if p.plan_turn {
            s.push_str("fixture-plan: yes\n");
        }
        if p.padding_tokens > 0 {
            s.push_str("fixture-padding: ");
            s.push_str(&"pad ".repeat(p.padding_tokens as usize));
            s.push('\n');
        }
        s
    }

    fn questions(&mut self, task: &FixtureTask) -> Vec<Value> {
        let mut out = Vec::new();
        let policy = self.profile.clarify;
        if policy == ClarifyPolicy::Never {
            return out;
        }
        for r in &task.requirements {
            if self.metrics.clarification_questions >= u64::from(self.profile.max_questions) {
                break;
            }
            let question = match (&r.question, r.ambiguous, policy) {
                (Some(q), true, _) => q.clone(),
                (_, false, ClarifyPolicy::Always) => format!("Is requirement {} clear?", r.id),
                _ => continue,
            };
            match self.ask(&question) {
                Some(a) if r.ambiguous => out.push(
                    json!({"role": "user", "content": format!("fixture-answer {}:\n{a}", r.id)}),
                ),
                Some(_) => {}
                None => break,
            }
        }
        out
    }

    fn run(&mut self, prompt: &str) -> Result<(), String> {
        let task = parse_prompt(prompt).ok();
        let mut messages = vec![
            json!({"role": "system", "content": self.system_message()}),
            json!({"role": "user", "content": prompt}),
        ];
        if let Some(task) = &task {
            let answers = self.questions(task);
            messages.extend(answers);
        }
        // The turn bound is per harness run: a later round of a multi-round attempt starts
        // its own count (its metrics carry on from the earlier rounds').
        let mut turns = 0u64;
        while turns < u64::from(self.profile.max_turns) {
            turns += 1;
            let reply = self.call_model(&messages)?;
            let parsed = answer::parse(&reply.content).map_err(|e| e.to_string())?;
            for edit in &parsed.edits {
                self.apply(edit)?;
            }
            messages.push(json!({"role": "assistant", "content": reply.content}));
            if parsed.done {
                self.metrics.finished = true;
                break;
            }
            messages.push(json!({"role": "user", "content": "continue"}));
        }
        for _ in 0..self.profile.adversarial.repeat_calls {
            self.call_model(&messages)?;
        }
        Ok(())
    }
}

fn write_metrics(workspace: &Path, metrics: &AgentMetrics) {
    let path = workspace.join(METRICS_PATH);
    let result = fs::create_dir_all(workspace.join(AGENT_DIR)).and_then(|()| {
        fs::write(
            &path,
            serde_json::to_vec(metrics).map_err(std::io::Error::other)?,
        )
    });
    if let Err(e) = result {
        log(&format!("cannot write {}: {e}", path.display()));
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            log(&e);
            return ExitCode::from(2);
        }
    };
    let profile_path = args.profile.display().to_string();
    let profile = match fs::read_to_string(&args.profile)
        .map_err(|e| format!("{profile_path}: {e}"))
        .and_then(|t| Profile::parse(&t, &profile_path).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            log(&e);
            return ExitCode::from(2);
        }
    };
    let prompt = match fs::read_to_string(&args.prompt) {
        Ok(p) => p,
        Err(e) => {
            log(&format!("{}: {e}", args.prompt.display()));
            return ExitCode::from(2);
        }
    };
    let origin = match http::parse_base_url(&args.base_url) {
        Ok(o) => o,
        Err(e) => {
            log(&e);
            return ExitCode::from(2);
        }
    };
    let mut agent = Agent {
        metrics: AgentMetrics {
            format: 1,
            profile: profile.name.clone(),
            ..AgentMetrics::default()
        },
        profile,
        origin,
        workspace: args.workspace.clone(),
    };
    // A later round (`EVAL_ROUND` > 1, set by the shim) continues the session: the metrics
    // file goes on counting what the earlier rounds used, so the cross-check covers them all.
    let round: u32 = std::env::var("EVAL_ROUND")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    if round > 1
        && let Some(before) = fs::read(args.workspace.join(METRICS_PATH))
            .ok()
            .and_then(|b| serde_json::from_slice::<AgentMetrics>(&b).ok())
    {
        agent.metrics = AgentMetrics {
            finished: false,
            error: None,
            ..before
        };
    }
    let probes = probes::run(&agent.profile.adversarial, &args.workspace);
    agent.metrics.probes.extend(probes);
    if agent.profile.adversarial.sleep_secs > 0 {
        std::thread::sleep(Duration::from_secs(agent.profile.adversarial.sleep_secs));
    }
    let result = agent.run(&prompt);
    if let Err(e) = &result {
        log(e);
        agent.metrics.error = Some(e.clone());
    }
    let skew = agent.profile.adversarial.misreport_tokens;
    agent.metrics.total_tokens = agent.metrics.total_tokens.saturating_add_signed(skew);
    write_metrics(&args.workspace, &agent.metrics);
    if result.is_ok() && agent.metrics.finished {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
