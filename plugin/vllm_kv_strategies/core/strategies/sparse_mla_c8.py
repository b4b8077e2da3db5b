"""vllm-ascend's quantised ("C8") sparse MLA caches (DeepSeek V3.2 / GLM-5 DSA).

A kind of its own beside :mod:`.sparse_mla`: the same spec class
(``AscendMLAAttentionSpec`` with ``sparse_head_dim`` = (a, b, index_head_dim)),
but parts of other dtypes than the spec's, indexer scales, and a packed
latent. Which fields a release calls what is in
:func:`vllm_kv_strategies.core.specs.ascend_sparse_quant`.

* **LI C8** (0.18 ``cache_sparse_c8``, 0.23 ``cache_sparse_li_c8``): nope and
  rope in the model dtype, the indexer key in the C8 dtype (int8 on A2,
  fp8_e4m3fn on A5) and one scale per token (fp16 on A2, fp32 on A5).
  Page = block_size x H x ((nope + rope) x size(dtype) + r x (index x size(c8)
  + size(scale))).
* **SFA C8** (0.23 ``cache_sparse_sfa_c8``, "QSFA"): one packed row per token
  of ``a`` = kv_lora_rank + 2 x qk_rope_head_dim + 4 x kv_lora_rank / 128
  bytes (656 for DeepSeek V3.2, ``get_sfa_qsfa_packed_head_dim`` in
  vllm_ascend/attention/utils.py), viewed in the C8 dtype: nope in C8, rope in
  bf16, one fp32 scale per 128 nope values (the writer's
  ``torch.cat([k_nope, k_pe, knope_scale])``, vllm_ascend/attention/sfa_v1.py);
  no rope part (b = 0). The indexer key is in the model dtype, or LI C8's.
* r = ``sfa_dcp_replicated_indexer_size`` (0.23) indexer sub-blocks per block.

The page formulas are ``AscendMLAAttentionSpec.page_size_bytes``
(vllm_ascend/patch/platform/patch_kv_cache_interface.py in 0.18,
vllm_ascend/core/kv_cache_interface.py in 0.23); the parts and their order are
the tuple ``NPUModelRunner._reshape_kv_cache_tensors`` binds (nope, rope,
indexer key, indexer scale; packed, indexer key, indexer scale).
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_kv_strategies.core.specs import ascend_sparse_quant, platform_spec_classes
from vllm_kv_strategies.errors import KVCacheLayoutError, UnsupportedSpecError
from vllm_kv_strategies.core.strategies.base import Field, KVCacheStrategy, ModelDims, PagePart
from vllm_kv_strategies.core.strategies.sparse_mla import indexer_key

#: Nope values per fp32 scale in the QSFA packed row (``SFA_QSFA_TILE_SIZE``).
QSFA_TILE = 128
#: The group of the indexer key and its scale (co-allocated by some releases).
INDEXER_GROUP = "indexer"


def qsfa_fields(spec: Any, dims: ModelDims, c8: torch.dtype, width: int | None = None) -> tuple[Field, ...]:
    """The fields of one packed SFA C8 row of ``width`` x ``c8`` (default:
    ``sparse_head_dim[0]``, 0.23's form): ``nope`` (kv_lora_rank x c8),
    ``rope`` (qk_rope_head_dim x bf16), ``nope_scale`` (kv_lora_rank / 128 x fp32).

    Raises:
        KVCacheLayoutError: the model config lacks the MLA widths, or they do
            not give the spec's packed width.
    """
    nope, rope = dims.kv_lora_rank, dims.qk_rope_head_dim
    width = spec.sparse_head_dim[0] if width is None else width
    fields = ()
    if nope is not None and rope is not None and nope % QSFA_TILE == 0:
        fields = (
            Field("nope", c8, nope),
            Field("rope", torch.bfloat16, rope),
            Field("nope_scale", torch.float32, nope // QSFA_TILE),
        )
    if sum(f.nbytes for f in fields) != width * c8.itemsize:
        raise KVCacheLayoutError(
            f"SFA C8 spec {type(spec).__name__}: packed row of {width} x {c8} is not kv_lora_rank {nope} x {c8} "
            f"+ qk_rope_head_dim {rope} x bf16 + kv_lora_rank / {QSFA_TILE} fp32 scales"
        )
    return fields


class SparseMLAC8Strategy(KVCacheStrategy):
    name = "sparse_mla_c8"

    @classmethod
    def spec_types(cls) -> tuple[type, ...]:
        return platform_spec_classes("AscendMLAAttentionSpec")

    def matches(self, spec: Any) -> bool:
        return bool(getattr(spec, "sparse_head_dim", None)) and ascend_sparse_quant(spec).quantised

    def kind(self, spec: Any) -> str:
        """``sparse_mla_sfa_c8`` (packed latent) or ``sparse_mla_li_c8``."""
        return "sparse_mla_sfa_c8" if ascend_sparse_quant(spec).sfa_c8 else "sparse_mla_li_c8"

    def page_parts(self, spec: Any, dims: ModelDims) -> tuple[PagePart, ...]:
        """In storage order: ``nope`` + ``rope`` (model dtype, (block_size,
        H, width)) or ``packed_kv`` (C8, (block_size, H, a), with
        :func:`qsfa_fields`); then, for a layer with its own indexer,
        ``indexer_k`` (block_size, H, index_head_dim) and with LI C8
        ``indexer_scale`` (block_size, H, 1), r sub-blocks each, never split
        into kernel blocks, in the group ``indexer``.

        Raises:
            UnsupportedSpecError: indexer scales in the page (``scale_dim``:
                DeepSeek V4), or 0.18's form on a model whose dtype size is
                not the scale dtype's (stock asserts in its split).
            KVCacheLayoutError: the widths do not add up to ``head_size``,
                or the form lacks what stock asserts (an SFA rope width, an
                LI C8 layer without indexer).
        """
        q = ascend_sparse_quant(spec)
        nope, rope, index = (tuple(spec.sparse_head_dim) + (0, 0, 0))[:3]
        if getattr(spec, "scale_dim", 0):
            raise UnsupportedSpecError(
                f"{self.name} strategy does not lay out indexer scales in the page: "
                f"{type(spec).__name__} has scale_dim={spec.scale_dim} (DeepSeek V4's compressed cache)"
            )
        if q.scale_sized_model and spec.dtype.itemsize != q.scale_dtype.itemsize:
            raise UnsupportedSpecError(
                f"{type(spec).__name__}(cache_sparse_c8, dtype={spec.dtype}): vllm-ascend 0.18 splits this page "
                f"only for models whose dtype has the size of the scale dtype {q.scale_dtype} (stock asserts)"
            )
        if nope + rope + index != spec.head_size or (q.sfa_c8 and rope) or (q.li_c8 and not q.sfa_c8 and not index):
            raise KVCacheLayoutError(
                f"{self.name} spec {type(spec).__name__}: sparse_head_dim {spec.sparse_head_dim} with "
                f"head_size {spec.head_size} is not (nope, rope, indexer > 0) for LI C8 or (packed, 0, indexer) for SFA C8"
            )
        rows = (spec.block_size, spec.num_kv_heads)
        if q.sfa_c8:
            parts = [PagePart("packed_kv", q.key_dtype, (*rows, nope), fields=qsfa_fields(spec, dims, q.key_dtype))]
        else:
            parts = [PagePart("nope", spec.dtype, (*rows, nope)), PagePart("rope", spec.dtype, (*rows, rope))]
        if index:
            group = INDEXER_GROUP if q.li_c8 else None
            parts.append(indexer_key(spec, index, q.key_dtype if q.li_c8 else spec.dtype, q.replicas, group))
            if q.li_c8:
                scale = (*rows, 1)
                parts.append(PagePart("indexer_scale", q.scale_dtype, scale, kernel_blocks=False, blocks=q.replicas, group=group))
        return tuple(parts)
