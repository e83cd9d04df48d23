//! A small run fixture: one infrastructure slot and one suite (`s`) with six tasks, arms
//! `base` (baseline), `cand` (gated) and `other`, two repetitions.
#![allow(dead_code)]

use std::collections::BTreeMap;

use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_core::tokens::TokenCounts;
use eval_evidence::gates::{Gate, Op, Rule, Statistic};
use eval_evidence::report::*;

pub const TASKS: [&str; 6] = ["t1", "t2", "t3", "t4", "t5", "t6"];

pub fn attempt(slot: &SlotData, n: u32, outcome: Option<Outcome>, score: f64) -> AttemptData {
    let mut metrics = BTreeMap::new();
    metrics.insert("score".to_string(), score);
    AttemptData {
        slot: slot.id.clone(),
        phase: slot.phase,
        suite: slot.suite.clone(),
        task: slot.task.clone(),
        arm: slot.arm.clone(),
        rep: slot.rep,
        attempt: n,
        outcome,
        infra_fault: None,
        rerun_of: if n > 1 { Some(n - 1) } else { None },
        metrics,
        model_turns: 4,
        tokens: TokenCounts {
            input: 1000,
            output: 200,
            cached: 0,
            reasoning: 0,
        },
        duration_seconds: 10.0,
        upstream_wait_seconds: Some(6.0),
        oracle_calls: 0,
        harness_turns: Some(4),
        harness_tokens: Some(1200),
        upstream: "https://api.example.test".into(),
        accounting: Some("matched".into()),
        metrics_declared: Some(true),
        spend_usd: 0.01,
        before_container: false,
        incomplete_calls: 0,
        incomplete_reserved_tokens: 0,
    }
}

/// Baseline score 50 + 5·task index; candidate adds `uplift[task]`; `other` adds 1.
pub fn run_data(uplift: [f64; 6]) -> RunData {
    let mut slots = vec![SlotData {
        id: "infra-s-t1-base-r0".into(),
        phase: Phase::Infrastructure,
        suite: "s".into(),
        task: "t1".into(),
        arm: "base".into(),
        rep: 0,
    }];
    for (ti, t) in TASKS.iter().enumerate() {
        for arm in ["base", "cand", "other"] {
            for rep in 1..=2u32 {
                let _ = ti;
                slots.push(SlotData {
                    id: format!("stat-s-{t}-{arm}-r{rep}"),
                    phase: Phase::Statistical,
                    suite: "s".into(),
                    task: t.to_string(),
                    arm: arm.into(),
                    rep,
                });
            }
        }
    }
    let attempts = slots
        .iter()
        .map(|s| {
            let ti = TASKS.iter().position(|t| *t == s.task).unwrap();
            let base = 50.0 + 5.0 * ti as f64 + if s.rep == 2 { 1.0 } else { 0.0 };
            let score = match s.arm.as_str() {
                "base" => base,
                "cand" => base + uplift[ti],
                _ => base + 1.0,
            };
            attempt(s, 1, Some(Outcome::Completed), score)
        })
        .collect();
    RunData {
        version: RUN_DATA_VERSION,
        matrix: "m".into(),
        protocol: "p".into(),
        identity: "sha256:94fb0fce13dba54f06a3b36f93167c4acd46a6953f7a66daae8567889a1d5426".into(),
        driver_digest: "sha256:00".into(),
        ledger_head: LedgerHeadRef {
            seq: 42,
            hash: "sha256:ab".into(),
        },
        ledger_verified: true,
        ledger_problems: vec![],
        freeze_drift: vec![],
        identity_retired: false,
        preconditions: vec![],
        preconditions_unmet: vec![],
        fixture_upstream: false,
        upstream: UpstreamEvidence {
            preregistered: Some("https://api.example".into()),
            tls_spki_sha256: vec![],
            sessions: vec!["https://api.example".into()],
        },
        model_free_upstream: false,
        model_free_protocol: false,
        wire_anomalies: vec![],
        signed_evidence: Some(SignedEvidence {
            key: "eval+00000000+AQ==".into(),
            checkpoints: 1,
            last_checkpoint_seq: 42,
            covered: 41,
            unsigned_from: None,
        }),
        allow_unsigned: false,
        artifacts_verified: Some(0),
        plan: StatPlan {
            resamples: 2000,
            seed: 7,
            confidence: 0.95,
            method: "bca".into(),
            seed_string: None,
            report_methods: vec![],
            exact: "auto".into(),
            min_suite_tasks: 5,
            false_fail_bound: None,
            missing_metric_values: BTreeMap::new(),
        },
        power: vec![],
        gates: vec![Gate {
            id: "s".into(),
            suite: Some("s".into()),
            description: None,
            rules: vec![rule(
                "diff",
                Statistic::PairDiffMean,
                Some("score"),
                Op::Ge,
                Some(1.0),
            )],
        }],
        rerunnable_fault_codes: vec![FaultCode::ContainerRuntimeFailure],
        max_reruns_per_slot: Some(2),
        max_infra_attempts: Some(3),
        suites: vec![SuiteData {
            id: "s".into(),
            tasks: TASKS.iter().map(|t| t.to_string()).collect(),
            baseline: "base".into(),
            candidate: "cand".into(),
            other_arms: vec!["other".into()],
            repetitions: 2,
            metrics: vec!["score".into()],
            max_oracle_calls: 0,
            controls: None,
            controls_off: Some("evidence test fixture: its grader is not under test".into()),
            pass_mark: None,
        }],
        slots,
        attempts,
        sequential: None,
        looks_taken: vec![],
    }
}

pub fn rule(id: &str, s: Statistic, metric: Option<&str>, op: Op, threshold: Option<f64>) -> Rule {
    Rule {
        id: id.into(),
        statistic: s,
        metric: metric.map(String::from),
        arm: None,
        op,
        threshold,
        method: None,
        factor: None,
    }
}

pub fn integrity_gate() -> Gate {
    Gate {
        id: "integrity".into(),
        suite: None,
        description: None,
        rules: [
            Statistic::InfraSlotsCompleted,
            Statistic::StatisticalSlotsResolved,
            Statistic::RerunsAuthorized,
            Statistic::SingleEndpoint,
            Statistic::AccountingComplete,
        ]
        .iter()
        .map(|s| rule(&s.name(), *s, None, Op::IsTrue, None))
        .collect(),
    }
}
