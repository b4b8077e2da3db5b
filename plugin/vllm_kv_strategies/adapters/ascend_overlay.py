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

Here the budget step decides, from the config vLLM's (patched) planner makes of
the worker's own specs and budget, whether the plugin will build the overlay
(:func:`overlay_plan`, the same function the allocation runs). Only then is the
budget left unscaled, and the runner is marked (:data:`OVERLAY_BUDGET`): its
allocation builds the overlay or raises
:class:`~vllm_kv_strategies.errors.UnscaledBudgetError` in every mode, since
stock's private buffers would need several times the budget. Otherwise the
budget is stock's (scaled) and the runner builds stock's per-layer form.
"""

from __future__ import annotations

from typing import Any

from .. import patching
from ..compat import ascend as facts
from ..compat.ascend_releases import budget_code_mismatch
from ..compat.matrix import Installed
from ..errors import KVCacheLayoutError, UnscaledBudgetError
from ..layout.ascend import TensorLayout
from ..layout.budget import check_within_config
from ..layout.strided import backing_bytes, layer_regions
from ..logger import PREFIX, logger, warn_once
from ..plan import KVCachePlan
from ..strategies import LayoutFamily
from .base import RunnerAdapter

#: Set on a runner whose worker left the KV cache budget unscaled for the overlay.
OVERLAY_BUDGET = "_kv_strategies_overlay_budget"


def overlay_wanted(runner: Any) -> bool:
    """Whether ``runner``'s config must be built as vLLM's overlay: its worker
    left the budget unscaled for it, or the budget was never scaled
    (``--kv-cache-memory-bytes``: stock's worker skips the scaling there and its
    private buffers exceed the budget)."""
    return bool(vars(runner).get(OVERLAY_BUDGET)) or bool(runner.vllm_config.cache_config.kv_cache_memory_bytes)


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
        UnscaledBudgetError: either, where the budget was left unscaled for the overlay.
    """
    try:
        reason = facts.overlay_refusal(runner, kv_cache_config)
        if reason is not None:
            raise KVCacheLayoutError(f"vLLM's overlay of {len(kv_cache_config.kv_cache_groups)} KV cache groups: {reason}")
        n = kv_cache_config.num_blocks
        pages = {name: lp.padded_page_bytes for name, lp in plan.layers.items()}
        regions = layer_regions(kv_cache_config, pages)
        shapes = {  # attention layers: K|V interleaved per kernel block; Mamba states page by page
            name: facts.interleaved_kv_shape(runner, name, lp.spec, n, kernel.get(name, lp.spec.block_size))
            for name, lp in plan.layers.items() if lp.family is LayoutFamily.PER_PART
        }
    except (KVCacheLayoutError, ValueError) as exc:
        if not vars(runner).get(OVERLAY_BUDGET):
            raise
        need = facts.private_bytes(kv_cache_config, set(getattr(runner, "runner_only_attn_layers", ()) or ()))
        raise UnscaledBudgetError(
            f"the KV cache budget was left unscaled for the plugin's overlay, which it cannot build ({exc}); stock's "
            f"per-layer buffers would need {need} bytes for a {backing_bytes(kv_cache_config)}-byte plan. Set "
            "KV_STRATEGIES=off to run stock (its worker then scales the budget)"
        ) from exc
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
        will build vLLM's overlay (one INFO line with stock's scale)."""
        scaled = stock(worker, available_memory, *args, **kwargs)
        runner = getattr(worker, "model_runner", None)
        if scaled >= available_memory or runner is None or self.observing():
            return scaled
        vars(runner).pop(OVERLAY_BUDGET, None)
        reason = self.refusal(worker, runner, available_memory)
        if reason is not None:
            warn_once(f"{PREFIX} stock's multi-group KV cache budget scale ({scaled / available_memory:.4f}) stays: {reason}")
            return scaled
        vars(runner)[OVERLAY_BUDGET] = True
        logger.info(
            "%s KV cache budget left unscaled (stock scales it by %.4f for per-layer buffers): the plugin builds vLLM's "
            "overlay of the KV cache groups in one backing", PREFIX, scaled / available_memory,
        )
        return available_memory

    @staticmethod
    def refusal(worker: Any, runner: Any, available_memory: int) -> str | None:
        """Why the budget stays scaled: the runner's KV cache build is not the
        plugin's, or :func:`overlay_plan` refuses the config vLLM's planner makes
        of the worker's specs and ``available_memory``."""
        from vllm.v1.core import kv_cache_utils  # looked up now: vllm-ascend's patched planner

        from .ascend import AscendAdapter

        owner = next((cls for cls in type(runner).__mro__ if "initialize_kv_cache_tensors" in vars(cls)), None)
        if owner is None or owner.__module__ != facts.target().module or not patching.is_patched(owner):
            return f"{type(runner).__qualname__}'s KV cache build is not the plugin's (it stays stock)"
        try:
            groups = kv_cache_utils.get_kv_cache_groups(worker.vllm_config, worker.get_kv_cache_spec())
            config = kv_cache_utils.get_kv_cache_config_from_groups(worker.vllm_config, groups, available_memory)
            AscendAdapter().plan_runner(runner, config, overlay=True)
        except Exception as exc:  # any refusal keeps stock's budget
            return str(exc)
        return None
