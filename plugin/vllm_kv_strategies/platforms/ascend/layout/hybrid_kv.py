"""Mamba states inside the attention layers' K/V blocks (vllm-ascend 0.11 /
0.13, route (a') of issue 13): the placement, the test that a tensor takes it,
and the hybrid sizing that makes it hold.

In a ``KVCacheTensor`` of ``N`` blocks shared by attention layers (K and V of
``K`` bytes per block each) and Mamba layers whose padded page is ``2 K`` and
whose largest state is ``K`` bytes: K block j at ``j*K``, V block j at
``N*K + j*K``; the largest state's block j is K block j; the other states lie
one after another from the start of V block j. Every view keeps its inner
dimensions contiguous; the small states' block stride is one K page. Block j
of every layer then lies in the bytes of block j of every other layer, which
:func:`vllm_kv_strategies.platforms.ascend.layout.buffers.shares_block_consistently` checks
(``crosses_blocks``) before anything is allocated.

Sizes are integer bytes unless named tokens.
"""

from __future__ import annotations

from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.core.plan import LayerPlan
from vllm_kv_strategies.core.strategies import LayoutFamily, PagePart
from vllm_kv_strategies.core.strided import Region


def _kv_misfit(parts: tuple[PagePart, ...], k_page: int) -> str | None:
    """Why Mamba states of ``parts`` cannot lie inside K/V blocks of
    ``k_page`` bytes (the largest state as the K block, the others one after
    another from the start of the V block), or None when they can."""
    if len(parts) < 2:
        return f"{len(parts)} state(s); the placement needs two or more"
    big = _largest(parts)
    if parts[big].nbytes != k_page:
        return f"largest state {parts[big].name} is {parts[big].nbytes} bytes, not the {k_page}-byte K page"
    offset = 0
    for i, p in enumerate(parts):
        if i == big:
            continue
        if offset % p.dtype.itemsize or k_page % p.dtype.itemsize:
            return f"state {p.name} ({p.dtype}) would not be aligned inside a {k_page}-byte V block"
        offset += p.nbytes
    if offset > k_page:
        return f"the other states take {offset} bytes, more than a {k_page}-byte V block"
    return None


def _largest(parts: tuple[PagePart, ...]) -> int:
    """Index of the largest part (the last of equals: the ssm state follows conv)."""
    return max(range(len(parts)), key=lambda i: (parts[i].nbytes, i))


def states_in_kv_page(layers: tuple[LayerPlan, ...]) -> int | None:
    """The K page (bytes) when the Mamba layers of one tensor can keep their
    states inside the attention layers' K/V blocks, else None.

    Holds when the tensor serves attention (``PER_PART``) and Mamba
    (``STATES``) layers, every attention layer has two parts (K, V) of K page
    bytes and no padding, every Mamba layer's padded page is 2 K pages, its
    largest state is one K page and its other states fit in one K page
    (:func:`state_regions_in_kv` then places them). Decided from the
    ``KVCacheConfig`` alone; ``shares_block_consistently`` still proves it.
    """
    attn = [lp for lp in layers if lp.family is LayoutFamily.PER_PART]
    states = [lp for lp in layers if lp.family is LayoutFamily.STATES]
    if not attn or not states:
        return None
    k_page = attn[0].parts[0].nbytes
    for lp in attn:
        if len(lp.parts) != 2 or {p.nbytes for p in lp.parts} != {k_page} or lp.padded_page_bytes != 2 * k_page:
            return None
    for lp in states:
        if lp.padded_page_bytes != 2 * k_page or _kv_misfit(lp.parts, k_page) is not None:
            return None
    return k_page


def kv_block_sizing(k_bytes_per_token: int, states: tuple[PagePart, ...], kernel_block_size: int) -> tuple[int, int]:
    """The hybrid sizing that makes :func:`states_in_kv_page` hold: the
    attention block size (tokens) whose K page equals the largest state, and
    the Mamba page padded to 2 K pages (bytes).

    Follows the block size rule of vllm-ascend 0.18's
    ``verify_and_update_config`` (``vllm_ascend/patch/platform/patch_mamba_config.py``,
    PR #6887: K page == ssm page, a multiple of the kernel block), with the
    Mamba page padded to the attention page (0.11 / 0.13 attention specs have
    no padding of their own) instead of 2 K pages + conv.

    Args:
        k_bytes_per_token: K bytes of one token of one attention layer
            (num_kv_heads x head_size x dtype size).
        states: the Mamba layer's states (:class:`~vllm_kv_strategies.core.strategies.PagePart`
            per block, the ``mamba`` strategy's parts).
        kernel_block_size: tokens per kernel block of the attention backend;
            the block size must be a multiple of it.

    Returns:
        ``(block_size, mamba_page_size_padded)``.

    Raises:
        KVCacheLayoutError: the largest state is not a whole number of
            kernel blocks of K (the block size would not be one the kernels
            take), or the other states do not fit in a V block; the message
            names the sizes.
    """
    if not states:
        raise KVCacheLayoutError("no Mamba states to size")
    ssm = states[_largest(states)]
    tokens, rest = divmod(ssm.nbytes, k_bytes_per_token)
    if rest or not tokens or tokens % kernel_block_size:
        raise KVCacheLayoutError(
            f"state {ssm.name} of {ssm.nbytes} bytes holds {ssm.nbytes / k_bytes_per_token:g} tokens of "
            f"{k_bytes_per_token} K bytes, not a whole number of {kernel_block_size}-token kernel blocks"
        )
    misfit = _kv_misfit(states, ssm.nbytes)
    if misfit is not None:
        raise KVCacheLayoutError(misfit)
    return tokens, 2 * ssm.nbytes


def state_regions_in_kv(parts: tuple[PagePart, ...], num_blocks: int, nbytes: int, kv_page: int) -> list[Region]:
    """Where a Mamba layer's states lie in a tensor of ``nbytes`` whose
    attention layers put K at ``nbytes - 2*N*K`` (packed at the end, as
    ``part_regions`` places attention parts) and V after it: the largest state
    at K block j, the others from the start of V block j, in storage order,
    each with a block stride of ``kv_page``."""
    k_base = nbytes - 2 * num_blocks * kv_page
    big = _largest(parts)
    offset = k_base + num_blocks * kv_page  # V block 0
    regions = []
    for i, p in enumerate(parts):
        if i == big:
            regions.append((k_base, kv_page, p.nbytes))
        else:
            regions.append((offset, kv_page, p.nbytes))
            offset += p.nbytes
    return regions
