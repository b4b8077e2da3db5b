"""Never beyond the config: the bytes a layout allocates, checked against the
``KVCacheTensor`` s vLLM planned, and the named refusal of a hybrid tensor
whose attention and Mamba blocks do not line up (vllm-ascend #13853).

vLLM sizes ``num_blocks`` so that the config's tensors fit in the memory it
measured; a layout that allocates more can run out of memory where the planner
said it fits. :func:`check_within_config` compares the plan's raw buffer bytes
(:attr:`~vllm_kv_strategies.platforms.ascend.layout.buffers.TensorLayout.buffer_bytes`) with
the sum of ``KVCacheTensor.size`` before anything is allocated. The 2 MiB that
each raw buffer is over-allocated by when ``kv_transfer_config`` is set (for a
2 MiB aligned ``data_ptr``) is not counted: stock vllm-ascend's
``_align_memory`` over-allocates its raw buffers the same way, and the config's
bytes are what the views use.

Sizes are integer bytes unless named tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn

from vllm_kv_strategies.errors import BeyondConfigError, StockWouldCorruptError
from vllm_kv_strategies.core.plan import LayerPlan
from vllm_kv_strategies.core.strategies import LayoutFamily

__all__ = ["aligned_block_size", "check_within_config", "refuse_unaligned_hybrid"]


def check_within_config(layouts: Iterable[Any], kv_cache_config: Any) -> int:
    """The bytes ``layouts`` allocate (without transfer alignment padding),
    checked to be at most the sum of ``kv_cache_config.kv_cache_tensors``
    sizes.

    Args:
        layouts: :class:`~vllm_kv_strategies.platforms.ascend.layout.buffers.TensorLayout` s.
        kv_cache_config: the config they lay out (vLLM's ``KVCacheConfig``).

    Returns:
        the bytes planned.

    Raises:
        BeyondConfigError: the layouts need more bytes than the config's
            tensors hold; the message names both sums and the layers of the
            largest layout.
    """
    layouts = list(layouts)
    budget = sum(t.size for t in kv_cache_config.kv_cache_tensors)
    planned = sum(sum(lo.buffer_bytes) for lo in layouts)
    if planned > budget:
        largest = max(layouts, key=lambda lo: sum(lo.buffer_bytes))
        raise BeyondConfigError(
            f"the layout would allocate {planned} bytes in {sum(len(lo.buffer_bytes) for lo in layouts)} raw buffers, "
            f"more than the {budget} bytes of the config's {len(kv_cache_config.kv_cache_tensors)} KV cache tensors "
            f"(largest: KV cache tensor {largest.tensor_id}, {sum(largest.buffer_bytes)} bytes for "
            f"{', '.join(lp.describe() for lp in largest.layers)})"
        )
    return planned


def aligned_block_size(layers: Iterable[LayerPlan]) -> int | None:
    """The attention block size (tokens) at which the K page of every
    attention layer equals the largest state of every Mamba layer (the
    sizing vllm-ascend 0.18+'s ``patch_mamba_config.verify_and_update_config``
    computes: ``ssm bytes / K bytes per token``), or None when the layers do
    not give one whole number."""
    sizes = set()
    attn = [lp for lp in layers if lp.family is LayoutFamily.PER_PART]
    states = [lp for lp in layers if lp.family is LayoutFamily.STATES]
    for a in attn:
        k_token, rest = divmod(a.parts[0].nbytes, a.spec.block_size)
        for m in states:
            ssm = max(p.nbytes for p in m.parts)
            if rest or not k_token or ssm % k_token:
                return None
            sizes.add(ssm // k_token)
    return sizes.pop() if len(sizes) == 1 else None


def refuse_unaligned_hybrid(
    tid: int, layers: tuple[LayerPlan, ...], size: int, num_blocks: int, stock_shares_hybrid: bool
) -> NoReturn:
    """Refuse a ``KVCacheTensor`` of ``size`` bytes shared by attention and
    Mamba layers whose blocks do not line up in one buffer (no placement
    inside the tensor keeps block j of every layer within block j's bytes),
    typically a ``--block-size`` larger than the aligned one, which
    vllm-ascend 0.18+ keeps (``patch_mamba_config`` only raises a smaller
    one). The attention layers' K/V buffers of their own would exceed the
    config, so the plugin refuses by name before allocating.

    Raises:
        StockWouldCorruptError: ``stock_shares_hybrid`` (0.18+): stock views
            every layer in the one buffer and would alias attention block j
            with other blocks of the Mamba layers; raised in every mode.
        BeyondConfigError: otherwise (0.11 / 0.13: stock gives the attention
            layers buffers of their own, beyond the config; ``auto`` falls
            back to it).
    """
    attn = [lp for lp in layers if lp.family is LayoutFamily.PER_PART]
    states = [lp for lp in layers if lp.family is LayoutFamily.STATES]
    a, m = attn[0], states[0]
    own = size + num_blocks_of(size, a) * a.page_bytes  # the Mamba buffer + K/V aliased by every attention layer
    aligned = aligned_block_size(layers)
    advice = (
        f"leave --block-size unset or set it to {aligned} (the block size whose K page equals the largest Mamba state)"
        if aligned
        else "leave --block-size unset (the hybrid sizing then aligns the attention page with the Mamba page)"
    )
    what = (
        f"KV cache tensor {tid} ({size} bytes, {num_blocks} blocks) is shared by attention and Mamba layers whose "
        f"blocks do not line up: {a.describe()} has a block of {a.spec.block_size} tokens (K page {a.parts[0].nbytes} "
        f"bytes), {m.describe()} has a largest state of {max(p.nbytes for p in m.parts)} bytes"
    )
    if stock_shares_hybrid:
        raise StockWouldCorruptError(
            f"{what}; stock vllm-ascend views them all in one buffer, where attention block j lies on other blocks of "
            f"the Mamba layers (silent corruption, vllm-ascend #13853), and K/V buffers of their own would take "
            f"{own} bytes where the config planned {size}: {advice}"
        )
    raise BeyondConfigError(
        f"{what}; K/V buffers of their own would take {own} bytes where the config planned {size} (the plugin never "
        f"allocates beyond the config; stock vllm-ascend does): {advice}"
    )


def num_blocks_of(size: int, lp: LayerPlan) -> int:
    """Blocks of ``lp`` a tensor of ``size`` bytes holds (whole padded pages)."""
    return size // lp.padded_page_bytes
