#!/bin/bash
# eval's wrapper around one EvoCode round's tests (written by `eval import v04-evocode` into each
# round's hidden directory, mounted at /hidden): it runs the round's tests/test.sh as Harbor's
# verifier does — the workspace at /app, the tests at /tests, the reward written to
# /logs/verifier/reward.txt — in the grader container (no network, the workspace snapshot
# read-only at $1; /app, /tests, /logs, /usr/local/bin and /var/cache/grader are its writable
# tmpfs). It leaves beside the score file $3 what the round metrics read (test-stdout.txt, reward.txt, at most 16 MiB
# and 4 KiB) and a score.json whose metrics are the round's reward and case counts.
set -u
# $3 is the score file's path (`{out}` = /out/score.json); the round metrics read the rest of
# the grader's output directory, its parent.
ws=$1 hidden=$2 score=$3
out=$(dirname "$score")
export HOME=/var/cache/grader/home GOCACHE=/var/cache/grader/go-build GOPATH=/var/cache/grader/go
export GOTMPDIR=/var/cache/grader/tmp GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off
export PATH=/usr/local/bin:/usr/bin:/bin
mkdir -p "$HOME" "$GOCACHE" "$GOPATH" "$GOTMPDIR" /logs/verifier /logs/agent || exit 1
# Contents only, nothing preserved: the grader's user may not set the times or owner of the
# tmpfs mount points themselves (`cp -a` fails on `/app/.` there).
cp -R "$ws/." /app/ || exit 1
cp -R "$hidden/tests/." /tests/ || exit 1
# The task's Dockerfile ENV (checked at import: KEY=VALUE, no $, \ or ').
while IFS='=' read -r k v; do
  [ -n "$k" ] && export "$k=$v"
done < "$hidden/env"
cd /app || exit 1
# An oracle control's grading only: `run/controls.rs` (`oracle_round_hidden`) puts each round
# j <= k's reference solution at $hidden/oracle/<j>/; an agent's round never has that directory.
# Each solve.sh runs in order in /app, as Harbor's oracle agent runs every step's in one
# container; one that fails leaves the round unscorable (the grader exits non-zero).
j=1
while [ -f "$hidden/oracle/$j/solve.sh" ]; do
  (cd /app && bash "$hidden/oracle/$j/solve.sh") > "$out/solve-$j.txt" 2>&1 \
    || { echo "the reference solve.sh of round $j failed" >&2; cat "$out/solve-$j.txt" >&2; exit 1; }
  j=$((j+1))
done
cd /app || exit 1
bash /tests/test.sh > "$out/test-stdout.txt" 2> "$out/test-stderr.txt"
code=$?
truncate -s '<16M' "$out/test-stdout.txt" "$out/test-stderr.txt"
reward=0
if [ -f /logs/verifier/reward.txt ]; then
  head -c 4096 /logs/verifier/reward.txt > "$out/reward.txt"
  r=$(tr -d ' \t\r\n' < "$out/reward.txt")
  if [[ $r =~ ^[0-9]+(\.[0-9]+)?$ ]]; then reward=$r; fi
fi
passed=$(grep -c 'CASE_RESULT .*status=success' "$out/test-stdout.txt")
total=$(grep -c 'CASE_RESULT ' "$out/test-stdout.txt")
printf '{"metrics": {"reward": %s, "cases_passed": %d, "cases_total": %d, "tests_exit": %d}}\n' \
  "$reward" "$passed" "$total" "$code" > "$score"
