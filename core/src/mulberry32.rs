//! v0.4's random generator, one copy for the matrix's `mulberry32-fisher-yates` order and the
//! statistics' v0.4 bootstrap: both must agree bit for bit with v0.4's JavaScript.

use sha2::{Digest, Sha256};

/// The mulberry32 generator exactly as v0.4's JavaScript wrote it:
/// `state += 0x6d2b79f5; v = imul(v ^ v>>>15, v|1); v ^= v + imul(v ^ v>>>7, v|61);
/// r = ((v ^ v>>>14)>>>0) / 2^32`.
#[derive(Clone, Debug)]
pub struct Mulberry32 {
    state: u32,
}

impl Mulberry32 {
    /// A generator with this raw internal state.
    pub fn new(state: u32) -> Self {
        Self { state }
    }

    /// Seeded like v0.4's `seededRandom(seed)`: the first 8 hex digits of `sha256(seed)` as a
    /// big-endian u32.
    pub fn from_seed_string(seed: &str) -> Self {
        let d = Sha256::digest(seed.as_bytes());
        Self::new(u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
    }

    /// The next 32-bit output (state step, then mulberry32's mix).
    pub fn next_u32(&mut self) -> u32 {
        self.state = self.state.wrapping_add(0x6d2b_79f5);
        let mut v = self.state;
        v = (v ^ (v >> 15)).wrapping_mul(v | 1);
        v ^= v.wrapping_add((v ^ (v >> 7)).wrapping_mul(v | 61));
        v ^ (v >> 14)
    }

    /// JavaScript's `random()`: the next word divided by 2^32, in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        f64::from(self.next_u32()) / 4_294_967_296.0
    }
}
