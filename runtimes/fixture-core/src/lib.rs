//! Formats shared by the fixture agent, the fixture model and the fixture grader.
//!
//! Owns: the per-arm fixture profile, the task's `fixture` block in `prompt.md`, the model's
//! answer format, the pure fixture model, the grader's checks and `score.json`, and the agent's
//! metrics file (the attestation wire format is `eval_core::attest`). Everything here is std + serde so that
//! the static in-container binaries can use it.
//!
//! Must never: touch the network, a container engine, or any secret; every function is pure
//! or reads only the paths it is given.

#![deny(missing_docs)]

pub mod answer;
pub mod checks;
pub mod chunked;
pub mod metrics;
pub mod model;
pub mod profile;
pub mod task;
