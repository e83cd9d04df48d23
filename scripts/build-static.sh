#!/usr/bin/env bash
# Builds the statically linked binaries that run inside containers (the shim, the fixture agent,
# the fixture grader) into target/x86_64-unknown-linux-gnu/release/, where `eval` finds them
# (or set EVAL_STATIC_DIR). The explicit --target keeps RUSTFLAGS away from the normal build.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="-C target-feature=+crt-static -C strip=symbols" cargo build --release --locked \
  --target x86_64-unknown-linux-gnu \
  -p eval-shim -p eval-fixture-agent -p eval-fixture-grader
