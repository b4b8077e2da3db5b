#!/usr/bin/env bash
# The memory maps docs/report.md shows, regenerated from real reports (report STOCK PLUGIN --plot):
#   docs/images/memory-map-demo-llama.png     the demo's model (tools/tiny_models.py llama) run by vLLM 0.32
#                                             on the CPU (tests/e2e/run_generate.py: vLLM's LLM, EngineCore
#                                             and worker processes; VLLM_CPU_KVCACHE_SPACE=1,
#                                             --max-model-len 1024), observed (stock) and with the plugin on
#   docs/images/memory-map-gpt-oss-like.png   benchmarks/ascend_memory.py --reports: vllm-ascend 0.30's
#   docs/images/memory-map-gemma-3-like.png   worker end to end at a 1 GiB device budget, stock and the plugin
#
# Usage: tools/memory_maps.sh [OUT_DIR]   (default docs/images; about 3 min on 2 cores)
# Needs the cells' environments with the plot extra: tools/nox.sh -s ascend-0.30.0 and -s upstream-0.32.0
# build them (.nox/ascend-0-30-0, .nox/upstream-0-32-0); ASCEND_PY / UPSTREAM_PY name other interpreters.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mkdir -p "${1:-$ROOT/docs/images}" && cd "${1:-$ROOT/docs/images}" && pwd)
ASCEND_PY=${ASCEND_PY:-$ROOT/.nox/ascend-0-30-0/bin/python}
UPSTREAM_PY=${UPSTREAM_PY:-$ROOT/.nox/upstream-0-32-0/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"  # the maps name their reports by these relative paths

echo "memory maps: the Ascend benchmark's multi-group models (vllm-ascend 0.30) ..."
"$ASCEND_PY" "$ROOT/benchmarks/ascend_memory.py" --reports reports >/dev/null 2>&1
for model in gpt-oss-120b-like:gpt-oss-like gemma-3-27b-like:gemma-3-like; do
  dir=${model%%:*}
  "$ASCEND_PY" -m vllm_kv_strategies report "reports/$dir/stock/kv_cache_report.latest.rank0.json" \
    "reports/$dir/plugin/kv_cache_report.latest.rank0.json" --plot "$OUT/memory-map-${model##*:}.png" | tail -1
done

echo "memory maps: the demo's model served by vLLM 0.32 on the CPU, observed and with the plugin (about 2 min) ..."
"$UPSTREAM_PY" "$ROOT/tools/tiny_models.py" llama tiny-llama >/dev/null
for side in stock:observe plugin:on; do
  env -u KV_STRATEGIES_RUN_ID HF_HUB_OFFLINE=1 KV_STRATEGIES="${side##*:}" KV_STRATEGIES_REPORT="reports/${side%%:*}" \
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=1 \
    "$UPSTREAM_PY" "$ROOT/tests/e2e/run_generate.py" tiny-llama "${side%%:*}.json" --max-tokens 2 --max-model-len 1024 \
    >"${side%%:*}.log" 2>&1 || { tail -20 "${side%%:*}.log"; exit 1; }
done
"$UPSTREAM_PY" -m vllm_kv_strategies report reports/stock/kv_cache_report.latest.rank0.json \
  reports/plugin/kv_cache_report.latest.rank0.json --plot "$OUT/memory-map-demo-llama.png" | tail -1
