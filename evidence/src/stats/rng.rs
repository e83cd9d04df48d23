//! The two random streams statistics use, both fixed algorithms so that results are reproducible
//! across platforms and crate versions:
//!
//! - [`ChaChaStream`]: ChaCha8 (`rand_chacha`'s raw 32-bit output words) keyed by the seed, one
//!   ChaCha *stream* per chunk of work, and our own unbiased bounded draw on top (Lemire's
//!   multiply-shift with rejection). We never use `rand`'s range sampling, whose algorithm has
//!   changed between versions.
//! - [`Mulberry32`]: the v0.4 controller's generator, seeded from the first 8 hex digits of
//!   `sha256(seed string)`, so that v0.4's original bootstrap is reproduced bit for bit.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// Stream numbers are `purpose << 48 | chunk`, so the bootstrap, the sign-flip test and the
/// calibration simulation never share words even with one seed.
pub const PURPOSE_BOOTSTRAP: u64 = 0;
/// Stream purpose of the sign-flip test's sign vectors.
pub const PURPOSE_SIGN_FLIP: u64 = 1;
/// Stream purpose of the calibration simulation's data.
pub const PURPOSE_CALIBRATE_DATA: u64 = 2;
/// Stream purpose of the sequential design's error simulation.
pub const PURPOSE_SEQUENTIAL: u64 = 3;
/// Stream purpose of the gates' no-effect replicates (`report::false_fail`).
pub const PURPOSE_GATE_CALIBRATION: u64 = 4;

/// ChaCha8 keyed by `seed` (little-endian in the first 8 key bytes, zeros after), on stream
/// `purpose << 48 | chunk`, word position 0. Its keystream is read in order, 1024 bytes at a time;
/// a word is 4 bytes little-endian (exactly `rand_chacha`'s `next_u32` sequence), a narrow lane
/// 1 or 2 bytes little-endian.
pub struct ChaChaStream {
    rng: ChaCha8Rng,
    buf: [u8; 1024],
    pos: usize,
}

impl ChaChaStream {
    /// The stream for (`seed`, `purpose`, `chunk`); `chunk` lets parallel workers read disjoint
    /// streams.
    pub fn new(seed: u64, purpose: u64, chunk: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let mut rng = ChaCha8Rng::from_seed(key);
        rng.set_stream((purpose << 48) | (chunk & ((1 << 48) - 1)));
        Self {
            rng,
            buf: [0; 1024],
            pos: 1024,
        }
    }

    #[inline]
    fn take<const N: usize>(&mut self) -> [u8; N] {
        if self.pos + N > self.buf.len() {
            self.rng.fill_bytes(&mut self.buf);
            self.pos = 0;
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        out
    }

    /// The next 4-byte little-endian word of the keystream.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take::<4>())
    }

    /// The next lane of `width` ∈ {8, 16, 32} bits.
    #[inline]
    pub fn next_lane(&mut self, width: u32) -> u64 {
        match width {
            8 => u64::from(self.take::<1>()[0]),
            16 => u64::from(u16::from_le_bytes(self.take::<2>())),
            _ => u64::from(self.next_u32()),
        }
    }

    /// Uniform integer in `0..n` (`n > 0`), Lemire (2019) with rejection: exactly unbiased.
    #[inline]
    pub fn below(&mut self, n: u32) -> u32 {
        let mut m = u64::from(self.next_u32()) * u64::from(n);
        let mut low = m as u32;
        if low < n {
            let threshold = n.wrapping_neg() % n;
            while low < threshold {
                m = u64::from(self.next_u32()) * u64::from(n);
                low = m as u32;
            }
        }
        (m >> 32) as u32
    }

    /// Uniform double in [0, 1) with 53 random bits (two words, high word first).
    pub fn unit(&mut self) -> f64 {
        let hi = u64::from(self.next_u32() >> 5); // 27 bits
        let lo = u64::from(self.next_u32() >> 6); // 26 bits
        ((hi << 26) | lo) as f64 / (1u64 << 53) as f64
    }
}

/// Unbiased draws in `0..n` for one fixed n, reading each raw ChaCha word as lanes of `w` bits,
/// low lane first: w = 8 when n ≤ 16, 16 when n ≤ 4096, else 32. Each lane goes through Lemire's
/// multiply-shift with rejection at width w (m = x·n; reject while m mod 2^w < (2^w − n) mod n;
/// result m >> w), so the draw is exactly uniform and a rejection costs less than n / 2^w ≤ 1/16
/// of a lane. Narrow lanes spend fewer generator bytes per draw; the lane order is fixed, so the
/// stream is the same on every platform.
pub struct BoundedDraw {
    n: u64,
    width: u32,
    mask: u64,
    threshold: u64,
}

impl BoundedDraw {
    /// A drawer for `0..n` (n = 0 is treated as 1).
    pub fn new(n: u32) -> Self {
        let n = u64::from(n.max(1));
        let width: u32 = if n <= 16 {
            8
        } else if n <= 4096 {
            16
        } else {
            32
        };
        let range = 1u64 << width;
        Self {
            n,
            width,
            mask: range - 1,
            threshold: (range - n) % n,
        }
    }

    /// `out.len()` draws in a row — exactly the values `draw` would give one by one, with the
    /// buffer position kept in a register.
    pub fn draw_into(&mut self, rng: &mut ChaChaStream, out: &mut [u32]) {
        match self.width {
            8 => self.draw_into_lanes::<1>(rng, out),
            16 => self.draw_into_lanes::<2>(rng, out),
            _ => self.draw_into_lanes::<4>(rng, out),
        }
    }

    fn draw_into_lanes<const B: usize>(&self, rng: &mut ChaChaStream, out: &mut [u32]) {
        let (n, mask, threshold, width) = (self.n, self.mask, self.threshold, self.width);
        let mut pos = rng.pos;
        let mut k = 0;
        while k < out.len() {
            if pos + B > rng.buf.len() {
                rng.rng.fill_bytes(&mut rng.buf);
                pos = 0;
            }
            let mut lane = [0u8; 4];
            lane[..B].copy_from_slice(&rng.buf[pos..pos + B]);
            pos += B;
            let m = u64::from(u32::from_le_bytes(lane)) * n;
            if (m & mask) >= threshold {
                out[k] = (m >> width) as u32;
                k += 1;
            }
        }
        rng.pos = pos;
    }

    /// One exactly uniform draw in `0..n`, consuming lanes of `rng`.
    #[inline]
    pub fn draw(&mut self, rng: &mut ChaChaStream) -> usize {
        loop {
            let m = rng.next_lane(self.width) * self.n;
            if (m & self.mask) >= self.threshold {
                return (m >> self.width) as usize;
            }
        }
    }
}

/// The v0.4 generator (see `V04.md`), one copy with the matrix's order.
pub use eval_core::mulberry32::Mulberry32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mulberry32_matches_v04_order_vector() {
        let mut r = Mulberry32::from_seed_string("plan-lattice-v0.4-blind-90-2026-08-15");
        assert_eq!(r.next_f64(), 0.6069117868319154);
        assert_eq!(r.next_f64(), 0.78681899048388);
        assert_eq!(r.next_f64(), 0.7613166144583374);
    }

    #[test]
    fn bounded_draw_is_uniform_and_in_range() {
        let mut r = ChaChaStream::new(7, PURPOSE_BOOTSTRAP, 0);
        let mut counts = [0u32; 3];
        for _ in 0..30_000 {
            counts[r.below(3) as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
        assert_eq!(r.below(1), 0);
    }

    #[test]
    fn lane_draws_are_uniform_for_every_width() {
        for n in [3u32, 15, 16, 17, 1000, 4097, 100_000] {
            let mut rng = ChaChaStream::new(11, PURPOSE_BOOTSTRAP, 0);
            let mut d = BoundedDraw::new(n);
            let draws = 200 * n.min(1000) as usize;
            let mut counts = vec![0u32; n as usize];
            for _ in 0..draws {
                counts[d.draw(&mut rng)] += 1;
            }
            if n <= 1000 {
                let expect = draws as f64 / f64::from(n);
                for (i, c) in counts.iter().enumerate() {
                    assert!(
                        (f64::from(*c) - expect).abs() < 6.0 * expect.sqrt(),
                        "n={n} i={i} {c} vs {expect}"
                    );
                }
            } else {
                assert!(
                    counts.iter().filter(|c| **c > 0).count() > (draws / 2).min(n as usize / 2)
                );
            }
        }
    }

    #[test]
    fn batched_draws_equal_single_draws() {
        for n in [15u32, 1000, 70_000] {
            let (mut a, mut b) = (ChaChaStream::new(3, 0, 9), ChaChaStream::new(3, 0, 9));
            let (mut da, mut db) = (BoundedDraw::new(n), BoundedDraw::new(n));
            let mut batch = vec![0u32; 777];
            for _ in 0..5 {
                da.draw_into(&mut a, &mut batch);
                let single: Vec<u32> = (0..777).map(|_| db.draw(&mut b) as u32).collect();
                assert_eq!(batch, single, "n={n}");
            }
        }
    }

    #[test]
    fn streams_differ_and_repeat() {
        let a: Vec<u32> = {
            let mut r = ChaChaStream::new(1, 0, 0);
            (0..4).map(|_| r.next_u32()).collect()
        };
        let b: Vec<u32> = {
            let mut r = ChaChaStream::new(1, 0, 0);
            (0..4).map(|_| r.next_u32()).collect()
        };
        let c: Vec<u32> = {
            let mut r = ChaChaStream::new(1, 0, 1);
            (0..4).map(|_| r.next_u32()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
