//! The statistics' error, a leaf every statistics module returns and the module root re-exports.

/// A statistics failure: bad input (exit 2) or an undefined quantity (explained).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    /// Bad input (empty data, a non-finite value, an out-of-range parameter): exit 2.
    #[error("{0}")]
    Input(String),
    /// The statistic is not finite on this data (on the full sample or on some resamples); the
    /// message says which.
    #[error("undefined: {0}")]
    Undefined(String),
}
