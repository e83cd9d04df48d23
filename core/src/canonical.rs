//! Canonical JSON bytes: object keys sorted by their UTF-8 bytes, no insignificant whitespace,
//! numbers as `serde_json` prints them (shortest round-trip form for floats).
//!
//! This is "RFC 8785 style", not byte-for-byte RFC 8785: RFC 8785 sorts keys by UTF-16 code
//! units (differs only for keys outside the Basic Multilingual Plane) and prints floats in
//! ECMAScript form, which differs from `serde_json`'s for some values. A verifier never needs to re-canonicalise: it
//! hashes the stored bytes.

use serde::Serialize;
use serde_json::Value;

/// Serialises `value` canonically. `serde_json::Map` is a `BTreeMap` in this workspace (the
/// `preserve_order` feature is never enabled), so converting to a `Value` first sorts every key.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let value: Value = serde_json::to_value(value)?;
    serde_json::to_vec(&value)
}

/// Same as [`to_vec`], as a `String`.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    let value: Value = serde_json::to_value(value)?;
    serde_json::to_string(&value)
}

/// True when `bytes` are exactly the canonical form of the JSON they hold.
pub fn is_canonical(bytes: &[u8]) -> bool {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => serde_json::to_vec(&v).map(|c| c == bytes).unwrap_or(false),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_bytewise_and_whitespace_is_dropped() {
        let v = json!({"b": 1, "a": {"z": [1, 2], "B": null}, "é": true});
        assert_eq!(
            to_string(&v).unwrap(),
            r#"{"a":{"B":null,"z":[1,2]},"b":1,"é":true}"#
        );
    }

    /// A document with floats, escapes, non-BMP keys and integers at the edges: the bytes are
    /// pinned from `eval_evidence::canonical::to_vec` before it moved here, so a change of
    /// serialiser settings (a `preserve_order` feature, float formatting) shows up as a diff.
    #[test]
    fn a_known_document_has_pinned_bytes() {
        let v = json!({
            "z": [1.5, -0.0, 1e21, 0.1, u64::MAX, i64::MIN],
            "a\"b": "line\nbreak\u{1}",
            "\u{1F600}": {"y": null, "x": false},
            "A": "é",
        });
        let bytes = to_vec(&v).unwrap();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            "{\"A\":\"é\",\"a\\\"b\":\"line\\nbreak\\u0001\",\"z\":[1.5,-0.0,1e+21,0.1,18446744073709551615,-9223372036854775808],\"\u{1F600}\":{\"x\":false,\"y\":null}}"
        );
        assert!(is_canonical(&bytes));
    }

    #[test]
    fn detects_non_canonical_bytes() {
        assert!(is_canonical(br#"{"a":1,"b":2}"#));
        assert!(!is_canonical(br#"{"b":2,"a":1}"#));
        assert!(!is_canonical(br#"{"a": 1}"#));
        assert!(!is_canonical(b"not json"));
    }
}
