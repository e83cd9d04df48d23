//! The sign-flip (paired permutation) test of the task-level mean difference, one-sided for an
//! improvement: p = P(Σ sᵢdᵢ ≥ Σ dᵢ) over independent signs sᵢ = ±1. Flipping a set F changes the
//! sum by −2·Σ_{i∈F} dᵢ, so a flip counts when Σ_{i∈F} dᵢ ≤ ε (ε = 1e-10 · Σ|dᵢ| absorbs rounding).
//! Exact over all 2ⁿ flips up to n = 20 (subset sums from two precomputed halves, so each is a
//! sum of ≤ 2 rounded numbers); beyond, M seeded ChaCha8 sign vectors with
//! p = (1 + #{≥}) / (1 + M). The smallest p an exact test can give is 2⁻ⁿ.

use serde::{Deserialize, Serialize};

use super::rng::{ChaChaStream, PURPOSE_SIGN_FLIP};

/// Up to this many tasks the test enumerates all 2ⁿ sign vectors; beyond, it samples.
pub const EXACT_MAX_N: usize = 20;

/// The result of the sign-flip test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignFlip {
    /// One-sided p-value for an improvement (candidate above baseline).
    pub p: f64,
    /// `exact` (all 2ⁿ sign vectors) or `sampled`.
    pub method: String,
    /// Sign vectors evaluated.
    pub flips: u64,
    /// 2⁻ⁿ: the smallest p any sign-flip test can give at this n.
    pub min_attainable_p: f64,
}

/// Runs the test on task differences (candidate − baseline); `samples` and `seed` are used only
/// when n exceeds [`EXACT_MAX_N`].
pub fn sign_flip(diffs: &[f64], samples: u64, seed: u64) -> SignFlip {
    let n = diffs.len();
    let eps = 1e-10 * diffs.iter().map(|d| d.abs()).sum::<f64>();
    let min_attainable_p = 0.5f64.powi(n as i32);
    if n <= EXACT_MAX_N {
        let half = n / 2;
        let (lo, hi) = diffs.split_at(half);
        let sums = |part: &[f64]| -> Vec<f64> {
            (0..1usize << part.len())
                .map(|mask| {
                    part.iter()
                        .enumerate()
                        .filter(|(i, _)| mask >> i & 1 == 1)
                        .map(|(_, d)| *d)
                        .sum::<f64>()
                })
                .collect()
        };
        let (a, mut b) = (sums(lo), sums(hi));
        b.sort_by(f64::total_cmp);
        // For each subset sum x of the lower half, count upper-half sums y with x + y ≤ ε.
        let mut count: u64 = 0;
        for x in &a {
            let limit = eps - x;
            count += b.partition_point(|y| *y <= limit) as u64;
            // partition_point on a sorted slice counts y ≤ limit; x + y ≤ ε ⇔ y ≤ ε − x up to
            // one rounding, which ε covers.
        }
        let total = 1u64 << n;
        SignFlip {
            p: count as f64 / total as f64,
            method: "exact".into(),
            flips: total,
            min_attainable_p,
        }
    } else {
        let m = samples.max(1);
        let chunk = 4096u64;
        let mut count = 0u64;
        let mut done = 0u64;
        let mut c = 0u64;
        while done < m {
            let mut rng = ChaChaStream::new(seed, PURPOSE_SIGN_FLIP, c);
            for _ in 0..chunk.min(m - done) {
                let mut s = 0.0;
                let mut word = 0u32;
                for (i, d) in diffs.iter().enumerate() {
                    if i % 32 == 0 {
                        word = rng.next_u32();
                    }
                    if word >> (i % 32) & 1 == 1 {
                        s += d;
                    }
                }
                if s <= eps {
                    count += 1;
                }
            }
            done += chunk.min(m - done);
            c += 1;
        }
        SignFlip {
            p: (1 + count) as f64 / (1 + m) as f64,
            method: "sampled".into(),
            flips: m,
            min_attainable_p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(d: &[f64]) -> f64 {
        let n = d.len();
        let obs: f64 = d.iter().sum();
        let mut c = 0;
        for mask in 0..1u32 << n {
            let s: f64 = d
                .iter()
                .enumerate()
                .map(|(i, x)| if mask >> i & 1 == 1 { -x } else { *x })
                .sum();
            if s >= obs - 1e-9 {
                c += 1;
            }
        }
        c as f64 / (1u64 << n) as f64
    }

    #[test]
    fn exact_matches_brute_force() {
        for d in [
            vec![1.0, 2.0, 3.0],
            vec![20.0, 10.0, -5.0, 0.0, 30.0, 25.0],
            vec![0.1, 0.2, -0.3, 0.4, -0.1, 0.0, 0.7],
            vec![0.0, 0.0, 0.0],
        ] {
            assert_eq!(sign_flip(&d, 0, 0).p, brute(&d), "{d:?}");
        }
        let p = sign_flip(&[1.0, 2.0, 3.0], 0, 0);
        assert_eq!(p.p, 0.125);
        assert_eq!(p.min_attainable_p, 0.125);
    }

    #[test]
    fn sampled_beyond_twenty() {
        let d: Vec<f64> = (0..25)
            .map(|i| if i % 5 == 0 { -1.0 } else { 1.0 })
            .collect();
        let s = sign_flip(&d, 20_000, 3);
        assert_eq!(s.method, "sampled");
        assert!(s.p < 0.01, "{}", s.p);
        assert_eq!(s, sign_flip(&d, 20_000, 3));
    }
}
