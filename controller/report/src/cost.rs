//! What a run will cost, before it runs (`eval plan --cost`): the worst case the protocol's
//! budgets allow, and — from a pilot run's ledger — what the schedule is expected to cost.
//!
//! The worst case is a bound, not a guess: every slot takes every attempt it may
//! (`[reruns]`: each statistical slot `1 + max_reruns_per_slot`, each infrastructure slot
//! `max_infra_attempts`; control slots call no model), every attempt makes its
//! `[budgets.attempt] max_requests` and uses its `max_tokens`, every token at the dearest price
//! the protocol lists — and then the run budget (`[budgets.run]`), which the proxy enforces over
//! every call of the run whatever the attempts' sum, caps tokens and spend. Which of the two binds
//! is said. The expected cost is the pilot's mean per attempt, per suite and arm (the pilot's
//! overall mean where it ran none of a pair, said), times the schedule's first attempts: reruns
//! are not expected, and an estimate is never a bound.

use eval_core::phase::Phase;
use eval_evidence::report::RunData;
use std::collections::BTreeMap;

/// The schedule's slots by phase, as the engine would run them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotCounts {
    pub control: u64,
    pub infrastructure: u64,
    pub statistical: u64,
}

impl SlotCounts {
    pub fn add(&mut self, phase: Phase) {
        match phase {
            Phase::Control => self.control += 1,
            Phase::Infrastructure => self.infrastructure += 1,
            Phase::Statistical => self.statistical += 1,
        }
    }
}

/// What bounds a worst-case figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The attempts' own budgets summed over every attempt the slots may take.
    Attempts,
    /// `[budgets.run]`, enforced by the proxy over the whole run.
    RunBudget,
}

/// The most the schedule can cost under the protocol's budgets.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WorstCase {
    /// Attempts that may call the model: every statistical and infrastructure attempt allowed.
    pub attempts: u64,
    /// Model calls: `attempts × [budgets.attempt] max_requests`.
    pub calls: u64,
    pub tokens: u64,
    pub tokens_bound: Bound,
    pub spend_usd: f64,
    pub spend_bound: Bound,
    /// The dearest per-million-token price the spend was computed at, and its model.
    pub dearest_usd_per_mtok: f64,
    pub dearest_model: Option<String>,
}

/// The worst case of `slots` under `protocol`'s budgets and reruns.
pub fn worst_case(protocol: &eval_protocols::Protocol, slots: SlotCounts) -> WorstCase {
    let b = &protocol.budgets;
    let r = &protocol.reruns;
    let attempts = slots.statistical * (1 + u64::from(r.max_reruns_per_slot))
        + slots.infrastructure * u64::from(r.max_infra_attempts.max(1));
    let calls = attempts.saturating_mul(b.attempt.max_requests);
    let attempt_tokens = attempts.saturating_mul(b.attempt.max_tokens);
    let (tokens, tokens_bound) = if attempt_tokens <= b.run.max_tokens {
        (attempt_tokens, Bound::Attempts)
    } else {
        (b.run.max_tokens, Bound::RunBudget)
    };
    let (dearest_usd_per_mtok, dearest_model) = b
        .prices
        .iter()
        .map(|p| {
            let dearest = [
                p.input_usd_per_mtok,
                p.output_usd_per_mtok,
                p.cached_input_usd_per_mtok.unwrap_or(0.0),
                p.cache_write_usd_per_mtok.unwrap_or(0.0),
            ]
            .into_iter()
            .fold(0.0_f64, f64::max);
            (dearest, Some(p.model.clone()))
        })
        .fold((0.0, None), |a, b| if b.0 > a.0 { b } else { a });
    let priced = tokens as f64 * dearest_usd_per_mtok / 1e6;
    // A call to an unpriced model is refused by the proxy, so the listed prices bound the spend.
    let (spend_usd, spend_bound) = if priced <= b.run.max_spend_usd {
        (priced, Bound::Attempts)
    } else {
        (b.run.max_spend_usd, Bound::RunBudget)
    };
    WorstCase {
        attempts,
        calls,
        tokens,
        tokens_bound,
        spend_usd,
        spend_bound,
        dearest_usd_per_mtok,
        dearest_model,
    }
}

/// One suite and arm's mean use per attempt in the pilot.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PerAttempt {
    /// Attempts of the pilot it is the mean of (ended attempts that called the model or not).
    pub attempts: u64,
    /// The agent's model calls (the proxy's turns; a scripted oracle's answers call no model).
    pub calls: f64,
    /// Every metered token and dollar of the attempt.
    pub tokens: f64,
    pub spend_usd: f64,
}

impl PerAttempt {
    fn of<'a>(attempts: impl Iterator<Item = &'a eval_evidence::report::AttemptData>) -> Self {
        let mut m = PerAttempt::default();
        for a in attempts {
            m.attempts += 1;
            m.calls += a.model_turns as f64;
            m.tokens += a.tokens.total() as f64;
            m.spend_usd += a.spend_usd;
        }
        if m.attempts > 0 {
            let n = m.attempts as f64;
            m.calls /= n;
            m.tokens /= n;
            m.spend_usd /= n;
        }
        m
    }
}

/// The pilot's use per attempt: per (suite, arm), and over all its model-calling attempts.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PilotUse {
    pub by_pair: BTreeMap<(String, String), PerAttempt>,
    pub overall: PerAttempt,
}

/// Reads the pilot's ended, model-calling attempts (control slots call no model).
pub fn pilot_use(pilot: &RunData) -> PilotUse {
    let calling = || {
        pilot
            .attempts
            .iter()
            .filter(|a| a.outcome.is_some() && a.phase != Phase::Control)
    };
    let mut pairs: BTreeMap<(String, String), Vec<&eval_evidence::report::AttemptData>> =
        BTreeMap::new();
    for a in calling() {
        pairs
            .entry((a.suite.clone(), a.arm.clone()))
            .or_default()
            .push(a);
    }
    PilotUse {
        by_pair: pairs
            .into_iter()
            .map(|(k, v)| (k, PerAttempt::of(v.into_iter())))
            .collect(),
        overall: PerAttempt::of(calling()),
    }
}

/// The schedule's expected use from a pilot.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Expected {
    /// First attempts of the statistical and infrastructure slots (reruns not expected).
    pub attempts: u64,
    pub calls: f64,
    pub tokens: f64,
    pub spend_usd: f64,
    /// (suite, arm) pairs of the schedule the pilot ran none of, priced at its overall mean.
    pub from_overall: Vec<(String, String)>,
}

/// `slots` — every (phase, suite, arm) of the schedule — at the pilot's means.
pub fn expected<'a>(
    slots: impl Iterator<Item = (Phase, &'a str, &'a str)>,
    pilot: &PilotUse,
) -> Expected {
    let mut e = Expected::default();
    for (phase, suite, arm) in slots {
        if phase == Phase::Control {
            continue;
        }
        let key = (suite.to_owned(), arm.to_owned());
        let per = match pilot.by_pair.get(&key) {
            Some(p) if p.attempts > 0 => p,
            _ => {
                if !e.from_overall.contains(&key) {
                    e.from_overall.push(key);
                }
                &pilot.overall
            }
        };
        e.attempts += 1;
        e.calls += per.calls;
        e.tokens += per.tokens;
        e.spend_usd += per.spend_usd;
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protocol(
        max_reruns: u32,
        infra: u32,
        run_tokens: u64,
        run_usd: f64,
    ) -> eval_protocols::Protocol {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../protocols/init-template/protocols/demo/protocol.toml"),
        )
        .unwrap();
        let mut p: eval_protocols::Protocol = toml::from_str(&text).unwrap();
        p.reruns.max_reruns_per_slot = max_reruns;
        p.reruns.max_infra_attempts = infra;
        p.budgets.run.max_tokens = run_tokens;
        p.budgets.run.max_spend_usd = run_usd;
        p
    }

    #[test]
    fn the_worst_case_takes_every_rerun_and_the_dearest_price_under_the_run_budget() {
        let p = protocol(2, 3, u64::MAX, f64::MAX);
        let slots = SlotCounts {
            control: 5,
            infrastructure: 2,
            statistical: 10,
        };
        let w = worst_case(&p, slots);
        // 10 × (1 + 2) + 2 × 3; control slots call no model.
        assert_eq!(w.attempts, 36);
        assert_eq!(w.calls, 36 * p.budgets.attempt.max_requests);
        assert_eq!(w.tokens, 36 * p.budgets.attempt.max_tokens);
        assert_eq!(w.tokens_bound, Bound::Attempts);
        let dearest = p
            .budgets
            .prices
            .iter()
            .map(|x| x.output_usd_per_mtok.max(x.input_usd_per_mtok))
            .fold(0.0, f64::max);
        assert_eq!(w.dearest_usd_per_mtok, dearest);
        assert!((w.spend_usd - w.tokens as f64 * dearest / 1e6).abs() < 1e-6);
        assert_eq!(w.spend_bound, Bound::Attempts);
    }

    #[test]
    fn the_run_budget_caps_tokens_and_spend_and_says_so() {
        let p = protocol(0, 1, 1_000, 0.5);
        let w = worst_case(
            &p,
            SlotCounts {
                control: 0,
                infrastructure: 0,
                statistical: 4,
            },
        );
        assert_eq!(w.attempts, 4);
        assert_eq!((w.tokens, w.tokens_bound), (1_000, Bound::RunBudget));
        // 1,000 tokens at the dearest price are far below $0.50: the attempts bind the spend.
        assert_eq!(w.spend_bound, Bound::Attempts);
        let p = protocol(0, 1, u64::MAX, 0.5);
        let w = worst_case(
            &p,
            SlotCounts {
                control: 0,
                infrastructure: 0,
                statistical: 4,
            },
        );
        assert_eq!((w.spend_usd, w.spend_bound), (0.5, Bound::RunBudget));
    }

    #[test]
    fn the_expected_cost_is_the_pilots_mean_per_pair_and_its_overall_mean_elsewhere() {
        let mut pilot = PilotUse::default();
        pilot.by_pair.insert(
            ("s".into(), "a".into()),
            PerAttempt {
                attempts: 2,
                calls: 3.0,
                tokens: 100.0,
                spend_usd: 0.25,
            },
        );
        pilot.overall = PerAttempt {
            attempts: 4,
            calls: 5.0,
            tokens: 300.0,
            spend_usd: 1.0,
        };
        let slots = [
            (Phase::Control, "s", "a"),
            (Phase::Statistical, "s", "a"),
            (Phase::Statistical, "s", "a"),
            (Phase::Infrastructure, "s", "b"),
        ];
        let e = expected(slots.iter().map(|(p, s, a)| (*p, *s, *a)), &pilot);
        assert_eq!(e.attempts, 3);
        assert_eq!(e.calls, 3.0 + 3.0 + 5.0);
        assert_eq!(e.tokens, 500.0);
        assert_eq!(e.spend_usd, 1.5);
        assert_eq!(e.from_overall, vec![("s".to_string(), "b".to_string())]);
    }
}
