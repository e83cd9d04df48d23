//! Helpers both halves of `freeze_cli` use: `tests/it/freeze_cli.rs` (no Docker) and
//! `tests/e2e/freeze_cli.rs` (Docker).

use std::process::Output;

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}
