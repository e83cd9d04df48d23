//! The text of the digests the proxy records, a leaf that records, wire shapes and calls share.

/// `sha256:` and the lower-case hex of a SHA-256 sum: the text of every digest the proxy records.
/// Written from a table (`hex::encode` collects the characters one by one, a cost every call paid
/// several times).
pub(crate) fn digest_text(sum: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(7 + 2 * sum.len());
    out.extend_from_slice(b"sha256:");
    for &b in sum {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
    // Only ASCII was written.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod digest_tests {
    use sha2::{Digest, Sha256};

    #[test]
    fn digest_text_is_the_hex_of_the_sum() {
        for input in [&b""[..], b"abc", &[0u8, 255, 16, 1, 0xab][..]] {
            let sum = Sha256::digest(input);
            assert_eq!(
                super::digest_text(&sum),
                format!("sha256:{}", hex::encode(sum))
            );
        }
    }
}
