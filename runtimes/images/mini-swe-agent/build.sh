#!/usr/bin/env bash
# Builds eval-base/mini-swe-agent:<inputs digest prefix>: Debian bookworm minbase + python3 +
# python3-venv from the machine's Debian mirror, and a venv at /opt/mini-swe-agent holding exactly
# requirements.lock (mini-swe-agent 2.4.6 and its 81 dependencies, all wheels, sha256-checked),
# downloaded on the host and installed offline inside the chroot. `mini` is linked into
# /usr/local/bin so the image needs no ENV; it runs as uid/gid 65532 in /workspace.
# Prints the image id as the last line of stdout. A rerun with unchanged inputs prints the cached
# id without building.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BUILD_NAME=mini-swe-agent
# shellcheck source=../lib.sh
. "$here/../lib.sh"

lock="$here/requirements.lock"
apt_packages="python3 python3-venv"
# The venv's interpreter ABI must match the wheels lock.sh selected (cp311, glibc <= 2.36).
# The same platform list, in the same order, as lock.sh.
pip_target=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none)
for v in 36 35 34 31 28 27 24 17 12 5; do pip_target+=(--platform "manylinux_2_${v}_x86_64"); done
pip_target+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform any)

digest=$(inputs_digest "$0" "$lock" -- "suite=$DEBIAN_SUITE" "mirror=$(debian_mirror)" \
  "apt=$apt_packages" "user=$AGENT_UID:$AGENT_GID")
tag=$(image_tag "$BUILD_NAME" "$digest")
if id=$(cached_image_id "$BUILD_NAME" "$digest"); then
  log "cached: $id, recorded as built from inputs $digest"
  printf '%s\n' "$id"
  exit 0
fi
need_root
start=$(date +%s)

# The wheels, verified against the lock's hashes, kept across builds.
wheels="$EVAL_IMAGES_WORK/cache/wheels"
mkdir -p "$wheels"
log "pip download --require-hashes -r requirements.lock -> $wheels"
heavy env -u PIP_FIND_LINKS pip3 download --quiet --no-deps --require-hashes "${pip_target[@]}" \
  -d "$wheels" -r "$lock" >&2 || die "pip download of $lock failed"

dir=$(new_build_dir "$BUILD_NAME")
trap 'cleanup_build_dir "$dir"' EXIT
debootstrap_minbase "$dir"
chroot_mounts "$dir"
# shellcheck disable=SC2086 # the package list is a word list on purpose
chroot_apt "$dir" $apt_packages

mkdir -p "$dir/tmp/wheelhouse"
# Only the locked files go in: the cache may hold other versions from earlier locks.
grep -v '^#' "$lock" | while read -r spec _; do
  name=${spec%%==*}
  ver=${spec#*==}
  found=$(find "$wheels" -maxdepth 1 -iname "${name}-${ver}-*.whl" | head -n 1)
  [ -n "$found" ] || die "no wheel for $spec in $wheels"
  cp "$found" "$dir/tmp/wheelhouse/"
done
cp "$lock" "$dir/tmp/requirements.lock"
chroot_env=(/usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_DISABLE_PIP_VERSION_CHECK=1)
heavy chroot "$dir" "${chroot_env[@]}" python3 -m venv /opt/mini-swe-agent >&2
heavy chroot "$dir" "${chroot_env[@]}" /opt/mini-swe-agent/bin/pip install --quiet --no-index \
  --find-links /tmp/wheelhouse --require-hashes --no-deps -r /tmp/requirements.lock >&2 ||
  die "offline pip install inside the chroot failed"
# The pip that ensurepip put into the venv is not needed at run time.
heavy chroot "$dir" "${chroot_env[@]}" /opt/mini-swe-agent/bin/pip uninstall --quiet -y pip setuptools >&2 || true
rm -rf "$dir/tmp/wheelhouse" "$dir/tmp/requirements.lock"
for exe in mini mini-extra mini-swe-agent; do
  [ -x "$dir/opt/mini-swe-agent/bin/$exe" ] && ln -sf "/opt/mini-swe-agent/bin/$exe" "$dir/usr/local/bin/$exe"
done
[ -x "$dir/opt/mini-swe-agent/bin/mini" ] || die "the venv has no bin/mini"
add_agent_user "$dir"
# mini-swe-agent creates its global config directory at import, even for --help; with a read-only
# root and no tmpfs HOME that mkdir fails unless the directory already exists.
mkdir -p "$dir/home/agent/.config/mini-swe-agent"
chmod 1777 "$dir/home/agent/.config" "$dir/home/agent/.config/mini-swe-agent"
chroot_unmount_all
finish_tree "$dir"

id=$(import_dir "$dir" "$tag" \
  --change "USER $AGENT_UID:$AGENT_GID" \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["mini", "--help"]' | tail -n 1)
record_build "$BUILD_NAME" "$digest" "$id"
cleanup_build_dir "$dir"
trap - EXIT
log "built $tag in $(($(date +%s) - start)) s, $(image_size_mb "$tag") MB (inputs $digest)"
printf '%s\n' "$id"
