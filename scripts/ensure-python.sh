#!/usr/bin/env bash
# Creates the project's local virtual environment (.venv, git-ignored) with the Python packages the
# cross-check tests use: the official `openai` client, SciPy, `inspect-ai` (reads the Inspect logs
# `eval export inspect` writes) and Harbor's wheel (its ATIF validator checks `eval export atif`).
# Prints the interpreter's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
want="$root/scripts/python-requirements.txt"
# Harbor requires Python >= 3.12 to install, but the modules the tests use (its ATIF models and
# `harbor/utils/trajectory_validator.py`) import on 3.11 with pydantic alone: its wheel is fetched
# without dependencies and put on the interpreter's path by a .pth file, never installed.
harbor=harbor==0.26.0
stamp="$venv/.requirements.sha256"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
sum=$( (cat "$want"; echo "$harbor") | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  echo "ensure-python: installing $(tr '\n' ' ' < "$want")into .venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$want" >&2
  rm -rf "$venv/wheels"
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps "$harbor" \
    --python-version 3.12 --only-binary=:all: -d "$venv/wheels" >&2
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ls "$venv"/wheels/harbor-*.whl > "$site/harbor-wheel.pth"
  echo "$sum" > "$stamp"
fi
echo "$venv/bin/python"
