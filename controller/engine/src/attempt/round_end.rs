//! What the shim reports at a round's end, handed from the control plane (which receives it) to
//! the round loop (which acts on it): a leaf both import.

use serde::Deserialize;
use tokio::sync::oneshot;

/// What the shim reports at a round's end (`POST /_eval/round`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShimRound {
    /// The shim's count; recorded rounds are counted by the controller, never by this.
    #[allow(dead_code)]
    pub(super) round: u64,
    pub(super) exit: Option<i32>,
    pub(super) signal: Option<i32>,
    pub(super) timed_out: bool,
}

/// A round's end handed from the control plane to the round loop, with the answer's channel.
pub(super) struct RoundEnd {
    pub(super) report: ShimRound,
    pub(super) reply: oneshot::Sender<bool>,
}
