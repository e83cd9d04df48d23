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
//! Every buffer that holds the seed or the key file's text is a `zeroize::Zeroizing` of a size
//! fixed before it is filled (a growing buffer would leave copies behind in freed memory), so it
//! is wiped by a store the optimiser may not remove.

use super::SigningError;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use std::fmt;
use std::path::Path;
use zeroize::Zeroizing;

use eval_core::keys::{ALG_ED25519, parse_key_id};
pub use eval_core::keys::{KEY_NAME, key_id};

/// A verifier key: the preregistered public key (eval-core's text form) whose bytes are a valid
/// Ed25519 point.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    text: eval_core::keys::PublicKey,
    key: VerifyingKey,
}

impl PublicKey {
    /// Parses `<name>+<8 hex>+<base64(0x01 ‖ key)>`, checking that the key id matches the key and
    /// that the key is an Ed25519 point.
    pub fn parse(text: &str) -> Result<PublicKey, SigningError> {
        let text = eval_core::keys::PublicKey::parse(text)
            .map_err(|e| SigningError::PublicKey(e.to_string()))?;
        PublicKey::try_from(&text)
    }

    /// The text form this verifier was built from.
    pub fn text(&self) -> &eval_core::keys::PublicKey {
        &self.text
    }

    /// The key's name (the part before `+` in its text form; signed notes carry it).
    pub fn name(&self) -> &str {
        self.text.name()
    }

    /// The 32-bit key id derived from the name and key bytes (how a note signature names its key).
    pub fn id(&self) -> u32 {
        self.text.id()
    }

    /// `<name>+<8 hex>`: how receipts, checkpoints and attestations name the key.
    pub fn key_id_text(&self) -> String {
        self.text.key_id_text()
    }

    /// The raw 32-byte Ed25519 public key.
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

impl TryFrom<&eval_core::keys::PublicKey> for PublicKey {
    type Error = SigningError;

    fn try_from(text: &eval_core::keys::PublicKey) -> Result<Self, SigningError> {
        let key = VerifyingKey::from_bytes(&text.bytes()).map_err(|_| {
            SigningError::PublicKey(
                "not a valid Ed25519 point (expected NAME+KEYID+BASE64)".to_owned(),
            )
        })?;
        Ok(PublicKey {
            text: text.clone(),
            key,
        })
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.text, f)
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
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
        let mut seed = Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut()).map_err(|e| SigningError::Random(e.to_string()))?;
        Self::from_seed(name, *seed)
    }

    /// The key for a given 32-byte seed (RFC 8032 private key).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<SigningKeyPair, SigningError> {
        let key = SigningKey::from_bytes(&seed);
        let text = eval_core::keys::PublicKey::new(name, key.verifying_key().to_bytes())
            .map_err(|_| SigningError::PublicKey(format!("invalid key name {name:?}")))?;
        let public = PublicKey {
            text,
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
        if meta.len() > MAX_KEY_FILE as u64 {
            return Err(SigningError::KeyFile {
                path: path.to_path_buf(),
                reason: "the file is too large to be a key",
            });
        }
        let text = read_key_text(&file).map_err(SigningError::io(path))?;
        let Some(text) = text.as_deref() else {
            return Err(SigningError::KeyFile {
                path: path.to_path_buf(),
                reason: "the file is too large to be a key",
            });
        };
        let text = std::str::from_utf8(text).map_err(|_| SigningError::KeyFile {
            path: path.to_path_buf(),
            reason: "the file is not UTF-8 text",
        })?;
        Self::parse_private(text).map_err(|reason| SigningError::KeyFile {
            path: path.to_path_buf(),
            reason,
        })
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
        // 0x01 and the 32-byte seed: 33 bytes; the buffer is larger so a longer key is told
        // apart from bad base64.
        let mut raw = Zeroizing::new([0u8; 48]);
        let n = B64
            .decode_slice(b64, raw.as_mut())
            .map_err(|_| "the key is not valid base64 of an Ed25519 seed")?;
        let result = match (raw.first(), n) {
            (Some(&ALG_ED25519), 33) => {
                let mut seed = Zeroizing::new([0u8; 32]);
                seed.copy_from_slice(&raw[1..33]);
                Self::from_seed(name, *seed).map_err(|_| "invalid key name")
            }
            _ => Err("the key is not an Ed25519 seed (0x01 followed by 32 bytes)"),
        };
        let pair = result?;
        if pair.public.id() != id {
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
        let mut raw = Zeroizing::new([0u8; 33]);
        raw[0] = ALG_ED25519;
        raw[1..].copy_from_slice(self.key.as_bytes());
        let mut b64 = Zeroizing::new([0u8; 44]);
        let n = B64
            .encode_slice(raw.as_ref(), b64.as_mut())
            .map_err(|e| SigningError::io(path)(std::io::Error::other(e.to_string())))?;
        let head = format!(
            "PRIVATE+KEY+{}+{:08x}+",
            self.public.name(),
            self.public.id()
        );
        // Sized before it is filled: pushing never reallocates, so no copy is left behind.
        let mut text = Zeroizing::new(Vec::with_capacity(head.len() + n + 1));
        text.extend_from_slice(head.as_bytes());
        text.extend_from_slice(&b64[..n]);
        text.push(b'\n');
        file.write_all(&text)
            .and_then(|_| file.sync_all())
            .map_err(SigningError::io(path))
    }

    /// The key pair's public half.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// An Ed25519 signature of `message` (deterministic: the same message gives the same
    /// signature).
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }

    /// Refuses a key whose public half is not the one the protocol names.
    pub fn ensure_public_matches(
        &self,
        expected: &eval_core::keys::PublicKey,
    ) -> Result<(), SigningError> {
        if self.public.text() == expected {
            Ok(())
        } else {
            Err(SigningError::KeyMismatch {
                expected: expected.to_string(),
                found: self.public.to_string(),
            })
        }
    }
}

/// The largest key file read (a key line is about 110 bytes).
const MAX_KEY_FILE: usize = 4096;

/// The key file's bytes, read into one buffer allocated before the read (never grown, so never
/// copied) and wiped when dropped; `None` when the file holds more than [`MAX_KEY_FILE`] bytes.
fn read_key_text(mut file: &std::fs::File) -> std::io::Result<Option<Zeroizing<Vec<u8>>>> {
    use std::io::Read as _;
    let mut buf = Zeroizing::new(vec![0u8; MAX_KEY_FILE + 1]);
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len > MAX_KEY_FILE {
                    return Ok(None);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    // Truncating keeps the allocation; the whole of it is wiped on drop.
    buf.truncate(len);
    Ok(Some(buf))
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
