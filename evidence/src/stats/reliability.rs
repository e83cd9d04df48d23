//! Reliability beside the mean: pass@k, pass^k and the share of tasks whose outcome flips
//! between repetitions.
//!
//! A task run n times with c passes gives, for every k ≤ n, the unbiased estimators (sampling k
//! of the n repetitions without replacement):
//! - pass@k = 1 − C(n − c, k) / C(n, k): the chance that at least one of k tries passes;
//! - pass^k = C(c, k) / C(n, k): the chance that all k tries pass (τ-bench's reliability);
//!
//! each averaged over the tasks (equal weight per task, the independent unit). The ratios are
//! computed as products, ∏ᵢ (c − i)/(n − i), so no binomial coefficient overflows. A task
//! *flips* when its repetitions disagree (at least one pass and one fail); the share is over the
//! tasks with at least two repetitions.

use serde::{Deserialize, Serialize};

/// C(a, k) / C(n, k) for a ≤ n, k ≤ n, as a product (0 when k > a).
fn choose_ratio(a: u32, n: u32, k: u32) -> f64 {
    if k > a {
        return 0.0;
    }
    (0..k).fold(1.0, |acc, i| acc * f64::from(a - i) / f64::from(n - i))
}

/// pass@k of one task with `c` passes in `n` repetitions (k ≤ n).
pub fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
    1.0 - choose_ratio(n - c.min(n), n, k)
}

/// pass^k of one task with `c` passes in `n` repetitions (k ≤ n).
pub fn pass_hat_k(n: u32, c: u32, k: u32) -> f64 {
    choose_ratio(c.min(n), n, k)
}

/// One k's value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtK {
    /// The number of tries.
    pub k: u32,
    /// The estimate, averaged over the tasks.
    pub value: f64,
}

/// One arm's reliability in one suite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reliability {
    /// The arm.
    pub arm: String,
    /// Tasks with at least one resolved repetition (the average's denominator).
    pub tasks: usize,
    /// The fewest repetitions any of those tasks has: k runs 1..=this.
    pub repetitions: u32,
    /// Repetitions that passed, over all tasks.
    pub passes: u64,
    /// Repetitions counted, over all tasks.
    pub trials: u64,
    /// pass@k for k = 1..=repetitions.
    pub pass_at_k: Vec<AtK>,
    /// pass^k for k = 1..=repetitions.
    pub pass_hat_k: Vec<AtK>,
    /// Tasks whose repetitions disagree (a pass and a fail).
    pub flipping_tasks: usize,
    /// Tasks with at least two repetitions (the flip share's denominator).
    pub repeated_tasks: usize,
    /// `flipping_tasks / repeated_tasks`; `None` when no task was repeated.
    pub flip_share: Option<f64>,
}

/// Reliability of one arm from each task's per-repetition pass/fail (tasks without any
/// repetition are left out).
pub fn reliability(arm: &str, per_task: &[Vec<bool>]) -> Reliability {
    let tasks: Vec<(u32, u32)> = per_task
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| {
            let n = u32::try_from(r.len()).unwrap_or(u32::MAX);
            let c = u32::try_from(r.iter().filter(|p| **p).count()).unwrap_or(u32::MAX);
            (n, c)
        })
        .collect();
    let reps = tasks.iter().map(|t| t.0).min().unwrap_or(0);
    let mean = |f: &dyn Fn(u32, u32) -> f64| -> f64 {
        tasks.iter().map(|&(n, c)| f(n, c)).sum::<f64>() / tasks.len() as f64
    };
    let at = |f: fn(u32, u32, u32) -> f64| -> Vec<AtK> {
        (1..=reps)
            .map(|k| AtK {
                k,
                value: mean(&|n, c| f(n, c, k)),
            })
            .collect()
    };
    let repeated: Vec<_> = tasks.iter().filter(|t| t.0 >= 2).collect();
    let flipping = repeated.iter().filter(|t| t.1 > 0 && t.1 < t.0).count();
    Reliability {
        arm: arm.to_string(),
        tasks: tasks.len(),
        repetitions: reps,
        passes: tasks.iter().map(|t| u64::from(t.1)).sum(),
        trials: tasks.iter().map(|t| u64::from(t.0)).sum(),
        pass_at_k: at(pass_at_k),
        pass_hat_k: at(pass_hat_k),
        flipping_tasks: flipping,
        repeated_tasks: repeated.len(),
        flip_share: (!repeated.is_empty()).then(|| flipping as f64 / repeated.len() as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimators_at_the_edges() {
        assert_eq!(pass_at_k(4, 0, 2), 0.0);
        assert_eq!(pass_hat_k(4, 4, 4), 1.0);
        assert_eq!(pass_hat_k(4, 1, 2), 0.0);
        // 1 − C(2,2)/C(4,2) = 1 − 1/6.
        assert!((pass_at_k(4, 2, 2) - 5.0 / 6.0).abs() < 1e-15);
        // C(2,2)/C(4,2) = 1/6.
        assert!((pass_hat_k(4, 2, 2) - 1.0 / 6.0).abs() < 1e-15);
    }
}
