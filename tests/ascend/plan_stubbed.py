"""``python -m vllm_kv_strategies plan`` in an Ascend cell with the NPU modules stubbed:
``python tests/ascend/plan_stubbed.py MODEL_DIR [plan arguments]``.

On an Ascend host ``torch_npu`` is real and plan runs as it is; here the stand-ins of
:mod:`npu_stubs` are installed first (and the ``npu`` device name, which the real
``torch_npu`` registers on import), then the command runs unchanged. A process of its own:
the device name cannot be undone in a pytest process.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # as plan sets it; the stubs import vLLM before plan runs

import npu_stubs  # noqa: E402

npu_stubs.install(importlib.metadata.version("vllm-ascend"))
npu_stubs.install_npu_device()

from vllm_kv_strategies.deploy import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.run(sys.argv[1:]))
