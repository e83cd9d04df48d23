#!/usr/bin/env bash
# The site benchmark: `eval report --format site` of a finished 1,000-attempt run (goal: under
# 10 s and under 200 MB peak RSS) against the yardstick measured in the same run on the same
# data: `eval report --format json` (the report's own time: ledger read and verified, artifacts
# re-hashed, statistics, gates, the report recorded). Both are the release binary; each is run
# three times, alternating, and the medians are printed.
#
# The run is made without Docker by the real runner with a scripted executor
# (controller/src/report_tests/synthetic.rs): 23 repetitions of the demo matrix = 1,035 statistical + 6
# infrastructure attempts, each with EVAL_BENCH_SITE_CALLS (default 10) model calls, an agent
# log, a grader score.json with checks, a grader log and a transcript.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${EVAL_BENCH_SITE_REPS:-23}
calls=${EVAL_BENCH_SITE_CALLS:-10}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cargo build --release -q -p eval-controller
EVAL="$PWD/target/release/eval"
EVAL_BENCH_SITE_DIR="$tmp/run" EVAL_BENCH_SITE_REPS="$reps" EVAL_BENCH_SITE_CALLS="$calls" \
  cargo test -q -p eval-controller --bin eval report_tests::site::bench_state -- --ignored --exact >/dev/null 2>&1

python3 - "$EVAL" "$tmp/run/project" "$tmp" <<'PY'
import json, os, sqlite3, statistics, subprocess, sys, time
eval_bin, project, tmp = sys.argv[1:]

def measure(args):
    t0 = time.monotonic()
    p = subprocess.Popen([eval_bin] + args, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        sys.exit(f"eval {' '.join(args)} exited {code}: {p.stderr.read().decode()}")
    return wall, ru.ru_maxrss / 1024.0  # MiB

json_runs, site_runs = [], []
for i in range(3):
    json_runs.append(measure(["report", "--matrix", "demo", "--format", "json", "--out", f"{tmp}/report-{i}.json"]))
    site_runs.append(measure(["report", "--matrix", "demo", "--format", "site", "--out", f"{tmp}/site"]))

c = sqlite3.connect(f"{project}/runs/demo/ledger.sqlite")
attempts = c.execute("select count(*) from entries where kind='attempt_started'").fetchone()[0]
calls = c.execute("select count(*) from entries where kind='model_call'").fetchone()[0]
entries = c.execute("select count(*) from entries").fetchone()[0]
marker = json.load(open(f"{tmp}/site/eval-site.json"))
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(f"{tmp}/site") for f in fs)

def med(rows, k):
    return statistics.median(r[k] for r in rows)

jw, jm, sw, sm = med(json_runs, 0), med(json_runs, 1), med(site_runs, 0), med(site_runs, 1)
print(f"run: {attempts} attempts, {calls} model calls, {entries} ledger entries")
print(f"yardstick  eval report --format json: {jw:.2f} s wall, {jm:.0f} MiB peak RSS (median of 3)")
print(f"site       eval report --format site: {sw:.2f} s wall, {sm:.0f} MiB peak RSS (median of 3); "
      f"{marker['pages']} pages, {size / 1e6:.1f} MB")
print(f"site / json = {sw / jw:.2f}x time, {sm / jm:.2f}x memory; the site's own part: {sw - jw:.2f} s")
print(f"goal: under 10 s and under 200 MB -> {'met' if sw < 10 and sm < 200 else 'NOT met'}")
PY
