#!/usr/bin/env bash
# The `eval show` benchmark: `eval show ATTEMPT --json` of an attempt with EVAL_BENCH_SHOW_CALLS
# (default 300) model calls (goal: under 200 ms), against yardsticks measured in the same run on
# the same data: the `sqlite3` CLI reading the attempt's rows, and Python reading those rows and
# re-hashing every artifact they name (the I/O and hashing `eval show` cannot avoid). The release
# binary (EVAL_BENCH_BIN overrides it); each is run EVAL_BENCH_SHOW_RUNS (default 7) times,
# alternating, and the medians are printed.
#
# The run is made without Docker by the real runner with a scripted executor
# (controller/src/report_tests/synthetic.rs, as scripts/bench-site.sh): one repetition of the demo matrix,
# every attempt with that many calls through the real wire log (each request resends the whole
# conversation, as a harness does).
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${EVAL_BENCH_SHOW_CALLS:-300}
runs=${EVAL_BENCH_SHOW_RUNS:-7}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [[ -n "${EVAL_BENCH_BIN:-}" ]]; then
  EVAL="$EVAL_BENCH_BIN"
else
  cargo build --release -q -p eval-controller
  EVAL="$PWD/target/release/eval"
fi
EVAL_BENCH_SITE_DIR="$tmp/run" EVAL_BENCH_SITE_REPS=1 EVAL_BENCH_SITE_CALLS="$calls" \
  cargo test -q -p eval-controller --bin eval report_tests::site::bench_state -- --ignored --exact >/dev/null 2>&1

python3 - "$EVAL" "$tmp/run/project" "$calls" "$runs" <<'PY'
import hashlib, json, os, sqlite3, statistics, subprocess, sys, time
eval_bin, project, calls, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ledger = f"{project}/runs/demo/ledger.sqlite"
store = f"{project}/runs/demo/artifacts/sha256"
c = sqlite3.connect(ledger)
attempt = None
for (p,) in c.execute("select payload from entries where kind='attempt_outcome' order by seq"):
    o = json.loads(p)
    if len(o["model_calls"]) == calls and o["slot"].startswith("stat-"):
        attempt = o["attempt"]
        break
if attempt is None:
    sys.exit(f"no statistical attempt with {calls} calls")
c.close()

def timed(argv, **kw):
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    out, err = p.communicate()
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {p.returncode}: {err.decode()}")
    return wall, out

query = ("select seq, kind, payload from entries where json_extract(payload, '$.attempt') = '%s' "
         "or json_extract(payload, '$.attempt') like '%s/%%' order by seq") % (attempt, attempt)

def rows_and_artifacts():
    t0 = time.monotonic()
    db = sqlite3.connect(ledger)
    names = set()
    n = 0
    for seq, kind, payload in db.execute(query):
        n += 1
        for d in (json.loads(payload).get("artifacts") or {}).values():
            if isinstance(d, str):
                names.add(d)
    for d in names:
        h = d.split(":", 1)[1]
        with open(f"{store}/{h[:2]}/{h}", "rb") as f:
            hashlib.sha256(f.read()).hexdigest()
    db.close()
    return time.monotonic() - t0, n, len(names)

show, cli, py = [], [], []
size = 0
for _ in range(runs):
    w, out = timed([eval_bin, "show", attempt, "--matrix", "demo", "--json"], cwd=project)
    show.append(w)
    size = len(out)
    cli.append(timed(["sqlite3", ledger, query])[0])
    w, n, arts = rows_and_artifacts()
    py.append(w)
doc = json.loads(out)
shown = len(doc.get("calls", doc.get("model_calls", [])))
med = statistics.median
print(f"attempt {attempt}: {calls} model calls, {n} ledger entries, {arts} artifacts; eval show --json printed {size} bytes")
print(f"yardstick  sqlite3 CLI reading the attempt's rows:           {med(cli) * 1000:.0f} ms (median of {runs})")
print(f"yardstick  python: the rows + every named artifact re-hashed: {med(py) * 1000:.0f} ms (median of {runs})")
print(f"eval show ATTEMPT --json (release):                          {med(show) * 1000:.0f} ms (median of {runs}; min {min(show) * 1000:.0f}, max {max(show) * 1000:.0f})")
print(f"goal: under 200 ms -> {'met' if med(show) < 0.2 else 'NOT met'}")
PY
