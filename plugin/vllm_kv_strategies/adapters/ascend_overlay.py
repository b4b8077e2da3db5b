"""vllm-ascend 0.30: multi-group models laid out as vLLM plans them, and the
worker's KV cache budget left unscaled for them.

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
allocating (:func:`~vllm_kv_strategies.compat.ascend_stock_only.config_as_allocated`:
the layerwise-reuse plan, KV sharing layers), planned by the same
:meth:`~vllm_kv_strategies.adapters.ascend.AscendAdapter.plan_runner` the
allocation runs, with every refusal it can raise. Only an overlay plan leaves
the budget unscaled. The decision is recorded on the runner
(:mod:`.ascend_budget`), and the allocation follows it: a runner left unscaled
builds the overlay or raises
:class:`~vllm_kv_strategies.errors.UnscaledBudgetError` in every mode, since
stock's private buffers would need several times the budget. Otherwise the
budget is stock's (scaled) and the runner builds stock's per-layer form.
"""

from __future__ import annotations

import sys
from typing import Any

from .. import patching
from ..compat import ascend as facts
from ..compat.ascend_releases import budget_code_mismatch
from ..compat.matrix import Installed
from ..errors import KVCacheLayoutError
from ..layout.ascend import TensorLayout
from ..layout.budget import check_within_config
from ..layout.strided import backing_bytes, layer_regions
from ..logger import PREFIX, logger, warn_once
from ..plan import KVCachePlan
from ..strategies import LayoutFamily
from .ascend_budget import OVERLAY_BUDGET, BudgetDecision, forget, overlay_committed, record
from .base import RunnerAdapter

__all__ = ["OVERLAY_BUDGET", "MultiGroupBudgetAdapter", "overlay_plan", "overlay_wanted"]


def overlay_wanted(runner: Any) -> bool:
    """Whether ``runner``'s config must be built as vLLM's overlay: its worker
    left the budget unscaled for it, or the budget was never scaled
    (``--kv-cache-memory-bytes``: stock's worker skips the scaling there and its
    private buffers exceed the budget)."""
    return overlay_committed(runner) or bool(runner.vllm_config.cache_config.kv_cache_memory_bytes)


def overlay_plan(
    runner: Any, kv_cache_config: Any, plan: KVCachePlan, kernel: dict[str, int]
) -> tuple[TensorLayout, dict[str, tuple[int, ...]]]:
    """One backing of the config's size; each layer a region of ``num_blocks``
    pages at ``offset + l * layer_stride``, viewed as K|V interleaved per kernel
    block (the backend's ``(2, rows, ...)`` shape). ``plan``: the strategies'
    per-layer plan (each page checked); ``kernel``: layer -> kernel block size.

    Returns:
        the layout (:attr:`TensorLayout.regions`) and layer -> K|V shape.

    Raises:
        KVCacheLayoutError: :func:`~vllm_kv_strategies.compat.ascend_strided.overlay_refusal`
            gives a reason, or the regions do not fit (:func:`~vllm_kv_strategies.layout.strided.layer_regions`).
    """
    reason = facts.overlay_refusal(runner, kv_cache_config)
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


class MultiGroupBudgetAdapter(RunnerAdapter):
    """Wraps ``NPUWorker._scale_kv_cache_memory_for_multi_group`` (vllm-ascend 0.30)."""

    target = facts.MULTI_GROUP_BUDGET

    def patch(self, module: Any) -> bool:
        """Patch only the published code (:func:`~vllm_kv_strategies.compat.ascend_releases.budget_code_mismatch`)."""
        version = Installed.detect().vllm_ascend
        return self.patch_published(module, budget_code_mismatch(module, version) if version is not None else None)

    def replacements(self) -> dict[str, Any]:
        return {"NPUWorker._scale_kv_cache_memory_for_multi_group": self.scale}

    def scale(self, stock: Any, worker: Any, available_memory: int, *args: Any, **kwargs: Any) -> int:
        """Stock's budget, or ``available_memory`` unscaled where the plugin
        will build vLLM's overlay (one INFO line with stock's scale); the
        decision is recorded on the worker's runner (:mod:`.ascend_budget`)."""
        scaled = stock(worker, available_memory, *args, **kwargs)
        runner = getattr(worker, "model_runner", None)
        if runner is None or self.observing():
            return scaled
        forget(runner)
        if scaled >= available_memory:
            record(runner, BudgetDecision(available_memory, scaled, overlay=False))
            return scaled
        reason = self.refusal(worker, runner, available_memory)
        if reason is not None:
            record(runner, BudgetDecision(available_memory, scaled, overlay=False, reason=reason))
            warn_once(f"{PREFIX} stock's multi-group KV cache budget scale ({scaled / available_memory:.4f}) stays: {reason}")
            return scaled
        record(runner, BudgetDecision(available_memory, available_memory, overlay=True))
        logger.info(
            "%s KV cache budget left unscaled (stock scales it by %.4f for per-layer buffers): the plugin builds vLLM's "
            "overlay of the KV cache groups in one backing (%s)", PREFIX, scaled / available_memory, runner_name(runner),
        )
        return available_memory

    @staticmethod
    def refusal(worker: Any, runner: Any, available_memory: int) -> str | None:
        """Why the budget stays scaled: the runner's KV cache build is not the
        plugin's, or the allocation's own plan (V1:
        :meth:`~vllm_kv_strategies.adapters.ascend.AscendAdapter.plan_runner`;
        Ascend's V2: :meth:`~vllm_kv_strategies.adapters.ascend_v2.AscendV2AllocationAdapter.plan_v2`)
        of the config vLLM's planner makes of the worker's specs and
        ``available_memory``, transformed as stock transforms it before
        allocating, refuses it or is not the overlay."""
        from vllm.v1.core import kv_cache_utils  # looked up now: vllm-ascend's patched planner

        v2 = is_ascend_v2(runner)
        if v2:
            allocation = sys.modules.get(facts.ASCEND_V2_ALLOCATION.module)
            built_by_plugin = allocation is not None and patching.is_patched(allocation)
        else:
            owner = next((cls for cls in type(runner).__mro__ if "initialize_kv_cache_tensors" in vars(cls)), None)
            built_by_plugin = owner is not None and owner.__module__ == facts.target().module and patching.is_patched(owner)
        if not built_by_plugin:
            return f"{runner_name(runner)}'s KV cache build is not the plugin's (it stays stock)"
        try:
            groups = kv_cache_utils.get_kv_cache_groups(worker.vllm_config, worker.get_kv_cache_spec())
            config = kv_cache_utils.get_kv_cache_config_from_groups(worker.vllm_config, groups, available_memory)
            config = facts.config_as_allocated(runner, config)
            overlaid = _v2_overlay(worker.vllm_config, config) if v2 else _v1_overlay(runner, config)
        except Exception as exc:  # any refusal keeps stock's budget
            return str(exc)
        if not overlaid:
            return "the allocation would not build vLLM's overlay of this config (stock's per-layer buffers need the scaled budget)"
        return None


def is_ascend_v2(runner: Any) -> bool:
    """Whether ``runner`` is Ascend's Model Runner V2 (``vllm_ascend.worker.v2.model_runner``)."""
    return any(cls.__module__ == facts.ASCEND_V2.module for cls in type(runner).__mro__)


def runner_name(runner: Any) -> str:
    """``runner``'s class and which runner it is: ``NPUModelRunner (V1)`` or ``NPUModelRunner (Ascend V2)``."""
    kind = "Ascend V2" if is_ascend_v2(runner) else "V1" if type(runner).__module__ == facts.target().module else "not vllm-ascend's"
    return f"{type(runner).__qualname__} ({kind})"


def _v1_overlay(runner: Any, config: Any) -> bool:
    """Whether ``NPUModelRunner``'s allocation builds ``config`` as vLLM's overlay (raises its refusal)."""
    from .ascend import AscendAdapter

    return any(layout.regions for layout in AscendAdapter().plan_runner(runner, config, overlay=True).layouts)


def _v2_overlay(vllm_config: Any, config: Any) -> bool:
    """Whether Ascend Model Runner V2's allocation builds ``config`` as vLLM's overlay (raises its refusal)."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    from .ascend_v2 import AscendV2AllocationAdapter

    shared = {name: target for name, layer in get_layers_from_vllm_config(vllm_config, AttentionLayerBase).items()
              if (target := getattr(layer, "kv_sharing_target_layer_name", None))}  # as allocate_kv_cache_main
    return AscendV2AllocationAdapter().plan_v2(vllm_config, config, shared, overlay=True).regions is not None
