"""Byte ranges of vLLM's strided ``KVCacheTensor`` form (vLLM 0.30+), checked
before anything is allocated.

vLLM's planner (``vllm/v1/kv_cache_interface.py`` ``KVCacheTensor``, vLLM
PR #51718) places layer ``layers[l]``'s page of block ``b`` at
``offset + l * layer_stride + b * block_stride`` bytes into one backing
allocation of ``size`` bytes, shared by every tensor of the config; tensors
whose ranges overlap alias the same bytes (KV cache groups overlay each
other: a block ID belongs to one group at a time).

A :data:`Region` is ``(offset, block stride, bytes per block)`` in bytes:
block ``j`` of a layer occupies ``[offset + j * stride, offset + j * stride
+ bytes)``. Two layers may share a byte only under the same block index
(:func:`crosses_blocks`).
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.errors import KVCacheLayoutError

#: (offset, block stride, bytes per block), all in bytes.
Region = tuple[int, int, int]


def crosses_blocks(a: Region, b: Region, num_blocks: int) -> bool:
    """Whether block j of ``a`` shares a byte with block k != j of ``b``: two
    layers may alias bytes only under the same block index. Regions with
    different strides whose extents meet count as crossing."""
    (oa, sa, ba), (ob, sb, bb) = a, b
    last = num_blocks - 1
    if oa + last * sa + ba <= ob or ob + last * sb + bb <= oa:
        return False
    if sa != sb:
        return True
    # a_j meets b_k  <=>  ob - oa - ba < (j - k) * s < ob - oa + bb
    lo = max(-last, (ob - oa - ba) // sa + 1)
    hi = min(last, -((oa - ob - bb) // sa) - 1)
    return lo <= hi and (lo, hi) != (0, 0)


def backing_bytes(kv_cache_config: Any) -> int:
    """The one backing allocation's size in bytes (every tensor's ``size``).

    Raises:
        KVCacheLayoutError: the tensors give different sizes (not one backing).
    """
    sizes = {tensor.size for tensor in kv_cache_config.kv_cache_tensors}
    if len(sizes) != 1:
        raise KVCacheLayoutError(f"KV cache tensors of sizes {sorted(sizes)} bytes do not describe one backing allocation")
    return sizes.pop()


def layer_regions(kv_cache_config: Any, page_bytes: dict[str, int]) -> dict[str, Region]:
    """layer -> its :data:`Region` in the backing, for the layers of
    ``page_bytes`` (layer -> its page in bytes); layers not listed there (the
    runner's own, never allocated) are skipped.

    Raises:
        KVCacheLayoutError: a layer's block stride differs from its page (its
            pages are not back to back, which per-layer views need), its
            ``num_blocks`` pages run past the backing, or two layers share a
            byte under different block indices; each names the layers, the
            offsets and the sizes.
    """
    n = kv_cache_config.num_blocks
    size = backing_bytes(kv_cache_config)
    regions: dict[str, Region] = {}
    for tid, tensor in enumerate(kv_cache_config.kv_cache_tensors):
        for index, name in enumerate(tensor.layers):
            if name not in page_bytes:
                continue
            page = page_bytes[name]
            start = tensor.offset + index * tensor.layer_stride
            if tensor.block_stride != page:
                raise KVCacheLayoutError(
                    f"layer {name!r} (KV cache tensor {tid}): block stride {tensor.block_stride} bytes differs from "
                    f"its {page}-byte page; only back-to-back pages are laid out per layer"
                )
            if start < 0 or start + n * page > size:
                raise KVCacheLayoutError(
                    f"layer {name!r} (KV cache tensor {tid}): num_blocks {n} pages of {page} bytes from byte {start} "
                    f"run past the {size}-byte backing"
                )
            regions[name] = (start, page, page)
    names = sorted(regions, key=lambda name: regions[name][0])
    for i, a in enumerate(names):  # sorted by offset: only neighbours in range can meet
        for b in names[i + 1 :]:
            if regions[b][0] >= regions[a][0] + n * regions[a][1]:
                break
            if crosses_blocks(regions[a], regions[b], n):
                raise KVCacheLayoutError(
                    f"layers {a!r} {regions[a]} and {b!r} {regions[b]} share bytes under different block indices "
                    f"(num_blocks {n}; regions as offset, block stride, bytes per block)"
                )
    return regions
