//! `eval-matrix` owns the matrix: its schema (`matrix/<name>.toml`), its expansion into a
//! [`Schedule`] of slots with stable ids, and the seeded statistical order (`chacha8`, the default,
//! and `mulberry32-fisher-yates`, which reproduces v0.4's original order exactly).
//!
//! It must never touch the file system beyond reading the one matrix file it is given, never
//! consult a clock or an unseeded random source (a schedule is a pure function of the matrix
//! bytes), and never know about task contents, arms' runtimes or gates — those are the protocol's
//! (`eval-protocols` depends on this crate, not the reverse).

#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::disallowed_methods))] // clippy.toml: production code only

pub mod order;
pub mod schedule;
pub mod schema;

pub use order::Mulberry32;
pub use schedule::{Schedule, Slot, infra_id, stat_id};
pub use schema::{InfraSlot, Matrix, MatrixError, Order, Suite, limits, valid_id};
