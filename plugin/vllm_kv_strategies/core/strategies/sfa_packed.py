"""vllm-ascend 0.30's packed SFA main cache (DeepSeek V3.2 sparse attention):
the MLA latent of an ``AscendMLAAttentionSpec`` with ``cache_sparse_sfa_c8``
(``--kv-cache-dtype int8`` / ``fp8``) or ``cache_sparse_sfa_turboquant``
(``--kv-cache-dtype turboquant_4bit_nc``) stored as one packed row per token
(the spec's ``uses_packed_sfa_main_cache``), bound as a 1-tuple ``(k,)``
instead of ``(nope, rope)``.

Page = block_size x num_kv_heads x head_size bytes (``dtype`` is one byte
wide), head_size as ``NPUModelRunner.get_kv_cache_spec`` (0.30) sets it:

* **SFA C8**: ``get_sfa_qsfa_packed_head_dim`` (vllm_ascend/attention/utils.py)
  = kv_lora_rank x C8 + qk_rope_head_dim x bf16 + kv_lora_rank / 128 fp32
  scales (656 for DeepSeek V3.2), ``dtype`` the runner's ``c8_cache_dtype``
  (int8, or fp8_e4m3fn);
* **TurboQuant**: ``get_tq_fused_slot_bytes`` = kv_lora_rank / 2 int4
  nibbles + qk_rope_head_dim x bf16 + one fp16 scale (386), ``dtype`` int8.

Either row is written ``torch.cat([k_nope, k_pe, knope_scale])``
(``AscendSFAImpl._store_parallel_kv``, vllm_ascend/attention/sfa_v1.py). The
one part, ``packed_kv`` (block_size, num_kv_heads, head_size) of ``dtype``, is
split into kernel blocks like the latent, as
``NPUModelRunner._allocate_kv_cache_tensors`` / ``_reshape_kv_cache_tensors``
(0.30) allocate and view it: one raw buffer of num_blocks pages per layer,
viewed ``(num_blocks x block_size / kernel_block_size, kernel_block_size,
num_kv_heads, head_size)``. vllm-ascend 0.23's form of SFA C8 (inside a
``sparse_head_dim`` spec with the indexer) is :mod:`.sparse_mla_c8`.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_kv_strategies.core.specs import platform_spec_classes
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError
from vllm_kv_strategies.core.strategies.base import Field, KVCacheStrategy, ModelDims, PagePart
from vllm_kv_strategies.core.strategies.sparse_mla_c8 import qsfa_fields

#: Spec fields that select the packed main cache, and the variant each names.
VARIANTS = {"cache_sparse_sfa_c8": "c8", "cache_sparse_sfa_turboquant": "turboquant"}
#: Spec fields of other page forms this kind does not lay out, with their plain values.
_OTHER_FORMS = (("scale_dim", 0), ("tokens_per_state", 1), ("store_on_host", False), ("indexes_kv_by_block_stride", False))


def packed_variant(spec: Any) -> str | None:
    """``"c8"``, ``"turboquant"`` or None (no packed main cache; 0.23's
    ``sparse_head_dim`` specs are :mod:`.sparse_mla_c8`'s)."""
    if getattr(spec, "sparse_head_dim", None):
        return None
    on = [variant for field, variant in VARIANTS.items() if getattr(spec, field, False)]
    return on[0] if len(on) == 1 else "both" if on else None


def turboquant_fields(spec: Any, dims: ModelDims) -> tuple[Field, ...]:
    """The fields of one TurboQuant row: ``nope`` (kv_lora_rank / 2 int4
    nibble pairs), ``rope`` (qk_rope_head_dim x bf16), ``scale`` (one fp16).

    Raises:
        KVCacheLayoutError: the model config lacks the MLA widths, or they do
            not give the spec's row.
    """
    nope, rope = dims.kv_lora_rank, dims.qk_rope_head_dim
    fields = ()
    if nope is not None and rope is not None and nope % 2 == 0:
        fields = (Field("nope", torch.int8, nope // 2), Field("rope", torch.bfloat16, rope), Field("scale", torch.float16, 1))
    if sum(f.nbytes for f in fields) != spec.head_size * spec.dtype.itemsize:
        raise KVCacheLayoutError(
            f"TurboQuant SFA spec {type(spec).__name__}: packed row of {spec.head_size} x {spec.dtype} is not "
            f"kv_lora_rank {nope} / 2 int4 nibbles + qk_rope_head_dim {rope} x bf16 + one fp16 scale"
        )
    return fields


class SFAPackedStrategy(KVCacheStrategy):
    name = "sfa_packed"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return platform_spec_classes("AscendMLAAttentionSpec")

    def matches(self, spec: Any) -> bool:
        return packed_variant(spec) is not None

    def kind(self, spec: Any) -> str:
        """``sfa_packed_c8`` or ``sfa_packed_turboquant``."""
        return f"{self.name}_{packed_variant(spec)}"

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """``packed_kv``: (block_size, num_kv_heads, head_size) of the spec's
        dtype, its row's fields named (:func:`qsfa_fields`,
        :func:`turboquant_fields`).

        Raises:
            UnsupportedSpecError: both packed forms at once, or another page
                form besides (indexer scales in the page, compression, host
                storage, page-strided indexing).
            KVCacheLayoutError: the row is not the packed form of the
                model's MLA widths.
        """
        variant = packed_variant(spec)
        other = {name: getattr(spec, name) for name, plain in _OTHER_FORMS if getattr(spec, name, plain) != plain}
        if variant == "both" or other:
            raise UnsupportedSpecError(
                f"{self.name} strategy lays out one packed SFA main cache: {type(spec).__name__} has "
                f"{dict(other, **{f: True for f in VARIANTS if getattr(spec, f, False)})}"
            )
        if variant == "c8":
            fields = qsfa_fields(spec, dims, spec.dtype, width=spec.head_size)
        else:
            fields = turboquant_fields(spec, dims)
        return (PagePart("packed_kv", spec.dtype, (spec.block_size, spec.num_kv_heads, spec.head_size), fields=fields),)
