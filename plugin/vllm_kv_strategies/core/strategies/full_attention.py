"""Full attention, and its windowed variants: K and V per block.

Page size = block_size x num_kv_heads x (head_size + head_size_v) x dtype
size, as vLLM's ``AttentionSpec.page_size_bytes`` for dense K/V
(``vllm/v1/kv_cache_interface.py``). The same page serves sliding-window,
chunked-local, sink, R-SWA, cross-attention and encoder-only layers: their
specs differ in which blocks the scheduler keeps, not in a block's bytes.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.specs import head_size_v, spec_classes
from vllm_kv_strategies.core.strategies.base import KVCacheStrategy, ModelDims, PagePart, require_dense_page

#: vLLM's dense attention spec classes this strategy lays out (those a
#: release lacks are skipped).
SPEC_CLASS_NAMES = (
    "FullAttentionSpec",
    "SlidingWindowSpec",
    "ChunkedLocalAttentionSpec",
    "SinkFullAttentionSpec",
    "RSWASpec",
    "CrossAttentionSpec",
    "EncoderOnlyAttentionSpec",
    "KpoolTailSpec",  # vLLM 0.30 / 0.31: GLM-5.3 Flash's kpool tail, a plain sliding-window page
)


class FullAttentionStrategy(KVCacheStrategy):
    name = "full_attention"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return spec_classes(*SPEC_CLASS_NAMES)

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``k``: (block_size, num_kv_heads, head_size); ``v``: the same with
        head_size_v (which may differ from head_size), both in ``spec.dtype``.

        Raises:
            UnsupportedSpecError: packed or per-token-quantised K/V pages.
        """
        require_dense_page(spec, self.name)
        rows = (spec.block_size, spec.num_kv_heads)
        return (
            PagePart("k", spec.dtype, (*rows, spec.head_size)),
            PagePart("v", spec.dtype, (*rows, head_size_v(spec))),
        )

    def kind(self, spec: Any) -> str:
        """``sliding_window``, ``chunked_local`` or ``full_attention``."""
        if getattr(spec, "sliding_window", None):
            return "sliding_window"
        if getattr(spec, "attention_chunk_size", None):
            return "chunked_local"
        return self.name
