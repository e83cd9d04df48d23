#!/usr/bin/env bash
# Makes sure the base images of the real (third-party) harnesses the tests run exist in the Docker
# engine, and prints `VAR=sha256:…` for each, one a line, on stdout:
#
#   EVAL_TEST_MINI_SWE_AGENT_IMAGE=sha256:…
#   EVAL_TEST_DSH_IMAGE=sha256:…
#   EVAL_TEST_V04_GRADER_IMAGE=sha256:…      (v0.4's simple grader: controller/tests/import_v04.rs)
#   EVAL_TEST_EVOCODE_GO_IMAGE=sha256:…      (EvoCode's and the Go grader base)
#   EVAL_TEST_DSH_GO_IMAGE=sha256:…          (the Harness + Go 1.22; the next two likewise)
#   EVAL_TEST_DSH_NODE_IMAGE=sha256:…
#   EVAL_TEST_DSH_PYTHON_IMAGE=sha256:…
#   EVAL_TEST_DSH_POLY_IMAGE=sha256:…        (the Harness + Go, Python, TypeScript: v0.4's agents)
#   EVAL_TEST_GRADER_NODE_IMAGE=sha256:…     (grader bases: runtimes/tests/e2e/lang_images.rs)
#   EVAL_TEST_GRADER_PYTHON_IMAGE=sha256:…
#
# Each image is built by its own `runtimes/images/<name>/build.sh`, which reuses the engine's image
# when the tag of its inputs' digest is already there (a rerun with unchanged inputs builds nothing,
# needs no root and no network). A first build needs root, the Debian mirror and PyPI or npm: see
# runtimes/images/README.md. Use from scripts/test.sh as `export $(scripts/ensure-harness-images.sh)`.
#
# Arguments: the image names to ensure (default: every image a test uses, in this order: `dsh`
# before the `dsh-<lang>` images built over it).
# Exit 0 when every image is there; 2 (with the harness named) when one cannot be built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

say() { printf 'ensure-harness-images: %s\n' "$*" >&2; }

# harness name -> the variable the tests read it from
var_of() {
  case $1 in
    mini-swe-agent) echo EVAL_TEST_MINI_SWE_AGENT_IMAGE ;;
    dsh) echo EVAL_TEST_DSH_IMAGE ;;
    v04-grader) echo EVAL_TEST_V04_GRADER_IMAGE ;;
    evocode-go) echo EVAL_TEST_EVOCODE_GO_IMAGE ;;
    dsh-go) echo EVAL_TEST_DSH_GO_IMAGE ;;
    dsh-node) echo EVAL_TEST_DSH_NODE_IMAGE ;;
    dsh-python) echo EVAL_TEST_DSH_PYTHON_IMAGE ;;
    dsh-poly) echo EVAL_TEST_DSH_POLY_IMAGE ;;
    grader-node) echo EVAL_TEST_GRADER_NODE_IMAGE ;;
    grader-python) echo EVAL_TEST_GRADER_PYTHON_IMAGE ;;
    *) return 1 ;;
  esac
}

# image name -> its build command (the per-language bases share runtimes/images/lang/build.sh;
# dsh-poly, every toolchain in one, has its own)
build_of() {
  case $1 in
    dsh-poly) echo "$root/runtimes/images/dsh-poly/build.sh" ;;
    dsh-*) echo "$root/runtimes/images/lang/build.sh agent ${1#dsh-}" ;;
    grader-*) echo "$root/runtimes/images/lang/build.sh grader ${1#grader-}" ;;
    *) echo "$root/runtimes/images/$1/build.sh" ;;
  esac
}

all="mini-swe-agent dsh v04-grader evocode-go dsh-go dsh-node dsh-python dsh-poly grader-node grader-python"

# shellcheck disable=SC2086 # a list of plain names
[ $# -gt 0 ] || set -- $all
for name in "$@"; do
  var=$(var_of "$name") || { say "unknown image '$name' (known: $all)"; exit 2; }
  build=$(build_of "$name")
  [ -x "${build%% *}" ] || { say "$name: no build script at ${build%% *}"; exit 2; }
  say "$name: building or reusing the cached image ($build)"
  # The id is the build script's last stdout line; its progress goes to stderr.
  # One build of a base at a time on this machine: two builds share the build directory
  # (build/<name>) under EVAL_IMAGES_WORK, so the second waits for the first and then gets its
  # cached image. The lock lives here, not in the build scripts, because the build scripts and
  # lib.sh are inputs of the image tag: a lock there would change every base's tag.
  locks="${EVAL_IMAGES_WORK:-/var/tmp/eval-images}/locks"
  mkdir -p "$locks"
  # shellcheck disable=SC2086 # the script and its arguments
  if ! out=$(flock "$locks/$name.lock" $build); then
    say "$name: $build failed (a first build needs root, the Debian mirror and PyPI or npm)"
    exit 2
  fi
  id=$(printf '%s\n' "$out" | tail -n 1)
  if ! [[ $id =~ ^sha256:[0-9a-f]{64}$ ]]; then
    say "$name: $build printed '$id' as its last line, not an image id (sha256:<64 hex>)"
    exit 2
  fi
  # Trust the engine, not the script's word: the id must name an image it holds.
  if ! docker image inspect --format '{{.Id}}' "$id" >/dev/null 2>&1; then
    say "$name: the engine has no image $id"
    exit 2
  fi
  say "$name: $id"
  printf '%s=%s\n' "$var" "$id"
done
