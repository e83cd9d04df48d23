#!/usr/bin/env bash
# The proxy beside its peers, in one run: the same load (proxy/benches/proxy.rs, peers mode)
# against the scripted upstream directly, through `eval proxy`, through LiteLLM's proxy and
# through Portkey's gateway, all over loopback; prints one table of medians, p99s, added
# latency and ratios to direct.
#
# The peers are installed into a scratch directory, never into the repository:
#   LiteLLM    PyPI `litellm[proxy]` into a venv
#   Portkey    npm `@portkey-ai/gateway` (its Node build, started with --headless)
# A kind of call a peer cannot serve is named on stderr and left out of its column (Portkey's
# gateway under Node 20 answers streamed calls 500: see the README's benchmark notes).
# Set EVAL_BENCH_PEERS_DIR to reuse an earlier install (default: a fresh mktemp directory).
# Needs python3 (with venv), node/npm and cargo; registries are reached only while installing.
#
# Loopback only: when unprivileged user namespaces are available (`unshare -rn`), the
# measurement runs in a network namespace that has nothing but `lo`, so no peer can reach
# anything else (Portkey's Node server binds every interface and has no host option; LiteLLM
# is told 127.0.0.1). Telemetry: LiteLLM's is disabled (LITELLM_TELEMETRY_DISABLED=true, and the
# remote model-cost map is not fetched: LITELLM_LOCAL_MODEL_COST_MAP=True); Portkey's open-source
# gateway has none, and --headless turns off its UI and log stream.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

dir=${EVAL_BENCH_PEERS_DIR:-}
if [[ -z $dir ]]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/eval-bench-peers.XXXXXX")
fi
mkdir -p "$dir"
echo "bench-peers: scratch directory $dir" >&2

if [[ ! -x $dir/venv/bin/litellm ]]; then
  echo "bench-peers: installing litellm[proxy] from PyPI" >&2
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q "litellm[proxy]" >"$dir/pip.log" 2>&1 ||
    { tail -20 "$dir/pip.log" >&2; exit 1; }
fi
portkey_js=$dir/npm/node_modules/@portkey-ai/gateway/build/start-server.js
if [[ ! -f $portkey_js ]]; then
  echo "bench-peers: installing @portkey-ai/gateway from npm" >&2
  mkdir -p "$dir/npm"
  (cd "$dir/npm" && [[ -f package.json ]] || npm init -y >/dev/null) &&
    (cd "$dir/npm" && npm install --no-audit --no-fund @portkey-ai/gateway >"$dir/npm.log" 2>&1) ||
    { tail -20 "$dir/npm.log" >&2; exit 1; }
fi
litellm_version=$("$dir/venv/bin/pip" show litellm 2>/dev/null | sed -n 's/^Version: //p')
portkey_version=$(node -p "require('$dir/npm/node_modules/@portkey-ai/gateway/package.json').version")

echo "bench-peers: building the benchmark" >&2
cargo bench -p eval-proxy --bench proxy --no-run >&2

# Everything below runs inside the loopback-only namespace when one can be made.
cat >"$dir/measure.sh" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
dir=$1 repo=$2 portkey_js=$3
ip link set lo up 2>/dev/null || true
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
up_port=$(free_port) litellm_port=$(free_port) portkey_port=$(free_port)
key=sk-bench-peers-0123456789abcdef
# LiteLLM refuses to start without a master key; a fresh one per run, used only here.
master=sk-$(python3 -c 'import secrets; print(secrets.token_hex(24))')
cat >"$dir/litellm.yaml" <<YAML
model_list:
  - model_name: bench-model
    litellm_params:
      model: openai/bench-model
      api_base: http://127.0.0.1:$up_port/v1
      api_key: $key
litellm_settings:
  telemetry: false
  drop_params: true
YAML
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
(cd "$dir" && LITELLM_MASTER_KEY=$master LITELLM_TELEMETRY_DISABLED=true LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR \
  exec "$dir/venv/bin/litellm" --config "$dir/litellm.yaml" --host 127.0.0.1 \
  --port "$litellm_port" --num_workers 1 >"$dir/litellm.log" 2>&1) &
pids+=($!)
(cd "$dir" && NODE_ENV=production exec node "$portkey_js" --port="$portkey_port" --headless \
  >"$dir/portkey.log" 2>&1) &
pids+=($!)
wait_http() {
  for _ in $(seq 1 240); do
    if python3 - "$1" <<'PY' 2>/dev/null; then return 0; fi
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2).read()
PY
    sleep 0.5
  done
  echo "bench-peers: $2 did not come up; its log:" >&2
  tail -30 "$dir/$2.log" >&2
  return 1
}
wait_http "http://127.0.0.1:$litellm_port/health/liveliness" litellm
wait_http "http://127.0.0.1:$portkey_port/" portkey
peers="litellm=http://127.0.0.1:$litellm_port/v1/chat/completions|authorization:Bearer $master"
peers+=";portkey=http://127.0.0.1:$portkey_port/v1/chat/completions|x-portkey-provider:openai"
peers+="|x-portkey-custom-host:http://127.0.0.1:$up_port/v1|authorization:Bearer $key"
cd "$repo"
EVAL_PROXY_BENCH_UPSTREAM_PORT=$up_port EVAL_PROXY_BENCH_PEERS=$peers \
  cargo bench --offline -p eval-proxy --bench proxy
EOF
chmod +x "$dir/measure.sh"
echo "bench-peers: litellm $litellm_version, @portkey-ai/gateway $portkey_version" >&2
if unshare -rn true 2>/dev/null; then
  echo "bench-peers: measuring in a loopback-only network namespace" >&2
  unshare -rn "$dir/measure.sh" "$dir" "$repo" "$portkey_js"
else
  echo "bench-peers: no user namespaces here; measuring on the host's loopback" >&2
  "$dir/measure.sh" "$dir" "$repo" "$portkey_js"
fi
echo
echo "peers: litellm $litellm_version (1 worker), @portkey-ai/gateway $portkey_version (Node $(node --version))"
