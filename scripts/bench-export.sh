#!/usr/bin/env bash
# The export benchmark: on one finished demo run (`eval demo --state`: the demo matrix on the
# fixture runtime and fixture upstream, 96 attempts; needs the Docker engine), the wall time of
# `eval export atif` (every attempt), `eval export inspect` (every suite and arm) and the
# yardsticks measured in the same run on the same data: `eval report --format site` (the report
# plus a page per attempt) and `eval report --format json` (the report alone: ledger read and
# verified, artifacts re-hashed, statistics; `eval export inspect` reads the run the same way).
# All are the release binary (EVAL_BENCH_EXPORT_BIN names another); each is run
# EVAL_BENCH_EXPORT_RUNS times (default 5), alternating, each into a fresh directory, and the
# medians and the ratios to the site are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${EVAL_BENCH_EXPORT_RUNS:-5}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [ -n "${EVAL_BENCH_EXPORT_BIN:-}" ]; then
  EVAL="$EVAL_BENCH_EXPORT_BIN"
else
  cargo build --release -q -p eval-controller
  EVAL="$PWD/target/release/eval"
fi
"$EVAL" demo --state "$tmp/demo" >/dev/null 2>&1

python3 - "$EVAL" "$tmp/demo/project" "$tmp" "$runs" <<'PY'
import os, sqlite3, statistics, subprocess, sys, time
eval_bin, project, tmp, runs = sys.argv[1:]

def measure(args):
    t0 = time.monotonic()
    p = subprocess.run([eval_bin] + args, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 1):
        sys.exit(f"eval {' '.join(args)} exited {p.returncode}: {p.stderr.decode()}")
    return wall

def files(d):
    if os.path.isfile(d):
        return 1, os.path.getsize(d)
    return sum(len(fs) for _, _, fs in os.walk(d)), sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)

atif, inspect, site, report = [], [], [], []
for i in range(int(runs)):
    report.append(measure(["report", "--matrix", "demo", "--format", "json", "--out", f"{tmp}/report-{i}.json"]))
    atif.append(measure(["export", "atif", "--matrix", "demo", "--out", f"{tmp}/atif-{i}"]))
    inspect.append(measure(["export", "inspect", "--matrix", "demo", "--out", f"{tmp}/inspect-{i}"]))
    site.append(measure(["report", "--matrix", "demo", "--format", "site", "--out", f"{tmp}/site-{i}"]))

c = sqlite3.connect(f"{project}/runs/demo/ledger.sqlite")
attempts = c.execute("select count(*) from entries where kind='attempt_started'").fetchone()[0]
calls = c.execute("select count(*) from entries where kind='model_call'").fetchone()[0]
entries = c.execute("select count(*) from entries").fetchone()[0]
a, i, s, r = (statistics.median(x) for x in (atif, inspect, site, report))
print(f"run: {attempts} attempts, {calls} model calls, {entries} ledger entries (eval demo)")
for name, wall, out in [("eval export atif          ", a, "atif-0"), ("eval export inspect       ", i, "inspect-0"),
                        ("eval report --format site ", s, "site-0"), ("eval report --format json ", r, "report-0.json")]:
    n, size = files(f"{tmp}/{out}")
    print(f"{name}: {wall:.2f} s wall (median of {runs}); {n} files, {size / 1e6:.1f} MB")
print(f"atif / site = {a / s:.2f}x, inspect / site = {i / s:.2f}x; "
      f"inspect - report json = {i - r:.2f} s (its own part: each sample's conversation)")
PY
