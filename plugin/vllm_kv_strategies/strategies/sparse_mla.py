"""Sparse MLA (DeepSeek V3.2 sparse attention): MLA plus the indexer key cache.

Two forms reach this strategy (the compatibility module tells them apart):

* a layer that stores nope + rope + the indexer key cache in one page
  (vllm-ascend's MLA spec subclass with ``sparse_head_dim``, and the legacy
  ``FullAttentionSpec`` with twice the MLA page up to vllm-ascend 0.18);
* an indexer-only layer (upstream vLLM: ``MLAAttentionSpec`` with
  ``cache_role=INDEXER``), whose page is the indexer key cache alone.

The indexer key cache is (block_size, 1, index_head_dim) per block.
"""

from __future__ import annotations

from typing import Any

from .. import compat
from .base import KVCacheStrategy, ModelDims, PagePart


class SparseMLAStrategy(KVCacheStrategy):
    name = "sparse_mla"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return compat.mla_spec_types()

    def matches(self, spec: Any) -> bool:
        return compat.is_sparse_mla(spec)

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """nope, rope (as :class:`MLAStrategy`) and ``indexer_k``
        (block_size, 1, index_head_dim); an indexer-only layer has just
        ``indexer_k`` (block_size, num_kv_heads, head_size). A sparse layer
        whose indexer is shared from another layer gets no ``indexer_k``.
        """
        compat.require_dense_attention(spec, self.name)
        split = compat.mla_split(spec, dims)
        parts = []
        if split.nope or split.rope:
            rows = (spec.block_size, spec.num_kv_heads)
            parts += [
                PagePart("nope", spec.dtype, (*rows, split.nope)),
                PagePart("rope", spec.dtype, (*rows, split.rope)),
            ]
        if split.indexer:
            shape = (spec.block_size, split.indexer_heads, split.indexer)
            parts.append(PagePart("indexer_k", split.indexer_dtype or spec.dtype, shape, kernel_blocks=False))
        return tuple(parts)
