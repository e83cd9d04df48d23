#!/usr/bin/env bash
# Runs a harness image the way eval runs an agent container: the static eval-shim as entrypoint
# (mounted read-only at /.eval/eval-shim), the attempt's socket directory mounted read-only at
# /run/eval, the model reached only through the shim's relay at http://127.0.0.1:8080/v1, and the
# scripted upstream (upstream_unix.py) on the host end of the socket. Checks the shim's
# attestation report, the task's file, and the harness's own usage against the upstream's ledger.
#   relay/smoke.sh mini-swe-agent|dsh [IMAGE]
# The shim comes from $EVAL_STATIC_DIR or the repository's target/x86_64-unknown-linux-gnu/release
# (scripts/build-static.sh). Exit 0 when every check holds, 1 otherwise, 2 on bad usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
harness=${1:-}
case $harness in
  mini-swe-agent | dsh) ;;
  *) echo "usage: $0 mini-swe-agent|dsh [IMAGE]" >&2; exit 2 ;;
esac
image=${2:-$("$here/../$harness/build.sh" | tail -n 1)}
shim=${EVAL_STATIC_DIR:-$root/target/x86_64-unknown-linux-gnu/release}/eval-shim
[ -x "$shim" ] || { echo "no static eval-shim at $shim (run scripts/build-static.sh or set EVAL_STATIC_DIR)" >&2; exit 2; }

work=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/workspace" "$work/sock" "$work/task"
chown 65532:65532 "$work/workspace"
chmod 0755 "$work/sock"
mkfifo "$work/ready"
python3 "$here/upstream_unix.py" "$work/sock/upstream" "$work/ledger.jsonl" "$work/attest.json" > "$work/ready" &
server=$!
# Blocks until the server has bound the socket and said so.
head -n 1 "$work/ready" > /dev/null

policy=(--network none --read-only --cap-drop ALL --security-opt no-new-privileges --ipc private
  --user 65532:65532 --cpus 1 --pids-limit 64
  --tmpfs /tmp:rw,nosuid,nodev,size=16m --tmpfs /home/agent:rw,nosuid,nodev,size=16m
  -v "$work/workspace:/workspace" -v "$work/task/prompt.md:/task/prompt.md:ro"
  -v "$shim:/.eval/eval-shim:ro" -v "$work/sock:/run/eval:ro" --entrypoint /.eval/eval-shim
  -e HOME=/home/agent)
if [ "$harness" = mini-swe-agent ]; then
  printf 'Create /workspace/hello.txt containing "hello through the relay", check it, then submit.\n' > "$work/task/prompt.md"
  policy+=(--memory 512m --memory-swap 512m -e OPENAI_API_BASE=http://127.0.0.1:8080/v1
    -e OPENAI_API_KEY=placeholder-not-a-key -e MSWEA_CONFIGURED=true -e MSWEA_COST_TRACKING=ignore_errors
    -e MSWEA_SILENT_STARTUP=1 -e LITELLM_LOCAL_MODEL_COST_MAP=True)
  attest=/opt/mini-swe-agent/bin/mini
  cmd=(/bin/sh -c 'exec mini -y --exit-immediately -m openai/scripted -t "$(cat /task/prompt.md)" -o /workspace/.mini/trajectory.json')
else
  printf 'Create /workspace/hello.txt containing the line: hello through the relay\n' > "$work/task/prompt.md"
  policy+=(--memory 256m --memory-swap 256m -e DSH_HOME=/home/agent/.dsh -e TMPDIR=/tmp
    -e NARB_DISABLE_NATIVE_CACHE=1 -e DSH_TELEMETRY_DISABLED=1 -e DSH_PERMISSION_MODE=workspace-write
    -e DEEPSEEK_BASE_URL=http://127.0.0.1:8080/v1 -e DEEPSEEK_API_KEY=placeholder-not-a-key)
  attest=/opt/dsh/node_modules/@deepseek-ai/dsh/package.json
  cmd=(/bin/sh -c 'dsh --profile headless "$(cat /task/prompt.md)"; s=$?; mkdir -p /workspace/.smoke && cp -r "$DSH_HOME/sessions" /workspace/.smoke/; exit $s')
fi
start=$(date +%s.%N)
set +e
docker run --rm "${policy[@]}" "$image" --socket /run/eval/upstream --port 8080 --attest "$attest" -- "${cmd[@]}" \
  > "$work/out.log" 2>&1
status=$?
set -e
echo "$harness through eval-shim: exit $status after $(echo "$(date +%s.%N) - $start" | bc) s (create to exit)"
tail -n 4 "$work/out.log"
python3 - "$harness" "$work" "$status" <<'PY'
import json, subprocess, sys, pathlib
harness, work, status = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
ws = work / "workspace"
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)
check(status == 0, f"exit status {status}")
att = json.loads((work / "attest.json").read_text())
check(att["format"] == 1 and all(p.get("digest") for p in att["paths"]), f"shim attested {[(p['path'], (p.get('digest') or '')[:19]) for p in att['paths']]}")
hello = ws / "hello.txt"
check(hello.is_file() and hello.read_text() == "hello through the relay\n", "the harness wrote /workspace/hello.txt")
ledger = [json.loads(l) for l in (work / "ledger.jsonl").read_text().splitlines()]
agent = [[c["usage"]["prompt_tokens"], c["usage"]["completion_tokens"]] for c in ledger if c["kind"] != "title"]
if harness == "mini-swe-agent":
    traj = json.loads((ws / ".mini/trajectory.json").read_text())
    own = [[m["extra"]["response"]["usage"]["prompt_tokens"], m["extra"]["response"]["usage"]["completion_tokens"]]
           for m in traj["messages"] if m.get("role") == "assistant"]
else:
    own = []
    for f in sorted((ws / ".smoke").rglob("session.jsonl*")):
        data = f.read_bytes()
        if f.suffix == ".zstd":
            data = subprocess.run(["zstd", "-dc"], input=data, capture_output=True, check=True).stdout
        for line in data.decode().splitlines():
            rec = json.loads(line)
            chunk = rec.get("data", {}).get("chunk", {}) if rec.get("type") == "assistant/chunk" else {}
            if chunk.get("type") == "usage":
                own.append([chunk["usage"]["inputTokens"], chunk["usage"]["outputTokens"]])
check(own == agent and len(own) >= 2, f"harness's own usage per call {own} == upstream ledger {agent}")
for c in ledger:
    print(f"wire {c['call']} {c['kind']}: {c['path']} ua={c['headers'].get('user-agent', '')[:40]!r} tools={len(c['tools'])} request={json.dumps(c['request'], sort_keys=True)}")
sys.exit(0 if ok else 1)
PY
