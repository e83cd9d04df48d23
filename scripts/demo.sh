#!/usr/bin/env bash
# The main job, from a fresh machine: makes sure a Docker engine answers, builds eval and the
# static in-container binaries, then runs `eval demo`: init -> freeze -> run the 96-attempt
# v0.4-shaped demo matrix in real containers through the real proxy to the embedded fixture
# upstream -> verify the ledger -> write the report. Arguments go to `eval demo`
# (e.g. `scripts/demo.sh --state /tmp/demo` keeps everything there).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-docker.sh
scripts/build-static.sh
cargo build --release --locked --bin eval
export EVAL_STATIC_DIR="$PWD/target/x86_64-unknown-linux-gnu/release"
exec target/release/eval demo "$@"
