//! RFC 9162 (RFC 6962) Merkle tree hashing, proofs and proof verification.
//!
//! ```text
//! leaf hash  = SHA-256(0x00 ‖ entry bytes)        entry bytes: see `leaf_bytes`
//! node hash  = SHA-256(0x01 ‖ left ‖ right)
//! MTH({})    = SHA-256("")
//! ```
//! [`MerkleTree`] keeps every complete subtree (about 2n hashes, 64 MB per million entries), so
//! appending is amortised O(1), and any root, inclusion proof or consistency proof for any tree
//! size up to the current one costs O(log n) hashes.

use crate::ledger::{Digest, Entry};
use sha2::{Digest as _, Sha256};

/// The bytes of an entry that its Merkle leaf covers: exactly the bytes its chain hash covers
/// (`prev ‖ seq u64be ‖ len(kind) u32be ‖ kind ‖ len(payload) u64be ‖ payload`), so a leaf pins
/// the entry, its position and its predecessor, and `recorded_at` stays informational.
pub fn leaf_hash(e: &Entry) -> Digest {
    leaf_hash_of(&e.prev, e.seq, &e.kind, &e.payload)
}

/// [`leaf_hash`] of an entry's parts, for the writer, which hashes what it inserts before any
/// [`Entry`] exists.
pub(crate) fn leaf_hash_of(prev: &Digest, seq: u64, kind: &str, payload: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(prev.0);
    h.update(seq.to_be_bytes());
    h.update((kind.len() as u32).to_be_bytes());
    h.update(kind.as_bytes());
    h.update((payload.len() as u64).to_be_bytes());
    h.update(payload);
    Digest(h.finalize().into())
}

/// The hash of an inner node: SHA-256(0x01 ‖ left ‖ right).
pub fn node_hash(left: &Digest, right: &Digest) -> Digest {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left.0);
    h.update(right.0);
    Digest(h.finalize().into())
}

/// The root of the empty tree: SHA-256 of no bytes.
pub fn empty_root() -> Digest {
    Digest::of(b"")
}

/// The largest power of two strictly below `n` (n ≥ 2).
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

/// An append-only Merkle tree holding every complete subtree.
#[derive(Clone, Debug, Default)]
pub struct MerkleTree {
    /// `levels[k][i]` = hash of leaves `[i·2^k, (i+1)·2^k)`.
    levels: Vec<Vec<Digest>>,
}

impl MerkleTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of leaves.
    pub fn len(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }

    /// True when the tree has no leaves.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends one leaf hash (amortised O(1)).
    pub fn push(&mut self, leaf: Digest) {
        if self.levels.is_empty() {
            self.levels.push(Vec::new());
        }
        self.levels[0].push(leaf);
        let mut level = 0;
        let mut index = self.levels[0].len() - 1;
        while index % 2 == 1 {
            let parent = node_hash(&self.levels[level][index - 1], &self.levels[level][index]);
            if self.levels.len() == level + 1 {
                self.levels.push(Vec::new());
            }
            self.levels[level + 1].push(parent);
            level += 1;
            index /= 2;
        }
    }

    /// Drops every leaf from `len` on (a no-op when the tree is not longer): the writer's undo
    /// of a transaction that did not commit.
    pub(crate) fn truncate(&mut self, len: u64) {
        for (k, level) in self.levels.iter_mut().enumerate() {
            let keep = usize::try_from(len >> k).unwrap_or(usize::MAX);
            level.truncate(keep);
        }
    }

    /// The leaf hash at `index`.
    pub fn leaf(&self, index: u64) -> Option<Digest> {
        self.levels
            .first()?
            .get(usize::try_from(index).ok()?)
            .copied()
    }

    /// MTH of leaves `[start, end)`; every range the RFC recursion visits starts at a multiple of
    /// its left part's size, so the left part is always a stored complete subtree.
    fn range_hash(&self, start: u64, end: u64) -> Digest {
        let n = end - start;
        if n.is_power_of_two() && start.is_multiple_of(n) {
            let level = n.trailing_zeros() as usize;
            return self.levels[level][(start / n) as usize];
        }
        let k = split_point(n);
        node_hash(
            &self.range_hash(start, start + k),
            &self.range_hash(start + k, end),
        )
    }

    /// The root of the tree of the first `size` leaves (`None` when `size` > `len`).
    pub fn root(&self, size: u64) -> Option<Digest> {
        match size {
            0 => Some(empty_root()),
            s if s > self.len() => None,
            s => Some(self.range_hash(0, s)),
        }
    }

    /// RFC 9162 §2.1.3.1 inclusion proof of leaf `index` in the tree of size `size`.
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Option<Vec<Digest>> {
        if index >= size || size > self.len() {
            return None;
        }
        let mut proof = Vec::new();
        self.path(index, 0, size, &mut proof);
        Some(proof)
    }

    fn path(&self, m: u64, start: u64, end: u64, out: &mut Vec<Digest>) {
        let n = end - start;
        if n == 1 {
            return;
        }
        let k = split_point(n);
        if m < k {
            self.path(m, start, start + k, out);
            out.push(self.range_hash(start + k, end));
        } else {
            self.path(m - k, start + k, end, out);
            out.push(self.range_hash(start, start + k));
        }
    }

    /// RFC 9162 §2.1.4.1 consistency proof between the trees of sizes `old` and `new`
    /// (empty when `old` is 0 or equal to `new`).
    pub fn consistency_proof(&self, old: u64, new: u64) -> Option<Vec<Digest>> {
        if old > new || new > self.len() {
            return None;
        }
        let mut proof = Vec::new();
        if old > 0 && old < new {
            self.subproof(old, 0, new, true, &mut proof);
        }
        Some(proof)
    }

    fn subproof(&self, m: u64, start: u64, end: u64, complete: bool, out: &mut Vec<Digest>) {
        let n = end - start;
        if m == n {
            if !complete {
                out.push(self.range_hash(start, end));
            }
            return;
        }
        let k = split_point(n);
        if m <= k {
            self.subproof(m, start, start + k, complete, out);
            out.push(self.range_hash(start + k, end));
        } else {
            self.subproof(m - k, start + k, end, false, out);
            out.push(self.range_hash(start, start + k));
        }
    }
}

/// RFC 9162 §2.1.3.2: verifies that `leaf` is leaf `index` of the tree of `size` with `root`.
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &Digest,
    proof: &[Digest],
    root: &Digest,
) -> Result<(), String> {
    if index >= size {
        return Err(format!("leaf index {index} is not below tree size {size}"));
    }
    let (mut f_n, mut s_n) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s_n == 0 {
            return Err("the inclusion proof is too long".into());
        }
        if f_n & 1 == 1 || f_n == s_n {
            r = node_hash(p, &r);
            while f_n & 1 == 0 && f_n != 0 {
                f_n >>= 1;
                s_n >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    if s_n != 0 {
        return Err("the inclusion proof is too short".into());
    }
    if &r != root {
        return Err(format!(
            "the inclusion proof leads to root {r}, not the checkpoint's root {root}"
        ));
    }
    Ok(())
}

/// RFC 9162 §2.1.4.2: verifies that the tree (`old`, `old_root`) is a prefix of (`new`,
/// `new_root`). A tree of size 0 is a prefix of every tree.
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Digest,
    new_root: &Digest,
    proof: &[Digest],
) -> Result<(), String> {
    if old > new {
        return Err(format!(
            "tree size {old} is larger than {new}: the log rewound"
        ));
    }
    if old == new {
        if !proof.is_empty() {
            return Err("a proof between equal sizes must be empty".into());
        }
        return if old_root == new_root {
            Ok(())
        } else {
            Err(format!(
                "two different roots for tree size {old}: {old_root} and {new_root}"
            ))
        };
    }
    if old == 0 {
        return if proof.is_empty() {
            Ok(())
        } else {
            Err("a proof from the empty tree must be empty".into())
        };
    }
    let mut path: Vec<Digest> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return Err("the consistency proof is empty".into());
    };
    let (mut f_n, mut s_n) = (old - 1, new - 1);
    while f_n & 1 == 1 {
        f_n >>= 1;
        s_n >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if s_n == 0 {
            return Err("the consistency proof is too long".into());
        }
        if f_n & 1 == 1 || f_n == s_n {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f_n & 1 == 0 && f_n != 0 {
                f_n >>= 1;
                s_n >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    if s_n != 0 {
        return Err("the consistency proof is too short".into());
    }
    if &fr != old_root {
        return Err(format!(
            "the proof does not reproduce the old root {old_root} of size {old}"
        ));
    }
    if &sr != new_root {
        return Err(format!(
            "the proof does not reproduce the new root {new_root} of size {new}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_leaf(data: &[u8]) -> Digest {
        let mut v = vec![0u8];
        v.extend_from_slice(data);
        Digest::of(&v)
    }

    /// A truncated tree is the tree of its first leaves, and grows on from there like one.
    #[test]
    fn truncate_undoes_pushes() {
        let leaves: Vec<Digest> = (0..37u8).map(|i| raw_leaf(&[i])).collect();
        for cut in [0usize, 1, 2, 5, 8, 16, 21, 36] {
            let mut t = MerkleTree::new();
            for l in &leaves {
                t.push(*l);
            }
            t.truncate(cut as u64);
            assert_eq!(t.len(), cut as u64);
            let mut fresh = MerkleTree::new();
            for l in &leaves[..cut] {
                fresh.push(*l);
            }
            assert_eq!(t.root(cut as u64), fresh.root(cut as u64));
            for l in &leaves[cut..] {
                t.push(*l);
                fresh.push(*l);
            }
            assert_eq!(t.root(37), fresh.root(37), "cut {cut}");
        }
    }

    /// RFC 6962's reference test vectors (the eight leaves of certificate-transparency-go's
    /// `merkle` tests and their roots for every size 1..8).
    #[test]
    fn rfc6962_reference_roots() {
        let leaves: [&[u8]; 8] = [
            b"",
            b"\x00",
            b"\x10",
            b"\x20\x21",
            b"\x30\x31",
            b"\x40\x41\x42\x43",
            b"\x50\x51\x52\x53\x54\x55\x56\x57",
            b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
        ];
        let roots = [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ];
        let mut tree = MerkleTree::new();
        assert_eq!(
            tree.root(0).unwrap().hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        for (leaf, want) in leaves.iter().zip(roots) {
            tree.push(raw_leaf(leaf));
            assert_eq!(tree.root(tree.len()).unwrap().hex(), want);
        }
        for size in 1..=8u64 {
            assert_eq!(tree.root(size).unwrap().hex(), roots[size as usize - 1]);
        }
        assert_eq!(tree.root(9), None);
    }
}
