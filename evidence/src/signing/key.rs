//! Ed25519 keys in the text forms of C2SP signed notes (the forms of Go's
//! `golang.org/x/mod/sumdb/note`, so other tools read them):
//!
//! ```text
//! key id      = SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[0..4], a big-endian u32
//! public key  = <name>+<key id, 8 lowercase hex>+<base64(0x01 ‖ 32-byte public key)>
//! key file    = PRIVATE+KEY+<name>+<key id, 8 lowercase hex>+<base64(0x01 ‖ 32-byte seed)>\n
//! ```
//! The key file is created with mode 0600 and refused when group or others can access it. The seed
//! leaves this module only through [`SigningKeyPair::write_new`]; `Debug` shows the public half.

use super::SigningError;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::path::Path;

/// The key name every `eval keygen` key carries (signature lines read `— eval <sig>`).
pub const KEY_NAME: &str = "eval";
/// The C2SP signed-note signature type of Ed25519.
const ALG_ED25519: u8 = 0x01;

/// The C2SP key id of an Ed25519 key.
pub fn key_id(name: &str, public: &[u8; 32]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([b'\n', ALG_ED25519]);
    h.update(public);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'+' && b != b'\\')
}

/// A verifier key: name, key id and Ed25519 public key.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    name: String,
    id: u32,
    key: VerifyingKey,
}

impl PublicKey {
    /// Parses `<name>+<8 hex>+<base64(0x01 ‖ key)>`, checking that the key id matches the key.
    pub fn parse(text: &str) -> Result<PublicKey, SigningError> {
        let bad =
            |why: &str| SigningError::PublicKey(format!("{why} (expected NAME+KEYID+BASE64)"));
        let text = text.trim();
        let mut parts = text.splitn(3, '+');
        // The base64 field may itself contain '+', so only the first two '+' separate fields.
        let (Some(name), Some(id_hex), Some(b64)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not three '+'-separated fields"));
        };
        if !valid_name(name) {
            return Err(bad("invalid key name"));
        }
        let id = parse_key_id(id_hex).ok_or_else(|| bad("the key id is not 8 hex digits"))?;
        let raw = B64
            .decode(b64)
            .map_err(|_| bad("the key is not valid base64"))?;
        let (Some(&ALG_ED25519), Ok(bytes)) =
            (raw.first(), <[u8; 32]>::try_from(&raw[1.min(raw.len())..]))
        else {
            return Err(bad(
                "the key is not an Ed25519 key (0x01 followed by 32 bytes)",
            ));
        };
        let key = VerifyingKey::from_bytes(&bytes).map_err(|_| bad("not a valid Ed25519 point"))?;
        if key_id(name, &bytes) != id {
            return Err(bad("the key id does not match the key"));
        }
        Ok(PublicKey {
            name: name.to_owned(),
            id,
            key,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// `<name>+<8 hex>`: how receipts, checkpoints and attestations name the key.
    pub fn key_id_text(&self) -> String {
        format!("{}+{:08x}", self.name, self.id)
    }

    pub fn bytes(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// Strict Ed25519 verification (rejects non-canonical and small-order encodings).
    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> Result<(), SigningError> {
        self.key
            .verify_strict(message, &Signature::from_bytes(signature))
            .map_err(|_| {
                SigningError::BadSignature(format!(
                    "the signature is not valid for key {}",
                    self.key_id_text()
                ))
            })
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = Vec::with_capacity(33);
        raw.push(ALG_ED25519);
        raw.extend_from_slice(self.key.as_bytes());
        write!(f, "{}+{:08x}+{}", self.name, self.id, B64.encode(raw))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

pub(crate) fn parse_key_id(hex_text: &str) -> Option<u32> {
    if hex_text.len() != 8 || !hex_text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex_text, 16).ok()
}

/// An Ed25519 signing key with its name. Never printed: `Debug` shows only the public key.
pub struct SigningKeyPair {
    key: SigningKey,
    public: PublicKey,
}

impl fmt::Debug for SigningKeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKeyPair {{ public: {} }}", self.public)
    }
}

impl SigningKeyPair {
    /// A fresh key from the operating system's random source.
    pub fn generate(name: &str) -> Result<SigningKeyPair, SigningError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| SigningError::Random(e.to_string()))?;
        let pair = Self::from_seed(name, seed);
        seed.fill(0);
        pair
    }

    /// The key for a given 32-byte seed (RFC 8032 private key).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<SigningKeyPair, SigningError> {
        if !valid_name(name) {
            return Err(SigningError::PublicKey(format!(
                "invalid key name {name:?}"
            )));
        }
        let key = SigningKey::from_bytes(&seed);
        let public_bytes = key.verifying_key().to_bytes();
        let public = PublicKey {
            name: name.to_owned(),
            id: key_id(name, &public_bytes),
            key: key.verifying_key(),
        };
        Ok(SigningKeyPair { key, public })
    }

    /// Reads a key file (see the module docs). Refuses a file that group or others can access.
    pub fn load(path: &Path) -> Result<SigningKeyPair, SigningError> {
        let file = std::fs::File::open(path).map_err(SigningError::io(path))?;
        let meta = file.metadata().map_err(SigningError::io(path))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(SigningError::KeyPermissions {
                    path: path.to_path_buf(),
                    mode,
                });
            }
        }
        if meta.len() > 4096 {
            return Err(SigningError::KeyFile {
                path: path.to_path_buf(),
                reason: "the file is too large to be a key",
            });
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut &file, &mut text).map_err(|_| {
            SigningError::KeyFile {
                path: path.to_path_buf(),
                reason: "the file is not UTF-8 text",
            }
        })?;
        let parsed = Self::parse_private(&text).map_err(|reason| SigningError::KeyFile {
            path: path.to_path_buf(),
            reason,
        });
        // The text held the seed; zero it before the allocation is freed.
        zero_string(&mut text);
        parsed
    }

    fn parse_private(text: &str) -> Result<SigningKeyPair, &'static str> {
        let line = text.strip_suffix('\n').unwrap_or(text);
        let mut parts = line.splitn(5, '+');
        let (Some("PRIVATE"), Some("KEY"), Some(name), Some(id_hex), Some(b64)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err("expected one line PRIVATE+KEY+NAME+KEYID+BASE64");
        };
        let id = parse_key_id(id_hex).ok_or("the key id is not 8 hex digits")?;
        let mut raw = B64.decode(b64).map_err(|_| "the key is not valid base64")?;
        let result = match (raw.first(), raw.len()) {
            (Some(&ALG_ED25519), 33) => {
                let mut seed = [0u8; 32];
                seed.copy_from_slice(&raw[1..]);
                let pair = Self::from_seed(name, seed).map_err(|_| "invalid key name");
                seed.fill(0);
                pair
            }
            _ => Err("the key is not an Ed25519 seed (0x01 followed by 32 bytes)"),
        };
        raw.fill(0);
        let pair = result?;
        if pair.public.id != id {
            return Err("the key id does not match the key");
        }
        Ok(pair)
    }

    /// Writes the key file at `path` with mode 0600, refusing to overwrite anything.
    pub fn write_new(&self, path: &Path) -> Result<(), SigningError> {
        use std::io::Write as _;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                SigningError::Exists {
                    path: path.to_path_buf(),
                }
            } else {
                SigningError::io(path)(e)
            }
        })?;
        let mut raw = Vec::with_capacity(33);
        raw.push(ALG_ED25519);
        raw.extend_from_slice(self.key.as_bytes());
        let mut text = format!(
            "PRIVATE+KEY+{}+{:08x}+{}\n",
            self.public.name,
            self.public.id,
            B64.encode(&raw)
        );
        raw.fill(0);
        let written = file
            .write_all(text.as_bytes())
            .and_then(|_| file.sync_all());
        zero_string(&mut text);
        written.map_err(SigningError::io(path))
    }

    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }

    /// Refuses a key whose public half is not the one the protocol names.
    pub fn ensure_public_matches(&self, expected: &PublicKey) -> Result<(), SigningError> {
        if &self.public == expected {
            Ok(())
        } else {
            Err(SigningError::KeyMismatch {
                expected: expected.to_string(),
                found: self.public.to_string(),
            })
        }
    }
}

fn zero_string(text: &mut String) {
    let taken = std::mem::take(text);
    let mut bytes = taken.into_bytes();
    bytes.fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_text_forms_round_trip_and_ids_are_checked() {
        let pair = SigningKeyPair::from_seed(KEY_NAME, [7u8; 32]).unwrap();
        let text = pair.public().to_string();
        assert!(text.starts_with("eval+"), "{text}");
        let parsed = PublicKey::parse(&text).unwrap();
        assert_eq!(&parsed, pair.public());
        // Another key id for the same key is refused.
        let mut fields: Vec<&str> = text.splitn(3, '+').collect();
        let other_id = format!("{:08x}", pair.public().id() ^ 1);
        fields[1] = &other_id;
        assert!(PublicKey::parse(&fields.join("+")).is_err());
        assert!(PublicKey::parse("eval+00000000+AQ==").is_err());
        assert!(format!("{pair:?}").contains(&text));
        let sig = pair.sign(b"msg");
        parsed.verify(b"msg", &sig).unwrap();
        assert!(parsed.verify(b"msh", &sig).is_err());
    }

    #[test]
    fn key_file_is_0600_not_overwritten_and_refused_when_shared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let pair = SigningKeyPair::generate(KEY_NAME).unwrap();
        pair.write_new(&path).unwrap();
        assert!(matches!(
            pair.write_new(&path),
            Err(SigningError::Exists { .. })
        ));
        let loaded = SigningKeyPair::load(&path).unwrap();
        assert_eq!(loaded.public(), pair.public());
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            SigningKeyPair::load(&path),
            Err(SigningError::KeyPermissions { .. })
        ));
        // Base64 fields often contain '+'; many random keys make sure parsing copes.
        for i in 0..64 {
            let k = SigningKeyPair::generate(KEY_NAME).unwrap();
            let p = dir.path().join(format!("k{i}"));
            k.write_new(&p).unwrap();
            assert_eq!(SigningKeyPair::load(&p).unwrap().public(), k.public());
            assert_eq!(
                &PublicKey::parse(&k.public().to_string()).unwrap(),
                k.public()
            );
        }
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "PRIVATE+KEY+eval+00000000+AQID\n").unwrap();
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = SigningKeyPair::load(&bad).unwrap_err().to_string();
        assert!(!err.contains("AQID"), "{err}");
    }
}
