//! The read side: a run's verified ledger → the report's input ([`data`]) → the views users
//! read: one attempt ([`show`]), the static site ([`site`]), the wire's own metrics
//! ([`wire_metrics`]) and the power table ([`power`]). The statistics and the text, markdown and
//! HTML renderings of the report itself are `eval_evidence::report`'s.
//!
//! Architecture Invariant: this crate never imports the engine (it reads what a run recorded,
//! never how it was recorded) nor the runtimes; what it needs of the running binary (the driver
//! digest, the image resolver for drift) is handed in ([`data::Running`]).

pub mod cost;
pub mod data;
pub mod power;
pub mod show;
pub mod site;
pub mod wire_metrics;
