#!/usr/bin/env bash
# Run nox (pinned) on this repository's noxfile.py, from its own virtual environment
# (.venv/nox, created on first use from requirements/nox.txt). Arguments go to nox: tools/nox.sh -l, tools/nox.sh -s ascend-0.23.0.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NOX_VENV=$ROOT/.venv/nox
NOX_PINS=$ROOT/requirements/nox.txt
if [[ ! -f $NOX_VENV/.ready ]]; then
  rm -rf "$NOX_VENV"
  python3 -m venv "$NOX_VENV"
  "$NOX_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$NOX_PINS"
  touch "$NOX_VENV/.ready"
fi
exec "$NOX_VENV/bin/nox" --noxfile "$ROOT/noxfile.py" "$@"
