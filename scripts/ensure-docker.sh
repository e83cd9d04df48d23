#!/usr/bin/env bash
# Makes sure a Docker engine answers. When none does and we are root, installs Debian's docker.io
# (and busybox-static, which the project's images are built from, and e2fsprogs, whose mkfs.ext4
# makes each attempt's own filesystem) and starts dockerd in the background. Otherwise fails saying exactly what to do.
set -euo pipefail

say() { printf 'ensure-docker: %s\n' "$*" >&2; }

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
[ -x /bin/busybox ] && file_is_static=$(ldd /bin/busybox 2>&1 | grep -c 'not a dynamic' || true) || file_is_static=0
[ "${file_is_static:-0}" -ge 1 ] || need_pkgs+=(busybox-static)
PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.ext4 >/dev/null 2>&1 || need_pkgs+=(e2fsprogs)

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

if engine_answers; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  say "no Docker engine answers and I am not root: start it (sudo dockerd &) or set DOCKER_HOST"
  exit 1
fi

say "no Docker engine answers; starting dockerd in the background (log: /tmp/eval-dockerd.log)"
nohup dockerd >/tmp/eval-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if engine_answers; then
    say "Docker engine $(docker version --format '{{.Server.Version}}') is up"
    exit 0
  fi
  sleep 1
done
say "dockerd did not answer within 60 s; see /tmp/eval-dockerd.log"
exit 1
