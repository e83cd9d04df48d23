#!/usr/bin/env bash
# Smoke test of an eval-base/mini-swe-agent image (default: the one build.sh builds or has cached):
# 1. `mini --help` in a network-less, read-only container;
# 2. a headless task under eval's agent-container policy (read-only root, tmpfs /tmp and HOME,
#    cap-drop ALL, no-new-privileges, uid 65532, network none) against a scripted OpenAI-compatible
#    upstream that runs inside the same container on 127.0.0.1 (smoke/upstream.py), then checks
#    the file the task wrote, the trajectory's exit status, and that the trajectory's per-call
#    usage equals the upstream's own ledger, call for call.
# Exit 0 when every check holds, 1 otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image=${1:-$("$here/build.sh" | tail -n 1)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/workspace" "$work/task"
chown 65532:65532 "$work/workspace"
printf 'Create /workspace/hello.txt containing the line "hello from mini-swe-agent", check it, then submit.\n' \
  > "$work/task/prompt.md"

echo "== mini --help (network none, read-only root)"
docker run --rm --network none --read-only --tmpfs /home/agent:rw,nosuid,nodev,size=16m \
  "$image" mini --help > "$work/help.log" 2>&1 || { cat "$work/help.log"; exit 1; }
grep -E 'version|Usage|--task|--yolo|--model |--output|--exit-immediately' "$work/help.log"

echo "== headless task under eval's container policy"
start=$(date +%s.%N)
set +e
docker run --rm --network none --read-only --cap-drop ALL --security-opt no-new-privileges \
  --ipc private --user 65532:65532 --memory 512m --memory-swap 512m --cpus 1 --pids-limit 64 \
  --tmpfs /tmp:rw,nosuid,nodev,size=16m --tmpfs /home/agent:rw,nosuid,nodev,size=16m \
  -v "$work/workspace:/workspace" -v "$work/task/prompt.md:/task/prompt.md:ro" \
  -v "$here/smoke:/smoke:ro" \
  -e OPENAI_API_BASE=http://127.0.0.1:8080/v1 -e OPENAI_API_KEY=placeholder-not-a-key \
  -e MSWEA_CONFIGURED=true -e MSWEA_COST_TRACKING=ignore_errors \
  -e LITELLM_LOCAL_MODEL_COST_MAP=True \
  "$image" sh -c '
    python3 /smoke/upstream.py 8080 /workspace/.upstream.jsonl &
    # Wait for the listener (bounded by attempts, not by a guess about speed).
    i=0; until python3 -c "import socket; socket.create_connection((\"127.0.0.1\", 8080)).close()" 2>/dev/null; do
      i=$((i + 1)); [ "$i" -lt 500 ] || { echo "upstream never listened" >&2; exit 99; }
    done
    exec mini -y --exit-immediately -m openai/scripted -t "$(cat /task/prompt.md)" \
      -o /workspace/.mini/trajectory.json' > "$work/out.log" 2>&1
status=$?
set -e
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
echo "exit $status after ${elapsed} s (container create to exit)"
tail -n 5 "$work/out.log"
python3 - "$work/workspace" <<'PY'
import json, sys, pathlib
ws = pathlib.Path(sys.argv[1])
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)
hello = ws / "hello.txt"
check(hello.is_file() and hello.read_text() == "hello from mini-swe-agent\n", "task wrote /workspace/hello.txt")
traj = json.loads((ws / ".mini/trajectory.json").read_text())
ledger = [json.loads(l) for l in (ws / ".upstream.jsonl").read_text().splitlines()]
check(traj["info"]["exit_status"] == "Submitted", f"trajectory exit_status = {traj['info']['exit_status']}")
usages = [m["extra"]["response"]["usage"] for m in traj["messages"] if m.get("role") == "assistant"]
check(traj["info"]["model_stats"]["api_calls"] == len(ledger) == len(usages),
      f"calls: trajectory {traj['info']['model_stats']['api_calls']}, assistant messages {len(usages)}, upstream {len(ledger)}")
for key in ("prompt_tokens", "completion_tokens"):
    t = [u[key] for u in usages]; u = [c["usage"][key] for c in ledger]
    check(t == u, f"{key} per call: trajectory {t}, upstream {u}")
first = ledger[0]
print("wire: path", first["path"], "| user-agent", first["headers"].get("user-agent"),
      "| request keys", sorted(first["request"]), "| stream", first["request"].get("stream", "(absent)"),
      "| tools", [t["function"]["name"] for t in first["request"].get("tools", [])])
sys.exit(0 if ok else 1)
PY
