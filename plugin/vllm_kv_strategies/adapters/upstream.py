"""vLLM's own model runner (``GPUModelRunner``; the CPU runner inherits it).

Replaces ``GPUModelRunner.initialize_kv_cache_tensors`` for vLLM releases with
strided ``KVCacheTensor`` s (0.30+; what differs between 0.30, 0.31 and 0.32 is
in :mod:`vllm_kv_strategies.compat`). The result is what stock builds
(``vllm/v1/worker/utils.py::allocate_kv_cache``): one backing int8 allocation
of the config's size, each layer a ``[B, H, N, C]`` view placed by its tensor's
offset, layer stride and block stride in the resolved KV cache layout (vLLM's
``create_kv_cache_views``), cross-layer KV sharing by aliasing, then vLLM's
``bind_kv_cache``. What the plugin adds: each layer's strategy is resolved from
its own spec and its page checked before anything is allocated, the summary
line, and the stock fallback.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from .. import compat
from ..errors import KVCacheLayoutError
from ..plan import KVCachePlan
from ..report import log_summary
from .base import RunnerAdapter, allocate_bytes


def allocate_upstream(
    plan: KVCachePlan,
    device: torch.device,
    layout: Any,
    kernel_block_sizes: list[int] | None,
) -> dict[str, torch.Tensor]:
    """Allocate the backing buffer and view it per layer, as vLLM 0.30+ does.

    Returns:
        layer name -> ``[B, H, N, C]`` view in the spec's dtype (int8 raw page
        for specs without a dtype, e.g. Mamba), or the raw buffer for specs
        without layer views.

    Raises:
        KVCacheLayoutError: the tensors disagree on the backing size, or a
            block stride is smaller than a layer's page.
    """
    from vllm.v1.kv_cache_interface import (
        compute_layer_kv_cache_shape_bytes,
        compute_layout_strides,
        create_kv_cache_views,
    )

    tensors = plan.tensors
    if not tensors:
        return {}
    sizes = {t.size for t in tensors}
    if len(sizes) != 1:
        raise KVCacheLayoutError(f"KV cache tensors describe backing allocations of sizes {sorted(sizes)}, not one")
    config = plan.kv_cache_config
    # Check every tensor before allocating anything.
    for tid, tensor in enumerate(tensors):
        num_blocks = compat.tensor_num_blocks(config, tensor)
        num_layers = len(compat.tensor_layers(tensor))
        for lp in plan.layers_of(tid):
            if not getattr(lp.spec, "has_layer_views", True):
                continue
            # The bytes the layer views will touch, in any layout (head-major
            # layouts have block strides smaller than a page).
            shape = (num_layers, *compute_layer_kv_cache_shape_bytes(lp.spec, num_blocks))
            strides = compute_layout_strides(
                lp.spec, num_blocks, num_layers, layout,
                fixed_strides=(tensor.layer_stride, tensor.block_stride, None, None, None),
            )
            end = tensor.offset + sum((n - 1) * st for n, st in zip(shape, strides)) + 1
            if end > tensor.size:
                raise KVCacheLayoutError(
                    f"layer {lp.name!r} ({type(lp.spec).__name__}, {lp.strategy.name}, page {lp.page_bytes} "
                    f"bytes): KV cache tensor {tid} (block stride {tensor.block_stride}, layer stride "
                    f"{tensor.layer_stride}, offset {tensor.offset}) needs {end} bytes for {num_blocks} "
                    f"blocks but has {tensor.size}"
                )
    buf = allocate_bytes(sizes.pop(), device, "all layers (one backing allocation)")
    kv_caches: dict[str, torch.Tensor] = {}
    for tid, tensor in enumerate(tensors):
        layers = plan.layers_of(tid)
        if not layers:
            continue
        lp = layers[0]
        if not getattr(lp.spec, "has_layer_views", True):
            kv_caches.update((name, buf) for name in compat.tensor_layers(tensor))
            continue
        kernel_block_size = None
        if kernel_block_sizes is not None and lp.group_id < len(kernel_block_sizes):
            kernel_block_size = kernel_block_sizes[lp.group_id]
        kernel_block_size = compat.view_kernel_block_size(lp.spec, kernel_block_size)
        views = create_kv_cache_views(
            buf, lp.spec, compat.tensor_num_blocks(config, tensor), layout, tensor, kernel_block_size=kernel_block_size
        )
        kv_caches.update(zip(compat.tensor_layers(tensor), views))
    return kv_caches


class UpstreamAdapter(RunnerAdapter):
    target = compat.UPSTREAM_TARGET
    runner_attrs = (
        "device",
        "cache_config",
        "model_config",
        "shared_kv_cache_layers",
        "attn_groups",
        "speculative_config",
        "compilation_config",
        "kv_caches",
    )

    def replacements(self) -> dict[str, Any]:
        return {"initialize_kv_cache_tensors": self.initialize_kv_cache_tensors}

    def initialize_kv_cache_tensors(
        self,
        stock: Any,
        runner: Any,
        kv_cache_config: Any,
        kernel_block_sizes: list[int],
        kv_cache_allocation_context: Any = None,
    ) -> dict[str, torch.Tensor]:
        """Same signature and result as the stock method; see the module doc."""
        plan = self.plan_or_fallback(runner, kv_cache_config)
        if plan is None:
            return stock(runner, kv_cache_config, kernel_block_sizes, kv_cache_allocation_context)
        with kv_cache_allocation_context or nullcontext():
            kv_caches = allocate_upstream(
                plan, runner.device, runner.cache_config.get_resolved_kv_cache_layout(), kernel_block_sizes
            )
        for layer_name, target in runner.shared_kv_cache_layers.items():
            kv_caches[layer_name] = kv_caches[target]
        self.inject_test_fault(plan, kv_caches)

        # longcat_flash puts two attention modules in one decoder layer.
        num_attn_module = 2 if runner.model_config.hf_config.model_type == "longcat_flash" else 1
        attn_groups = [g for groups in runner.attn_groups for g in groups]
        if runner.speculative_config:
            attn_groups += getattr(runner.drafter, "draft_attn_groups", [])
        compat.bind_upstream_kv_cache(
            kv_caches,
            runner.compilation_config.static_forward_context,
            runner.kv_caches,
            num_attn_module,
            kv_cache_config.kv_cache_groups,
            compat.kernel_block_layer_views(kv_caches, attn_groups),
        )
        log_summary(plan, kv_caches)
        return kv_caches
