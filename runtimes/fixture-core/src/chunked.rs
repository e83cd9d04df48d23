//! HTTP/1.1 chunked transfer coding (RFC 9112 §7.1), decoded for the in-container binaries (the
//! shim's reply from the control plane, the fixture agent's from the proxy). Both read whole
//! `Connection: close` replies with std only, so one strict decoder serves both: a body that ends
//! before its last-chunk, a size that is not hex, or a chunk longer than what arrived is an error,
//! never a silently shortened body.

use std::fmt;

/// Why a chunked body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkedError {
    /// The body ended before the last (zero-size) chunk or inside a chunk.
    Truncated,
    /// A chunk-size line that is not hexadecimal (extensions after `;` are ignored).
    BadSize(String),
}

impl fmt::Display for ChunkedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChunkedError::Truncated => write!(f, "truncated chunk"),
            ChunkedError::BadSize(s) => write!(f, "bad chunk size {s:?}"),
        }
    }
}

impl std::error::Error for ChunkedError {}

/// The body carried by the chunked coding `raw` (trailers, if any, are dropped).
pub fn decode(mut raw: &[u8]) -> Result<Vec<u8>, ChunkedError> {
    let mut out = Vec::new();
    loop {
        let eol = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or(ChunkedError::Truncated)?;
        let line = String::from_utf8_lossy(&raw[..eol]);
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| ChunkedError::BadSize(size_text.to_owned()))?;
        if size == 0 {
            return Ok(out);
        }
        let start = eol + 2;
        let end = start.checked_add(size).ok_or(ChunkedError::Truncated)?;
        if raw.len() < end {
            return Err(ChunkedError::Truncated);
        }
        out.extend_from_slice(&raw[start..end]);
        raw = raw.get(end + 2..).unwrap_or(&[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_joined_and_extensions_ignored() {
        assert_eq!(
            decode(b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
    }

    #[test]
    fn a_body_cut_short_or_a_bad_size_is_an_error_not_a_shorter_body() {
        // The shim's old decoder returned "ab" for the first and "abc" for the last.
        assert_eq!(decode(b"5\r\nab"), Err(ChunkedError::Truncated));
        assert_eq!(
            decode(b"zz\r\nab\r\n0\r\n\r\n"),
            Err(ChunkedError::BadSize("zz".to_owned()))
        );
        assert_eq!(decode(b"3\r\nabc\r\n"), Err(ChunkedError::Truncated));
        assert_eq!(decode(&[]), Err(ChunkedError::Truncated));
    }
}
