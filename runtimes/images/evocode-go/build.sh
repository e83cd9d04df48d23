#!/usr/bin/env bash
# Builds eval-base/evocode-go:<inputs digest prefix>: the grader base of imported EvoCode-Bench
# tasks (`eval import v04-evocode`, runtimes/v04-evocode-grader/runtime.toml in the user's project),
# what their environment/Dockerfile (FROM golang:…) is translated onto:
#   Debian bookworm minbase from the machine's Debian mirror
#   + APT_PACKAGES below (bookworm): the packages a translated Dockerfile's `apt-get install` may
#     name (controller/import/src/evocode.rs `BASE_PACKAGES` lists the same, with what
#     minbase brings)
#   + Go 1.22 (apt `golang-1.22-go` from bookworm-backports: V04-SUITES.md's toolchain; bookworm
#     has 1.19)
#   + `go`, `gofmt` in /usr/bin (not /usr/local/bin: the grader mounts a tmpfs there, where the
#     tasks' tests build their binaries), user 65532, no ENV (eval checks the environment exactly;
#     the round's grade.sh sets Go's variables itself).
# Prints the image id as the last line of stdout; a rerun with unchanged inputs prints the cached id.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BUILD_NAME=evocode-go
# shellcheck source=../lib.sh
. "$here/../lib.sh"

APT_PACKAGES="ca-certificates curl git jq make procps python3 xz-utils"
GO_SUITE="$DEBIAN_SUITE-backports"
GO_PACKAGE=golang-1.22-go
GO_ROOT=/usr/lib/go-1.22

mirror=$(debian_mirror)
digest=$(inputs_digest "$0" -- "suite=$DEBIAN_SUITE" "mirror=$mirror" "apt=$APT_PACKAGES" \
  "go=$GO_SUITE $GO_PACKAGE" "user=$AGENT_UID:$AGENT_GID")
tag=$(image_tag "$BUILD_NAME" "$digest")
if id=$(cached_image_id "$BUILD_NAME" "$digest"); then
  log "cached: $id, recorded as built from inputs $digest"
  printf '%s\n' "$id"
  exit 0
fi
need_root
start=$(date +%s)

dir=$(new_build_dir "$BUILD_NAME")
trap 'cleanup_build_dir "$dir"' EXIT
debootstrap_minbase "$dir"

# Backports only for Go: apt prefers the main suite for everything else.
printf 'deb %s %s main\n' "$mirror" "$GO_SUITE" > "$dir/etc/apt/sources.list.d/backports.list"
log "apt: $APT_PACKAGES, $GO_PACKAGE from $GO_SUITE"
# shellcheck disable=SC2086
chroot_apt "$dir" $APT_PACKAGES "$GO_PACKAGE/$GO_SUITE" || die "apt-get install in the chroot failed"
rm -f "$dir/etc/apt/sources.list.d/backports.list"
[ -x "$dir$GO_ROOT/bin/go" ] || die "no $GO_ROOT/bin/go after installing $GO_PACKAGE"
ln -sf "$GO_ROOT/bin/go" "$dir/usr/bin/go"
ln -sf "$GO_ROOT/bin/gofmt" "$dir/usr/bin/gofmt"
# The go tool writes to /dev/null; minbase has no device nodes (and the import drops /dev/*).
[ -c "$dir/dev/null" ] || { rm -f "$dir/dev/null"; mknod -m 0666 "$dir/dev/null" c 1 3; }

# The grader's writable, executable paths (runtimes/v04-evocode-grader/runtime.toml `tmpfs_exec`)
# exist in the image so that eval's tmpfs mounts land on directories: /app, /tests, /logs, and
# /var/cache/grader (1777 like /home/agent, see lib.sh); /usr/local/bin is Debian's own.
mkdir -p "$dir/app" "$dir/tests" "$dir/logs" "$dir/var/cache/grader"
chmod 1777 "$dir/app" "$dir/tests" "$dir/logs" "$dir/var/cache/grader"
add_agent_user "$dir"
finish_tree "$dir"

id=$(import_dir "$dir" "$tag" \
  --change "USER $AGENT_UID:$AGENT_GID" \
  --change 'WORKDIR /app' \
  --change 'CMD ["go", "version"]' | tail -n 1)
cleanup_build_dir "$dir"
trap - EXIT
record_build "$BUILD_NAME" "$digest" "$id"
log "built $tag in $(($(date +%s) - start)) s, $(image_size_mb "$tag") MB (inputs $digest)"
printf '%s\n' "$id"
