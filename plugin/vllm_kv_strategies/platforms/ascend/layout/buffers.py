"""The Ascend KV cache layout: raw buffers per ``KVCacheTensor`` and the typed
views of each layer, decided and checked before anything is allocated.

Per :class:`~vllm_kv_strategies.core.strategies.LayoutFamily` of the layers a
tensor serves:

* ``PER_PART`` (attention): one raw buffer per page part (K and V; nope and
  rope; plus the indexer key cache), each viewed with num_blocks as dim 0,
  because vllm-ascend's KV transfer engines register them one by one. Every
  layer of the tensor aliases those buffers, each in its own shape and kernel
  block size; what must match between them is the bytes per block of each
  part, not the shape (the block pool gives a block to one KV cache group at a
  time, so aliasing under the same block index is safe). Parts of a group the
  release co-allocates (0.23: the LI C8 indexer key and scale) are slices of
  one buffer; a part of several sub-blocks per block (DCP-replicated indexer)
  is viewed with ``num_blocks x sub-blocks`` as dim 0.
* ``STATES`` (Mamba): one raw buffer of the tensor's size, states placed by
  byte offset, state after state (0.13+) or block-interleaved (0.11).
* ``PLAIN`` (hidden-state cache): one raw buffer viewed as one tensor.
* attention and Mamba layers in one tensor (Qwen3.5 / Qwen3-Next, vllm-ascend
  PR #6887): one buffer, Mamba states from byte 0 and the attention parts
  packed at its end, when that is block-consistent (0.18+ sizing: page = 2 K
  pages + conv); or, where the Mamba page is 2 K pages and the largest state
  is one K page (:mod:`.hybrid_kv`: the placement and the sizing that gives
  it, vllm-ascend 0.11 / 0.13), the states inside the K/V blocks of their own
  index: the largest aliases K block j, the others fill the start of V block
  j. Otherwise the tensor is refused by name before anything is allocated
  (:func:`.budget.refuse_unaligned_hybrid`): buffers of their own for the
  attention layers would exceed the config.

Every layout is checked to allocate no more than the config's
``KVCacheTensor`` s hold (:func:`.budget.check_within_config`).

Sizes are integer bytes; every error names the layer, its spec and the sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vllm_kv_strategies.errors import KVCacheLayoutError, StockWouldCorruptError
from vllm_kv_strategies.core.plan import KVCachePlan, LayerPlan
from vllm_kv_strategies.core.strategies import LayoutFamily
from vllm_kv_strategies.platforms.ascend.layout.budget import check_within_config, refuse_unaligned_hybrid
from vllm_kv_strategies.platforms.ascend.layout.coallocation import buffer_slices, coallocated_runs
from vllm_kv_strategies.platforms.ascend.layout.hybrid_kv import Region, state_regions_in_kv, states_in_kv_page
from vllm_kv_strategies.platforms.ascend.layout.packets import packet_layer_views
from vllm_kv_strategies.core.strided import crosses_blocks

__all__ = ["TensorLayout", "allocation_bytes", "buffer_slices", "coallocated_runs", "layer_views", "part_regions", "plan_layout"]


@dataclass(frozen=True)
class TensorLayout:
    """Raw buffers for (some of) the layers of one ``KVCacheTensor``.

    Attributes:
        tensor_id: index of the ``KVCacheTensor``.
        layers: the layers that alias these buffers.
        buffer_bytes: bytes of each raw buffer.
        single: one buffer viewed as all parts (Mamba states, the hidden-state
            cache, attention packed at its end), else one buffer per part.
        kv_page: the K page in bytes where the Mamba states lie inside the K/V
            blocks (:func:`states_in_kv_page`), else None.
        kv_interleaved: one attention layer's buffer with K and V interleaved
            per kernel block (vllm-ascend 0.30's plain full attention,
            :func:`~vllm_kv_strategies.platforms.ascend.layout.interleaved_kv.interleaved_kv_views`).
        regions: see the field.
    """

    tensor_id: int
    layers: tuple[LayerPlan, ...]
    buffer_bytes: tuple[int, ...]
    single: bool
    #: per-part layouts: how many consecutive parts each raw buffer holds
    #: (:func:`coallocated_runs`); empty: one buffer per part.
    runs: tuple[int, ...] = ()
    kv_page: int | None = None
    kv_interleaved: bool = False
    #: one backing shared by all ``layers``: each layer's (start, bytes) in
    #: it (vLLM's overlay of KV cache groups, :mod:`.strided`); empty: none.
    regions: tuple[tuple[int, int], ...] = ()


def allocation_bytes(layouts: list[TensorLayout]) -> tuple[int, int]:
    """``(bytes, raw buffers)`` that allocating ``layouts`` takes (without
    transfer alignment padding): one buffer per layout of vLLM's overlay
    (:attr:`TensorLayout.regions`), else one per :func:`buffer_slices` entry."""
    sizes: list[int] = []
    for lo in layouts:
        sizes.extend([lo.buffer_bytes[0]] if lo.regions else [n for n, _ in buffer_slices(lo)])
    return sum(sizes), len(sizes)


def part_regions(
    lp: LayerPlan, num_blocks: int, nbytes: int, interleaved: bool, kv_page: int | None = None
) -> list[Region]:
    """Where each part of ``lp`` lies in one raw buffer of ``nbytes`` bytes
    viewed as ``num_blocks`` blocks (the single-buffer layout): attention parts
    packed at the end, Mamba states from byte 0 (state after state, or
    block-interleaved with a one-page stride), a plain part from byte 0. With
    ``kv_page`` (:func:`states_in_kv_page`) Mamba states lie inside the K/V
    blocks instead: the largest at K block j, the others from the start of V
    block j, each with a block stride of ``kv_page``."""
    regions = []
    if lp.family is LayoutFamily.PER_PART:
        offset = nbytes - num_blocks * lp.page_bytes
        for p in lp.parts:
            regions.append((offset, p.nbytes, p.nbytes))
            offset += num_blocks * p.nbytes
        return regions
    if kv_page is not None and lp.family is LayoutFamily.STATES:
        return state_regions_in_kv(lp.parts, num_blocks, nbytes, kv_page)
    offset = 0
    for p in lp.parts:
        regions.append((offset, lp.padded_page_bytes if interleaved else p.nbytes, p.nbytes))
        offset += p.nbytes if interleaved else num_blocks * p.nbytes
    return regions


def shares_block_consistently(
    layers: tuple[LayerPlan, ...], num_blocks: int, nbytes: int, interleaved: bool, kv_page: int | None = None
) -> bool:
    """Whether attention and Mamba layers can alias one buffer of ``nbytes``
    (the single-buffer layout, :func:`part_regions` with ``kv_page``) without
    any byte mapping to different blocks."""
    regions = {lp.name: part_regions(lp, num_blocks, nbytes, interleaved, kv_page) for lp in layers}
    attn = [r for lp in layers if lp.family is LayoutFamily.PER_PART for r in regions[lp.name]]
    states = [r for lp in layers if lp.family is not LayoutFamily.PER_PART for r in regions[lp.name]]
    return not any(crosses_blocks(a, m, num_blocks) for a in attn for m in states)


def check_kernel_blocks(lp: LayerPlan, kernel_block_size: int | None) -> None:
    """A layer whose blocks the runner splits into kernel blocks needs a
    kernel block size that divides its block size.

    Raises:
        KVCacheLayoutError: the kernel block size exceeds the block size (no
            view fits it) or does not divide it.
    """
    if not kernel_block_size or lp.family is not LayoutFamily.PER_PART:
        return
    block = lp.spec.block_size
    if kernel_block_size > block or block % kernel_block_size:
        raise KVCacheLayoutError(
            f"{lp.describe()}: block size {block} tokens cannot be viewed in the attention backend's "
            f"{kernel_block_size}-token kernel blocks (it must be a multiple of {kernel_block_size})"
        )


def plan_layout(
    plan: KVCachePlan,
    interleaved: bool = False,
    kernel_block_sizes: dict[str, int] | None = None,
    stock_shares_buffers: bool = True,
    coallocated: frozenset[str] = frozenset(),
    interleaved_kv: frozenset[str] = frozenset(),
    stock_shares_hybrid: bool = True,
) -> tuple[list[TensorLayout], bool]:
    """Decide every tensor's raw buffers before anything is allocated.

    Args:
        interleaved: Mamba states are viewed block by block
            (:func:`vllm_kv_strategies.platforms.ascend.facts.mamba_states_interleaved`).
        kernel_block_sizes: layer -> the kernel block size its views are split
            into (runners with several KV cache groups).
        stock_shares_buffers: the release's stock runner lets every layer of a
            tensor alias the first layer's part buffers (0.13+), so parts of
            different bytes per block would corrupt under stock.
        coallocated: part groups the release places in one raw buffer
            (:func:`vllm_kv_strategies.platforms.ascend.facts.coallocated_groups`).
        interleaved_kv: attention layers that each have a tensor of their own
            and take one buffer with K and V interleaved per kernel block
            (:func:`vllm_kv_strategies.platforms.ascend.strided.interleaved_kv_layers`).
        stock_shares_hybrid: the release's stock runner views every layer of
            a tensor shared by attention and Mamba layers in one buffer (0.18+:
            ``hybrid_with_attn_and_mamba``;
            :func:`vllm_kv_strategies.platforms.ascend.facts.stock_shares_hybrid_tensors`).

    Returns:
        the layouts, and whether attention and Mamba layers share one buffer
        anywhere (vllm-ascend's ``hybrid_with_attn_and_mamba``).

    Raises:
        KVCacheLayoutError: a tensor's size is not a whole number of pages of a
            layer it serves, or gives fewer blocks than ``num_blocks``; a
            kernel block size does not fit a layer's block size; attention
            layers of one tensor differ in bytes per block of a part (as
            :class:`StockWouldCorruptError` where stock would alias them).
        StockWouldCorruptError: attention and Mamba layers of one tensor do
            not line up block by block and stock shares the tensor.
        BeyondConfigError: the same where stock does not share it, or the
            layouts would allocate more than the config's tensors hold.
    """
    kernel_block_sizes = kernel_block_sizes or {}
    n = plan.kv_cache_config.num_blocks
    by_tensor = {tid: tuple(plan.layers_of(tid)) for tid in range(len(plan.tensors))}
    for tid, layers in by_tensor.items():
        size = plan.tensors[tid].size
        for lp in layers:
            page = lp.padded_page_bytes
            if size % page or size // page < n:
                raise KVCacheLayoutError(
                    f"{lp.describe()}: KV cache tensor {tid} of {size} bytes is not a whole number "
                    f">= num_blocks {n} of its {page}-byte pages ({size / page:g})"
                )
            check_kernel_blocks(lp, kernel_block_sizes.get(lp.name))
        attn = [lp for lp in layers if lp.family is LayoutFamily.PER_PART]
        if len({tuple((p.nbytes, p.group) for p in lp.parts) for lp in attn}) > 1:
            error = StockWouldCorruptError if stock_shares_buffers else KVCacheLayoutError
            consequence = (
                "stock vllm-ascend would alias their buffers under different block indices and corrupt them"
                if stock_shares_buffers
                else "they cannot alias one set of buffers block by block"
            )
            raise error(
                f"KV cache tensor {tid} is shared by attention layers whose parts differ in bytes per "
                f"block; {consequence}: "
                + "; ".join(f"{lp.describe()}: {[(p.name, p.nbytes) for p in lp.parts]}" for lp in attn)
            )
    mixed = {
        tid
        for tid, layers in by_tensor.items()
        if {LayoutFamily.PER_PART, LayoutFamily.STATES} <= {lp.family for lp in layers}
    }
    kv_pages = {t: states_in_kv_page(by_tensor[t]) for t in mixed}
    shared = {
        t for t in mixed if shares_block_consistently(by_tensor[t], n, plan.tensors[t].size, interleaved, kv_pages[t])
    }
    for tid in sorted(mixed - shared):  # K/V of their own would exceed the config: refused by name
        refuse_unaligned_hybrid(tid, by_tensor[tid], plan.tensors[tid].size, n, stock_shares_hybrid)
    hybrid = bool(shared)
    layouts = []
    for tid, layers in by_tensor.items():
        if not layers:
            continue
        size = plan.tensors[tid].size
        whole = tuple(lp for lp in layers if lp.family is not LayoutFamily.PER_PART)
        attn = tuple(lp for lp in layers if lp.family is LayoutFamily.PER_PART)
        if tid in shared or (hybrid and not whole):
            layouts.append(TensorLayout(tid, layers, (size,), True, kv_page=kv_pages.get(tid) if tid in shared else None))
            continue
        if whole:
            layouts.append(TensorLayout(tid, whole, (size,), True))
        if attn and {lp.name for lp in attn} <= interleaved_kv:
            if len(layers) != 1:
                raise KVCacheLayoutError(
                    f"KV cache tensor {tid} serves {len(layers)} layers; K|V interleaved per kernel block is "
                    f"laid out per layer: {', '.join(lp.describe() for lp in layers)}"
                )
            layouts.append(TensorLayout(tid, attn, (size,), True, kv_interleaved=True))
        elif attn:
            blocks = size // attn[0].padded_page_bytes
            parts = attn[0].parts
            layouts.append(TensorLayout(tid, attn, tuple(blocks * p.nbytes for p in parts), False, coallocated_runs(parts, coallocated)))
    check_within_config(layouts, plan.kv_cache_config)
    return layouts, hybrid


def _kernel_split(view: Any, block_size: int, kernel_block_size: int | None) -> Any:
    if not kernel_block_size or kernel_block_size >= block_size or view.dim() < 2 or view.shape[1] != block_size:
        return view
    return view.reshape(view.shape[0] * (block_size // kernel_block_size), kernel_block_size, *view.shape[2:])


def layer_views(
    lp: LayerPlan,
    raw: Any,
    num_blocks: int,
    kernel_block_size: int | None,
    interleaved: bool = False,
    kv_page: int | None = None,
) -> list[Any]:
    """Typed views of one layer, ``(num_blocks * part.blocks, *part.shape)``
    each (attention parts split into kernel blocks where ``kernel_block_size``
    is smaller than the block; a ``PACKETS`` layer's per kernel block:
    :func:`~vllm_kv_strategies.platforms.ascend.layout.packets.packet_layer_views`).

    ``raw`` is a tuple with one int8 buffer per part, or one int8 buffer
    holding all parts where :func:`part_regions` puts them (``kv_page``: its
    tensor's :attr:`TensorLayout.kv_page`).

    Raises:
        KVCacheLayoutError: a part is not aligned to its dtype, or the buffers
            hold fewer than ``num_blocks`` blocks.
    """
    if lp.family is LayoutFamily.PACKETS:
        return packet_layer_views(lp, raw, num_blocks, kernel_block_size)
    parts = lp.parts
    if isinstance(raw, tuple):
        chunks = [buf.view(p.dtype).view(-1, *p.shape) for buf, p in zip(raw, parts)]
        nbytes = sum(buf.numel() for buf in raw)
    else:
        nbytes = raw.numel()
        chunks = []
        for p, (offset, stride, _) in zip(parts, part_regions(lp, num_blocks, nbytes, interleaved, kv_page)):
            if offset % p.dtype.itemsize or stride % p.dtype.itemsize:
                raise KVCacheLayoutError(f"{lp.describe()}: part {p.name} at byte {offset} is not {p.dtype}-aligned")
            step = p.dtype.itemsize
            typed = raw[: nbytes - nbytes % step].view(p.dtype)  # a tail shorter than one element is never viewed
            inner = tuple(math.prod(p.shape[i + 1 :]) for i in range(len(p.shape)))
            shape, strides = (num_blocks, *p.shape), (stride // step, *inner)
            if p.blocks > 1:  # sub-blocks of one block lie back to back
                shape, strides = (num_blocks, p.blocks, *p.shape), (stride // step, math.prod(p.shape), *inner)
            view = typed.as_strided(shape, strides, typed.storage_offset() + offset // step)
            chunks.append(view.view(num_blocks * p.blocks, *p.shape) if p.blocks > 1 else view)  # raises if not one run
    # part buffers hold the parts only; one buffer holds whole (padded) pages
    if nbytes // (lp.page_bytes if isinstance(raw, tuple) else lp.padded_page_bytes) < num_blocks:
        raise KVCacheLayoutError(f"{lp.describe()}: {nbytes} bytes hold fewer than {num_blocks} blocks")
    views = []
    for view, p in zip(chunks, parts):
        if p.kernel_blocks and lp.family is LayoutFamily.PER_PART:
            view = _kernel_split(view, lp.spec.block_size, kernel_block_size)
        views.append(view)
    return views

