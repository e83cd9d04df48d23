#!/usr/bin/env bash
# Makes sure a Docker engine answers and has gVisor. When none does and we are root, installs
# Debian's docker.io (and busybox-static, which the project's images are built from, e2fsprogs,
# whose mkfs.ext4 makes each attempt's own filesystem, and runsc, gVisor's runtime) and starts
# dockerd in the background. Otherwise fails saying exactly what to do.
#
# gVisor: `runsc` is registered in /etc/docker/daemon.json's `runtimes` (only that entry is
# written; the default runtime stays the engine's) with the arguments the policy's containers need
# (--network=none: they have no network, and runsc refuses a netns it would have to set up;
# --host-uds=open: the shim reaches the attempt's socket, mounted from the host). A running
# dockerd reloads `runtimes` on SIGHUP, so registering never restarts the engine or stops a
# running container.
set -euo pipefail

say() { printf 'ensure-docker: %s\n' "$*" >&2; }

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
[ -x /bin/busybox ] && file_is_static=$(ldd /bin/busybox 2>&1 | grep -c 'not a dynamic' || true) || file_is_static=0
[ "${file_is_static:-0}" -ge 1 ] || need_pkgs+=(busybox-static)
PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.ext4 >/dev/null 2>&1 || need_pkgs+=(e2fsprogs)
RUNSC=/usr/bin/runsc
[ -x "$RUNSC" ] || need_pkgs+=(runsc)

if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "missing ${need_pkgs[*]}; run as root, or: sudo apt-get install -y ${need_pkgs[*]}"
    exit 1
  fi
  say "installing ${need_pkgs[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

DAEMON_JSON=/etc/docker/daemon.json
RUNSC_ENTRY='{"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--host-uds=open"]}'
# The engine lists runsc at our path with both arguments (`docker info`).
runsc_registered() {
  local entry
  entry=$(docker info --format '{{json .Runtimes.runsc}}' 2>/dev/null) || return 1
  case $entry in *'"path":"/usr/bin/runsc"'*) ;; *) return 1 ;; esac
  case $entry in *'"--network=none"'*) ;; *) return 1 ;; esac
  case $entry in *'"--host-uds=open"'*) ;; *) return 1 ;; esac
}
# Writes our runsc entry into daemon.json, keeping every other setting and runtime as it is.
register_runsc() {
  mkdir -p "${DAEMON_JSON%/*}"
  if [ ! -s "$DAEMON_JSON" ]; then
    printf '{\n  "runtimes": {\n    "runsc": %s\n  }\n}\n' "$RUNSC_ENTRY" > "$DAEMON_JSON.eval-tmp"
  elif command -v python3 >/dev/null 2>&1; then
    python3 - "$DAEMON_JSON" "$RUNSC_ENTRY" > "$DAEMON_JSON.eval-tmp" <<'PY' || return 1
import json, sys
with open(sys.argv[1]) as f:
    config = json.load(f)
config.setdefault("runtimes", {})["runsc"] = json.loads(sys.argv[2])
print(json.dumps(config, indent=2))
PY
  else
    say "$DAEMON_JSON exists and python3 is missing: add \"runtimes\": {\"runsc\": $RUNSC_ENTRY} by hand"
    return 1
  fi
  mv -f "$DAEMON_JSON.eval-tmp" "$DAEMON_JSON"
}

if ! engine_answers; then
  if [ "$(id -u)" -ne 0 ]; then
    say "no Docker engine answers and I am not root: start it (sudo dockerd &) or set DOCKER_HOST"
    exit 1
  fi
  # Registered before the start, so the engine comes up with it.
  register_runsc || exit 1
  say "no Docker engine answers; starting dockerd in the background (log: /tmp/eval-dockerd.log)"
  nohup dockerd >/tmp/eval-dockerd.log 2>&1 &
  up=
  for _ in $(seq 1 60); do
    if engine_answers; then
      up=1
      break
    fi
    sleep 1
  done
  if [ -z "$up" ]; then
    say "dockerd did not answer within 60 s; see /tmp/eval-dockerd.log"
    exit 1
  fi
  say "Docker engine $(docker version --format '{{.Server.Version}}') is up"
fi

runsc_registered && exit 0
if [ "$(id -u)" -ne 0 ]; then
  say "the Docker engine has no runsc runtime registered as $RUNSC_ENTRY (the gVisor tests need it); run this script as root"
  exit 1
fi
register_runsc || exit 1
# SIGHUP makes dockerd re-read daemon.json's runtimes: no restart, running containers keep running.
pid=$(cat /var/run/docker.pid 2>/dev/null || pidof dockerd || true)
case $pid in
  '' | *[!0-9]*)
    say "runsc is in $DAEMON_JSON but no single dockerd pid was found (/var/run/docker.pid) to reload it; send dockerd SIGHUP"
    exit 1
    ;;
esac
say "registering runsc with the running dockerd (pid $pid) by SIGHUP (no restart)"
kill -HUP "$pid"
for _ in $(seq 1 30); do
  runsc_registered && exit 0
  sleep 1
done
say "dockerd did not pick up runsc from $DAEMON_JSON within 30 s (a conflicting dockerd flag? see its log)"
exit 1
