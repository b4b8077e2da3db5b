"""Pages packed per kernel block (:attr:`~vllm_kv_strategies.core.strategies.LayoutFamily.PACKETS`):
each packet of ``pitch`` bytes holds its parts back to back, each part
contiguous inside it (vllm-ascend 0.30's C8 MXFP cache,
:mod:`vllm_kv_strategies.core.strategies.c8_mxfp`)."""

from __future__ import annotations

import math
from typing import Any

from vllm_kv_strategies.errors import KVCacheLayoutError


def packet_views(raw: Any, parts: tuple, num_packets: int, pitch: int) -> list[Any]:
    """One view per part of ``raw`` (1-D int8): part j of packet i starts at
    ``i * pitch`` + the bytes of the parts before it, shaped ``(num_packets,
    *part.shape)`` with dim 0 strided by ``pitch`` bytes and the rest
    contiguous. Mirrors vllm-ascend 0.30's ``mxfp_paged_cache_views``.

    Raises:
        KVCacheLayoutError: the parts exceed ``pitch``, ``raw`` holds fewer than
            ``num_packets`` packets, or a part is not aligned to its dtype.
    """
    used = sum(p.nbytes for p in parts)
    if used > pitch or raw.numel() < num_packets * pitch:
        raise KVCacheLayoutError(
            f"{num_packets} packets of {pitch} bytes ({used} used) do not fit a {raw.numel()}-byte buffer"
        )
    views, offset = [], 0
    for p in parts:
        size = p.dtype.itemsize
        if offset % size or pitch % size:
            raise KVCacheLayoutError(f"part {p.name} at byte {offset} of a {pitch}-byte packet is not {p.dtype}-aligned")
        typed = raw[: raw.numel() - raw.numel() % size].view(p.dtype)
        inner = tuple(math.prod(p.shape[i + 1 :]) for i in range(len(p.shape)))
        views.append(typed.as_strided((num_packets, *p.shape), (pitch // size, *inner), typed.storage_offset() + offset // size))
        offset += p.nbytes
    return views


def packet_layer_views(lp: Any, raw: Any, num_blocks: int, kernel_block_size: int | None) -> list[Any]:
    """A ``PACKETS`` layer's views in its strategy's ``view_order``: ``raw``
    holds ``num_blocks`` pages, each ``block_size / kernel_block_size`` packets
    of the strategy's ``packet_parts(spec, kernel_block_size)``.

    Raises:
        KVCacheLayoutError: the kernel block does not divide the block or the
            page (see also :func:`packet_views`).
    """
    spec = lp.spec
    kb = kernel_block_size or spec.block_size
    ratio = spec.block_size // kb
    if spec.block_size % kb or spec.page_size_bytes % ratio:
        raise KVCacheLayoutError(
            f"{lp.describe()}: block {spec.block_size} tokens / page {spec.page_size_bytes} bytes do not split into "
            f"{kb}-token kernel blocks"
        )
    parts = lp.strategy.packet_parts(spec, kb)
    views = dict(zip((p.name for p in parts), packet_views(raw, parts, num_blocks * ratio, spec.page_size_bytes // ratio)))
    return [views[name] for name in lp.strategy.view_order]
