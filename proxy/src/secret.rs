//! The upstream API key, and the redaction of it from everything the proxy records or returns.

use std::fmt;
use std::path::Path;

use bytes::{Bytes, BytesMut};

const REDACTED: &[u8] = b"[REDACTED]";

/// Where a key could not be loaded from. Never contains the key itself.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("environment variable {0} is not set or not valid UTF-8")]
    MissingEnv(String),
    #[error("cannot read API key file {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error("the API key from {0} is empty")]
    Empty(String),
    #[error("the API key from {0} contains characters that cannot go into an HTTP header")]
    NotHeaderSafe(String),
}

/// The upstream credential. Held in memory only; `Debug` and `Display` print `[REDACTED]`.
/// It can be loaded only from an environment variable or a file, never from a command-line value.
#[derive(Clone)]
pub struct SecretKey(String);

impl SecretKey {
    /// Reads the key from the environment variable `var` (surrounding whitespace is trimmed).
    pub fn from_env(var: &str) -> Result<Self, SecretError> {
        let value = std::env::var(var).map_err(|_| SecretError::MissingEnv(var.to_owned()))?;
        Self::checked(value.trim().to_owned(), format!("${var}"))
    }

    /// Reads the key from the first line of a file (surrounding whitespace is trimmed).
    pub fn from_file(path: &Path) -> Result<Self, SecretError> {
        let text = std::fs::read_to_string(path).map_err(|source| SecretError::File {
            path: path.display().to_string(),
            source,
        })?;
        let first = text.lines().next().unwrap_or("").trim().to_owned();
        Self::checked(first, path.display().to_string())
    }

    fn checked(value: String, origin: String) -> Result<Self, SecretError> {
        if value.is_empty() {
            return Err(SecretError::Empty(origin));
        }
        if http::HeaderValue::from_str(&value).is_err() || value.contains(' ') {
            return Err(SecretError::NotHeaderSafe(origin));
        }
        Ok(Self(value))
    }

    /// For a key that already exists only in memory, e.g. one the controller generated for its
    /// fixture upstream. Never pass a value that came from a command line.
    pub fn from_memory(value: &str) -> Result<Self, SecretError> {
        Self::checked(value.to_owned(), "an in-memory value".to_owned())
    }

    /// Same as [`SecretKey::from_memory`]; the name tests use.
    pub fn from_value_for_tests(value: &str) -> Result<Self, SecretError> {
        Self::from_memory(value)
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    pub(crate) fn redactor(&self) -> Redactor {
        Redactor {
            needle: self.0.as_bytes().to_vec().into(),
        }
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

impl fmt::Display for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// Replaces every occurrence of the key with `[REDACTED]`.
#[derive(Clone)]
pub struct Redactor {
    needle: std::sync::Arc<[u8]>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Redactor([REDACTED])")
    }
}

impl Redactor {
    /// Redacts a complete buffer. Returns the input unchanged (no copy) when the key is absent.
    pub fn redact(&self, input: Bytes) -> (Bytes, usize) {
        if find(&input, &self.needle).is_none() {
            return (input, 0);
        }
        let mut out = BytesMut::with_capacity(input.len());
        let n = replace_all(&input, &self.needle, &mut out);
        (out.freeze(), n)
    }

    pub fn redact_str(&self, input: &str) -> String {
        let needle = String::from_utf8_lossy(&self.needle);
        input.replace(needle.as_ref(), "[REDACTED]")
    }

    pub fn contains_key(&self, input: &[u8]) -> bool {
        find(input, &self.needle).is_some()
    }

    /// A redactor for a stream: it holds back only the bytes at the end of a chunk that could be
    /// the beginning of the key, and releases them with the next chunk.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            needle: self.needle.clone(),
            pending: BytesMut::new(),
            redactions: 0,
        }
    }
}

pub struct StreamRedactor {
    needle: std::sync::Arc<[u8]>,
    pending: BytesMut,
    redactions: usize,
}

impl StreamRedactor {
    /// Feeds one chunk; returns what may be released now.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        if self.pending.is_empty() && find(chunk, &self.needle).is_none() {
            let hold = partial_suffix(chunk, &self.needle);
            let release = chunk.len() - hold;
            self.pending.extend_from_slice(&chunk[release..]);
            return Bytes::copy_from_slice(&chunk[..release]);
        }
        let mut joined = std::mem::take(&mut self.pending);
        joined.extend_from_slice(chunk);
        let mut out = BytesMut::with_capacity(joined.len());
        // Occurrences that are complete now are replaced; a suffix that may start the key waits.
        let hold = partial_suffix_after_last_match(&joined, &self.needle);
        let release = joined.len() - hold;
        self.redactions += replace_all(&joined[..release], &self.needle, &mut out);
        self.pending.extend_from_slice(&joined[release..]);
        out.freeze()
    }

    /// The bytes still held back at the end of the stream (they cannot contain the key).
    pub fn finish(&mut self) -> Bytes {
        std::mem::take(&mut self.pending).freeze()
    }

    pub fn redactions(&self) -> usize {
        self.redactions
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    memchr::memmem::find(haystack, needle)
}

fn replace_all(input: &[u8], needle: &[u8], out: &mut BytesMut) -> usize {
    let mut rest = input;
    let mut n = 0;
    while let Some(i) = find(rest, needle) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(REDACTED);
        rest = &rest[i + needle.len()..];
        n += 1;
    }
    out.extend_from_slice(rest);
    n
}

/// Length of the longest suffix of `buf` that is a proper prefix of `needle`.
fn partial_suffix(buf: &[u8], needle: &[u8]) -> usize {
    let max = needle.len().saturating_sub(1).min(buf.len());
    (1..=max)
        .rev()
        .find(|&k| buf[buf.len() - k..] == needle[..k])
        .unwrap_or(0)
}

/// Like `partial_suffix`, but never holds back bytes that belong to a complete occurrence.
fn partial_suffix_after_last_match(buf: &[u8], needle: &[u8]) -> usize {
    let mut end_of_last = 0;
    let mut rest_start = 0;
    while let Some(i) = find(&buf[rest_start..], needle) {
        end_of_last = rest_start + i + needle.len();
        rest_start = end_of_last;
    }
    partial_suffix(&buf[end_of_last..], needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_key() {
        let k = SecretKey::from_value_for_tests("sk-live-123456").unwrap();
        assert_eq!(format!("{k:?} {k}"), "[REDACTED] [REDACTED]");
    }

    #[test]
    fn stream_redaction_catches_the_key_split_at_every_byte() {
        let key = "sk-abcdefgh";
        let r = SecretKey::from_value_for_tests(key).unwrap().redactor();
        let text = format!("xx{key}yy sk-abc zz{key}");
        for split in 0..=text.len() {
            for split2 in split..=text.len() {
                let mut s = r.stream();
                let mut out = Vec::new();
                out.extend_from_slice(&s.push(&text.as_bytes()[..split]));
                out.extend_from_slice(&s.push(&text.as_bytes()[split..split2]));
                out.extend_from_slice(&s.push(&text.as_bytes()[split2..]));
                out.extend_from_slice(&s.finish());
                let out = String::from_utf8(out).unwrap();
                assert_eq!(
                    out, "xx[REDACTED]yy sk-abc zz[REDACTED]",
                    "split {split}/{split2}"
                );
            }
        }
    }

    #[test]
    fn stream_redaction_holds_back_only_a_possible_prefix() {
        let r = SecretKey::from_value_for_tests("sk-abcdefgh")
            .unwrap()
            .redactor();
        let mut s = r.stream();
        assert_eq!(&s.push(b"hello world")[..], b"hello world");
        assert_eq!(&s.push(b"data sk-ab")[..], b"data ");
        assert_eq!(&s.push(b"x")[..], b"sk-abx");
    }
}
