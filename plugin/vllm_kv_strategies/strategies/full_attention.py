"""Full attention (also sliding window and chunked local): K and V per block.

Page size = block_size x num_kv_heads x (head_size + head_size_v) x dtype size,
as vLLM's ``AttentionSpec.page_size_bytes`` for dense K/V
(``vllm/v1/kv_cache_interface.py``).
"""

from __future__ import annotations

from typing import Any

from .. import compat
from .base import KVCacheStrategy, ModelDims, PagePart


class FullAttentionStrategy(KVCacheStrategy):
    name = "full_attention"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return compat.full_attention_spec_types()

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``k``: (block_size, num_kv_heads, head_size); ``v``: the same with
        head_size_v (which may differ from head_size), both in ``spec.dtype``.

        Raises:
            UnsupportedSpecError: packed or per-token-quantised K/V pages.
        """
        compat.require_dense_attention(spec, self.name)
        rows = (spec.block_size, spec.num_kv_heads)
        return (
            PagePart("k", spec.dtype, (*rows, spec.head_size)),
            PagePart("v", spec.dtype, (*rows, compat.head_size_v(spec))),
        )
