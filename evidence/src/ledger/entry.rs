//! One ledger entry and the exact bytes its hash covers.
//!
//! ```text
//! hash(n) = SHA-256( prev            32 raw bytes: hash(n-1), or 32 zero bytes for n = 1
//!                  ‖ seq             u64, big-endian
//!                  ‖ len(kind)       u32, big-endian
//!                  ‖ kind            UTF-8
//!                  ‖ len(payload)    u64, big-endian
//!                  ‖ payload )       the stored canonical-JSON bytes, verbatim
//! ```
//! Lengths make the framing unambiguous. `recorded_at` is informational and not hashed; anything
//! whose time is evidence carries it inside its payload.

use sha2::{Digest as _, Sha256};
use std::fmt;

/// A SHA-256 digest, printed as `sha256:<hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The `prev` of the first entry.
    pub const ZERO: Digest = Digest([0; 32]);

    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// Parses `sha256:<64 hex digits>`.
    pub fn parse(text: &str) -> Option<Digest> {
        let hex_part = text.strip_prefix("sha256:")?;
        Self::from_hex(hex_part)
    }

    pub fn from_hex(hex_part: &str) -> Option<Digest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).ok()?;
        Some(Digest(out))
    }

    pub fn from_slice(bytes: &[u8]) -> Option<Digest> {
        <[u8; 32]>::try_from(bytes).ok().map(Digest)
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Digest::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not a sha256:<hex> digest: {text:?}")))
    }
}

/// The hash of entry `seq` (see the module docs for the layout).
pub fn entry_hash(prev: &Digest, seq: u64, kind: &str, payload: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update(prev.0);
    h.update(seq.to_be_bytes());
    h.update((kind.len() as u32).to_be_bytes());
    h.update(kind.as_bytes());
    h.update((payload.len() as u64).to_be_bytes());
    h.update(payload);
    Digest(h.finalize().into())
}

/// A stored entry, exactly as read from a ledger or an export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub seq: u64,
    pub prev: Digest,
    pub kind: String,
    /// Canonical JSON bytes, verbatim as stored and hashed.
    pub payload: Vec<u8>,
    pub hash: Digest,
    /// RFC 3339 UTC time of the commit; informational, not hashed.
    pub recorded_at: String,
}

impl Entry {
    pub fn computed_hash(&self) -> Digest {
        entry_hash(&self.prev, self.seq, &self.kind, &self.payload)
    }

    /// The payload parsed as JSON (for display and queries; never for hashing).
    pub fn payload_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }
}

/// The head of a chain: the last entry's sequence number and hash (0 and [`Digest::ZERO`] when
/// empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    pub seq: u64,
    pub hash: Digest,
}

impl Head {
    pub const EMPTY: Head = Head {
        seq: 0,
        hash: Digest::ZERO,
    };

    /// Parses `SEQ:sha256:<hex>` (also accepted: `SEQ:<hex>`).
    pub fn parse(text: &str) -> Option<Head> {
        let (seq, hash) = text.split_once(':')?;
        let seq = seq.parse().ok()?;
        let hash = Digest::parse(hash).or_else(|| Digest::from_hex(hash))?;
        Some(Head { seq, hash })
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash)
    }
}

/// Kinds are short lowercase identifiers, so they can never smuggle framing bytes.
pub fn valid_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= 64
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden value: a change to the hashed layout must be noticed (and versioned).
    #[test]
    fn hash_layout_is_pinned() {
        let h = entry_hash(&Digest::ZERO, 1, "note", br#"{"text":"hi"}"#);
        let mut manual = Vec::new();
        manual.extend_from_slice(&[0u8; 32]);
        manual.extend_from_slice(&1u64.to_be_bytes());
        manual.extend_from_slice(&4u32.to_be_bytes());
        manual.extend_from_slice(b"note");
        manual.extend_from_slice(&13u64.to_be_bytes());
        manual.extend_from_slice(br#"{"text":"hi"}"#);
        assert_eq!(h, Digest::of(&manual));
        // Computed independently with Python's hashlib and struct.pack(">Q"/">I").
        assert_eq!(
            h.to_string(),
            "sha256:f1097e049a4c125a0b201907a2c7607cbb08aee7127e5c7c607d5cbceddc7381"
        );
    }

    #[test]
    fn digest_and_head_round_trip() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(&d.to_string()), Some(d));
        let head = Head { seq: 7, hash: d };
        assert_eq!(Head::parse(&head.to_string()), Some(head));
        assert_eq!(Head::parse("x:abc"), None);
        assert!(valid_kind("model_call"));
        assert!(!valid_kind("Bad Kind"));
        assert!(!valid_kind(""));
    }
}
