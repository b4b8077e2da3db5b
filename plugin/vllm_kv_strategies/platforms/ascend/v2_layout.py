"""vllm-ascend 0.30's own Model Runner V2 (``vllm_ascend/worker/v2/``): how it
lays out the KV cache, where that differs from its V1 runner, and what the
strategies do not build there.

V2 is opt-in (``VLLM_USE_V2_MODEL_RUNNER=1``; DeepSeek V4.1 on A5, PCP and a
few other features require it). Its ``NPUModelRunner.initialize_kv_cache``
calls vLLM's ``init_kv_cache`` (``vllm/v1/worker/gpu/attn_utils.py``), whose
``allocate_kv_cache`` vllm-ascend rebinds to ``allocate_kv_cache_main``
(``patch/worker/patch_v2/patch_attn_utils.py``). That function looks up two
module globals of ``vllm_ascend.worker.v2.attn_utils`` at call time, the seam
the plugin replaces:

* ``_allocate_kv_cache(kv_cache_config, shared_layers, device)`` -> layer ->
  int8 tensor or tuple of int8 tensors (every config layer but the
  cross-layer KV sharing ones);
* ``_reshape_kv_cache_v2(attn_groups, raws, cache_dtype, kernel_block_sizes,
  shared_kv_cache_layers, kv_cache_config)`` -> layer -> its views, the KV
  sharing layers aliased to their targets last.

V2's rules, read in 0.30.0rc2 (``attn_utils.py``) and checked by running them
on CPU (tests/ascend/test_ascend_030_v2.py):

* **No hybrid (attention + Mamba) model**: as V1 0.30, vLLM's strided
  ``KVCacheTensor`` (``offset``, ``layer_stride``, ``block_stride``) is not
  followed: every layer gets private buffers of ``num_blocks x page`` bytes
  (``page`` = ``spec.page_size_bytes``, padding included), even where the
  planner overlays the groups of a multi-group model. Per layer:

  - a ``FullAttentionSpec`` (exact class) in a tensor whose first layer is
    one, whose backend is not sparse and whose layer does not need contiguous
    PA caches (``requires_contiguous_pa_kv_cache``): **one buffer, K and V
    interleaved per kernel block**. The kernel block pitch is the *physical*
    page (``page_size_padded`` where set) divided by the kernel blocks per
    block (``_reshape_combined_attention_kv_cache``), so padding lies after V
    in every kernel block. V1 0.30 instead trims padding at the front
    (``[pad | K all | V all]``);
  - every other attention layer (PA kernels, sliding window, chunked local):
    **separate K and V buffers** (MLA: nope and rope), split by head size
    (``calc_split_factor``) and viewed contiguous;
  - a **Mamba-only** model: one buffer of ``tensor.size`` bytes per
    ``KVCacheTensor``, the *same* buffer for each of its layers, viewed from
    byte 0 for every layer: all layers of a tensor alias one set of states
    (V1 0.30 gives each layer its own). The strategies do not build that.
* **Hybrids** (Mamba + attention): one backing of ``tensor.size`` bytes (all
  tensors must have that size) shared by all groups; layer ``i`` of a tensor
  is the region ``[offset + i x layer_stride, + num_blocks x page)``, and V2
  requires ``layer_stride == num_blocks x page`` and ``block_stride == page``
  or raises. Attention takes the interleaved K|V form with the physical page
  as pitch; Mamba states lie ``[conv_j | ssm_j | pad]`` at ``j x page``
  (``_reshape_mamba_kv_cache``). MLA in a hybrid backing takes another form
  (``[pad | nope all | rope all]``), not built.
* KV transfer: every allocation (each private buffer, the hybrid backing) is
  over-allocated by 2 MiB and its start aligned to 2 MiB.
* **Sparse attention** (DeepSeek V3.2, ``enable_sfa``: the HF config's
  ``index_topk``): every attention layer takes separate buffers, as V1 0.30.
  The MLA main cache is nope and rope; a packed main cache (SFA C8 /
  TurboQuant, the spec's ``uses_packed_sfa_main_cache``) is one buffer of
  ``num_blocks x page`` bytes viewed ``(k,)`` in the ``--kv-cache-dtype``'s
  dtype (int8 for TurboQuant); an ``AscendSFAIndexerCacheSpec`` layer gets
  its key and, with ``scale_dim``, its scale in one raw buffer, the scale at
  the key's end rounded up to its dtype
  (``_allocate_sparse_c8_indexer_tensors``), viewed ``(num_blocks x r, ...)``
  with r = ``sfa_dcp_replicated_indexer_size``, never split into kernel
  blocks. Plain full attention there is separate K and V too.
* **Decode context parallelism** (``decode_context_parallel_size`` > 1): plain
  full attention outside hybrids takes separate K and V (V2's DCP guard),
  with the DCP-replicated indexers above; the rest as without DCP.
* Branches taken before any of this, none built by the strategies: KVPP,
  DeepSeek V4 / V4.1, GLM-5-next, layerwise KV cache reuse, kpool tails,
  hidden-state caches, sparse KV offload (``store_on_host``), FA quant,
  compressed caches, hisparse (never reaches ``allocate_kv_cache``).

The strategies give every layer's parts (:func:`~vllm_kv_strategies.core.plan.plan_kv_cache`);
these functions say which V2 form each layer takes and what is refused.
Importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.specs import is_mamba, is_mla
from vllm_kv_strategies.platforms.ascend.strided import is_hybrid, layer_specs
from vllm_kv_strategies.platforms.ascend.targets import ASCEND_V2_ALLOCATION

#: What V2's ``_allocate_kv_cache`` / ``_reshape_kv_cache_v2`` look up in their module when they run
#: (``vllm_ascend.worker.v2.attn_utils``): the plugin asks the same globals, never their source modules.
stock = ASCEND_V2_ALLOCATION.binding

#: Spec classes (exact) whose V2 layouts the strategies build.
BUILT_SPEC_CLASSES = frozenset(
    {"FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec", "MLAAttentionSpec", "AscendMLAAttentionSpec",
     "MambaSpec", "AscendSFAIndexerCacheSpec"}
)
#: Part groups V2 places in one raw buffer: the indexer key and its scale
#: (``_allocate_sparse_c8_indexer_tensors``, one 2 MiB-aligned allocation with KV transfer).
COALLOCATED_GROUPS = frozenset({"indexer"})
#: Spec fields that select a V2 branch the strategies do not build (truthy, or > 1 for ``tokens_per_state``).
_UNBUILT_FIELDS = (
    "store_on_host", "indexes_kv_by_block_stride", "state_content_bytes", "sparse_head_dim",
)
#: The interleaved K|V form (one buffer per layer) and the separate one.
COMBINED, SPLIT = "combined", "split"


def _model_reasons(vllm_config: Any) -> list[str]:
    """Branches V2 takes for the whole model, named, by vllm-ascend's own probes
    in the order ``_allocate_kv_cache`` asks them (0.30.0rc2)."""
    if stock("KVPPConfig").from_vllm_config(vllm_config).size > 1:
        return ["KVPP"]
    found = []
    if stock("_is_dsv4_model")(vllm_config):
        found.append("DeepSeek V4 KV cache")
    if stock("get_layerwise_reuse_config")(vllm_config.kv_transfer_config) is not None:
        found.append("layerwise KV cache reuse")
    if stock("enable_fa_quant")(vllm_config):
        found.append("quantised attention KV cache (FA quant)")
    return found


def uses_sfa(vllm_config: Any) -> bool:
    """vllm-ascend's ``enable_sfa(vllm_config)`` (the HF config's ``index_topk``,
    no DeepSeek V4 / kpool indexer), which selects V2's sparse branches."""
    return bool(stock("enable_sfa")(vllm_config))


def uses_dcp(vllm_config: Any) -> bool:
    """Decode context parallelism (``decode_context_parallel_size`` > 1), V2's DCP guard."""
    return (getattr(getattr(vllm_config, "parallel_config", None), "decode_context_parallel_size", 1) or 1) > 1


def packed_view_dtype(vllm_config: Any) -> Any:
    """The dtype V2 views a packed SFA main cache in: int8 for TurboQuant, else
    the ``--kv-cache-dtype``'s (``kv_cache_dtype_str_to_dtype``), as
    ``_reshape_kv_cache_v2`` (0.30)."""
    import torch

    cache_dtype = vllm_config.cache_config.cache_dtype
    if cache_dtype == stock("TURBOQUANT_CACHE_DTYPE"):
        return torch.int8
    return stock("kv_cache_dtype_str_to_dtype")(cache_dtype, vllm_config.model_config)


def _packed_reasons(vllm_config: Any, specs: dict[str, Any]) -> list[str]:
    """Packed SFA main caches V2 does not view as the ``sfa_packed`` strategy lays them out."""
    packed = [s for s in specs.values() if getattr(s, "uses_packed_sfa_main_cache", False)]
    if not packed:
        return []
    if not uses_sfa(vllm_config):
        return ["packed SFA main caches without sparse attention (SFA) in the model config (stock V2 splits them as MLA)"]
    dtype = packed_view_dtype(vllm_config)
    other = sorted({str(s.dtype) for s in packed if s.dtype != dtype})
    if other:
        return [f"packed SFA main caches of {', '.join(other)} viewed in the --kv-cache-dtype "
                f"{vllm_config.cache_config.cache_dtype!r} ({dtype})"]
    return []


def _spec_reasons(specs: dict[str, Any]) -> list[str]:
    found = []
    for spec in specs.values():
        name = type(spec).__name__
        if name not in BUILT_SPEC_CLASSES:
            found.append(name)
        elif any(getattr(spec, f, None) for f in _UNBUILT_FIELDS) or (getattr(spec, "tokens_per_state", 1) or 1) > 1:
            flags = [f for f in (*_UNBUILT_FIELDS, "tokens_per_state") if getattr(spec, f, None) not in (None, False, 0, 1)]
            found.append(f"{name} with {', '.join(flags)}")
        elif getattr(spec, "model_version", None) == "glm5_next":
            found.append("GLM-5-next KV cache")
    return found


def _tensor_reasons(vllm_config: Any, kv_cache_config: Any, specs: dict[str, Any]) -> list[str]:
    found = []
    if is_hybrid(kv_cache_config):
        if any(is_mla(s) for s in specs.values()):
            found.append("MLA in a hybrid backing ([pad | nope all | rope all])")
        return found
    if all(is_mamba(s) for s in specs.values()):
        return ["a Mamba-only model (stock V2 gives every layer of a KV cache tensor the same states)"]
    for tensor in kv_cache_config.kv_cache_tensors:
        served = [specs[n] for n in tensor.layers if n in specs]
        classes = {type(s).__name__ for s in served}
        if len(classes) > 1:
            found.append(f"a KV cache tensor of several spec classes ({', '.join(sorted(classes))})")
        elif served and split_form_by_class(served[0]) and len({s.page_size_bytes for s in served}) > 1:
            found.append(f"a KV cache tensor of {served[0].__class__.__name__} layers of different pages")
    combined = combined_kv_layers(vllm_config, kv_cache_config)
    for name, spec in specs.items():
        if name not in combined and spec.page_size_bytes != spec.real_page_size_bytes:
            found.append(f"padded pages of separate K/V ({type(spec).__name__})")
    return found


def split_form_by_class(spec: Any) -> bool:
    """Whether V2 gives the layer separate K and V whatever its backend (any
    attention spec but an exact ``FullAttentionSpec``)."""
    return type(spec).__name__ != "FullAttentionSpec"


def unbuilt_reason(vllm_config: Any, kv_cache_config: Any, kernel_block_sizes: list[int] | None = None) -> str | None:
    """What of this config the strategies do not build on V2 (stock builds it),
    named, or None. ``kernel_block_sizes``: per KV cache group (V2 leaves a
    group without one out of the cache)."""
    specs = layer_specs(kv_cache_config)
    found = _model_reasons(vllm_config) + _spec_reasons(specs)
    if not found:
        found = _packed_reasons(vllm_config, specs)
    if not found:
        found = _tensor_reasons(vllm_config, kv_cache_config, specs)
    if kernel_block_sizes is not None and len(kernel_block_sizes) < len(kv_cache_config.kv_cache_groups):
        found.append(f"KV cache groups without a kernel block size ({len(kernel_block_sizes)} sizes)")
    if not found:
        return None
    kinds = ", ".join(sorted({type(s).__name__ for s in specs.values()}))
    return f"Ascend Model Runner V2 layouts of {', '.join(dict.fromkeys(found))} ({kinds}) yet; stock builds them"


def combined_kv_layers(vllm_config: Any, kv_cache_config: Any, overlay: bool = False) -> frozenset[str]:
    """The layers V2 gives one buffer with K and V interleaved per kernel
    block outside hybrids: an exact ``FullAttentionSpec`` whose backend is
    not sparse and whose layer needs no contiguous PA cache, as
    ``_allocate_kv_cache`` selects them (0.30); none in a sparse attention
    (SFA) model or under decode context parallelism (V2's guards). In a
    hybrid, and in the plugin's ``overlay`` (:func:`overlay_refusal` passed),
    every non-MLA attention layer takes that form."""
    specs = layer_specs(kv_cache_config)
    if overlay or is_hybrid(kv_cache_config):
        return frozenset(n for n, s in specs.items() if not is_mamba(s) and not is_mla(s))
    if uses_sfa(vllm_config) or uses_dcp(vllm_config):
        return frozenset()
    layers = stock("get_layers_from_vllm_config")(vllm_config, stock("AttentionLayerBase"))
    out = set()
    for name, spec in specs.items():
        layer = layers.get(name)
        backend = layer.get_attn_backend() if layer is not None else None
        if split_form_by_class(spec) or is_mamba(spec):
            continue
        if (backend is None or not backend.is_sparse()) and not stock("requires_contiguous_pa_kv_cache")(layer, vllm_config, spec):
            out.add(name)
    return frozenset(out)


def overlay_refusal(vllm_config: Any, kv_cache_config: Any) -> str | None:
    """Why the plugin does not build vLLM's overlay of a multi-group config
    (no Mamba) on V2, or None where it does: one backing, each layer's region
    at ``offset + i x layer_stride``, every layer's K and V interleaved per
    kernel block with the physical page over the kernel blocks as pitch, the
    form V2 gives the attention layers of the hybrid backings it builds itself
    (``_allocate_kv_cache`` / ``_reshape_combined_attention_kv_cache``). Needs
    what V2's whole-model and spec branches leave to the generic path, no
    sparse attention (SFA) or DCP (V2 splits K and V there), and attention
    layers of one head size whose backend is dense and needs no contiguous
    paged-attention cache (``requires_contiguous_pa_kv_cache``)."""
    from vllm.v1.kv_cache_interface import AttentionSpec

    from vllm_kv_strategies.core.specs import head_size_v

    specs = layer_specs(kv_cache_config)
    found = _model_reasons(vllm_config) + _spec_reasons(specs) + _packed_reasons(vllm_config, specs)
    if found:
        return f"Ascend Model Runner V2 layouts of {', '.join(dict.fromkeys(found))} yet"
    if uses_sfa(vllm_config) or uses_dcp(vllm_config):
        return "sparse attention (SFA) or decode context parallelism (V2 gives their attention layers separate K and V)"
    layers = stock("get_layers_from_vllm_config")(vllm_config, stock("AttentionLayerBase"))
    for name, spec in specs.items():
        what, layer = f"layer {name!r} ({type(spec).__name__})", layers.get(name)
        if not isinstance(spec, AttentionSpec) or is_mla(spec) or head_size_v(spec) != spec.head_size:
            return f"{what}: only attention with K and V of one head size is overlaid (K|V interleaved per kernel block)"
        backend = layer.get_attn_backend() if layer is not None else None
        if backend is None or backend.is_sparse():
            return f"{what}: no dense attention backend"
        if stock("requires_contiguous_pa_kv_cache")(layer, vllm_config, spec):
            return f"{what}: its paged-attention kernels need contiguous K/V caches"
    return hybrid_stride_misfit(kv_cache_config)


def hybrid_stride_misfit(kv_cache_config: Any) -> str | None:
    """Why stock V2's ``_allocate_kv_cache`` raises on a hybrid config (and
    why the plugin's overlay does not fit V2's regions), or None: its tensors
    must share one backing size, and each layer needs
    ``layer_stride == num_blocks x page`` and ``block_stride == page``. Where
    each layer's region lies (and that regions meet only block by block) is
    :func:`vllm_kv_strategies.core.strided.layer_regions`."""
    specs = layer_specs(kv_cache_config)
    n = kv_cache_config.num_blocks
    sizes = {t.size for t in kv_cache_config.kv_cache_tensors}
    if len(sizes) != 1:
        return f"hybrid KV cache tensors of different sizes {sorted(sizes)} cannot share one backing"
    for tid, tensor in enumerate(kv_cache_config.kv_cache_tensors):
        for name in tensor.layers:
            page = specs[name].page_size_bytes
            if tensor.layer_stride != n * page or tensor.block_stride != page:
                return (
                    f"layer {name!r} ({type(specs[name]).__name__}) of KV cache tensor {tid}: layer_stride "
                    f"{tensor.layer_stride}, block_stride {tensor.block_stride}; the hybrid backing needs "
                    f"num_blocks {n} x page {page} = {n * page} and {page}"
                )
    return None
