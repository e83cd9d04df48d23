#!/usr/bin/env bash
# The main job, from a fresh machine: builds eval and runs its demonstration.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin eval
bin=target/release/eval
dir=$(mktemp -d)
ledger="$dir/ledger.sqlite"
echo "== a hash-chained ledger at $ledger"
"$bin" ledger note "$ledger" --text "first remark"
"$bin" ledger note "$ledger" --text "second remark"
"$bin" ledger show "$ledger"
echo "== verify it"
"$bin" ledger verify "$ledger"
head=$("$bin" ledger verify "$ledger" --json | sed -E 's/.*"head":\{"hash":"([^"]+)","seq":([0-9]+)\}.*/\2:\1/')
echo "== export it to JSONL and verify the export against the head $head"
"$bin" ledger export "$ledger" --jsonl "$dir/ledger.jsonl"
"$bin" ledger verify "$dir/ledger.jsonl" --expect-head "$head"
echo "== everything is in $dir"
