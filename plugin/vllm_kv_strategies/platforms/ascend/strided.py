"""vllm-ascend on vLLM 0.30+: vLLM's strided ``KVCacheTensor`` (``layers``,
``offset``, ``layer_stride``, ``block_stride``; ``size`` is the whole backing)
and the layout stock vllm-ascend 0.30 makes of it.

Stock 0.30 (``NPUModelRunner._allocate_kv_cache_tensors`` /
``_reshape_kv_cache_tensors``, vllm_ascend/worker/model_runner_v1.py) does not
place layers by the tensors' strides: outside hybrids and the page-strided
kinds it gives every layer private buffers of ``num_blocks x page`` bytes
(its worker scales the KV budget of multi-group models down so that they
fit, ``NPUWorker._scale_kv_cache_memory_for_multi_group``):

* a plain full-attention layer whose PA kernels do not need contiguous
  caches: one buffer, K and V interleaved per kernel block (both views
  strided by the kernel block's bytes, V half a kernel block after K);
* every other attention layer: separate K and V (MLA: nope and rope)
  buffers, split by head size;
* a Mamba layer: one buffer, state after state.

These functions say which layers take which form and what the strategies do not
build yet (refused by name: stock builds those). Imports neither torch nor vLLM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.platforms.ascend.stock_only import stock_only_kind
from vllm_kv_strategies.core.specs import head_size_v, is_mamba, is_mla, layer_spec


def strided_form(kv_cache_config: Any) -> bool:
    """Whether the config's tensors are vLLM 0.30's strided form."""
    return any(hasattr(tensor, "layer_stride") for tensor in kv_cache_config.kv_cache_tensors)


def layer_specs(kv_cache_config: Any) -> dict[str, Any]:
    """layer -> its own spec, in the config's group order."""
    return {
        name: layer_spec(group.kv_cache_spec, name)
        for group in kv_cache_config.kv_cache_groups
        for name in group.layer_names
    }


def is_hybrid(kv_cache_config: Any, specs: dict[str, Any] | None = None) -> bool:
    """Whether the config has Mamba and attention layers (stock's
    ``hybrid_with_attn_and_mamba``, detected across all KV cache groups);
    ``specs``: its :func:`layer_specs`, where the caller has them."""
    mamba = [is_mamba(spec) for spec in (specs if specs is not None else layer_specs(kv_cache_config)).values()]
    return any(mamba) and not all(mamba)


#: Runner flags under which xlite changes no layout: stock 0.30 asks it last, after them (_allocate_kv_cache_tensors).
_XLITE_UNREAD_WITH = ("use_dcp", "use_sparse", "use_compress", "sparse_kv_offload_enabled")


def unbuilt_layout_reason(runner: Any, kv_cache_config: Any, overlay: bool = False) -> str | None:
    """What of a vllm-ascend config in vLLM's strided form the strategies do
    not build (stock builds it), named; None when every layer takes one of the
    private per-layer forms of the module docstring, or for the ``shared_by``
    form of releases up to 0.28.

    Refused: first the kinds stock builds on paths of their own, named as stock
    decides them (:func:`~vllm_kv_strategies.platforms.ascend.stock_only.stock_only_kind`:
    KVPP, DeepSeek V4.1, GLM-5-next, DeepSeek V4, layerwise KV cache reuse,
    sparse KV offload); else hybrids (Mamba + attention in one shared backing,
    page-strided states), other zero-stride tensors, xlite graphs, a packed SFA
    C8 main cache whose dtype is not the runner's ``c8_cache_dtype``, compressed
    caches, page-strided specs (``indexes_kv_by_block_stride``), packed pages
    (``state_content_bytes``) outside C8 MXFP attention, padded attention
    pages, the hidden-state cache, step3p5 / step3p7.
    A spec class no strategy serves is refused by the planner.
    """
    if not strided_form(kv_cache_config):
        return None
    return stock_only_kind(runner, kv_cache_config) or strided_layout_gap(
        runner, kv_cache_config, layer_specs(kv_cache_config), overlay)


def strided_layout_gap(runner: Any, kv_cache_config: Any, specs: dict[str, Any], overlay: bool = False) -> str | None:
    """:func:`unbuilt_layout_reason` past the kinds stock builds on paths of its own, for a
    config in the strided form whose :func:`~.stock_only.stock_only_kind` is None;
    ``specs``: its :func:`layer_specs` (the caller has asked both already)."""
    kinds = ", ".join(sorted({type(spec).__name__ for spec in specs.values()}))
    found = []
    tensors = kv_cache_config.kv_cache_tensors
    ascend = getattr(runner, "ascend_config", None)
    model_type = getattr(getattr(getattr(runner, "model_config", None), "hf_text_config", None), "model_type", None)
    if any(getattr(t, "layer_stride", None) == 0 and len(t.layers) > 1 for t in tensors):
        found.append("layers aliasing one zero-stride tensor")
    if not any(getattr(runner, f, False) for f in _XLITE_UNREAD_WITH) and getattr(
            getattr(ascend, "xlite_graph_config", None), "enabled", False):
        found.append("xlite graphs")
    c8 = getattr(runner, "c8_cache_dtype", None)  # stock views a packed SFA C8 cache in it, the strategy in the spec's
    if any(getattr(s, "cache_sparse_sfa_c8", False) and s.dtype != c8 for s in specs.values()):
        found.append(f"packed SFA C8 main caches of another dtype than the runner's c8_cache_dtype {c8}")
    if getattr(runner, "use_compress", False):
        found.append("compressed KV cache (use_compress)")
    if model_type in ("deepseek_v41", "step3p5", "step3p7"):
        found.append(f"{model_type} KV cache")
    if is_hybrid(kv_cache_config, specs) and not overlay:
        found.append("a hybrid (Mamba + attention) shared backing")
    check_mxfp = getattr(runner, "_is_c8_mxfp_kv_cache", None)
    for spec in specs.values():
        name = type(spec).__name__
        if check_mxfp is not None and check_mxfp(spec):
            continue  # C8 MXFP packets: the c8_mxfp kind (or the planner refuses the spec by name)
        if getattr(spec, "indexes_kv_by_block_stride", False):
            found.append(f"page-strided {name} (indexes_kv_by_block_stride)")
        elif getattr(spec, "state_content_bytes", None):
            found.append(f"packed pages of {name} (state_content_bytes) outside C8 MXFP attention")
        elif name in ("HiddenStateCacheSpec", "AscendSlidingWindowMLASpec", "AscendIndexerKPoolTailSpec"):
            found.append(name)
        elif not is_mamba(spec) and spec.page_size_bytes != getattr(spec, "real_page_size_bytes", spec.page_size_bytes):
            found.append(f"padded attention pages of {name}")
    if not found:
        return None
    return (
        f"vllm-ascend 0.30 layouts of {', '.join(dict.fromkeys(found))} ({kinds}) yet; stock builds them"
    )


def private_layer_config(kv_cache_config: Any, skip_layers: Collection[str] = ()) -> Any:
    """The config as stock 0.30 lays it out: one tensor per layer of
    ``num_blocks x page`` bytes serving that layer alone (a copy; the
    config given is not changed). ``skip_layers``: layers the runner keeps
    out of the KV cache (``runner_only_attn_layers``), which no tensor needs
    to serve.

    Raises:
        KVCacheLayoutError: a layer is served by no tensor of the config, or a
            tensor is smaller than ``num_blocks`` pages of each of its layers
            (the private buffers would exceed the bytes the config planned).
    """
    specs = layer_specs(kv_cache_config)
    n = kv_cache_config.num_blocks
    tensors = []
    for tid, tensor in enumerate(kv_cache_config.kv_cache_tensors):
        served = [name for name in tensor.layers if name in specs]
        need = sum(n * specs[name].page_size_bytes for name in served)
        if need > tensor.size:
            raise KVCacheLayoutError(
                f"KV cache tensor {tid} of {tensor.size} bytes is smaller than num_blocks {n} pages of each of its "
                f"{len(served)} layers ({need} bytes: {', '.join(f'{name} {specs[name].page_size_bytes}' for name in served)})"
            )
        for name in served:
            page = specs[name].page_size_bytes
            tensors.append(dataclasses.replace(tensor, size=n * page, layers=[name], offset=0, layer_stride=n * page,
                                               block_stride=page))
    served_all = {name for t in tensors for name in t.layers}
    missing = [name for name in specs if name not in served_all and name not in skip_layers]
    if missing:
        raise KVCacheLayoutError(f"layers served by no KV cache tensor: {', '.join(missing)}")
    return dataclasses.replace(kv_cache_config, kv_cache_tensors=tensors)


def _layer_backends(runner: Any) -> dict[str, Any]:
    """layer -> its attention backend class: from the runner's attention
    groups once they exist, else (the worker's budget step, before
    ``initialize_attn_backend``, when a real runner has no ``kv_cache_config``
    yet) from each layer's ``get_attn_backend()``."""
    backends = {}
    if getattr(runner, "kv_cache_config", None) is not None:
        backends = {name: group.backend for group in runner._kv_cache_spec_attn_group_iterator() for name in group.layer_names}
    if backends:
        return backends
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    return {name: layer.get_attn_backend() for name, layer in get_layers_from_vllm_config(runner.vllm_config, AttentionLayerBase).items()}


def private_bytes(kv_cache_config: Any, skip_layers: Collection[str] = ()) -> int:
    """Bytes of private buffers of ``num_blocks`` pages per layer (what stock
    0.30 allocates outside its overlay paths), ``skip_layers`` left out."""
    pages = [spec.page_size_bytes for name, spec in layer_specs(kv_cache_config).items() if name not in skip_layers]
    return kv_cache_config.num_blocks * sum(pages)


def overlays_groups(kv_cache_config: Any, skip_layers: Collection[str] = ()) -> bool:
    """Whether the config overlays KV cache groups in its one backing (vLLM
    PR #51718): :func:`private_bytes` would exceed the backing."""
    if not strided_form(kv_cache_config) or len(kv_cache_config.kv_cache_groups) < 2:
        return False
    return private_bytes(kv_cache_config, skip_layers) > max(t.size for t in kv_cache_config.kv_cache_tensors)


def overlay_refusal(runner: Any, kv_cache_config: Any) -> str | None:
    """Why the plugin does not build vLLM's overlay of a multi-group config
    (:func:`overlays_groups`) on vllm-ascend 0.30, or None when it does: one
    backing, each layer's region at ``offset + l * layer_stride``, every
    attention layer's K and V interleaved per kernel block
    (``get_kv_cache_shape``'s 5-D ``(2, ...)`` form), which is the form stock
    0.30 gives the layers of the overlays it builds itself
    (``NPUModelRunner._allocate_kv_cache_tensors`` /
    ``_reshape_kv_cache_tensors``: step3p5 / step3p7's sliding + full
    attention, ``raw_kv_is_combined``). Needs a layer- and block-compact KV
    cache layout (stock's own overlay gate) and layers whose kernels take
    strided K/V: no MLA (nope and rope lie in halves of the region, not block
    by block), no Mamba, no sparse backend, no layer that needs contiguous
    paged-attention caches (vllm-ascend's ``requires_contiguous_pa_kv_cache``),
    no decode context parallelism outside hybrids (stock: separate K and V).
    In a hybrid (Mamba + attention, which stock 0.30 overlays itself, its
    worker leaving the budget whole) each Mamba layer's states lie page by
    page in its region, ``[conv | ssm | pad]``, as stock's
    ``_adjust_kv_layout`` views them.
    """
    reason = unbuilt_layout_reason(runner, kv_cache_config, overlay=True)
    if reason is not None:
        return f"the strategies do not build the {reason}"
    return overlay_form_refusal(runner, kv_cache_config, layer_specs(kv_cache_config))


def overlay_form_refusal(runner: Any, kv_cache_config: Any, specs: dict[str, Any]) -> str | None:
    """:func:`overlay_refusal` for a config whose layouts the strategies build
    (:func:`unbuilt_layout_reason` with ``overlay``: None, asked already); ``specs``:
    its :func:`layer_specs`."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.v1.kv_cache_interface import AttentionSpec
    from vllm_ascend.attention.utils import requires_contiguous_pa_kv_cache

    hybrid = is_hybrid(kv_cache_config, specs)
    if not hybrid and getattr(runner, "dcp_size", 1) > 1:
        return "decode context parallelism (stock 0.30 gives its attention layers separate K and V, not K|V interleaved)"
    layout = runner.vllm_config.cache_config.get_resolved_kv_cache_layout()
    if not (layout.is_layer_compact and layout.is_block_compact):
        return f"KV cache layout {layout} is not layer- and block-compact (stock's overlay gate)"
    backends = _layer_backends(runner)
    layers = get_layers_from_vllm_config(runner.vllm_config, AttentionLayerBase)
    for name, spec in specs.items():
        what = f"layer {name!r} ({type(spec).__name__})"
        if hybrid and is_mamba(spec):  # states page by page, [conv | ssm | pad] (stock's _adjust_kv_layout)
            continue
        if not isinstance(spec, AttentionSpec) or is_mla(spec) or head_size_v(spec) != spec.head_size:
            return f"{what}: only attention with K and V of one head size is overlaid (K|V interleaved per kernel block)"
        if name not in backends or backends[name].is_sparse():
            return f"{what}: no dense attention backend"
        if requires_contiguous_pa_kv_cache(layers.get(name), runner.vllm_config, spec):
            return f"{what}: its paged-attention kernels need contiguous K/V caches"
    return None


def interleaved_kv_layers(runner: Any, kv_cache_config: Any) -> frozenset[str]:
    """The layers stock 0.30 gives one buffer with K and V interleaved per
    kernel block: a plain ``FullAttentionSpec`` (not a subclass) of a
    non-sparse backend whose layer does not need contiguous PA caches
    (vllm-ascend's own ``requires_contiguous_pa_kv_cache``), as
    ``NPUModelRunner._allocate_kv_cache_tensors`` selects them (0.30); none
    with decode context parallelism or sparse attention (stock's gate)."""
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.config import get_layers_from_vllm_config
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm_ascend.attention.utils import requires_contiguous_pa_kv_cache

    if getattr(runner, "dcp_size", 1) > 1 or getattr(runner, "use_sparse", False):
        return frozenset()
    backends = _layer_backends(runner)
    layers = get_layers_from_vllm_config(runner.vllm_config, AttentionLayerBase)
    return frozenset(
        name
        for name, spec in layer_specs(kv_cache_config).items()
        if type(spec) is FullAttentionSpec
        and name in backends
        and not backends[name].is_sparse()
        and not requires_contiguous_pa_kv_cache(layers.get(name), runner.vllm_config, spec)
    )


def kernel_block_sizes_by_layer(runner: Any, kv_cache_config: Any, kernel_block_sizes: list[int] | None) -> dict[str, int]:
    """layer -> the kernel block size stock 0.30 views it in: its KV cache
    group's entry of ``kernel_block_sizes`` (what ``initialize_kv_cache``
    passes; else the runner's own ``kernel_block_sizes``), attention layers
    only (Mamba states are not split)."""
    from vllm.v1.kv_cache_interface import AttentionSpec

    sizes = kernel_block_sizes if kernel_block_sizes is not None else getattr(runner, "kernel_block_sizes", None)
    if not sizes:
        return {}
    out = {}
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        if gid >= len(sizes):
            continue
        for name in group.layer_names:
            if isinstance(layer_spec(group.kv_cache_spec, name), AttentionSpec):
                out[name] = sizes[gid]
    return out


def interleaved_kv_shape(runner: Any, layer: str, spec: Any, num_blocks: int, kernel_block_size: int) -> tuple[int, ...]:
    """:func:`kv_interleaved_shape` of the layer's own attention backend."""
    try:
        return kv_interleaved_shape(_layer_backends(runner)[layer], spec, num_blocks, kernel_block_size)
    except ValueError as exc:
        raise ValueError(f"layer {layer!r} ({exc})") from None


def kv_interleaved_shape(backend: Any, spec: Any, num_blocks: int, kernel_block_size: int, *cache_dtype: str) -> tuple[int, ...]:
    """The 5-D ``(2, num_blocks x r, ...)`` shape ``backend`` gives a layer's
    interleaved K/V (``get_kv_cache_shape``: token-major, or head-major under
    ``VLLM_KV_CACHE_LAYOUT`` HND / LBHNC; Ascend V2 passes the cache dtype
    too, ``cache_dtype``).

    Raises:
        ValueError: the backend's shape is not 5-D with K/V first, or K and V
            differ in head size (stock then takes another path, which the
            strategies do not build).
    """
    rows = num_blocks * (spec.block_size // kernel_block_size)
    shape = tuple(backend.get_kv_cache_shape(rows, kernel_block_size, spec.num_kv_heads, spec.head_size, *cache_dtype))
    if len(shape) != 5 or shape[0] != 2 or head_size_v(spec) != spec.head_size:
        raise ValueError(
            f"{type(spec).__name__}: {backend.__name__}.get_kv_cache_shape gives {shape} for head sizes "
            f"{spec.head_size}/{head_size_v(spec)}; only 5-D (2, ...) K|V of equal head sizes are built"
        )
    return shape
