//! Paired-bootstrap statistics at the level of the independent unit, the task.
//!
//! # Estimator
//! Scores per (task, arm, repetition). For each task and arm the repetitions are averaged
//! (sum left to right / count); the paired difference of task i is dᵢ = c̄ᵢ − b̄ᵢ. Tasks are
//! resampled with replacement (n draws from n). Per resample we keep the means of b̄, c̄ and d,
//! so every statistic is a function of those means:
//! - mean difference θ = mean(d);
//! - relative improvement (mean c̄ − mean b̄) / mean b̄, undefined (reported as such, never NaN)
//!   when the baseline mean is 0, and its interval undefined when any resample's is 0;
//! - a contrast mean(c̄) − k·mean(b̄), which is how "relative improvement ≥ r" is gated
//!   (k = 1 + r), so a resample with a zero baseline mean cannot produce an infinite ratio.
//!
//! # Intervals (as SciPy 1.17's `scipy.stats.bootstrap` defines them)
//! With bootstrap values θ*₁…θ*_B, estimate θ̂, α = (1 − confidence)/2, and Q the type-7
//! quantile (h = (B − 1)p, Q = x₍⌊h⌋₎ + (h − ⌊h⌋)(x₍⌊h⌋+1₎ − x₍⌊h⌋₎), NumPy's "linear"):
//! - percentile: [Q(α), Q(1 − α)];
//! - BCa: z₀ = Φ⁻¹((#{θ* < θ̂} + #{θ* ≤ θ̂}) / 2B) (ties count half);
//!   jackknife over tasks θ₍ᵢ₎ (task i left out), θ₍·₎ their mean,
//!   â = Σ(θ₍·₎ − θ₍ᵢ₎)³ / (6 · (Σ(θ₍·₎ − θ₍ᵢ₎)²)^{3/2});
//!   α₁ = Φ(z₀ + (z₀ + z_α)/(1 − â(z₀ + z_α))), α₂ likewise with z_{1−α};
//!   interval [Q(α₁), Q(α₂)]. Φ and Φ⁻¹ come from `statrs`.
//!   Where SciPy returns NaN we return a defined answer: when every θ* equals θ̂ (all task
//!   differences equal, or one task) both intervals are [θ̂, θ̂] and flagged `degenerate`; when
//!   the jackknife has no spread â = 0; when z₀ = ±∞ both levels go to that end.
//! - Exact mode replaces the B samples by every multiset of tasks weighted by its multinomial
//!   count (the nⁿ ordered resamples), and Q, z₀ use those weights.
//!
//! # Reproducibility
//! The resampler is ChaCha8 (raw 32-bit words from `rand_chacha`) with our own unbiased bounded
//! draw (Lemire's method with rejection); see [`rng`] and [`resample`]. Results depend only on the
//! data, B and the seed, never on the thread count.
//!
//! # Small suites
//! The sign-flip p-value ([`signflip`]) is always reported, exact up to n = 20. Its smallest value
//! is 2⁻ⁿ, so a gate at level α with 2⁻ⁿ > α says "insufficient tasks". [`calibrate`] measures by
//! simulation how often each method's bound clears zero under no effect.

pub mod calibrate;
pub mod csv_input;
pub mod data;
mod error;
pub mod interval;
pub mod paired;
pub mod power;
pub mod quantile;
pub mod reliability;
pub mod resample;
pub mod rng;
pub mod sequential;
pub mod signflip;
pub mod v04;

pub use data::{Observation, PairedTasks};
pub use interval::Intervals;
pub use paired::{PairedConfig, PairedSummary, paired_summary};
pub use resample::{Distribution, ExactMode, ResampleConfig, ResampleKind};

pub use error::StatsError;
