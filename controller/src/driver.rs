//! The driver digest: which controller source tree this `eval` binary was built from.
//!
//! `build.rs` computes it (SHA-256 of an `eval-tree-manifest v1` listing every `*.rs`,
//! `Cargo.toml`, `Cargo.lock` and `build.rs` of the workspace, plus `protocols/init-template/`,
//! skipping `target/`, `runs/` and dot-directories) and embeds it here. A freeze records it; `eval
//! run` refuses a frozen identity whose driver differs from the running binary's.

use eval_evidence::ledger::Digest;

/// `sha256:<hex>`, as embedded at build time.
pub const DRIVER_DIGEST: &str = env!("EVAL_DRIVER_DIGEST");

/// How many source files the digest covers (shown by `eval freeze`).
pub const DRIVER_FILES: &str = env!("EVAL_DRIVER_FILES");

/// The running binary's driver digest.
pub fn driver_digest() -> Digest {
    // build.rs always writes a well-formed digest; ZERO would only mean a broken build, which
    // then matches no frozen identity.
    Digest::parse(DRIVER_DIGEST).unwrap_or(Digest::ZERO)
}

/// What the report side needs of the running binary: its digest and its image resolver.
pub fn running() -> eval_report::data::Running<'static> {
    eval_report::data::Running {
        driver: driver_digest(),
        resolve_image: &eval_engine::image_record::resolve_image_digest,
    }
}
