#!/usr/bin/env bash
# Issue 6 benchmark: `eval demo` (96 attempts = 96 agent + 96 grader containers, concurrency 4,
# fixture runtime, fixture upstream, real proxy) against the yardstick measured in the same run:
# the same number of bare `docker run --rm` of the fixture agent image at the same concurrency.
# Prints wall times, the ratio, and the controller's own time per attempt (attempt duration minus
# time inside containers, from the ledger).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-docker.sh >/dev/null 2>&1 || true
scripts/build-static.sh >/dev/null
cargo build --release -q -p eval-controller
EVAL="$PWD/target/release/eval"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

t0=$(date +%s.%N)
"$EVAL" demo --state "$tmp/demo" >"$tmp/demo.out"
t1=$(date +%s.%N)
demo_wall=$(echo "$t1 - $t0" | bc -l)

ledger="$tmp/demo/project/runs/demo/ledger.sqlite"
read -r attempts dur cont < <(python3 - "$ledger" <<'PY'
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = [json.loads(p) for (p,) in c.execute("select payload from entries where kind='attempt_outcome'")]
print(len(rows), sum(r["duration_seconds"] for r in rows), sum(r["container_seconds"] for r in rows))
PY
)

image=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep '^eval-runtime/fixture' | head -1)
containers=$((attempts * 2))
t0=$(date +%s.%N)
seq "$containers" | xargs -P 4 -I{} sh -c \
  "docker run --rm --network none --read-only --user 65532:65532 '$image' /usr/local/bin/eval-fixture-agent --version >/dev/null 2>&1 || true"
t1=$(date +%s.%N)
bare_wall=$(echo "$t1 - $t0" | bc -l)

python3 - "$demo_wall" "$bare_wall" "$attempts" "$dur" "$cont" "$containers" <<'PY'
import sys
demo, bare, n, dur, cont, containers = map(float, sys.argv[1:])
print(f"eval demo: {int(n)} attempts ({int(containers)} containers) in {demo:.1f} s wall "
      f"(includes init, freeze, report)")
print(f"yardstick: {int(containers)} bare `docker run --rm` of the fixture agent image, "
      f"concurrency 4: {bare:.1f} s wall")
print(f"ratio demo / bare = {demo / bare:.2f}  (target < 1.20)")
print(f"per attempt: duration {dur / n * 1000:.0f} ms, inside containers {cont / n * 1000:.0f} ms, "
      f"controller's own {(dur - cont) / n * 1000:.0f} ms")
print(f"wall per attempt: demo {demo / n * 1000:.0f} ms vs bare {bare / n * 1000:.0f} ms "
      f"(two containers each)")
PY
