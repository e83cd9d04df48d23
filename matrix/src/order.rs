//! Seeded statistical order: the two named algorithms a matrix may choose.
//!
//! Both shuffle the unshuffled list (suite → task → arm → repetition, each in the matrix's
//! declared order) with Fisher–Yates from the end: for i = n−1 down to 1, draw j ∈ [0, i], swap
//! items i and j. They differ only in the draw:
//!
//! - `mulberry32-fisher-yates` (v0.4's original): state = the first 8 hex digits of
//!   SHA-256(seed string) read as a big-endian u32; each draw advances mulberry32 once
//!   (see [`Mulberry32`]) to r ∈ [0, 1) and j = ⌊r · (i + 1)⌋.
//! - `chacha8` (this tool's default): `rand_chacha` 0.10's `ChaCha8Rng::from_seed(key)` where the
//!   32-byte key is the u64 seed in little-endian followed by 24 zero bytes; each draw takes
//!   x = `next_u64()` and j = ⌊x · (i + 1) / 2⁶⁴⌋ (a 128-bit multiply; no rejection step, so the
//!   bias is below (i + 1) / 2⁶⁴ — immaterial for schedules).

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

/// The mulberry32 generator exactly as v0.4's JavaScript wrote it:
/// `state += 0x6d2b79f5; v = imul(v ^ v>>>15, v|1); v ^= v + imul(v ^ v>>>7, v|61);
/// r = ((v ^ v>>>14)>>>0) / 2^32`.
#[derive(Clone, Debug)]
pub struct Mulberry32 {
    state: u32,
}

impl Mulberry32 {
    /// A generator starting from `state`.
    pub fn new(state: u32) -> Self {
        Self { state }
    }

    /// Seeds from a string: the first 8 hex digits of SHA-256(seed) as a u32.
    pub fn from_seed_string(seed: &str) -> Self {
        let d = Sha256::digest(seed.as_bytes());
        Self::new(u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
    }

    /// The next value in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x6d2b_79f5);
        let mut v = self.state;
        v = (v ^ (v >> 15)).wrapping_mul(v | 1);
        v ^= v.wrapping_add((v ^ (v >> 7)).wrapping_mul(v | 61));
        f64::from(v ^ (v >> 14)) / 4_294_967_296.0
    }
}

/// Shuffles `items` in place with mulberry32 seeded from `seed`.
pub fn mulberry32_fisher_yates<T>(items: &mut [T], seed: &str) {
    let mut rng = Mulberry32::from_seed_string(seed);
    for i in (1..items.len()).rev() {
        let j = (rng.next_f64() * (i as f64 + 1.0)).floor() as usize;
        items.swap(i, j.min(i));
    }
}

/// Shuffles `items` in place with ChaCha8 keyed by `seed` (see the module docs).
pub fn chacha8_fisher_yates<T>(items: &mut [T], seed: u64) {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let mut rng = ChaCha8Rng::from_seed(key);
    for i in (1..items.len()).rev() {
        let x = rng.next_u64();
        let j = ((u128::from(x) * (i as u128 + 1)) >> 64) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mulberry32_matches_v04_vectors() {
        let mut rng = Mulberry32::from_seed_string("plan-lattice-v0.4-blind-90-2026-08-15");
        assert_eq!(rng.next_f64(), 0.6069117868319154);
        assert_eq!(rng.next_f64(), 0.78681899048388);
        assert_eq!(rng.next_f64(), 0.7613166144583374);
    }

    #[test]
    fn chacha8_is_a_permutation_fixed_by_its_seed() {
        let mut a: Vec<u32> = (0..50).collect();
        chacha8_fisher_yates(&mut a, 7);
        let mut b: Vec<u32> = (0..50).collect();
        chacha8_fisher_yates(&mut b, 7);
        let mut c: Vec<u32> = (0..50).collect();
        chacha8_fisher_yates(&mut c, 8);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, (0..50).collect::<Vec<_>>());
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        // Pinned: a change to the documented draw must be noticed.
        assert_eq!(&a[..5], PINNED_CHACHA8_SEED7);
    }

    const PINNED_CHACHA8_SEED7: &[u32] = &[42, 26, 49, 21, 28];
}
