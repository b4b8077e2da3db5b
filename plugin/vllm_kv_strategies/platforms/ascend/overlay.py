"""vllm-ascend 0.30: multi-group models laid out as vLLM plans them (the
worker's budget step that decides it: :mod:`.worker_budget`).

vLLM's planner (PR #51718) overlays the KV cache groups of a model in one
backing: gpt-oss (sliding + full attention) or Gemma 3 (5 sliding : 1 full)
serve one layer of every group from each region. Stock vllm-ascend 0.30 gives
every layer a private buffer instead, and so that these fit its worker scales
the budget down (``NPUWorker._scale_kv_cache_memory_for_multi_group``: by the
largest group's page bytes over the page bytes of all layers; 0.5 for
gpt-oss, about 1/6 for Gemma-3-27B): the engine then plans that many fewer
blocks.

Here the budget step decides, once, whether the plugin will build the overlay:
from the config vLLM's (patched) planner makes of the worker's own specs and
budget, transformed as stock's ``initialize_kv_cache`` transforms it before
allocating (:func:`~vllm_kv_strategies.platforms.ascend.stock_only.config_as_allocated`:
the layerwise-reuse plan, KV sharing layers), planned by the same
:meth:`~vllm_kv_strategies.platforms.ascend.runner.AscendAdapter.plan_runner` the
allocation runs, with every refusal it can raise. Only an overlay plan leaves
the budget unscaled. The decision is recorded on the runner
(:mod:`.budget`), and the allocation follows it: a runner left unscaled
builds the overlay or raises
:class:`~vllm_kv_strategies.errors.UnscaledBudgetError` in every mode, since
stock's private buffers would need several times the budget. Otherwise the
budget is stock's (scaled) and the runner builds stock's per-layer form.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.platforms.ascend.layout.buffers import TensorLayout
from vllm_kv_strategies.platforms.ascend.layout.budget import check_within_config
from vllm_kv_strategies.core.strided import backing_bytes, layer_regions
from vllm_kv_strategies.core.plan import KVCachePlan
from vllm_kv_strategies.core.strategies import LayoutFamily
from vllm_kv_strategies.platforms.ascend.budget import overlay_committed

__all__ = ["overlay_plan", "overlay_wanted"]


def overlay_wanted(runner: Any) -> bool:
    """Whether ``runner``'s config must be built as vLLM's overlay: its worker
    left the budget unscaled for it, or the budget was never scaled
    (``--kv-cache-memory-bytes``: stock's worker skips the scaling there and its
    private buffers exceed the budget)."""
    return overlay_committed(runner) or bool(runner.vllm_config.cache_config.kv_cache_memory_bytes)


def overlay_plan(
    runner: Any, kv_cache_config: Any, plan: KVCachePlan, kernel: dict[str, int], specs: dict[str, Any]
) -> tuple[TensorLayout, dict[str, tuple[int, ...]]]:
    """One backing of the config's size; each layer a region of ``num_blocks``
    pages at ``offset + l * layer_stride``, viewed as K|V interleaved per kernel
    block (the backend's ``(2, rows, ...)`` shape). ``plan``: the strategies'
    per-layer plan (each page checked); ``kernel``: layer -> kernel block size; ``specs``:
    the config's :func:`~.strided.layer_specs`. The caller
    (:meth:`~.runner.AscendAdapter.plan_runner`) has refused what the strategies do not build.

    Returns:
        the layout (:attr:`TensorLayout.regions`) and layer -> K|V shape.

    Raises:
        KVCacheLayoutError: :func:`~vllm_kv_strategies.platforms.ascend.strided.overlay_form_refusal`
            gives a reason, or the regions do not fit (:func:`~vllm_kv_strategies.core.strided.layer_regions`).
    """
    reason = facts.overlay_form_refusal(runner, kv_cache_config, specs)
    if reason is not None:
        raise KVCacheLayoutError(f"vLLM's overlay of {len(kv_cache_config.kv_cache_groups)} KV cache groups: {reason}")
    n = kv_cache_config.num_blocks
    pages = {name: lp.padded_page_bytes for name, lp in plan.layers.items()}
    try:
        regions = layer_regions(kv_cache_config, pages)
        shapes = {  # attention layers: K|V interleaved per kernel block; Mamba states page by page
            name: facts.interleaved_kv_shape(runner, name, lp.spec, n, kernel.get(name, lp.spec.block_size))
            for name, lp in plan.layers.items() if lp.family is LayoutFamily.PER_PART
        }
    except ValueError as exc:
        raise KVCacheLayoutError(f"vLLM's overlay of {len(kv_cache_config.kv_cache_groups)} KV cache groups: {exc}") from exc
    layers = tuple(plan.layers.values())
    layout = TensorLayout(0, layers, (backing_bytes(kv_cache_config),), True,
                          regions=tuple((regions[lp.name][0], n * pages[lp.name]) for lp in layers))
    check_within_config([layout], kv_cache_config)  # one backing: never beyond the config
    return layout, shapes
