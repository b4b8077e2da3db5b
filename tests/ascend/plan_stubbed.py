"""Kept for the commands written before ``plan`` stood in for the NPU modules itself:
``python tests/ascend/plan_stubbed.py MODEL_DIR [plan arguments]`` is
``python -m vllm_kv_strategies plan MODEL_DIR [plan arguments]``, which, where
``torch_npu`` is missing, stands in for it for planning only and says so.
"""

from __future__ import annotations

import sys

from vllm_kv_strategies.deploy import cli

if __name__ == "__main__":
    sys.exit(cli.run(sys.argv[1:]))
