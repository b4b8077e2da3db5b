"""The check every upstream runner (V1 up to vLLM 0.33, V2) runs on its
``KVCacheConfig`` before anything is allocated, and ``plan`` runs for it: a
strategy for every layer's spec, the parts adding up to the page, every view
inside its tensor."""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.plan import KVCachePlan, plan_kv_cache
from vllm_kv_strategies.core.specs import tensor_layers, tensor_num_blocks
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError
from vllm_kv_strategies.platforms.adapter import RunnerAdapter
from vllm_kv_strategies.platforms.upstream import facts


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
            (:func:`vllm_kv_strategies.platforms.upstream.facts.custom_kv_cache_dtype`),
            or a layer's spec has no strategy.
        KVCacheLayoutError: see :func:`~vllm_kv_strategies.core.plan.plan_kv_cache`
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
