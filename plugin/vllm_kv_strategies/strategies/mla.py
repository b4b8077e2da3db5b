"""Multi-head latent attention (DeepSeek V2/V3/R1): one latent per token.

Page size = block_size x num_kv_heads x head_size x dtype size with
head_size = kv_lora_rank + qk_rope_head_dim (vLLM's ``MLAAttentionSpec``). On
Ascend the latent is stored as two caches, nope (kv_lora_rank) and rope
(qk_rope_head_dim), as vllm-ascend does since PR #3106.
"""

from __future__ import annotations

from typing import Any

from .. import compat
from .base import KVCacheStrategy, ModelDims, PagePart


class MLAStrategy(KVCacheStrategy):
    name = "mla"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return compat.mla_spec_types()

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``nope``: (block_size, num_kv_heads, kv_lora_rank) and ``rope``:
        (block_size, num_kv_heads, qk_rope_head_dim), both in ``spec.dtype``.

        Raises:
            KVCacheLayoutError: the split does not add up to ``head_size``.
            UnsupportedSpecError: packed (e.g. fp8_ds_mla) pages.
        """
        compat.require_dense_attention(spec, self.name)
        split = compat.mla_split(spec, dims)
        rows = (spec.block_size, spec.num_kv_heads)
        return (
            PagePart("nope", spec.dtype, (*rows, split.nope)),
            PagePart("rope", spec.dtype, (*rows, split.rope)),
        )
