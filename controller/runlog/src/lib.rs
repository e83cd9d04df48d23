//! What a run records and where it lives: the ledger's event payloads ([`events`]), the state a
//! ledger replays to ([`replay`]), the per-attempt wire log of model calls ([`wire_log`]), the
//! on-disk layout of a run ([`layout`]), the interim looks taken ([`looks`]) and the signed check
//! of a protocol's preconditions ([`preconditions`]).
//!
//! Architecture Invariant: pure data and reading. Nothing here starts a container, a proxy or a
//! server; the engine writes these records and the report side reads them, and neither needs the
//! other to do so.

pub mod events;
pub mod layout;
pub mod looks;
pub mod preconditions;
pub mod replay;
pub mod wire_log;
