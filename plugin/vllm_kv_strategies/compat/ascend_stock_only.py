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

:func:`mla_hybrid_corruption` names the one hybrid stock 0.30 builds but
corrupts: MLA attention beside Mamba-type (KDA) layers in one backing
(Kimi-Linear).

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


def mla_hybrid_corruption(kv_cache_config: Any) -> str | None:
    """Where stock 0.30 would corrupt a hybrid of MLA attention and Mamba-type
    (KDA, GDN) layers in vLLM's one backing (Kimi-Linear: KDA beside MLA),
    named; else None.

    Stock's hybrid path (``_allocate_kv_cache_tensors``: a slice of the backing
    per layer at ``offset + l * layer_stride``) views an MLA layer's slice as
    the nope of all its blocks, then their rope (``_reshape_kv_cache_tensors``),
    while a Mamba layer of the same slice keeps its states page by page
    (``_adjust_kv_layout``): with two blocks or more, block j of one aliases
    block k != j of the other, which vLLM may give to different groups.
    """
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    from .ascend_strided import is_mamba

    n = kv_cache_config.num_blocks
    if n < 2 or not any(hasattr(t, "layer_stride") for t in kv_cache_config.kv_cache_tensors):
        return None
    specs = {name: layer_spec(g.kv_cache_spec, name) for g in kv_cache_config.kv_cache_groups for name in g.layer_names}
    regions = {"mla": [], "mamba": []}
    for t in kv_cache_config.kv_cache_tensors:
        for index, name in enumerate(t.layers):
            spec = specs.get(name)
            kind = "mla" if isinstance(spec, MLAAttentionSpec) else "mamba" if is_mamba(spec) else None
            if kind is not None:
                start = t.offset + index * t.layer_stride
                regions[kind].append((name, start, start + n * spec.page_size_bytes))
    for mla, m_start, m_end in regions["mla"]:
        for states, s_start, s_end in regions["mamba"]:
            if m_start < s_end and s_start < m_end:
                return (
                    f"a hybrid of MLA attention and Mamba-type (KDA / GDN) layers in one backing (Kimi-Linear): stock "
                    f"0.30 views MLA layer {mla!r} as the nope of all its {n} blocks, then their rope, over bytes "
                    f"[{max(m_start, s_start)}, {min(m_end, s_end)}) that {states!r} ({type(specs[states]).__name__}) "
                    "holds page by page, so block j of one aliases block k != j of the other: stock would corrupt the KV cache"
                )
    return None
