#!/usr/bin/env bash
# Creates the project's local virtual environment (.venv, git-ignored) with the Python packages the
# cross-check tests use: the official `openai` client and SciPy. Prints the interpreter's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
want="$root/scripts/python-requirements.txt"
stamp="$venv/.requirements.sha256"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
sum=$(sha256sum "$want" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  echo "ensure-python: installing $(tr '\n' ' ' < "$want")into .venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$want" >&2
  echo "$sum" > "$stamp"
fi
echo "$venv/bin/python"
