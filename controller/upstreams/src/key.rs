//! The key a built-in upstream accepts: random per run, never written anywhere, redacted in Debug.

/// A random API key, held only in memory. `Debug` never shows it.
#[derive(Clone)]
pub struct FixtureKey(String);

impl FixtureKey {
    /// 32 random bytes from the OS, hex encoded.
    pub fn generate() -> std::io::Result<Self> {
        use std::io::Read;
        let mut buf = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
        Ok(Self(format!("fxk-{}", hex::encode(buf))))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for FixtureKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FixtureKey([REDACTED])")
    }
}
