"""vllm-ascend's FA-quantised MLA cache (DeepSeek W8A8C8 with ``fa_quant_type``):
the latent's nope quantised (int8 on A2, fp8_e4m3fn on A5), its rope kept in
the model dtype.

vllm-ascend 0.18 / 0.23 give such a layer (``impl.fa_quant_layer``) an
``AscendMLAAttentionSpec`` of ``head_size = kv_lora_rank + 2 x
qk_rope_head_dim`` one-byte elements, ``cache_dtype_str=None`` and no
``sparse_head_dim`` (``NPUModelRunner.get_kv_cache_spec``,
vllm_ascend/worker/model_runner_v1.py): page = block_size x H x (kv_lora_rank
+ qk_rope_head_dim x size(model dtype)) bytes, a 2-byte rope per width unit.
The runner splits it [kv_lora_rank, 2 x qk_rope_head_dim]
(``get_kv_quant_split_factor``) and views nope in the quantised dtype and rope
in ``model_config.dtype`` (``get_kv_quant_dtype``,
vllm_ascend/quantization/modelslim_config.py). Which instances stock builds
this on (and where it crashes) is a runner fact:
:func:`vllm_kv_strategies.platforms.ascend.facts.fa_quant_refusal`.
"""

from __future__ import annotations

from typing import Any

from vllm_kv_strategies.core.specs import platform_spec_classes
from vllm_kv_strategies.errors import KVCacheLayoutError
from vllm_kv_strategies.core.strategies.base import KVCacheStrategy, ModelDims, PagePart


class FAQuantMLAStrategy(KVCacheStrategy):
    name = "fa_quant_mla"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return platform_spec_classes("AscendMLAAttentionSpec")

    def matches(self, spec: Any) -> bool:
        """A one-byte MLA spec with no cache dtype name and no sparse split."""
        return (
            spec.dtype.itemsize == 1
            and getattr(spec, "cache_dtype_str", "") is None
            and not getattr(spec, "sparse_head_dim", None)
        )

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``nope``: (block_size, H, kv_lora_rank) in ``spec.dtype``;
        ``rope``: (block_size, H, qk_rope_head_dim) in the model dtype.

        Raises:
            KVCacheLayoutError: the model's MLA widths or dtype are unknown,
                or kv_lora_rank + qk_rope_head_dim x size(model dtype) is not
                the spec's head_size.
        """
        nope, rope, model_dtype = dims.kv_lora_rank, dims.qk_rope_head_dim, dims.model_dtype
        if nope is None or rope is None or model_dtype is None:
            raise KVCacheLayoutError(
                f"FA-quant MLA spec {type(spec).__name__}(head_size={spec.head_size}, dtype={spec.dtype}) needs "
                f"kv_lora_rank, qk_rope_head_dim and the model dtype; got {nope}, {rope}, {model_dtype}"
            )
        if nope * spec.dtype.itemsize + rope * model_dtype.itemsize != spec.head_size * spec.dtype.itemsize:
            raise KVCacheLayoutError(
                f"FA-quant MLA spec {type(spec).__name__}: head_size {spec.head_size} x {spec.dtype} != nope {nope} "
                f"x {spec.dtype} + rope {rope} x {model_dtype}"
            )
        rows = (spec.block_size, spec.num_kv_heads)
        return (PagePart("nope", spec.dtype, (*rows, nope)), PagePart("rope", model_dtype, (*rows, rope)))
