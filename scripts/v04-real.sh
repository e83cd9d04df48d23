#!/usr/bin/env bash
# The whole v0.4 on the real DeepSeek Harness, end to end (issue 34): `eval import v04` into a fresh
# project, plan, freeze, the 6 + 90 schedule (plus every suite's control arms) through `eval run`,
# `eval report`; then the figures: wall time per attempt by suite (median), tokens (prompt, cache
# hits, completion), whether every attempt's accounting matched, the report's verdict.
#
#   scripts/v04-real.sh --scripted [--reduced]
#       Against the scripted DeepSeek-faithful upstream (controller/tests/support/dsh.rs), on
#       v0.4's real `simple` inputs (EVAL_V04_UPSTREAM, default ../shared/v04-upstream) and
#       synthetic ICAE and EvoCode data in their published layouts: runs the test
#       controller/tests/e2e/v04_reduced.rs (the full v0.4, or with --reduced the one-task-per-suite
#       version CI runs), which asserts every attempt matched, every ICAE question answered,
#       every EvoCode round graded, every gate evaluated, and prints the figures.
#   scripts/v04-real.sh PROJECT_DIR SIMPLE_DIR ICAE_ROOT EVOCODE_PATH UPSTREAM [API_KEY_ENV]
#       Against a model API (a paid one): SIMPLE_DIR is v0.4's simple inputs, ICAE_ROOT an
#       ICAE-EVAL root, EVOCODE_PATH EvoCode-Bench's archive or task directories, API_KEY_ENV the
#       variable holding the key (default DEEPSEEK_API_KEY). Synthetic ICAE/EvoCode data needs
#       EVAL_V04_ALLOW_UNPINNED=1. Extra arguments for `eval import v04` (e.g. --router-identity,
#       --image NAME=ID) go in EVAL_V04_IMPORT_ARGS, for `eval run` (e.g. --no-balance-check) in
#       EVAL_V04_RUN_ARGS.
#
# Images: scripts/ensure-harness-images.sh builds (or finds) every base image and records it where
# `eval import v04` looks for it (runtimes/images/*/build.sh's build records).
# Exit: 0 when the run and report completed (the verdict is printed, whatever it is), the failing
# step's status otherwise, 2 on bad usage.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,27p' "$0" >&2; exit 2; }

if [ "${1:-}" = --scripted ]; then
  test=the_whole_v04_imported_frozen_run_and_reported_on_the_real_harness
  ignored=(--ignored)
  case ${2:-} in
    --reduced) test=the_reduced_v04_imported_frozen_run_and_reported_on_the_real_harness ignored=() ;;
    '') ;;
    *) usage ;;
  esac
  # shellcheck disable=SC2046 # one VAR=value a line, no spaces
  export $("$here/scripts/ensure-harness-images.sh")
  log=$(mktemp -t v04-real.XXXXXX.log)
  echo "v04-real: running v04_reduced::$test (log: $log)" >&2
  start=$(date +%s)
  rc=0
  (cd "$here" && nice cargo test -p eval-controller --test e2e -- "${ignored[@]}" --exact \
    --nocapture "v04_reduced::$test") >"$log" 2>&1 || rc=$?
  echo "v04-real: test exit $rc after $(( $(date +%s) - start )) s" >&2
  grep -E '^v04 figures:|^test .* (ok|FAILED)$|panicked' "$log" || tail -n 40 "$log"
  exit "$rc"
fi

[ $# -ge 5 ] || usage
project=$1 simple=$(cd "$2" && pwd) icae=$(cd "$3" && pwd) evocode=$(realpath "$4") upstream=$5
key_env=${6:-DEEPSEEK_API_KEY}
eval_bin=${EVAL_BIN:-eval}
[ -n "${!key_env:-}" ] || { echo "v04-real: $key_env is not set" >&2; exit 2; }
"$here/scripts/ensure-harness-images.sh" >/dev/null
# A fresh directory: `eval init` would scaffold the demo project's files beside the import.
mkdir "$project"
cd "$project"
extra=()
[ "${EVAL_V04_ALLOW_UNPINNED:-0}" = 1 ] && extra+=(--allow-unpinned)
# shellcheck disable=SC2206 # word splitting of the extra arguments is wanted
extra+=(${EVAL_V04_IMPORT_ARGS:-})
# shellcheck disable=SC2206
run_extra=(${EVAL_V04_RUN_ARGS:-})
name=v0.4-real
"$eval_bin" import v04 --simple "$simple" --icae "$icae" --evocode "$evocode" "${extra[@]}"
"$eval_bin" plan --matrix "$name"
"$eval_bin" freeze --protocol "$name"
start=$(date +%s)
rc=0
"$eval_bin" run --matrix "$name" --upstream "$upstream" --api-key-env "$key_env" "${run_extra[@]}" || rc=$?
echo "v04-real: eval run exit $rc, wall time $(( $(date +%s) - start )) s" >&2
[ "$rc" -le 1 ] || exit "$rc"
rc=0
"$eval_bin" report --matrix "$name" --format json --out report.json || rc=$?
[ "$rc" -le 1 ] || exit "$rc"
"$eval_bin" ledger show "runs/$name/ledger.sqlite" --json > ledger.jsonl
python3 - ledger.jsonl report.json <<'EOF'
import json, statistics, sys
from datetime import datetime
def t(s): return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
started, outcomes = {}, []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["kind"] == "attempt_started":
        started[e["payload"]["attempt"]] = e["payload"]
    elif e["kind"] == "attempt_outcome" and not e["payload"]["attempt"].startswith("control-"):
        outcomes.append(e["payload"])
total = [0, 0, 0]
for suite in ("simple", "icae", "evocode"):
    os_ = [o for o in outcomes if started[o["attempt"]]["suite"] == suite]
    walls = [t(o["finished_at"]) - t(started[o["attempt"]]["started_at"]) for o in os_]
    tok = [sum(o["tokens"][k] for o in os_) for k in ("input", "cached", "output")]
    total = [a + b for a, b in zip(total, tok)]
    matched = sum(o.get("accounting") == "matched" for o in os_)
    print(f"v04 figures: {suite}: {len(os_)} attempts, {matched} matched, wall time per attempt "
          f"median {statistics.median(walls) if walls else float('nan'):.1f} s; tokens prompt {tok[0]} "
          f"(cache hits {tok[1]}), completion {tok[2]}")
print(f"v04 figures: total tokens prompt {total[0]} (cache hits {total[1]}), completion {total[2]}; "
      f"every attempt matched: {all(o.get('accounting') == 'matched' for o in outcomes)}")
r = json.load(open(sys.argv[2]))
print(f"v04 figures: report verdict: {r['verdict']} (release_allowed {r['release_allowed']}); "
      f"reasons: {r['reasons']}")
EOF
