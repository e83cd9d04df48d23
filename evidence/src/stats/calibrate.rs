//! Calibration by simulation: under a null of no effect (task differences drawn i.i.d. from
//! N(0, 1)), how often does each method's lower bound clear zero at n tasks — the false-pass
//! rate of a "lower bound > 0" gate, nominally (1 − confidence)/2 — and how often at a given
//! effect (differences from N(effect, 1)): its power. The sign-flip test counts as passing when
//! p ≤ (1 − confidence)/2.
//!
//! Replicate r draws its data from ChaCha8 stream (seed, PURPOSE_CALIBRATE_DATA, r) through
//! Φ⁻¹ of 53-bit uniforms, resamples with seed `seed + r + 1`, and (for `v04-percentile`) uses the
//! seed string `calibrate:<seed>:<r>`. Replicates run in parallel; results do not depend on it.

use serde::{Deserialize, Serialize};

use super::error::StatsError;
use super::interval::{intervals, ndtri};
use super::resample::{ExactMode, ResampleConfig, multiset_count, resample, thread_count};
use super::rng::{ChaChaStream, PURPOSE_CALIBRATE_DATA};
use super::signflip::sign_flip;
use super::v04::{V04_SAMPLES, v04_interval_units};

/// The methods calibration can simulate, in report order.
pub const METHODS: [&str; 4] = ["percentile", "bca", "v04-percentile", "sign-flip"];
/// Exact enumeration per replicate only while it is cheap.
const CALIBRATE_EXACT_LIMIT: u128 = 20_000;

/// What to simulate (`eval stats calibrate`).
#[derive(Clone, Debug)]
pub struct CalibrateConfig {
    /// Tasks per simulated suite (at least 1).
    pub n: usize,
    /// Which of [`METHODS`] to evaluate; empty means all.
    pub methods: Vec<String>,
    /// Two-sided confidence level of the intervals, in (0, 1).
    pub confidence: f64,
    /// Simulated replicates (at least 1); the Monte Carlo error shrinks as 1/√reps.
    pub reps: u64,
    /// Mean task difference under the alternative, in units of its standard deviation (power).
    pub effect: f64,
    /// Master seed; the same config gives the same result on any machine and thread count.
    pub seed: u64,
    /// Bootstrap resamples per replicate (when not enumerated exactly).
    pub resamples: u64,
    /// Worker threads; 0 means one per available CPU.
    pub threads: usize,
}

/// One method's simulated behaviour.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRow {
    /// The method's name (one of [`METHODS`]).
    pub method: String,
    /// The rate a well-calibrated bound would have: (1 − confidence)/2.
    pub nominal: f64,
    /// Fraction of null replicates in which the gate passed.
    pub false_pass_rate: f64,
    /// Monte Carlo standard error of `false_pass_rate`.
    pub false_pass_se: f64,
    /// `false_pass_rate / nominal`: 1 is well calibrated, above 1 is liberal.
    pub false_pass_ratio: f64,
    /// Fraction of replicates at `effect` in which the gate passed.
    pub power: f64,
    /// False-pass rate over twice the nominal rate.
    pub warn: bool,
}

/// The result of a calibration run (what `eval stats calibrate --json` prints).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Document schema, `eval.stats.calibrate/1`.
    pub schema: String,
    /// Tasks per simulated suite.
    pub n: usize,
    /// Confidence level used.
    pub confidence: f64,
    /// Replicates simulated.
    pub reps: u64,
    /// Effect size used for power.
    pub effect: f64,
    /// Master seed used.
    pub seed: u64,
    /// `exact` or `sampled (B = …)` — the bootstrap used per replicate.
    pub bootstrap: String,
    /// One row per evaluated method, in [`METHODS`] order.
    pub rows: Vec<CalibrationRow>,
}

/// Runs the simulation; fails on an invalid config (n or reps 0, an unknown method, a bad level).
pub fn calibrate(cfg: &CalibrateConfig) -> Result<Calibration, StatsError> {
    if cfg.n == 0 {
        return Err(StatsError::Input("--n must be at least 1".into()));
    }
    if cfg.reps == 0 {
        return Err(StatsError::Input("--reps must be at least 1".into()));
    }
    if !(cfg.confidence > 0.0 && cfg.confidence < 1.0) {
        return Err(StatsError::Input("--confidence must lie in (0, 1)".into()));
    }
    if !cfg.effect.is_finite() {
        return Err(StatsError::Input("--effect must be finite".into()));
    }
    let methods: Vec<String> = if cfg.methods.is_empty() {
        METHODS.iter().map(|m| m.to_string()).collect()
    } else {
        cfg.methods.clone()
    };
    if let Some(m) = methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
        return Err(StatsError::Input(format!(
            "unknown method {m:?} ({})",
            METHODS.join(", ")
        )));
    }
    let exact = multiset_count(cfg.n) <= CALIBRATE_EXACT_LIMIT;
    let alpha = (1.0 - cfg.confidence) / 2.0;
    let reps = cfg.reps as usize;
    // passes[rep][method][null=0/effect=1]
    let mut passes = vec![[[false; 2]; 4]; reps];
    let threads = thread_count(cfg.threads).min(reps).max(1);
    let per = reps.div_ceil(threads);
    let run = |start: usize, out: &mut [[[bool; 2]; 4]]| -> Result<(), StatsError> {
        for (k, slot) in out.iter_mut().enumerate() {
            let r = (start + k) as u64;
            let mut rng = ChaChaStream::new(cfg.seed, PURPOSE_CALIBRATE_DATA, r);
            let z: Vec<f64> = (0..cfg.n).map(|_| ndtri(rng.unit())).collect();
            for (w, shift) in [0.0, cfg.effect].into_iter().enumerate() {
                let d: Vec<f64> = z.iter().map(|x| x + shift).collect();
                let rc = ResampleConfig {
                    resamples: cfg.resamples,
                    seed: cfg.seed.wrapping_add(r).wrapping_add(1),
                    exact: if exact {
                        ExactMode::Always
                    } else {
                        ExactMode::Never
                    },
                    threads: 1,
                };
                for (mi, m) in METHODS.iter().enumerate() {
                    if !methods.iter().any(|x| x == m) {
                        continue;
                    }
                    slot[mi][w] = match *m {
                        "percentile" | "bca" => {
                            let dist = resample(&[&d], &rc)?;
                            let i = intervals(&[&d], &dist, &|m: &[f64]| m[0], cfg.confidence)?;
                            let lo = if *m == "bca" {
                                i.bca[0]
                            } else {
                                i.percentile[0]
                            };
                            lo > 0.0
                        }
                        "v04-percentile" => v04_interval_units(
                            &d,
                            d.len(),
                            &format!("calibrate:{}:{r}", cfg.seed),
                            cfg.confidence,
                            V04_SAMPLES,
                        )
                        .is_some_and(|v| v.lower > 0.0),
                        _ => sign_flip(&d, cfg.resamples, rc.seed).p <= alpha,
                    };
                }
            }
        }
        Ok(())
    };
    let results: Vec<Result<(), StatsError>> = std::thread::scope(|s| {
        let handles: Vec<_> = passes
            .chunks_mut(per)
            .enumerate()
            .map(|(t, chunk)| {
                let run = &run;
                s.spawn(move || run(t * per, chunk))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(StatsError::Input("calibration worker failed".into())))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    let rows = METHODS
        .iter()
        .enumerate()
        .filter(|(_, m)| methods.iter().any(|x| x == *m))
        .map(|(mi, m)| {
            let fp = passes.iter().filter(|p| p[mi][0]).count() as f64 / reps as f64;
            let pw = passes.iter().filter(|p| p[mi][1]).count() as f64 / reps as f64;
            CalibrationRow {
                method: m.to_string(),
                nominal: alpha,
                false_pass_rate: fp,
                false_pass_se: (fp * (1.0 - fp) / reps as f64).sqrt(),
                false_pass_ratio: fp / alpha,
                power: pw,
                warn: fp > 2.0 * alpha,
            }
        })
        .collect();
    Ok(Calibration {
        schema: "eval.stats.calibrate/1".into(),
        n: cfg.n,
        confidence: cfg.confidence,
        reps: cfg.reps,
        effect: cfg.effect,
        seed: cfg.seed,
        bootstrap: if exact {
            "exact".into()
        } else {
            format!("sampled (B = {})", cfg.resamples)
        },
        rows,
    })
}
