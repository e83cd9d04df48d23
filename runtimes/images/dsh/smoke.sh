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

echo "== node /opt/dsh/node_modules/@deepseek-ai/dsh/lib/bin.js --version (policy flags)"
docker run --rm "${policy[@]}" "$image" node /opt/dsh/node_modules/@deepseek-ai/dsh/lib/bin.js --version

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
# The Harness's own usage figures: the `usage` chunks of its session transcript, one per model call
# it made for the agent loop.
recorded = []
for f in sorted((ws / ".smoke").rglob("session.jsonl*")):
    data = f.read_bytes()
    if f.suffix == ".zstd":
        data = subprocess.run(["zstd", "-dc"], input=data, capture_output=True, check=True).stdout
    for line in data.decode().splitlines():
        rec = json.loads(line)
        chunk = rec.get("data", {}).get("chunk", {}) if rec.get("type") == "assistant/chunk" else {}
        if chunk.get("type") == "usage":
            recorded.append([chunk["usage"]["inputTokens"], chunk["usage"]["outputTokens"]])
agent_calls = [[c["usage"]["prompt_tokens"], c["usage"]["completion_tokens"]] for c in ledger if c["kind"] != "title"]
title_calls = [[c["usage"]["prompt_tokens"], c["usage"]["completion_tokens"]] for c in ledger if c["kind"] == "title"]
check(recorded == agent_calls, f"transcript usage per call {recorded} == upstream ledger (agent calls) {agent_calls}")
print(f"note: session-title calls in the ledger but not in the transcript: {title_calls}")
sys.exit(0 if ok else 1)
PY
