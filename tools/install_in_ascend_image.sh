#!/usr/bin/env bash
# Install vllm-kv-strategies into vllm-ascend's container image (quay.io/ascend/vllm-ascend:<tag>),
# or any environment where vLLM + vllm-ascend run, from a wheel built elsewhere; then check it.
#
# Usage (inside the container): bash install_in_ascend_image.sh WHEEL [--no-check]
#   WHEEL       vllm_kv_strategies-<version>-py3-none-any.whl (built with `pip wheel --no-deps -w dist .`)
#   --no-check  install only (a Dockerfile RUN step, where no NPU is visible: run the checks at start)
# Environment: PYTHON, the interpreter that runs vLLM (default: python3).
# Steps: 1. pip install --no-deps WHEEL: the image's torch, torch_npu, vLLM and vllm-ascend stay as they are;
#        2. the plugin's own requirements (torch, packaging, jsonschema) import;
#        3. python -m vllm_kv_strategies doctor: exit 0 when vLLM will run with the plugin active;
#        4. vLLM's plugin loader (vllm.plugins.load_general_plugins, which `vllm serve` runs in every
#           process) loads the plugin, which prints its `kv_strategies:` line.
# Then serve as usual: vllm serve MODEL ... (KV_STRATEGIES=off turns the plugin off).
# Exit: 0 installed (and checked); 1 a step failed (its output says why); 2 bad usage.
set -uo pipefail
usage() { sed -n '2,15p' "$0" | cut -c3-; }
WHEEL="" CHECK=1
for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    --no-check) CHECK=0 ;;
    -*) echo "install_in_ascend_image: unknown option $arg" >&2; usage >&2; exit 2 ;;
    *) [[ -z $WHEEL ]] || { echo "install_in_ascend_image: one wheel only" >&2; exit 2; }; WHEEL=$arg ;;
  esac
done
PYTHON=${PYTHON:-python3}
if [[ -z $WHEEL || ! -f $WHEEL || $WHEEL != *.whl ]]; then
  echo "install_in_ascend_image: give the plugin's wheel file (got '${WHEEL}'); build it with: pip wheel --no-deps -w dist ." >&2
  exit 2
fi

echo "== 1. $PYTHON -m pip install --no-deps $WHEEL"
"$PYTHON" -m pip install --no-deps --force-reinstall "$WHEEL" || exit 1

echo "== 2. the plugin's requirements (torch, packaging, jsonschema) are in this environment"
"$PYTHON" -c 'import torch, packaging, jsonschema, vllm_kv_strategies as p; print(f"vllm-kv-strategies {p.__version__} from {p.__file__}")' || {
  echo "install_in_ascend_image: a requirement is missing: pip install the one named above (the image's vLLM normally has them all)" >&2
  exit 1
}
[[ $CHECK -eq 1 ]] || { echo "installed; checks skipped (--no-check): run python -m vllm_kv_strategies doctor where the NPU is visible"; exit 0; }

echo "== 3. $PYTHON -m vllm_kv_strategies doctor"
"$PYTHON" -m vllm_kv_strategies doctor || {
  echo "install_in_ascend_image: doctor says vLLM would run without the plugin (see its last line); docs/ascend.md lists what to do" >&2
  exit 1
}

echo "== 4. vLLM's plugin loader loads the plugin, as vllm serve does"
"$PYTHON" -c 'from vllm.plugins import load_general_plugins; load_general_plugins()' 2>&1 | grep "kv_strategies:" || {
  echo "install_in_ascend_image: vLLM's plugin loader printed no kv_strategies: line (is VLLM_PLUGINS set without kv_strategies?)" >&2
  exit 1
}
echo "installed and checked: serve as usual, e.g. vllm serve MODEL --tensor-parallel-size N (KV_STRATEGIES=off turns the plugin off)"
