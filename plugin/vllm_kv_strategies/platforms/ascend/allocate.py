"""Raw KV cache buffers for a vllm-ascend runner's layouts (V1 and Ascend's V2),
released again if any allocation fails."""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.platforms.adapter import allocate_bytes
from vllm_kv_strategies.platforms.ascend.budget import TRANSFER_ALIGNMENT
from vllm_kv_strategies.platforms.ascend.layout.buffers import TensorLayout, buffer_slices


def _zeros(nbytes: int, device: Any, align: bool, layer: str) -> Any:
    if not align:
        return allocate_bytes(nbytes, device, layer)
    raw = allocate_bytes(nbytes + TRANSFER_ALIGNMENT, device, layer)
    skip = -raw.data_ptr() % TRANSFER_ALIGNMENT
    return raw[skip : skip + nbytes]


def allocate(layouts: list[TensorLayout], device: Any, align: bool) -> dict[str, Any]:
    """Raw int8 buffers per layer: one tensor (single layout) or a tuple with
    one buffer per part, parts of a co-allocated group being slices of one
    buffer (:func:`~vllm_kv_strategies.platforms.ascend.layout.buffers.buffer_slices`). On
    failure nothing is returned and the buffers of the attempt are released."""
    raws: dict[str, Any] = {}
    try:
        for layout in layouts:
            first = layout.layers[0].name
            if layout.regions:  # one backing, a region per layer (vLLM's overlay)
                raw = _zeros(layout.buffer_bytes[0], device, align, first)
                raws.update((lp.name, raw[s : s + n]) for lp, (s, n) in zip(layout.layers, layout.regions))
                continue
            buffers = []
            for nbytes, slices in buffer_slices(layout):
                raw = _zeros(nbytes, device, align, first)
                # a slice that is the whole buffer is the buffer (no view to make)
                buffers += [raw if (offset, n) == (0, nbytes) else raw[offset : offset + n] for offset, n in slices]
            value = buffers[0] if layout.single else tuple(buffers)
            raws.update((lp.name, value) for lp in layout.layers)
    except BaseException:
        raws.clear()  # release what this attempt allocated before the error propagates
        buffers = value = raw = None
        raise
    return raws
