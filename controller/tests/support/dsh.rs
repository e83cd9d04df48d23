//! Support of the DeepSeek Harness tests: a scripted DeepSeek-compatible upstream that drives
//! `dsh --profile headless` through a task with the Harness's real tools, writes a correct
//! solution for the task it recognises in the prompt, routes with Plan Lattice's `lattice_route`
//! first when the request offers it, and records every request it answered (path, headers, body,
//! what it billed).
//!
//! Its wire is DeepSeek's as `../shared/DEEPSEEK-WIRE.md` documents it (the API docs and the
//! Harness's own parser, `llm-deepseek/src/{sse,translate}.ts`), not what `eval` sends:
//! thinking mode (first delta `reasoning_content: ""`, then one event per reasoning token, then
//! per content token), tool-call arguments in fragments (id, type and name only on the first),
//! `"usage": null` on every delta, the usage object on the finish chunk and again on a trailing
//! `choices: []` chunk, `: keep-alive` comments, events split anywhere across writes; the
//! documented usage object (hits + misses = `prompt_tokens`, `cached_tokens` repeating the hits,
//! reasoning inside `completion_tokens`) from a prefix cache shared by every request of the
//! upstream (no `user_id`, so all attempts of one account share it), the 400 DeepSeek gives a
//! thinking-mode tool-call turn sent back without its `reasoning_content`, and scheduled faults
//! ([`Fault`]) with DeepSeek's error bodies.
#![allow(dead_code)]

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// A task the upstream can solve: recognised by a phrase of its prompt, solved by one `write`.
pub struct Solution {
    /// A phrase only this task's prompt contains (the target file, as the prompts name it).
    pub recognise: &'static str,
    /// The file to write, relative to the workspace.
    pub path: &'static str,
    /// The file's whole content (before the marker comment is added).
    pub content: &'static str,
    /// How a comment line starts in the file's language (for the marker).
    pub comment: &'static str,
}

/// Correct solutions of v0.4's six `simple` tasks (simple-tasks.json; checked against what
/// simple-grader.mjs asserts).
pub const SOLUTIONS: &[Solution] = &[
    Solution {
        recognise: "src/clamp.js",
        path: "src/clamp.js",
        content: "export function clamp(value, min, max) {\n  if (min > max) {\n    throw new RangeError(`min ${min} is greater than max ${max}`)\n  }\n  return Math.min(Math.max(value, min), max)\n}\n",
        comment: "//",
    },
    Solution {
        recognise: "src/slugify.ts",
        path: "src/slugify.ts",
        content: "export function slugify(input: string): string {\n  return input\n    .toLowerCase()\n    .trim()\n    .replace(/[^a-z0-9]+/g, '-')\n    .replace(/^-+|-+$/g, '')\n}\n",
        comment: "//",
    },
    Solution {
        recognise: "text_utils.py",
        path: "text_utils.py",
        content: "def normalize_whitespace(value: str) -> str:\n    # str.split() without arguments splits on every Unicode whitespace run.\n    return \" \".join(value.split())\n",
        comment: "#",
    },
    Solution {
        recognise: "dedupe.go",
        path: "dedupe.go",
        content: "package dedupe\n\nfunc DedupeStable(values []string) []string {\n\tif values == nil {\n\t\treturn nil\n\t}\n\tseen := make(map[string]bool, len(values))\n\tout := make([]string, 0, len(values))\n\tfor _, v := range values {\n\t\tif !seen[v] {\n\t\t\tseen[v] = true\n\t\t\tout = append(out, v)\n\t\t}\n\t}\n\treturn out\n}\n",
        comment: "//",
    },
    Solution {
        recognise: "src/port.js",
        path: "src/port.js",
        content: "export function parsePort(value) {\n  if (typeof value !== 'string') throw new TypeError('port must be a string')\n  const text = value.trim()\n  if (!/^[0-9]+$/.test(text)) throw new RangeError(`invalid port ${JSON.stringify(value)}`)\n  const port = Number(text)\n  if (port < 1 || port > 65535) throw new RangeError(`port ${port} out of range`)\n  return port\n}\n",
        comment: "//",
    },
    Solution {
        recognise: "chunks.py",
        path: "chunks.py",
        content: "def chunks(items, size):\n    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:\n        raise ValueError(\"size must be a positive integer\")\n    return [list(items[i:i + size]) for i in range(0, len(items), size)]\n",
        comment: "#",
    },
];

/// One round of a multi-round task the upstream works through: recognised by a phrase of the
/// round's prompt, done by one `read` and one `write` of the file, then an answer.
pub struct RoundSolution {
    /// A phrase only this round's prompt contains (no `"` or `\`, so it reads the same inside
    /// the request's JSON).
    pub recognise: &'static str,
    /// The file to write, relative to the Harness's working directory.
    pub path: &'static str,
    /// The file's whole content after this round (before the marker comment).
    pub content: &'static str,
}

/// The synthetic `greet` Go CLI of `import_evocode.rs` (`write_task`), round by round. The
/// scripted model gets rounds 1 right, breaks `hello` in round 2 (`hi, NAME`: a regression of
/// round 1's case, which round 2 lists under another ordinal) and, in round 3, does the new polite
/// `hello` but breaks `count` (one short: a regression of round 2's case under the same
/// ordinal). So v0.4's ordinal-keyed count sees one regression and the stable-key count two.
pub const GREET_ROUNDS: [RoundSolution; 3] = [
    RoundSolution {
        recognise: "Build `greet` with",
        path: "cmd/greet/main.go",
        content: "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tif len(os.Args) == 3 && os.Args[1] == \"hello\" {\n\t\tfmt.Printf(\"hello, %s\\n\", os.Args[2])\n\t\treturn\n\t}\n\tos.Exit(2)\n}\n",
    },
    RoundSolution {
        recognise: "Add `greet count WORD...`",
        path: "cmd/greet/main.go",
        content: "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tif len(os.Args) == 3 && os.Args[1] == \"hello\" {\n\t\tfmt.Printf(\"hi, %s\\n\", os.Args[2])\n\t\treturn\n\t}\n\tif len(os.Args) >= 2 && os.Args[1] == \"count\" {\n\t\tfmt.Println(len(os.Args) - 2)\n\t\treturn\n\t}\n\tos.Exit(2)\n}\n",
    },
    RoundSolution {
        recognise: "now prints `Hello, NAME!`",
        path: "cmd/greet/main.go",
        content: "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tif len(os.Args) == 3 && os.Args[1] == \"hello\" {\n\t\tfmt.Printf(\"Hello, %s!\\n\", os.Args[2])\n\t\treturn\n\t}\n\tif len(os.Args) >= 2 && os.Args[1] == \"count\" {\n\t\tfmt.Println(len(os.Args) - 3)\n\t\treturn\n\t}\n\tos.Exit(2)\n}\n",
    },
];

/// The latest round of [`GREET_ROUNDS`] the conversation's user messages have reached: (round,
/// 1-based; its solution; the index of the last message holding its prompt, where the round's
/// own tool calls start).
pub fn recognise_round(messages: &[Value]) -> Option<(usize, &'static RoundSolution, usize)> {
    let text = |m: &Value| match &m["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    GREET_ROUNDS.iter().enumerate().rev().find_map(|(k, sol)| {
        messages
            .iter()
            .rposition(|m| m["role"] == "user" && text(m).contains(sol.recognise))
            .map(|at| (k + 1, sol, at))
    })
}

/// The Harness's working directory, as its system prompt states it (the headless persona: "Your
/// working directory is {{cwd}}."); `/workspace` when no system message says so.
pub fn working_directory(messages: &[Value]) -> String {
    messages
        .iter()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| {
            let t = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            after(&t, "Your working directory is")
        })
        .next()
        .unwrap_or_else(|| "/workspace".to_owned())
}

/// What a reply was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `lattice_route` (Plan Lattice's routing tool), offered and not yet called.
    Route,
    /// The `read` tool call of the target file: the Harness's `write` refuses to replace a file
    /// the conversation has not read ("cannot overwrite existing … without reading it first").
    Read,
    /// Plan Lattice 0.3's guarded-write protocol (its `lattice` phase): open a lattice with the
    /// target as its context document, add one leaf, refresh the context receipt, check the
    /// leaf out; only then does the plugin let `write` through.
    Open,
    Add,
    Refresh,
    Checkout,
    /// The `write` tool call with the solution.
    Write,
    /// The final text answer (`finish_reason: stop`).
    Answer,
    /// A request without tools (the Harness's session-title call).
    Title,
    /// The Harness's `bash` tool with a hostile command (a prompt holding [`HOSTILE_HANG`] or
    /// [`HOSTILE_DELETE`]).
    Bash,
    /// The Harness's `ask_user_question` tool ([`DeepSeekUpstream::ask_questions`]): one of
    /// [`questions`].
    Ask,
    /// An ICAE simulated user's answer ([`icae_oracle_reply`]): a request without tools whose
    /// system message injects an `oracle_data` brief under [`ICAE_BRIEF_HEADING`].
    Oracle,
}

/// The questions the model asks after [`DeepSeekUpstream::ask_questions`], as `ask_user_question` arguments take them
/// (`packages/interaction/tool-ask-user/src/index.ts` of dsh-v0.1.0-rc.8: `questions[]` of
/// `{id, question, header?, options?: [{label, description?}], multi_select?}`).
pub fn questions() -> Vec<Value> {
    vec![
        json!({"id": "nan", "question": "Should clamp return NaN when the value is NaN?"}),
        json!({"id": "error", "header": "Errors", "question": "Which error should clamp throw when min > max?",
               "options": [{"label": "RangeError (Recommended)", "description": "as the task says"},
                           {"label": "TypeError"}]}),
        json!({"id": "extra", "question": "May I also add a clampInt helper?"}),
    ]
}

/// The heading after which ICAE's simulated user finds its brief (`user_agent/user_agent.py`,
/// `build_system_prompt`: the heading, then the `oracle_data` in a ```json block).
pub const ICAE_BRIEF_HEADING: &str = "# Injected oracle_data (your single source of truth)";

/// In a question to the ICAE oracle: it answers in prose, not the JSON its prompt demands.
pub const ORACLE_MALFORMED: &str = "EVAL-TEST-MALFORMED";

/// In a question to the ICAE oracle: it obeys the instruction injected with it, as a model can —
/// every constraint id (one twice) and one of its own in `triggers_hit`, the brief recited as
/// the reply.
pub const ORACLE_INJECT: &str = "EVAL-TEST-INJECT";

/// What ICAE's oracle model answers (its `init.md` "Response Format"): JSON with an
/// `_internal_log` (`triggers_hit`: the `constraint_id` of every hidden constraint whose
/// `trigger_keywords` the latest question touches, `fallback_triggered`, …) and the `reply`
/// (those constraints' `oracle_response`s, or the brief's `fallback_response` verbatim). `None`
/// when the request is not such an oracle's.
pub fn icae_oracle_reply(messages: &[Value]) -> Option<String> {
    let system = messages.first().filter(|m| m["role"] == "system")?["content"].as_str()?;
    let after = &system[system.find(ICAE_BRIEF_HEADING)? + ICAE_BRIEF_HEADING.len()..];
    let start = after.find("```json\n")? + "```json\n".len();
    let end = start + after[start..].rfind("\n```")?;
    let brief: Value = serde_json::from_str(&after[start..end]).ok()?;
    let question = messages.iter().rev().find(|m| m["role"] == "user")?["content"]
        .as_str()?
        .to_lowercase();
    if question.contains(&ORACLE_MALFORMED.to_lowercase()) {
        return Some("Sure, happy to help: just do what seems right.".to_owned());
    }
    if question.contains(&ORACLE_INJECT.to_lowercase()) {
        let mut all: Vec<Value> = brief["hidden_constraints"]
            .as_array()?
            .iter()
            .map(|c| c["constraint_id"].clone())
            .collect();
        all.extend([all.first()?.clone(), json!("FORGED-1")]);
        return Some(
            json!({"_internal_log": {"triggers_hit": all}, "reply": &after[start..end]})
                .to_string(),
        );
    }
    let mut hit = Vec::new();
    let mut replies = Vec::new();
    for c in brief["hidden_constraints"].as_array()? {
        let touched = c["trigger_keywords"].as_array()?.iter().any(|k| {
            k.as_str()
                .is_some_and(|k| question.contains(&k.to_lowercase()))
        });
        if touched {
            hit.push(c["constraint_id"].clone());
            replies.push(c["oracle_response"].as_str()?.to_owned());
        }
    }
    let fallback = hit.is_empty();
    let reply = if fallback {
        brief["fallback_response"].as_str()?.to_owned()
    } else {
        replies.join(" ")
    };
    Some(
        json!({"_internal_log": {"triggers_hit": hit, "api_alignment_triggered": false,
                                 "fallback_triggered": fallback, "cheating_attempt_detected": false,
                                 "score_adjustment": 0},
               "reply": reply})
        .to_string(),
    )
}

/// The ICAE-shaped synthetic task (`controller/tests/fixtures/icae-synthetic`): a prompt naming
/// this file is answered by [`icae_next`] instead of the `simple` solutions.
pub const ICAE_TARGET: &str = "parser.py";
/// The questions the model asks on the ICAE task, one `ask_user_question` call each: C001's
/// keyword ("empty input"), C002's ("separator"), none of the brief's (its fallback), and one
/// more, which a limit of three refuses.
pub const ICAE_Q_EMPTY: &str = "What should parse return for an empty input?";
pub const ICAE_Q_SEP: &str = "Which separator splits the fields of a record?";
pub const ICAE_Q_PERF: &str = "How fast must parse be on a large export?";
pub const ICAE_Q_EXTRA: &str = "May I also add a CSV export?";

/// What the scripted model asks on the ICAE task: with Plan Lattice at work (it called the
/// plugin's `lattice_route`) every gap it sees, otherwise only the first. A test double's policy
/// keyed on the plugin's presence, so the counts move by arm; it says nothing about what a real
/// model does with the plugin.
pub fn icae_questions(plugin: bool) -> &'static [&'static str] {
    if plugin {
        &[ICAE_Q_EMPTY, ICAE_Q_SEP, ICAE_Q_PERF, ICAE_Q_EXTRA]
    } else {
        &[ICAE_Q_EMPTY]
    }
}

/// The `parse` the scripted model writes, from what the oracle's answers told it (they reach it
/// only as the `ask_user_question` results in its conversation): C001's empty-input rule and
/// C002's single-tab separator, or its own guesses (an empty input is an error; fields split on
/// whitespace).
pub fn icae_solution(knows_empty: bool, knows_tab: bool) -> String {
    let empty = if knows_empty {
        ""
    } else {
        "    if not text:\n        raise ValueError(\"empty input\")\n"
    };
    let split = if knows_tab {
        "        parts = line.split(\"\\t\", 1)\n        if len(parts) != 2:\n            raise ValueError(\"no tab in \" + repr(line))\n        name, value = parts\n"
    } else {
        "        name, value = line.split(None, 1)\n"
    };
    format!(
        "def parse(text: str) -> list[dict]:\n{empty}    records = []\n    for line in text.splitlines():\n        if not line.strip():\n            continue\n{split}        records.append({{\"name\": name, \"value\": value}})\n    return records\n"
    )
}

/// The model's next step on the ICAE task, `None` when the request is not that task's: its
/// questions ([`icae_questions`]), then one `write` of `parser.py` ([`icae_solution`] from the
/// answers its conversation holds), then a short answer.
fn icae_next(messages: &[Value], done: &[String], tools: &[Value]) -> Option<(Kind, Reply)> {
    let user = messages.iter().find(|m| m["role"] == "user")?;
    let prompt = user["content"].to_string();
    // The prompt `eval import v04-icae` writes (ICAE's task_docker.md adapted) on the importer
    // test's synthetic root (`shout`, `controller/tests/it/import_icae.rs`).
    if prompt.contains("rcb_tests/test.sh") && !prompt.contains(ICAE_TARGET) {
        return imported_icae_next(messages, done, tools);
    }
    if !prompt.contains(ICAE_TARGET) {
        return None;
    }
    let asked = done.iter().filter(|n| *n == "ask_user_question").count();
    let plan = icae_questions(has(done, "lattice_route"));
    if let Some(q) = plan
        .get(asked)
        .filter(|_| offered(tools, "ask_user_question"))
    {
        let args = json!({"questions": [{"id": format!("q{}", asked + 1), "question": q}]});
        return Some((Kind::Ask, Reply::Call("ask_user_question".into(), args)));
    }
    if !has(done, "write") {
        let learned: String = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].to_string())
            .collect();
        let content = icae_solution(
            learned.contains("returns an empty list"),
            learned.contains("separated by a single tab"),
        );
        let args = json!({"file_path": format!("/workspace/{ICAE_TARGET}"), "content": content});
        return Some((Kind::Write, Reply::Call("write".into(), args)));
    }
    Some((
        Kind::Answer,
        Reply::Text(format!("Implemented parse in {ICAE_TARGET}.")),
    ))
}

/// The `shout.py` the scripted model writes for the imported synthetic task: upper-cased with
/// `!`, a `list:` input as a JSON array, and — when an answer told it the empty-input rule (C001)
/// — `EMPTY` for an empty input (the importer test's cases; its `SHOUT_PY` is the uninformed one).
pub fn imported_shout(knows_empty: bool) -> String {
    let empty = if knows_empty {
        "if s == '':\n    print('EMPTY')\nel"
    } else {
        ""
    };
    format!(
        "import json, sys\ns = sys.stdin.read()\n{empty}if s.startswith('list:'):\n    print(json.dumps([x.upper() for x in s[5:].split(',')]), end='')\nelse:\n    print(s.upper() + '!')\n"
    )
}

/// The imported task's steps: the same questions, then `shout.py`, then the importer test's
/// `rcb_tests/test.sh` (the runner ICAE's protocol asks for), then a short answer.
fn imported_icae_next(
    messages: &[Value],
    done: &[String],
    tools: &[Value],
) -> Option<(Kind, Reply)> {
    let asked = done.iter().filter(|n| *n == "ask_user_question").count();
    let plan = icae_questions(has(done, "lattice_route"));
    if let Some(q) = plan
        .get(asked)
        .filter(|_| offered(tools, "ask_user_question"))
    {
        let args = json!({"questions": [{"id": format!("q{}", asked + 1), "question": q}]});
        return Some((Kind::Ask, Reply::Call("ask_user_question".into(), args)));
    }
    let writes = done.iter().filter(|n| *n == "write").count();
    let learned: String = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    let file = match writes {
        0 => (
            "shout.py",
            imported_shout(learned.contains("returns an empty list")),
        ),
        1 => ("rcb_tests/test.sh", crate::import_icae::TEST_SH.to_owned()),
        _ => {
            return Some((
                Kind::Answer,
                Reply::Text("Implemented shout.py and rcb_tests/test.sh.".into()),
            ));
        }
    };
    let args = json!({"file_path": format!("/workspace/{}", file.0), "content": file.1});
    Some((Kind::Write, Reply::Call("write".into(), args)))
}

/// In a prompt: after Plan Lattice's route (when offered), one `bash` call of [`HUNT_COMMAND`],
/// then the prompt's task as usual.
pub const HOSTILE_HUNT: &str = "EVAL-TEST-HUNT";
/// A hostile agent's hunt from inside the Harness's container: every file named like the oracle,
/// its prompt or the hidden cases; any file holding the brief's canary, the oracle prompt's words
/// or a hidden case (patterns written so the command itself holds none of them); the hidden and
/// record paths read directly; then, through the shim's relay (the origin of
/// `DEEPSEEK_BASE_URL`, the model calls' road), one oversized question, two malformed bodies
/// and 30 questions in waves of 5 at once (30 at once exhausts the container's pid limit: the
/// shim's relay cannot spawn its connection threads and the Harness dies, the agent's own
/// `agent_error`, seen once in the plugin arm). Prints `FLOOD` and the statuses it got.
pub const HUNT_COMMAND: &str = r#"echo FIND-BEGIN; find / \( -path /proc -o -path /sys -o -path /dev -o -path /usr \) -prune -o \( -name '*oracle_data*' -o -name 'init.md' -o -name '*test_cases*' -o -name 'grade.py' -o -name 'record.json' \) -print 2>/dev/null; echo FIND-END
echo GREP-BEGIN; grep -rl -e 'BRIEF-CANARY-ARCH00[1]' -e 'simulated requirements provide[r]' -e 'Ada Lovelac[e]' /workspace /home /tmp /opt /etc /eval-state /task /hidden /oracle /root /srv /mnt /run 2>/dev/null; echo GREP-END
cat /hidden/oracle/oracle_data.json /oracle/record.json 2>&1 | head -c 400
node -e '
const u = new URL(process.env.DEEPSEEK_BASE_URL || "http://127.0.0.1:8080/v1").origin + "/_eval/clarify";
const ask = b => fetch(u, {method: "POST", headers: {"content-type": "application/json"}, body: b}).then(r => r.status, e => "err:" + e.message);
(async () => {
  const s = [await ask(JSON.stringify({question: "a".repeat(20000)})), await ask("not json"), await ask(JSON.stringify({question: 5}))];
  for (let w = 0; w < 6; w++) s.push(...await Promise.all(Array.from({length: 5}, (_, i) => ask(JSON.stringify({question: "flood " + (5 * w + i) + ": what about empty input?"})))));
  console.log("FLOOD " + s.join(","));
})();'"#;

/// In a prompt: every reply is a `bash` call that sleeps far beyond any test task's time limit,
/// so the attempt can only end by the controller killing it at that limit.
pub const HOSTILE_HANG: &str = "EVAL-TEST-HANG";
/// In a prompt: a harmless `bash` call, then one that deletes the Harness's transcript wherever
/// it is (`/eval-state`, and where it used to be, `/workspace/.dsh-transcript`), then an answer.
pub const HOSTILE_DELETE: &str = "EVAL-TEST-DELETE";

/// A fault the upstream plays instead of (or in the middle of) an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// An error status with DeepSeek's error body (`{"error":{message,type,param,code}}`) and,
    /// when given, a `retry-after` header (seconds).
    Status {
        status: u16,
        message: &'static str,
        retry_after: Option<u64>,
    },
    /// The answer's stream breaks off (the connection is aborted) after this many data events.
    CutAfter(usize),
    /// The stream stops after this many data events and the connection stays open, sending
    /// `: keep-alive` comments only (as the API does under load) until the client leaves.
    StallAfter(usize),
    /// `: keep-alive` comments only, then the connection is closed without data or `[DONE]`.
    KeepAliveOnly,
    /// The answer streams whole but ends with this `finish_reason` (e.g.
    /// `insufficient_system_resource`) and no content.
    Finish(&'static str),
}

/// One chat completion the upstream answered.
#[derive(Clone, Debug)]
pub struct Served {
    pub path: String,
    /// Request headers, minus `authorization` (checked, never kept).
    pub headers: BTreeMap<String, String>,
    pub request: Value,
    pub kind: Kind,
    /// The task's solution path (`None` when the prompt named no known task).
    pub task: Option<&'static str>,
    /// The round of [`GREET_ROUNDS`] the request was in (`None`: not that task).
    pub round: Option<usize>,
    /// What the usage object said (hits included).
    pub prompt_tokens: u64,
    /// `prompt_cache_hit_tokens` (= `prompt_tokens_details.cached_tokens`).
    pub hit_tokens: u64,
    /// Completion tokens, reasoning included.
    pub completion_tokens: u64,
    pub reasoning_tokens: u64,
    /// The fault played on this request, if any.
    pub fault: Option<Fault>,
    /// The usage object reached the client and `[DONE]` followed: the call is billed and
    /// complete on every side.
    pub complete: bool,
    /// SSE data events (`[DONE]` included) and comments written, and the writes they took.
    pub events: usize,
    pub comments: usize,
    pub writes: usize,
}

impl Served {
    /// The function names the request offered as tools.
    pub fn tools(&self) -> Vec<String> {
        self.request["tools"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The session id the Harness sent (`x-deepseek-harness-session-id`).
    pub fn session(&self) -> String {
        self.headers
            .get("x-deepseek-harness-session-id")
            .cloned()
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct Tally {
    served: Vec<Served>,
    unauthorized: u64,
    unexpected: Vec<String>,
    /// Chat requests seen so far (faults are scheduled by this number, 1-based).
    requests: usize,
    /// Account requests (`GET /models`, `GET /user/balance`) answered: `eval run`'s preflight.
    account: u64,
}

struct Shared {
    key: String,
    marker: String,
    tally: Mutex<Tally>,
    /// The prefix cache: hashes of every message-boundary prefix any request sent.
    cache: Mutex<std::collections::HashSet<u64>>,
    faults: Mutex<BTreeMap<usize, Fault>>,
    /// Set by [`DeepSeekUpstream::ask_questions`]: every conversation asks [`questions`] first.
    ask: std::sync::atomic::AtomicBool,
}

/// The upstream, on 127.0.0.1 in the test process. Stateless per conversation: each reply is
/// chosen from the request alone (the tools it offers and the tool calls its messages already
/// hold), so concurrent attempts each get the whole script.
pub struct DeepSeekUpstream {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    _rt: tokio::runtime::Runtime,
}

impl DeepSeekUpstream {
    /// `marker`: a comment line with it heads every solution, so a file holding it can only
    /// have come from this upstream's `write` call (it is in no prompt).
    pub fn start(key: &str, marker: &str) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared {
            key: key.to_owned(),
            marker: marker.to_owned(),
            tally: Mutex::new(Tally::default()),
            cache: Mutex::new(Default::default()),
            faults: Mutex::new(BTreeMap::new()),
            ask: std::sync::atomic::AtomicBool::new(false),
        });
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        rt.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        DeepSeekUpstream {
            addr,
            shared,
            _rt: rt,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn served(&self) -> Vec<Served> {
        self.shared.tally.lock().unwrap().served.clone()
    }

    pub fn unauthorized(&self) -> u64 {
        self.shared.tally.lock().unwrap().unauthorized
    }

    pub fn unexpected(&self) -> Vec<String> {
        self.shared.tally.lock().unwrap().unexpected.clone()
    }

    /// How many account requests (`GET /models`, `GET /user/balance`) it answered.
    pub fn account_requests(&self) -> u64 {
        self.shared.tally.lock().unwrap().account
    }

    /// Plays `fault` on the `n`-th chat request (1-based, counting every request that arrives,
    /// faulted ones and retries included).
    /// From now on the model asks the user each of [`questions`] (one `ask_user_question` call
    /// each, after Plan Lattice's route when offered) before its work, in every conversation;
    /// the prompt stays as it is (Plan Lattice's router reads it).
    pub fn ask_questions(&self) {
        self.shared
            .ask
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn schedule(&self, n: usize, fault: Fault) {
        self.shared.faults.lock().unwrap().insert(n, fault);
    }
}

/// The file content the upstream writes for `s`: the marker comment, then the solution.
pub fn solution_text(s: &Solution, marker: &str) -> String {
    format!("{} {marker}\n{}", s.comment, s.content)
}

/// The solution whose phrase the request's first user message holds.
pub fn recognise(request: &Value) -> Option<&'static Solution> {
    let user = request["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "user")?;
    let text = match &user["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    SOLUTIONS.iter().find(|s| text.contains(s.recognise))
}

/// DeepSeek's tokens of a piece of the prompt: a deterministic stand-in (4 bytes a token).
pub fn tokens_of(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The prompt as the cache sees it: the model and tool schemas first (shared by every attempt
/// of an arm), then each message. Returns (hash of each prefix, tokens up to its end).
fn prefixes(req: &Value) -> Vec<(u64, u64)> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut out = Vec::new();
    let mut tokens = 0;
    let head = format!("{}{}", req["model"], req["tools"]);
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    for part in std::iter::once(head).chain(messages.iter().map(Value::to_string)) {
        part.hash(&mut h);
        tokens += tokens_of(&part);
        out.push((h.finish(), tokens));
    }
    out
}

/// DeepSeek's context cache (api-docs "KV cache"): the longest prefix an earlier request sent is
/// a hit, in 64-token units; the rest is a miss. Every prefix of this request is then stored
/// (units persist at the end of each request). Returns (prompt_tokens, hits).
fn cache_lookup(cache: &Mutex<std::collections::HashSet<u64>>, req: &Value) -> (u64, u64) {
    let pre = prefixes(req);
    let prompt = pre.last().map_or(0, |p| p.1);
    let mut cache = cache.lock().unwrap();
    let hit = pre
        .iter()
        .filter(|(h, _)| cache.contains(h))
        .map(|p| p.1)
        .max()
        .unwrap_or(0);
    cache.extend(pre.iter().map(|p| p.0));
    (prompt, hit / 64 * 64)
}

/// Token-sized pieces of `text` (a word and its trailing space; long words in 6-byte pieces),
/// as the API streams them: one SSE event each.
pub fn token_pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        cur.push(c);
        if c == ' ' || c == '\n' || cur.len() >= 6 {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `s` cut into fragments of 1–9 bytes at char boundaries, wherever they fall (inside JSON
/// strings and escapes too), as DeepSeek streams tool-call arguments.
pub fn fragments(s: &str, seed: usize) -> Vec<String> {
    let sizes = [3usize, 1, 7, 2, 9, 5, 4, 8, 6];
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut k = seed;
    for c in s.chars() {
        cur.push(c);
        if cur.len() >= sizes[k % sizes.len()] {
            out.push(std::mem::take(&mut cur));
            k += 1;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The stream's bytes cut into writes of varying size, so event (and line, and UTF-8)
/// boundaries fall anywhere.
fn writes(bytes: &[u8], seed: usize) -> Vec<Bytes> {
    let sizes = [17usize, 5, 131, 1, 64, 29, 256, 3, 90];
    let mut out = Vec::new();
    let mut at = 0;
    let mut k = seed;
    while at < bytes.len() {
        let n = sizes[k % sizes.len()].min(bytes.len() - at);
        out.push(Bytes::copy_from_slice(&bytes[at..at + n]));
        at += n;
        k += 1;
    }
    out
}

/// The arguments of a `lattice_route` call valid for the schema the request offers: every
/// required property gets a value of its type, the routing ones the values of a small, clear,
/// single-file task (bypass needs no outcome-critical gap, span ≤ 2, gap ≤ 1).
pub fn route_arguments(tool: &Value) -> Value {
    let props = tool["function"]["parameters"]["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut args = serde_json::Map::new();
    for (name, schema) in props {
        let v = match name.as_str() {
            "recommendedLevel" => json!("bypass"),
            "estimatedSteps" => json!(1),
            "executionSpan" | "productDefinitionGap" => json!(0),
            "outcomeCritical" => json!(false),
            "evidence" => json!(["the task names one file and its exact behaviour"]),
            "rationale" => json!("a single-file change with a precise specification"),
            _ => match schema["type"].as_str() {
                Some("string") => match &schema["enum"][0] {
                    Value::Null => json!("n/a"),
                    first => first.clone(),
                },
                Some("integer") | Some("number") => json!(0),
                Some("boolean") => json!(false),
                Some("array") => json!([]),
                _ => json!({}),
            },
        };
        args.insert(name, v);
    }
    Value::Object(args)
}

/// The names of the tool calls the conversation's assistant messages already made.
fn called(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

fn offered(tools: &[Value], name: &str) -> bool {
    tools.iter().any(|t| t["function"]["name"] == name)
}

fn has(done: &[String], name: &str) -> bool {
    done.iter().any(|n| n == name)
}

/// The text of the tool result answering this upstream's call of `name` (its call ids are
/// `call_<name>_<step>`).
pub fn result_of(messages: &[Value], name: &str) -> Option<String> {
    let prefix = format!("call_{name}_");
    let m = messages.iter().rev().find(|m| {
        m["role"] == "tool"
            && m["tool_call_id"]
                .as_str()
                .is_some_and(|id| id.starts_with(&prefix))
    })?;
    Some(match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    })
}

/// The word after `label` in `text` (up to whitespace, a trailing `.` dropped).
pub fn after(text: &str, label: &str) -> Option<String> {
    let rest = &text[text.find(label)? + label.len()..];
    let word: String = rest
        .trim_start()
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    let word = word.trim_end_matches('.').to_owned();
    (!word.is_empty()).then_some(word)
}

/// A fresh receipt as Plan Lattice 0.3 renders it: (`receiptId`, `expectedRevision`).
pub fn receipt(text: &str) -> Result<(String, u64), String> {
    let id = after(text, "receiptId:").ok_or_else(|| format!("no receiptId in {text:.200}"))?;
    let rev = after(text, "expectedRevision:")
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| format!("no expectedRevision in {text:.200}"))?;
    Ok((id, rev))
}

/// The next call of Plan Lattice 0.3's open → add → refresh → checkout sequence, with values
/// read from the plugin's own earlier tool results in the conversation.
fn lattice_step(
    sol: &Solution,
    messages: &[Value],
    done: &[String],
) -> Result<(Kind, &'static str, Value), String> {
    if !has(done, "lattice_open") {
        return Ok((
            Kind::Open,
            "lattice_open",
            json!({"title": format!("Implement {}", sol.path),
                   "objective": format!("{} implements the task exactly", sol.path),
                   "estimatedSteps": 1,
                   "contextPaths": [sol.path]}),
        ));
    }
    if !has(done, "lattice_add") {
        let opened = result_of(messages, "lattice_open").ok_or("no lattice_open result")?;
        let (id, rev) = receipt(&opened)?;
        return Ok((
            Kind::Add,
            "lattice_add",
            json!({"receiptId": id, "expectedRevision": rev,
                   "title": format!("Write {}", sol.path),
                   "acceptanceCriteria": "the file implements the specification"}),
        ));
    }
    if !has(done, "lattice_refresh_context") {
        return Ok((Kind::Refresh, "lattice_refresh_context", json!({})));
    }
    let added = result_of(messages, "lattice_add").ok_or("no lattice_add result")?;
    let node = after(&added, "Added node").ok_or_else(|| format!("no node id in {added:.200}"))?;
    let refreshed = result_of(messages, "lattice_refresh_context")
        .ok_or("no lattice_refresh_context result")?;
    let (id, rev) = receipt(&refreshed)?;
    Ok((
        Kind::Checkout,
        "lattice_checkout",
        json!({"receiptId": id, "expectedRevision": rev, "nodeId": node}),
    ))
}

/// DeepSeek's error body (api-docs "error codes"): `{"error":{message,type,param,code}}`.
pub fn deepseek_error(status: u16, message: &str) -> Value {
    let (kind, code) = match status {
        400 => ("invalid_request_error", "invalid_request_error"),
        401 => ("authentication_error", "invalid_api_key"),
        402 => ("unknown_error", "insufficient_balance"),
        422 => ("invalid_request_error", "invalid_parameters"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        503 => ("service_unavailable_error", "server_overloaded"),
        _ => ("api_error", "server_error"),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

fn error(status: StatusCode, msg: &str) -> Response {
    (status, axum::Json(deepseek_error(status.as_u16(), msg))).into_response()
}

/// What the model answers: text, or one tool call.
enum Reply {
    Text(String),
    Call(String, Value),
}

/// The chain of thought streamed before `reply`.
fn reasoning_text(reply: &Reply) -> String {
    match reply {
        Reply::Text(_) => "The work is done; I will say so briefly.".to_owned(),
        Reply::Call(name, _) => {
            format!("The next step is the {name} tool, with the task's exact file and values.")
        }
    }
}

/// One answer's SSE bytes as DeepSeek streams them, cut short by `fault` when it says so.
/// Returns (bytes, data events, comments, usage object delivered with `[DONE]` after it).
fn stream_bytes(
    id: &str,
    model: &str,
    thinking: bool,
    step: usize,
    reply: &Reply,
    usage: &Value,
    fault: Option<&Fault>,
) -> (Vec<u8>, usize, usize, bool) {
    let chunk = |delta: Value, finish: Value, usage: &Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1767225600, "model": model,
               "system_fingerprint": "fp_scripted",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
               "usage": usage})
    };
    let mut events: Vec<Value> = Vec::new();
    let first = if thinking {
        json!({"role": "assistant", "content": null, "reasoning_content": ""})
    } else {
        json!({"role": "assistant", "content": ""})
    };
    events.push(chunk(first, Value::Null, &Value::Null));
    let finish_reason = match fault {
        Some(Fault::Finish(r)) => *r,
        _ => match reply {
            Reply::Text(_) => "stop",
            Reply::Call(..) => "tool_calls",
        },
    };
    if thinking {
        for p in token_pieces(&reasoning_text(reply)) {
            events.push(chunk(
                json!({"content": null, "reasoning_content": p}),
                Value::Null,
                &Value::Null,
            ));
        }
    }
    if !matches!(fault, Some(Fault::Finish(_))) {
        match reply {
            Reply::Text(t) => {
                for p in token_pieces(t) {
                    events.push(chunk(
                        json!({"content": p, "reasoning_content": null}),
                        Value::Null,
                        &Value::Null,
                    ));
                }
            }
            Reply::Call(name, args) => {
                let call_id = format!("call_{name}_{step}");
                events.push(chunk(
                    json!({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                    &Value::Null,
                ));
                for f in fragments(&args.to_string(), step) {
                    events.push(chunk(
                        json!({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}),
                        Value::Null,
                        &Value::Null,
                    ));
                }
            }
        }
    }
    // The finish chunk carries the usage (third-party capture) and `include_usage` repeats it on
    // a trailing `choices: []` chunk (api-docs); every other chunk says `"usage": null`.
    events.push(chunk(
        json!({"content": "", "reasoning_content": null}),
        json!(finish_reason),
        usage,
    ));
    let mut trailing = chunk(json!({}), Value::Null, usage);
    trailing["choices"] = json!([]);
    events.push(trailing);

    let mut out = Vec::new();
    let mut comments = 0;
    let mut keep_alive = |out: &mut Vec<u8>| {
        out.extend_from_slice(b": keep-alive\n\n");
        comments += 1;
    };
    // Under load the API holds the connection with comments before inference starts.
    keep_alive(&mut out);
    if let Some(Fault::KeepAliveOnly) = fault {
        keep_alive(&mut out);
        keep_alive(&mut out);
        return (out, 0, comments, false);
    }
    let stop_at = match fault {
        Some(Fault::CutAfter(n) | Fault::StallAfter(n)) => Some(*n),
        _ => None,
    };
    let total = events.len();
    let mut sent = 0;
    for (i, e) in events.iter().enumerate() {
        if stop_at == Some(i) {
            return (out, sent, comments, false);
        }
        out.extend_from_slice(format!("data: {e}\n\n").as_bytes());
        sent += 1;
        if i == total / 2 {
            keep_alive(&mut out);
        }
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    (out, sent + 1, comments, true)
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
    if !authorized {
        s.tally.lock().unwrap().unauthorized += 1;
        return error(
            StatusCode::UNAUTHORIZED,
            "Authentication Fails, Your api key: ****key is invalid",
        );
    }
    // `eval run`'s preflight reads the account endpoints before the session.
    if let Some(r) = super::account::funded(&method, uri.path()) {
        s.tally.lock().unwrap().account += 1;
        return r;
    }
    let unexpected = |what: String| {
        s.tally.lock().unwrap().unexpected.push(what.clone());
        error(StatusCode::BAD_REQUEST, &what)
    };
    if !uri.path().ends_with("/chat/completions") {
        return unexpected(format!("path {}", uri.path()));
    }
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return unexpected(format!("not JSON: {e}")),
    };
    if req["stream"] != true {
        return unexpected("an unstreamed request (the Harness always streams)".into());
    }
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let tools = req["tools"].as_array().cloned().unwrap_or_default();
    let thinking = req["thinking"]["type"] != "disabled";
    // The API's own rule in thinking mode: an earlier tool-call turn must carry its reasoning back.
    if thinking
        && messages.iter().any(|m| {
            m["role"] == "assistant"
                && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty())
                && !m["reasoning_content"].is_string()
        })
    {
        return unexpected(
            "The `reasoning_content` in the thinking mode must be passed back to the API.".into(),
        );
    }
    let step = messages.iter().filter(|m| m["role"] == "assistant").count();
    let done = called(&messages);
    let task = recognise(&req);
    let greet = recognise_round(&messages).filter(|_| !tools.is_empty());
    let route = tools
        .iter()
        .find(|t| t["function"]["name"] == "lattice_route");
    let id = format!("chatcmpl-scripted-{step}");
    let model = req["model"]
        .as_str()
        .unwrap_or("deepseek-v4-flash")
        .to_owned();
    let prompt: String = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect();
    let bash = |command: &str| {
        Reply::Call(
            "bash".into(),
            json!({"command": command, "description": "scripted"}),
        )
    };
    let (kind, reply) = if !tools.is_empty() && prompt.contains(HOSTILE_HANG) {
        (Kind::Bash, bash("sleep 3600"))
    } else if !tools.is_empty()
        && prompt.contains(HOSTILE_DELETE)
        && done.iter().filter(|n| *n == "bash").count() < 2
    {
        // dsh makes a step's records durable once the step's tools have finished, so the
        // transcript exists only from the second step on: a harmless call first, then the
        // deletion (waiting on the file, bounded, never on a clock alone).
        let command = if has(&done, "bash") {
            "i=0; while [ $i -lt 300 ] && ! ls /eval-state/*/*/session.jsonl /workspace/.dsh-transcript/*/*/session.jsonl >/dev/null 2>&1; do sleep 0.1; i=$((i + 1)); done; \
             rm -rf /eval-state/* /workspace/.dsh-transcript; echo removed"
        } else {
            "echo ready"
        };
        (Kind::Bash, bash(command))
    } else if let Some(text) = icae_oracle_reply(&messages).filter(|_| tools.is_empty()) {
        (Kind::Oracle, Reply::Text(text))
    } else if tools.is_empty() {
        (Kind::Title, Reply::Text("Scripted task".into()))
    } else if let Some((k, sol, since)) = greet {
        // A multi-round task: each round's own calls (after its prompt) decide the next one.
        let mine = called(&messages[since..]);
        let file_path = format!("{}/{}", working_directory(&messages), sol.path);
        if !has(&mine, "read") {
            (
                Kind::Read,
                Reply::Call("read".into(), json!({"file_path": file_path})),
            )
        } else if !has(&mine, "write") {
            let content = format!("// {}\n{}", s.marker, sol.content);
            (
                Kind::Write,
                Reply::Call(
                    "write".into(),
                    json!({"file_path": file_path, "content": content}),
                ),
            )
        } else {
            (Kind::Answer, Reply::Text(format!("Round {k} is done.")))
        }
    } else if let Some(route) = route.filter(|_| !done.iter().any(|n| n == "lattice_route")) {
        (
            Kind::Route,
            Reply::Call("lattice_route".into(), route_arguments(route)),
        )
    } else if !tools.is_empty() && prompt.contains(HOSTILE_HUNT) && !has(&done, "bash") {
        (Kind::Bash, bash(HUNT_COMMAND))
    } else if let Some(next) = icae_next(&messages, &done, &tools) {
        next
    } else if let Some(q) = questions()
        .into_iter()
        .nth(done.iter().filter(|n| *n == "ask_user_question").count())
        .filter(|_| {
            s.ask.load(std::sync::atomic::Ordering::SeqCst) && offered(&tools, "ask_user_question")
        })
    {
        (
            Kind::Ask,
            Reply::Call("ask_user_question".into(), json!({"questions": [q]})),
        )
    } else if let Some(sol) = task.filter(|_| !done.iter().any(|n| n == "read")) {
        let args = json!({"file_path": format!("/workspace/{}", sol.path)});
        (Kind::Read, Reply::Call("read".into(), args))
    } else if let Some(lattice) = task
        .filter(|_| offered(&tools, "lattice_checkout") && !has(&done, "lattice_checkout"))
        .map(|sol| lattice_step(sol, &messages, &done))
    {
        match lattice {
            Ok((kind, name, args)) => (kind, Reply::Call(name.into(), args)),
            Err(why) => (Kind::Answer, Reply::Text(format!("Stuck: {why}"))),
        }
    } else if let Some(sol) = task.filter(|_| !done.iter().any(|n| n == "write")) {
        let args = json!({"file_path": format!("/workspace/{}", sol.path),
                          "content": solution_text(sol, &s.marker)});
        (Kind::Write, Reply::Call("write".into(), args))
    } else {
        let text = match task {
            Some(sol) => format!("Implemented {}.", sol.path),
            None => "I do not know this task.".to_owned(),
        };
        (Kind::Answer, Reply::Text(text))
    };
    let n = {
        let mut t = s.tally.lock().unwrap();
        t.requests += 1;
        t.requests
    };
    let fault = s.faults.lock().unwrap().remove(&n);
    let kept: BTreeMap<String, String> = headers
        .iter()
        .filter(|(k, _)| k.as_str() != "authorization")
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut served = Served {
        path: uri.path().to_owned(),
        headers: kept,
        request: req.clone(),
        kind,
        task: task.map(|t| t.path),
        round: greet.map(|g| g.0),
        prompt_tokens: 0,
        hit_tokens: 0,
        completion_tokens: 0,
        reasoning_tokens: 0,
        fault: fault.clone(),
        complete: false,
        events: 0,
        comments: 0,
        writes: 0,
    };
    if let Some(Fault::Status {
        status,
        message,
        retry_after,
    }) = &fault
    {
        s.tally.lock().unwrap().served.push(served);
        let code = StatusCode::from_u16(*status).unwrap();
        let mut r = (code, axum::Json(deepseek_error(*status, message))).into_response();
        if let Some(secs) = retry_after {
            r.headers_mut()
                .insert("retry-after", secs.to_string().parse().unwrap());
        }
        return r;
    }
    // Billing: the prompt against the shared prefix cache; the completion is every token
    // streamed, reasoning included.
    let (prompt, hits) = cache_lookup(&s.cache, &req);
    let reasoning = if thinking {
        token_pieces(&reasoning_text(&reply)).len() as u64
    } else {
        0
    };
    let answer = match (&fault, &reply) {
        (Some(Fault::Finish(_)), _) => 0,
        (_, Reply::Text(t)) => token_pieces(t).len() as u64,
        (_, Reply::Call(_, args)) => 1 + fragments(&args.to_string(), step).len() as u64,
    };
    let completion = reasoning + answer;
    let usage = json!({"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": hits},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
        "prompt_cache_hit_tokens": hits, "prompt_cache_miss_tokens": prompt - hits});
    let (bytes, events, comments, complete) =
        stream_bytes(&id, &model, thinking, step, &reply, &usage, fault.as_ref());
    let chunks = writes(&bytes, n);
    served.prompt_tokens = prompt;
    served.hit_tokens = hits;
    served.completion_tokens = completion;
    served.reasoning_tokens = reasoning;
    served.complete = complete;
    served.events = events;
    served.comments = comments;
    served.writes = chunks.len();
    s.tally.lock().unwrap().served.push(served);
    let body = futures_util::stream::iter(chunks.into_iter().map(Ok::<Bytes, std::io::Error>))
        .then(|c| async move {
            // A write per poll: the server sends each as its own chunk.
            tokio::task::yield_now().await;
            c
        })
        .chain(futures_util::stream::unfold(fault, |f| async move {
            match f {
                // The connection is aborted mid-body (no terminating chunk).
                Some(Fault::CutAfter(_)) => Some((Err(std::io::Error::other("reset")), None)),
                // The connection stays open with comments only until the client leaves (the
                // pace is the fake's behaviour, not a synchronisation).
                Some(Fault::StallAfter(_)) => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    Some((Ok(Bytes::from_static(b": keep-alive\n\n")), f))
                }
                _ => None,
            }
        }));
    (
        [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-cache"),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// One line per arm: what the upstream saw of its attempts (the closing note quotes these).
pub fn wire_summary(arm: &str, served: &[&Served]) -> String {
    let first = served.first();
    let ua = first
        .and_then(|s| s.headers.get("user-agent"))
        .map(|u| u.split(' ').next().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let body_keys = first
        .and_then(|s| s.request.as_object())
        .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    let lattice: std::collections::BTreeSet<String> = served
        .iter()
        .flat_map(|s| s.tools())
        .filter(|t| t.starts_with("lattice_"))
        .collect();
    let sessions: std::collections::BTreeSet<String> = served.iter().map(|s| s.session()).collect();
    let (i, o) = served.iter().fold((0, 0), |(a, b), s| {
        (a + s.prompt_tokens, b + s.completion_tokens)
    });
    let list =
        |f: &dyn Fn(&Served) -> String| served.iter().map(|s| f(s)).collect::<Vec<_>>().join(" ");
    format!(
        "arm {arm}: {} calls [{}] tools/call [{}] lattice={lattice:?} sessions={} ua={ua} \
         body={{{body_keys}}} max_tokens={} usage in={i} out={o}",
        served.len(),
        list(&|s| format!("{:?}", s.kind)),
        list(&|s| s.tools().len().to_string()),
        sessions.len(),
        first
            .map(|s| s.request["max_tokens"].clone())
            .unwrap_or_default(),
    )
}

/// Runs `cmd` (stdin closed, output captured) in its own process group under a hang guard (a
/// deadlock detector, not a speed assumption): after `hang_guard_secs` the group is killed.
pub fn guarded(mut cmd: Command, hang_guard_secs: u64) -> std::process::Output {
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    if rx
        .recv_timeout(std::time::Duration::from_secs(hang_guard_secs))
        .is_err()
    {
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{pid}")])
            .status();
        let _ = waiter.join();
        panic!("{cmd:?} hung: still running after {hang_guard_secs} s; killed");
    }
    waiter.join().unwrap().unwrap()
}

/// The bytes of the artifact `name` an `attempt_outcome` references, from matrix `matrix`'s store.
pub fn artifact(dir: &Path, matrix: &str, outcome: &Value, name: &str) -> Vec<u8> {
    let d = outcome["artifacts"][name]
        .as_str()
        .unwrap_or_else(|| panic!("no {name} artifact in {outcome}"));
    let hex = d.strip_prefix("sha256:").unwrap();
    std::fs::read(dir.join(format!(
        "runs/{matrix}/artifacts/sha256/{}/{hex}",
        &hex[..2]
    )))
    .unwrap_or_else(|e| panic!("artifact {d}: {e}"))
}

/// One usage chunk of a dsh transcript, in the Harness's disjoint counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DshUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
}

impl DshUsage {
    /// Billed input in the Harness's convention: `inputTokens + cacheReadTokens +
    /// cacheWriteTokens` (DeepSeek's `prompt_tokens`, hits included).
    pub fn billed_input(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }
}

/// The transcript's first session id and every usage chunk, in order (packed delta rows and the
/// other records skipped).
pub fn transcript_calls(bytes: &[u8]) -> (String, Vec<DshUsage>) {
    let mut session = String::new();
    let mut usage = Vec::new();
    for line in String::from_utf8_lossy(bytes).lines() {
        if line.trim().is_empty() {
            continue;
        }
        let r: Value = serde_json::from_str(line).unwrap();
        if r["type"] == "session" && session.is_empty() {
            session = r["id"].as_str().unwrap_or_default().to_owned();
        }
        let c = &r["data"]["chunk"];
        if r["type"] == "assistant/chunk" && c["type"] == "usage" {
            let u = &c["usage"];
            let n = |f: &str| u[f].as_u64().unwrap_or(0);
            usage.push(DshUsage {
                input: u["inputTokens"].as_u64().unwrap(),
                output: u["outputTokens"].as_u64().unwrap(),
                cache_read: n("cacheReadTokens"),
                cache_write: n("cacheWriteTokens"),
                reasoning: n("reasoningTokens"),
            });
        }
    }
    (session, usage)
}

/// The transcript's session id and its usage chunks as billed (prompt incl. cache hits,
/// completion incl. reasoning), in order: directly comparable with the proxy's meter and the
/// upstream's usage objects.
pub fn transcript_usage(bytes: &[u8]) -> (String, Vec<(u64, u64)>) {
    let (session, calls) = transcript_calls(bytes);
    (
        session,
        calls.iter().map(|u| (u.billed_input(), u.output)).collect(),
    )
}
