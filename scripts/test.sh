#!/usr/bin/env bash
# The whole test suite, from a fresh machine: sets up what the tests need (a Docker engine, the
# Python cross-check packages, Chromium, the real harnesses' base images), then runs formatting,
# lints and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/ensure-docker.sh
EVAL_TEST_PYTHON=$(scripts/ensure-python.sh)
EVAL_TEST_CHROMIUM=$(scripts/ensure-chromium.sh)
export EVAL_TEST_PYTHON EVAL_TEST_CHROMIUM
# The third-party harness images the end-to-end test runs (controller/tests/it/real_harness.rs):
# built on the first run (root, Debian mirror, PyPI), reused from the engine afterwards.
harness_images=$(scripts/ensure-harness-images.sh)
while IFS= read -r assignment; do
  export "${assignment?}"
done <<<"$harness_images"

echo "== static in-container binaries"
scripts/build-static.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked --no-fail-fast 2>&1
