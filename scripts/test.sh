#!/usr/bin/env bash
# The whole test suite, from a fresh machine: sets up what the tests need (a Docker engine with
# gVisor's runsc, the Python cross-check packages, Chromium, the real harnesses' base images), then
# runs formatting, lints and every test, and the hostile-arm suite a second time under gVisor.
#
# The harness images (cold builds of several minutes each, mostly network and the engine) are
# built in the background while the Rust side builds (static binaries, fmt, clippy, the test
# binaries); `cargo test` starts once both are done. A failure of either fails the script, with
# the failing side's log shown.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/ensure-docker.sh
EVAL_TEST_PYTHON=$(scripts/ensure-python.sh)
EVAL_TEST_CHROMIUM=$(scripts/ensure-chromium.sh)
export EVAL_TEST_PYTHON EVAL_TEST_CHROMIUM

logs=$(mktemp -d "${TMPDIR:-/tmp}/eval-test.XXXXXX")
images_out="$logs/harness-images.env"
images_log="$logs/harness-images.log"

# The third-party harness images the end-to-end tests run (controller/tests/e2e/real_harness.rs,
# dsh_*.rs, import_v04.rs): built on the first run (root, Debian mirror, PyPI), reused from the
# engine afterwards.
echo "== harness images (in the background; log: $images_log)"
# Its own process group (setsid), so that stopping it stops the builds it started too.
setsid scripts/ensure-harness-images.sh >"$images_out" 2>"$images_log" &
images_pid=$!

# If the Rust side fails first, do not leave the image builds running behind the script.
stop_images() {
  if [ -n "${images_pid:-}" ] && kill -0 "$images_pid" 2>/dev/null; then
    kill -- "-$images_pid" 2>/dev/null || true
    wait "$images_pid" 2>/dev/null || true
  fi
}
trap stop_images EXIT

echo "== static in-container binaries"
scripts/build-static.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test --no-run"
cargo test --workspace --locked --no-run

echo "== waiting for the harness images"
if wait "$images_pid"; then
  images_pid=
else
  status=$?
  images_pid=
  echo "scripts/ensure-harness-images.sh failed (exit $status); its log:" >&2
  cat "$images_log" >&2
  exit "$status"
fi
while IFS= read -r assignment; do
  [ -n "$assignment" ] && export "${assignment?}"
done <"$images_out"

echo "== cargo test"
status=0
cargo test --workspace --locked --no-fail-fast 2>&1 || status=$?
# The hostile-arm suite once more with every agent container under gVisor (`isolation = "gvisor"`,
# runsc registered by scripts/ensure-docker.sh; controller/tests/support/gvisor.rs).
echo "== cargo test: the hostile-arm suite under gVisor (runsc)"
EVAL_TEST_ISOLATION=gvisor cargo test -p eval-controller --test e2e --locked --no-fail-fast hostile:: 2>&1 ||
  status=$?
exit "$status"
