#!/usr/bin/env bash
# The whole v0.4 on the real DeepSeek Harness, end to end (issue 34): builds (or reuses) the three
# base images, imports v0.4 into a fresh project with `eval import v04`, plans, freezes, runs the
# 6 + 90 schedule (plus the control arms) and reports.
#
#   scripts/v04-real.sh PROJECT_DIR SIMPLE_DIR ICAE_ROOT EVOCODE_PATH UPSTREAM [API_KEY_ENV]
#
# SIMPLE_DIR is v0.4's simple inputs (e.g. ../shared/v04-upstream), ICAE_ROOT an ICAE-EVAL root,
# EVOCODE_PATH EvoCode-Bench's archive or task directories, UPSTREAM the model API (a paid one, or a
# scripted DeepSeek-faithful one) and API_KEY_ENV the variable holding its key (default
# DEEPSEEK_API_KEY). Synthetic ICAE/EvoCode data needs EVAL_V04_ALLOW_UNPINNED=1. Extra arguments
# for `eval import v04` (e.g. --router-identity) go in EVAL_V04_IMPORT_ARGS.
set -euo pipefail
[ $# -ge 5 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
project=$1 simple=$(cd "$2" && pwd) icae=$(cd "$3" && pwd) evocode=$(realpath "$4") upstream=$5
key_env=${6:-DEEPSEEK_API_KEY}
eval_bin=${EVAL_BIN:-eval}
for script in dsh v04-grader evocode-go; do
  "$here/runtimes/images/$script/build.sh" | tail -n 1
done
"$eval_bin" init "$project"
cd "$project"
extra=()
[ "${EVAL_V04_ALLOW_UNPINNED:-0}" = 1 ] && extra+=(--allow-unpinned)
# shellcheck disable=SC2206 # word splitting of the extra import arguments is wanted
extra+=(${EVAL_V04_IMPORT_ARGS:-})
"$eval_bin" import v04 --simple "$simple" --icae "$icae" --evocode "$evocode" "${extra[@]}"
"$eval_bin" plan --matrix v0.4-real
"$eval_bin" freeze --protocol v0.4-real
start=$(date +%s)
"$eval_bin" run --matrix v0.4-real --upstream "$upstream" --api-key-env "$key_env"
echo "run wall time: $(( $(date +%s) - start )) s" >&2
"$eval_bin" report --matrix v0.4-real
