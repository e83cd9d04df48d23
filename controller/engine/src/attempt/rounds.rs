//! A multi-round attempt's rounds (docs/rounds.md): one agent container, one harness session.
//!
//! The shim runs round k's harness, kills what it left running and reports `/_eval/round`
//! (`control.rs`, `fn round_end`); [`DockerExecutor::round_loop`] then freezes the container
//! (`Runtime::pause_labelled`), archives the workspace (the round's snapshot), grades it with
//! `hidden/rounds/<k>/` only (`grade.rs`, `fn grade_with`: network none, workspace read-only),
//! records `round_finished`, writes round k+1's prompt into the attempt's own prompt file (the
//! only place the agent can read it, and only from now on), records `round_started`, thaws the
//! container and answers whether to go on. A round still open when the container ends is
//! finished from the container's end ([`DockerExecutor::finish_open_round`]); rounds never begun
//! are recorded `unreached`.
//!
//! The agent can post `/_eval/round` itself: it can only end its own round early. It never sees
//! a later round's prompt before that round begins, nor any round's hidden files.

use super::classify::{EngineFault, Graded, RoundSeen};
use super::executor::{DockerExecutor, Seen};
use super::grade::GradeTarget;
use super::prepare::Prepared;
use super::round_end::RoundEnd;
use crate::{AttemptReport, AttemptSpec};
use eval_core::fault::FaultCode;
use eval_evidence::ledger::Digest;
use eval_protocols::TaskBundle;
use eval_protocols::task::AfterFailedRound;
use eval_proxy::Role;
use eval_runlog::events::{self, RoundArtifacts, RoundFinished, RoundHarness, RoundStarted};
use eval_runtimes::Runtime;
use std::collections::BTreeMap;
use std::path::Path;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The attempt's own prompt file in a multi-round attempt (in the attempt directory, outside
/// the workspace and the agent's filesystem).
pub(super) const ROUND_PROMPT: &str = "round-prompt.md";

/// Where the round loop is and what it saw.
#[derive(Default)]
pub(super) struct Rounds {
    /// Rounds recorded `round_finished` (passed or failed), in order.
    pub(super) finished: Vec<RoundFinished>,
    /// The round begun and not yet finished (1-based).
    pub(super) open: Option<usize>,
    /// The attempt stopped after a failed round (`after_failed_round = "stop"`).
    pub(super) stopped: bool,
    /// The agent's (turns, tokens) at the last round's end, to count the next round's.
    meter_mark: (u64, u64),
    /// Notes and faults of snapshots and gradings.
    pub(super) seen: Seen,
    /// Each finished round's test output and reward bytes (Harbor's `test-stdout.txt` and
    /// `reward.txt` in its grader output), for the round metrics.
    pub(super) tests: Vec<RoundTests>,
    /// Grading containers' time.
    pub(super) container_seconds: f64,
    pub(super) recording_failure: Option<String>,
}

impl Rounds {
    /// The round observations for `classify` (unreached rounds are `NotRun`).
    pub(super) fn observed(&self, declared: usize) -> Vec<RoundSeen> {
        (0..declared)
            .map(|i| match self.finished.get(i) {
                Some(f) => RoundSeen {
                    graded: match f.graded.as_str() {
                        "scored" => Graded::Scored,
                        "not_run" | "unreached" => Graded::NotRun,
                        _ => Graded::Unscorable(f.detail.clone().unwrap_or_default()),
                    },
                    grader_engine: None,
                },
                None => RoundSeen {
                    graded: Graded::NotRun,
                    grader_engine: None,
                },
            })
            .collect()
    }
}

/// What one round's grader left for the round metrics: the tests' output and the reward file,
/// each `None` when absent.
#[derive(Clone, Debug, Default)]
pub struct RoundTests {
    pub round: u32,
    pub output: Option<Vec<u8>>,
    pub reward: Option<Vec<u8>>,
}

/// The most of a round's test output and reward file read (`evocode-grade.sh` caps them alike).
const MAX_TEST_OUTPUT_BYTES: u64 = 16 << 20;
const MAX_REWARD_BYTES: u64 = 4096;

/// Reads `test-stdout.txt` and `reward.txt` of a round's grader output directory, each `None`
/// when absent or unreadable (a grader of another format leaves neither).
pub(super) fn round_tests(round: u32, out: &Path) -> RoundTests {
    let read = |name: &str, cap: u64| {
        eval_evidence::leftovers::Beneath::open(out)
            .and_then(|o| o.read_file(name, cap))
            .ok()
    };
    RoundTests {
        round,
        output: read("test-stdout.txt", MAX_TEST_OUTPUT_BYTES),
        reward: read("reward.txt", MAX_REWARD_BYTES),
    }
}

/// The attempt's metrics from its rounds: the last scored round's `score.json` metrics, each
/// also as `round<k>_<name>` for every scored round k, plus `rounds_passed` and `rounds_reached`;
/// and, when any round's grader left Harbor's test output, the round metrics of
/// `eval_core::round_metrics::summarize` (v0.4's `v04_*` and the corrected `rounds_*`) — a round
/// reached but without output counts as ungraded, an unreached one as unreached.
pub fn attempt_metrics(
    rounds: &[RoundFinished],
    declared: usize,
    tests: &[RoundTests],
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for r in rounds.iter().filter(|r| r.graded == "scored") {
        for (name, v) in &r.metrics {
            out.insert(format!("round{}_{name}", r.round), *v);
        }
    }
    if let Some(last) = rounds.iter().rev().find(|r| r.graded == "scored") {
        out.extend(last.metrics.iter().map(|(k, v)| (k.clone(), *v)));
    }
    let passed = rounds.iter().filter(|r| r.status == "passed").count();
    let reached = rounds.iter().filter(|r| r.status != "unreached").count();
    out.insert("rounds_passed".into(), passed as f64);
    out.insert("rounds_reached".into(), reached.min(declared) as f64);
    if tests.iter().any(|t| t.output.is_some()) {
        let inputs: Vec<eval_core::round_metrics::RoundInput<'_>> = rounds
            .iter()
            .filter(|r| r.status != "unreached")
            .map(|r| {
                let t = tests.iter().find(|t| t.round == r.round);
                eval_core::round_metrics::RoundInput {
                    round: r.round,
                    output: t.and_then(|t| t.output.as_deref()),
                    reward: t.and_then(|t| t.reward.as_deref()),
                }
            })
            .collect();
        let declared = u32::try_from(declared).unwrap_or(u32::MAX);
        out.extend(eval_core::round_metrics::summarize(declared, &inputs).named());
    }
    out
}

impl DockerExecutor {
    /// Appends a round entry; the first failure to record becomes the attempt report's
    /// `recording_failure`, as every other entry's does.
    async fn record<T: serde::Serialize>(
        &self,
        kind: &str,
        payload: &T,
        k: usize,
        spec: &AttemptSpec,
        rounds: &mut Rounds,
    ) {
        if let Err(e) = self.control.rec.append(kind, payload).await {
            rounds.recording_failure.get_or_insert(format!(
                "cannot record round {k} of attempt {}: {e}",
                spec.attempt
            ));
        }
    }

    /// Makes `p` a multi-round attempt: the attempt's own prompt file holds round 1's prompt
    /// (recorded `round_started`), and `/_eval/round` goes to the returned receiver.
    pub(super) async fn begin_rounds(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        dir: &Path,
        p: &mut Prepared,
        ctl: &super::control::AttemptControl,
        rounds: &mut Rounds,
    ) -> Result<mpsc::Receiver<RoundEnd>, Box<AttemptReport>> {
        p.prompt = dir.join(ROUND_PROMPT);
        if let Err(why) = self.deliver_prompt(spec, task, p, 1, rounds).await {
            return Err(Box::new(AttemptReport::infra(
                FaultCode::ControllerError,
                why,
            )));
        }
        let (tx, rx) = mpsc::channel(1);
        ctl.set_rounds(tx);
        Ok(rx)
    }

    /// Writes round `k`'s prompt into the attempt's prompt file (same inode, so the bind mount
    /// shows it) and records `round_started`.
    async fn deliver_prompt(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        k: usize,
        rounds: &mut Rounds,
    ) -> Result<(), String> {
        let src = p.task_dir.join(eval_protocols::task::round_prompt(k));
        let text = std::fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        std::fs::write(&p.prompt, &text).map_err(|e| format!("{}: {e}", p.prompt.display()))?;
        let payload = RoundStarted {
            schema: events::SCHEMA,
            attempt: spec.attempt.clone(),
            round: k as u32,
            rounds: task.spec.rounds.len() as u32,
            timeout_seconds: task.spec.round_timeout(k),
            max_tokens: task.spec.rounds.get(k - 1).and_then(|r| r.max_tokens),
            prompt_digest: Digest::of(&text).to_string(),
            started_at: events::now_rfc3339(),
        };
        self.record(events::ROUND_STARTED, &payload, k, spec, rounds)
            .await;
        rounds.open = Some(k);
        Ok(())
    }

    /// Takes each round's end until the last round, a stop, or the container's end (`done`).
    pub(super) async fn round_loop(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        mut rx: mpsc::Receiver<RoundEnd>,
        done: CancellationToken,
        rounds: &mut Rounds,
    ) {
        let label = format!("{}={}", eval_runtimes::policy::LABEL_ATTEMPT, spec.attempt);
        loop {
            let end = tokio::select! {
                m = rx.recv() => m,
                _ = done.cancelled() => None,
            };
            let Some(RoundEnd { report, reply }) = end else {
                return;
            };
            let Some(k) = rounds.open else {
                let _ = reply.send(false);
                continue;
            };
            // Frozen, nothing of the agent's runs while its round is archived and graded.
            if let Err(e) = self.rt.pause_labelled(&label, true).await {
                let f = super::classify::engine_fault(&e);
                rounds.seen.obs.engine.get_or_insert(EngineFault {
                    code: f.code,
                    detail: format!("freezing the agent for round {k}'s grade: {}", f.detail),
                });
                let _ = reply.send(false);
                return;
            }
            let harness = RoundHarness {
                exit: report.exit,
                signal: report.signal,
                timed_out: report.timed_out,
                with_container: false,
            };
            let mark = self.meter_now(spec);
            // The calls the proxy has recorded go into the ledger before this round's
            // `round_finished`, so ledger order tells which round each call belongs to
            // (`eval show`'s `rounds`, the site's rounds table).
            self.bridge.flush().await;
            let failed = self
                .finish_round(spec, task, p, k, harness, mark, rounds)
                .await;
            let last = k >= task.spec.rounds.len();
            let stop = failed && task.spec.after_failed_round == Some(AfterFailedRound::Stop);
            let next = !last && !stop;
            if next && let Err(why) = self.deliver_prompt(spec, task, p, k + 1, rounds).await {
                rounds.seen.notes.push(format!("round {}: {why}", k + 1));
                rounds
                    .seen
                    .obs
                    .host_io
                    .get_or_insert(super::classify::HostIo::of(
                        format!("round {}'s prompt", k + 1),
                        &std::io::Error::other(why),
                    ));
            }
            rounds.stopped = stop && !last;
            let go_on = next && rounds.open == Some(k + 1);
            if let Err(e) = self.rt.pause_labelled(&label, false).await {
                let f = super::classify::engine_fault(&e);
                rounds.seen.obs.engine.get_or_insert(f);
            }
            let _ = reply.send(go_on);
            if !go_on {
                return;
            }
        }
    }

    /// The agent role's (turns, input + output tokens) so far.
    fn meter_now(&self, spec: &AttemptSpec) -> (u64, u64) {
        self.proxy
            .meter(&spec.attempt)
            .ok()
            .and_then(|m| {
                m.roles
                    .get(&Role::Agent)
                    .map(|a| (a.turns, a.tokens().input + a.tokens().output))
            })
            .unwrap_or_default()
    }

    /// Round `k`'s end: snapshot, grade with its own hidden files, record. True when it failed.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn finish_round(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        k: usize,
        harness: RoundHarness,
        (turns, tokens): (u64, u64),
        rounds: &mut Rounds,
    ) -> bool {
        rounds.open = None;
        let (turns0, tokens0) = rounds.meter_mark;
        rounds.meter_mark = (turns, tokens);
        let round_tokens = tokens.saturating_sub(tokens0);
        let snapshot = self.snapshot_round(p, k, rounds).await;
        let out = p.out.with_file_name(format!("out-round-{k}"));
        let mut seen = Seen::default();
        let mut report = AttemptReport::default();
        self.grade_round(spec, task, p, k, &out, &mut seen, &mut report)
            .await;
        rounds.container_seconds += report.container_seconds;
        let tests = round_tests(k as u32, &out);
        let test_output = tests
            .output
            .as_deref()
            .and_then(|b| self.store_bytes(&format!("round {k}'s test output"), b, &mut seen));
        let reward = tests
            .reward
            .as_deref()
            .and_then(|b| self.store_bytes(&format!("round {k}'s reward.txt"), b, &mut seen));
        rounds.tests.push(tests);
        let (graded, detail) = match &seen.obs.graded {
            Graded::Scored => ("scored", None),
            Graded::Unscorable(w) => ("unscorable", Some(w.clone())),
            Graded::NotRun => ("not_run", None),
        };
        let failures = round_failures(&harness, task, k, round_tokens, graded);
        let grader_engine = seen.obs.grader_engine.take();
        let detail = detail.or_else(|| grader_engine.as_ref().map(|e| e.detail.clone()));
        if let Some(e) = grader_engine {
            rounds.seen.obs.grader_engine.get_or_insert(EngineFault {
                code: e.code,
                detail: format!("round {k}: {}", e.detail),
            });
        }
        merge_seen(&mut rounds.seen, seen, k);
        let failed = !failures.is_empty();
        let payload = RoundFinished {
            schema: events::SCHEMA,
            attempt: spec.attempt.clone(),
            round: k as u32,
            status: if failed { "failed" } else { "passed" }.to_owned(),
            failures,
            harness: Some(harness),
            graded: graded.to_owned(),
            detail,
            metrics: if graded == "scored" {
                report.metrics
            } else {
                BTreeMap::new()
            },
            model_turns: turns.saturating_sub(turns0),
            tokens: round_tokens,
            artifacts: RoundArtifacts {
                snapshot,
                grader_output: report.artifacts.grader_output,
                grader_log: report.artifacts.grader_log,
                test_output,
                reward,
            },
            finished_at: events::now_rfc3339(),
        };
        self.record(events::ROUND_FINISHED, &payload, k, spec, rounds)
            .await;
        rounds.finished.push(payload);
        failed
    }

    /// Round `k`'s snapshot: the workspace as the round left it, archived off the runtime. Its
    /// observations join the rounds'; a failure to archive is the attempt's recording failure.
    async fn snapshot_round(&self, p: &Prepared, k: usize, rounds: &mut Rounds) -> Option<String> {
        // The snapshot: the workspace as the round left it.
        let (store, ws) = (self.store.clone(), p.workspace.clone());
        let snap = super::executor::off_runtime(move || {
            let mut seen = Seen::default();
            let mut report = AttemptReport::default();
            super::archive::archive(&store, &ws, &mut seen, &mut report);
            (seen, report.artifacts.workspace)
        })
        .await;
        match snap {
            Ok((s, d)) => {
                merge_seen(&mut rounds.seen, s, k);
                d
            }
            Err(why) => {
                rounds.recording_failure.get_or_insert(why);
                None
            }
        }
    }

    /// Round `k` graded with its own hidden files into `out` (created here); a directory that
    /// cannot be created leaves the round ungraded, named.
    #[allow(clippy::too_many_arguments)]
    async fn grade_round(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        k: usize,
        out: &Path,
        seen: &mut Seen,
        report: &mut AttemptReport,
    ) {
        match std::fs::create_dir(out) {
            Ok(()) => {
                let target = GradeTarget {
                    hidden: p.task_dir.join(eval_protocols::task::round_hidden(k)),
                    out: out.to_path_buf(),
                    label: format!("grade-round-{k}"),
                };
                self.grade_with(spec, task, p, &target, seen, report).await;
            }
            Err(e) => {
                seen.obs.host_io = Some(super::classify::HostIo::of(
                    format!("round {k}'s grader output directory"),
                    &e,
                ));
                seen.obs.graded = Graded::NotRun;
            }
        }
    }

    /// After the container: the round still open is finished from how the container ended (the
    /// workspace is final), and every round never begun is recorded `unreached`.
    pub(super) async fn finish_open_round(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        p: &Prepared,
        end: Option<&super::classify::End>,
        report: &AttemptReport,
        rounds: &mut Rounds,
    ) {
        if let Some(k) = rounds.open {
            let harness = RoundHarness {
                exit: match end {
                    Some(super::classify::End::Exited(c)) => Some(*c as i32),
                    _ => None,
                },
                signal: None,
                timed_out: matches!(end, Some(super::classify::End::TimedOut { .. })),
                with_container: true,
            };
            let tokens = report.tokens.input + report.tokens.output;
            self.finish_round(
                spec,
                task,
                p,
                k,
                harness,
                (report.model_turns, tokens),
                rounds,
            )
            .await;
        }
        let declared = task.spec.rounds.len();
        for k in rounds.finished.len() + 1..=declared {
            let payload = RoundFinished {
                schema: events::SCHEMA,
                attempt: spec.attempt.clone(),
                round: k as u32,
                status: "unreached".to_owned(),
                failures: Vec::new(),
                harness: None,
                graded: "unreached".to_owned(),
                detail: None,
                metrics: BTreeMap::new(),
                model_turns: 0,
                tokens: 0,
                artifacts: RoundArtifacts::default(),
                finished_at: events::now_rfc3339(),
            };
            self.record(events::ROUND_FINISHED, &payload, k, spec, rounds)
                .await;
            rounds.finished.push(payload);
        }
    }
}

/// A snapshot's or a grading's notes and host faults into the rounds' own.
fn merge_seen(into: &mut Seen, from: Seen, k: usize) {
    into.notes
        .extend(from.notes.into_iter().map(|n| format!("round {k}: {n}")));
    let o = from.obs;
    if into.obs.host_io.is_none() {
        into.obs.host_io = o.host_io;
    }
    if into.obs.leftover_host_fault.is_none() {
        into.obs.leftover_host_fault = o.leftover_host_fault;
    }
    if into.obs.over_budget.is_none() {
        into.obs.over_budget = o.over_budget;
    }
}

/// Why round `k` failed, in the order `round_finished` lists them: the harness (timed out, or a
/// non-zero exit), the round's token budget, then the grading (`graded` as recorded).
fn round_failures(
    harness: &RoundHarness,
    task: &TaskBundle,
    k: usize,
    round_tokens: u64,
    graded: &str,
) -> Vec<String> {
    let mut failures = Vec::new();
    if harness.timed_out {
        failures.push("timed_out".to_owned());
    } else if harness.exit != Some(0) {
        failures.push("exit".to_owned());
    }
    if let Some(max) = task.spec.rounds.get(k - 1).and_then(|r| r.max_tokens)
        && round_tokens > max
    {
        failures.push("over_budget".to_owned());
    }
    match graded {
        "unscorable" => failures.push("unscorable".to_owned()),
        "not_run" => failures.push("grader_not_run".to_owned()),
        _ => {}
    }
    failures
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn round(k: u32, status: &str, graded: &str, metrics: &[(&str, f64)]) -> RoundFinished {
        RoundFinished {
            schema: 1,
            attempt: "s#1".into(),
            round: k,
            status: status.into(),
            failures: vec![],
            harness: None,
            graded: graded.into(),
            detail: None,
            metrics: metrics.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect(),
            model_turns: 0,
            tokens: 0,
            artifacts: RoundArtifacts::default(),
            finished_at: String::new(),
        }
    }

    /// The attempt's metrics are the last scored round's, every scored round's under its own
    /// name, and the counts of passed and reached rounds; unscored and unreached rounds add none.
    #[test]
    fn attempt_metrics_are_the_last_scored_rounds_beside_each_rounds_own() {
        let rounds = [
            round(1, "passed", "scored", &[("score", 100.0)]),
            round(2, "failed", "scored", &[("score", 50.0)]),
            round(3, "failed", "unscorable", &[]),
            round(4, "unreached", "unreached", &[]),
        ];
        let m = attempt_metrics(&rounds, 4, &[]);
        assert_eq!(m["score"], 50.0);
        assert_eq!(m["round1_score"], 100.0);
        assert_eq!(m["round2_score"], 50.0);
        assert!(!m.contains_key("round3_score"));
        assert_eq!(m["rounds_passed"], 1.0);
        assert_eq!(m["rounds_reached"], 3.0);
        let none = attempt_metrics(&[round(1, "failed", "unscorable", &[])], 2, &[]);
        assert!(!none.contains_key("score"));
        assert_eq!(none["rounds_reached"], 1.0);
    }

    fn case(id: &str, origin: &str, scenario: &str, status: &str) -> String {
        format!(
            "CASE_RESULT case_id={id} origin_step={origin} requirement_ref=r case_type=t status={status} scenario=\"{scenario}\"\n"
        )
    }

    /// The hook hands every reached round's Harbor output to the round metrics: round 2
    /// renumbers (c001 is now `b`), `a` regresses; round 3 is unreached.
    #[test]
    fn round_metrics_reach_the_attempts_metrics_from_the_rounds_test_output() {
        let r1 = format!(
            "{}{}",
            case("c001", "round-1", "a", "success"),
            case("c002", "round-1", "b", "success")
        );
        let r2 = format!(
            "{}{}",
            case("c001", "round-1", "b", "success"),
            case("c002", "round-1", "a", "fail")
        );
        let rounds = [
            round(1, "passed", "scored", &[("reward", 1.0)]),
            round(2, "passed", "scored", &[("reward", 0.0)]),
            round(3, "unreached", "unreached", &[]),
        ];
        let tests = [
            RoundTests {
                round: 1,
                output: Some(r1.into_bytes()),
                reward: Some(b"1\n".to_vec()),
            },
            RoundTests {
                round: 2,
                output: Some(r2.into_bytes()),
                reward: Some(b"0\n".to_vec()),
            },
        ];
        let m = attempt_metrics(&rounds, 3, &tests);
        // v0.4: c002 success -> fail: 1; rounds 100 and 50 (two observed); Σ reward 1.
        assert_eq!(m["v04_regressions"], 1.0);
        assert_eq!(m["v04_cumulative_case_score"], 75.0);
        assert_eq!(m["v04_score"], 1.0);
        // Corrected: scenario a regressed; (100 + 50 + 0) / 3; Σ 1 over 3 rounds.
        assert_eq!(m["rounds_regressions"], 1.0);
        assert_eq!(m["rounds_cumulative_case_score"], 50.0);
        assert_eq!(m["rounds_score"], 1.0);
        assert!((m["rounds_mean_reward"] - 1.0 / 3.0).abs() < 1e-12);
        // The engine's own stay beside them.
        assert_eq!(m["rounds_reached"], 2.0);
        assert_eq!(m["round1_reward"], 1.0);
        // A grader of another format leaves no test output: no round metrics.
        let m = attempt_metrics(&rounds, 3, &[]);
        assert!(!m.contains_key("rounds_regressions"));
        assert!(!m.contains_key("v04_score"));
    }
}
