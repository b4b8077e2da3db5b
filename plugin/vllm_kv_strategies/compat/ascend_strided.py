"""vllm-ascend on vLLM 0.30+: vLLM's strided ``KVCacheTensor`` (``layers``,
``offset``, ``layer_stride``, ``block_stride``; ``size`` is the whole backing)
and what stock vllm-ascend 0.30 builds from it, which the strategies do not
build yet.

Stock 0.30 (``NPUModelRunner._allocate_kv_cache_tensors`` /
``_reshape_kv_cache_tensors``, vllm_ascend/worker/model_runner_v1.py) gives
each layer a private buffer of ``num_blocks x page`` with K and V interleaved
per kernel block (or separate contiguous K and V where its PA kernels need
them), slices hybrids out of one shared backing with page-strided Mamba
states, and its worker scales the KV budget of multi-group models down so
that private buffers fit (``NPUWorker._scale_kv_cache_memory_for_multi_group``).
Until the strategies build those layouts stock-equal, every such config is
refused by name here and stock builds it (``auto``: one warning).
"""

from __future__ import annotations

from typing import Any

from .specs import layer_spec


def strided_form(kv_cache_config: Any) -> bool:
    """Whether the config's tensors are vLLM 0.30's strided form."""
    return any(hasattr(tensor, "layer_stride") for tensor in kv_cache_config.kv_cache_tensors)


def unbuilt_layout_reason(kv_cache_config: Any) -> str | None:
    """Why the strategies leave a vllm-ascend config in vLLM's strided form to
    stock (the spec classes present and each feature of it stock lays out on
    its own), or None for the ``shared_by`` form of releases up to 0.28."""
    if not strided_form(kv_cache_config):
        return None
    specs = {
        name: layer_spec(group.kv_cache_spec, name)
        for group in kv_cache_config.kv_cache_groups
        for name in group.layer_names
    }
    kinds = sorted({type(spec).__name__ for spec in specs.values()})
    features = []
    tensors = kv_cache_config.kv_cache_tensors
    if any(getattr(t, "layer_stride", None) == 0 and len(t.layers) > 1 for t in tensors):
        features.append("layerwise KV cache reuse (zero-stride tensors)")
    if any(getattr(t, "host_resident", False) for t in tensors) or any(
        getattr(s, "store_on_host", False) for s in specs.values()
    ):
        features.append("sparse KV offload (store_on_host)")
    mamba = any(hasattr(s, "shapes") and hasattr(s, "mamba_type") for s in specs.values())
    if mamba and len(specs) > sum(hasattr(s, "mamba_type") for s in specs.values()):
        features.append("a hybrid (Mamba + attention) shared backing")
    if any(getattr(s, "state_content_bytes", None) for s in specs.values()):
        features.append("packed pages (state_content_bytes: C8 MXFP)")
    if any(type(s).__name__ == "AscendSFAIndexerCacheSpec" for s in specs.values()):
        features.append("SFA indexer caches")
    if len(kv_cache_config.kv_cache_groups) > 1:
        features.append(f"{len(kv_cache_config.kv_cache_groups)} KV cache groups")
    described = ", ".join(kinds) + (f" with {', '.join(features)}" if features else "")
    return (
        f"vllm-ascend 0.30 layouts of vLLM's strided KVCacheTensor ({described}) yet (per-layer buffers with K|V "
        "interleaved per kernel block, page-strided states); stock builds them"
    )
