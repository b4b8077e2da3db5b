"""Multi-head latent attention (DeepSeek V2/V3/R1): one latent per token.

Page size = block_size x num_kv_heads x head_size x dtype size with
head_size = kv_lora_rank + qk_rope_head_dim (vLLM's ``MLAAttentionSpec``). On
Ascend the latent is stored as two caches, nope (kv_lora_rank) and rope
(qk_rope_head_dim), as vllm-ascend does since PR #3106.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_kv_strategies.core.specs import platform_spec_classes, spec_classes
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.core.strategies.base import KVCacheStrategy, ModelDims, PagePart, require_dense_page

#: The MLA spec classes of vLLM and of vllm-ascend (where installed).
SPEC_CLASS_NAMES = ("MLAAttentionSpec", "SlidingWindowMLASpec")
ASCEND_SPEC_CLASS_NAMES = ("AscendMLAAttentionSpec", "AscendSlidingWindowMLASpec")


def mla_spec_types() -> tuple[type, ...]:
    """Every MLA spec class of the installed releases."""
    return tuple(dict.fromkeys((*spec_classes(*SPEC_CLASS_NAMES), *platform_spec_classes(*ASCEND_SPEC_CLASS_NAMES))))


@dataclass(frozen=True)
class MLASplit:
    """Widths (elements per token and head) of an MLA page's parts."""

    nope: int
    rope: int
    indexer: int = 0


def mla_split(spec: Any, dims: ModelDims) -> MLASplit:
    """Split a plain MLA spec's head_size into nope and rope widths, from the
    model config (``kv_lora_rank``, ``qk_rope_head_dim``).

    Raises:
        KVCacheLayoutError: the model config lacks them, or they do not add
            up to the spec's head_size.
    """
    nope, rope = dims.kv_lora_rank, dims.qk_rope_head_dim
    if nope is None or rope is None:
        raise KVCacheLayoutError(
            f"MLA spec {type(spec).__name__}(head_size={spec.head_size}) needs kv_lora_rank and "
            "qk_rope_head_dim from the model to split its latent into nope and rope; the model has neither"
        )
    if nope + rope != spec.head_size:
        raise KVCacheLayoutError(
            f"MLA spec {type(spec).__name__}: head_size {spec.head_size} != nope {nope} + rope {rope}"
        )
    return MLASplit(nope, rope)


class MLAStrategy(KVCacheStrategy):
    name = "mla"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return mla_spec_types()

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``nope``: (block_size, num_kv_heads, kv_lora_rank) and ``rope``:
        (block_size, num_kv_heads, qk_rope_head_dim), both in ``spec.dtype``.

        Raises:
            KVCacheLayoutError: the split does not add up to ``head_size``.
            UnsupportedSpecError: packed (e.g. fp8_ds_mla) pages.
        """
        require_dense_page(spec, self.name)
        split = mla_split(spec, dims)
        rows = (spec.block_size, spec.num_kv_heads)
        return (
            PagePart("nope", spec.dtype, (*rows, split.nope)),
            PagePart("rope", spec.dtype, (*rows, split.rope)),
        )

    def kind(self, spec: Any) -> str:
        return "sliding_window_mla" if getattr(spec, "sliding_window", None) else self.name
