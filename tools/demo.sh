#!/usr/bin/env bash
# The main job: set up vLLM's CPU build with this plugin (first run only), then
# `vllm serve` a tiny local model with the plugin on, send one completion request,
# print the answer and the plugin's KV cache summary line, and stop the server.
#
# Usage: tools/demo.sh [--model-kind llama|qwen3_next|deepseek_v2|all] [demo.py options]
# Environment: KV_STRATEGIES_VENVS (default .venv/), KV_STRATEGIES (default auto).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${KV_STRATEGIES_VENVS:-$ROOT/.venv}/upstream-0.32.0
if [[ ! -f $VENV/.ready ]]; then
  "$ROOT/tools/make_venv_upstream.sh" 0.32.0 "$VENV"
  touch "$VENV/.ready"
fi
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$ROOT"
KINDS=(llama)
ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model-kind) [[ $2 == all ]] && KINDS=(llama qwen3_next deepseek_v2) || KINDS=("$2"); shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
for kind in "${KINDS[@]}"; do
  echo "=== demo: $kind"
  "$VENV/bin/python" "$ROOT/tools/demo.py" --model-kind "$kind" ${ARGS[@]+"${ARGS[@]}"}
done
