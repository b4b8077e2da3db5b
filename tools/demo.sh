#!/usr/bin/env bash
# The main job: set up vLLM's CPU build with this plugin (nox session "demo", from the pinned
# requirements of the newest upstream cell; built on first use, reused after), then
# `vllm serve` a tiny local model with the plugin on, send one completion request, print
# the answer and the plugin's KV cache summary line and report, and stop the server.
#
# Usage: tools/demo.sh [--model-kind llama|qwen3_next|deepseek_v2|all] [--compare] [tools/demo.py options]
#   --compare: the same model served stock (observe), then with the plugin; report STOCK PLUGIN and its picture.
# Environment: KV_STRATEGIES (default auto) and the plugin's other variables (docs/using.md).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for a in "$@"; do
  if [[ $a == -h || $a == --help ]]; then
    sed -n '2,9p' "$0" | cut -c3-; echo; echo "tools/demo.py:"; sed -n '3,23p' "$ROOT/tools/demo.py"
    exit 0
  fi
done
# Progress: the two first-run steps print nothing of their own for minutes.
if [[ ! -f $ROOT/.venv/nox/.ready ]]; then
  echo "demo: first run: installing nox into .venv/nox (about 1-2 minutes, once) ..."
fi
if [[ ! -x $ROOT/.nox/demo/bin/python ]]; then
  echo "demo: first run: nox builds .nox/demo, vLLM's CPU build with torch from requirements/upstream-0.32.0.txt (about 2-3 minutes and 3.3 GiB, once) ..."
else
  echo "demo: nox syncs .nox/demo with its pins and reinstalls this checkout (about 30-60 s) ..."
fi
exec "$ROOT/tools/nox.sh" -s demo -- "$@"
