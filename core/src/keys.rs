//! The text form of a preregistered Ed25519 public key, in the C2SP signed-note form (Go's
//! `golang.org/x/mod/sumdb/note`, so other tools read it):
//!
//! ```text
//! key id      = SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[0..4], a big-endian u32
//! public key  = <name>+<key id, 8 lowercase hex>+<base64(0x01 ‖ 32-byte public key)>
//! ```
//! This is what a protocol names and a freeze records. No cryptography here: whether the 32 bytes
//! are a valid Ed25519 point, and every signature check, is `eval-evidence`'s (its verifier key
//! is built from this type).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use sha2::{Digest as _, Sha256};
use std::fmt;

/// The key name every `eval keygen` key carries (signature lines read `— eval <sig>`).
pub const KEY_NAME: &str = "eval";
/// The C2SP signed-note signature type of Ed25519.
pub const ALG_ED25519: u8 = 0x01;

/// The C2SP key id of an Ed25519 key.
pub fn key_id(name: &str, public: &[u8; 32]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([b'\n', ALG_ED25519]);
    h.update(public);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// Key names: printable ASCII without `+` and `\`, at most 64 bytes.
pub fn valid_key_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'+' && b != b'\\')
}

/// Parses the 8 hex digits of a key id.
pub fn parse_key_id(hex_text: &str) -> Option<u32> {
    if hex_text.len() != 8 || !hex_text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex_text, 16).ok()
}

/// Why a public key's text is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} (expected NAME+KEYID+BASE64)")]
pub struct KeyTextError(pub &'static str);

/// A public key: its name, its key id and the 32 key bytes, with the id checked against the key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PublicKey {
    name: String,
    id: u32,
    key: [u8; 32],
}

impl PublicKey {
    /// The key named `name` with these bytes (its id is computed).
    pub fn new(name: &str, key: [u8; 32]) -> Result<PublicKey, KeyTextError> {
        if !valid_key_name(name) {
            return Err(KeyTextError("invalid key name"));
        }
        Ok(PublicKey {
            name: name.to_owned(),
            id: key_id(name, &key),
            key,
        })
    }

    /// Parses `<name>+<8 hex>+<base64(0x01 ‖ key)>`, checking that the key id matches the key.
    pub fn parse(text: &str) -> Result<PublicKey, KeyTextError> {
        let bad = KeyTextError;
        let text = text.trim();
        let mut parts = text.splitn(3, '+');
        // The base64 field may itself contain '+', so only the first two '+' separate fields.
        let (Some(name), Some(id_hex), Some(b64)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not three '+'-separated fields"));
        };
        if !valid_key_name(name) {
            return Err(bad("invalid key name"));
        }
        let id = parse_key_id(id_hex).ok_or(bad("the key id is not 8 hex digits"))?;
        let raw = B64
            .decode(b64)
            .map_err(|_| bad("the key is not valid base64"))?;
        let (Some(&ALG_ED25519), Ok(key)) =
            (raw.first(), <[u8; 32]>::try_from(&raw[1.min(raw.len())..]))
        else {
            return Err(bad(
                "the key is not an Ed25519 key (0x01 followed by 32 bytes)",
            ));
        };
        if key_id(name, &key) != id {
            return Err(bad("the key id does not match the key"));
        }
        Ok(PublicKey {
            name: name.to_owned(),
            id,
            key,
        })
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// `<name>+<8 hex>`: how receipts, checkpoints and attestations name the key.
    pub fn key_id_text(&self) -> String {
        format!("{}+{:08x}", self.name, self.id)
    }

    /// The 32 public key bytes.
    pub fn bytes(&self) -> [u8; 32] {
        self.key
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = Vec::with_capacity(33);
        raw.push(ALG_ED25519);
        raw.extend_from_slice(&self.key);
        write!(f, "{}+{:08x}+{}", self.name, self.id, B64.encode(raw))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_the_id_is_checked() {
        let key = PublicKey::new(KEY_NAME, [7u8; 32]).unwrap();
        let text = key.to_string();
        assert_eq!(PublicKey::parse(&text).unwrap(), key);
        assert_eq!(PublicKey::parse(&format!("  {text}\n")).unwrap(), key);
        assert_eq!(key.key_id_text(), format!("eval+{:08x}", key.id()));
        let fields: Vec<&str> = text.splitn(3, '+').collect();
        let other_id = format!("{:08x}", key.id() ^ 1);
        let err = PublicKey::parse(&[fields[0], &other_id, fields[2]].join("+")).unwrap_err();
        assert_eq!(err.0, "the key id does not match the key");
    }

    #[test]
    fn malformed_text_is_refused_with_the_reason() {
        let reason = |t: &str| PublicKey::parse(t).unwrap_err().0;
        assert_eq!(reason("eval"), "not three '+'-separated fields");
        assert_eq!(reason("ev al+00000000+AQ=="), "invalid key name");
        assert_eq!(
            reason("eval+0000000g+AQ=="),
            "the key id is not 8 hex digits"
        );
        assert_eq!(reason("eval+00000000+!!"), "the key is not valid base64");
        assert_eq!(
            reason("eval+00000000+AQ=="),
            "the key is not an Ed25519 key (0x01 followed by 32 bytes)"
        );
        assert!(PublicKey::new("a+b", [0; 32]).is_err());
    }

    /// The key id of a known key, pinned so a change to the id rule is noticed.
    #[test]
    fn key_id_is_the_c2sp_rule() {
        let mut h = Sha256::new();
        h.update(b"eval\n\x01");
        h.update([7u8; 32]);
        let d = h.finalize();
        assert_eq!(
            key_id("eval", &[7u8; 32]),
            u32::from_be_bytes([d[0], d[1], d[2], d[3]])
        );
    }
}
