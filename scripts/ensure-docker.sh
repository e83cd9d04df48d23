#!/usr/bin/env bash
# Makes sure a Docker engine answers and has gVisor. When none does and we are root, installs
# Debian's docker.io (and busybox-static, which the project's images are built from, e2fsprogs,
# whose mkfs.ext4 makes each attempt's own filesystem, and runsc, gVisor's runtime) and starts
# dockerd in the background. Otherwise fails saying exactly what to do.
#
# gVisor: eval's own runtime, `eval-runsc`, is registered in /etc/docker/daemon.json's `runtimes`
# (only that entry is written; the default runtime and every other entry, a `runsc` of the
# machine's included, stay as they are: other gVisor users of the engine keep theirs) with the
# arguments the policy's containers need (--network=none: they have no network, and runsc refuses
# a netns it would have to set up; --host-uds=open: the shim reaches the attempt's socket, mounted
# from the host). A running dockerd reloads `runtimes` on SIGHUP, so registering never restarts
# the engine or stops a running container; run twice, the second run changes nothing.
#
# `ensure-docker.sh --write-entry FILE` only writes eval's entry into the daemon.json FILE (the
# same edit, for a test) and touches nothing else.
set -euo pipefail

say() { printf 'ensure-docker: %s\n' "$*" >&2; }

# The engine runtime name eval's gVisor containers ask for (runtimes/src/policy.rs GVISOR_RUNTIME).
RUNTIME_NAME=eval-runsc
RUNSC=/usr/bin/runsc
RUNSC_ENTRY='{"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--host-uds=open"]}'
DAEMON_JSON=/etc/docker/daemon.json

# Writes eval's runtime entry into daemon.json ($1), keeping every other setting and runtime as
# it is. A file that already holds exactly this entry is left untouched.
register_runtime() {
  local file=$1
  mkdir -p "${file%/*}"
  if [ ! -s "$file" ]; then
    printf '{\n  "runtimes": {\n    "%s": %s\n  }\n}\n' "$RUNTIME_NAME" "$RUNSC_ENTRY" > "$file.eval-tmp"
  elif command -v python3 >/dev/null 2>&1; then
    # Exits 3 when the entry is there already: nothing to write.
    python3 - "$file" "$RUNTIME_NAME" "$RUNSC_ENTRY" > "$file.eval-tmp" <<'PY' || return $?
import json, sys
with open(sys.argv[1]) as f:
    config = json.load(f)
want = json.loads(sys.argv[3])
if config.get("runtimes", {}).get(sys.argv[2]) == want:
    sys.exit(3)
config.setdefault("runtimes", {})[sys.argv[2]] = want
print(json.dumps(config, indent=2))
PY
  else
    say "$file exists and python3 is missing: add \"runtimes\": {\"$RUNTIME_NAME\": $RUNSC_ENTRY} by hand"
    return 1
  fi
  mv -f "$file.eval-tmp" "$file"
}

if [ "${1:-}" = --write-entry ]; then
  [ -n "${2:-}" ] || { say "--write-entry needs a file"; exit 2; }
  register_runtime "$2" || { rc=$?; rm -f "$2.eval-tmp"; [ "$rc" -eq 3 ] && exit 0; exit 1; }
  exit 0
fi

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
[ -x /bin/busybox ] && file_is_static=$(ldd /bin/busybox 2>&1 | grep -c 'not a dynamic' || true) || file_is_static=0
[ "${file_is_static:-0}" -ge 1 ] || need_pkgs+=(busybox-static)
PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.ext4 >/dev/null 2>&1 || need_pkgs+=(e2fsprogs)
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

# The engine lists eval's runtime at our path with both arguments (`docker info`).
runtime_registered() {
  local entry
  entry=$(docker info --format "{{json (index .Runtimes \"$RUNTIME_NAME\")}}" 2>/dev/null) || return 1
  case $entry in *'"path":"/usr/bin/runsc"'*) ;; *) return 1 ;; esac
  case $entry in *'"--network=none"'*) ;; *) return 1 ;; esac
  case $entry in *'"--host-uds=open"'*) ;; *) return 1 ;; esac
}
# daemon.json gets eval's entry; "already there" (3) is success.
register() {
  register_runtime "$DAEMON_JSON" && return 0
  local rc=$?
  rm -f "$DAEMON_JSON.eval-tmp"
  [ "$rc" -eq 3 ]
}

if ! engine_answers; then
  if [ "$(id -u)" -ne 0 ]; then
    say "no Docker engine answers and I am not root: start it (sudo dockerd &) or set DOCKER_HOST"
    exit 1
  fi
  # Registered before the start, so the engine comes up with it.
  register || exit 1
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

runtime_registered && exit 0
if [ "$(id -u)" -ne 0 ]; then
  say "the Docker engine has no $RUNTIME_NAME runtime registered as $RUNSC_ENTRY (the gVisor tests need it); run this script as root"
  exit 1
fi
register || exit 1
# SIGHUP makes dockerd re-read daemon.json's runtimes: no restart, running containers keep running.
pid=$(cat /var/run/docker.pid 2>/dev/null || pidof dockerd || true)
case $pid in
  '' | *[!0-9]*)
    say "$RUNTIME_NAME is in $DAEMON_JSON but no single dockerd pid was found (/var/run/docker.pid) to reload it; send dockerd SIGHUP"
    exit 1
    ;;
esac
say "registering $RUNTIME_NAME with the running dockerd (pid $pid) by SIGHUP (no restart)"
kill -HUP "$pid"
for _ in $(seq 1 30); do
  runtime_registered && exit 0
  sleep 1
done
say "dockerd did not pick up $RUNTIME_NAME from $DAEMON_JSON within 30 s (a conflicting dockerd flag? see its log)"
exit 1
