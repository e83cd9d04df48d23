#!/bin/bash
# eval's grader of one round of a Harbor-format task (written by `eval import v04-evocode` and
# `eval import harbor` into each round's hidden directory), in eval's two stages (docs/grading.md,
# "Grading in two stages"). The workspace directory is /app unless the round's `workdir` file
# names another (Harbor's WORKDIR); a `verifier-timeout` file bounds test.sh in seconds (Harbor's
# [verifier] timeout_sec).
#
#   grade.sh run WORKSPACE INPUTS CAPTURE     the run stage: runs the round's tests/test.sh as
#     Harbor's verifier does — the workspace at /app, the tests at /tests, test.sh's stdout and
#     its reward in /logs/verifier, which is CAPTURE (eval's capture directory, mounted there). It
#     builds and runs the agent's code; it sees the round's tests (INPUTS = the round's hidden
#     directory) and no grader output. eval made CAPTURE root's and sticky and created
#     reward.txt, test-stdout.txt, test-stderr.txt and tests-exit.txt in it, root's with mode
#     0666: code under test can write into them but not make them read-only, replace or remove
#     them, so the reward read is what test.sh wrote last.
#   grade.sh score HIDDEN CAPTURE SCORE_JSON  the score stage: runs no agent code and sees no
#     workspace; CAPTURE is eval's read-only copy of what the run stage left (regular files
#     only). It copies test-stdout.txt and reward.txt (at most 16 MiB and 4 KiB) beside SCORE_JSON
#     for the round metrics, refusing a destination that already exists, and writes score.json:
#     the round's reward and case counts.
set -u
mode=${1:-}
if [ "$mode" = run ]; then
  ws=$2 inputs=$3 cap=$4
  app=/app
  [ -f "$inputs/workdir" ] && app=$(head -n 1 "$inputs/workdir")
  limit=()
  [ -f "$inputs/verifier-timeout" ] && limit=(timeout "$(head -n 1 "$inputs/verifier-timeout")")
  export HOME=/var/cache/grader/home
  mkdir -p "$HOME" || exit 1
  # EvoCode's Go grader base; a Harbor task's image (a `workdir` file) keeps its own PATH and ENV,
  # as Harbor's verifier runs test.sh in the task's environment.
  if [ ! -f "$inputs/workdir" ]; then
    export GOCACHE=/var/cache/grader/go-build GOPATH=/var/cache/grader/go
    export GOTMPDIR=/var/cache/grader/tmp GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off
    export PATH=/usr/local/bin:/usr/bin:/bin
    mkdir -p "$GOCACHE" "$GOPATH" "$GOTMPDIR" || exit 1
  fi
  # Contents only, nothing preserved: the grader's user may not set the times or owner of the
  # tmpfs mount points themselves (`cp -a` fails on `/app/.` there).
  cp -R "$ws/." "$app/" || exit 1
  cp -R "$inputs/tests/." /tests/ || exit 1
  # The task's Dockerfile ENV (checked at import: KEY=VALUE, no $, \ or ').
  while IFS='=' read -r k v; do
    [ -n "$k" ] && export "$k=$v"
  done < "$inputs/env"
  # An oracle control's grading only: `run/controls.rs` (`oracle_round_hidden`) puts each round
  # j <= k's reference solution at oracle/<j>/; an agent's round never has that directory. Each
  # solve.sh runs in order in /app, as Harbor's oracle agent runs every step's in one container;
  # one that fails is named in oracle-failed.txt and the score stage refuses the round.
  j=1
  while [ -f "$inputs/oracle/$j/solve.sh" ]; do
    if ! (cd "$app" && bash "$inputs/oracle/$j/solve.sh") > "/var/cache/grader/solve-$j.txt" 2>&1; then
      { echo "the reference solve.sh of round $j failed"; tail -c 4096 "/var/cache/grader/solve-$j.txt"; } \
        > "$cap/oracle-failed.txt"
      exit 0
    fi
    j=$((j+1))
  done
  cd "$app" || exit 1
  "${limit[@]}" bash /tests/test.sh > "$cap/test-stdout.txt" 2> "$cap/test-stderr.txt"
  echo "$?" > "$cap/tests-exit.txt"
  truncate -s '<16M' "$cap/test-stdout.txt" "$cap/test-stderr.txt"
  exit 0
fi
if [ "$mode" != score ]; then
  echo "usage: grade.sh run WORKSPACE INPUTS CAPTURE | grade.sh score HIDDEN CAPTURE SCORE_JSON" >&2
  exit 2
fi
hidden=$2 cap=$3 score=$4
out=$(dirname "$score")
set -o noclobber
if [ -d "$hidden/oracle" ] && [ -e "$cap/oracle-failed.txt" ]; then
  head -c 8192 "$cap/oracle-failed.txt" >&2
  exit 1
fi
# A regular file of the capture (eval passes on nothing else), at most $2 bytes, to a destination
# that must not exist yet.
copy() {
  [ -f "$cap/$1" ] && [ ! -L "$cap/$1" ] || return 0
  [ -s "$cap/$1" ] || return 0
  head -c "$2" "$cap/$1" > "$out/$1" || { echo "refusing to write $out/$1: it exists" >&2; exit 1; }
}
copy test-stdout.txt $((16 << 20))
# A Harbor task (`eval import harbor` writes the `workdir` file) is graded whatever its tests
# print: a round whose tests ran leaves its (maybe empty) output, so the round metrics count it.
# EvoCode's rounds keep v0.4's reading (no output: ungraded).
if [ -f "$hidden/workdir" ] && [ -f "$cap/tests-exit.txt" ] && [ ! -e "$out/test-stdout.txt" ]; then
  : > "$out/test-stdout.txt"
fi
copy reward.txt 4096
reward=0
if [ -f "$out/reward.txt" ]; then
  r=$(tr -d ' \t\r\n' < "$out/reward.txt")
  if [[ $r =~ ^[0-9]+(\.[0-9]+)?$ ]]; then reward=$r; fi
else
  # Harbor's other verifier output: reward.json, {"reward": <number>, …}.
  copy reward.json 4096
  if [ -f "$out/reward.json" ]; then
    r=$(tr -d ' \t\r\n' < "$out/reward.json")
    if [[ $r =~ \"reward\":([0-9]+(\.[0-9]+)?)[,}] ]]; then
      reward=${BASH_REMATCH[1]}
      # The round metrics read reward.txt: the verifier's reward, as Harbor reads reward.json.
      echo "$reward" > "$out/reward.txt"
    fi
  fi
fi
passed=0 total=0
if [ -f "$out/test-stdout.txt" ]; then
  passed=$(grep -c 'CASE_RESULT .*status=success' "$out/test-stdout.txt")
  total=$(grep -c 'CASE_RESULT ' "$out/test-stdout.txt")
fi
code=-1
if [ -f "$cap/tests-exit.txt" ]; then
  c=$(head -c 16 "$cap/tests-exit.txt" | tr -d ' \t\r\n')
  if [[ $c =~ ^[0-9]{1,3}$ ]]; then code=$c; fi
fi
printf '{"metrics": {"reward": %s, "cases_passed": %d, "cases_total": %d, "tests_exit": %d}}\n' \
  "$reward" "$passed" "$total" "$code" > "$score"
