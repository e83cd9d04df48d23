//! The resampling engine: draws tasks with replacement and records, per resample, the mean of
//! each input column (e.g. baseline, candidate, difference). Two modes:
//!
//! - **Sampled**: B resamples. Resample r belongs to chunk ⌊r / 1024⌋; chunk c draws from its own
//!   ChaCha8 stream (`rng::ChaChaStream::new(seed, PURPOSE_BOOTSTRAP, c)`), task indices by the
//!   unbiased bounded draw (`rng::BoundedDraw`), n indices per resample, in order; draw d adds
//!   into accumulator d mod 4 and the mean is ((a₀ + a₁) + (a₂ + a₃)) / n. Chunks run on any number of threads;
//!   the output depends only on (data, B, seed), never on the thread count.
//! - **Exact**: every multiset of n tasks drawn from n (there are C(2n−1, n)) with its multinomial
//!   weight n! / ∏ kᵢ!, i.e. the exact bootstrap distribution over all nⁿ equally likely ordered
//!   resamples.

use super::error::StatsError;
use super::rng::{BoundedDraw, ChaChaStream, PURPOSE_BOOTSTRAP};

/// Resamples per chunk (one ChaCha stream each).
pub const CHUNK: usize = 1024;
/// `--exact auto` enumerates when there are at most this many multisets (n ≤ 12).
pub const EXACT_AUTO_LIMIT: u128 = 1_400_000;
/// `--exact always` refuses beyond this (n ≤ 12 is auto; 13 is allowed when asked).
pub const EXACT_MAX: u128 = 5_300_000;

/// Whether the bootstrap enumerates every distinct resample instead of sampling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExactMode {
    /// Enumerate when that is cheap (small n), sample otherwise.
    Auto,
    /// Always enumerate (refused when there are more than [`EXACT_MAX`] multisets).
    Always,
    /// Always sample.
    Never,
}

impl std::str::FromStr for ExactMode {
    type Err = StatsError;
    fn from_str(s: &str) -> Result<Self, StatsError> {
        match s {
            "auto" => Ok(Self::Auto),
            "always" => Ok(Self::Always),
            "never" => Ok(Self::Never),
            other => Err(StatsError::Input(format!(
                "exact mode {other:?} (auto, always, never)"
            ))),
        }
    }
}

/// How a bootstrap distribution was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResampleKind {
    /// B seeded random resamples.
    Sampled,
    /// Every distinct multiset of tasks, weighted by how many ordered resamples it stands for.
    Exact,
}

/// Bootstrap settings.
#[derive(Clone, Copy, Debug)]
pub struct ResampleConfig {
    /// B, the resamples drawn when sampling.
    pub resamples: u64,
    /// Seed of the ChaCha8 stream the resamples are drawn from.
    pub seed: u64,
    /// Whether to enumerate instead of sampling.
    pub exact: ExactMode,
    /// 0 = as many as the machine has.
    pub threads: usize,
}

impl Default for ResampleConfig {
    fn default() -> Self {
        Self {
            resamples: 10_000,
            seed: 0,
            exact: ExactMode::Auto,
            threads: 0,
        }
    }
}

/// The bootstrap distribution of the column means.
#[derive(Clone, Debug)]
pub struct Distribution {
    /// Number of columns (statistics' inputs, e.g. the two arms' task means).
    pub cols: usize,
    /// Row-major: resample r, column j at `r * cols + j`.
    pub means: Vec<f64>,
    /// Exact mode: the number of ordered resamples each multiset stands for.
    pub weights: Option<Vec<u128>>,
    /// B (sampled) or nⁿ (exact).
    pub total: u128,
    /// Sampled or exact.
    pub kind: ResampleKind,
}

impl Distribution {
    /// Number of rows (resamples or multisets).
    pub fn len(&self) -> usize {
        self.means.len() / self.cols.max(1)
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }

    /// Column means of resample `r`.
    pub fn row(&self, r: usize) -> &[f64] {
        &self.means[r * self.cols..(r + 1) * self.cols]
    }
}

/// C(2n−1, n), saturating.
pub fn multiset_count(n: usize) -> u128 {
    let (top, k) = (2 * n as u128 - 1, n as u128);
    let mut c: u128 = 1;
    for i in 0..k {
        c = match c.checked_mul(top - i) {
            Some(v) => v / (i + 1),
            None => return u128::MAX,
        };
    }
    c
}

/// Whether `cfg.exact` asks for enumeration at n tasks.
pub fn use_exact(n: usize, mode: ExactMode) -> Result<bool, StatsError> {
    let count = multiset_count(n);
    match mode {
        ExactMode::Never => Ok(false),
        ExactMode::Auto => Ok(count <= EXACT_AUTO_LIMIT),
        ExactMode::Always if count <= EXACT_MAX => Ok(true),
        ExactMode::Always => Err(StatsError::Input(format!(
            "exact enumeration at n = {n} needs {count} multisets (limit {EXACT_MAX}); use --exact auto or never"
        ))),
    }
}

/// Resamples the tasks of equally long `columns`.
pub fn resample(columns: &[&[f64]], cfg: &ResampleConfig) -> Result<Distribution, StatsError> {
    let n = columns.first().map_or(0, |c| c.len());
    if n == 0 || columns.iter().any(|c| c.len() != n) {
        return Err(StatsError::Input(
            "resampling needs ≥ 1 task and equal columns".into(),
        ));
    }
    if n > u32::MAX as usize {
        return Err(StatsError::Input("too many tasks".into()));
    }
    if use_exact(n, cfg.exact)? {
        Ok(enumerate(columns))
    } else {
        sample(columns, cfg)
    }
}

fn sample(columns: &[&[f64]], cfg: &ResampleConfig) -> Result<Distribution, StatsError> {
    let n = columns[0].len();
    let cols = columns.len();
    let b = usize::try_from(cfg.resamples)
        .ok()
        .filter(|&b| b > 0 && b.checked_mul(cols).is_some())
        .ok_or_else(|| StatsError::Input("resamples must be ≥ 1".into()))?;
    let mut means = vec![0.0f64; b * cols];
    let chunks: Vec<(usize, &mut [f64])> = means.chunks_mut(CHUNK * cols).enumerate().collect();
    // Small jobs stay on one thread unless asked (spawning costs more than it saves); the result
    // is the same either way.
    let work = (b as u128) * (n as u128);
    let threads = if cfg.threads == 0 && work < 500_000 {
        1
    } else {
        thread_count(cfg.threads).min(chunks.len()).max(1)
    };
    // Task-major rows (all columns of a task side by side): one bounds check and one cache line
    // per draw.
    let mut rows = vec![0.0f64; n * cols];
    for (j, col) in columns.iter().enumerate() {
        for (i, x) in col.iter().enumerate() {
            rows[i * cols + j] = *x;
        }
    }
    let rows = &rows;
    let fill = |work: Vec<(usize, &mut [f64])>| {
        for (c, out) in work {
            let mut rng = ChaChaStream::new(cfg.seed, PURPOSE_BOOTSTRAP, c as u64);
            match cols {
                1 => fill_chunk::<1>(&mut rng, rows, n, out),
                2 => fill_chunk::<2>(&mut rng, rows, n, out),
                3 => fill_chunk::<3>(&mut rng, rows, n, out),
                _ => fill_chunk_dyn(&mut rng, rows, n, cols, out),
            }
        }
    };
    if threads == 1 {
        fill(chunks);
    } else {
        // Contiguous runs of chunks per thread; which thread runs a chunk cannot change its words.
        let per = chunks.len().div_ceil(threads);
        let mut groups: Vec<Vec<(usize, &mut [f64])>> = Vec::new();
        let mut it = chunks.into_iter().peekable();
        while it.peek().is_some() {
            groups.push(it.by_ref().take(per).collect());
        }
        std::thread::scope(|s| {
            for g in groups {
                s.spawn(|| fill(g));
            }
        });
    }
    Ok(Distribution {
        cols,
        means,
        weights: None,
        total: b as u128,
        kind: ResampleKind::Sampled,
    })
}

/// One chunk of resamples over `K` columns (the common case, unrolled by the compiler).
fn fill_chunk<const K: usize>(rng: &mut ChaChaStream, rows: &[f64], n: usize, out: &mut [f64]) {
    let rows: Vec<[f64; K]> = rows
        .chunks_exact(K)
        .map(|r| std::array::from_fn(|j| r[j]))
        .collect();
    let nf = n as f64;
    let mut draw = BoundedDraw::new(n as u32);
    let mut idx = vec![0u32; n];
    for o in out.chunks_exact_mut(K) {
        draw.draw_into(rng, &mut idx);
        // Four interleaved accumulators (draw d adds into d mod 4), combined as (a0+a1)+(a2+a3):
        // a fixed order, so bit-reproducible, without one long chain of dependent additions.
        let mut acc = [[0.0f64; K]; 4];
        for (d, &i) in idx.iter().enumerate() {
            let row = &rows[i as usize];
            let a = &mut acc[d & 3];
            for j in 0..K {
                a[j] += row[j];
            }
        }
        for j in 0..K {
            o[j] = ((acc[0][j] + acc[1][j]) + (acc[2][j] + acc[3][j])) / nf;
        }
    }
}

fn fill_chunk_dyn(rng: &mut ChaChaStream, rows: &[f64], n: usize, cols: usize, out: &mut [f64]) {
    let mut acc = vec![0.0f64; 4 * cols];
    let mut draw = BoundedDraw::new(n as u32);
    for o in out.chunks_exact_mut(cols) {
        acc.iter_mut().for_each(|s| *s = 0.0);
        for d in 0..n {
            let i = draw.draw(rng);
            let a = &mut acc[(d & 3) * cols..((d & 3) + 1) * cols];
            for (s, x) in a.iter_mut().zip(&rows[i * cols..(i + 1) * cols]) {
                *s += x;
            }
        }
        for (j, o) in o.iter_mut().enumerate() {
            *o = ((acc[j] + acc[cols + j]) + (acc[2 * cols + j] + acc[3 * cols + j])) / n as f64;
        }
    }
}

/// The worker count for a requested number (0: the machine's available parallelism).
pub fn thread_count(requested: usize) -> usize {
    if requested > 0 {
        requested
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

fn enumerate(columns: &[&[f64]]) -> Distribution {
    let n = columns[0].len();
    let cols = columns.len();
    let count = multiset_count(n) as usize;
    let mut e = Enumerator {
        columns,
        n,
        cols,
        binom: binomials(n),
        // sums[depth] = Σ_{task < depth} k_task · x_task, one row of `cols` per depth.
        sums: vec![0.0f64; (n + 1) * cols],
        means: Vec::with_capacity(count * cols),
        weights: Vec::with_capacity(count),
    };
    e.visit(0, n, 1);
    let total = (0..n).fold(1u128, |a, _| a * n as u128);
    Distribution {
        cols,
        means: e.means,
        weights: Some(e.weights),
        total,
        kind: ResampleKind::Exact,
    }
}

struct Enumerator<'a> {
    columns: &'a [&'a [f64]],
    n: usize,
    cols: usize,
    binom: Vec<Vec<u128>>,
    sums: Vec<f64>,
    means: Vec<f64>,
    weights: Vec<u128>,
}

impl Enumerator<'_> {
    /// Chooses how often `task` is drawn (k = 0..=remaining); the last task takes the rest.
    fn visit(&mut self, task: usize, remaining: usize, weight: u128) {
        let (n, cols) = (self.n, self.cols);
        if task == n - 1 || remaining == 0 {
            let k = remaining as f64;
            for j in 0..cols {
                let s = self.sums[task * cols + j];
                let total = if remaining > 0 {
                    s + k * self.columns[j][task]
                } else {
                    s
                };
                self.means.push(total / n as f64);
            }
            self.weights.push(weight);
            return;
        }
        for k in 0..=remaining {
            for j in 0..cols {
                let s = self.sums[task * cols + j];
                self.sums[(task + 1) * cols + j] = if k > 0 {
                    s + k as f64 * self.columns[j][task]
                } else {
                    s
                };
            }
            let w = weight * self.binom[remaining][k];
            self.visit(task + 1, remaining - k, w);
        }
    }
}

fn binomials(n: usize) -> Vec<Vec<u128>> {
    let mut t = vec![vec![0u128; n + 1]; n + 1];
    for i in 0..=n {
        t[i][0] = 1;
        for k in 1..=i {
            t[i][k] = t[i - 1][k - 1] + if k < i { t[i - 1][k] } else { 0 };
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiset_counts() {
        assert_eq!(multiset_count(1), 1);
        assert_eq!(multiset_count(3), 10);
        assert_eq!(multiset_count(11), 352_716);
        assert_eq!(multiset_count(12), 1_352_078);
    }

    #[test]
    fn exact_weights_sum_to_n_pow_n() {
        let x = [1.0, 2.0, 4.0, 8.0];
        let d = enumerate(&[&x]);
        assert_eq!(d.len(), 35);
        assert_eq!(d.weights.as_ref().unwrap().iter().sum::<u128>(), 256);
        assert_eq!(d.total, 256);
    }
}
