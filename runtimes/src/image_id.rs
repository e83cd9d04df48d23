//! The image id, apart from the image builder so the base-image reader (`base`) and the builder
//! can both name it without importing each other.

use std::fmt;

/// An image id, `sha256:<hex>` of the image's config JSON.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct ImageId(pub String);

impl ImageId {
    /// The id's hex digits, without the `sha256:` prefix.
    pub fn hex(&self) -> &str {
        self.0.strip_prefix("sha256:").unwrap_or(&self.0)
    }
}

impl fmt::Display for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
