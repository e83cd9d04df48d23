//! The content digest every recorded thing is named by: SHA-256, printed as `sha256:<hex>`.
//!
//! The text form is an on-disk format (ledgers, freezes, registries, reports): it never changes.

use sha2::{Digest as _, Sha256};
use std::fmt;

/// A SHA-256 digest, printed as `sha256:<hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The `prev` of the first entry of a chain.
    pub const ZERO: Digest = Digest([0; 32]);

    /// The SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// Parses `sha256:<64 hex digits>`.
    pub fn parse(text: &str) -> Option<Digest> {
        let hex_part = text.strip_prefix("sha256:")?;
        Self::from_hex(hex_part)
    }

    /// Parses 64 hex digits without the `sha256:` prefix.
    pub fn from_hex(hex_part: &str) -> Option<Digest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).ok()?;
        Some(Digest(out))
    }

    /// The digest held in exactly 32 raw bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Digest> {
        <[u8; 32]>::try_from(bytes).ok().map(Digest)
    }

    /// The 64 lowercase hex digits, without the prefix.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_and_is_pinned() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(&d.to_string()), Some(d));
        assert_eq!(Digest::from_hex(&d.hex()), Some(d));
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{d}\""));
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
    }

    #[test]
    fn bad_text_is_refused() {
        let hex64 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        // Missing or wrong prefix, wrong length, non-hex digit, surrounding space.
        assert_eq!(Digest::parse(hex64), None);
        assert_eq!(Digest::parse(&format!("sha512:{hex64}")), None);
        assert_eq!(Digest::parse(&format!("sha256:{}", &hex64[..62])), None);
        assert_eq!(Digest::parse(&format!("sha256:{hex64}00")), None);
        assert_eq!(Digest::parse(&format!("sha256:{}g", &hex64[..63])), None);
        assert_eq!(Digest::parse(&format!(" sha256:{hex64}")), None);
        assert_eq!(Digest::from_slice(&[0u8; 31]), None);
        let err = serde_json::from_str::<Digest>("\"sha256:zz\"").unwrap_err();
        assert!(
            err.to_string().contains("not a sha256:<hex> digest"),
            "{err}"
        );
    }
}
