//! Percentile and BCa intervals over a [`Distribution`], defined as SciPy 1.17's
//! `scipy.stats.bootstrap` defines them (see the module docs of `stats` for the formulas).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

use super::error::StatsError;
use super::quantile::{type7_select, type7_weighted};
use super::resample::Distribution;

/// Two-sided intervals of one statistic at one confidence level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Intervals {
    /// The two-sided confidence level.
    pub level: f64,
    /// The percentile interval [lower, upper].
    pub percentile: [f64; 2],
    /// The bias-corrected and accelerated interval [lower, upper].
    pub bca: [f64; 2],
    /// Bias correction z₀ and acceleration â of the BCa interval (both 0 when degenerate).
    pub z0: f64,
    /// The BCa acceleration â (from the jackknife).
    pub acceleration: f64,
    /// Every resample gave the estimate: both intervals are [θ̂, θ̂].
    pub degenerate: bool,
}

/// The standard normal distribution N(0, 1).
pub fn std_normal() -> Normal {
    Normal::standard()
}

/// Φ⁻¹ with the ends mapped to ±∞ (statrs panics outside [0, 1]).
pub fn ndtri(p: f64) -> f64 {
    if p.is_nan() {
        f64::NAN
    } else if p <= 0.0 {
        f64::NEG_INFINITY
    } else if p >= 1.0 {
        f64::INFINITY
    } else {
        std_normal().inverse_cdf(p)
    }
}

/// Φ, the standard normal CDF, with ±∞ mapped to 1 and 0.
pub fn ndtr(z: f64) -> f64 {
    if z == f64::INFINITY {
        1.0
    } else if z == f64::NEG_INFINITY {
        0.0
    } else {
        std_normal().cdf(z)
    }
}

/// Intervals of `stat(column means)`. `columns` are the task-level inputs the distribution was
/// drawn from (needed for the jackknife); `estimate` is `stat` of the full-sample column means.
pub fn intervals(
    columns: &[&[f64]],
    dist: &Distribution,
    stat: &dyn Fn(&[f64]) -> f64,
    confidence: f64,
) -> Result<Intervals, StatsError> {
    if !(confidence > 0.0 && confidence < 1.0) {
        return Err(StatsError::Input(format!(
            "confidence {confidence} must lie strictly between 0 and 1"
        )));
    }
    let Some(n) = columns.first().map(|c| c.len()).filter(|&n| n > 0) else {
        return Err(StatsError::Input("intervals need at least one task".into()));
    };
    let full: Vec<f64> = columns.iter().map(|c| super::data::mean(c)).collect();
    let estimate = stat(&full);
    if !estimate.is_finite() {
        return Err(StatsError::Undefined(format!(
            "the estimate is {estimate} on the full sample"
        )));
    }
    let values: Vec<f64> = (0..dist.len()).map(|r| stat(dist.row(r))).collect();
    let bad = values.iter().filter(|v| !v.is_finite()).count();
    if bad > 0 {
        return Err(StatsError::Undefined(format!(
            "{bad} of {} resamples give a non-finite value",
            values.len()
        )));
    }
    let alpha = (1.0 - confidence) / 2.0;
    let tol = 1e-12 * estimate.abs().max(1.0);
    if values.iter().all(|v| (v - estimate).abs() <= tol) {
        return Ok(Intervals {
            level: confidence,
            percentile: [estimate, estimate],
            bca: [estimate, estimate],
            z0: 0.0,
            acceleration: 0.0,
            degenerate: true,
        });
    }

    // Bias correction: share of resamples below the estimate, ties counted half.
    let (below, at_or_below, total): (u128, u128, u128) = match &dist.weights {
        None => {
            let lt = values.iter().filter(|&&v| v < estimate).count() as u128;
            let le = values.iter().filter(|&&v| v <= estimate).count() as u128;
            (lt, le, values.len() as u128)
        }
        Some(w) => {
            let mut lt = 0u128;
            let mut le = 0u128;
            for (v, w) in values.iter().zip(w) {
                if *v < estimate {
                    lt += w;
                }
                if *v <= estimate {
                    le += w;
                }
            }
            (lt, le, dist.total)
        }
    };
    let z0 = ndtri((below + at_or_below) as f64 / (2.0 * total as f64));

    // Acceleration from the jackknife over tasks.
    let acceleration = if n < 2 {
        0.0
    } else {
        let sums: Vec<f64> = columns.iter().map(|c| c.iter().sum::<f64>()).collect();
        let jack: Vec<f64> = (0..n)
            .map(|i| {
                let loo: Vec<f64> = sums
                    .iter()
                    .zip(columns)
                    .map(|(s, c)| (s - c[i]) / (n - 1) as f64)
                    .collect();
                stat(&loo)
            })
            .collect();
        let dot = jack.iter().sum::<f64>() / n as f64;
        let num: f64 = jack.iter().map(|j| (dot - j).powi(3)).sum();
        let den = 6.0
            * jack
                .iter()
                .map(|j| (dot - j).powi(2))
                .sum::<f64>()
                .powf(1.5);
        if den > 0.0 && num.is_finite() {
            num / den
        } else {
            0.0
        }
    };

    let (a1, a2) = if z0.is_infinite() {
        // All resamples on one side of the estimate: the BCa levels collapse onto that end.
        let end = if z0 > 0.0 { 1.0 } else { 0.0 };
        (end, end)
    } else {
        let za = ndtri(alpha);
        let level = |z: f64| {
            let num = z0 + z;
            ndtr(z0 + num / (1.0 - acceleration * num))
        };
        (level(za), level(-za))
    };

    let (percentile, bca) = match &dist.weights {
        None => {
            let mut v = values;
            let q = type7_select(&mut v, &[alpha, 1.0 - alpha, a1, a2]);
            ([q[0], q[1]], [q[2], q[3]])
        }
        Some(w) => {
            let mut pairs: Vec<(f64, u128)> =
                values.iter().copied().zip(w.iter().copied()).collect();
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let t = dist.total;
            (
                [
                    type7_weighted(&pairs, t, alpha),
                    type7_weighted(&pairs, t, 1.0 - alpha),
                ],
                [type7_weighted(&pairs, t, a1), type7_weighted(&pairs, t, a2)],
            )
        }
    };
    Ok(Intervals {
        level: confidence,
        percentile,
        bca,
        z0,
        acceleration,
        degenerate: false,
    })
}
