"""One run of tools/npu_check.py: tests/e2e/run_generate.py (vLLM's offline ``LLM``, one sequence at
a time, greedy, top-5 logprobs) plus a measurement of the KV cache vLLM's worker holds once it is built.

    python tools/npu_check_run.py MODEL_DIR OUT_JSON [run_generate.py options]

The measurement (``probe`` in OUT_JSON), taken in the worker through ``LLM.collective_rpc`` right
after the engine started, before any request:

* ``kv_bytes``: the bytes of the distinct storages behind every layer's ``kv_cache`` (vLLM's
  ``static_forward_context``) and the runner's ``kv_caches``: what is really allocated for the KV
  cache, whoever built it;
* ``num_blocks`` and ``block_size``: vLLM's ``cache_config`` (the blocks the scheduler was given);
* ``npu``: ``torch.npu.mem_get_info()`` (free, total) and ``torch.npu.memory_allocated()``; ``None``
  where torch has no NPU (the dry run), and the run says so.

``NPU_CHECK_DRY=1`` (set by ``npu_check.py --dry-run``): ``vllm_ascend`` is hidden from this process
(``sys.modules['vllm_ascend'] = None``: it does not import and ``importlib.util.find_spec`` finds
nothing), so vLLM runs on its CPU platform and the plugin takes its upstream adapter. The caller also
sets ``VLLM_PLUGINS`` to the plugin alone and ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (one process).
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tensors(value, out: list) -> None:
    """Every tensor in ``value`` (a tensor, or lists / tuples / dicts of them)."""
    import torch

    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _tensors(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors(item, out)


def worker_probe(worker) -> dict:
    """Runs in each worker: the KV cache's distinct storages, vLLM's blocks and the device's memory."""
    import torch

    config = worker.vllm_config
    runner = getattr(worker, "model_runner", None)
    found: list = []
    for layer in config.compilation_config.static_forward_context.values():
        _tensors(getattr(layer, "kv_cache", None), found)
    _tensors(getattr(runner, "kv_caches", None), found)
    storages = {}
    for t in found:
        if t.numel() == 0:
            continue
        storage = t.untyped_storage()
        storages[(str(t.device), storage.data_ptr())] = storage.nbytes()
    npu = None
    module = getattr(torch, "npu", None)
    if module is not None and type(module).__name__ == "module" and module.is_available():
        module.synchronize()
        free, total = module.mem_get_info()
        npu = {"free": int(free), "total": int(total), "in_use": int(total - free),
               "allocated": int(module.memory_allocated()), "device": module.get_device_name(module.current_device())}
    return {
        "kv_bytes": sum(storages.values()),
        "kv_storages": len(storages),
        "kv_device": sorted({d for d, _ in storages}),
        "num_blocks": config.cache_config.num_gpu_blocks,
        "block_size": config.cache_config.block_size,
        "runner": type(runner).__name__,
        "npu": npu,
    }


def probe(llm) -> dict:
    per_worker = llm.collective_rpc(worker_probe)
    return {"workers": per_worker}


def main(argv: list[str]) -> int:
    if os.environ.get("NPU_CHECK_DRY") == "1":
        sys.modules["vllm_ascend"] = None  # vLLM's CPU platform; the plugin's upstream adapter
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    import run_generate

    return run_generate.main(argv, after_init=probe)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
