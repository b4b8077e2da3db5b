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

:func:`hybrid_corruption` names the hybrids stock 0.30 builds but corrupts:
MLA attention beside Mamba-type (KDA) layers in one backing (Kimi-Linear), and
in V1 attention pages padded to the Mamba page.

Importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.specs import is_mamba, layer_spec

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


def _whole_region_kind(spec: Any, padded_attention: bool) -> str | None:
    """How stock 0.30 lays an attention layer of a hybrid backing out where it
    is not page by page: MLA as the nope of all its blocks, then their rope
    (V1 and V2); with ``padded_attention`` (V1's trim path) an attention page
    padded to the Mamba page as ``[pad | K of all blocks | V of all blocks]``.
    None: page by page (Mamba states, unpadded attention K|V per block)."""
    from vllm.v1.kv_cache_interface import MLAAttentionSpec


    if spec is None or is_mamba(spec):
        return None
    if isinstance(spec, MLAAttentionSpec):
        return "the nope of all its blocks, then their rope"
    if padded_attention and spec.page_size_bytes != getattr(spec, "real_page_size_bytes", spec.page_size_bytes):
        return "[padding | K of all its blocks | V of all its blocks] (its page padded to the Mamba page)"
    return None


def hybrid_corruption(kv_cache_config: Any, padded_attention: bool = True) -> str | None:
    """Where stock 0.30's own build of a hybrid (attention + Mamba-type
    layers in vLLM's one backing) would alias blocks of different indices,
    named with the layers and the byte range; else None.

    Stock's hybrid path gives each layer the region ``offset + l *
    layer_stride`` of the backing (``NPUModelRunner._allocate_kv_cache_tensors``)
    and keeps a Mamba layer's states page by page there
    (``_adjust_kv_layout``), while an attention layer of the same region laid
    out whole (:func:`_whole_region_kind`: MLA, as in Kimi-Linear's KDA beside
    MLA, in V1 and V2; in V1 with ``padded_attention`` also attention pages
    padded to the Mamba page, ``_reshape_kv_cache_tensors``' trim path) puts
    its block j over bytes the Mamba layer holds for block k != j. vLLM may
    give those blocks to different requests: the KV cache is corrupted.
    """
    n = kv_cache_config.num_blocks
    if n < 2 or not any(hasattr(t, "layer_stride") for t in kv_cache_config.kv_cache_tensors):
        return None

    specs = {name: layer_spec(g.kv_cache_spec, name) for g in kv_cache_config.kv_cache_groups for name in g.layer_names}
    whole, paged = [], []
    for t in kv_cache_config.kv_cache_tensors:
        for index, name in enumerate(t.layers):
            spec = specs.get(name)
            start = t.offset + index * t.layer_stride
            if spec is not None and is_mamba(spec):
                paged.append((name, start, start + n * spec.page_size_bytes))
            elif (how := _whole_region_kind(spec, padded_attention)) is not None:
                whole.append((name, how, start, start + n * spec.page_size_bytes))
    for name, how, w_start, w_end in whole:
        for states, s_start, s_end in paged:
            if w_start < s_end and s_start < w_end:
                return (
                    f"a hybrid KV cache whose attention layer {name!r} ({type(specs[name]).__name__}) stock 0.30 lays out "
                    f"as {how}, over bytes [{max(w_start, s_start)}, {min(w_end, s_end)}) of the backing that {states!r} "
                    f"({type(specs[states]).__name__}) holds page by page: with {n} blocks, block j of one aliases "
                    "block k != j of the other, so stock would corrupt the KV cache"
                )
    return None


def config_as_allocated(runner: Any, kv_cache_config: Any) -> Any:
    """A copy of ``kv_cache_config`` transformed as stock 0.30's
    ``NPUModelRunner.initialize_kv_cache`` transforms it before allocating:
    ``apply_layerwise_kv_cache_plan`` (a layerwise-reuse connector's
    zero-stride tensors) and the cross-layer KV sharing layers added to their
    targets' groups (vLLM's ``add_kv_sharing_layers_to_kv_cache_groups``).
    The worker's budget step decides from this, so that allocation, which
    sees the same config, cannot decide otherwise. The config given is not
    changed; on releases without those steps the copy is the config."""
    import copy

    config = copy.deepcopy(kv_cache_config)
    vllm_config = getattr(runner, "vllm_config", None)
    try:
        from vllm_ascend.distributed.kv_transfer.kv_pool.ascend_store.layerwise_cache_layout import (
            apply_layerwise_kv_cache_plan,
        )
    except ImportError:  # a release without layerwise reuse
        apply_layerwise_kv_cache_plan = None
    if apply_layerwise_kv_cache_plan is not None and vllm_config is not None:
        apply_layerwise_kv_cache_plan(config, vllm_config)
    shared = getattr(runner, "shared_kv_cache_layers", None)
    if shared:
        from vllm.v1.worker.utils import add_kv_sharing_layers_to_kv_cache_groups

        add_kv_sharing_layers_to_kv_cache_groups(shared, config.kv_cache_groups, getattr(runner, "runner_only_attn_layers", None))
    return config
