//! Reports: computed from [`RunData`] (never from a ledger directly — the controller builds the
//! `RunData` from a verified ledger), rendered as text, JSON (schema [`REPORT_SCHEMA`]),
//! Markdown or one self-contained HTML file.

pub mod build;
pub mod false_fail;
pub mod look_taken;
pub mod looks;
pub mod render;
pub mod run_data;
pub mod sensitivity;

pub use build::{
    REPORT_SCHEMA, Report, ReportError, build_report, model_free_refusal, report_entry_payload,
};
pub use render::{Format, render};
pub use run_data::*;
