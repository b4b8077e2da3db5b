"""Upstream vLLM's model runners (0.30 - 0.33): what the plugin patches there.

vLLM has two model runners. V1 (``vllm/v1/worker/gpu_model_runner.py``,
``GPUModelRunner``; the CPU runner subclasses it) builds the KV cache in
``initialize_kv_cache_tensors``. Model Runner V2 (``vllm/v1/worker/gpu/``),
vLLM's default wherever Triton works (``VllmConfig.use_v2_model_runner``), does
not subclass V1: its ``GPUModelRunner.initialize_kv_cache`` calls the function
``init_kv_cache`` of ``gpu/attn_utils.py``, imported by name into
``gpu/model_runner.py``. On both, the result must equal stock exactly, and
vLLM's own functions build it: the plugin plans and checks every layer before
anything is allocated, calls them, and reports what was built.
"""

from __future__ import annotations

from typing import Any

from .targets import PatchTarget

V1 = PatchTarget(
    name="upstream-v1",
    runner="GPUModelRunner (V1)",
    module="vllm.v1.worker.gpu_model_runner",
    attributes=("GPUModelRunner.initialize_kv_cache_tensors", "GPUModelRunner.initialize_kv_cache"),
    adapter="vllm_kv_strategies.adapters.upstream:UpstreamV1Adapter",
    why=(
        "initialize_kv_cache_tensors: plan and check every layer's KV cache spec before vLLM "
        "allocates, fall back to stock in auto, report what was built. initialize_kv_cache: say "
        "which runner this worker is and warn when the KV cache was built without the plugin "
        "(a subclass that overrides the build)."
    ),
    mirrors=(
        "vllm/v1/worker/gpu_model_runner.py GPUModelRunner.initialize_kv_cache_tensors "
        "(vLLM 0.30-0.33), which it calls unchanged"
    ),
    remove_when="vLLM exposes a KV cache allocation hook for plugins, or drops the V1 runner",
)

V2 = PatchTarget(
    name="upstream-v2",
    runner="GPUModelRunner (V2)",
    module="vllm.v1.worker.gpu.model_runner",
    attributes=("init_kv_cache", "GPUModelRunner.initialize_kv_cache"),
    adapter="vllm_kv_strategies.adapters.upstream_v2:UpstreamV2Adapter",
    why=(
        "init_kv_cache (as bound in gpu/model_runner.py): plan and check every layer before "
        "vLLM allocates, fall back to stock in auto, report what was built. "
        "GPUModelRunner.initialize_kv_cache: say which runner this worker is and warn when the "
        "KV cache was built without the plugin."
    ),
    mirrors="vllm/v1/worker/gpu/attn_utils.py init_kv_cache (vLLM 0.30-0.33), which it calls unchanged",
    remove_when="vLLM exposes a KV cache allocation hook for plugins",
)

#: Every upstream runner; whichever vLLM picks in a worker gets the plugin.
TARGETS: tuple[PatchTarget, ...] = (V1, V2)


def custom_kv_cache_dtype(cache_config: Any) -> str | None:
    """The ``--kv-cache-dtype`` name when a platform registered it and left
    its kernels and layout to its own backend, else None.

    vLLM 0.33 lets a platform register a cache dtype
    (``register_kv_cache_dtype`` / ``get_kv_cache_dtype_handler``,
    vllm/config/cache.py); a handler whose ``quant_mode()`` is
    ``KVQuantMode.CUSTOM`` gives the page whatever layout its backend's
    ``customize_spec`` publishes. ``CUSTOM`` is an alias of ``OCTAVE_K3V4``
    (both 12), so only the dtype name says which it is. Releases without the
    registry (0.32 and before) have no such dtype.
    """
    try:
        from vllm.config.cache import get_kv_cache_dtype_handler
    except ImportError:
        return None
    name = getattr(cache_config, "cache_dtype", None)
    handler = get_kv_cache_dtype_handler(name) if isinstance(name, str) else None
    if handler is None or not getattr(handler.quant_mode(), "is_custom_mode", False):
        return None
    return name
