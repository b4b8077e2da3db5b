"""DeepSeek V3.2's packed fp8 MLA latent, vLLM 0.32+ ``fp8_ds_mla`` (FlashMLA
sparse): one 656-byte row per token.

Row = nope in fp8_e4m3 (kv_lora_rank values), its scales (one fp32 per 128
values), rope in bf16 (qk_rope_head_dim values): 512 + 16 + 128 bytes (the
format note in vllm/v1/attention/backends/mla/flashmla_sparse.py). The spec
is ``MLAAttentionSpec(dtype=uint8, cache_dtype_str="fp8_ds_mla",
state_content_bytes=656)`` (``MLAAttention.get_kv_cache_spec``,
vllm/model_executor/layers/attention/mla_attention.py); page = block_size x
656. vLLM builds the view itself; this kind names the row's fields. Not
vllm-ascend's QSFA row (nope | rope | scales, :mod:`.sparse_mla_c8`).
DeepSeek V4's rows (584 bytes, ue8m0 scales, several tokens per state) and
``nvfp4_ds_mla`` are not this layout and stay refused.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_kv_strategies.core.specs import spec_classes
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError
from vllm_kv_strategies.core.strategies.base import Field, KVCacheStrategy, ModelDims, PagePart

#: Nope values per fp32 scale.
SCALE_GROUP = 128
CACHE_DTYPE = "fp8_ds_mla"


class DSMLAStrategy(KVCacheStrategy):
    name = "fp8_ds_mla"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return spec_classes("MLAAttentionSpec")

    def matches(self, spec: Any) -> bool:
        return getattr(spec, "cache_dtype_str", None) == CACHE_DTYPE

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """One part ``kv`` (block_size, num_kv_heads, state_content_bytes)
        uint8 with the fields ``nope`` (fp8_e4m3fn), ``nope_scale`` (fp32),
        ``rope`` (bf16).

        Raises:
            KVCacheLayoutError: the model config lacks the MLA widths, or
                they do not add up to ``head_size``.
            UnsupportedSpecError: the row is not that layout (DeepSeek V4's
                rows; several tokens per state).
        """
        nope, rope = dims.kv_lora_rank, dims.qk_rope_head_dim
        if nope is None or rope is None or nope + rope != spec.head_size:
            raise KVCacheLayoutError(
                f"{CACHE_DTYPE} spec {type(spec).__name__}(head_size={spec.head_size}) needs kv_lora_rank + "
                f"qk_rope_head_dim = head_size from the model; got {nope} + {rope}"
            )
        fields = (
            Field("nope", torch.float8_e4m3fn, nope),
            Field("nope_scale", torch.float32, nope // SCALE_GROUP),
            Field("rope", torch.bfloat16, rope),
        )
        row = getattr(spec, "state_content_bytes", None)
        tokens = getattr(spec, "tokens_per_state", 1)
        if nope % SCALE_GROUP or row != sum(f.nbytes for f in fields) or tokens != 1 or spec.dtype != torch.uint8:
            raise UnsupportedSpecError(
                f"{self.name} strategy lays out DeepSeek V3.2's rows ({[(f.name, f.nbytes) for f in fields]}, one "
                f"token each): {type(spec).__name__} has {row} bytes per state of {tokens} tokens in {spec.dtype}"
            )
        return (PagePart("kv", torch.uint8, (spec.block_size, spec.num_kv_heads, row), fields=fields),)
