# shellcheck shell=bash
# Shared helpers for the base-image builds under runtimes/images/. Sourced, never executed.
#
# Every build follows one shape: compute the digest of its pinned inputs, return the image this
# machine recorded building from exactly those inputs (`cached_image_id`; never the tag, which any
# `docker load` can move), otherwise debootstrap a Debian minbase chroot, install into it,
# `docker import` it as `eval-base/<name>:<digest prefix>` and record its id (`record_build`).
# The image id is printed as the last line of stdout; everything else goes to stderr so callers
# can capture the id with `| tail -n 1`.
#
# No registry host is named here: the Debian mirror is read from the machine's apt sources, and
# PyPI / npm are reached through their ordinary clients with the machine's configuration.

set -euo pipefail

IMAGES_LIB=$(readlink -f "${BASH_SOURCE[0]}")
# Debian release of every base; part of each inputs digest.
DEBIAN_SUITE=bookworm
# Build directories and download caches (wheels, npm tarballs, debootstrap .debs) live outside
# the repository; only the chroot of the build in progress is large, and it is removed after import.
EVAL_IMAGES_WORK=${EVAL_IMAGES_WORK:-/var/tmp/eval-images}
# The non-root identity every harness runs as (eval's default runtime user).
AGENT_UID=65532
AGENT_GID=65532

log() { printf '%s: %s\n' "${BUILD_NAME:-images}" "$*" >&2; }
die() {
  log "error: $*"
  exit 2
}

# Heavy steps yield to the compilers that share the machine.
heavy() { nice -n 19 ionice -c3 "$@"; }

need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot and a root-owned tree need it)"
}

# inputs_digest SCRIPT [PIN_FILE...] [-- KEY=VALUE...]
# sha256 over this library, the build script, every pinned input file (locks, package lists) and
# the KEY=VALUE pins (versions, integrity digests, mirror URI). Changing any of them changes the
# tag, so a cached image is reused only for exactly the same inputs.
inputs_digest() {
  local f
  {
    printf 'eval-base-inputs-v1\n'
    for f in "$IMAGES_LIB" "$@"; do
      [ "$f" = -- ] && break
      [ -f "$f" ] || die "inputs_digest: pinned input $f is not a file"
      printf 'file %s %s\n' "$(basename "$f")" "$(sha256sum < "$f" | cut -d' ' -f1)"
    done
    while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
    [ $# -gt 0 ] && shift
    printf 'pin %s\n' "$@" | LC_ALL=C sort
  } | sha256sum | cut -d' ' -f1
}

# image_tag NAME DIGEST -> eval-base/NAME:<first 16 hex of DIGEST>
image_tag() { printf 'eval-base/%s:%s\n' "$1" "${2:0:16}"; }

# The build record of NAME from inputs DIGEST (the full 64 hex): a file holding the image id
# `import_dir` returned, written only by `record_build`, after the import.
build_record() { printf '%s/built/%s/%s\n' "$EVAL_IMAGES_WORK" "$1" "$2"; }

# owned_not_shared PATH: PATH is owned by root or by us and writable by neither group nor others
# (a record anyone else can write is no record of our build).
owned_not_shared() {
  local owner mode
  owner=$(stat -c %u "$1") && mode=$(stat -c %a "$1") || return 1
  { [ "$owner" = 0 ] || [ "$owner" = "$(id -u)" ]; } && [ $((8#$mode & 8#022)) = 0 ]
}

# cached_image_id NAME DIGEST: prints the image id (sha256:…) and succeeds only when this machine
# recorded building NAME from exactly the inputs DIGEST and the engine still holds that id.
# The tag `eval-base/NAME:<prefix>` is never trusted: `docker load` applies an archive's RepoTags,
# so any archive can carry it. An id is the digest of the image's config, which lists its layers'
# digests, so no load can make another image answer to a recorded id; and a label would not do,
# since an archive can carry any label too.
cached_image_id() {
  local rec id got
  rec=$(build_record "$1" "$2")
  [ -f "$rec" ] && [ ! -L "$rec" ] && owned_not_shared "$rec" && owned_not_shared "${rec%/*}" &&
    owned_not_shared "$EVAL_IMAGES_WORK/built" || return 1
  id=$(head -c 80 "$rec" | head -n 1)
  [[ $id =~ ^sha256:[0-9a-f]{64}$ ]] || return 1
  got=$(docker image inspect --format '{{.Id}}' "$id" 2>/dev/null) || return 1
  [ "$got" = "$id" ] || return 1
  printf '%s\n' "$id"
}

# record_build NAME DIGEST ID: records that NAME built from inputs DIGEST is image ID (atomically:
# a temporary file renamed over the record).
record_build() {
  local rec tmp
  [[ $3 =~ ^sha256:[0-9a-f]{64}$ ]] || die "record_build: '$3' is not an image id"
  rec=$(build_record "$1" "$2")
  mkdir -p "${rec%/*}"
  chmod go-w "$EVAL_IMAGES_WORK/built" "${rec%/*}"
  tmp=$(mktemp "${rec%/*}/.record.XXXXXX")
  printf '%s\n' "$3" > "$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$rec"
}

# debian_mirror: the first Debian archive URI the machine's apt sources use for $DEBIAN_SUITE
# (deb822 *.sources first, then one-line *.list). The security and updates archives are skipped:
# debootstrap needs the main archive.
debian_mirror() {
  local uri f
  uri=$(
    {
      for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # One stanza per paragraph; keep the URI of a `deb` stanza that carries the suite.
        awk -v suite="$DEBIAN_SUITE" '
          BEGIN { RS = ""; FS = "\n" }
          {
            types = ""; uris = ""; suites = ""
            for (i = 1; i <= NF; i++) {
              if ($i ~ /^Types:/) types = $i
              else if ($i ~ /^URIs:/) uris = $i
              else if ($i ~ /^Suites:/) suites = $i
            }
            if ((types " ") ~ /[ \t]deb[ \t]/ && (suites " ") ~ ("[ \t]" suite "[ \t]")) {
              sub(/^URIs:[ \t]*/, "", uris); split(uris, u, /[ \t]+/); print u[1]
            }
          }' "$f"
      done
      for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -E 's/\[[^]]*\]//' "$f" | awk -v suite="$DEBIAN_SUITE" '$1 == "deb" && $3 == suite { print $2 }'
      done
    } | awk 'NR == 1 { print }'
  )
  [ -n "$uri" ] || die "no apt source for suite $DEBIAN_SUITE in /etc/apt/sources.list{,.d/*} (debootstrap needs a Debian mirror)"
  printf '%s\n' "$uri"
}

# Mounts made by chroot_mounts are undone by this, also on error (trap set by the caller).
CHROOT_MOUNTED=()
chroot_unmount_all() {
  local m
  for m in "${CHROOT_MOUNTED[@]+"${CHROOT_MOUNTED[@]}"}"; do
    mountpoint -q "$m" && umount -l "$m"
  done
  CHROOT_MOUNTED=()
}
chroot_mounts() {
  local dir=$1
  mount -t proc proc "$dir/proc"
  CHROOT_MOUNTED+=("$dir/proc")
}

# new_build_dir NAME: an empty directory for the chroot, removed by cleanup_build_dir.
new_build_dir() {
  local dir="$EVAL_IMAGES_WORK/build/$1"
  cleanup_build_dir "$dir"
  mkdir -p "$dir"
  printf '%s\n' "$dir"
}
cleanup_build_dir() {
  local dir=$1
  chroot_unmount_all
  [ -d "$dir" ] || return 0
  # Never delete through a live mount (proc is the only one made here).
  if mountpoint -q "$dir/proc" 2>/dev/null; then umount -l "$dir/proc"; fi
  rm -rf --one-file-system "$dir"
}

# debootstrap_minbase DIR: Debian $DEBIAN_SUITE minbase into DIR from the machine's mirror.
# The .deb files are cached between builds (debootstrap --cache-dir).
debootstrap_minbase() {
  local dir=$1 mirror cache="$EVAL_IMAGES_WORK/cache/debootstrap"
  if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap with apt-get"
    heavy apt-get install -y --no-install-recommends debootstrap >&2 ||
      die "apt-get install debootstrap failed (run apt-get update first?)"
  fi
  mirror=$(debian_mirror)
  mkdir -p "$cache"
  log "debootstrap --variant=minbase $DEBIAN_SUITE from $mirror"
  heavy debootstrap --variant=minbase --cache-dir="$cache" "$DEBIAN_SUITE" "$dir" "$mirror" >&2 ||
    die "debootstrap failed (log: $dir/debootstrap/debootstrap.log)"
}

# chroot_apt DIR PACKAGE...: apt-get install inside the chroot from its own sources.list (the
# mirror debootstrap wrote), then drop the package lists and archives from the tree.
chroot_apt() {
  local dir=$1
  shift
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  # No service may start inside a build chroot.
  printf '#!/bin/sh\nexit 101\n' > "$dir/usr/sbin/policy-rc.d"
  chmod 0755 "$dir/usr/sbin/policy-rc.d"
  heavy chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    apt-get update >&2
  heavy chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "$@" >&2
  chroot "$dir" apt-get clean
  rm -rf "$dir"/var/lib/apt/lists/* "$dir/usr/sbin/policy-rc.d"
}

# add_agent_user DIR: the harness identity (uid/gid 65532, home /home/agent) and the directories
# eval mounts over, so the image runs unchanged with a read-only root.
add_agent_user() {
  local dir=$1
  grep -q "^agent:" "$dir/etc/group" || printf 'agent:x:%s:\n' "$AGENT_GID" >> "$dir/etc/group"
  grep -q "^agent:" "$dir/etc/passwd" ||
    printf 'agent:x:%s:%s:agent:/home/agent:/bin/sh\n' "$AGENT_UID" "$AGENT_GID" >> "$dir/etc/passwd"
  mkdir -p "$dir/home/agent" "$dir/workspace" "$dir/task" "$dir/run/eval"
  chown "$AGENT_UID:$AGENT_GID" "$dir/workspace"
  # The engine gives a tmpfs mounted over an existing directory that directory's mode (not its
  # owner): a 0755 home would become a root-owned tmpfs the agent cannot write. 1777 keeps HOME
  # writable for whatever uid the runtime chooses, as /tmp is.
  chmod 1777 "$dir/home/agent"
}

# finish_tree DIR: remove what must not ship (build-time resolv.conf, caches, logs) and record the
# Debian package set so an image's contents can be compared without unpacking it.
finish_tree() {
  local dir=$1
  # shellcheck disable=SC2016 # dpkg-query's own ${field} syntax
  chroot "$dir" dpkg-query -W -f '${Package} ${Version} ${Architecture}\n' |
    LC_ALL=C sort > "$dir/etc/eval-base-packages.txt"
  : > "$dir/etc/resolv.conf"
  rm -rf "$dir"/var/cache/apt/* "$dir"/var/lib/apt/lists/* "$dir"/var/log/* "$dir"/tmp/* \
    "$dir"/var/tmp/* "$dir"/root/.cache "$dir/debootstrap"
}

# import_dir DIR TAG [--change INSTRUCTION]...: a sorted, numeric-owner tar of DIR (no atime/ctime,
# no contents of /dev, /proc, /sys) piped to `docker import` with the given config changes.
# Prints the image id (sha256:…) as the last line of stdout.
import_dir() {
  local dir=$1 tag=$2
  shift 2
  local id
  log "docker import -> $tag"
  id=$(
    heavy tar --sort=name --numeric-owner --format=posix \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' \
      -C "$dir" -cf - . |
      heavy docker import "$@" - "$tag"
  ) || die "docker import of $dir failed"
  case $id in
    sha256:*) ;;
    *) die "docker import printed no image id (got '$id')" ;;
  esac
  printf '%s\n' "$id"
}

# image_size_mb TAG: the image's size as the engine reports it (MB, 10^6 bytes).
image_size_mb() {
  docker image inspect --format '{{.Size}}' "$1" | awk '{ printf "%d\n", $1 / 1000000 }'
}
