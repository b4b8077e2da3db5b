"""A Python interpreter with the NPU modules stubbed, for scripts that run ``python -m MODULE`` or
``python -c CODE`` in an Ascend cell as they would on an Ascend host, where ``torch_npu`` imports:
``python tests/ascend/npu_python.py -m vllm_kv_strategies doctor``.

The stand-ins of :mod:`npu_stubs` are installed first (not for ``-m pip``, which needs none), then
the module or the code runs unchanged as ``__main__``. ``tests/ascend/test_install_in_image.py``
runs ``tools/install_in_ascend_image.sh`` with a one-line wrapper around this file as ``PYTHON``.
"""

from __future__ import annotations

import importlib.metadata
import os
import runpy
import sys

if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 2 or args[0] not in ("-m", "-c"):
        sys.exit("usage: npu_python.py -m MODULE [ARGS ...] | -c CODE [ARGS ...]")
    if args[:2] != ["-m", "pip"]:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import npu_stubs

        npu_stubs.install(importlib.metadata.version("vllm-ascend"))
        npu_stubs.install_npu_device()  # what importing the real torch_npu does to torch (a process of its own)
        sys.path.pop(0)
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *args[2:]]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
