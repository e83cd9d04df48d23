//! Metrics from the wire (`eval_core::budget::WIRE_METRICS`): computed by `eval`, at report time,
//! from the `wire` shape the proxy recorded in each `model_call` entry — what the harness actually
//! sent, which the agent's container cannot rewrite afterwards.
//!
//! The route is Plan Lattice's (0.4.0-rc.3, `src/index.ts`), read from the `lattice_*` subset of
//! the tools of the attempt's first agent request that carries tools (the *initial* route: a probe
//! may change route later through a model call), never from the tool count:
//! - no `lattice_*` tool: `bypass`;
//! - exactly `lattice_route`: `probe`;
//! - exactly the six contract tools: `contract`;
//! - the fifteen `lattice_*` tools other than `lattice_route`: `lattice`;
//! - anything else: no route (the metrics are absent, and the missing-data rule decides).
//!
//! The clarification policy shows only as one sentence (its own paragraph) of the contract or
//! lattice control section; it is recognised by the paragraph's digest.

use std::collections::{BTreeMap, BTreeSet};

use eval_core::chain::Entry;
use eval_proxy::wire::{WireShape, text_digest};

use eval_runlog::events;

/// The six tools of the contract route.
pub const CONTRACT_TOOLS: [&str; 6] = [
    "lattice_intake",
    "lattice_commit_intake",
    "lattice_review_input",
    "lattice_commit_input_review",
    "lattice_reframe",
    "lattice_refresh_context",
];

/// The fifteen tools of the lattice route (every `lattice_*` tool but `lattice_route`).
pub const LATTICE_TOOLS: [&str; 15] = [
    "lattice_add",
    "lattice_adopt_context",
    "lattice_archive",
    "lattice_checkout",
    "lattice_checkpoint",
    "lattice_commit_input_review",
    "lattice_commit_intake",
    "lattice_intake",
    "lattice_open",
    "lattice_reframe",
    "lattice_refresh_context",
    "lattice_review_input",
    "lattice_split",
    "lattice_status",
    "lattice_update",
];

/// The policy sentences of the control section, by policy.
const CLARIFICATION_SENTENCES: [(&str, &str); 3] = [
    (
        "never",
        "Do not ask the user. Record reasonable, reversible assumptions explicitly.",
    ),
    (
        "always",
        "Use lattice_intake for unresolved product-definition gaps before execution.",
    ),
    (
        "critical",
        "Ask only about an outcome-critical gap that can change the P0 result, scope, authority, truth source, or acceptance.",
    ),
];

/// The initial route and clarification policy one attempt's wire shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireRoute {
    /// One of `eval_core::budget::WIRE_ROUTES`.
    pub route: &'static str,
    /// The policy whose sentence a control section carries, if any.
    pub clarification: Option<&'static str>,
    /// The proxy's per-attempt seq of the request read.
    pub seq: u64,
    /// Every tool name that request offered, in the order sent (for the transcript
    /// cross-check), and whether the proxy had to cut the list.
    pub tools: Vec<String>,
    pub tools_truncated: bool,
}

/// The route a request's tool names show, or `None` for a `lattice_*` subset that is no route.
pub fn route_of(tools: &[String]) -> Option<&'static str> {
    let lattice: BTreeSet<&str> = tools
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("lattice_"))
        .collect();
    let is = |set: &[&str]| lattice.len() == set.len() && set.iter().all(|t| lattice.contains(t));
    if lattice.is_empty() {
        Some("bypass")
    } else if is(&["lattice_route"]) {
        Some("probe")
    } else if is(&CONTRACT_TOOLS) {
        Some("contract")
    } else if is(&LATTICE_TOOLS) {
        Some("lattice")
    } else {
        None
    }
}

/// The clarification policy whose sentence is a paragraph of some system section.
pub fn clarification_of(wire: &WireShape) -> Option<&'static str> {
    CLARIFICATION_SENTENCES
        .iter()
        .find_map(|(policy, sentence)| {
            let d = text_digest(sentence);
            wire.system
                .iter()
                .any(|s| s.paragraphs.contains(&d))
                .then_some(*policy)
        })
}

/// For each attempt id, the route of its first agent request (lowest proxy seq) that carries
/// tools, from the `model_call` entries; attempts whose first such request shows no route are
/// absent, as are attempts with none.
pub fn routes(entries: &[Entry]) -> BTreeMap<String, WireRoute> {
    let mut first: BTreeMap<String, (u64, WireShape)> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.kind == events::MODEL_CALL) {
        let Ok(call) = serde_json::from_slice::<events::ModelCall>(&e.payload) else {
            continue;
        };
        if call.role != "agent" {
            continue;
        }
        let Some(wire) = call
            .record
            .get("wire")
            .and_then(|w| serde_json::from_value::<WireShape>(w.clone()).ok())
        else {
            continue;
        };
        if wire.tools.is_none() {
            continue;
        }
        match first.get(&call.attempt) {
            Some((seq, _)) if *seq <= call.seq => {}
            _ => {
                first.insert(call.attempt.clone(), (call.seq, wire));
            }
        }
    }
    first
        .into_iter()
        .filter_map(|(attempt, (seq, wire))| {
            let route = route_of(wire.tools.as_deref().unwrap_or_default())?;
            Some((
                attempt,
                WireRoute {
                    route,
                    clarification: clarification_of(&wire),
                    seq,
                    tools: wire.tools.clone().unwrap_or_default(),
                    tools_truncated: wire.tools_truncated,
                },
            ))
        })
        .collect()
}

/// The wire metrics of a run's attempts: which suites list one, each attempt's route, and each
/// task's expectation.
pub struct Wire<'a> {
    suites: BTreeSet<&'a str>,
    routes: BTreeMap<String, WireRoute>,
    tasks: &'a [eval_protocols::TaskBundle],
}

impl<'a> Wire<'a> {
    /// The route the wire shows for an attempt id, in a suite that lists a wire metric.
    pub fn route(&self, suite: &str, attempt: &str) -> Option<&WireRoute> {
        self.suites
            .contains(suite)
            .then(|| self.routes.get(attempt))
            .flatten()
    }

    /// Reads the routes from `entries` when some suite of `protocol` lists a wire metric.
    pub fn new(
        entries: &[Entry],
        protocol: &'a eval_protocols::Protocol,
        tasks: &'a [eval_protocols::TaskBundle],
    ) -> Self {
        let suites: BTreeSet<&str> = protocol
            .suites
            .iter()
            .filter(|(_, s)| {
                s.metrics
                    .iter()
                    .any(|m| eval_core::budget::WIRE_METRICS.contains(&m.as_str()))
            })
            .map(|(id, _)| id.as_str())
            .collect();
        let routes = if suites.is_empty() {
            BTreeMap::new()
        } else {
            routes(entries)
        };
        Wire {
            suites,
            routes,
            tasks,
        }
    }

    /// The attempt's metrics with the wire's: in a suite that lists a wire metric, a value of that
    /// name from anywhere else (a grader is agent-reachable) is dropped, and the wire's are added
    /// when its first request with tools shows a route.
    pub fn apply(
        &self,
        a: &events::AttemptStarted,
        mut m: BTreeMap<String, f64>,
    ) -> BTreeMap<String, f64> {
        if !self.suites.contains(a.suite.as_str()) {
            return m;
        }
        m.retain(|k, _| !eval_core::budget::WIRE_METRICS.contains(&k.as_str()));
        if let Some(r) = self.routes.get(&a.attempt) {
            let expected = self
                .tasks
                .iter()
                .find(|t| t.id == a.task)
                .and_then(|t| t.spec.wire.as_ref());
            m.extend(metrics(r, expected));
        }
        m
    }
}

/// The tool names of the first `request/header` event of a DeepSeek Harness session transcript
/// (`session.jsonl`; dsh `packages/core/agent-loop/src/agent.ts` appends `{header, reason}` before
/// its first request, `header.tools` being `ToolSchema {name, description, parameters}` and absent
/// when there are none): `Ok(None)` when the transcript has no such event. The transcript is
/// agent-written, so this is only ever a cross-check of the wire, never a source of a metric.
pub fn transcript_tools(bytes: &[u8]) -> Result<Option<Vec<String>>, String> {
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let n = i + 1;
        let rec: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| format!("line {n} is not JSON: {e}"))?;
        if rec["type"] != "request/header" {
            continue;
        }
        let header = &rec["data"]["header"];
        if !header.is_object() {
            return Err(format!("line {n}: request/header has no header object"));
        }
        return match &header["tools"] {
            serde_json::Value::Null => Ok(Some(Vec::new())),
            serde_json::Value::Array(tools) => tools
                .iter()
                .map(|t| {
                    t["name"]
                        .as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("line {n}: a tool of request/header has no name"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            _ => Err(format!("line {n}: request/header's tools is not a list")),
        };
    }
    Ok(None)
}

/// The anomaly, if any, of comparing the wire's first request with tools with the transcript's
/// first `request/header`: the same tool names (as sets with counts; the order is the adapter's)
/// or a sentence saying how they differ. `None` also when the proxy cut the wire's list (nothing
/// exact to compare).
pub fn cross_check(attempt: &str, wire: &WireRoute, transcript: &[u8]) -> Option<String> {
    if wire.tools_truncated {
        return None;
    }
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    match transcript_tools(transcript) {
        Err(e) => Some(format!(
            "attempt {attempt}: the transcript cannot be cross-checked with the wire ({e})"
        )),
        Ok(None) => Some(format!(
            "attempt {attempt}: the wire shows a first request with {} tools (route {}), but the transcript has no request/header",
            wire.tools.len(),
            wire.route
        )),
        Ok(Some(t)) if sorted(&t) == sorted(&wire.tools) => None,
        Ok(Some(t)) => {
            let (w, t) = (sorted(&wire.tools), sorted(&t));
            let only_wire: Vec<&str> = w
                .iter()
                .filter(|x| !t.contains(x))
                .map(String::as_str)
                .collect();
            let only_transcript: Vec<&str> = t
                .iter()
                .filter(|x| !w.contains(x))
                .map(String::as_str)
                .collect();
            Some(format!(
                "attempt {attempt}: the transcript's first request/header disagrees with the wire's first request with tools (route {} on the wire; {} vs {} tools; only on the wire: [{}]; only in the transcript: [{}])",
                wire.route,
                w.len(),
                t.len(),
                only_wire.join(", "),
                only_transcript.join(", ")
            ))
        }
    }
}

/// The wire metrics of one attempt with that route, against the task's expectation.
pub fn metrics(
    r: &WireRoute,
    expected: Option<&eval_protocols::task::WireExpectation>,
) -> BTreeMap<String, f64> {
    let b = |x: bool| if x { 1.0 } else { 0.0 };
    let mut out = BTreeMap::new();
    out.insert("wire_routed".to_owned(), b(r.route != "bypass"));
    out.insert("wire_bypassed".to_owned(), b(r.route == "bypass"));
    if let Some(x) = expected {
        let clar_ok = match &x.expected_clarification {
            Some(c) => r.clarification == Some(c.as_str()),
            None => true,
        };
        out.insert(
            "wire_route_matches".to_owned(),
            b(r.route == x.expected_route && clar_ok),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use eval_proxy::wire::SystemSection;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn routes_follow_the_lattice_subset_not_the_count() {
        assert_eq!(route_of(&names(&["read", "write", "bash"])), Some("bypass"));
        assert_eq!(route_of(&names(&["read", "lattice_route"])), Some("probe"));
        let mut c = names(&CONTRACT_TOOLS);
        c.push("read".into());
        assert_eq!(route_of(&c), Some("contract"));
        assert_eq!(route_of(&names(&LATTICE_TOOLS)), Some("lattice"));
        // Seven lattice tools are no route, whatever the count of the others.
        let mut odd = names(&CONTRACT_TOOLS);
        odd.push("lattice_route".into());
        assert_eq!(route_of(&odd), None);
        assert_eq!(route_of(&names(&["lattice_open"])), None);
    }

    #[test]
    fn the_clarification_policy_is_read_by_its_sentence_digest() {
        let wire = |p: &str| WireShape {
            tools: Some(vec![]),
            system: vec![SystemSection {
                heading: "## Plan Lattice contract control".into(),
                bytes: 1,
                digest: text_digest("x"),
                paragraphs: vec![
                    text_digest("## Plan Lattice contract control"),
                    text_digest(p),
                ],
            }],
            ..WireShape::default()
        };
        assert_eq!(
            clarification_of(&wire(CLARIFICATION_SENTENCES[0].1)),
            Some("never")
        );
        assert_eq!(
            clarification_of(&wire(CLARIFICATION_SENTENCES[2].1)),
            Some("critical")
        );
        assert_eq!(clarification_of(&wire("Ask whenever you like.")), None);
    }

    fn call(attempt: &str, seq: u64, role: &str, tools: Option<&[&str]>) -> Entry {
        let mut record = serde_json::json!({"seq": seq});
        if let Some(t) = tools {
            record["wire"] = serde_json::json!({"tools": t, "system": []});
        }
        let p = events::ModelCall {
            schema: events::SCHEMA,
            attempt: attempt.into(),
            role: role.into(),
            seq,
            model: None,
            status: 200,
            result: "ok".into(),
            tokens: eval_core::tokens::TokenCounts::default(),
            metered: true,
            latency_ms: 0,
            record,
            artifacts: Default::default(),
            wire_log: None,
        };
        Entry {
            seq,
            prev: eval_core::Digest::ZERO,
            kind: events::MODEL_CALL.into(),
            payload: serde_json::to_vec(&p).expect("json"),
            hash: eval_core::Digest::ZERO,
            recorded_at: String::new(),
        }
    }

    /// A `request/header` line as dsh rc.8 writes it (`session.append('request/header', {header,
    /// reason})` in an event envelope `{type, seq, time, data}`).
    fn header_line(seq: u64, tools: Option<&[&str]>) -> String {
        let mut header = serde_json::json!({"config": {"provider": "deepseek", "model": "deepseek-chat"},
                                            "system": "## Plan Lattice route probe\n\n…"});
        if let Some(t) = tools {
            header["tools"] = t
                .iter()
                .map(|n| serde_json::json!({"name": n, "description": "d", "parameters": {}}))
                .collect();
        }
        serde_json::json!({"type": "request/header", "seq": seq, "time": 1,
                           "data": {"header": header, "reason": "initial"}})
        .to_string()
    }

    #[test]
    fn the_transcripts_first_request_header_cross_checks_the_wire() {
        let wire = routes(&[call("a", 1, "agent", Some(&["read", "lattice_route"]))])
            .remove("a")
            .unwrap();
        let user = r#"{"type":"user/message","seq":0,"time":1,"data":{}}"#;
        let agree = format!(
            "{user}\n{}\n{}\n",
            header_line(1, Some(&["lattice_route", "read"])),
            header_line(5, Some(&["read"]))
        );
        assert_eq!(
            transcript_tools(agree.as_bytes()).unwrap(),
            Some(names(&["lattice_route", "read"])),
            "the first request/header, not a later change"
        );
        assert_eq!(cross_check("a", &wire, agree.as_bytes()), None);

        let disagree = format!("{user}\n{}\n", header_line(1, Some(&["read"])));
        let a = cross_check("a", &wire, disagree.as_bytes()).unwrap();
        assert!(
            a.contains("attempt a") && a.contains("only on the wire: [lattice_route]"),
            "{a}"
        );
        // No tools in the header (absent field) against a wire that offered some.
        let none = header_line(1, None);
        assert!(cross_check("a", &wire, none.as_bytes()).is_some());
        let missing = cross_check("a", &wire, user.as_bytes()).unwrap();
        assert!(missing.contains("no request/header"), "{missing}");
        let broken = cross_check("a", &wire, b"{not json\n").unwrap();
        assert!(broken.contains("cannot be cross-checked"), "{broken}");
        let mut cut = wire.clone();
        cut.tools_truncated = true;
        assert_eq!(cross_check("a", &cut, disagree.as_bytes()), None);
    }

    #[test]
    fn the_initial_route_is_the_first_agent_request_with_tools() {
        let entries = vec![
            // Recorded out of order: the proxy's seq decides which request came first.
            call("a", 3, "agent", Some(&["read", "lattice_intake"])),
            call("a", 1, "agent", None),
            call("a", 2, "agent", Some(&["read", "lattice_route"])),
            call("a", 4, "oracle", Some(&["read"])),
            call("b", 1, "agent", Some(&["read"])),
            call("c", 1, "agent", Some(&["lattice_open"])),
        ];
        let r = routes(&entries);
        assert_eq!(r["a"].route, "probe");
        assert_eq!(r["a"].seq, 2);
        assert_eq!(r["b"].route, "bypass");
        assert!(!r.contains_key("c"), "no route: absent, not bypass");
        let expect = eval_protocols::task::WireExpectation {
            expected_route: "probe".into(),
            expected_clarification: None,
        };
        let m = metrics(&r["a"], Some(&expect));
        assert_eq!(m["wire_routed"], 1.0);
        assert_eq!(m["wire_bypassed"], 0.0);
        assert_eq!(m["wire_route_matches"], 1.0);
        let m = metrics(&r["b"], Some(&expect));
        assert_eq!(m["wire_routed"], 0.0);
        assert_eq!(m["wire_route_matches"], 0.0);
        let never = eval_protocols::task::WireExpectation {
            expected_route: "probe".into(),
            expected_clarification: Some("never".into()),
        };
        assert_eq!(metrics(&r["a"], Some(&never))["wire_route_matches"], 0.0);
        assert!(!metrics(&r["a"], None).contains_key("wire_route_matches"));
    }

    fn started(attempt: &str, suite: &str, task: &str) -> events::AttemptStarted {
        events::AttemptStarted {
            schema: events::SCHEMA,
            attempt: attempt.into(),
            slot: format!("{suite}-{task}"),
            number: 1,
            phase: eval_core::phase::Phase::Statistical,
            suite: suite.into(),
            task: task.into(),
            arm: "plugin".into(),
            rep: 1,
            rerun_of: None,
            session: 1,
            started_at: String::new(),
        }
    }

    #[test]
    fn only_the_wire_sets_wire_metrics_in_a_suite_that_lists_them() {
        let tasks = vec![eval_protocols::TaskBundle {
            suite: "override".into(),
            id: "t".into(),
            dir: "protocols/p/tasks/override/t".into(),
            spec: eval_protocols::TaskSpec {
                id: "t".into(),
                suite: "override".into(),
                timeout_seconds: 60,
                metrics: vec![],
                grader: eval_protocols::task::Grader {
                    runtime: "r".into(),
                    command: vec![],
                },
                oracle: None,
                description: None,
                stand_in: false,
                workspace_git: false,
                rounds: vec![],
                after_failed_round: None,
                wire: Some(eval_protocols::task::WireExpectation {
                    expected_route: "contract".into(),
                    expected_clarification: None,
                }),
            },
        }];
        let entries = vec![call("a", 1, "agent", Some(&CONTRACT_TOOLS))];
        let wire = Wire {
            suites: ["override"].into_iter().collect(),
            routes: routes(&entries),
            tasks: &tasks,
        };
        // A grader-emitted value is dropped; the wire's replace it.
        let forged: BTreeMap<String, f64> = [
            ("wire_route_matches".to_owned(), 0.0),
            ("score".to_owned(), 7.0),
        ]
        .into_iter()
        .collect();
        let m = wire.apply(&started("a", "override", "t"), forged.clone());
        assert_eq!(m["wire_route_matches"], 1.0);
        assert_eq!(m["wire_routed"], 1.0);
        assert_eq!(m["score"], 7.0);
        // No recorded request with tools: absent, never the forged value.
        let m = wire.apply(&started("b", "override", "t"), forged.clone());
        assert!(!m.contains_key("wire_route_matches"), "{m:?}");
        // A suite that lists no wire metric keeps its metrics as they are.
        let m = wire.apply(&started("a", "simple", "t"), forged.clone());
        assert_eq!(m, forged);
    }
}
