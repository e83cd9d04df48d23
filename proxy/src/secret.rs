//! The upstream API key, and the redaction of it from everything the proxy records or returns.

use std::fmt;
use std::path::Path;

use bytes::{Bytes, BytesMut};

const REDACTED: &[u8] = b"[REDACTED]";

/// Where a key could not be loaded from. Never contains the key itself.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The named environment variable is not set or not UTF-8.
    #[error("environment variable {0} is not set or not valid UTF-8")]
    MissingEnv(String),
    /// The key file could not be read.
    #[error("cannot read API key file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The key from the named source is empty.
    #[error("the API key from {0} is empty")]
    Empty(String),
    /// The key from the named source cannot be sent in an HTTP header.
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

    /// A redactor for this key (it never shows the key: its `Debug` is `[REDACTED]`). The
    /// controller re-redacts what it derives from redacted bodies (a reassembled stream joins
    /// deltas the proxy saw apart) before it stores them.
    pub fn redactor(&self) -> Redactor {
        Redactor::from_key(self.0.as_bytes())
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

/// Replaces every occurrence of the key with `[REDACTED]`: raw, base64 and base64url (padded or
/// not, at any alignment inside a longer encoded string), and with any mix of its characters
/// written as JSON `\uXXXX` escapes or percent-encoded (`%XX`, either case of hex).
#[derive(Clone)]
pub struct Redactor {
    needles: std::sync::Arc<Needles>,
}

struct Needles {
    key: Vec<u8>,
    /// The key's base64 forms: per alphabet and per byte alignment (0, 1, 2) of the key inside
    /// the encoded data, the characters that depend only on the key's bytes.
    encoded: Vec<Vec<u8>>,
    /// A searcher per encoded form, built once: building one costs more than searching a
    /// token-sized chunk with it.
    finders: Vec<memchr::memmem::Finder<'static>>,
    /// A searcher for the key written literally.
    literal: memchr::memmem::Finder<'static>,
    /// The longest encoded form of the key this redactor matches (every byte as `\u00XX`).
    longest: usize,
}

const B64_STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 (without padding) of `data`.
fn b64(data: &[u8], alphabet: &[u8; 64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize]);
        }
    }
    out
}

impl Needles {
    fn new(key: &[u8]) -> Self {
        let mut encoded: Vec<Vec<u8>> = Vec::new();
        for alphabet in [B64_STD, B64_URL] {
            for shift in 0..3usize {
                let mut data = vec![0u8; shift];
                data.extend_from_slice(key);
                let enc = b64(&data, alphabet);
                // Characters whose six bits all come from the key.
                let first = (8 * shift).div_ceil(6);
                let last = (8 * (shift + key.len())) / 6;
                if last > first + 8 {
                    let part = enc[first..last].to_vec();
                    if !encoded.contains(&part) {
                        encoded.push(part);
                    }
                }
            }
        }
        Self {
            longest: key.len() * 6,
            literal: memchr::memmem::Finder::new(key).into_owned(),
            key: key.to_vec(),
            finders: encoded
                .iter()
                .map(|n| memchr::memmem::Finder::new(n).into_owned())
                .collect(),
            encoded,
        }
    }

    /// The first complete occurrence in `hay`, as a byte range.
    fn find(&self, hay: &[u8]) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for f in &self.finders {
            if let Some(i) = f.find(hay)
                && best.is_none_or(|(b, _)| i < b)
            {
                best = Some((i, i + f.needle().len()));
            }
        }
        let limit = best.map_or(hay.len(), |(b, _)| b);
        let first = self.key.first().copied()?;
        let mut p = 0;
        while p < limit {
            let Some(off) = memchr::memchr3(first, b'\\', b'%', &hay[p..limit]) else {
                break;
            };
            let at = p + off;
            if let Flex::Full(end) = flex_at(hay, at, &self.key) {
                return Some((at, end));
            }
            p = at + 1;
        }
        best
    }

    /// For the common case of a stream chunk: `None` when some form of the key occurs in `hay`
    /// (the caller takes the replacing path), else how many bytes at its end could begin an
    /// occurrence that the next chunk completes — exactly
    /// `find(hay).is_none().then(|| held_suffix(hay))`, at a fraction of the cost.
    ///
    /// A flexible form (`fn flex_at`) either has no escape, and then it is the key written
    /// literally (a searcher of its own; its partial match at the end, `partial_suffix`), or it
    /// has an escape (`\\` or `%`) somewhere inside, and then it starts at most `longest` bytes
    /// before that escape. So `flex_at` runs only at candidates within `longest` bytes before an
    /// escape, each byte at most once; a chunk without `\\` or `%` (most token events) is only
    /// searched, never matched byte by byte at every occurrence of the key's first byte.
    fn clean_hold(&self, hay: &[u8]) -> Option<usize> {
        if self.literal.find(hay).is_some() || self.finders.iter().any(|f| f.find(hay).is_some()) {
            return None;
        }
        let mut hold = partial_suffix(hay, &self.key);
        for n in &self.encoded {
            hold = hold.max(partial_suffix(hay, n));
        }
        let Some(&first) = self.key.first() else {
            return Some(hold);
        };
        let mut partial = None;
        // Candidates before `scanned` were looked at already.
        let mut scanned = 0;
        for esc in memchr::memchr2_iter(b'\\', b'%', hay) {
            let from = esc.saturating_sub(self.longest).max(scanned);
            for off in memchr::memchr3_iter(first, b'\\', b'%', &hay[from..=esc]) {
                let at = from + off;
                match flex_at(hay, at, &self.key) {
                    Flex::Full(_) => return None,
                    // The first partial match is the longest suffix that may begin the key; a
                    // later candidate can still be a complete one, so the scan goes on.
                    Flex::Partial if partial.is_none() => partial = Some(at),
                    _ => {}
                }
            }
            scanned = esc + 1;
        }
        Some(partial.map_or(hold, |p| hold.max(hay.len() - p)))
    }

    /// How many bytes at the end of `hay` could begin an occurrence that the next chunk
    /// completes.
    fn held_suffix(&self, hay: &[u8]) -> usize {
        let from = hay.len().saturating_sub(self.longest);
        let mut hold = 0;
        for n in &self.encoded {
            hold = hold.max(partial_suffix(hay, n));
        }
        // Only a byte that is the key's first, or starts an escape (`\\u00XX`, `\\/`, `%XX`), can
        // begin a flexible match: the other positions are skipped without looking at them.
        let Some(&first) = self.key.first() else {
            return hold;
        };
        for off in memchr::memchr3_iter(first, b'\\', b'%', &hay[from..]) {
            let p = from + off;
            if hay.len() - p <= hold {
                break;
            }
            if matches!(flex_at(hay, p, &self.key), Flex::Partial) {
                hold = hay.len() - p;
                break;
            }
        }
        hold
    }
}

enum Flex {
    Full(usize),
    Partial,
    No,
}

fn hex_digit(n: u8) -> u8 {
    b"0123456789abcdef"[usize::from(n & 15)]
}

/// Whether `hay[at..]` starts with `form`, comparing hex digits case-insensitively: `Partial`
/// when `hay` ends inside a matching prefix.
fn starts_with_form(hay: &[u8], at: usize, form: &[u8]) -> Flex {
    let rest = &hay[at..];
    let n = rest.len().min(form.len());
    if rest[..n].eq_ignore_ascii_case(&form[..n]) {
        if n == form.len() {
            Flex::Full(at + n)
        } else {
            Flex::Partial
        }
    } else {
        Flex::No
    }
}

/// Matches the key at `at`, each of its bytes written literally, as `\u00XX`, as `%XX`, or (for
/// `/`) as `\/`.
fn flex_at(hay: &[u8], at: usize, key: &[u8]) -> Flex {
    let mut i = at;
    for &c in key {
        if i >= hay.len() {
            return Flex::Partial;
        }
        if hay[i] == c {
            i += 1;
            continue;
        }
        // Every encoded form begins with `\\` or `%`: any other byte ends the match here, before
        // the forms are built (the common case, e.g. an `s` in text when the key starts `sk-`).
        if hay[i] != b'\\' && hay[i] != b'%' {
            return Flex::No;
        }
        let forms: [&[u8]; 3] = [
            &[b'\\', b'u', b'0', b'0', hex_digit(c >> 4), hex_digit(c)],
            &[b'%', hex_digit(c >> 4), hex_digit(c)],
            if c == b'/' { b"\\/" } else { b"" },
        ];
        let mut next = None;
        for form in forms.iter().filter(|f| !f.is_empty()) {
            // `\u` itself is lower-case in JSON; only the hex digits may vary in case, and
            // `eq_ignore_ascii_case` on `u` would also accept `\U`, which no decoder reads.
            if form[0] == b'\\' && hay.get(i + 1).is_some_and(|&b| b == b'U') {
                continue;
            }
            match starts_with_form(hay, i, form) {
                Flex::Full(end) => {
                    next = Some(end);
                    break;
                }
                Flex::Partial => return Flex::Partial,
                Flex::No => {}
            }
        }
        match next {
            Some(end) => i = end,
            None => return Flex::No,
        }
    }
    Flex::Full(i)
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Redactor([REDACTED])")
    }
}

impl Redactor {
    fn from_key(key: &[u8]) -> Self {
        Self {
            needles: std::sync::Arc::new(Needles::new(key)),
        }
    }

    /// Redacts a complete buffer. Returns the input unchanged (no copy) when the key is absent.
    pub fn redact(&self, input: Bytes) -> (Bytes, usize) {
        if self.needles.find(&input).is_none() {
            return (input, 0);
        }
        let mut out = BytesMut::with_capacity(input.len());
        let n = replace_all(&input, &self.needles, &mut out);
        (out.freeze(), n)
    }

    /// [`Redactor::redact`] of a string.
    pub fn redact_str(&self, input: &str) -> String {
        let (out, _) = self.redact(Bytes::copy_from_slice(input.as_bytes()));
        // Replacing whole ASCII matches by ASCII keeps UTF-8 valid.
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Whether `input` holds the key in any form this redactor matches.
    pub fn contains_key(&self, input: &[u8]) -> bool {
        self.needles.find(input).is_some()
    }

    /// A redactor for a stream: it holds back only the bytes at the end of a chunk that could be
    /// the beginning of the key (in any form it matches), and releases them with the next chunk.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            needles: self.needles.clone(),
            pending: BytesMut::new(),
            redactions: 0,
        }
    }
}

/// The redactor of one stream (see [`Redactor::stream`]).
pub struct StreamRedactor {
    needles: std::sync::Arc<Needles>,
    pending: BytesMut,
    redactions: usize,
}

impl StreamRedactor {
    /// Feeds one chunk; returns what may be released now. The common case — nothing held from
    /// the previous chunk, no occurrence in this one — returns a slice of `chunk` itself, without
    /// copying or allocating.
    pub fn push_bytes(&mut self, chunk: Bytes) -> Bytes {
        if self.pending.is_empty()
            && let Some(hold) = self.needles.clean_hold(&chunk)
        {
            let release = chunk.len() - hold;
            self.pending.extend_from_slice(&chunk[release..]);
            return chunk.slice(..release);
        }
        self.push(&chunk)
    }

    /// Feeds one chunk; returns what may be released now.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        let mut joined = std::mem::take(&mut self.pending);
        joined.extend_from_slice(chunk);
        let mut out = BytesMut::with_capacity(joined.len());
        // Occurrences that are complete now are replaced; a suffix that may start one waits.
        let mut rest: &[u8] = &joined;
        while let Some((s, e)) = self.needles.find(rest) {
            out.extend_from_slice(&rest[..s]);
            out.extend_from_slice(REDACTED);
            self.redactions += 1;
            rest = &rest[e..];
        }
        let hold = self.needles.held_suffix(rest);
        let release = rest.len() - hold;
        out.extend_from_slice(&rest[..release]);
        self.pending.extend_from_slice(&rest[release..]);
        out.freeze()
    }

    /// The bytes still held back at the end of the stream (they cannot contain the key).
    pub fn finish(&mut self) -> Bytes {
        std::mem::take(&mut self.pending).freeze()
    }

    /// How many times the key was replaced so far.
    pub fn redactions(&self) -> usize {
        self.redactions
    }
}

fn replace_all(input: &[u8], needles: &Needles, out: &mut BytesMut) -> usize {
    let mut rest = input;
    let mut n = 0;
    while let Some((s, e)) = needles.find(rest) {
        out.extend_from_slice(&rest[..s]);
        out.extend_from_slice(REDACTED);
        rest = &rest[e..];
        n += 1;
    }
    out.extend_from_slice(rest);
    n
}

/// Length of the longest suffix of `buf` that is a proper prefix of `needle`.
fn partial_suffix(buf: &[u8], needle: &[u8]) -> usize {
    let max = needle.len().saturating_sub(1).min(buf.len());
    // Such a suffix ends with one of the needle's bytes; most chunks end with `\n`, which no
    // needle (base64 characters only) contains.
    match buf.last() {
        Some(&b) if needle[..max].contains(&b) => {}
        _ => return 0,
    }
    (1..=max)
        .rev()
        .find(|&k| buf[buf.len() - k..] == needle[..k])
        .unwrap_or(0)
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

    /// `push_bytes` (the zero-copy path) releases exactly what `push` does, split anywhere.
    #[test]
    fn push_bytes_releases_what_push_does() {
        let key = "sk-live_9f/Kx+Q";
        let r = SecretKey::from_value_for_tests(key).unwrap().redactor();
        for enc in encodings(key) {
            let text = format!("data: {{\"x\":\"{enc}\"}}\n\ndata: s%5\\u00 plain\n\n{enc}");
            for split in 0..=text.len() {
                let (a, b) = text.as_bytes().split_at(split);
                let mut by_slice = r.stream();
                let mut by_bytes = r.stream();
                let mut x = by_slice.push(a).to_vec();
                x.extend_from_slice(&by_slice.push(b));
                x.extend_from_slice(&by_slice.finish());
                let mut y = by_bytes.push_bytes(Bytes::copy_from_slice(a)).to_vec();
                y.extend_from_slice(&by_bytes.push_bytes(Bytes::copy_from_slice(b)));
                y.extend_from_slice(&by_bytes.finish());
                assert_eq!(x, y, "{enc} split at {split}");
                assert_eq!(by_slice.redactions(), by_bytes.redactions());
                assert!(!String::from_utf8_lossy(&y).contains(key));
            }
        }
        // The common case hands the chunk on without a copy.
        let mut s = r.stream();
        let chunk = Bytes::from_static(b"data: {\"content\":\"tok\"}\n\n");
        let out = s.push_bytes(chunk.clone());
        assert_eq!(out.as_ptr(), chunk.as_ptr());
        assert_eq!(out.len(), chunk.len());
    }

    /// The common path's question answers exactly what the two questions it replaces do, on
    /// every slice of text holding each encoding among escapes that are not the key's (so every
    /// partial match, at either end).
    #[test]
    fn clean_hold_is_find_then_held_suffix() {
        let key = "sk-live_9f/Kx+Q";
        let r = SecretKey::from_value_for_tests(key).unwrap().redactor();
        let n = &r.needles;
        for enc in encodings(key) {
            let text = format!(
                "data: {{\"s\":\"s%5\\u00 {enc} sk\\n\"}}\n\nsk-live\\u005f9 {enc}\\n\\u0073k-live_9f/Kx"
            );
            for start in 0..text.len() {
                for end in start..=text.len() {
                    let hay = &text.as_bytes()[start..end];
                    let want = n.find(hay).is_none().then(|| n.held_suffix(hay));
                    assert_eq!(n.clean_hold(hay), want, "{enc} at {start}..{end}");
                }
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

    /// The key in every form the redactor knows, as an upstream might reflect it.
    fn encodings(key: &str) -> Vec<String> {
        let bearer = format!("Bearer {key}");
        let mut v = vec![
            key.to_owned(),
            String::from_utf8(b64(key.as_bytes(), B64_STD)).unwrap() + "==",
            String::from_utf8(b64(bearer.as_bytes(), B64_STD)).unwrap(),
            String::from_utf8(b64(format!("x:{key}").as_bytes(), B64_URL)).unwrap(),
        ];
        // JSON escapes: all, and a mix of escaped and literal, in either case of hex.
        v.push(key.bytes().map(|b| format!("\\u{:04x}", b)).collect());
        v.push(
            key.bytes()
                .enumerate()
                .map(|(i, b)| match i % 3 {
                    0 => format!("\\u{:04X}", b),
                    1 => (b as char).to_string(),
                    _ => format!("\\u{:04x}", b),
                })
                .collect(),
        );
        // Percent-encoding, upper and lower hex, mixed with literal characters.
        v.push(key.bytes().map(|b| format!("%{:02X}", b)).collect());
        v.push(
            key.bytes()
                .enumerate()
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        format!("%{:02x}", b)
                    } else {
                        (b as char).to_string()
                    }
                })
                .collect(),
        );
        v
    }

    #[test]
    fn every_encoding_is_redacted_whole_and_split_at_every_byte() {
        let key = "sk-live_9f/Kx+Q";
        let r = SecretKey::from_value_for_tests(key).unwrap().redactor();
        for enc in encodings(key) {
            let text = format!("<<{enc}>> and again {enc}.");
            let (whole, n) = r.redact(Bytes::from(text.clone()));
            assert_eq!(n, 2, "{enc}");
            let w = String::from_utf8_lossy(&whole);
            assert!(!w.contains(&enc) && !w.contains(key), "{enc} survived: {w}");
            assert_eq!(w.matches("[REDACTED]").count(), 2, "{w}");
            for split in 0..=text.len() {
                let mut s = r.stream();
                let mut out = Vec::new();
                out.extend_from_slice(&s.push(&text.as_bytes()[..split]));
                out.extend_from_slice(&s.push(&text.as_bytes()[split..]));
                out.extend_from_slice(&s.finish());
                assert_eq!(out, whole.to_vec(), "{enc} split at {split}");
            }
        }
        // Text that only resembles the key passes untouched.
        let near = "sk-live_9f/Kx+ %73k \\u0073k-";
        assert_eq!(r.redact(Bytes::from(near)).1, 0);
    }
}
