#!/usr/bin/env bash
# The NPU check: run inside vllm-ascend's container (Atlas A2 / A3 / 310P) with this plugin installed:
#   bash tools/npu_check.sh               # every tiny model, plugin off and on, V1 and (0.30) Ascend's V2
#   bash tools/npu_check.sh --dry-run     # no NPU: the same logic on vLLM's CPU platform, NPU steps listed
# It writes one file, npu_check-HOST-TIME.md, to attach to an issue; exit 0 passed, 1 a difference, 2 usage.
# Options: tools/npu_check.sh --help (tools/npu_check.py). PYTHON= the interpreter that runs vLLM (default python3).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "${PYTHON:-python3}" "$ROOT/tools/npu_check.py" "$@"
