//! Power of an interval gate at freeze, by simulation with the gate's own resampling and
//! decision rule: n task-level differences d = e + σ·z (z i.i.d. N(0, 1), drawn exactly as
//! [`super::calibrate`] draws them), the rule's interval method and confidence, and the gate
//! passing when the lower bound clears the rule's threshold.
//!
//! The percentile, BCa and v0.4 percentile intervals of a mean are location-equivariant for
//! fixed resampling seeds (shifting every difference by c shifts both bounds by c; z₀ and the
//! acceleration do not change), and scale-equivariant. So with common random numbers the gate
//! passes replicate r at effect e exactly when e > t − σ·L_r, where L_r is the lower bound of
//! replicate r's standard-normal draws: one simulation of R lower bounds gives the power at any
//! effect (the fraction of r with L_r > (t − e)/σ) and the minimum detectable effect at a target
//! power (t − σ·L at the (1 − target) quantile of L), with no search.

use super::error::StatsError;
use super::interval::{intervals, ndtri};
use super::resample::{ExactMode, ResampleConfig, multiset_count, resample};
use super::rng::{ChaChaStream, PURPOSE_CALIBRATE_DATA};
use super::v04::{V04_SAMPLES, v04_interval_units};

/// Exact enumeration per replicate only while it is cheap (as calibration).
const EXACT_LIMIT: u128 = 20_000;

/// The R simulated lower bounds of one method at n tasks, sorted ascending.
pub fn null_lower_bounds(
    n: usize,
    method: &str,
    confidence: f64,
    reps: u64,
    seed: u64,
    resamples: u64,
) -> Result<Vec<f64>, StatsError> {
    if n == 0 || reps == 0 {
        return Err(StatsError::Input("n and reps must be at least 1".into()));
    }
    if !(confidence > 0.0 && confidence < 1.0) {
        return Err(StatsError::Input("confidence must lie in (0, 1)".into()));
    }
    let exact = multiset_count(n) <= EXACT_LIMIT;
    let mut out = Vec::with_capacity(reps as usize);
    for r in 0..reps {
        let mut rng = ChaChaStream::new(seed, PURPOSE_CALIBRATE_DATA, r);
        let d: Vec<f64> = (0..n).map(|_| ndtri(rng.unit())).collect();
        let rc = ResampleConfig {
            resamples,
            seed: seed.wrapping_add(r).wrapping_add(1),
            exact: if exact {
                ExactMode::Always
            } else {
                ExactMode::Never
            },
            threads: 1,
        };
        let lo = match method {
            "percentile" | "bca" => {
                let dist = resample(&[&d], &rc)?;
                let i = intervals(&[&d], &dist, &|m: &[f64]| m[0], confidence)?;
                if method == "bca" {
                    i.bca[0]
                } else {
                    i.percentile[0]
                }
            }
            "v04-percentile" => v04_interval_units(
                &d,
                d.len(),
                &format!("calibrate:{seed}:{r}"),
                confidence,
                V04_SAMPLES,
            )
            .map_or(f64::NAN, |v| v.lower),
            other => {
                return Err(StatsError::Input(format!(
                    "power is simulated for percentile, bca and v04-percentile intervals, not {other:?}"
                )));
            }
        };
        out.push(lo);
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

/// Power and minimum detectable effect from the sorted null lower bounds.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Power {
    /// Tasks per simulated suite.
    pub n: usize,
    /// Replicates simulated.
    pub reps: u64,
    /// The declared effect (metric units), if any.
    pub effect: Option<f64>,
    /// The task-level standard deviation (metric units) the effect is judged against.
    pub sd: f64,
    /// The rule's threshold on the lower bound.
    pub threshold: f64,
    /// P(pass) at `effect`; `None` without a declared effect.
    pub power: Option<f64>,
    /// Monte Carlo standard error of `power`.
    pub power_se: Option<f64>,
    /// The smallest effect (metric units) passing with probability ≥ 0.8.
    pub mde80: f64,
}

/// The probability that the gate passes at `effect` (metric units): the fraction of replicates
/// whose bound clears, i.e. L_r > (threshold − effect) / sd.
pub fn power_at(lower: &[f64], effect: f64, sd: f64, threshold: f64) -> f64 {
    if lower.is_empty() || sd <= 0.0 {
        return f64::NAN;
    }
    let cut = (threshold - effect) / sd;
    lower.iter().filter(|l| **l > cut).count() as f64 / lower.len() as f64
}

/// The smallest effect (metric units) above which at least `target` of the replicates pass:
/// #{L_r > cut} ≥ ⌈target·R⌉ exactly when cut < L at ascending index R − ⌈target·R⌉, so the
/// minimum detectable effect is threshold − sd·L there (any larger effect reaches the target).
pub fn mde(lower: &[f64], target: f64, sd: f64, threshold: f64) -> f64 {
    let r = lower.len();
    if r == 0 {
        return f64::NAN;
    }
    let need = ((target * r as f64).ceil() as usize).clamp(1, r);
    threshold - sd * lower[r - need]
}

/// Power and MDE of one rule.
pub fn power(lower: &[f64], n: usize, effect: Option<f64>, sd: f64, threshold: f64) -> Power {
    let reps = lower.len() as u64;
    let p = effect.map(|e| power_at(lower, e, sd, threshold));
    Power {
        n,
        reps,
        effect,
        sd,
        threshold,
        power: p,
        power_se: p.map(|p| (p * (1.0 - p) / reps.max(1) as f64).sqrt()),
        mde80: mde(lower, 0.8, sd, threshold),
    }
}

/// Replicates of the power simulation at freeze and in the report: a standard error of at most
/// 1.1 points on a power.
pub const POWER_REPS: u64 = 2_000;
/// Resamples per simulated interval when it is not enumerated exactly.
pub const POWER_RESAMPLES: u64 = 1_000;

/// One interval rule's power, as `eval freeze` prints it and the report shows it: both call
/// [`rule_power`], so the figures are the same numbers from the same seeds.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RulePower {
    /// The gate id.
    pub gate: String,
    /// The rule id.
    pub rule: String,
    /// The rule's interval method.
    pub method: String,
    /// The method simulated (`percentile` stands in for `v04-percentile`).
    pub simulated: String,
    /// No `[power.<gate>]` declaration: the effect scale is task-level sd units (sd = 1).
    pub sd_units: bool,
    /// The figures.
    #[serde(flatten)]
    pub figures: Power,
}

impl RulePower {
    /// The line `eval freeze` prints after `power: ` and the text report shows.
    pub fn line(&self) -> String {
        let p = &self.figures;
        let unit = if self.sd_units { " sd" } else { "" };
        let at = match (p.effect, p.power, p.power_se) {
            (Some(e), Some(pw), Some(se)) => format!(
                "power at the declared effect {e} (sd {}): {:.1}% ± {:.1}; ",
                p.sd,
                100.0 * pw,
                100.0 * se
            ),
            _ => String::new(),
        };
        format!(
            "gate {} rule {} ({}{}, {} tasks, threshold {}, {} simulated runs): {at}minimum detectable effect at 80% power: {:.3}{unit}",
            self.gate,
            self.rule,
            self.method,
            if self.method == self.simulated {
                String::new()
            } else {
                format!(", simulated as {}", self.simulated)
            },
            p.n,
            p.threshold,
            p.reps,
            p.mde80
        )
    }
}

/// What [`rule_power`] needs of one interval rule and its plan.
#[derive(Clone, Debug)]
pub struct RulePowerInput<'a> {
    /// The gate id.
    pub gate: &'a str,
    /// The rule id.
    pub rule: &'a str,
    /// The rule's interval method (its own or the plan's).
    pub method: &'a str,
    /// Tasks in the gate's suite.
    pub n: usize,
    /// The plan's confidence.
    pub confidence: f64,
    /// The plan's seed.
    pub seed: u64,
    /// The rule's threshold on the lower bound (0 when it has none).
    pub threshold: f64,
    /// `[power.<gate>]`: (effect, sd) in the metric's units.
    pub declared: Option<(f64, f64)>,
}

/// The rule's power at the declared effect and its minimum detectable effect at 80 % power,
/// from one simulation of its own interval at n tasks ([`POWER_REPS`] replicates). v0.4's
/// method is simulated as the exact percentile bootstrap (its 20,000 sampled resamples per
/// interval would make thousands of simulated suites take minutes).
pub fn rule_power(i: &RulePowerInput<'_>) -> Result<RulePower, StatsError> {
    let simulated = if i.method == "v04-percentile" {
        "percentile"
    } else {
        i.method
    };
    let lower = null_lower_bounds(
        i.n,
        simulated,
        i.confidence,
        POWER_REPS,
        i.seed,
        POWER_RESAMPLES,
    )?;
    let (effect, sd) = match i.declared {
        Some((e, sd)) => (Some(e), sd),
        None => (None, 1.0),
    };
    Ok(RulePower {
        gate: i.gate.to_owned(),
        rule: i.rule.to_owned(),
        method: i.method.to_owned(),
        simulated: simulated.to_owned(),
        sd_units: i.declared.is_none(),
        figures: power(&lower, i.n, effect, sd, i.threshold),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_and_mde_agree_with_each_other() {
        let lower = null_lower_bounds(6, "percentile", 0.95, 400, 7, 500).unwrap();
        let m = mde(&lower, 0.8, 2.0, 1.0);
        assert!(power_at(&lower, m + 1e-9, 2.0, 1.0) >= 0.8);
        assert!(power_at(&lower, m - 1e-6, 2.0, 1.0) < 0.8);
        // More effect, more power; a higher threshold needs more effect.
        assert!(power_at(&lower, 3.0, 1.0, 0.0) >= power_at(&lower, 1.0, 1.0, 0.0));
        assert!(mde(&lower, 0.8, 1.0, 1.0) > mde(&lower, 0.8, 1.0, 0.0));
    }

    /// The report's power rows equal freeze's only because both call `rule_power` with the
    /// plan's seed: computed with another seed (a broken report path), the figures differ, so
    /// the report-equals-freeze test would catch it.
    #[test]
    fn rule_power_is_deterministic_in_its_seed_and_another_seed_differs() {
        let input = |seed| RulePowerInput {
            gate: "icae",
            rule: "r",
            method: "v04-percentile",
            n: 3,
            confidence: 0.95,
            seed,
            threshold: 0.0,
            declared: Some((15.0, 12.0)),
        };
        let a = rule_power(&input(20_240_601)).unwrap();
        assert_eq!(a, rule_power(&input(20_240_601)).unwrap());
        assert_eq!(a.simulated, "percentile");
        let b = rule_power(&input(20_240_602)).unwrap();
        assert_ne!(a.line(), b.line());
        assert!(a.line().starts_with(
            "gate icae rule r (v04-percentile, simulated as percentile, 3 tasks, threshold 0, 2000 simulated runs): power at the declared effect 15 (sd 12): "
        ));
    }
}
