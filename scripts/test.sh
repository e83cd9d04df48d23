#!/usr/bin/env bash
# The whole test suite, from a fresh machine: sets up what the tests need (a Docker engine, the
# Python cross-check packages, Chromium), then runs formatting, lints and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/ensure-docker.sh
EVAL_TEST_PYTHON=$(scripts/ensure-python.sh)
EVAL_TEST_CHROMIUM=$(scripts/ensure-chromium.sh)
export EVAL_TEST_PYTHON EVAL_TEST_CHROMIUM

echo "== static in-container binaries"
scripts/build-static.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked --no-fail-fast 2>&1
