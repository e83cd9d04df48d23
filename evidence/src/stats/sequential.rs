//! Group-sequential boundaries for preregistered interim looks.
//!
//! Looks are taken at information fractions 0 < t₁ < … < t_K = 1 (the protocol's fractions of
//! the statistical slots). Under the canonical joint distribution the look statistics
//! Z_k = S_k/√t_k come from a Brownian motion S with drift θ: S_k − S_{k−1} ~ N(θΔ_k, Δ_k),
//! Δ_k = t_k − t_{k−1}. A two-sided design stops for efficacy at the first k with |Z_k| ≥ b_k.
//!
//! Boundary shapes (the classical, constant-α designs of Pocock 1977 and O'Brien & Fleming
//! 1979): Pocock b_k = c; O'Brien–Fleming b_k = c·√(1/t_k). The constant c solves
//! P₀(some |Z_k| ≥ b_k) = α by bisection, the crossing probability computed by numerical
//! integration of the joint normal (the Armitage–McPherson–Rowe recursion: the sub-density of
//! Z_k on paths that have not stopped, carried look to look by the normal transition kernel,
//! Simpson's rule on a grid over the continuation region; the crossing mass at each look from Φ in
//! closed form). The Lan–DeMets spending versions (α spent by α(t) = 2·(2 − 2Φ(z_{1−α/4}/√t)),
//! i.e. the O'Brien–Fleming-like function on each side at α/2, or α·ln(1 + (e − 1)t)) solve each b_k in turn so the look spends exactly α(t_k) − α(t_{k−1}).
//!
//! Futility is non-binding: the efficacy boundaries are computed as if the run never stopped for
//! futility, so stopping for it can only lower the error (the usual, conservative choice).

use serde::{Deserialize, Serialize};

use super::error::StatsError;
use super::interval::ndtr;
use super::rng::{ChaChaStream, PURPOSE_SEQUENTIAL};

pub use eval_core::sequential::Spending;

/// The efficacy boundaries of one design.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Boundaries {
    /// The looks' information fractions (the last is 1).
    pub looks: Vec<f64>,
    /// The spending function.
    pub spending: Spending,
    /// The overall two-sided α.
    pub alpha: f64,
    /// |Z_k| ≥ `z[k]` stops for efficacy at look k.
    pub z: Vec<f64>,
    /// The two-sided nominal level of each look, 2(1 − Φ(z_k)): the level a test at that look is
    /// held to.
    pub nominal_alpha: Vec<f64>,
}

/// Grid points of the Simpson rule over a continuation region (odd).
const GRID: usize = 401;

fn phi(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Checks that `looks` are increasing fractions in (0, 1] ending at 1.
pub fn check_looks(looks: &[f64]) -> Result<(), StatsError> {
    eval_core::sequential::check_looks(looks).map_err(StatsError::Input)
}

/// The probability of crossing at each look (|Z_k| ≥ b_k at look k, not before) when Z's drift
/// is θ (E Z_k = θ√t_k); `b` may be shorter than `looks` (the first `b.len()` looks).
pub fn crossing_by_look(looks: &[f64], b: &[f64], theta: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(b.len());
    // Sub-density of Z_{k} on the grid of its continuation region (|z| < b_k).
    let mut grid: Vec<f64> = Vec::new();
    let mut dens: Vec<f64> = Vec::new();
    let mut prev_t = 0.0;
    for (k, &bk) in b.iter().enumerate() {
        let t = looks[k];
        if k == 0 {
            let m = theta * t.sqrt();
            out.push(1.0 - ndtr(bk - m) + ndtr(-bk - m));
            grid = (0..GRID)
                .map(|i| -bk + 2.0 * bk * i as f64 / (GRID - 1) as f64)
                .collect();
            dens = grid.iter().map(|z| phi(z - m)).collect();
        } else {
            let delta = t - prev_t;
            let sigma = (delta / t).sqrt();
            let mean = |u: f64| (u * prev_t.sqrt() + theta * delta) / t.sqrt();
            let w = simpson_weights(&grid);
            // Crossing mass at this look.
            let cross: f64 = grid
                .iter()
                .zip(&dens)
                .zip(&w)
                .map(|((u, d), w)| {
                    let m = mean(*u);
                    w * d * (1.0 - ndtr((bk - m) / sigma) + ndtr((-bk - m) / sigma))
                })
                .sum();
            out.push(cross);
            let next: Vec<f64> = (0..GRID)
                .map(|i| -bk + 2.0 * bk * i as f64 / (GRID - 1) as f64)
                .collect();
            let nd = next
                .iter()
                .map(|z| {
                    grid.iter()
                        .zip(&dens)
                        .zip(&w)
                        .map(|((u, d), w)| w * d * phi((z - mean(*u)) / sigma) / sigma)
                        .sum()
                })
                .collect();
            grid = next;
            dens = nd;
        }
        prev_t = t;
    }
    out
}

fn simpson_weights(grid: &[f64]) -> Vec<f64> {
    let n = grid.len();
    let h = if n > 1 { grid[1] - grid[0] } else { 0.0 };
    (0..n)
        .map(|i| {
            let c = if i == 0 || i == n - 1 {
                1.0
            } else if i % 2 == 1 {
                4.0
            } else {
                2.0
            };
            c * h / 3.0
        })
        .collect()
}

/// Bisection of an increasing-in-c error function on [lo, hi] to `f(c) = target`.
fn solve(mut lo: f64, mut hi: f64, target: f64, f: impl Fn(f64) -> f64) -> f64 {
    // f decreases in c (a larger boundary is crossed less often).
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if f(mid) > target {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-7 {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// The efficacy boundaries of a two-sided design with overall level `alpha`.
pub fn boundaries(looks: &[f64], spending: Spending, alpha: f64) -> Result<Boundaries, StatsError> {
    check_looks(looks)?;
    if !(alpha > 0.0 && alpha < 1.0) {
        return Err(StatsError::Input(format!(
            "alpha must be in (0, 1): {alpha}"
        )));
    }
    let z: Vec<f64> = match spending {
        Spending::Pocock | Spending::OBrienFleming => {
            let shape = |c: f64| -> Vec<f64> {
                looks
                    .iter()
                    .map(|t| match spending {
                        Spending::Pocock => c,
                        _ => c / t.sqrt(),
                    })
                    .collect()
            };
            let c = solve(0.0, 10.0, alpha, |c| {
                crossing_by_look(looks, &shape(c), 0.0).iter().sum()
            });
            shape(c)
        }
        Spending::LanDemetsPocock | Spending::LanDemetsOBrienFleming => {
            let spent = |t: f64| match spending {
                Spending::LanDemetsPocock => alpha * (1.0 + (std::f64::consts::E - 1.0) * t).ln(),
                // Per side (α/2), as Lan & DeMets's two-sided tables spend it.
                _ => {
                    let z = super::interval::ndtri(1.0 - alpha / 4.0);
                    2.0 * (2.0 - 2.0 * ndtr(z / t.sqrt()))
                }
            };
            let mut b: Vec<f64> = Vec::with_capacity(looks.len());
            for (k, &t) in looks.iter().enumerate() {
                let target = spent(t) - if k == 0 { 0.0 } else { spent(looks[k - 1]) };
                let bk = solve(0.0, 40.0, target, |c| {
                    let mut trial = b.clone();
                    trial.push(c);
                    crossing_by_look(looks, &trial, 0.0)[k]
                });
                b.push(bk);
            }
            b
        }
    };
    let nominal_alpha = z.iter().map(|b| 2.0 * (1.0 - ndtr(*b))).collect();
    Ok(Boundaries {
        looks: looks.to_vec(),
        spending,
        alpha,
        z,
        nominal_alpha,
    })
}

/// The share of `trials` simulated runs with drift θ that cross some boundary: Brownian
/// increments from ChaCha8 (`PURPOSE_SEQUENTIAL`, keyed by `seed`), normals by Box–Muller.
pub fn simulate_crossing(looks: &[f64], b: &[f64], theta: f64, trials: u64, seed: u64) -> f64 {
    let mut rng = ChaChaStream::new(seed, PURPOSE_SEQUENTIAL, 0);
    let mut normal = move || {
        // 1 − unit() is in (0, 1], so the log is finite.
        let u1 = 1.0 - rng.unit();
        let u2 = rng.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    };
    let mut hits = 0u64;
    for _ in 0..trials {
        let (mut s, mut prev) = (0.0, 0.0);
        for (k, &t) in looks.iter().enumerate().take(b.len()) {
            let d = t - prev;
            s += theta * d + d.sqrt() * normal();
            prev = t;
            if (s / t.sqrt()).abs() >= b[k] {
                hits += 1;
                break;
            }
        }
    }
    hits as f64 / trials as f64
}

/// What a look decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LookDecision {
    /// |Z| reached the efficacy boundary: stop, the effect is established.
    StopEfficacy,
    /// Z fell below the (non-binding) futility bound at an interim look: stop, no effect shown.
    StopFutility,
    /// Neither: run on to the next look.
    Continue,
    /// The last look without crossing: the design's final answer is "not shown".
    FinalNotShown,
}

/// The decision at look `k` (0-based) for the look statistic `z` (positive favours the
/// candidate): efficacy when `z ≥ b_k` (the candidate better; a two-sided design spends half its
/// α on that side), futility at an interim look when `z < futility`.
pub fn decide(b: &Boundaries, k: usize, z: f64, futility: Option<f64>) -> LookDecision {
    let last = k + 1 >= b.z.len();
    match b.z.get(k) {
        Some(bk) if z.is_finite() && z >= *bk => LookDecision::StopEfficacy,
        _ if last => LookDecision::FinalNotShown,
        _ if futility.is_some_and(|f| !z.is_finite() || z < f) => LookDecision::StopFutility,
        _ => LookDecision::Continue,
    }
}
