//! Canonical JSON bytes: object keys sorted by their UTF-8 bytes, no insignificant whitespace,
//! numbers as `serde_json` prints them (shortest round-trip form for floats).
//!
//! This is "RFC 8785 style", not byte-for-byte RFC 8785: RFC 8785 sorts keys by UTF-16 code
//! units (differs only for keys outside the Basic Multilingual Plane) and prints some floats in
//! ECMAScript form (`1e+21` rather than `1e21`). A verifier never needs to re-canonicalise: it
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

    #[test]
    fn detects_non_canonical_bytes() {
        assert!(is_canonical(br#"{"a":1,"b":2}"#));
        assert!(!is_canonical(br#"{"b":2,"a":1}"#));
        assert!(!is_canonical(br#"{"a": 1}"#));
        assert!(!is_canonical(b"not json"));
    }
}
