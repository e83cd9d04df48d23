#!/usr/bin/env bash
# Smoke test of an eval-base/dsh image (default: the one build.sh builds or has cached), under the
# policy flags of DSH-IN-EVAL-POLICY.md: read-only root, tmpfs /tmp (the engine adds noexec) and
# HOME (DSH_HOME inside it), NARB_DISABLE_NATIVE_CACHE=1, cap-drop ALL, no-new-privileges, private
# IPC, uid 65532, 256 MiB, 1 CPU, 64 pids, network none.
# 1. `dsh --version`;
# 2. `dsh --profile headless "<task>"` against a scripted DeepSeek-compatible upstream running in
#    the same container on 127.0.0.1 (smoke/upstream.mjs): a `write` tool call, then the answer.
#    Checks the written file, the exit status, and prints the wire summary and the upstream's
#    ledger next to the usage the Harness recorded in its own session transcript.
# Exit 0 when every check holds, 1 otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image=${1:-$("$here/build.sh" | tail -n 1)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/workspace"
chown 65532:65532 "$work/workspace"

policy=(--network none --read-only --cap-drop ALL --security-opt no-new-privileges --ipc private
  --user 65532:65532 --memory 256m --memory-swap 256m --cpus 1 --pids-limit 64
  --tmpfs /tmp:rw,nosuid,nodev,size=16m --tmpfs /home/agent:rw,nosuid,nodev,size=16m
  -e HOME=/home/agent -e DSH_HOME=/home/agent/.dsh -e TMPDIR=/tmp -e NARB_DISABLE_NATIVE_CACHE=1
  -e DSH_TELEMETRY_DISABLED=1)

echo "== dsh --version (policy flags)"
docker run --rm "${policy[@]}" "$image" dsh --version

echo "== dsh --profile headless against the scripted upstream (policy flags)"
start=$(date +%s.%N)
set +e
docker run --rm "${policy[@]}" \
  -v "$work/workspace:/workspace" -v "$here/smoke:/smoke:ro" \
  -e DEEPSEEK_API_KEY=placeholder-not-a-key -e DEEPSEEK_BASE_URL=http://127.0.0.1:8080/v1 \
  -e DSH_PERMISSION_MODE=workspace-write \
  "$image" sh -c '
    node /smoke/upstream.mjs 8080 /workspace/.upstream.jsonl &
    # Wait for the listener (bounded by attempts, not by a guess about speed).
    i=0; until node -e "require(\"net\").connect(8080, \"127.0.0.1\").on(\"connect\", () => process.exit(0)).on(\"error\", () => process.exit(1))"; do
      i=$((i + 1)); [ "$i" -lt 200 ] || { echo "upstream never listened" >&2; exit 99; }
    done
    dsh --profile headless "Create /workspace/hello.txt containing the line: hello from dsh"
    status=$?
    # The transcript lives in DSH_HOME (a tmpfs); keep it for the checks below.
    mkdir -p /workspace/.smoke && cp -r "$DSH_HOME/sessions" /workspace/.smoke/ 2>/dev/null
    exit $status' > "$work/out.log" 2>&1
status=$?
set -e
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
echo "exit $status after ${elapsed} s (container create to exit); stdout+stderr tail:"
tail -n 8 "$work/out.log"
find "$work/workspace/.smoke" -type f -printf '%P %s bytes\n' 2>/dev/null | head
python3 - "$work/workspace" "$status" <<'PY'
import json, subprocess, sys, pathlib
ws, status = pathlib.Path(sys.argv[1]), int(sys.argv[2])
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)
check(status == 0, f"dsh exit status {status}")
hello = ws / "hello.txt"
check(hello.is_file() and hello.read_text() == "hello from dsh\n", "the write tool created /workspace/hello.txt")
ledger = [json.loads(l) for l in (ws / ".upstream.jsonl").read_text().splitlines()]
for c in ledger:
    h = c["headers"]
    print(f"wire call {c['call']} {c['kind']}: POST {c['path']} ua={h.get('user-agent')!r} "
          f"accept={h.get('accept')!r} session={h.get('x-deepseek-harness-session-id', '-')[:16]}… "
          f"request={json.dumps(c['request'], sort_keys=True)} tools={len(c['tools'])} usage={c['usage']}")
check([c["kind"] for c in ledger if c["kind"] != "title"] == ["tool_call", "answer"], "two tool-offering calls: tool call, answer")
# The Harness's own usage figures, wherever its transcript records them.
found = []
for f in sorted((ws / ".smoke").rglob("*")):
    if not f.is_file():
        continue
    data = f.read_bytes()
    if f.suffix == ".zstd":
        data = subprocess.run(["zstd", "-dc"], input=data, capture_output=True, check=True).stdout
    for line in data.decode(errors="replace").splitlines():
        if '"prompt_tokens"' in line or '"promptTokens"' in line or '"input_tokens"' in line or '"inputTokens"' in line:
            found.append((f.name, line[:400]))
print(f"transcript lines carrying usage: {len(found)}")
for name, line in found[:6]:
    print("  ", name, line)
sys.exit(0 if ok else 1)
PY
