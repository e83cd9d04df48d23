#!/usr/bin/env bash
# Builds eval-base/dsh-poly:<digest16>: the DeepSeek Harness base (dsh/build.sh's image, its one
# layer unpacked as it is) plus every toolchain v0.4's ICAE and EvoCode tasks build with, so an arm
# keeps one runtime (runtimes/dsh/poly.toml) whatever its tasks' languages:
#
#   Go 1.22        `golang-1.22-go` from bookworm-backports (bookworm's own Go is 1.19);
#                  `go`/`gofmt` in /usr/bin
#   Python 3.11    bookworm's `python3`
#   Node 22.23.3   the Harness's own Node (/opt/node, `node` on PATH): JavaScript runs on it
#   TypeScript     npm `typescript@5.9.3` at /opt/typescript, `tsc` in /usr/local/bin (run by that
#                  Node), with Node's declarations `@types/node@22.20.7` (and its one dependency
#                  `undici-types@6.21.0`) in /node_modules, where tsc finds them from any project
#                  under / without a tsconfig `typeRoots`
#
# Every npm package is pinned by version and sha512 integrity; the Debian packages come from the
# machine's mirror (versions recorded in /etc/eval-base-packages.txt). `/etc/eval-toolchains.txt`
# records what each toolchain answers to its version command. `/var/cache/agent` and
# `/var/cache/grader` (1777) are where a runtime's `tmpfs_exec` goes (Go's test binaries and build
# cache), as an agent's or a grader's. No ENV, user 65532. Prints the image id as the last line of
# stdout; a rerun with unchanged inputs (the same dsh base id among them) prints the recorded id.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BUILD_NAME=dsh-poly
# shellcheck source=../lib.sh
. "$here/../lib.sh"

GO_SUITE="$DEBIAN_SUITE-backports"
GO_PACKAGE=golang-1.22-go
GO_ROOT=/usr/lib/go-1.22
PYTHON_PACKAGE=python3
TS_SPEC=typescript@5.9.3
TS_INTEGRITY=sha512-jl1vZzPDinLr9eUt3J/t7V6FgNEw9QjvBPdysz9KfQDD41fQrC2Y4vKQdiaUpFT4bXlb1RHhLpp8wtm6M5TgSw==
TYPES_NODE_SPEC=@types/node@22.20.7
TYPES_NODE_INTEGRITY=sha512-F/Mcc4pD3YwXQCG50hb8BjB5RmrOere6hge7n2XHf0V8tpkZOVEjwYv9Ql7n0MpMn8Bv7+q12P9w6UHsBm0Sfw==
UNDICI_TYPES_SPEC=undici-types@6.21.0
UNDICI_TYPES_INTEGRITY=sha512-iwDZqg0QAGrg9Rav5H4n0M64c3mkR59cJ6wQp+7C4nI0gsmExaedaYLNO44eT4AtBBwjbTiGPMlt2Md0T9H9JQ==

mirror=$(debian_mirror)
# The Harness base, built or reused by its own script under the lock scripts/ensure-harness-images.sh
# takes for it (two builds of it must not share build/dsh). Its id is a pin: a rebuilt dsh base
# (a new id: imports are not reproducible) makes a new image.
mkdir -p "$EVAL_IMAGES_WORK/locks"
base=$(flock "$EVAL_IMAGES_WORK/locks/dsh.lock" "$here/../dsh/build.sh" | tail -n 1) ||
  die "the dsh base (dsh/build.sh) failed"
[[ $base =~ ^sha256:[0-9a-f]{64}$ ]] || die "dsh/build.sh printed '$base', not an image id"
digest=$(inputs_digest "$0" -- "suite=$DEBIAN_SUITE" "mirror=$mirror" "base=$base" \
  "go=$GO_SUITE $GO_PACKAGE" "python=$DEBIAN_SUITE $PYTHON_PACKAGE" \
  "typescript=$TS_SPEC $TS_INTEGRITY" "types-node=$TYPES_NODE_SPEC $TYPES_NODE_INTEGRITY" \
  "undici-types=$UNDICI_TYPES_SPEC $UNDICI_TYPES_INTEGRITY" "user=$AGENT_UID:$AGENT_GID")
tag=$(image_tag "$BUILD_NAME" "$digest")
if id=$(cached_image_id "$BUILD_NAME" "$digest"); then
  log "cached: $id, recorded as built from inputs $digest"
  printf '%s\n' "$id"
  exit 0
fi
need_root
start=$(date +%s)

# npm_tarball SPEC INTEGRITY: as in dsh/build.sh (same cache); kept per script because lib.sh is
# an input of every base's digest. A scoped name (@types/node) packs as types-node-<version>.tgz.
npm_tarball() {
  local spec=$1 integrity=$2 cache="$EVAL_IMAGES_WORK/cache/npm" file got name
  name=${spec%@*}
  name=${name#@}
  file="$cache/${name//\//-}-${spec##*@}.tgz"
  mkdir -p "$cache"
  if [ ! -f "$file" ]; then
    log "npm pack $spec"
    (cd "$cache" && heavy npm pack --silent "$spec" >/dev/null) || die "npm pack $spec failed"
    [ -f "$file" ] || die "npm pack $spec left no $file"
  fi
  got="sha512-$(openssl dgst -sha512 -binary "$file" | base64 -w0)"
  [ "$got" = "$integrity" ] || die "$file: integrity $got, pinned $integrity"
  printf '%s\n' "$file"
}

# unpack_base ID DIR: as in lang/build.sh: the image's single layer (docker import makes exactly
# one), extracted as root with its owners and modes, plus the device nodes apt and go need.
unpack_base() {
  local id=$1 dir=$2 save layer node
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
  for node in "null 1 3" "zero 1 5" "random 1 8" "urandom 1 9"; do
    # shellcheck disable=SC2086 # name, major, minor
    set -- $node
    [ -c "$dir/dev/$1" ] || { rm -f "$dir/dev/$1"; mknod -m 0666 "$dir/dev/$1" c "$2" "$3"; }
  done
}

ts_tgz=$(npm_tarball "$TS_SPEC" "$TS_INTEGRITY")
types_node_tgz=$(npm_tarball "$TYPES_NODE_SPEC" "$TYPES_NODE_INTEGRITY")
undici_types_tgz=$(npm_tarball "$UNDICI_TYPES_SPEC" "$UNDICI_TYPES_INTEGRITY")
dir=$(new_build_dir "$BUILD_NAME")
trap 'cleanup_build_dir "$dir"; rm -rf "$EVAL_IMAGES_WORK/build/$BUILD_NAME.save"' EXIT
unpack_base "$base" "$dir"
[ -f "$dir/opt/dsh/node_modules/@deepseek-ai/dsh/lib/bin.js" ] || die "the base $base has no /opt/dsh"

# Go and Python in one apt call; backports only for Go (apt prefers the main suite otherwise).
printf 'deb %s %s main\n' "$mirror" "$GO_SUITE" > "$dir/etc/apt/sources.list.d/backports.list"
log "apt: $GO_PACKAGE from $GO_SUITE, $PYTHON_PACKAGE ($DEBIAN_SUITE)"
chroot_apt "$dir" "$GO_PACKAGE/$GO_SUITE" "$PYTHON_PACKAGE" || die "apt-get install in the chroot failed"
rm -f "$dir/etc/apt/sources.list.d/backports.list"
[ -x "$dir$GO_ROOT/bin/go" ] || die "no $GO_ROOT/bin/go after installing $GO_PACKAGE"
# /usr/bin, not /usr/local/bin: a runtime may mount a writable tmpfs there for build outputs.
ln -sf "$GO_ROOT/bin/go" "$dir/usr/bin/go"
ln -sf "$GO_ROOT/bin/gofmt" "$dir/usr/bin/gofmt"

# TypeScript: the package as published (lib/ holds tsc.js and the lib.*.d.ts it needs), run by
# the Harness's Node; @types/node where tsc's automatic type inclusion finds it from /workspace.
mkdir -p "$dir/opt/typescript" "$dir/node_modules/@types/node" "$dir/node_modules/undici-types"
tar -xzf "$ts_tgz" -C "$dir/opt/typescript" --strip-components=1 --no-same-owner
tar -xzf "$types_node_tgz" -C "$dir/node_modules/@types/node" --strip-components=1 --no-same-owner
tar -xzf "$undici_types_tgz" -C "$dir/node_modules/undici-types" --strip-components=1 --no-same-owner
chmod -R u=rwX,go=rX "$dir/opt/typescript" "$dir/node_modules"
printf '#!/bin/sh\nexec /opt/node/bin/node /opt/typescript/bin/tsc "$@"\n' > "$dir/usr/local/bin/tsc"
chmod 0755 "$dir/usr/local/bin/tsc"

# Every toolchain runs in the tree (an apt failure inside chroot_apt does not stop the script);
# what each answers is recorded in the image. /proc, because go finds its GOROOT from
# /proc/self/exe.
chroot_mounts "$dir"
versions=
for probe in "go version" "python3 --version" "node --version" "tsc --version"; do
  # shellcheck disable=SC2086 # the probe's words
  out=$(chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp GOTOOLCHAIN=local \
    $probe 2>&1) || die "$probe does not run in the tree: $out"
  log "toolchain: $probe -> $out"
  versions+="$probe: $out"$'\n'
done
chroot_unmount_all
printf '%s' "$versions" > "$dir/etc/eval-toolchains.txt"

mkdir -p "$dir/var/cache/agent" "$dir/var/cache/grader"
chmod 1777 "$dir/var/cache/agent" "$dir/var/cache/grader"
add_agent_user "$dir"
finish_tree "$dir"
rm -f "$dir/.dockerenv"

id=$(import_dir "$dir" "$tag" \
  --change "USER $AGENT_UID:$AGENT_GID" \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["dsh", "--help"]' | tail -n 1)
record_build "$BUILD_NAME" "$digest" "$id"
cleanup_build_dir "$dir"
trap - EXIT
log "built $tag in $(($(date +%s) - start)) s, $(image_size_mb "$tag") MB (inputs $digest)"
printf '%s\n' "$id"
