"""vllm-ascend 0.30: the KV cache kinds whose layout stays stock's, named as
stock decides them.

Stock 0.30's ``NPUModelRunner._allocate_kv_cache_tensors``
(vllm_ascend/worker/model_runner_v1.py) takes these paths before its generic
per-layer loop, or inside it, and the strategies build none of them:

* KVPP (``ascend_config.kvpp_config.size > 1``): ``allocate_kvpp_cache``
  (vllm_ascend/worker/kvpp_cache.py), one buffer per layer bundle this rank
  owns, the other ranks' layers sharing two scratch buffers;
* DeepSeek V4.1 (``is_deepseek_v41_cache``: a spec of ``model_version``
  ``deepseek_v41``): one backing per layer tuple, its layers aliasing it, views
  strided by the tuple's page;
* GLM-5-next (``model_version`` ``glm5_next``, its kpool tail
  ``AscendIndexerKPoolTailSpec``, or ``requires_padded_page_layout``): one
  backing per physical slot, views from ``view_glm5_next_cache``;
* DeepSeek V4 (a spec of ``model_version`` ``deepseek_v4``, or the
  ``deepseek_v4`` model type whose binding stock orders itself): one shared
  backing, page-strided views;
* layerwise KV cache reuse (``get_layerwise_reuse_config`` of the KV transfer
  config, which ``apply_layerwise_kv_cache_plan`` turned into zero-stride
  tensors): the layers of a slot alias its first layer's buffers;
* sparse KV offload (``sparse_kv_offload_enabled``; its specs
  ``store_on_host``): host K/V in pinned memory, device K/V only with
  ``keep_device_kv_cache``, plus top-k buffers.

Importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

from typing import Any

from .specs import layer_spec

#: kind -> how stock 0.30 builds it (the refusal names both).
STOCK_ONLY_KINDS = {
    "KVPP": "allocate_kvpp_cache: one buffer per layer bundle this rank owns, the other ranks' layers in "
    "shared scratch buffers",
    "DeepSeek V4.1": "one backing per layer tuple, its layers aliasing it, views strided by the tuple's page",
    "GLM-5-next": "kpool tails and padded pages: one backing per physical slot, its layers aliasing it",
    "DeepSeek V4": "one shared backing, page-strided views",
    "layerwise KV cache reuse": "the layers of a zero-stride tensor alias its first layer's buffers",
    "sparse KV offload": "host K/V in pinned memory (store_on_host), device K/V only with keep_device_kv_cache",
}


def _specs(kv_cache_config: Any) -> list[Any]:
    return [layer_spec(g.kv_cache_spec, name) for g in kv_cache_config.kv_cache_groups for name in g.layer_names]


def _model_versions(specs: list[Any]) -> set[str]:
    return {v for v in (getattr(s, "model_version", None) for s in specs) if v}


def _layerwise_reuse(runner: Any, kv_cache_config: Any) -> bool:
    """Stock's ``reuse_slot``: a layerwise-reuse connector
    (``get_layerwise_reuse_config``) and a zero-stride tensor of several layers."""
    if not any(getattr(t, "layer_stride", None) == 0 and len(t.layers) > 1 for t in kv_cache_config.kv_cache_tensors):
        return False
    try:
        from vllm_ascend.distributed.kv_transfer.kv_pool.ascend_store.layerwise_cache_layout import (
            get_layerwise_reuse_config,
        )
    except ImportError:  # a release without layerwise reuse
        return False
    return get_layerwise_reuse_config(getattr(getattr(runner, "vllm_config", None), "kv_transfer_config", None)) is not None


def _padded_pages(specs: list[Any]) -> bool:
    try:
        from vllm_ascend.core.kv_cache_interface import requires_padded_page_layout
    except ImportError:  # a release without GLM-5-next's padded pages
        return False
    return requires_padded_page_layout(specs)


def stock_only_kind(runner: Any, kv_cache_config: Any) -> str | None:
    """The first of :data:`STOCK_ONLY_KINDS` the runner and a config in vLLM
    0.30's strided form take (stock's order), as a refusal naming it and how
    stock builds it; None for any other config, and for the ``shared_by`` form."""
    if not any(hasattr(t, "layer_stride") for t in kv_cache_config.kv_cache_tensors):
        return None
    specs = _specs(kv_cache_config)
    versions = _model_versions(specs)
    model_type = getattr(getattr(getattr(runner, "model_config", None), "hf_text_config", None), "model_type", None)
    found = [
        kind
        for kind, taken in (
            ("KVPP", getattr(getattr(getattr(runner, "ascend_config", None), "kvpp_config", None), "size", 1) > 1),
            ("DeepSeek V4.1", "deepseek_v41" in versions),
            ("GLM-5-next", "glm5_next" in versions
             or any(type(s).__name__ == "AscendIndexerKPoolTailSpec" for s in specs) or _padded_pages(specs)),
            ("DeepSeek V4", "deepseek_v4" in versions or model_type == "deepseek_v4"),
            ("layerwise KV cache reuse", _layerwise_reuse(runner, kv_cache_config)),
            ("sparse KV offload", getattr(runner, "sparse_kv_offload_enabled", False)
             or any(getattr(s, "store_on_host", False) for s in specs)
             or any(getattr(t, "host_resident", False) for t in kv_cache_config.kv_cache_tensors)),
        )
        if taken
    ]
    if not found:
        return None
    kind = found[0]
    return f"vllm-ascend 0.30 layout of {kind} ({STOCK_ONLY_KINDS[kind]}); stock builds it"
