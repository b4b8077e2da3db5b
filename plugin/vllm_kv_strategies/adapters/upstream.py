"""vLLM's V1 model runner (``GPUModelRunner``; the CPU runner inherits it).

The KV cache is what stock builds, by construction: the plugin calls the stock
``GPUModelRunner.initialize_kv_cache_tensors`` (vLLM's ``allocate_kv_cache``,
cross-layer sharing, kernel-block views, ``bind_kv_cache``) unchanged, and
adds what it adds around it: every layer's spec resolved to a strategy and its
page and tensor bounds checked before anything is allocated (the stock
fallback in ``auto``), the summary line and report, and the test-only fault.
``initialize_kv_cache`` is wrapped only to say which runner the worker is and
to warn when the KV cache was built without the plugin.
"""

from __future__ import annotations

from typing import Any

from ..compat import upstream as facts
from ..compat.specs import tensor_layers, tensor_num_blocks
from ..errors import KVCacheLayoutError, UnsupportedSpecError
from ..plan import KVCachePlan, plan_kv_cache
from .base import RunnerAdapter


def check_tensor_bounds(plan: KVCachePlan, layout: Any) -> None:
    """Every layer's views, in the resolved KV cache layout, stay inside its
    ``KVCacheTensor`` (vLLM 0.30+ strided tensors; checked with vLLM's own
    ``compute_layer_kv_cache_shape_bytes`` / ``compute_layout_strides`` from
    ``vllm/v1/kv_cache_interface.py``).

    Raises:
        KVCacheLayoutError: a layer's views would end past its tensor.
    """
    from vllm.v1.kv_cache_interface import compute_layer_kv_cache_shape_bytes, compute_layout_strides

    config = plan.kv_cache_config
    for tid, tensor in enumerate(plan.tensors):
        num_blocks = tensor_num_blocks(config, tensor)
        num_layers = len(tensor_layers(tensor))
        for lp in plan.layers_of(tid):
            if not getattr(lp.spec, "has_layer_views", True):
                continue
            shape = (num_layers, *compute_layer_kv_cache_shape_bytes(lp.spec, num_blocks))
            strides = compute_layout_strides(
                lp.spec, num_blocks, num_layers, layout,
                fixed_strides=(tensor.layer_stride, tensor.block_stride, None, None, None),
            )
            end = tensor.offset + sum((n - 1) * st for n, st in zip(shape, strides)) + 1
            if end > tensor.size:
                raise KVCacheLayoutError(
                    f"{lp.describe()}, page {lp.page_bytes} bytes: KV cache tensor {tid} (block stride "
                    f"{tensor.block_stride}, layer stride {tensor.layer_stride}, offset {tensor.offset}) needs "
                    f"{end} bytes for {num_blocks} blocks but has {tensor.size}"
                )


def plan_upstream(
    kv_cache_config: Any,
    hf_config: Any,
    forward_context: dict[str, Any],
    skip: set[str],
    layout: Any,
    *,
    bound_by_name: bool,
    cache_config: Any = None,
) -> KVCachePlan:
    """The plan of an upstream runner's config, checked before allocation.

    Args:
        hf_config: the model's HF text config (MLA dimensions).
        skip: layers the runner builds no cache for (runner-only layers,
            cross-layer KV sharing).
        bound_by_name: the runner binds every config layer by name (V1), so
            layers the model lacks fail there (checked here instead).
        cache_config: vLLM's ``CacheConfig`` (the ``--kv-cache-dtype`` name).

    Raises:
        UnsupportedSpecError: the cache dtype is a platform's own
            (:func:`vllm_kv_strategies.compat.upstream.custom_kv_cache_dtype`),
            or a layer's spec has no strategy.
        KVCacheLayoutError: see :func:`~vllm_kv_strategies.plan.plan_kv_cache`
            and :func:`check_tensor_bounds`.
    """
    custom = facts.custom_kv_cache_dtype(cache_config)
    if custom is not None:
        raise UnsupportedSpecError(
            f"no KV cache strategy for the platform-registered --kv-cache-dtype {custom!r} "
            "(KVQuantMode.CUSTOM): its page layout is the platform backend's"
        )
    plan = plan_kv_cache(
        kv_cache_config,
        RunnerAdapter.layer_dims(hf_config, forward_context),
        skip_layers=skip,
        model_layers=forward_context if bound_by_name else None,
    )
    check_tensor_bounds(plan, layout)
    return plan


class UpstreamV1Adapter(RunnerAdapter):
    target = facts.V1
    built_with_plan = "vllm_checked"  # vLLM's own allocation builds it; the plugin checked the plan first

    def replacements(self) -> dict[str, Any]:
        return {
            "GPUModelRunner.initialize_kv_cache_tensors": self.initialize_kv_cache_tensors,
            "GPUModelRunner.initialize_kv_cache": self.initialize_kv_cache,
        }

    def initialize_kv_cache_tensors(self, stock: Any, runner: Any, kv_cache_config: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Same signature and result as the stock method; see the module doc."""
        self.mark_built(runner)
        forward_context = runner.compilation_config.static_forward_context
        plan = None
        if not self.observing():
            skip = set(getattr(runner, "runner_only_attn_layers", ()) or ()) | set(runner.shared_kv_cache_layers)
            plan = self.plan_or_fallback(
                lambda: plan_upstream(
                    kv_cache_config, getattr(runner.model_config, "hf_text_config", None), forward_context, skip,
                    runner.cache_config.get_resolved_kv_cache_layout(), bound_by_name=True,
                    cache_config=runner.cache_config,
                )
            )
        kv_caches = stock(runner, kv_cache_config, *args, **kwargs)
        if plan is not None:
            self.inject_test_fault(plan, kv_caches, forward_context)
        self.report(plan, kv_caches, kv_cache_config, runner)
        return kv_caches

    def initialize_kv_cache(self, stock: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
        """Stock; afterwards, one warning if the KV cache was built by a path
        the plugin did not patch (a runner subclass overriding the build)."""
        return self.checked_initialize(stock, runner, "GPUModelRunner.initialize_kv_cache_tensors", *args, **kwargs)
