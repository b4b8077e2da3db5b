"""K and V interleaved per kernel block in one buffer: vllm-ascend 0.30's
layout of a plain full-attention layer (``NPUModelRunner._reshape_kv_cache_tensors``
where ``requires_contiguous_pa_kv_cache`` is false; vLLM's Model Runner V2
exposes the same block-first K/V views). The buffer is one layer's
``num_blocks x page`` bytes; :func:`~vllm_kv_strategies.platforms.ascend.layout.buffers.plan_layout`
gives such a layer a :class:`~vllm_kv_strategies.platforms.ascend.layout.buffers.TensorLayout`
with ``kv_interleaved``.
"""

from __future__ import annotations

import math
from typing import Any

from vllm_kv_strategies.errors import KVCacheLayoutError


def interleaved_kv_views(raw: Any, dtype: Any, shape: tuple[int, ...], pitch: int | None = None) -> tuple[Any, Any]:
    """K and V of one attention layer whose buffer interleaves them per kernel
    block: ``shape`` is the backend's ``(2, rows, *inner)`` (rows = num_blocks
    x kernel blocks per block); kernel block i holds K then V, each
    ``prod(inner)`` elements, so both views stride ``2 x prod(inner)``
    elements per row and V starts ``prod(inner)`` elements after K. Mirrors
    vllm-ascend 0.30's ``_reshape_kv_cache_tensors`` for its plain full
    attention (and vLLM's Model Runner V2 block-first K/V views).

    ``pitch``: elements from one kernel block to the next, where padding
    follows V in each (vllm-ascend 0.30's Model Runner V2,
    ``_reshape_combined_attention_kv_cache``: the physical page over the
    kernel blocks per block); default ``2 x prod(inner)``, no padding.

    Raises:
        KVCacheLayoutError: ``raw`` does not hold exactly ``rows x pitch``
            elements of ``dtype``, or ``pitch`` is smaller than K and V.
    """
    typed = raw.view(dtype)
    hidden = math.prod(shape[2:])
    pitch = 2 * hidden if pitch is None else pitch
    if pitch < 2 * hidden or typed.numel() != shape[1] * pitch:
        raise KVCacheLayoutError(
            f"a buffer of {raw.numel()} bytes is not {shape[1]} kernel blocks of {pitch} x {dtype} elements "
            f"holding K|V {shape}"
        )
    inner = tuple(math.prod(shape[i + 1 :]) for i in range(2, len(shape)))
    both = typed.as_strided(shape, (hidden, pitch, *inner), typed.storage_offset())
    return both[0], both[1]
