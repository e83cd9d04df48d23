//! The client's JSON request body, read without reordering or re-encoding anything, so that what
//! is forwarded is byte-for-byte what the client sent except for the changes the proxy records.

use std::cell::OnceCell;
use std::collections::HashSet;

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

pub struct ParsedRequest {
    body: Bytes,
    /// Top-level members in order: key, and the byte range of the value within `body`.
    members: Vec<(String, std::ops::Range<usize>)>,
    /// Values are decoded only when asked for: most of a request (messages, tools) is never
    /// looked at, only forwarded.
    values: Vec<OnceCell<Option<Value>>>,
}

#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("the request body is not valid JSON: {0}")]
    Json(String),
    #[error("the request body must be a JSON object")]
    NotObject,
    #[error("the request body names {0:?} more than once")]
    Duplicate(String),
}

struct Members<'a>(&'a str);

impl<'de> Visitor<'de> for Members<'de> {
    type Value = Vec<(String, &'de RawValue)>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let _ = self.0;
        let mut out = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
            out.push((k, v));
        }
        Ok(out)
    }
}

impl ParsedRequest {
    pub fn parse(body: Bytes) -> Result<Self, RequestError> {
        let text = std::str::from_utf8(&body).map_err(|e| RequestError::Json(e.to_string()))?;
        let trimmed = text.trim_start();
        if !trimmed.starts_with('{') {
            // Still report JSON syntax errors as such.
            serde_json::from_str::<Value>(text).map_err(|e| RequestError::Json(e.to_string()))?;
            return Err(RequestError::NotObject);
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let raw = de
            .deserialize_map(Members(text))
            .map_err(|e| RequestError::Json(e.to_string()))?;
        de.end().map_err(|e| RequestError::Json(e.to_string()))?;
        let base = text.as_ptr() as usize;
        let mut members = Vec::with_capacity(raw.len());
        let mut keys = HashSet::with_capacity(raw.len());
        for (k, v) in raw {
            let s = v.get();
            let start = s.as_ptr() as usize - base;
            if !keys.insert(k.clone()) {
                return Err(RequestError::Duplicate(k));
            }
            members.push((k, start..start + s.len()));
        }
        let values = members.iter().map(|_| OnceCell::new()).collect();
        Ok(Self {
            body,
            members,
            values,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        let i = self.members.iter().position(|(k, _)| k == key)?;
        self.values[i]
            .get_or_init(|| {
                let range = self.members[i].1.clone();
                // The whole body was validated as JSON already, so this cannot fail.
                serde_json::from_slice(&self.body[range]).ok()
            })
            .as_ref()
    }

    /// The raw JSON text of top-level member `key`, exactly as sent.
    pub fn raw(&self, key: &str) -> Option<&str> {
        let (_, range) = self.members.iter().find(|(k, _)| k == key)?;
        // `parse` checked that the whole body is UTF-8 and the range is a value's exact text.
        std::str::from_utf8(&self.body[range.clone()]).ok()
    }

    /// The top-level member names, in the order sent.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(k, _)| k.as_str())
    }

    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Sets top-level `key` to `value` (serialised compactly), touching no other byte: an
    /// existing member's value is replaced in place, a new member is appended before the
    /// closing brace.
    pub fn with_member(&self, key: &str, value: &Value) -> Bytes {
        let encoded = value.to_string();
        let mut out = Vec::with_capacity(self.body.len() + key.len() + encoded.len() + 4);
        if let Some((_, range)) = self.members.iter().find(|(k, _)| k == key) {
            out.extend_from_slice(&self.body[..range.start]);
            out.extend_from_slice(encoded.as_bytes());
            out.extend_from_slice(&self.body[range.end..]);
        } else {
            let close = self
                .body
                .iter()
                .rposition(|&b| b == b'}')
                .unwrap_or(self.body.len());
            let (head, tail) = self.body.split_at(close);
            out.extend_from_slice(head);
            if !self.members.is_empty() {
                out.push(b',');
            }
            out.extend_from_slice(Value::String(key.to_owned()).to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(encoded.as_bytes());
            out.extend_from_slice(tail);
        }
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_edited_in_place() {
        let body = Bytes::from_static(
            b"{ \"model\" : \"m\",\n \"temperature\": 0.70, \"stream\":true }\n",
        );
        let p = ParsedRequest::parse(body).unwrap();
        assert_eq!(p.get("temperature").unwrap().as_f64(), Some(0.7));
        let added = p.with_member(
            "stream_options",
            &serde_json::json!({"include_usage": true}),
        );
        assert_eq!(
            &added[..],
            b"{ \"model\" : \"m\",\n \"temperature\": 0.70, \"stream\":true ,\"stream_options\":{\"include_usage\":true}}\n"
        );
        let replaced = p.with_member("stream", &Value::Bool(false));
        assert_eq!(
            &replaced[..],
            b"{ \"model\" : \"m\",\n \"temperature\": 0.70, \"stream\":false }\n"
        );
    }

    #[test]
    fn duplicates_and_non_objects_are_refused() {
        assert!(matches!(
            ParsedRequest::parse(Bytes::from_static(b"{\"a\":1,\"a\":2}")),
            Err(RequestError::Duplicate(_))
        ));
        assert!(matches!(
            ParsedRequest::parse(Bytes::from_static(b"[1]")),
            Err(RequestError::NotObject)
        ));
        assert!(matches!(
            ParsedRequest::parse(Bytes::from_static(b"{\"a\":")),
            Err(RequestError::Json(_))
        ));
    }
}
