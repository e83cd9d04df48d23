//! Request headers the proxy never forwards upstream, whatever a model contract allows.
//!
//! One list for both sides of the promise: the proxy drops these headers, and protocol
//! validation refuses a contract that lists one in `allowed_headers` (listing one would promise
//! something the proxy does not do).

/// Credentials: the proxy removes the client's and injects its own upstream key.
pub const CREDENTIAL_HEADERS: [&str; 5] = [
    "authorization",
    "x-api-key",
    "api-key",
    "proxy-authorization",
    "cookie",
];

/// Hop-by-hop headers, and `accept-encoding` (the meter must read the body, so the proxy asks
/// for `identity`).
pub const HOP_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "accept-encoding",
    "forwarded",
];

/// Every header named in [`CREDENTIAL_HEADERS`] or [`HOP_HEADERS`].
pub const NEVER_FORWARDED: [&str; 15] = concat(CREDENTIAL_HEADERS, HOP_HEADERS);

const fn concat(a: [&'static str; 5], b: [&'static str; 10]) -> [&'static str; 15] {
    let mut out = [""; 15];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < b.len() {
        out[a.len() + j] = b[j];
        j += 1;
    }
    out
}

/// A credential header, by exact name or by the `proxy-` prefix; `name` must be lower case.
pub fn is_credential(name: &str) -> bool {
    CREDENTIAL_HEADERS.contains(&name) || name.starts_with("proxy-")
}

/// A hop-by-hop header, by exact name or by the `x-forwarded-` prefix; `name` must be lower case.
pub fn is_hop_by_hop(name: &str) -> bool {
    HOP_HEADERS.contains(&name) || name.starts_with("x-forwarded-")
}

/// A header the proxy never forwards; `name` must be lower case.
pub fn never_forwarded(name: &str) -> bool {
    is_credential(name) || is_hop_by_hop(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_forwarded_is_exactly_both_lists() {
        for h in CREDENTIAL_HEADERS.iter().chain(HOP_HEADERS.iter()) {
            assert!(NEVER_FORWARDED.contains(h), "{h} missing");
        }
        let mut all = NEVER_FORWARDED.to_vec();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), NEVER_FORWARDED.len(), "a header is listed twice");
        assert!(!NEVER_FORWARDED.contains(&""));
    }

    #[test]
    fn prefixes_are_classified() {
        assert!(is_credential("proxy-connection-token"));
        assert!(!is_hop_by_hop("proxy-connection-token"));
        assert!(is_hop_by_hop("x-forwarded-for"));
        assert!(!is_credential("x-forwarded-for"));
        assert!(never_forwarded("cookie") && never_forwarded("te"));
        assert!(!never_forwarded("anthropic-beta") && !never_forwarded("x-request-id"));
    }
}
