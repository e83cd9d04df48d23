//! Type-7 (linear interpolation between order statistics) quantiles, as NumPy's default
//! `np.percentile(..., method="linear")` and v0.4's `percentile()` compute them.
//!
//! For sorted values x₀ ≤ … ≤ x_{N−1} and probability p: h = (N − 1)·p, k = ⌊h⌋,
//! Q(p) = x_k + (h − k)·(x_{k+1} − x_k).

/// NumPy's form of the interpolation (`_lerp`: from the upper neighbour when h − k ≥ 0.5), so
/// that the SciPy-defined intervals match NumPy to the last bit where possible.
pub fn type7_sorted(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
    let k = (h.floor() as usize).min(n - 1);
    let k1 = (k + 1).min(n - 1);
    let t = h - k as f64;
    lerp(sorted[k], sorted[k1], t)
}

/// The same quantiles as [`type7_sorted`] without sorting: selects just the order statistics the
/// probabilities need (O(N) each instead of O(N log N)). Reorders `values`.
pub fn type7_select(values: &mut [f64], ps: &[f64]) -> Vec<f64> {
    let n = values.len();
    if n == 0 {
        return vec![f64::NAN; ps.len()];
    }
    let plan: Vec<(usize, usize, f64)> = ps
        .iter()
        .map(|p| {
            let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
            let k = (h.floor() as usize).min(n - 1);
            (k, (k + 1).min(n - 1), h - k as f64)
        })
        .collect();
    let mut ranks: Vec<usize> = plan.iter().flat_map(|(a, b, _)| [*a, *b]).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut at = std::collections::BTreeMap::new();
    let mut offset = 0;
    for r in ranks {
        let (_, v, _) = values[offset..].select_nth_unstable_by(r - offset, f64::total_cmp);
        at.insert(r, *v);
        offset = r + 1;
        if offset >= n {
            break;
        }
    }
    plan.iter()
        .map(|(a, b, t)| {
            lerp(
                at.get(a).copied().unwrap_or(f64::NAN),
                at.get(b).copied().unwrap_or(f64::NAN),
                *t,
            )
        })
        .collect()
}

fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let d = b - a;
    if t >= 0.5 {
        b - d * (1.0 - t)
    } else {
        a + d * t
    }
}

/// v0.4's `percentile(values, p)` exactly: sorts a copy, `sorted[lo] + (sorted[hi] − sorted[lo]) ·
/// (pos − lo)` with `pos = (len − 1)·p`. Empty input → `None` (v0.4 returned `null`).
pub fn v04_percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(v04_percentile_sorted(&sorted, p))
}

/// [`v04_percentile`] on input already sorted ascending; NaN for empty input.
pub fn v04_percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let position = (sorted.len() - 1) as f64 * p;
    let lower = position.floor();
    let upper = position.ceil();
    let (lo, hi) = (lower as usize, upper as usize);
    if lo == hi {
        return sorted[lo];
    }
    sorted[lo] + (sorted[hi] - sorted[lo]) * (position - lower)
}

/// Type-7 quantile of a weighted sample: as if each value `v` occurred `w` times (the exact
/// bootstrap distribution over all nⁿ ordered resamples). `sorted` is ascending by value.
pub fn type7_weighted(sorted: &[(f64, u128)], total: u128, p: f64) -> f64 {
    if sorted.is_empty() || total == 0 {
        return f64::NAN;
    }
    let h = (total - 1) as f64 * p.clamp(0.0, 1.0);
    let k = (h.floor() as u128).min(total - 1);
    let t = h - k as f64;
    let a = value_at_rank(sorted, k);
    let b = value_at_rank(sorted, (k + 1).min(total - 1));
    lerp(a, b, t)
}

fn value_at_rank(sorted: &[(f64, u128)], rank: u128) -> f64 {
    let mut cum = 0u128;
    for &(v, w) in sorted {
        cum += w;
        if cum > rank {
            return v;
        }
    }
    sorted.last().map_or(f64::NAN, |x| x.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v04_percentile_vectors_are_bit_exact() {
        let v = [
            0.0, 0.1, 0.02, -0.03, 0.5, 0.04, 0.01, 0.0, 0.0, 0.2, 0.03, 0.06,
        ];
        assert_eq!(v04_percentile(&v, 0.95), Some(0.3349999999999998));
        assert_eq!(v04_percentile(&v, 0.5), Some(0.025));
    }

    #[test]
    fn select_equals_sort() {
        let v: Vec<f64> = (0..1001u64)
            .map(|i| ((i * 7919) % 613) as f64 / 7.0)
            .collect();
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        let ps = [0.0, 0.025, 0.5, 0.975, 0.9999, 1.0, 0.3];
        let mut w = v.clone();
        let q = type7_select(&mut w, &ps);
        for (p, q) in ps.iter().zip(q) {
            assert_eq!(q.to_bits(), type7_sorted(&sorted, *p).to_bits(), "p={p}");
        }
    }

    #[test]
    fn weighted_equals_expanded() {
        let w = [(1.0, 2u128), (2.0, 1), (5.0, 3)];
        let expanded = [1.0, 1.0, 2.0, 5.0, 5.0, 5.0];
        for p in [0.0, 0.025, 0.3, 0.5, 0.77, 0.975, 1.0] {
            assert_eq!(
                type7_weighted(&w, 6, p),
                type7_sorted(&expanded, p),
                "p={p}"
            );
        }
    }
}
