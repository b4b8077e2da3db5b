"""vllm-ascend 0.30's own Model Runner V2 (``vllm_ascend/worker/v2/``).

V2's ``allocate_kv_cache_main`` calls two functions of
``vllm_ascend.worker.v2.attn_utils`` by their module names at call time:
``_allocate_kv_cache`` (raw int8 buffers per layer) and
``_reshape_kv_cache_v2`` (typed views per layer). The plugin replaces both
(:data:`~vllm_kv_strategies.platforms.ascend.targets.ASCEND_V2_ALLOCATION`):
every layer is planned from its own spec by the strategies and checked
before anything is allocated, then laid out in V2's forms
(:mod:`vllm_kv_strategies.platforms.ascend.v2_layout`): private buffers per layer with
K|V interleaved per kernel block (pitch: the physical page over the kernel
blocks per block) or separate K/V (MLA: nope/rope; a packed SFA main cache
one ``(k,)`` buffer; an SFA indexer its key and scale in one buffer), and for hybrids one
backing with each layer's region at ``offset + i x layer_stride``, Mamba
states page-strided. What V2 lays out otherwise is refused by name and stock
builds it (one warning in ``auto``). The runner's ``initialize_kv_cache`` is
wrapped (:data:`~vllm_kv_strategies.platforms.ascend.targets.ASCEND_V2`) only to
warn when the cache was built without those functions (hisparse).

Allocation runs inside the caller's ``kv_cache_allocation_context`` (vLLM's
``init_kv_cache`` enters it around ``allocate_kv_cache``); with
``kv_transfer_config`` every allocation starts on a 2 MiB boundary, as V2's
``_allocate_int8_cache_tensor``.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from typing import Any

from vllm_kv_strategies import patching
from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.platforms.ascend import v2_layout as v2
from vllm_kv_strategies.platforms.ascend.releases import v2_code_mismatch
from vllm_kv_strategies.versions import Versions
from vllm_kv_strategies.errors import (
    NothingToBuildError,
    KVCacheLayoutError,
    StockWouldCorruptError,
    StockWouldFailError,
    UnsupportedSpecError,
)
from vllm_kv_strategies.platforms.ascend.layout.buffers import TensorLayout, allocation_bytes, layer_views, plan_layout
from vllm_kv_strategies.platforms.ascend.layout.interleaved_kv import interleaved_kv_views
from vllm_kv_strategies.core.strided import backing_bytes, layer_regions
from vllm_kv_strategies.logger import PREFIX, warn_once
from vllm_kv_strategies.core.plan import KVCachePlan, plan_kv_cache
from vllm_kv_strategies.core.strategies import LayoutFamily
from vllm_kv_strategies.platforms.ascend.allocate import allocate
from vllm_kv_strategies.platforms.ascend.budget import (
    check_within_budget,
    decision_of,
    dry_run_bytes,
    overlay_committed,
    unscaled_refusal,
)
from vllm_kv_strategies.platforms.adapter import RunnerAdapter

#: The V2 runner whose ``initialize_kv_cache`` is running; set to None once
#: the patched ``_reshape_kv_cache_v2`` ran for it.
_pending: list[Any] = []


@dataclass(frozen=True)
class V2Plan:
    """A checked plan and how V2 lays it out."""

    plan: KVCachePlan
    #: layers whose one buffer interleaves K and V per kernel block
    combined: frozenset[str]
    #: private buffers per layer (no hybrid), else empty
    layouts: list[TensorLayout]
    #: the hybrid backing's bytes and layer -> (start byte, bytes); None without a hybrid
    regions: tuple[int, dict[str, tuple[int, int]]] | None


def _building() -> Any:
    """The V2 runner whose ``initialize_kv_cache`` runs (its allocation is not done yet), or None."""
    return _pending[-1] if _pending else None


def _current_vllm_config() -> Any:
    """The ``VllmConfig`` V2's ``_allocate_kv_cache`` works on: what the
    ``get_current_vllm_config`` of its own module answers when it runs."""
    return v2.stock("get_current_vllm_config")()


def _config_for_report() -> Any:
    """The current ``VllmConfig`` for the summary line, or None where V2's
    module has none to give (the report then names no model)."""
    try:
        return _current_vllm_config()
    except Exception:
        return None


class AscendV2AllocationAdapter(RunnerAdapter):
    target = facts.ASCEND_V2_ALLOCATION

    def patch(self, module: Any) -> bool:
        """Patch only where the functions are those published as the installed
        release (:func:`~vllm_kv_strategies.platforms.ascend.releases.v2_code_mismatch`):
        ``auto`` leaves any other V2 stock with one warning; ``on`` and
        ``observe`` patch it, warning once."""
        version = Versions.detect().vllm_ascend
        return self.patch_published(module, v2_code_mismatch(module, version) if version is not None else None)

    def replacements(self) -> dict[str, Any]:
        return {"_allocate_kv_cache": self.allocate_kv_cache, "_reshape_kv_cache_v2": self.reshape_kv_cache}

    # -- planning ----------------------------------------------------------
    def plan_v2(
        self, vllm_config: Any, kv_cache_config: Any, shared_layers: dict[str, str], kernel_block_sizes: list[int] | None = None,
        overlay: bool = False,
    ) -> V2Plan:
        """Plan every layer and decide V2's layout before anything is allocated.
        A config overlaying KV cache groups (vLLM's planner, PR #51718) is
        built as that overlay (one backing, V2's hybrid regions, every
        attention layer K|V interleaved) where ``overlay`` (the worker left
        the budget unscaled for it) or ``--kv-cache-memory-bytes`` asks for it.

        Raises:
            UnsupportedSpecError: what V2 lays out otherwise (named,
                :func:`~vllm_kv_strategies.platforms.ascend.v2_layout.unbuilt_reason`).
            StockWouldFailError: a hybrid config V2 raises on too (strides
                other than ``num_blocks x page``, tensors of different sizes).
            KVCacheLayoutError: a strategy's parts do not fit a layer's page
                (:func:`~vllm_kv_strategies.core.plan.plan_kv_cache`); the overlay
                asked for is refused (:func:`~vllm_kv_strategies.platforms.ascend.v2_layout.overlay_refusal`).
        """
        if not facts.layer_specs(kv_cache_config):
            raise NothingToBuildError("the KV cache config names no layer")
        skip = set(shared_layers)
        hybrid = facts.is_hybrid(kv_cache_config)
        overlay = not hybrid and facts.overlays_groups(kv_cache_config, skip) and (
            overlay or bool(vllm_config.cache_config.kv_cache_memory_bytes))
        if overlay and (refused := v2.overlay_refusal(vllm_config, kv_cache_config)) is not None:
            raise KVCacheLayoutError(f"vLLM's overlay of {len(kv_cache_config.kv_cache_groups)} KV cache groups: {refused}")
        reason = None if overlay else v2.unbuilt_reason(vllm_config, kv_cache_config, kernel_block_sizes)
        if reason is None and (corrupt := facts.hybrid_corruption(kv_cache_config, padded_attention=False)) is not None:
            raise StockWouldCorruptError(f"the plugin refuses {corrupt}")
        if reason is not None:
            raise UnsupportedSpecError(f"the strategies do not build the {reason}")
        forward_context = vllm_config.compilation_config.static_forward_context
        model_config = vllm_config.model_config
        dims = self.layer_dims(getattr(model_config, "hf_text_config", None), forward_context, getattr(model_config, "dtype", None))
        combined = v2.combined_kv_layers(vllm_config, kv_cache_config, overlay)
        if hybrid or overlay:  # one backing (V2 lays hybrids out so; the plugin its overlay too)
            misfit = v2.hybrid_stride_misfit(kv_cache_config)
            if misfit is not None:
                raise StockWouldFailError(f"Ascend Model Runner V2 raises on this hybrid KV cache config too: {misfit}")
            plan = plan_kv_cache(kv_cache_config, dims, skip_layers=skip)
            n = kv_cache_config.num_blocks
            regions = layer_regions(kv_cache_config, {name: lp.spec.page_size_bytes for name, lp in plan.layers.items()})
            backing = (backing_bytes(kv_cache_config), {name: (start, n * page) for name, (start, page, _) in regions.items()})
            return V2Plan(plan, combined, [], backing)
        plan = plan_kv_cache(facts.private_layer_config(kv_cache_config, skip), dims, skip_layers=skip)
        layouts, _ = plan_layout(plan, coallocated=v2.COALLOCATED_GROUPS, interleaved_kv=combined)
        return V2Plan(plan, combined, layouts, None)

    def _decide(self, runner: Any, kv_cache_config: Any, shared_layers: dict[str, str],
                kernel_block_sizes: list[int] | None = None) -> V2Plan | None:
        """The plan, or None for "stock" (observe, or the fallback). The V2
        runner whose ``initialize_kv_cache`` runs carries its worker's budget
        decision: left unscaled for vLLM's overlay, it is planned as the
        overlay with no fallback (``UnscaledBudgetError`` in every mode)."""
        if self.observing():
            return None
        if runner is not None and overlay_committed(runner):
            try:
                return self.plan_v2(_current_vllm_config(), kv_cache_config, shared_layers, kernel_block_sizes, overlay=True)
            except Exception as exc:
                raise unscaled_refusal(runner, kv_cache_config, set(shared_layers), exc, "Ascend Model Runner V2") from exc
        return self.plan_or_fallback(
            lambda: self.plan_v2(_current_vllm_config(), kv_cache_config, shared_layers, kernel_block_sizes))

    # -- the replaced functions --------------------------------------------
    def allocate_kv_cache(self, stock: Any, kv_cache_config: Any, shared_layers: dict[str, str], device: Any) -> dict[str, Any]:
        """layer -> raw int8 buffer (``num_blocks x page`` bytes; in a hybrid
        its region of the one backing) or tuple of int8 buffers (K and V, nope
        and rope), every config layer but the KV sharing ones, as V2's
        ``_allocate_kv_cache`` (vllm_ascend/worker/v2/attn_utils.py, 0.30.0rc2);
        stock's own result where the strategies do not build the config.

        Raises:
            UnsupportedSpecError, KVCacheLayoutError: in ``on``, before
                anything is allocated (``auto`` falls back to stock).
            StockWouldFailError: in every mode (see :meth:`plan_v2`).
            KVCacheAllocationError: the device has not the bytes.
        """
        runner = _building()
        decided = self._decide(runner, kv_cache_config, shared_layers)
        if decided is None:
            if runner is not None and decision_of(runner) is not None:  # stock's bytes, measured on the meta device
                nbytes, buffers = dry_run_bytes(lambda meta: stock(copy.deepcopy(kv_cache_config), shared_layers=shared_layers, device=meta))
                check_within_budget(runner, nbytes, buffers, "stock's KV cache build (Ascend Model Runner V2)", _current_vllm_config())
            return stock(kv_cache_config, shared_layers=shared_layers, device=device)
        vllm_config = _current_vllm_config()
        align = vllm_config.kv_transfer_config is not None
        if decided.regions is None:
            check_within_budget(runner, *allocation_bytes(decided.layouts), "the plugin's KV cache layout (Ascend Model Runner V2)", vllm_config)
            return allocate(decided.layouts, device, align)
        size, regions = decided.regions
        check_within_budget(runner, size, 1, "the plugin's KV cache layout (Ascend Model Runner V2)", vllm_config)
        layers = tuple(decided.plan.layers.values())
        backing = allocate([TensorLayout(0, layers, (size,), True)], device, align)[layers[0].name]
        return {name: backing[start : start + nbytes] for name, (start, nbytes) in regions.items() if name in decided.plan.layers}

    def reshape_kv_cache(
        self,
        stock: Any,
        attn_groups: Any,
        kv_cache_raw_tensors: dict[str, Any],
        cache_dtype: str,
        kernel_block_sizes: list[int],
        shared_kv_cache_layers: dict[str, str],
        kv_cache_config: Any = None,
    ) -> dict[str, Any]:
        """layer -> its views, as V2's ``_reshape_kv_cache_v2``
        (vllm_ascend/worker/v2/attn_utils.py, 0.30.0rc2): a ``(K, V)`` tuple,
        each ``(num_blocks x r, kernel block, heads, head size)`` in the spec's
        dtype (interleaved K|V with the physical page over ``r`` as dim-0
        pitch, or contiguous), ``(nope, rope)`` for MLA, a list of Mamba state
        views ``(num_blocks, *state)`` with a one-page dim-0 stride; KV sharing
        layers aliased to their targets. Logs the summary line (and writes
        the report) of what was built, by the plugin or by stock.

        Raises:
            KVCacheLayoutError: a layer in no attention group, or a block size
                that is not a multiple of its group's kernel block size.
        """
        runner = _building()
        if _pending:
            _pending[-1] = None
        decided = None if kv_cache_config is None else self._decide(runner, kv_cache_config, shared_kv_cache_layers, kernel_block_sizes)
        if decided is None:
            kv_caches = stock(
                attn_groups=attn_groups, kv_cache_raw_tensors=kv_cache_raw_tensors, cache_dtype=cache_dtype,
                kernel_block_sizes=kernel_block_sizes, shared_kv_cache_layers=shared_kv_cache_layers,
                kv_cache_config=kv_cache_config,
            )
        else:
            kv_caches = self._views(decided, attn_groups, kv_cache_raw_tensors, cache_dtype, kernel_block_sizes)
            for layer_name, target in shared_kv_cache_layers.items():
                kv_caches[layer_name] = kv_caches[target]
            self.inject_test_fault(decided.plan, kv_caches)
        self.report(None if decided is None else decided.plan, kv_caches, kv_cache_config, _config_for_report())
        return kv_caches

    @staticmethod
    def _views(
        decided: V2Plan, attn_groups: Any, raws: dict[str, Any], cache_dtype: str, kernel_block_sizes: list[int]
    ) -> dict[str, Any]:
        n = decided.plan.kv_cache_config.num_blocks
        groups = {name: group for group in attn_groups for name in group.layer_names}
        kv_caches: dict[str, Any] = {}
        for name, lp in decided.plan.layers.items():
            group = groups.get(name)
            if group is None:
                raise KVCacheLayoutError(f"{lp.describe()} is in no attention group of the runner")
            if lp.family is LayoutFamily.STATES:  # [conv_j | ssm_j | pad] at j x page
                kv_caches[name] = layer_views(lp, raws[name], n, None, interleaved=True)
                continue
            kernel = kernel_block_sizes[group.kv_cache_group_id]
            if not kernel or lp.spec.block_size % kernel:
                raise KVCacheLayoutError(f"{lp.describe()}: block size {lp.spec.block_size} is not a multiple of the kernel block size {kernel}")
            if name in decided.combined:
                shape = facts.kv_interleaved_shape(group.backend, lp.spec, n, kernel, cache_dtype)
                pitch = lp.padded_page_bytes // (lp.spec.block_size // kernel) // lp.spec.dtype.itemsize
                kv_caches[name] = interleaved_kv_views(raws[name], lp.spec.dtype, shape, pitch)
            else:
                kv_caches[name] = tuple(layer_views(lp, raws[name], n, kernel))
        return kv_caches


class AscendV2Adapter(RunnerAdapter):
    """Ascend's V2 ``NPUModelRunner.initialize_kv_cache``, called unchanged;
    afterwards one warning when the patched allocation did not build the
    cache (a path around ``allocate_kv_cache``: hisparse)."""

    target = facts.ASCEND_V2

    def replacements(self) -> dict[str, Any]:
        return {"NPUModelRunner.initialize_kv_cache": self.initialize_kv_cache}

    def initialize_kv_cache(self, stock: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
        _pending.append(runner)
        try:
            result = stock(runner, *args, **kwargs)
        finally:
            built = _pending.pop() is None
        attn_utils = sys.modules.get(facts.ASCEND_V2_ALLOCATION.module)
        if not built and attn_utils is not None and patching.is_patched(attn_utils):
            warn_once(
                f"{PREFIX} {type(runner).__qualname__} (Ascend Model Runner V2) built its KV cache without "
                f"{facts.ASCEND_V2_ALLOCATION.describe()}: the plugin did nothing in this worker"
            )
        return result
