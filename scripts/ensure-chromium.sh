#!/usr/bin/env bash
# Installs Debian's Chromium (for the HTML report check) when it is missing. Prints its path.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-chromium: chromium is missing; run: sudo apt-get install -y chromium" >&2
    exit 1
  fi
  echo "ensure-chromium: installing Debian's chromium" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium >/dev/null
fi
command -v chromium
