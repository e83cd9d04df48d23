//! The attempt id: which attempt of which slot a ledger payload, a proxy registration or a
//! report row is about.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `<slot>#<n>`: the `n`-th attempt (counting from 1) of the schedule slot `slot` (e.g.
/// `stat-simple-simple-js-clamp-native-r1#2` is the first rerun of that slot). Serialized as
/// that text, so ledgers written when it was a plain string read back unchanged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptId {
    slot: String,
    number: u32,
}

/// Text that is not `<slot>#<n>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("attempt id {value:?} is not <slot>#<n> (n a number from 1, no leading zeros): {why}")]
pub struct BadAttemptId {
    /// The text as given.
    pub value: String,
    /// Which part is wrong.
    pub why: &'static str,
}

impl AttemptId {
    /// The `number`-th attempt of `slot`.
    pub fn new(slot: impl Into<String>, number: u32) -> Self {
        Self {
            slot: slot.into(),
            number,
        }
    }

    /// The schedule slot's id.
    pub fn slot(&self) -> &str {
        &self.slot
    }

    /// The attempt's number within its slot, from 1.
    pub fn number(&self) -> u32 {
        self.number
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.slot, self.number)
    }
}

impl FromStr for AttemptId {
    type Err = BadAttemptId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| BadAttemptId {
            value: s.to_owned(),
            why,
        };
        // The number is after the last `#`, so the id's text is the only thing that decides.
        let (slot, n) = s.rsplit_once('#').ok_or_else(|| bad("no '#'"))?;
        if slot.is_empty() {
            return Err(bad("empty slot"));
        }
        // Only the text `Display` writes: `+1` or `01` would name the same attempt twice.
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.starts_with('0') {
            return Err(bad("the number is not a decimal from 1"));
        }
        let number = n.parse().map_err(|_| bad("the number is too large"))?;
        Ok(Self::new(slot, number))
    }
}

impl Serialize for AttemptId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AttemptId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let id = AttemptId::new("stat-simple-simple-js-clamp-native-r1", 2);
        let text = id.to_string();
        assert_eq!(text, "stat-simple-simple-js-clamp-native-r1#2");
        let back: AttemptId = text.parse().unwrap();
        assert_eq!(back, id);
        assert_eq!(back.slot(), "stat-simple-simple-js-clamp-native-r1");
        assert_eq!(back.number(), 2);
    }

    #[test]
    fn serde_is_the_plain_text() {
        let id = AttemptId::new("infra-s-t-a-r0", 13);
        let json = serde_json::to_value(&id).unwrap();
        assert_eq!(json, serde_json::json!("infra-s-t-a-r0#13"));
        assert_eq!(serde_json::from_value::<AttemptId>(json).unwrap(), id);
    }

    #[test]
    fn the_last_hash_separates_the_number() {
        let id: AttemptId = "odd#slot#3".parse().unwrap();
        assert_eq!((id.slot(), id.number()), ("odd#slot", 3));
        assert_eq!(id.to_string(), "odd#slot#3");
    }

    #[test]
    fn bad_text_is_refused_naming_the_value() {
        for bad in [
            "stat-s-t-a-r1",
            "#1",
            "slot#",
            "slot#0",
            "slot#01",
            "slot#+1",
            "slot#-1",
            "slot#1x",
            "slot#99999999999",
        ] {
            let e = bad.parse::<AttemptId>().unwrap_err();
            assert_eq!(e.value, bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        assert!(serde_json::from_str::<AttemptId>("\"slot#0\"").is_err());
        assert!(serde_json::from_str::<AttemptId>("3").is_err());
    }
}
