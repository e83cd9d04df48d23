#!/usr/bin/env bash
# Re-resolves project/pnpm-lock.yaml from the npm registry with the pinned Node and pnpm (run on
# the host, nothing installed). Run it only to move the pins on purpose (after editing
# project/package.json or the overrides): build.sh installs --frozen-lockfile, and the lock is part
# of the image's inputs digest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
EVAL_IMAGES_WORK=${EVAL_IMAGES_WORK:-/var/tmp/eval-images}
cache="$EVAL_IMAGES_WORK/cache/npm"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$cache" "$tmp/node" "$tmp/pnpm" "$tmp/project"
node_spec=$(sed -n 's/^NODE_SPEC=//p' "$here/build.sh")
pnpm_spec=$(sed -n 's/^PNPM_SPEC=//p' "$here/build.sh")
for spec in "$node_spec" "$pnpm_spec"; do
  f="$cache/${spec%@*}-${spec##*@}.tgz"
  [ -f "$f" ] || (cd "$cache" && npm pack --silent "$spec" >/dev/null)
done
tar -xzf "$cache/${node_spec%@*}-${node_spec##*@}.tgz" -C "$tmp/node" --strip-components=1 package/bin/node
tar -xzf "$cache/${pnpm_spec%@*}-${pnpm_spec##*@}.tgz" -C "$tmp/pnpm" --strip-components=1
cp "$here/project/package.json" "$here/project/pnpm-workspace.yaml" "$tmp/project/"
(cd "$tmp/project" && PATH="$tmp/node/bin:$PATH" nice -n 19 node "$tmp/pnpm/bin/pnpm.mjs" install \
  --lockfile-only --config.update-notifier=false --store-dir "$EVAL_IMAGES_WORK/cache/pnpm-store" \
  --reporter append-only >&2)
cp "$tmp/project/pnpm-lock.yaml" "$here/project/pnpm-lock.yaml"
echo "lock.sh: wrote $here/project/pnpm-lock.yaml" >&2
