//! v0.4's original paired bootstrap (`pairedBootstrapInterval` in its `statistics.mjs`), bit for
//! bit: differences grouped by task in first-appearance order, each task's mean taken as
//! left-to-right sum / count; `samples` resamples, each the left-to-right sum of
//! `units[⌊random()·n⌋]` divided by n, with `random` the mulberry32 stream seeded by the seed
//! string; interval = v0.4's interpolated percentiles at (1 − c)/2 and 1 − (1 − c)/2.

use serde::{Deserialize, Serialize};

use super::data::mean;
use super::quantile::v04_percentile_sorted;
use super::rng::Mulberry32;

/// The number of resamples v0.4 drew.
pub const V04_SAMPLES: u64 = 20_000;

/// v0.4's percentile interval of the task-level mean difference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct V04Interval {
    /// Lower bound.
    pub lower: f64,
    /// Upper bound.
    pub upper: f64,
    /// Two-sided confidence level.
    pub confidence: f64,
    /// Resamples drawn.
    pub samples: u64,
    /// Pair differences given (before grouping by task).
    pub observations: usize,
    /// Tasks (the units resampled).
    pub independent_units: usize,
}

/// `differences[i]` belongs to `clusters[i]`; groups keep first-appearance order.
pub fn v04_interval(
    differences: &[f64],
    clusters: &[&str],
    seed: &str,
    confidence: f64,
    samples: u64,
) -> Option<V04Interval> {
    let mut keys: Vec<&str> = Vec::new();
    let mut groups: Vec<Vec<f64>> = Vec::new();
    for (d, k) in differences.iter().zip(clusters) {
        match keys.iter().position(|x| x == k) {
            Some(i) => groups[i].push(*d),
            None => {
                keys.push(k);
                groups.push(vec![*d]);
            }
        }
    }
    let units: Vec<f64> = groups.iter().map(|g| mean(g)).collect();
    v04_interval_units(&units, differences.len(), seed, confidence, samples)
}

/// The same on task means already computed.
pub fn v04_interval_units(
    units: &[f64],
    observations: usize,
    seed: &str,
    confidence: f64,
    samples: u64,
) -> Option<V04Interval> {
    if units.is_empty() || samples == 0 || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let n = units.len();
    let nf = n as f64;
    let mut random = Mulberry32::from_seed_string(seed);
    let mut estimates: Vec<f64> = Vec::with_capacity(samples as usize);
    for _ in 0..samples {
        let mut total = 0.0;
        for _ in 0..n {
            total += units[(random.next_f64() * nf).floor() as usize];
        }
        estimates.push(total / nf);
    }
    estimates.sort_by(f64::total_cmp);
    let alpha = (1.0 - confidence) / 2.0;
    Some(V04Interval {
        lower: v04_percentile_sorted(&estimates, alpha),
        upper: v04_percentile_sorted(&estimates, 1.0 - alpha),
        confidence,
        samples,
        observations,
        independent_units: n,
    })
}

/// Pair differences candidate − baseline matched by (task, rep), in order of each pair's first
/// row in the input, with their task (v0.4's clusters). Every repetition needs both arms.
pub fn pair_differences(
    obs: &[super::data::Observation],
    baseline: &str,
    candidate: &str,
) -> Result<(Vec<f64>, Vec<String>), super::error::StatsError> {
    type Slot<'a> = (Option<f64>, Option<f64>, &'a str);
    let mut keys: Vec<(&str, &str)> = Vec::new();
    let mut vals: Vec<Slot> = Vec::new();
    for o in obs
        .iter()
        .filter(|o| o.arm == baseline || o.arm == candidate)
    {
        let k = (o.task.as_str(), o.rep.as_str());
        let i = match keys.iter().position(|x| *x == k) {
            Some(i) => i,
            None => {
                keys.push(k);
                vals.push((None, None, &o.origin));
                keys.len() - 1
            }
        };
        if o.arm == baseline {
            vals[i].0 = Some(o.score);
        } else {
            vals[i].1 = Some(o.score);
        }
    }
    let mut diffs = Vec::new();
    let mut tasks = Vec::new();
    for ((task, rep), (b, c, origin)) in keys.iter().zip(&vals) {
        match (b, c) {
            (Some(b), Some(c)) => {
                diffs.push(c - b);
                tasks.push(task.to_string());
            }
            _ => {
                return Err(super::error::StatsError::Input(format!(
                    "{origin}: task {task:?} rep {rep:?} has no row for arm {:?} (v04-percentile pairs repetitions)",
                    if b.is_none() { baseline } else { candidate }
                )));
            }
        }
    }
    Ok((diffs, tasks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v04_vectors_bit_exact() {
        let d = [
            20.0, 10.0, -5.0, 0.0, 30.0, 25.0, 15.0, 5.0, -10.0, 40.0, 0.0, 10.0,
        ];
        let t = [
            "aa", "aa", "bb", "bb", "cc", "cc", "dd", "dd", "ee", "ee", "ff", "ff",
        ];
        let r = v04_interval(
            &d,
            &t,
            "94fb0fce13dba54f06a3b36f93167c4acd46a6953f7a66daae8567889a1d5426:icae",
            0.95,
            V04_SAMPLES,
        )
        .unwrap();
        assert_eq!(r.lower, 4.166666666666667);
        assert_eq!(r.upper, 19.166666666666668);
        assert_eq!(r.independent_units, 6);
        let d = [3.0, -1.0, 2.0, 4.0, -2.0, 0.0];
        let t = ["xx", "xx", "yy", "yy", "zz", "zz"];
        let r = v04_interval(
            &d,
            &t,
            "94fb0fce13dba54f06a3b36f93167c4acd46a6953f7a66daae8567889a1d5426:evocode",
            0.95,
            V04_SAMPLES,
        )
        .unwrap();
        assert_eq!(r.lower, -1.0);
        assert_eq!(r.upper, 3.0);
    }
}
