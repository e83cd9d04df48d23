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

use super::StatsError;
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
}
