"""vllm-ascend 0.30: the worker's KV cache budget step for multi-group models
(``NPUWorker._scale_kv_cache_memory_for_multi_group``), wrapped.

Stock scales the budget down so that its private per-layer buffers fit (by the
largest group's page bytes over the page bytes of all layers; 0.5 for gpt-oss,
about 1/6 for Gemma-3-27B). The wrapper decides, once, whether the plugin will
build vLLM's overlay instead (:mod:`.overlay`): from the config vLLM's (patched)
planner makes of the worker's own specs and budget, transformed as stock
transforms it before allocating, planned by the same allocation plan the
runner runs (V1: :meth:`~.runner.AscendAdapter.plan_runner`; Ascend's V2:
:meth:`~.runner_v2.AscendV2AllocationAdapter.plan_v2`) with every refusal it can
raise. Only an overlay plan leaves the budget unscaled; the decision is
recorded on the runner (:mod:`.budget`) and the allocation follows it.
"""

from __future__ import annotations

import sys
from typing import Any

from vllm_kv_strategies import patching
from vllm_kv_strategies.logger import PREFIX, logger, warn_once
from vllm_kv_strategies.platforms.adapter import RunnerAdapter
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.platforms.ascend.budget import OVERLAY_BUDGET, BudgetDecision, forget, record
from vllm_kv_strategies.platforms.ascend.releases import budget_code_mismatch
from vllm_kv_strategies.platforms.ascend.runner import AscendAdapter
from vllm_kv_strategies.platforms.ascend.runner_v2 import AscendV2AllocationAdapter
from vllm_kv_strategies.versions import Versions

__all__ = ["OVERLAY_BUDGET", "MultiGroupBudgetAdapter", "is_ascend_v2", "runner_name"]


class MultiGroupBudgetAdapter(RunnerAdapter):
    """Wraps ``NPUWorker._scale_kv_cache_memory_for_multi_group`` (vllm-ascend 0.30)."""

    target = facts.MULTI_GROUP_BUDGET

    def patch(self, module: Any) -> bool:
        """Patch only the published code (:func:`~vllm_kv_strategies.platforms.ascend.releases.budget_code_mismatch`)."""
        version = Versions.detect().vllm_ascend
        return self.patch_published(module, budget_code_mismatch(module, version) if version is not None else None)

    def replacements(self) -> dict[str, Any]:
        return {"NPUWorker._scale_kv_cache_memory_for_multi_group": self.scale}

    def scale(self, stock: Any, worker: Any, available_memory: int, *args: Any, **kwargs: Any) -> int:
        """Stock's budget, or ``available_memory`` unscaled where the plugin
        will build vLLM's overlay (one INFO line with stock's scale); the
        decision is recorded on the worker's runner (:mod:`.budget`)."""
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
        :meth:`~vllm_kv_strategies.platforms.ascend.runner.AscendAdapter.plan_runner`;
        Ascend's V2: :meth:`~vllm_kv_strategies.platforms.ascend.runner_v2.AscendV2AllocationAdapter.plan_v2`)
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
    return any(layout.regions for layout in AscendAdapter().plan_runner(runner, config, overlay=True).layouts)


def _v2_overlay(vllm_config: Any, config: Any) -> bool:
    """Whether Ascend Model Runner V2's allocation builds ``config`` as vLLM's overlay (raises its refusal)."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    shared = {name: target for name, layer in get_layers_from_vllm_config(vllm_config, AttentionLayerBase).items()
              if (target := getattr(layer, "kv_sharing_target_layer_name", None))}  # as allocate_kv_cache_main
    return AscendV2AllocationAdapter().plan_v2(vllm_config, config, shared, overlay=True).regions is not None
