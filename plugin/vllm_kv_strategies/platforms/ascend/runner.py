"""vllm-ascend's ``NPUModelRunner`` (module ``vllm_ascend.worker.model_runner_v1``).

Replaces the runner's KV cache initialisation, whatever the release calls it
(:func:`vllm_kv_strategies.platforms.ascend.facts.target`): from 0.13
``initialize_kv_cache_tensors`` and its two halves, ``_allocate_kv_cache_tensors``
(raw int8 buffers per layer) and ``_reshape_kv_cache_tensors`` (typed views per
layer); in 0.11 the three complete initialisations ``initialize_kv_cache``
chooses from (general, DeepSeek MLA, DeepSeek sparse). Any caller of any of
them gets the strategies' result, laid out by
:mod:`vllm_kv_strategies.platforms.ascend.layout.buffers` and checked there before anything is
allocated. On 0.30 (vLLM's strided ``KVCacheTensor``) the config is first
laid out per layer as stock 0.30 does
(:mod:`vllm_kv_strategies.platforms.ascend.strided`: private buffers, plain full
attention with K|V interleaved per kernel block), kernel blocks are split as
the caller passes them, and allocation runs inside the caller's
``kv_cache_allocation_context``; what 0.30 lays out otherwise is refused by
name and stock builds it.

With ``kv_transfer_config`` set every raw buffer's ``data_ptr`` is a multiple
of 2 MiB (over-allocated by 2 MiB and sliced); without it nothing is padded.
Attention views go through the runner's format cast where the release has one
(0.11); no other release's stock casts a KV cache view, and neither does the
plugin (:func:`~vllm_kv_strategies.platforms.ascend.facts.format_converter`). Binding keeps every layer: all of them are in
``runner.kv_caches`` (ordered by layer index, then as the config lists them)
and bound to their attention modules, also draft/MTP layers that share a layer
index with a target layer, which the binder vllm-ascend 0.23 installs
(``patch_qwen3_next_mtp.py``) drops from ``runner.kv_caches``.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from vllm_kv_strategies.platforms.ascend import facts
from vllm_kv_strategies.platforms.ascend.releases import code_mismatch
from vllm_kv_strategies.versions import Versions
from vllm_kv_strategies.errors import (
    NothingToBuildError,
    StockWouldCorruptError,
    StockWouldFailError,
    UnscaledBudgetError,
    UnsupportedSpecError,
)
from vllm_kv_strategies.platforms.ascend.layout.buffers import (
    TensorLayout,
    allocation_bytes,
    layer_views,
    plan_layout,
)
from vllm_kv_strategies.platforms.ascend.layout.interleaved_kv import interleaved_kv_views
from vllm_kv_strategies.core.plan import KVCachePlan, plan_kv_cache
from vllm_kv_strategies.core.strategies import LayoutFamily
from vllm_kv_strategies.core.strategies.bsh_attention import restate_bsh
from vllm_kv_strategies.core.strategies.sparse_mla import normalize_legacy_specs
from vllm_kv_strategies.platforms.ascend.binding import bind_every_layer
from vllm_kv_strategies.platforms.ascend.budget import (
    TRANSFER_ALIGNMENT,  # noqa: F401  (tests and callers read it here)
    check_within_budget,
    overlay_committed,
    stock_within_budget,
    unscaled_refusal,
)
from vllm_kv_strategies.platforms.ascend.overlay import overlay_plan, overlay_wanted
from vllm_kv_strategies.platforms.adapter import RunnerAdapter
from vllm_kv_strategies.platforms.ascend.allocate import allocate


@dataclass(frozen=True)
class AscendPlan:
    """A checked plan and its raw buffer layout."""

    plan: KVCachePlan
    layouts: list[TensorLayout]
    hybrid: bool
    #: layer -> the kernel block size its attention views are split into
    kernel_block_sizes: dict[str, int]
    #: layer -> the backend's (2, rows, ...) shape of its interleaved K|V (0.30)
    kv_shapes: dict[str, tuple[int, ...]]


def _argument(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    """A stock method's optional argument ``name``, given by keyword or as the
    ``index``-th argument after the config (vllm-ascend 0.28+:
    ``initialize_kv_cache_tensors(config, kernel_block_sizes=None,
    kv_cache_allocation_context=None)``, ``_reshape_kv_cache_tensors(config,
    raws, kernel_block_sizes=None)``); None when not given."""
    return kwargs.get(name, args[index] if len(args) > index else None)


class AscendAdapter(RunnerAdapter):
    @property
    def target(self):  # type: ignore[override]
        return facts.target()

    def patch(self, module: Any) -> bool:
        """Patch the runner only where its code is the published release's
        (:func:`~vllm_kv_strategies.platforms.ascend.releases.code_mismatch`): in
        ``auto`` a changed install stays stock with one warning; ``on`` and
        ``observe`` patch it, warning once."""
        version = Versions.detect().vllm_ascend
        return self.patch_published(module, code_mismatch(module, version) if version is not None else None)

    def replacements(self) -> dict[str, Any]:
        """The installed release's methods: each complete initialisation (0.11
        has three) or one of the two halves."""
        by_name = {
            "NPUModelRunner._allocate_kv_cache_tensors": self.allocate_kv_cache_tensors,
            "NPUModelRunner._reshape_kv_cache_tensors": self.reshape_kv_cache_tensors,
            "NPUModelRunner.initialize_kv_cache": self.initialize_kv_cache,
        }
        return {name: by_name.get(name, self.initialize_kv_cache_tensors) for name in self.target.attributes}

    # -- planning ----------------------------------------------------------
    def plan_runner(self, runner: Any, kv_cache_config: Any, kernel_block_sizes: list[int] | None = None,
                    overlay: bool = False) -> AscendPlan:
        """Plan and lay out every layer of ``runner``'s config before anything is
        allocated; raises (see :func:`~vllm_kv_strategies.platforms.ascend.layout.buffers.plan_layout`)
        if that is not possible. ``kernel_block_sizes``: per KV cache group,
        as vllm-ascend 0.30 passes them (else the runner's own). A 0.30 config
        overlaying KV cache groups is built as vLLM's overlay where ``overlay``
        or the worker's budget step asked for it (:mod:`.overlay`)."""
        given = kv_cache_config
        specs = facts.layer_specs(kv_cache_config)  # the config restated once: layer -> its own spec
        if not specs:
            raise NothingToBuildError("the KV cache config names no layer")
        hybrid = facts.is_hybrid(kv_cache_config, specs)  # 0.30: overlaid by stock itself, its budget unscaled
        strided = facts.strided_form(kv_cache_config)  # 0.30: buffers of its own per layer, or vLLM's overlay
        reason = facts.stock_only_kind(runner, kv_cache_config)  # 0.30's own paths, named as stock decides them
        if reason is None and hybrid and (corrupt := facts.hybrid_corruption(kv_cache_config)) is not None:
            raise StockWouldCorruptError(f"the plugin refuses {corrupt}")
        reason = reason or facts.stock_only_reason(runner, list(specs), specs) or (
            facts.strided_layout_gap(runner, kv_cache_config, specs, hybrid) if strided else None)
        if reason is not None:
            raise UnsupportedSpecError(f"the strategies do not build the {reason}")
        facts.binds_per_virtual_engine()  # asked of vLLM here, so a binder it cannot read falls back
        forward_context = runner.compilation_config.static_forward_context
        model_config = runner.model_config
        dims = self.layer_dims(getattr(model_config, "hf_text_config", None), forward_context, getattr(model_config, "dtype", None))
        if getattr(runner, "use_sparse", False) and facts.legacy_sparse_form():
            kv_cache_config = normalize_legacy_specs(kv_cache_config, dims, facts.LEGACY_INDEX_HEAD_DIM)
        if facts.bsh_int8_layout(runner):
            kv_cache_config = restate_bsh(kv_cache_config)
        if kv_cache_config is not given:  # restated: ask its own specs and form
            specs, strided = facts.layer_specs(kv_cache_config), facts.strided_form(kv_cache_config)
        runner_only = set(getattr(runner, "runner_only_attn_layers", ()) or ())
        plan = plan_kv_cache(
            facts.private_layer_config(kv_cache_config, runner_only) if strided else kv_cache_config,
            dims,
            skip_layers=runner_only,
            model_layers=forward_context,
        )
        if strided:
            kernel = facts.kernel_block_sizes_by_layer(runner, kv_cache_config, kernel_block_sizes)
            if hybrid or (facts.overlays_groups(kv_cache_config, runner_only) and (overlay or overlay_wanted(runner))):
                layout, shapes = overlay_plan(runner, kv_cache_config, plan, kernel, specs)
                return AscendPlan(plan, [layout], hybrid, kernel, shapes)
            interleaved = facts.interleaved_kv_layers(runner, kv_cache_config)
        else:
            kernel, interleaved = self._kernel_block_sizes(runner), frozenset()
        layouts, hybrid = plan_layout(
            plan, facts.mamba_states_interleaved(), kernel, facts.stock_shares_buffers(), facts.coallocated_groups(), interleaved,
            facts.stock_shares_hybrid_tensors(),
        )
        n = plan.kv_cache_config.num_blocks
        shapes = {  # asked of the backends now, so a shape they do not give falls back before allocating
            name: facts.interleaved_kv_shape(runner, name, plan.layers[name].spec, n,
                                             kernel.get(name, plan.layers[name].spec.block_size))
            for name in interleaved if name in plan.layers and plan.layers[name].family is LayoutFamily.PER_PART
        }
        return AscendPlan(plan, layouts, hybrid, kernel, shapes)

    def _decide(self, runner: Any, kv_cache_config: Any, kernel_block_sizes: list[int] | None = None) -> AscendPlan | None:
        """The plan, or None for "stock" (observe, fallback, or inside stock).

        A runner whose worker left the budget unscaled for vLLM's overlay
        (:func:`~vllm_kv_strategies.platforms.ascend.budget.overlay_committed`)
        is planned as the overlay with no fallback: any refusal raises
        :class:`~vllm_kv_strategies.errors.UnscaledBudgetError` in every mode,
        since stock's private buffers would exceed the budget."""
        if self.observing() or self.building_stock(runner):
            return None
        if overlay_committed(runner):
            return self._committed_overlay(runner, kv_cache_config, kernel_block_sizes)
        return self.plan_or_fallback(lambda: self.plan_runner(runner, kv_cache_config, kernel_block_sizes))

    def _committed_overlay(self, runner: Any, kv_cache_config: Any, kernel_block_sizes: list[int] | None) -> AscendPlan:
        try:
            return self.plan_runner(runner, kv_cache_config, kernel_block_sizes, overlay=True)
        except UnscaledBudgetError:
            raise
        except Exception as exc:
            skip = set(getattr(runner, "runner_only_attn_layers", ()) or ())
            raise unscaled_refusal(runner, kv_cache_config, skip, exc, self.target.runner) from exc

    @staticmethod
    def _kernel_block_sizes(runner: Any) -> dict[str, int]:
        """layer -> the attention backend's kernel block size, where the runner
        splits blocks (``use_hybrid_blocks``)."""
        if not getattr(runner, "use_hybrid_blocks", False):
            return {}
        sizes = {}
        for group in runner._kv_cache_spec_attn_group_iterator():
            size = facts.kernel_block_size(group.backend)
            if size is not None:
                sizes.update((name, size) for name in group.layer_names)
        return sizes

    # -- the replaced methods ----------------------------------------------
    def allocate_kv_cache_tensors(self, stock: Any, runner: Any, kv_cache_config: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """layer -> raw int8 buffer, or a tuple of raw buffers (one per part).
        Stock gets every argument it was called with."""
        decided = self._decide(runner, kv_cache_config)
        if decided is None:
            if not self.building_stock(runner):  # inside stock's build, its initialisation checked it
                stock_within_budget(lambda config: stock(runner, config, *args, **kwargs), runner, kv_cache_config, self.target.runner)
            return stock(runner, kv_cache_config, *args, **kwargs)
        runner.hybrid_with_attn_and_mamba = decided.hybrid
        check_within_budget(runner, *allocation_bytes(decided.layouts), f"the plugin's KV cache layout ({self.target.runner})")
        return allocate(decided.layouts, runner.device, runner.vllm_config.kv_transfer_config is not None)

    def reshape_kv_cache_tensors(
        self, stock: Any, runner: Any, kv_cache_config: Any, raws: dict[str, Any], *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """layer -> tuple of attention part views, list of Mamba state views,
        or one plain view. Stock gets every argument it was called with
        (0.30's ``kernel_block_sizes`` too)."""
        decided = self._decide(runner, kv_cache_config, _argument(args, kwargs, 0, "kernel_block_sizes"))
        if decided is None:
            return stock(runner, kv_cache_config, raws, *args, **kwargs)
        return self._views(runner, decided, raws)

    def initialize_kv_cache(self, stock: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
        """Stock; afterwards, one warning if the KV cache was built without the
        patched initialisation (``NPUModelRunner310`` overrides it on 310P)."""
        return self.checked_initialize(stock, runner, "NPUModelRunner.initialize_kv_cache_tensors", *args, **kwargs)

    def initialize_kv_cache_tensors(self, stock: Any, runner: Any, kv_cache_config: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Allocate, view, share across layers and bind every layer. The
        stock build gets every argument it was called with (vllm-ascend 0.28+
        pass ``kernel_block_sizes`` and ``kv_cache_allocation_context``)."""
        self.mark_built(runner)
        decided = self._decide(runner, kv_cache_config, _argument(args, kwargs, 0, "kernel_block_sizes"))
        if decided is None:
            allocate_stock = getattr(type(runner), "_allocate_kv_cache_tensors", None)
            with self.stock_build(runner):
                if allocate_stock is not None:  # 0.13+: its allocation half, measured before stock allocates
                    stock_within_budget(lambda config: allocate_stock(runner, config), runner, kv_cache_config, self.target.runner)
                kv_caches = stock(runner, kv_cache_config, *args, **kwargs)
            self.report(None, kv_caches, kv_cache_config, runner)
            return kv_caches
        runner.hybrid_with_attn_and_mamba = decided.hybrid
        # sleep mode's pool on releases that pass it (0.28+), as stock allocates there
        check_within_budget(runner, *allocation_bytes(decided.layouts), f"the plugin's KV cache layout ({self.target.runner})")
        context = _argument(args, kwargs, 1, "kv_cache_allocation_context")
        with context if context is not None else nullcontext():
            raws = allocate(decided.layouts, runner.device, runner.vllm_config.kv_transfer_config is not None)
        kv_caches = self._views(runner, decided, raws)
        for layer_name, target in (getattr(runner, "shared_kv_cache_layers", None) or {}).items():
            kv_caches[layer_name] = kv_caches[target]
        fill_v_scales = getattr(runner, "_fill_c8_mxfp_v_scale_caches", None)
        if fill_v_scales is not None:  # 0.30 calls it on every build (it records no cache but C8 MXFP's)
            fill_v_scales(kv_caches)
        self.inject_test_fault(decided.plan, kv_caches)
        # longcat_flash (0.30: and longcat_flash_ngram) put two attention modules in one decoder layer (as stock).
        num_attn_module = 2 if runner.model_config.hf_text_config.model_type in facts.TWO_ATTENTION_MODULES else 1
        bind_every_layer(kv_caches, runner.compilation_config.static_forward_context, runner.kv_caches, num_attn_module)
        self.report(decided.plan, kv_caches, kv_cache_config, runner)
        return kv_caches

    def _views(self, runner: Any, decided: AscendPlan, raws: dict[str, Any]) -> dict[str, Any]:
        plan = decided.plan
        kernel = decided.kernel_block_sizes
        # page by page in vLLM's overlay (0.30) and on 0.11; else state after state
        interleaved = facts.mamba_states_interleaved() or any(layout.regions for layout in decided.layouts)
        kv_page = {lp.name: layout.kv_page for layout in decided.layouts for lp in layout.layers}
        convert = facts.format_converter(runner)  # 0.11's cast; stock casts no view on 0.13+
        kv_caches: dict[str, Any] = {}
        for name, lp in plan.layers.items():
            if name in decided.kv_shapes:
                kv_caches[name] = interleaved_kv_views(raws[name], lp.spec.dtype, decided.kv_shapes[name])
                continue
            views = layer_views(
                lp, raws[name], plan.kv_cache_config.num_blocks, kernel.get(name), interleaved, kv_page.get(name)
            )
            if convert is not None and lp.family is LayoutFamily.PER_PART:  # as 0.11's runner: attention views only
                views = [convert(v) for v in views]
            kv_caches[name] = {
                LayoutFamily.PER_PART: tuple,
                LayoutFamily.STATES: list,
                LayoutFamily.PLAIN: lambda v: v[0],
                LayoutFamily.PACKETS: tuple,
            }[lp.family](views)
        return kv_caches

