//! What an attempt's ending means: a pure function from typed observations to an outcome.
//!
//! The rule it enforces: only causes the agent cannot produce may become an infrastructure fault
//! (and so possibly a rerun). Everything an agent can provoke — a 4xx from the upstream, a
//! refused clarifying question, odd files in its workspace, a grader that chokes on its work, a
//! second attestation — is an outcome of the attempt. The table in docs/grading.md ("Classifying
//! an attempt") is this function, rule by rule; the unit tests below are that table.

use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use std::io::ErrorKind;

/// `ENOSPC`, `EDQUOT` and `EIO` (Linux): the host's disks failing the controller's own writes.
const ENOSPC: i32 = 28;
const EDQUOT: i32 = 122;
const EIO: i32 = 5;

/// A failed write (or create) of the controller's own, on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIo {
    /// What was being written, for the detail.
    pub what: String,
    pub kind: ErrorKind,
    pub errno: Option<i32>,
}

impl HostIo {
    pub fn of(what: impl Into<String>, e: &std::io::Error) -> Self {
        Self {
            what: what.into(),
            kind: e.kind(),
            errno: e.raw_os_error(),
        }
    }

    /// The storage itself failed (full, over quota, broken): a fault of the host.
    pub fn is_storage_fault(&self) -> bool {
        matches!(self.errno, Some(ENOSPC | EDQUOT | EIO))
            || matches!(self.kind, ErrorKind::StorageFull)
    }
}

/// A container-engine failure (a `RuntimeError` with its `fault()` code).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineFault {
    pub code: FaultCode,
    pub detail: String,
}

/// How the agent's container ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Exited(i64),
    TimedOut { after_seconds: u64 },
}

/// What the shim's attestation said (the first one decides; later ones change nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attested {
    /// The shim never attested (the harness was never started by it).
    Missing,
    Ok,
    Mismatch(String),
}

/// The agent role's meter, as the proxy counted it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Upstream {
    /// Calls the upstream answered with 2xx.
    pub turns: u64,
    pub contract_violations: u64,
    pub budget_exhaustions: u64,
    /// 4xx other than 429: the agent's request was refused by the provider.
    pub client_errors: u64,
    /// 5xx or 429 after the proxy's retries.
    pub server_errors: u64,
    /// No answer at all (connect, reset, timeout).
    pub transport_errors: u64,
}

/// What the proxy saw of the provider itself (never caused by an agent's request).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provider {
    /// The upstream refused the run's key (401/403) or the account is out of balance (402):
    /// the cause, as the run's stop message says it.
    pub account_refused: Option<String>,
    /// The agent's last upstream call failed on the provider's side (429/5xx, capacity, a
    /// keep-alive-only close, a stall) and no complete turn came after it.
    pub last_fault: Option<eval_proxy::ProviderFault>,
}

/// The oracle's side of the attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Oracle {
    /// In-bounds questions the oracle model could not answer for reasons of its own (transport,
    /// 5xx/429, no text, the proxy not running).
    pub unavailable: u32,
    /// Questions refused for size, count or because the task has no oracle (the agent's doing).
    pub refused: u32,
}

/// The harness-metrics cross-check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accounting {
    NotDeclared,
    Matched,
    Mismatch(String),
    MetricsMissing,
    MetricsUnreadable(String),
}

impl Accounting {
    /// The `attempt_outcome.accounting` value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Accounting::NotDeclared => "not_declared",
            Accounting::Matched => "matched",
            Accounting::Mismatch(_) => "mismatch",
            Accounting::MetricsMissing => "metrics_missing",
            Accounting::MetricsUnreadable(_) => "metrics_unreadable",
        }
    }
}

/// The grader's side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Graded {
    /// Not run (an earlier rule decided, or the run was cut short).
    NotRun,
    Scored,
    /// The grader ran and gave no usable score (non-zero exit, timeout, missing, oversized or
    /// malformed `score.json`): the grader judged the agent's workspace unscorable.
    Unscorable(String),
}

/// Everything the attempt's rooms observed, in the order the attempt met them. `None`/default
/// means "did not happen".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observations {
    /// The engine failed the agent's container (create/start/wait/policy check).
    pub engine: Option<EngineFault>,
    /// A failed write of the controller's own (attempt dir, artifact store, socket dir).
    pub host_io: Option<HostIo>,
    /// Reading the agent's leftovers hit a failure of the host itself (EIO, ENOMEM, EMFILE…).
    pub leftover_host_fault: Option<String>,
    pub attested: Attested,
    /// `None`: the container never ended on its own (an engine fault decided first).
    pub end: Option<End>,
    pub upstream: Upstream,
    pub provider: Provider,
    pub oracle: Oracle,
    pub accounting: Accounting,
    /// The grader's engine failure (image, create, wait): the grader could not run at all.
    pub grader_engine: Option<EngineFault>,
    pub graded: Graded,
    /// Storing the attempt's artifacts would have passed the attempt's artifact quota (why): what
    /// the agent left is its own doing, never the host's capacity.
    pub over_budget: Option<String>,
    /// A multi-round attempt's rounds, in order (empty: a single-round attempt, graded by
    /// `graded`). The attempt is scored when some round was; a round's own failure (its time
    /// limit, its exit, its grade) is that round's record, never the attempt's fault.
    pub rounds: Vec<RoundSeen>,
}

/// One round of a multi-round attempt, as the round loop saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundSeen {
    /// Its grade (`NotRun` for an unreached round).
    pub graded: Graded,
    /// Its grader could not run at all (engine, image): the controller's side, as rule 7.
    pub grader_engine: Option<EngineFault>,
}

impl Default for Observations {
    fn default() -> Self {
        Self {
            engine: None,
            host_io: None,
            leftover_host_fault: None,
            attested: Attested::Ok,
            end: Some(End::Exited(0)),
            upstream: Upstream::default(),
            provider: Provider::default(),
            oracle: Oracle::default(),
            accounting: Accounting::NotDeclared,
            grader_engine: None,
            graded: Graded::Scored,
            over_budget: None,
            rounds: Vec::new(),
        }
    }
}

/// The attempt's outcome, its fault code when it is an infrastructure fault, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classification {
    pub outcome: Outcome,
    pub infra_fault: Option<FaultCode>,
    pub detail: Option<String>,
}

impl Classification {
    fn infra(code: FaultCode, detail: String) -> Self {
        Self {
            outcome: Outcome::InfraFault,
            infra_fault: Some(code),
            detail: Some(detail),
        }
    }

    fn outcome(outcome: Outcome, detail: Option<String>) -> Self {
        Self {
            outcome,
            infra_fault: None,
            detail,
        }
    }
}

/// The first rule that applies decides (see docs/grading.md, "Classifying an attempt").
pub fn classify(obs: &Observations) -> Classification {
    if let Some(c) = infrastructure(obs) {
        return c;
    }
    let c = agent_outcome(obs);
    let c = accounted(obs, c);
    let c = graded(obs, c);
    within_artifact_budget(obs, c)
}

/// Rule 14: artifacts past the attempt's own artifact quota (reserved from the run's budget when
/// it started, so only its own bytes can use it up) — the attempt was stored without them and
/// not graded; a completed one becomes `agent_error` (its metrics are the missing-data values).
fn within_artifact_budget(obs: &Observations, c: Classification) -> Classification {
    let Some(why) = &obs.over_budget else {
        return c;
    };
    let outcome = match c.outcome {
        Outcome::Completed => Outcome::AgentError,
        o => o,
    };
    let note = format!("its artifacts would pass its artifact quota: {why}");
    Classification::outcome(outcome, join(c.detail, vec![note]))
}

/// Rules 1–6: the causes the agent cannot produce.
fn infrastructure(obs: &Observations) -> Option<Classification> {
    if let Some(h) = &obs.host_io {
        let code = if h.is_storage_fault() {
            FaultCode::FilesystemCapacity
        } else {
            FaultCode::ControllerError
        };
        return Some(Classification::infra(
            code,
            format!("writing {}: {:?}", h.what, h.kind),
        ));
    }
    if let Some(e) = &obs.engine {
        return Some(Classification::infra(e.code, e.detail.clone()));
    }
    if let Attested::Mismatch(why) = &obs.attested {
        return Some(Classification::infra(
            FaultCode::AttestationMismatch,
            format!("{why}; the agent never started"),
        ));
    }
    if let Some(why) = &obs.leftover_host_fault {
        return Some(Classification::infra(
            FaultCode::FilesystemCapacity,
            format!("the host failed reading the attempt's files: {why}"),
        ));
    }
    if obs.oracle.unavailable > 0 {
        return Some(Classification::infra(
            FaultCode::OracleServiceUnavailable,
            "the oracle model could not answer an in-bounds clarifying question".into(),
        ));
    }
    let u = &obs.upstream;
    // The run's account: nothing an agent sends turns a valid key invalid or spends the balance
    // past what preflight checked against the budgets.
    if let Some(why) = &obs.provider.account_refused {
        return Some(Classification::infra(
            FaultCode::UpstreamAccountRefused,
            why.clone(),
        ));
    }
    // The agent gave up because the provider failed its last call: the harness's own retries
    // did not outlast the provider's fault. Only when the agent also did nothing that could have
    // provoked it (no 4xx, no contract or budget refusal; in-flight calls per attempt are capped,
    // see docs/grading.md, "Provider faults").
    if let Some(f) = &obs.provider.last_fault
        && matches!(obs.end, Some(End::Exited(c)) if c != 0)
        && u.client_errors == 0
        && u.contract_violations == 0
        && u.budget_exhaustions == 0
    {
        return Some(Classification::infra(
            FaultCode::ProviderUnavailable,
            format!(
                "the provider failed the agent's last call (call {}, {}: {}; upstream status {}, body {}) and the harness gave up",
                f.seq,
                f.kind,
                f.detail,
                f.status.map_or("none".to_owned(), |s| s.to_string()),
                f.body_digest.as_deref().unwrap_or("none"),
            ),
        ));
    }
    let provider_failed = u.server_errors + u.transport_errors > 0;
    // Once a call was answered the agent has seen model output: a rerun would redraw a
    // trajectory already under way, so only an upstream that never answered is the host's.
    if provider_failed
        && u.turns == 0
        && u.client_errors == 0
        && u.contract_violations == 0
        && u.budget_exhaustions == 0
    {
        return Some(Classification::infra(
            FaultCode::HostNetworkOutage,
            format!(
                "the upstream failed before any model call was answered ({} transport error(s), {} 5xx/429 after retries)",
                u.transport_errors, u.server_errors
            ),
        ));
    }
    if let Some(e) = &obs.grader_engine {
        return Some(Classification::infra(
            e.code,
            format!("the grader could not run: {}", e.detail),
        ));
    }
    if let Some((k, e)) = obs
        .rounds
        .iter()
        .enumerate()
        .find_map(|(i, r)| r.grader_engine.as_ref().map(|e| (i + 1, e)))
    {
        return Some(Classification::infra(
            e.code,
            format!("round {k}'s grader could not run: {}", e.detail),
        ));
    }
    None
}

/// The attempt's grade: a single-round attempt's own; a multi-round attempt is scored when any
/// of its rounds was, else unscorable with the first round's reason.
fn attempt_graded(obs: &Observations) -> Graded {
    if obs.rounds.is_empty() {
        return obs.graded.clone();
    }
    if obs.rounds.iter().any(|r| r.graded == Graded::Scored) {
        return Graded::Scored;
    }
    let why = obs
        .rounds
        .iter()
        .enumerate()
        .find_map(|(i, r)| match &r.graded {
            Graded::Unscorable(w) => Some(format!("round {}: {w}", i + 1)),
            _ => None,
        })
        .unwrap_or_else(|| "no round was graded".to_owned());
    Graded::Unscorable(why)
}

/// Rules 7–11: how the agent's own run ended.
fn agent_outcome(obs: &Observations) -> Classification {
    let u = &obs.upstream;
    let mut notes = Vec::new();
    if u.server_errors + u.transport_errors > 0 {
        notes.push(format!(
            "the upstream failed {} call(s) after {} answered",
            u.server_errors + u.transport_errors,
            u.turns
        ));
    }
    if u.client_errors > 0 {
        notes.push(format!(
            "the upstream refused {} of the agent's call(s) (4xx)",
            u.client_errors
        ));
    }
    if obs.oracle.refused > 0 {
        notes.push(format!(
            "{} clarifying question(s) refused",
            obs.oracle.refused
        ));
    }
    let (outcome, why) = match obs.end {
        Some(End::TimedOut { after_seconds }) => (
            Outcome::Timeout,
            Some(format!("killed after {after_seconds}s")),
        ),
        _ if u.contract_violations > 0 => (
            Outcome::ContractViolation,
            Some(format!(
                "{} call(s) outside the model contract",
                u.contract_violations
            )),
        ),
        _ if u.budget_exhaustions > 0 => (
            Outcome::BudgetExhausted,
            Some(format!(
                "{} call(s) refused over budget",
                u.budget_exhaustions
            )),
        ),
        Some(End::Exited(0)) if obs.attested == Attested::Missing => (
            Outcome::AgentError,
            Some("the container exited without the shim's attestation".into()),
        ),
        Some(End::Exited(0)) => (Outcome::Completed, None),
        Some(End::Exited(code)) => (
            Outcome::AgentError,
            Some(format!("the agent exited with status {code}")),
        ),
        None => (
            Outcome::AgentError,
            Some("the container did not end on its own".into()),
        ),
    };
    Classification::outcome(outcome, join(why, notes))
}

/// Rule 12: a completed attempt whose declared accounting does not hold.
fn accounted(obs: &Observations, c: Classification) -> Classification {
    if c.outcome != Outcome::Completed {
        return c;
    }
    let why = match &obs.accounting {
        Accounting::NotDeclared | Accounting::Matched => return c,
        Accounting::Mismatch(why) => why.clone(),
        Accounting::MetricsMissing => "the declared harness metrics file is missing".into(),
        Accounting::MetricsUnreadable(why) => {
            format!("the declared harness metrics file is unreadable: {why}")
        }
    };
    Classification::outcome(
        Outcome::AccountingMismatch,
        join(Some(why), c.detail.into_iter().collect()),
    )
}

/// Rule 13: the grader ran but could not score the workspace — the agent's work is unscorable,
/// so the attempt keeps its outcome (a completed one becomes `agent_error`) and its metrics are
/// the protocol's missing-data values.
fn graded(obs: &Observations, c: Classification) -> Classification {
    let Graded::Unscorable(why) = &attempt_graded(obs) else {
        return c;
    };
    let outcome = match c.outcome {
        Outcome::Completed => Outcome::AgentError,
        o => o,
    };
    let note = format!("the grader could not score the workspace: {why}");
    Classification::outcome(outcome, join(c.detail, vec![note]))
}

fn join(first: Option<String>, rest: Vec<String>) -> Option<String> {
    let all: Vec<String> = first.into_iter().chain(rest).collect();
    (!all.is_empty()).then(|| all.join("; "))
}

/// A runtime error as an engine fault: its typed code, or `container_runtime_failure`.
pub(crate) fn engine_fault(e: &eval_runtimes::RuntimeError) -> EngineFault {
    let (code, detail) = fault_pair(e);
    EngineFault { code, detail }
}

fn fault_pair(e: &eval_runtimes::RuntimeError) -> (FaultCode, String) {
    (
        e.fault().unwrap_or(FaultCode::ContainerRuntimeFailure),
        e.to_string(),
    )
}

#[cfg(test)]
mod provider_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fault(kind: &str, status: Option<u16>) -> eval_proxy::ProviderFault {
        eval_proxy::ProviderFault {
            kind: kind.into(),
            status,
            body_digest: Some("sha256:ab".into()),
            seq: 4,
            detail: "d".into(),
        }
    }

    #[test]
    fn an_account_refusal_is_an_infrastructure_fault_whatever_else_happened() {
        let obs = Observations {
            provider: Provider {
                account_refused: Some("the upstream account is out of balance".into()),
                last_fault: None,
            },
            end: Some(End::Exited(1)),
            upstream: Upstream {
                turns: 3,
                ..Upstream::default()
            },
            ..Observations::default()
        };
        let c = classify(&obs);
        assert_eq!(c.infra_fault, Some(FaultCode::UpstreamAccountRefused));
        assert!(c.detail.unwrap().contains("out of balance"));
    }

    #[test]
    fn the_provider_failing_the_last_call_is_a_fault_only_when_the_agent_gave_up_on_it() {
        let base = Observations {
            provider: Provider {
                account_refused: None,
                last_fault: Some(fault("status", Some(503))),
            },
            end: Some(End::Exited(1)),
            upstream: Upstream {
                turns: 5,
                server_errors: 6,
                ..Upstream::default()
            },
            ..Observations::default()
        };
        let c = classify(&base);
        assert_eq!(c.infra_fault, Some(FaultCode::ProviderUnavailable), "{c:?}");
        let d = c.detail.unwrap();
        assert!(d.contains("503") && d.contains("sha256:ab"), "{d}");
        // The agent finished anyway: its outcome.
        let ok = Observations {
            end: Some(End::Exited(0)),
            ..base.clone()
        };
        assert_eq!(classify(&ok).outcome, Outcome::Completed);
        // The agent could have provoked it: its outcome.
        for u in [
            Upstream {
                client_errors: 1,
                ..base.upstream
            },
            Upstream {
                contract_violations: 1,
                ..base.upstream
            },
            Upstream {
                budget_exhaustions: 1,
                ..base.upstream
            },
        ] {
            let o = Observations {
                upstream: u,
                ..base.clone()
            };
            assert_ne!(
                classify(&o).infra_fault,
                Some(FaultCode::ProviderUnavailable)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(errno: i32, kind: ErrorKind) -> Option<HostIo> {
        Some(HostIo {
            what: "x".into(),
            kind,
            errno: Some(errno),
        })
    }

    fn engine(code: &str) -> Option<EngineFault> {
        Some(EngineFault {
            code: code.parse().unwrap(),
            detail: "d".into(),
        })
    }

    fn up(f: impl FnOnce(&mut Upstream)) -> Upstream {
        let mut u = Upstream::default();
        f(&mut u);
        u
    }

    /// The table of docs/grading.md, "Classifying an attempt": observations → (outcome, code).
    fn table() -> Vec<(&'static str, Observations, Outcome, Option<&'static str>)> {
        use Outcome::*;
        let o = Observations::default;
        vec![
            ("clean run", o(), Completed, None),
            (
                "ENOSPC on own write",
                Observations {
                    host_io: io(28, ErrorKind::StorageFull),
                    ..o()
                },
                InfraFault,
                Some("filesystem_capacity"),
            ),
            (
                "EDQUOT on own write",
                Observations {
                    host_io: io(122, ErrorKind::Other),
                    ..o()
                },
                InfraFault,
                Some("filesystem_capacity"),
            ),
            (
                "EIO on own write",
                Observations {
                    host_io: io(5, ErrorKind::Other),
                    ..o()
                },
                InfraFault,
                Some("filesystem_capacity"),
            ),
            (
                "EACCES on own write",
                Observations {
                    host_io: io(13, ErrorKind::PermissionDenied),
                    ..o()
                },
                InfraFault,
                Some("controller_error"),
            ),
            (
                "engine failure",
                Observations {
                    engine: engine("container_runtime_failure"),
                    end: None,
                    ..o()
                },
                InfraFault,
                Some("container_runtime_failure"),
            ),
            (
                "policy violation at create",
                Observations {
                    engine: engine("policy_violation"),
                    end: None,
                    ..o()
                },
                InfraFault,
                Some("policy_violation"),
            ),
            (
                "shim attestation mismatch",
                Observations {
                    attested: Attested::Mismatch("m".into()),
                    end: Some(End::Exited(1)),
                    ..o()
                },
                InfraFault,
                Some("attestation_mismatch"),
            ),
            (
                "leftover read: host fault",
                Observations {
                    leftover_host_fault: Some("EIO".into()),
                    ..o()
                },
                InfraFault,
                Some("filesystem_capacity"),
            ),
            (
                "in-bounds question, oracle upstream failed",
                Observations {
                    oracle: Oracle {
                        unavailable: 1,
                        refused: 0,
                    },
                    ..o()
                },
                InfraFault,
                Some("oracle_service_unavailable"),
            ),
            (
                "question refused (size/count/no oracle)",
                Observations {
                    oracle: Oracle {
                        unavailable: 0,
                        refused: 3,
                    },
                    end: Some(End::Exited(1)),
                    ..o()
                },
                AgentError,
                None,
            ),
            (
                "refused question, agent still completes",
                Observations {
                    oracle: Oracle {
                        unavailable: 0,
                        refused: 1,
                    },
                    ..o()
                },
                Completed,
                None,
            ),
            (
                "transport errors, no turn answered",
                Observations {
                    upstream: up(|u| u.transport_errors = 2),
                    end: Some(End::Exited(1)),
                    ..o()
                },
                InfraFault,
                Some("host_network_outage"),
            ),
            (
                "5xx/429 after retries, no turn answered",
                Observations {
                    upstream: up(|u| u.server_errors = 1),
                    end: Some(End::Exited(1)),
                    ..o()
                },
                InfraFault,
                Some("host_network_outage"),
            ),
            (
                "5xx after a turn answered, agent fails",
                Observations {
                    upstream: up(|u| {
                        u.server_errors = 1;
                        u.turns = 2
                    }),
                    end: Some(End::Exited(1)),
                    ..o()
                },
                AgentError,
                None,
            ),
            (
                "5xx after a turn answered, agent completes",
                Observations {
                    upstream: up(|u| {
                        u.server_errors = 1;
                        u.turns = 2
                    }),
                    ..o()
                },
                Completed,
                None,
            ),
            (
                "4xx from the upstream (the agent's request)",
                Observations {
                    upstream: up(|u| u.client_errors = 1),
                    end: Some(End::Exited(1)),
                    ..o()
                },
                AgentError,
                None,
            ),
            (
                "4xx, then 5xx, no turn",
                Observations {
                    upstream: up(|u| {
                        u.client_errors = 1;
                        u.server_errors = 1
                    }),
                    end: Some(End::Exited(1)),
                    ..o()
                },
                AgentError,
                None,
            ),
            (
                "transport error and a contract violation",
                Observations {
                    upstream: up(|u| {
                        u.transport_errors = 1;
                        u.contract_violations = 1
                    }),
                    ..o()
                },
                ContractViolation,
                None,
            ),
            (
                "timeout",
                Observations {
                    end: Some(End::TimedOut { after_seconds: 9 }),
                    ..o()
                },
                Timeout,
                None,
            ),
            (
                "timeout beats a contract violation",
                Observations {
                    end: Some(End::TimedOut { after_seconds: 9 }),
                    upstream: up(|u| u.contract_violations = 1),
                    ..o()
                },
                Timeout,
                None,
            ),
            (
                "contract violation",
                Observations {
                    upstream: up(|u| u.contract_violations = 1),
                    ..o()
                },
                ContractViolation,
                None,
            ),
            (
                "budget exhausted",
                Observations {
                    upstream: up(|u| u.budget_exhaustions = 1),
                    end: Some(End::Exited(3)),
                    ..o()
                },
                BudgetExhausted,
                None,
            ),
            (
                "non-zero exit",
                Observations {
                    end: Some(End::Exited(2)),
                    ..o()
                },
                AgentError,
                None,
            ),
            (
                "exit 0 without attestation",
                Observations {
                    attested: Attested::Missing,
                    ..o()
                },
                AgentError,
                None,
            ),
            (
                "accounting mismatch",
                Observations {
                    accounting: Accounting::Mismatch("m".into()),
                    ..o()
                },
                AccountingMismatch,
                None,
            ),
            (
                "declared metrics file missing",
                Observations {
                    accounting: Accounting::MetricsMissing,
                    ..o()
                },
                AccountingMismatch,
                None,
            ),
            (
                "declared metrics file unreadable",
                Observations {
                    accounting: Accounting::MetricsUnreadable("fifo".into()),
                    ..o()
                },
                AccountingMismatch,
                None,
            ),
            (
                "accounting matched",
                Observations {
                    accounting: Accounting::Matched,
                    ..o()
                },
                Completed,
                None,
            ),
            (
                "agent error keeps its outcome over accounting",
                Observations {
                    accounting: Accounting::MetricsMissing,
                    end: Some(End::Exited(1)),
                    ..o()
                },
                AgentError,
                None,
            ),
            (
                "grader could not run (engine)",
                Observations {
                    grader_engine: engine("image_missing"),
                    graded: Graded::NotRun,
                    ..o()
                },
                InfraFault,
                Some("image_missing"),
            ),
            (
                "grader rejects the workspace, completed",
                Observations {
                    graded: Graded::Unscorable("exit 1".into()),
                    ..o()
                },
                AgentError,
                None,
            ),
            (
                "grader rejects the workspace, timeout",
                Observations {
                    graded: Graded::Unscorable("exit 1".into()),
                    end: Some(End::TimedOut { after_seconds: 1 }),
                    ..o()
                },
                Timeout,
                None,
            ),
        ]
    }

    #[test]
    fn classification_follows_the_table() {
        for (name, obs, outcome, code) in table() {
            let c = classify(&obs);
            assert_eq!(c.outcome, outcome, "{name}: {c:?}");
            assert_eq!(c.infra_fault.map(FaultCode::as_str), code, "{name}: {c:?}");
            if outcome != Outcome::Completed {
                assert!(
                    c.detail.is_some(),
                    "{name}: an outcome other than completed says why"
                );
            }
        }
    }

    /// Nothing the agent controls may ever turn into an infrastructure fault: every combination
    /// of agent-side observations (exit, timeout, 4xx, refusals, accounting, grader verdict),
    /// with and without answered turns, classifies as an outcome.
    #[test]
    fn no_agent_cause_becomes_an_infrastructure_fault() {
        let ends = [
            Some(End::Exited(0)),
            Some(End::Exited(1)),
            Some(End::TimedOut { after_seconds: 1 }),
        ];
        let accountings = [
            Accounting::NotDeclared,
            Accounting::Matched,
            Accounting::Mismatch("m".into()),
            Accounting::MetricsMissing,
            Accounting::MetricsUnreadable("u".into()),
        ];
        let graded = [
            Graded::Scored,
            Graded::Unscorable("x".into()),
            Graded::NotRun,
        ];
        for end in ends {
            for acc in &accountings {
                for g in &graded {
                    for bits in 0u8..32 {
                        let upstream = Upstream {
                            turns: u64::from(bits & 1),
                            contract_violations: u64::from(bits >> 1 & 1),
                            budget_exhaustions: u64::from(bits >> 2 & 1),
                            client_errors: u64::from(bits >> 3 & 1),
                            server_errors: 0,
                            transport_errors: 0,
                        };
                        let obs = Observations {
                            end,
                            upstream,
                            accounting: acc.clone(),
                            graded: g.clone(),
                            oracle: Oracle {
                                unavailable: 0,
                                refused: u32::from(bits >> 4 & 1),
                            },
                            attested: if bits & 16 == 0 {
                                Attested::Ok
                            } else {
                                Attested::Missing
                            },
                            ..Observations::default()
                        };
                        let c = classify(&obs);
                        assert_ne!(c.outcome, Outcome::InfraFault, "{obs:?} → {c:?}");
                    }
                }
            }
        }
    }

    /// A round's failure is the round's record: whatever each round's grade, the attempt is an
    /// outcome (never infra) unless a round's grader could not run at all; scored when any round
    /// was, else a completed attempt becomes `agent_error`.
    #[test]
    fn a_failed_round_is_never_an_infrastructure_fault() {
        let grades = [
            Graded::Scored,
            Graded::Unscorable("does not build".into()),
            Graded::NotRun,
        ];
        for a in &grades {
            for b in &grades {
                for end in [
                    Some(End::Exited(0)),
                    Some(End::Exited(1)),
                    Some(End::TimedOut { after_seconds: 1 }),
                ] {
                    let obs = Observations {
                        end,
                        // The single-round field says nothing for a multi-round attempt.
                        graded: Graded::Unscorable("ignored".into()),
                        rounds: vec![
                            RoundSeen {
                                graded: a.clone(),
                                grader_engine: None,
                            },
                            RoundSeen {
                                graded: b.clone(),
                                grader_engine: None,
                            },
                        ],
                        ..Observations::default()
                    };
                    let c = classify(&obs);
                    assert_ne!(c.outcome, Outcome::InfraFault, "{obs:?} → {c:?}");
                    let scored = *a == Graded::Scored || *b == Graded::Scored;
                    if end == Some(End::Exited(0)) {
                        let want = if scored {
                            Outcome::Completed
                        } else {
                            Outcome::AgentError
                        };
                        assert_eq!(c.outcome, want, "{obs:?}");
                    }
                }
            }
        }
        let engine_down = Observations {
            rounds: vec![
                RoundSeen {
                    graded: Graded::Scored,
                    grader_engine: None,
                },
                RoundSeen {
                    graded: Graded::NotRun,
                    grader_engine: Some(EngineFault {
                        code: FaultCode::ImageMissing,
                        detail: "no image".into(),
                    }),
                },
            ],
            ..Observations::default()
        };
        let c = classify(&engine_down);
        assert_eq!(c.infra_fault, Some(FaultCode::ImageMissing));
        assert!(c.detail.unwrap().contains("round 2"));
    }

    /// Artifacts past the run's budget are the attempt's doing: a completed attempt becomes
    /// `agent_error` naming the budget, any other outcome keeps its own; never infra.
    #[test]
    fn artifacts_past_the_budget_are_an_outcome_never_an_infrastructure_fault() {
        let over = Observations {
            over_budget: Some("storing the workspace archive: no room".into()),
            ..Observations::default()
        };
        let c = classify(&over);
        assert_eq!(c.outcome, Outcome::AgentError);
        assert_eq!(c.infra_fault, None);
        assert!(c.detail.unwrap().contains("artifact quota"));
        let timed_out = Observations {
            end: Some(End::TimedOut { after_seconds: 5 }),
            ..over
        };
        assert_eq!(classify(&timed_out).outcome, Outcome::Timeout);
        assert_eq!(
            classify(&Observations::default()).outcome,
            Outcome::Completed
        );
    }

    #[test]
    fn storage_faults_are_told_by_errno_or_kind() {
        let full = std::io::Error::from(ErrorKind::StorageFull);
        assert!(HostIo::of("a", &full).is_storage_fault());
        let quota = std::io::Error::from_raw_os_error(EDQUOT);
        assert!(HostIo::of("a", &quota).is_storage_fault());
        let denied = std::io::Error::from_raw_os_error(13);
        assert!(!HostIo::of("a", &denied).is_storage_fault());
    }
}
