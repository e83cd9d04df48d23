//! The error every closed vocabulary of this crate returns for text it does not know.

/// Text that names none of a vocabulary's values. It carries the value and the accepted names so
/// that the message alone lets the reader fix the file it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}: expected one of {}", .expected.join(", "))]
pub struct UnknownName {
    /// What was being parsed (`phase`, `outcome`, `fault code`).
    pub kind: &'static str,
    /// The text as given.
    pub value: String,
    /// Every name the vocabulary accepts.
    pub expected: Vec<&'static str>,
}

/// Finds `value` among `names` (the `as_str` of each of `all`).
pub(crate) fn parse<T: Copy>(
    kind: &'static str,
    value: &str,
    all: &[T],
    name: impl Fn(T) -> &'static str,
) -> Result<T, UnknownName> {
    all.iter()
        .copied()
        .find(|v| name(*v) == value)
        .ok_or_else(|| UnknownName {
            kind,
            value: value.to_owned(),
            expected: all.iter().map(|v| name(*v)).collect(),
        })
}
